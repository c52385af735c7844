//! Local mode on a disk that stops taking writes (docs/design/local.md): the webhook answers
//! 503 so Telegram keeps the update, `/readyz` says why, nothing acknowledged is lost, and once the
//! disk takes writes again the store recovers by itself — no restart.
//!
//! The full disk is the process's file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored), lowered and
//! raised from outside with prlimit(2): writes past it fail with EFBIG as they would with ENOSPC.

use crate::common;

use std::os::unix::process::CommandExt as _;
use std::time::{Duration, Instant};

use common::{free_port, message_update, Local};
use serde_json::Value;

const SECRET: &str = "disk-secret";

fn set_file_size_limit(pid: u32, bytes: libc::rlim_t) {
    let limit = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: prlimit reads `limit` and writes nothing through the null old-limit pointer.
    let done = unsafe {
        libc::prlimit(
            libc::pid_t::try_from(pid).expect("a pid"),
            libc::RLIMIT_FSIZE,
            &limit,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(done, 0, "prlimit: {}", std::io::Error::last_os_error());
}

async fn post(client: &reqwest::Client, local: &Local, body: &Value) -> u16 {
    client
        .post(local.url("/webhook"))
        .header("x-telegram-bot-api-secret-token", SECRET)
        .json(body)
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

async fn readyz(client: &reqwest::Client, local: &Local) -> (u16, String) {
    let response = client.get(local.url("/readyz")).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_commit_answers_503_says_so_and_recovers_when_the_disk_does() {
    let dir = tempfile::tempdir().unwrap();
    let envs = [
        ("TGQ_WEBHOOK_SECRET", SECRET),
        ("TGQ_HANDLER", "echo"),
        ("TGQ_MAX_BODY_BYTES", "1048576"),
    ];
    let mut local = Local::start_with(free_port(), dir.path(), &envs, &[], |command| {
        // SAFETY: only async-signal-safe work between fork and exec: one signal() call. Ignoring
        // SIGXFSZ makes a write past the limit fail with EFBIG instead of ending the process.
        unsafe {
            command.pre_exec(|| {
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                Ok(())
            });
        }
    });
    local.wait_ready().await;
    let client = reqwest::Client::new();
    let file = dir.path().join(tgq_embedded::FILE_NAME);

    let mut acknowledged = Vec::new();
    for id in 1..=5 {
        let update = message_update(id, 100 + id, &format!("before {id}"));
        assert_eq!(post(&client, &local, &update).await, 200);
        acknowledged.push(update);
    }
    assert!(std::fs::metadata(&file).unwrap().len() > 0);

    // The disk fills: no write reaches the file any more.
    set_file_size_limit(local.pid(), 1);
    let mut refused = Vec::new();
    for id in 6..=10 {
        let update = message_update(id, 100 + id, &format!("while full {id}"));
        match post(&client, &local, &update).await {
            200 => acknowledged.push(update),
            503 => refused.push(update),
            other => panic!("update {id} answered {other}"),
        }
    }
    assert!(
        !refused.is_empty(),
        "the store never failed a commit: {} updates fit",
        acknowledged.len() - 5
    );
    let (status, text) = readyz(&client, &local).await;
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("cannot commit"), "{text}");
    let (_, stderr) = local.output();
    assert!(
        stderr.contains("store batch failed"),
        "the log says why: {stderr}"
    );
    // The log says it once per interval, however often the loops try.
    let failures = |text: &str| text.matches("store batch failed").count();
    let before = failures(&local.output().1);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let during = failures(&local.output().1) - before;
    assert!(during <= 1, "{during} lines in 3 s about the full disk");
    // The operator can still look: `tgq status` answers from the running instance, and says the
    // queue holds what was acknowledged.
    let data_dir = dir.path().to_str().unwrap();
    let (code, stdout, stderr) = common::run(&[], &["status", "--json", "--data-dir", data_dir]);
    assert!(
        code.success(),
        "tgq status while the disk is full: {stderr}"
    );
    let status: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        status["counters"]["received"].as_u64(),
        Some(acknowledged.len() as u64),
        "{status}"
    );
    let (code, stdout, stderr) = common::run(&[], &["status", "--data-dir", data_dir]);
    assert!(code.success(), "{stderr}");
    assert!(stdout.contains("queue "), "{stdout}");

    // Space again: the store recovers by itself, and Telegram's retry goes through.
    set_file_size_limit(local.pid(), libc::RLIM_INFINITY);
    let started = Instant::now();
    loop {
        let (status, text) = readyz(&client, &local).await;
        if status == 200 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "not ready again: {text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for update in &refused {
        assert_eq!(post(&client, &local, update).await, 200);
    }
    // Messages whose run failed on the full disk could not even be shown again: they come back
    // when their visibility timeout (70 s) ends.
    let all = acknowledged.len() + refused.len();
    let status = local
        .wait_settled(Duration::from_secs(150), |s| {
            s["counters"]["processed"].as_u64() == Some(all as u64)
        })
        .await;
    assert_eq!(status["counters"]["received"].as_u64(), Some(all as u64));
    local.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_start_on_a_full_disk_leaves_no_half_written_file_and_the_next_start_serves() {
    let dir = tempfile::tempdir().unwrap();
    let envs = [("TGQ_HANDLER", "echo")];
    let mut full = Local::start_with(free_port(), dir.path(), &envs, &[], |command| {
        // SAFETY: only async-signal-safe calls between fork and exec. No file may grow at all:
        // the disk is full from the start.
        unsafe {
            command.pre_exec(|| {
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                let limit = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: libc::RLIM_INFINITY,
                };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    assert!(!full.wait_exit(Duration::from_secs(20)).await.success());
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let len = std::fs::metadata(&path).unwrap().len();
        assert!(len > 0, "{} was left empty", path.display());
    }
    let mut local = Local::start(dir.path(), &envs, &[]);
    local.wait_ready().await;
    local.terminate().await;
}
