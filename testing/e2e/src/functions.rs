//! The real function binaries behind `cargo lambda watch`.
//!
//! `cargo lambda watch --only-lambda-apis` plays the Lambda service: it serves function URLs at
//! `/lambda-url/<binary>/` (turning each HTTP request into the Function URL event `lambda_http`
//! reads), invocations at `/2015-03-31/functions/<binary>/invocations`, and the Runtime API the
//! functions poll. The harness starts the binaries itself, as Lambda starts a runtime, pointing them
//! at that Runtime API. It builds them first with
//! [`BUILD_SELECTION`], which reuses what `cargo test --workspace` built; `cargo lambda watch`'s own
//! `cargo run --bin <name>` selects one package and so resolves dependency features differently,
//! rebuilding the AWS SDK stack for each function.
//!
//! Every process runs in one process group that [`Functions`] kills when dropped. A test may run
//! more than one instance of a function (Lambda's concurrency: `cargo lambda watch` hands each
//! invocation to whichever instance asks for the next one), and may kill a function's instances in
//! the middle of an invocation and start fresh ones, as Lambda replaces a sandbox whose runtime died.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use tgq_core::defaults;
use tgq_core::ingest::SECRET_HEADER;

use crate::cargo;

/// The webhook binary.
pub const WEBHOOK: &str = "webhook";
/// The worker binary.
pub const WORKER: &str = "worker";

/// How long an invocation may run before Lambda would stop it: the worker's timeout in
/// `template.yaml`.
pub const INVOCATION_TIMEOUT: Duration = defaults::WORKER_TIMEOUT;

/// How long building and starting may take on a cold 2-core CI machine.
const READY_TIMEOUT: Duration = Duration::from_secs(600);

/// The `cargo build` arguments that build both functions as units `cargo test --workspace`
/// (scripts/test) has already built, so the build is a no-op there. `--workspace` with a test target
/// resolves features over every member and its dev-dependencies, as a test build does. `--test
/// core` (tgq-core's) also puts criterion → clap in the build, so `strsim` is built once as a
/// normal dependency shared with darling, as in a test build; without it, strsim is a build-only
/// unit without debuginfo, and darling, serde_with, teloxide-core and every tgq crate after them
/// differ. `e2e` is this package's test binary. Checked with `--unit-graph`
/// (`RUSTC_BOOTSTRAP=1 cargo build -Z unstable-options --unit-graph …`): every unit is one of
/// `cargo test --workspace --no-run`'s.
pub const BUILD_SELECTION: [&str; 9] = [
    "--workspace",
    "--bin",
    WEBHOOK,
    "--bin",
    WORKER,
    "--test",
    "e2e",
    "--test",
    "core",
];

/// The functions, running; everything stops when this is dropped.
pub struct Functions {
    group: Mutex<ProcessGroup>,
    invoke_base: String,
    http: reqwest::Client,
    logs: PathBuf,
    /// The functions' own variables, for instances started later.
    vars: BTreeMap<String, String>,
    /// Instances started so far per function, to name their logs.
    started: Mutex<BTreeMap<String, u32>>,
}

impl Functions {
    /// Builds the binaries, starts `cargo lambda watch` and the functions `names` with `vars` on top
    /// of this process's environment (which carries `AWS_ENDPOINT_URL` and the credentials), and
    /// waits until each answers. Panics with the reason and the logs when that fails.
    pub async fn start(names: &[&str], vars: &BTreeMap<String, String>) -> Functions {
        match Self::try_start(names, vars).await {
            Ok(functions) => functions,
            Err(err) => panic!("the functions did not start: {err:#}"),
        }
    }

    async fn try_start(names: &[&str], vars: &BTreeMap<String, String>) -> anyhow::Result<Self> {
        let started = Instant::now();
        require_cargo_lambda()?;
        build(started).await?;

        let logs = log_dir()?;
        let port = free_port()?;
        let mut watch = cargo::command(&cargo::workspace_root());
        watch
            .args(["lambda", "watch", "--only-lambda-apis", "--ignore-changes"])
            .args(["--invoke-address", "127.0.0.1", "--invoke-port"])
            .arg(port.to_string());
        let mut group = ProcessGroup::lead(&mut watch, &logs.join("cargo-lambda-watch.log"))
            .context("spawning cargo lambda watch")?;
        wait_for_port(port, &mut group, started).await?;

        let functions = Functions {
            group: Mutex::new(group),
            invoke_base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::builder()
                .timeout(INVOCATION_TIMEOUT + Duration::from_secs(30))
                .build()?,
            logs,
            vars: vars.clone(),
            started: Mutex::new(BTreeMap::new()),
        };
        for name in names {
            functions.spawn_instance(name)?;
        }
        for name in names {
            functions.wait_until_answering(name, started).await?;
        }
        eprintln!(
            "functions {names:?} answering after {:.1?} (logs in {})",
            started.elapsed(),
            functions.logs.display()
        );
        Ok(functions)
    }

    /// The function URL of `name`.
    pub fn function_url(&self, name: &str) -> String {
        format!("{}/lambda-url/{name}/", self.invoke_base)
    }

