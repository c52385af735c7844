//! `tgq dlq list | show | replay | purge | audit` on local mode's store: through the running
//! `tgq local` (its admin routes run the use cases), and on the store directly once it has stopped.

use crate::common;

use std::time::Duration;

use common::{audit_entries, ids_by_update, replies_per_chat, run, Local};
use serde_json::Value;
use tgq_core::echo::reply_text;
use tgq_fake_telegram::{FakeTelegram, Fault, Scope, Times};

const SECRET: &str = "dlq-test-secret";

async fn post(local: &Local, update_id: i64, chat: i64) {
    common::post_text(local, SECRET, update_id, chat, &format!("note {update_id}")).await;
}

fn tgq(data_dir: &str, args: &[&str]) -> String {
    let mut all = args.to_vec();
    all.extend(["--data-dir", data_dir]);
    let (status, stdout, stderr) = run(&[], &all);
    assert!(status.success(), "{all:?}: {stderr}\n{stdout}");
    stdout
}

fn json(data_dir: &str, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let stdout = tgq(data_dir, &all);
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{all:?}: {e}: {stdout}"))
}

/// `tgq local` sending to the fake Bot API.
fn start(dir: &std::path::Path, fake: &FakeTelegram) -> Local {
    let url = fake.url();
    Local::start(
        dir,
        &[
            ("TGQ_WEBHOOK_SECRET", SECRET),
            ("TELEGRAM_API_URL", url.as_str()),
            ("TELEGRAM_BOT_TOKEN", fake.token()),
        ],
        &[],
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn dead_letters_are_listed_shown_replayed_purged_and_audited_through_the_running_instance() {
    let fake = FakeTelegram::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap();
    let mut local = start(dir.path(), &fake);
    local.wait_ready().await;
    // Telegram refuses chat 7's first two replies for good (a bad request); chat 8's goes through.
    fake.inject(Fault::BadRequest, Scope::Chat(7), Times::N(2));
    for (update_id, chat) in [(1, 7), (2, 7), (3, 8)] {
        post(&local, update_id, chat).await;
    }
    local
        .wait_settled(Duration::from_secs(20), |s| {
            s["counters"]["processed"] == 1 && s["stats"]["dead"] == 2
        })
        .await;

    let letters = json(data_dir, &["dlq", "list"]);
    let ids = ids_by_update(&letters);
    assert_eq!(ids.keys().copied().collect::<Vec<_>>(), [1, 2], "{letters}");
    assert_eq!(letters[0]["reason"], "permanent_error", "{letters}");
    assert!(letters[0]["age_ms"].is_u64(), "{letters}");
    let table = tgq(data_dir, &["dlq", "list"]);
    assert!(
        table.contains("permanent error") && table.contains(&ids[&1]),
        "{table}"
    );

    let shown = tgq(data_dir, &["dlq", "show", &ids[&2]]);
    assert!(shown.contains("note 2"), "the body is shown: {shown}");

    let dry = json(data_dir, &["dlq", "replay", "--all", "--dry-run"]);
    assert_eq!(dry["dry_run"], true, "{dry}");
    assert_eq!(dry["acted"].as_array().unwrap().len(), 2, "{dry}");
    assert_eq!(
        json(data_dir, &["dlq", "list"]).as_array().unwrap().len(),
        2
    );

    let replayed = json(data_dir, &["dlq", "replay", "--all"]);
    assert_eq!(replayed["acted"].as_array().unwrap().len(), 2, "{replayed}");
    local
        .wait_settled(Duration::from_secs(20), |s| {
            s["counters"]["processed"] == 3 && s["stats"]["dead"] == 0
        })
        .await;
    assert_eq!(
        replies_per_chat(&fake)[&7],
        [reply_text(1, "note 1"), reply_text(2, "note 2")],
        "the replayed updates ran, in their chat's order"
    );

    fake.inject(Fault::BadRequest, Scope::Chat(9), Times::Once);
    post(&local, 4, 9).await;
    local
        .wait_settled(Duration::from_secs(20), |s| s["stats"]["dead"] == 1)
        .await;
    let (refused, _, stderr) = run(&[], &["dlq", "purge", "--all", "--data-dir", data_dir]);
    assert!(!refused.success() && stderr.contains("--yes"), "{stderr}");
    let purged = json(data_dir, &["dlq", "purge", "--all", "--yes"]);
    assert_eq!(purged["acted"][0]["update_id"], 4, "{purged}");

    let audit = json(data_dir, &["dlq", "audit"]);
    let actions: Vec<(&str, i64)> = audit_entries(&audit)
        .into_iter()
        .map(|(action, update_id, _)| (action, update_id))
        .collect();
    assert_eq!(actions.len(), 3, "{audit}");
    assert_eq!(actions[0], ("purge", 4));
    assert!(
        audit[0]["principal"]
            .as_str()
            .unwrap()
            .starts_with("local user"),
        "{audit}"
    );
    assert!(local.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replay_on_the_stopped_store_runs_when_local_starts_again() {
    let fake = FakeTelegram::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap();
    let mut local = start(dir.path(), &fake);
    local.wait_ready().await;
    fake.inject(Fault::BadRequest, Scope::Chat(7), Times::Once);
    post(&local, 1, 7).await;
    local
        .wait_settled(Duration::from_secs(20), |s| s["stats"]["dead"] == 1)
        .await;
    assert!(local.terminate().await.success());

    let id = ids_by_update(&json(data_dir, &["dlq", "list"]))[&1].clone();
    // Without USER or LOGNAME (cron, a systemd unit), the audit still names who replayed.
    let output = common::tgq(&[])
        .env_remove("USER")
        .env_remove("LOGNAME")
        .args(["dlq", "replay", &id, "--data-dir", data_dir])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(said.contains("1 letter(s) replayed"), "{said}");
    let again = run(&[], &["dlq", "replay", &id, "--data-dir", data_dir]);
    assert!(!again.0.success(), "the letter is gone: {}", again.1);
    assert!(
        again.1.contains("not in the dead-letter queue"),
        "{}",
        again.1
    );
    let audit = json(data_dir, &["dlq", "audit"]);
    assert_eq!(audit[0]["action"], "replay", "{audit}");
    let whoami = std::process::Command::new("id")
        .arg("-un")
        .output()
        .unwrap();
    let whoami = String::from_utf8_lossy(&whoami.stdout).trim().to_owned();
    assert_eq!(
        audit[0]["principal"],
        format!("local user {whoami}"),
        "{audit}"
    );

    let mut local = start(dir.path(), &fake);
    local.wait_ready().await;
    local
        .wait_settled(Duration::from_secs(20), |s| s["counters"]["processed"] == 1)
        .await;
    assert_eq!(replies_per_chat(&fake)[&7], [reply_text(1, "note 1")]);
    assert!(local.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_all_replays_each_letter_once_while_the_replayed_updates_fail_again() {
    let fake = FakeTelegram::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap();
    let mut local = start(dir.path(), &fake);
    local.wait_ready().await;
    // Every reply is refused for good: each replayed update is buried again, as a new letter,
    // while the replay still walks the queue.
    fake.inject(Fault::BadRequest, Scope::Global, Times::Always);
    for update_id in 1..=40 {
        post(&local, update_id, 100 + update_id).await;
    }
    local
        .wait_settled(Duration::from_secs(20), |s| s["stats"]["dead"] == 40)
        .await;

    let mut replay = common::tgq(&[])
        .args(["dlq", "replay", "--all", "--json", "--data-dir", data_dir])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while replay.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            replay.kill().unwrap();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let output = replay.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the replay did not end within a minute"
    );
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(report["acted"].as_array().unwrap().len(), 40, "{report}");
    // The forty come back as forty new letters, left for the next replay.
    local
        .wait_settled(Duration::from_secs(20), |s| s["stats"]["dead"] == 40)
        .await;
    assert!(local.terminate().await.success());
}
