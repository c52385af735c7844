//! `tgq payments list | show`: the payments ledger of `tgq local`, read through the running
//! instance and from its store once it stopped.

use crate::common;

use std::time::Duration;

use serde_json::{json, Value};

use common::{post_update, run, Local};

const SECRET: &str = "payments-secret";

fn paid(update_id: i64, user: i64, charge: &str, stars: u32) -> Value {
    json!({
        "update_id": update_id,
        "message": {
            "message_id": update_id, "date": 1_800_000_000,
            "chat": {"id": user, "type": "private", "first_name": "Ada"},
            "from": {"id": user, "is_bot": false, "first_name": "Ada"},
            "successful_payment": {
                "currency": "XTR", "total_amount": stars, "invoice_payload": "gem",
                "telegram_payment_charge_id": charge, "provider_payment_charge_id": ""
            }
        }
    })
}

fn listed(data_dir: &str) -> Vec<Value> {
    let (status, out, err) = run(&[], &["payments", "list", "--json", "--data-dir", data_dir]);
    assert!(status.success(), "{err}");
    serde_json::from_str(&out).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_lists_each_charge_once_running_or_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let mut local = Local::start(dir.path(), &[("TGQ_WEBHOOK_SECRET", SECRET)], &[]);
    local.wait_ready().await;
    post_update(&local, SECRET, &paid(1, 42, "stx-a", 50)).await;
    post_update(&local, SECRET, &paid(2, 43, "stx-b", 75)).await;
    local
        .wait_settled(Duration::from_secs(30), |s| {
            s["counters"]["processed"].as_u64() == Some(2)
        })
        .await;
    let data_dir = dir.path().to_str().unwrap();

    let running = listed(data_dir);
    let charges: Vec<(&str, i64, u64)> = running
        .iter()
        .map(|e| {
            (
                e["id"].as_str().unwrap(),
                e["user"].as_i64().unwrap(),
                e["stars"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(charges.len(), 2, "{running:?}");
    assert!(charges.contains(&("stx-a", 42, 50)) && charges.contains(&("stx-b", 43, 75)));
    assert!(running.iter().all(|e| e["bot_id"] == "local"));
    let (status, shown, err) = run(&[], &["payments", "show", "stx-b", "--data-dir", data_dir]);
    assert!(status.success(), "{err}");
    assert!(shown.contains("stars      75"), "{shown}");
    assert!(shown.contains("update     2"), "{shown}");
    local.terminate().await;

    assert_eq!(
        listed(data_dir),
        running,
        "the store read directly says the same"
    );
    let (status, out, _) = run(
        &[],
        &["payments", "list", "--bot", "other", "--data-dir", data_dir],
    );
    assert!(status.success());
    assert_eq!(out.trim(), "no charges in the payments ledger");
    let (status, _, err) = run(&[], &["payments", "show", "stx-z", "--data-dir", data_dir]);
    assert!(!status.success());
    assert!(
        err.contains("no charge \"stx-z\" in the payments ledger"),
        "{err}"
    );
}