    /// Invokes `name` synchronously with `event`, as an event source mapping does, and returns the
    /// function's answer. A function error (`errorType` in the answer) is an error here.
    pub async fn invoke(
        &self,
        name: &str,
        event: &serde_json::Value,
    ) -> anyhow::Result<serde_json::Value> {
        let url = format!(
            "{}/2015-03-31/functions/{name}/invocations",
            self.invoke_base
        );
        let answer = self.http.post(&url).json(event).send().await?;
        let status = answer.status();
        let body = answer.text().await?;
        let value: serde_json::Value = serde_json::from_str(&body)
            .with_context(|| format!("{name} answered {status} with {body:?}"))?;
        if !status.is_success() || value.get("errorType").is_some() {
            bail!("{name} failed ({status}): {body}");
        }
        Ok(value)
    }

    /// Invokes the worker with an SQS event and reads its partial batch response.
    pub async fn invoke_worker(&self, event: &SqsEvent) -> anyhow::Result<SqsBatchResponse> {
        let answer = self.invoke(WORKER, &serde_json::to_value(event)?).await?;
        serde_json::from_value(answer.clone())
            .with_context(|| format!("the worker's answer is not an SqsBatchResponse: {answer}"))
    }

    /// Where the watch and function logs are written.
    pub fn logs(&self) -> &Path {
        &self.logs
    }

    /// Starts one more instance of `name` and waits until the function answers: invocations then
    /// go to whichever instance asks first, as Lambda runs them concurrently.
    pub async fn start_instance(&self, name: &str) -> anyhow::Result<()> {
        self.spawn_instance(name)?;
        self.wait_until_answering(name, Instant::now()).await
    }

    /// SIGKILLs every instance of `name` — an invocation in progress dies with its runtime — and
    /// reaps them; returns how many there were.
    pub fn kill_instances(&self, name: &str) -> anyhow::Result<usize> {
        self.group().kill_function(name)
    }

    /// Spawns an instance of `name` pointed at the Runtime API, its output in its own log.
    fn spawn_instance(&self, name: &str) -> anyhow::Result<()> {
        let instance = {
            let mut started = self.started.lock().unwrap_or_else(PoisonError::into_inner);
            let count = started.entry(name.to_owned()).or_default();
            *count += 1;
            *count
        };
        let log = match instance {
            1 => self.logs.join(format!("{name}.log")),
            n => self.logs.join(format!("{name}-{n}.log")),
        };
        let mut function = Command::new(binary_dir()?.join(name));
        function
            .envs(&self.vars)
            .env(
                "AWS_LAMBDA_RUNTIME_API",
                format!("{}/.rt/{name}", self.invoke_base),
            )
            .env("AWS_LAMBDA_FUNCTION_NAME", name)
            .env("AWS_LAMBDA_FUNCTION_VERSION", "1")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024")
            // Unset, as `cargo lambda watch` or a template without it leaves it: the functions' own
            // default (info) applies, and the pipeline test checks it does.
            .env_remove("RUST_LOG")
            .current_dir(cargo::workspace_root());
        self.group()
            .join(&mut function, &log, Some(name))
            .with_context(|| format!("spawning {name}"))
    }

