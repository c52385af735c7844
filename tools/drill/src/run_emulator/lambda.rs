//! The Lambda service for the drill: `cargo lambda watch --only-lambda-apis` (function URLs,
//! invocations, the Runtime API) and the function binaries as runtime processes the drill starts,
//! kills, freezes and replaces one by one — as Lambda does when an invocation runs past its
//! timeout or a container dies.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use tgq_e2e::functions::BUILD_SELECTION;

use crate::local::signal;

/// The repository the drill was built from: where `cargo build` and `cargo lambda` run.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `cargo lambda watch` and the function processes.
pub struct Lambda {
    watch: Child,
    port: u16,
    bin_dir: PathBuf,
    /// The one binary run as both functions (`TGQ_FUNCTION` names each), if not the two in
    /// `bin_dir`.
    one_binary: Option<PathBuf>,
    logs: PathBuf,
    functions: BTreeMap<String, Vec<Child>>,
    http: reqwest::Client,
}

/// Builds the workspace's function binaries with `profile`; its output goes to `logs`.
fn build_functions(profile: &str, logs: &Path) -> anyhow::Result<()> {
    let mut build = Command::new("cargo");
    build
        .current_dir(workspace_root())
        .arg("build")
        .args(BUILD_SELECTION);
    if profile != "debug" {
        build.args(["--profile", profile]);
    }
    let built = build
        .stdout(Stdio::null())
        .stderr(File::create(logs.join("build.log"))?)
        .status()
        .context("building the function binaries")?;
    if !built.success() {
        bail!(
            "building the function binaries failed; see {}",
            logs.join("build.log").display()
        );
    }
    Ok(())
}

