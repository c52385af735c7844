//! Local mode's periodic purge: records and outbox entries older than `TGQ_RECORD_TTL_SECS` leave the
//! store while `tgq local` runs, every `TGQ_PURGE_INTERVAL_SECS`, and younger ones stay.
//!
//! Age is what is under test, so the test lets time pass on purpose: the second update is sent once
//! the first is half its time-to-live old. Everything else waits on what the store shows, with
//! margins of several seconds either way.

use crate::common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{message_update, Local};
use serde_json::Value;

const SECRET: &str = "retention-test-secret";
const TTL: Duration = Duration::from_secs(12);
/// The younger update is sent once the older one is this old: when the older one expires, the
/// younger one has this long left.
const AGE_GAP: Duration = Duration::from_secs(6);
/// Far more than a purge interval, a poll and any scheduling delay on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(30);

async fn post(local: &Local, update_id: i64, chat: i64) -> String {
    let body = message_update(update_id, chat, &format!("kept for a while {update_id}"));
    let response = reqwest::Client::new()
        .post(local.url("/webhook"))
        .header("x-telegram-bot-api-secret-token", SECRET)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    answer["result"].as_str().unwrap_or_default().to_owned()
}

/// The outbox entries as `/admin/outbox` lists them: (update id, when sent in ms since the epoch).
async fn outbox(local: &Local) -> Vec<(i64, u64)> {
    let answer: Value = reqwest::get(local.admin_url("/admin/outbox?limit=100"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["result"]
        .as_array()
        .expect("a list of entries")
        .iter()
        .map(|entry| {
            (
                entry["update_id"].as_i64().unwrap_or_default(),
                entry["at"].as_u64().unwrap_or_default(),
            )
        })
        .collect()
}

fn epoch_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_millis()).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn expired_records_and_outbox_entries_are_purged_while_younger_ones_stay() {
    let dir = tempfile::tempdir().unwrap();
    let ttl = TTL.as_secs().to_string();
    let envs = [
        ("TGQ_WEBHOOK_SECRET", SECRET),
        ("TGQ_RECORD_TTL_SECS", ttl.as_str()),
        ("TGQ_PURGE_INTERVAL_SECS", "1"),
    ];
    let mut local = Local::start(dir.path(), &envs, &[]);
    local.wait_ready().await;

    assert_eq!(post(&local, 1, 101).await, "queued");
    local
        .wait_settled(PATIENCE, |s| s["counters"]["processed"] == 1)
        .await;
    let older_sent_at = outbox(&local).await[0].1;

    // Let the first update age by half its time to live; then the second arrives.
    let send_younger_at = older_sent_at + AGE_GAP.as_millis() as u64;
    while epoch_ms() < send_younger_at {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(post(&local, 2, 202).await, "queued");
    let status = local
        .wait_settled(PATIENCE, |s| s["counters"]["processed"] == 2)
        .await;
    assert_eq!(
        (
            status["stats"]["records"].clone(),
            status["stats"]["outbox"].clone()
        ),
        (2.into(), 2.into()),
        "both updates are kept at first: {status}"
    );

    // The first update's record and reply go once they outlive the TTL…
    let status = local
        .wait_settled(TTL + PATIENCE, |s| {
            s["stats"]["records"].as_u64() < Some(2) && s["stats"]["outbox"].as_u64() < Some(2)
        })
        .await;
    // …while the second's, younger than the TTL, stay.
    assert_eq!(
        (
            status["stats"]["records"].clone(),
            status["stats"]["outbox"].clone()
        ),
        (1.into(), 1.into()),
        "the younger update's record and reply stay ({AGE_GAP:?} younger): {status}"
    );
    let left: Vec<i64> = outbox(&local)
        .await
        .iter()
        .map(|(update, _)| *update)
        .collect();
    assert_eq!(left, vec![2], "the younger reply stays: {status}");
    let again = post(&local, 2, 202).await;
    assert!(
        again.starts_with("duplicate"),
        "the younger update's record is still there, so a re-send is a duplicate: {again}"
    );
    assert_eq!(local.status().await["counters"]["processed"], 2);

    // Purged records stay gone: the stopped store, read directly, holds only the younger one.
    assert!(local.terminate().await.success());
    let (exit, stdout, stderr) = common::run(
        &[],
        &[
            "status",
            "--json",
            "--data-dir",
            dir.path().to_str().unwrap(),
        ],
    );
    assert!(exit.success(), "{stderr}");
    let stopped: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(stopped["stats"]["records"], 1, "{stopped}");
}