    fn group(&self) -> MutexGuard<'_, ProcessGroup> {
        self.group.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Probes a function with a request that changes nothing: the webhook with a wrong secret
    /// (answered 401 before anything is written), the worker with an empty batch.
    async fn wait_until_answering(&self, name: &str, started: Instant) -> anyhow::Result<()> {
        let mut last_report = Instant::now();
        loop {
            // A function that stopped (a configuration error, say) will never answer: say why now.
            self.group().check_running()?;
            let probe = match name {
                WEBHOOK => self
                    .http
                    .post(self.function_url(WEBHOOK))
                    .header(SECRET_HEADER, "readiness-probe")
                    .body("{}")
                    .timeout(Duration::from_secs(5))
                    .send()
                    .await
                    .map(|answer| answer.status() == reqwest::StatusCode::UNAUTHORIZED)
                    .unwrap_or(false),
                _ => self
                    .invoke(name, &serde_json::json!({ "Records": [] }))
                    .await
                    .is_ok(),
            };
            if probe {
                return Ok(());
            }
            if started.elapsed() > READY_TIMEOUT {
                bail!(
                    "{name} did not answer within {READY_TIMEOUT:?}; see {}",
                    self.logs.display()
                );
            }
            if last_report.elapsed() > Duration::from_secs(10) {
                eprintln!(
                    "still waiting for {name} to answer ({:.0?})",
                    started.elapsed()
                );
                last_report = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Processes that live and die together: the first one leads a new process group, the others join
/// it, and dropping the guard kills the whole group (grandchildren included) and reaps the children.
struct ProcessGroup {
    pgid: libc::pid_t,
    children: Vec<Member>,
}

/// One process of the group.
struct Member {
    /// Its command line, for messages.
    what: String,
    /// The function it is an instance of, if it is one.
    function: Option<String>,
    child: Child,
    log: PathBuf,
}

impl ProcessGroup {
    fn lead(command: &mut Command, log: &Path) -> anyhow::Result<ProcessGroup> {
        command.process_group(0);
        let child = spawn_logged(command, log)?;
        let pgid = libc::pid_t::try_from(child.id()).context("process id out of range")?;
        Ok(ProcessGroup {
            pgid,
            children: vec![Member {
                what: describe(command),
                function: None,
                child,
                log: log.to_owned(),
            }],
        })
    }

    fn join(
        &mut self,
        command: &mut Command,
        log: &Path,
        function: Option<&str>,
    ) -> anyhow::Result<()> {
        command.process_group(self.pgid);
        let child = spawn_logged(command, log)?;
        self.children.push(Member {
            what: describe(command),
            function: function.map(str::to_owned),
            child,
            log: log.to_owned(),
        });
        Ok(())
    }

    /// Kills and reaps every instance of `function`, and forgets them.
    fn kill_function(&mut self, function: &str) -> anyhow::Result<usize> {
        let (doomed, kept) = std::mem::take(&mut self.children)
            .into_iter()
            .partition(|member| member.function.as_deref() == Some(function));
        self.children = kept;
        let mut doomed: Vec<Member> = doomed;
        for member in &mut doomed {
            member.child.kill().context("SIGKILL")?;
            member.child.wait().context("reaping a killed instance")?;
        }
        Ok(doomed.len())
    }

    fn check_running(&mut self) -> anyhow::Result<()> {
        for member in &mut self.children {
            if let Some(status) = member.child.try_wait()? {
                bail!(
                    "{} exited ({status}); its log:\n{}",
                    member.what,
                    tail(&member.log)
                );
            }
        }
        Ok(())
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        // SAFETY: killpg only sends a signal; the group is the one this guard created and leads.
        unsafe {
            libc::killpg(self.pgid, libc::SIGKILL);
        }
        for member in &mut self.children {
            let _ = member.child.wait();
        }
    }
}

fn spawn_logged(command: &mut Command, log: &Path) -> anyhow::Result<Child> {
    let file = File::create(log).with_context(|| format!("creating {}", log.display()))?;
    command
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file);
    command
        .spawn()
        .with_context(|| format!("spawning {}", describe(command)))
}

fn describe(command: &Command) -> String {
    let mut text = command.get_program().to_string_lossy().into_owned();
    for arg in command.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}

/// The last lines of a log, for a failure message.
pub fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Panics unless `cargo lambda` runs: the suite installs it (scripts/test puts .venv/bin on PATH).
fn require_cargo_lambda() -> anyhow::Result<()> {
    let found = cargo::command(&cargo::workspace_root())
        .args(["lambda", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !found {
        panic!(
            "`cargo lambda` is not on PATH: run scripts/test (it installs cargo-lambda from \
             requirements-test.txt into .venv and puts .venv/bin on PATH), or \
             `export PATH=$PWD/.venv/bin:$PATH` after installing it"
        );
    }
    Ok(())
}

/// Builds the two binaries into the directory this test runs from (`target/debug` unless the tests
/// were built with another profile); a no-op when `cargo test --workspace` has already built them.
async fn build(started: Instant) -> anyhow::Result<()> {
    eprintln!("building the function binaries: cargo build {BUILD_SELECTION:?}");
    let mut command = cargo::command(&cargo::workspace_root());
    command
        .arg("build")
        .args(BUILD_SELECTION)
        .stdin(Stdio::null());
    let profile_dir = binary_dir()?;
    match profile_dir.file_name().and_then(|name| name.to_str()) {
        Some("debug") => {}
        Some(profile) => {
            command.args(["--profile", profile]);
        }
        None => bail!("no profile directory in {}", profile_dir.display()),
    }
    let mut command = tokio::process::Command::from(command);
    command.kill_on_drop(true);
    let status = tokio::time::timeout(READY_TIMEOUT, command.status())
        .await
        .context("building the function binaries timed out")??;
    if !status.success() {
        bail!("cargo build of the function binaries failed: {status}");
    }
    eprintln!("function binaries built in {:.1?}", started.elapsed());
    Ok(())
}

async fn wait_for_port(
    port: u16,
    group: &mut ProcessGroup,
    started: Instant,
) -> anyhow::Result<()> {
    while tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port))
        .await
        .is_err()
    {
        group.check_running()?;
        if started.elapsed() > READY_TIMEOUT {
            bail!("cargo lambda watch did not listen on port {port}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// `target/debug`: where this test binary's profile puts the binaries (the test runs from `deps/`).
fn binary_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_owned)
        .context("the test binary is not inside target/<profile>/deps")
}

/// `target/test-logs/e2e/<pid>-<n>`, next to the suite's other logs.
fn log_dir() -> anyhow::Result<PathBuf> {
    static RUN: AtomicU32 = AtomicU32::new(0);
    let target = binary_dir()?
        .parent()
        .map(Path::to_owned)
        .context("no target directory")?;
    let dir = target.join("test-logs").join("e2e").join(format!(
        "{}-{}",
        std::process::id(),
        RUN.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}
