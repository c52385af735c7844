//! The local target: the real `tgq local` process (this same binary), on a data directory of the
//! drill's own, sending to the fake Bot API; killed, frozen and restarted by signals.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde_json::Value;

use crate::tally::{Letter, Reported};

/// How long `tgq local` may take to answer `/readyz` after a start.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A `tgq local` the drill runs.
pub struct LocalTgq {
    exe: PathBuf,
    data_dir: PathBuf,
    log: PathBuf,
    port: u16,
    admin_port: u16,
    envs: Vec<(String, String)>,
    child: Option<Child>,
    http: reqwest::Client,
    starts: u32,
}

/// How a start ended when `tgq local` refused to serve.
#[derive(Debug)]
pub struct Refusal {
    /// Its exit status.
    pub status: ExitStatus,
    /// What it printed on stderr.
    pub stderr: String,
}

impl LocalTgq {
    /// A `tgq local` on `data_dir` listening on a free loopback port, with `envs` on top of a
    /// clean environment; its output goes to `log`. Not started yet.
    pub fn new(exe: &Path, data_dir: &Path, log: &Path, envs: Vec<(String, String)>) -> Self {
        let free = |fallback| {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.port())
                .unwrap_or(fallback)
        };
        LocalTgq {
            exe: exe.to_owned(),
            data_dir: data_dir.to_owned(),
            log: log.to_owned(),
            port: free(18_080),
            admin_port: free(18_081),
            envs,
            child: None,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .expect("a reqwest client"),
            starts: 0,
        }
    }

    /// `http://127.0.0.1:port{path}` on the webhook listener; the same port across restarts.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// `http://127.0.0.1:admin_port{path}` on the admin listener.
    fn admin_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.admin_port)
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        self.starts += 1;
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        let backups = self.data_dir.with_extension("backups");
        std::fs::create_dir_all(&backups)
            .with_context(|| format!("creating {}", backups.display()))?;
        let mut command = Command::new(&self.exe);
        for name in tgq_core::config::SETTINGS {
            command.env_remove(name);
        }
        command
            .arg("local")
            .arg("--addr")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--admin-addr")
            .arg(format!("127.0.0.1:{}", self.admin_port))
            // Where `tgq backup` may have the running instance write (a scenario backs up).
            .arg("--backup-dir")
            .arg(&backups)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        self.child = Some(command.spawn().context("starting tgq local")?);
        Ok(())
    }

    /// How it exited, once it has: the process is then no longer its child.
    fn exited(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok().flatten()?;
        self.child = None;
        Some(status)
    }

    /// Starts it and waits until `/readyz` answers 200.
    pub async fn start(&mut self) -> anyhow::Result<()> {
        self.spawn()?;
        let started = Instant::now();
        loop {
            if let Some(status) = self.exited() {
                bail!(
                    "tgq local exited with {status} before it was ready; its log: {}",
                    self.log.display()
                );
            }
            if let Ok(answer) = self.http.get(self.url("/readyz")).send().await {
                if answer.status() == 200 {
                    return Ok(());
                }
            }
            if started.elapsed() > READY_TIMEOUT {
                bail!(
                    "tgq local was not ready within {READY_TIMEOUT:?}; see {}",
                    self.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Starts it expecting a refusal: returns how it exited, or an error if it served.
    pub async fn start_expecting_refusal(&mut self) -> anyhow::Result<Result<Refusal, String>> {
        let before = std::fs::metadata(&self.log).map_or(0, |m| m.len());
        self.spawn()?;
        let started = Instant::now();
        loop {
            if let Some(status) = self.exited() {
                let text = std::fs::read(&self.log).unwrap_or_default();
                let stderr = String::from_utf8_lossy(&text[(before as usize).min(text.len())..])
                    .into_owned();
                return Ok(Ok(Refusal { status, stderr }));
            }
            if self.http.get(self.url("/healthz")).send().await.is_ok() {
                return Ok(Err("it answered /healthz: it serves".into()));
            }
            if started.elapsed() > READY_TIMEOUT {
                return Ok(Err(format!(
                    "it neither served nor exited within {READY_TIMEOUT:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL: no cleanup of any kind.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`): the whole process freezes as a suspended laptop does.
    pub fn freeze(&self, frozen: bool) -> anyhow::Result<()> {
        let pid = self.pid().context("tgq local is not running")?;
        signal(pid, if frozen { libc::SIGSTOP } else { libc::SIGCONT })
    }

    /// SIGTERM and wait for a clean exit.
    pub async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = signal(child.id(), libc::SIGCONT);
        let _ = signal(child.id(), libc::SIGTERM);
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// `GET /admin/status`'s result.
    pub async fn status(&self) -> anyhow::Result<Value> {
        self.admin("/admin/status").await
    }

    /// `GET /admin/broadcasts/status?id=…`: what `tgq broadcast status ID --json` prints.
    pub async fn broadcast(&self, id: u64) -> anyhow::Result<Value> {
        self.admin(&format!("/admin/broadcasts/status?id={id}"))
            .await
    }

    /// `GET /readyz`: its status and answer.
    pub async fn readyz(&self) -> anyhow::Result<(u16, String)> {
        let answer = self.http.get(self.url("/readyz")).send().await?;
        let status = answer.status().as_u16();
        Ok((status, answer.text().await.unwrap_or_default()))
    }

    /// Every dead letter, each with its body (the list leaves bodies out; `show` has them).
    pub async fn dead_letters(&self) -> anyhow::Result<Vec<Letter>> {
        let listed = self.admin("/admin/dlq?limit=1000000").await?;
        let listed = listed.as_array().context("/admin/dlq is not a list")?;
        let mut letters = Vec::with_capacity(listed.len());
        for l in listed {
            let id = l["id"].as_str().context("a listed letter without an id")?;
            let shown = self.admin(&format!("/admin/dlq/letter?id={id}")).await?;
            letters.push(Letter {
                bot: l["bot_id"].as_str().map(str::to_owned),
                update_id: l["update_id"].as_i64(),
                reason: l["reason"].as_str().unwrap_or_default().to_owned(),
                attempts: l["attempts"].as_u64().unwrap_or(0) as u32,
                body: shown["body"].as_str().unwrap_or_default().to_owned(),
            });
        }
        Ok(letters)
    }

    /// Whether nothing is pending or in flight.
    pub async fn drained(&self) -> anyhow::Result<bool> {
        let status = self.status().await?;
        let stats = &status["stats"];
        Ok(stats["pending"] == 0 && stats["in_flight"] == 0)
    }

    /// What tgq counts itself: fenced writes and uncertain sends, when its status has them.
    pub async fn reported(&self) -> Reported {
        let resent = Reported::resent_in_log(&self.log_text());
        let Ok(status) = self.status().await else {
            return Reported {
                resent,
                ..Reported::default()
            };
        };
        let find = |names: &[&str]| {
            names.iter().find_map(|name| {
                status["counters"][name]
                    .as_u64()
                    .or_else(|| status[name].as_u64())
            })
        };
        Reported {
            fenced: find(&["fenced", "fenced_writes"]),
            uncertain: find(&["uncertain_sends", "uncertain"]),
            resent,
            resent_count: find(&["resent_after_unknown_outcome"]),
        }
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn admin(&self, route: &str) -> anyhow::Result<Value> {
        let answer = self.http.get(self.admin_url(route)).send().await?;
        let status = answer.status();
        let body: Value = answer.json().await?;
        if !status.is_success() {
            bail!("{route} answered {status}: {}", body["result"]);
        }
        Ok(body["result"].clone())
    }
}

impl Drop for LocalTgq {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            let _ = signal(child.id(), libc::SIGCONT);
        }
        self.kill();
    }
}

/// Sends `sig` to process `pid`.
pub fn signal(pid: u32, sig: libc::c_int) -> anyhow::Result<()> {
    let pid = libc::pid_t::try_from(pid).context("pid out of range")?;
    // SAFETY: kill(2) only sends a signal to a process this drill started.
    let sent = unsafe { libc::kill(pid, sig) };
    if sent != 0 {
        bail!(
            "kill({pid}, {sig}) failed: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}
