//! The AWS emulator the bench runs against: the one `AWS_ENDPOINT_URL` names, or a moto server of
//! its own, started from the workspace's `.venv` (as `scripts/test` installs it) on a free loopback
//! port and stopped when dropped.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

/// How long a fresh moto server may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The emulator in use; a moto of the bench's own is killed on drop.
pub struct Emulator {
    pub endpoint: String,
    child: Option<Child>,
}

impl Emulator {
    /// `AWS_ENDPOINT_URL` when set (it must answer), else a moto server started from
    /// `<workspace>/scripts/moto_server.py` on the `.venv`'s Python. Either way the SDK's environment (endpoint, region,
    /// test credentials) is set for the rest of the process, as the Lambda functions read it.
    pub async fn start(workspace: &Path) -> anyhow::Result<Emulator> {
        let emulator = match std::env::var("AWS_ENDPOINT_URL") {
            Ok(endpoint) if !endpoint.is_empty() => Emulator {
                endpoint,
                child: None,
            },
            _ => Self::spawn(workspace)?,
        };
        let address = emulator
            .endpoint
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let started = Instant::now();
        let mut emulator = emulator;
        loop {
            if tokio::net::TcpStream::connect(&address).await.is_ok() {
                break;
            }
            if let Some(child) = &mut emulator.child {
                if let Some(status) = child.try_wait()? {
                    bail!("moto server exited before it listened: {status}");
                }
            }
            if started.elapsed() > START_TIMEOUT {
                bail!(
                    "nothing answers at {} after {START_TIMEOUT:?}: the bench needs an AWS emulator",
                    emulator.endpoint
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        std::env::set_var("AWS_ENDPOINT_URL", &emulator.endpoint);
        for (name, default) in [
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "testing"),
            ("AWS_SECRET_ACCESS_KEY", "testing"),
        ] {
            if std::env::var_os(name).is_none() {
                std::env::set_var(name, default);
            }
        }
        Ok(emulator)
    }

    fn spawn(workspace: &Path) -> anyhow::Result<Emulator> {
        let program = workspace.join(".venv/bin/python");
        let script = workspace.join("scripts/moto_server.py");
        if !program.is_file() || !script.is_file() {
            bail!(
                "AWS_ENDPOINT_URL is not set and {} or {} is missing: run scripts/test once (it \
                 installs moto into .venv) or point AWS_ENDPOINT_URL at a running moto server",
                program.display(),
                script.display()
            );
        }
        let port = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?
            .local_addr()?
            .port();
        let child = Command::new(&program)
            .arg(&script)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        eprintln!(
            "moto server started on 127.0.0.1:{port} (pid {})",
            child.id()
        );
        Ok(Emulator {
            endpoint: format!("http://127.0.0.1:{port}"),
            child: Some(child),
        })
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
