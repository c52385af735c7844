//! Starting a function as Lambda starts a runtime — a fresh process pointed at a Runtime API — and
//! timing its cold start: exec → first poll, exec → first answer, and its peak resident memory.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::runtime::{Answer, FakeRuntime, Invocation};

/// A function to start: a program, its arguments and its whole environment.
#[derive(Clone, Debug)]
pub struct Launch {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// The process gets exactly these variables plus `AWS_LAMBDA_RUNTIME_API`; nothing is inherited.
    pub env: BTreeMap<String, String>,
    pub current_dir: Option<PathBuf>,
    /// Where its stdout and stderr go (appended); discarded when `None`.
    pub log: Option<PathBuf>,
    /// How long it may take to answer before it counts as hung.
    pub timeout: Duration,
}

impl Launch {
    /// `program` with no arguments, an empty environment and a 30 s limit.
    pub fn new(program: impl Into<PathBuf>) -> Launch {
        Launch {
            program: program.into(),
            args: Vec::new(),
            env: BTreeMap::new(),
            current_dir: None,
            log: None,
            timeout: Duration::from_secs(30),
        }
    }

    /// Adds or replaces an environment variable.
    pub fn env(mut self, name: &str, value: impl Into<String>) -> Launch {
        self.env.insert(name.to_owned(), value.into());
        self
    }
}

/// One cold start, measured.
#[derive(Clone, Debug)]
pub struct ColdStart {
    /// Exec → the first `GET …/invocation/next`: configuration read, clients built, secrets fetched.
    pub to_first_poll: Duration,
    /// Exec → the first answer posted.
    pub to_answer: Duration,
    /// What the function answered.
    pub answer: Answer,
    /// The process's peak resident set (`ru_maxrss`), in KiB.
    pub peak_rss_kib: u64,
    /// The invocations after the first ([`cold_start_then`]), in order.
    pub warm: Vec<WarmAnswer>,
}

/// A warm invocation: what the function answered, and how long after the event was handed out.
#[derive(Clone, Debug)]
pub struct WarmAnswer {
    pub took: Duration,
    pub answer: Answer,
}

/// Why a cold start could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("starting the fake Runtime API: {0}")]
    Runtime(#[source] io::Error),
    #[error("starting {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("{program} exited ({status}) before answering")]
    Exited { program: String, status: String },
    #[error("{program} gave no answer within {timeout:?} (first poll: {polled})")]
    Hung {
        program: String,
        timeout: Duration,
        polled: bool,
    },
}

/// Starts `launch` against a fresh [`FakeRuntime`] holding `invocation`, waits for its first
/// answer, then kills it and reads its peak memory.
pub async fn cold_start(launch: &Launch, invocation: Invocation) -> Result<ColdStart, LaunchError> {
    cold_start_then(launch, invocation, Vec::new()).await
}

/// [`cold_start`], then the `warm` invocations one after another in the same process (each timed
/// from its hand-out to its answer), before it is killed. `launch.timeout` is for them all.
pub async fn cold_start_then(
    launch: &Launch,
    invocation: Invocation,
    warm: Vec<Invocation>,
) -> Result<ColdStart, LaunchError> {
    let count = 1 + warm.len();
    let mut invocations = vec![invocation];
    invocations.extend(warm);
    let mut runtime = FakeRuntime::start_all(invocations)
        .await
        .map_err(LaunchError::Runtime)?;
    let program = launch.program.display().to_string();
    let mut command = Command::new(&launch.program);
    command
        .args(&launch.args)
        .env_clear()
        .envs(&launch.env)
        .env("AWS_LAMBDA_RUNTIME_API", runtime.api())
        .stdin(Stdio::null());
    if let Some(dir) = &launch.current_dir {
        command.current_dir(dir);
    }
    let spawn_error = |source| LaunchError::Spawn {
        program: program.clone(),
        source,
    };
    match &launch.log {
        Some(path) => {
            let log = File::options()
                .create(true)
                .append(true)
                .open(path)
                .map_err(spawn_error)?;
            command
                .stdout(log.try_clone().map_err(spawn_error)?)
                .stderr(log);
        }
        None => {
            command.stdout(Stdio::null()).stderr(Stdio::null());
        }
    }

    let started = Instant::now();
    let child = command.spawn().map_err(spawn_error)?;
    let (pid, mut exited) = watch(child.id());
    // `reap` below reaps the child; std's handle must not wait on it too.
    drop(child);

    let (progress, gone) = tokio::select! {
        progress = runtime.answered(count) => (Some(progress), false),
        _ = &mut exited => (None, true),
        _ = tokio::time::sleep(launch.timeout) => (None, false),
    };
    if !gone {
        // Not reaped yet (a zombie at worst), so the pid is still this child's.
        kill(pid);
        let _ = exited.await;
    }
    let (status, peak_rss_kib) = reap(pid);
    // An init error ends the process's work: it stands for every answer.
    let progress = progress.or_else(|| {
        let progress = runtime.progress();
        let failed = progress.answer.as_ref()?.kind == crate::runtime::AnswerKind::InitError;
        failed.then_some(progress)
    });
    let Some(progress) = progress else {
        let polled = runtime.progress().first_poll.is_some();
        return Err(if gone {
            LaunchError::Exited { program, status }
        } else {
            LaunchError::Hung {
                program,
                timeout: launch.timeout,
                polled,
            }
        });
    };
    let Some(answer) = progress.answer.clone() else {
        return Err(LaunchError::Exited { program, status });
    };
    let first_poll = progress.first_poll.unwrap_or(answer.at);
    let warm = progress
        .answers
        .iter()
        .zip(&progress.handed_out)
        .skip(1)
        .filter_map(|(answer, handed_out)| {
            let answer = answer.clone()?;
            Some(WarmAnswer {
                took: answer.at.saturating_duration_since(*handed_out),
                answer,
            })
        })
        .collect();
    Ok(ColdStart {
        to_first_poll: first_poll.saturating_duration_since(started),
        to_answer: answer.at.saturating_duration_since(started),
        answer,
        peak_rss_kib,
        warm,
    })
}

