//! Timers in `tgq local`: due while the process was killed, they fire once at the next start, each
//! behind its chat's earlier updates; `tgq timers list | cancel` see and cancel the pending ones.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use common::{free_port, post_text, run, Local};

const SECRET: &str = "timers-secret";
const CHATS: i64 = 20;

/// The outbox's texts by chat, in the order they were sent.
async fn texts_by_chat(local: &Local) -> BTreeMap<i64, Vec<String>> {
    let answer: Value = reqwest::get(local.admin_url("/admin/outbox?limit=1000"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut texts: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for entry in answer["result"].as_array().expect("a list of entries") {
        let chat = entry["chat_id"].as_i64().unwrap_or_default();
        let text = entry["text"].as_str().unwrap_or_default().to_owned();
        texts.entry(chat).or_default().push(text);
    }
    texts
}

fn timers_fired(texts: &BTreeMap<i64, Vec<String>>) -> usize {
    texts
        .values()
        .flatten()
        .filter(|t| t.starts_with("echo timer "))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_due_while_tgq_local_was_killed_fire_once_each_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let envs = [("TGQ_WEBHOOK_SECRET", SECRET)];
    let port = free_port();
    let mut local = Local::start_on(port, dir.path(), &envs, &[]);
    local.wait_ready().await;
    for chat in 1..=CHATS {
        post_text(&local, SECRET, chat, chat, "/later 2000 ping").await;
    }
    local
        .wait_settled(Duration::from_secs(30), |s| {
            s["counters"]["processed"].as_u64() == Some(CHATS as u64)
        })
        .await;
    let data_dir = dir.path().to_str().unwrap();
    let (status, listed, stderr) = run(&[], &["timers", "list", "--json", "--data-dir", data_dir]);
    assert!(status.success(), "{stderr}");
    let listed: Vec<Value> = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed.len(), CHATS as usize, "{listed:?}");
    local.kill();

    tokio::time::sleep(Duration::from_millis(2500)).await;
    let mut local = Local::start_on(port, dir.path(), &envs, &[]);
    local.wait_ready().await;
    let started = Instant::now();
    loop {
        let texts = texts_by_chat(&local).await;
        if timers_fired(&texts) >= CHATS as usize {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the timers due while down did not all fire: {texts:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Long enough for a second delivery of any of them to show.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let texts = texts_by_chat(&local).await;
    for chat in 1..=CHATS {
        assert_eq!(
            texts[&chat],
            [
                format!("echo {chat}: /later 2000 ping"),
                format!("echo timer {chat}: /later 2000 ping")
            ],
            "chat {chat}"
        );
    }
    let (_, listed, _) = run(&[], &["timers", "list", "--json", "--data-dir", data_dir]);
    assert_eq!(listed.trim(), "[]");
    local.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_timer_waits_behind_its_chat_s_running_update_and_a_cancelled_one_never_runs() {
    let dir = tempfile::tempdir().unwrap();
    let envs = [("TGQ_WEBHOOK_SECRET", SECRET)];
    let mut local = Local::start(dir.path(), &envs, &[]);
    local.wait_ready().await;
    post_text(&local, SECRET, 1, 7, "/later 300 soon").await;
    post_text(&local, SECRET, 2, 7, "/slow 2000 hold").await;
    post_text(&local, SECRET, 3, 8, "/later 600000 never").await;
    local
        .wait_settled(Duration::from_secs(30), |s| {
            s["counters"]["processed"].as_u64() == Some(4)
        })
        .await;
    assert_eq!(
        texts_by_chat(&local).await[&7],
        [
            "echo 1: /later 300 soon",
            "echo 2: /slow 2000 hold",
            "echo timer 1: /later 300 soon"
        ],
        "the timer fell due while chat 7's slow update ran, and waited for it"
    );

    let data_dir = dir.path().to_str().unwrap();
    let (_, listed, _) = run(&[], &["timers", "list", "--data-dir", data_dir]);
    assert!(listed.contains("later:3"), "{listed}");
    let cancel = ["timers", "cancel", "8", "later:3", "--data-dir", data_dir];
    let (status, out, stderr) = run(&[], &cancel);
    assert!(status.success(), "{stderr}");
    assert!(
        out.contains("cancelled timer \"later:3\" of chat 8"),
        "{out}"
    );
    let (status, _, stderr) = run(&[], &cancel);
    assert!(!status.success());
    assert!(stderr.contains("no pending timer"), "{stderr}");
    let (_, listed, _) = run(&[], &["timers", "list", "--data-dir", data_dir]);
    assert!(listed.contains("no pending timers"), "{listed}");
    local.terminate().await;
}
