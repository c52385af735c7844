//! `tgq outbox --follow`: the bot's offline replies as they are sent, while `tgq local` runs.

use crate::common;

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{post_text, Local};
use tgq_core::echo::reply_text;

const SECRET: &str = "outbox-test-secret";

/// Lines printed so far, waiting up to `limit` for one that holds `wanted`.
fn wait_line(lines: &mpsc::Receiver<String>, seen: &mut Vec<String>, wanted: &str) {
    let limit = std::time::Instant::now() + Duration::from_secs(30);
    while !seen.iter().any(|line| line.contains(wanted)) {
        let left = limit.saturating_duration_since(std::time::Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => panic!("no line with {wanted:?}; printed: {seen:#?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn follow_prints_each_reply_as_the_bot_sends_it_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let envs = [("TGQ_WEBHOOK_SECRET", SECRET), ("TGQ_HANDLER", "echo")];
    let mut local = Local::start(dir.path(), &envs, &[]);
    local.wait_ready().await;
    post_text(&local, SECRET, 1, 42, "first").await;

    let data_dir = dir.path().to_str().unwrap();
    let mut follow = common::tgq(&[])
        .args(["outbox", "--follow", "--data-dir", data_dir])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (send, lines) = mpsc::channel();
    let stdout = follow.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if send.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    wait_line(&lines, &mut seen, &reply_text(1, "first"));
    assert!(
        seen[0].contains("METHOD"),
        "the table's header first: {seen:?}"
    );

    for (id, text) in [(2, "second"), (3, "third"), (4, "fourth")] {
        post_text(&local, SECRET, id, 42, text).await;
    }
    for (id, text) in [(2, "second"), (3, "third"), (4, "fourth")] {
        wait_line(&lines, &mut seen, &reply_text(id, text));
    }
    let status = local.status().await;
    assert_eq!(status["counters"]["processed"], 4, "{status}");

    assert!(Command::new("kill")
        .args(["-TERM", &follow.id().to_string()])
        .status()
        .unwrap()
        .success());
    assert!(
        follow.wait().unwrap().success(),
        "SIGTERM ends --follow with success"
    );
    let rows = seen.iter().filter(|l| l.contains("sendMessage")).count();
    assert_eq!(rows, 4, "each reply once: {seen:#?}");
    assert!(local.terminate().await.success());
}