/// Watches a child from a thread that learns of its exit without reaping it: the receiver
/// completes when the child has exited, and the child stays a zombie, its pid ours, until [`reap`].
fn watch(pid: u32) -> (libc::pid_t, oneshot::Receiver<()>) {
    // A pid always fits in pid_t; the cast only changes the type.
    let pid = pid as libc::pid_t;
    let (sender, exited) = oneshot::channel();
    std::thread::spawn(move || {
        loop {
            // SAFETY: waitid writes only into `info`, which lives for the call.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            let waited = unsafe {
                libc::waitid(
                    libc::P_PID,
                    pid as libc::id_t,
                    &mut info,
                    libc::WEXITED | libc::WNOWAIT,
                )
            };
            if waited == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                break;
            }
        }
        let _ = sender.send(());
    });
    (pid, exited)
}

fn kill(pid: libc::pid_t) {
    // SAFETY: a plain syscall on our own child, which is not reaped yet.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

/// Reaps an exited child: its exit status, as text, and its peak resident set in KiB.
fn reap(pid: libc::pid_t) -> (String, u64) {
    let mut status = 0;
    // SAFETY: wait4 writes only into `status` and `usage`, which live for the call.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    if reaped != pid {
        return (format!("unknown: {}", io::Error::last_os_error()), 0);
    }
    let status = if libc::WIFEXITED(status) {
        format!("exit code {}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        format!("signal {}", libc::WTERMSIG(status))
    } else {
        format!("status {status}")
    };
    // ru_maxrss is in KiB on Linux and never negative.
    (status, u64::try_from(usage.ru_maxrss).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(script: &str) -> Launch {
        let mut launch = Launch::new("/bin/sh");
        launch.args = vec!["-c".to_owned(), script.to_owned()];
        launch.timeout = Duration::from_secs(5);
        launch
    }

    #[tokio::test]
    async fn a_process_that_polls_and_answers_is_timed_and_killed() {
        let mut launch = shell(
            "api=http://$AWS_LAMBDA_RUNTIME_API/2018-06-01/runtime/invocation; \
             curl -sf $api/next >/dev/null && \
             curl -sf -d '{\"ok\":true}' $api/00000000-0000-4000-8000-000000000001/response && \
             sleep 30",
        );
        launch = launch.env("PATH", std::env::var("PATH").unwrap_or_default());
        let started = Instant::now();
        let cold = cold_start(&launch, Invocation::new("{}"))
            .await
            .expect("an answer");
        assert_eq!(cold.answer.json(), serde_json::json!({"ok": true}));
        assert!(cold.to_first_poll <= cold.to_answer, "{cold:?}");
        assert!(cold.peak_rss_kib > 0, "{cold:?}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "not killed after answering"
        );
    }

    #[tokio::test]
    async fn a_process_that_exits_without_answering_is_reported_with_its_status() {
        let error = cold_start(&shell("exit 3"), Invocation::new("{}"))
            .await
            .expect_err("no answer");
        assert!(
            matches!(&error, LaunchError::Exited { status, .. } if status == "exit code 3"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_process_that_never_answers_is_killed_at_the_timeout() {
        let mut launch = shell("sleep 30");
        launch.timeout = Duration::from_millis(300);
        let started = Instant::now();
        let error = cold_start(&launch, Invocation::new("{}"))
            .await
            .expect_err("no answer");
        assert!(
            matches!(error, LaunchError::Hung { polled: false, .. }),
            "{error}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