impl Lambda {
    /// Builds the function binaries next to `exe` (the `tgq` binary's profile directory), unless
    /// `functions` names the one binary to run as both, and starts `cargo lambda watch`; logs go
    /// to `logs`.
    pub async fn start(
        exe: &Path,
        functions: Option<&Path>,
        logs: &Path,
    ) -> anyhow::Result<Lambda> {
        let found = Command::new("cargo")
            .args(["lambda", "--version"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            bail!(
                "`cargo lambda` is not on PATH: the emulator target needs cargo-lambda (scripts/test \
                 installs it into .venv: `export PATH=$PWD/.venv/bin:$PATH`)"
            );
        }
        let bin_dir = exe
            .parent()
            .context("the tgq binary has no directory")?
            .to_owned();
        let profile = bin_dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("debug")
            .to_owned();
        match functions {
            Some(binary) if !binary.is_file() => {
                bail!("--functions {} is not a file", binary.display())
            }
            Some(_) => {}
            None => build_functions(&profile, logs)?,
        }
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port();
        let log = File::create(logs.join("cargo-lambda-watch.log"))?;
        let watch = Command::new("cargo")
            .current_dir(workspace_root())
            .args(["lambda", "watch", "--only-lambda-apis", "--ignore-changes"])
            .args([
                "--invoke-address",
                "127.0.0.1",
                "--invoke-port",
                &port.to_string(),
            ])
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting cargo lambda watch")?;
        let started = Instant::now();
        while std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
            if started.elapsed() > Duration::from_secs(120) {
                bail!("cargo lambda watch did not listen within 120 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(Lambda {
            watch,
            port,
            bin_dir,
            one_binary: functions.map(Path::to_path_buf),
            logs: logs.to_owned(),
            functions: BTreeMap::new(),
            http: reqwest::Client::new(),
        })
    }

    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Where synchronous invocations of `name` go.
    pub fn invoke_url(&self, name: &str) -> String {
        format!("{}/2015-03-31/functions/{name}/invocations", self.base())
    }

    /// The function URL of `name`.
    pub fn function_url(&self, name: &str) -> String {
        format!("{}/lambda-url/{name}/", self.base())
    }

    /// Starts one more runtime process of `name` with `vars`, logging to `<log>.log`.
    pub fn spawn(
        &mut self,
        name: &str,
        vars: &BTreeMap<String, String>,
        log: &str,
    ) -> anyhow::Result<u32> {
        let file = File::options()
            .create(true)
            .append(true)
            .open(self.logs.join(format!("{log}.log")))?;
        let mut command = match &self.one_binary {
            Some(binary) => {
                let mut command = Command::new(binary);
                command.env(tgq_core::config::FUNCTION, name);
                command
            }
            None => Command::new(self.bin_dir.join(name)),
        };
        let child = command
            .envs(vars)
            .env(
                "AWS_LAMBDA_RUNTIME_API",
                format!("{}/.rt/{name}", self.base()),
            )
            .env("AWS_LAMBDA_FUNCTION_NAME", name)
            .env("AWS_LAMBDA_FUNCTION_VERSION", "1")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024")
            .env("RUST_LOG", "info")
            .current_dir(workspace_root())
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        let pid = child.id();
        self.functions
            .entry(name.to_owned())
            .or_default()
            .push(child);
        Ok(pid)
    }

    /// Every runtime process of `name`.
    pub fn all(&self, name: &str) -> Vec<u32> {
        self.functions
            .get(name)
            .map(|children| children.iter().map(Child::id).collect())
            .unwrap_or_default()
    }

    /// The newest runtime process of `name`.
    pub fn newest(&self, name: &str) -> Option<u32> {
        self.functions.get(name)?.last().map(Child::id)
    }

    /// Kills every runtime process of `name` (SIGKILL, as Lambda ends a timed-out container).
    pub fn kill_all(&mut self, name: &str) {
        for mut child in self.functions.remove(name).unwrap_or_default() {
            let _ = signal(child.id(), libc::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills one runtime process.
    pub fn kill(&mut self, name: &str, pid: u32) {
        if let Some(children) = self.functions.get_mut(name) {
            if let Some(at) = children.iter().position(|c| c.id() == pid) {
                let mut child = children.remove(at);
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    /// Invokes `name` synchronously with `event`, giving up after `timeout` (as Lambda stops an
    /// invocation at its timeout). An error when it failed, timed out or answered a function error.
    pub async fn invoke(
        &self,
        name: &str,
        event: &serde_json::Value,
        timeout: Duration,
    ) -> anyhow::Result<serde_json::Value> {
        let url = self.invoke_url(name);
        let answer = self
            .http
            .post(&url)
            .json(event)
            .timeout(timeout)
            .send()
            .await?;
        let status = answer.status();
        let body = answer.text().await?;
        let value: serde_json::Value = serde_json::from_str(&body)
            .with_context(|| format!("{name} answered {status}: {body}"))?;
        if !status.is_success() || value.get("errorType").is_some() {
            bail!("{name} failed ({status}): {body}");
        }
        Ok(value)
    }

    /// Waits until `name` answers a probe that changes nothing.
    pub async fn wait_answering(&self, name: &str) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            let ok = match name {
                "webhook" => self
                    .http
                    .post(self.function_url(name))
                    .header(tgq_core::ingest::SECRET_HEADER, "readiness-probe")
                    .body("{}")
                    .timeout(Duration::from_secs(5))
                    .send()
                    .await
                    .is_ok_and(|a| a.status() == 401),
                _ => self
                    .invoke(
                        name,
                        &serde_json::json!({ "Records": [] }),
                        Duration::from_secs(10),
                    )
                    .await
                    .is_ok(),
            };
            if ok {
                return Ok(());
            }
            if started.elapsed() > Duration::from_secs(60) {
                bail!(
                    "{name} did not answer within 60 s; logs in {}",
                    self.logs.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The text of a function log.
    pub fn log_text(&self, log: &str) -> String {
        std::fs::read_to_string(self.logs.join(format!("{log}.log"))).unwrap_or_default()
    }
}

impl Drop for Lambda {
    fn drop(&mut self) {
        let names: Vec<String> = self.functions.keys().cloned().collect();
        for name in names {
            self.kill_all(&name);
        }
        // SAFETY: killpg only sends a signal to the group cargo lambda watch leads.
        unsafe {
            libc::killpg(self.watch.id() as libc::pid_t, libc::SIGKILL);
        }
        let _ = self.watch.wait();
    }
}
