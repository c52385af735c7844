//! `tgq fake-telegram`: the fake Bot API as a server of its own, with faults and queued updates —
//! here with `tgq local --poll` pointed at it, as docs/BOT.md's path without Telegram does.

use crate::common;

use std::io::Read as _;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use common::{readable_fixture_count, run, update_fixture_count, Local, UNREADABLE_FIXTURES};
use tgq_fake_telegram::DEFAULT_TOKEN;

/// A running `tgq fake-telegram`, stopped (SIGTERM) when dropped.
struct Fake {
    child: Child,
    url: String,
}

impl Fake {
    fn start(args: &[&str]) -> Fake {
        let (child, url) = common::start_fake_telegram(args);
        Fake { child, url }
    }

    /// Stops it with SIGTERM: (exit success, stdout).
    fn stop(mut self) -> (bool, String) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        let status = self.child.wait().unwrap();
        let mut stdout = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut stdout)
            .unwrap();
        (status.success(), stdout)
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn events_updates() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../events/updates")
        .to_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bot_polls_the_fake_through_its_faults_and_answers_every_queued_update() {
    // Ada's private chat answers its first sendMessage with 502: the worker retries through it.
    let updates = events_updates();
    let fake = Fake::start(&["--updates", &updates, "--fault", "502,chat=111111111"]);
    let envs = [
        ("TELEGRAM_API_URL", fake.url.as_str()),
        ("TELEGRAM_BOT_TOKEN", DEFAULT_TOKEN),
        ("TGQ_BACKOFF_BASE_MS", "100"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut local = Local::start(dir.path(), &envs, &["--poll"]);
    local.wait_ready().await;
    let fixtures = update_fixture_count();
    let readable = readable_fixture_count();
    let status = local
        .wait_settled(Duration::from_secs(60), |s| {
            s["counters"]["processed"] == readable
        })
        .await;
    assert_eq!(status["counters"]["received"], fixtures, "{status}");
    assert_eq!(status["counters"]["retried"], 1, "{status}");
    assert!(local.terminate().await.success());

    let (stopped, printed) = fake.stop();
    assert!(stopped, "SIGTERM ends it with success: {printed}");
    let calls: Vec<&str> = printed
        .lines()
        .filter(|line| line.contains("sendMessage"))
        .collect();
    let ada: Vec<&str> = calls
        .iter()
        .copied()
        .filter(|line| line.contains("chat 111111111 "))
        .collect();
    assert!(ada[0].ends_with(" 502"), "{printed}");
    assert!(
        ada[1..].iter().all(|line| line.ends_with(" 200")),
        "{printed}"
    );
    assert!(printed.contains("getUpdates"), "{printed}");
    assert!(printed.contains("queued for getUpdates"), "{printed}");
    // Under each send, what the bot said.
    let lines: Vec<&str> = printed.lines().collect();
    let said = lines
        .windows(2)
        .filter(|pair| pair[0].contains("sendMessage") && pair[0].ends_with(" 200"))
        .filter(|pair| pair[1].starts_with("        | "))
        .count();
    assert_eq!(
        said,
        calls.len() - 1,
        "every delivered send shows its text: {printed}"
    );
}

/// Runs `tgq local --poll` on the fixtures against a fake where Ada (chat 111111111) has blocked
/// the bot, until every update is finished; returns the status counters.
async fn counters_with_ada_gone(envs: &[(&str, &str)]) -> serde_json::Value {
    let fake = Fake::start(&[
        "--updates",
        &events_updates(),
        "--fault",
        "blocked,chat=111111111,times=always",
    ]);
    let mut all = vec![
        ("TELEGRAM_API_URL", fake.url.as_str()),
        ("TELEGRAM_BOT_TOKEN", DEFAULT_TOKEN),
    ];
    all.extend_from_slice(envs);
    let dir = tempfile::tempdir().unwrap();
    let mut local = Local::start(dir.path(), &all, &["--poll"]);
    local.wait_ready().await;
    let fixtures = update_fixture_count() as u64;
    let finished = |s: &serde_json::Value| {
        let count = |name: &str| s["counters"][name].as_u64().unwrap_or(0);
        count("processed") + count("recipient_gone") + count("dead_lettered") == fixtures
    };
    let status = local
        .wait_settled(Duration::from_secs(60), |s| finished(s))
        .await;
    assert!(local.terminate().await.success());
    status["counters"].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_user_who_blocked_the_bot_is_counted_as_recipient_gone_and_dead_lettered_only_when_asked()
{
    // The fixtures this build cannot read are dead letters either way.
    let unreadable = UNREADABLE_FIXTURES.len() as u64;
    let settled = counters_with_ada_gone(&[]).await;
    assert!(settled["recipient_gone"].as_u64() >= Some(1), "{settled}");
    assert_eq!(settled["dead_lettered"], unreadable, "{settled}");

    let dead = counters_with_ada_gone(&[("TGQ_DEAD_LETTER_GONE_RECIPIENTS", "true")]).await;
    assert_eq!(dead["recipient_gone"], 0, "{dead}");
    assert_eq!(
        dead["dead_lettered"].as_u64(),
        settled["recipient_gone"]
            .as_u64()
            .map(|gone| gone + unreadable),
        "the same updates, dead-lettered: {dead}"
    );
}

#[test]
fn a_fault_that_does_not_parse_is_a_usage_error() {
    let (status, _, stderr) = run(&[], &["fake-telegram", "--fault", "418,chat=1"]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is not a fault"), "{stderr}");
}

/// Calls `method` of the fake at `url` with `params`: its envelope.
async fn call_fake(url: &str, method: &str, params: serde_json::Value) -> serde_json::Value {
    common::call_bot_api(url, DEFAULT_TOKEN, method, params).await
}

/// The updates queued for getUpdates, confirmed as read.
async fn take_updates(url: &str) -> Vec<serde_json::Value> {
    let answer = call_fake(url, "getUpdates", serde_json::json!({})).await;
    let updates = answer["result"].as_array().cloned().unwrap_or_default();
    if let Some(last) = updates.last() {
        let offset = last["update_id"].as_i64().unwrap() + 1;
        call_fake(url, "getUpdates", serde_json::json!({ "offset": offset })).await;
    }
    updates
}

#[tokio::test(flavor = "multi_thread")]
async fn with_pay_the_user_pays_an_invoice_and_the_bot_hears_of_it_through_get_updates() {
    let fake = Fake::start(&["--pay"]);
    let invoice = serde_json::json!({
        "chat_id": 42, "title": "Dragon egg", "description": "One egg", "payload": "egg-1",
        "currency": "XTR", "prices": [{ "label": "Egg", "amount": 25 }],
    });
    let sent = call_fake(&fake.url, "sendInvoice", invoice).await;
    assert_eq!(sent["ok"], true, "{sent}");
    let asked = take_updates(&fake.url).await;
    let query = &asked[0]["pre_checkout_query"];
    assert_eq!(
        (query["from"]["id"].as_i64(), query["total_amount"].as_i64()),
        (Some(42), Some(25)),
        "{asked:?}"
    );
    let answer = serde_json::json!({ "pre_checkout_query_id": query["id"], "ok": true });
    let answered = call_fake(&fake.url, "answerPreCheckoutQuery", answer).await;
    assert_eq!(answered["result"], true, "{answered}");
    let paid = take_updates(&fake.url).await;
    let payment = &paid[0]["message"]["successful_payment"];
    assert_eq!(payment["invoice_payload"], "egg-1", "{paid:?}");
    assert!(
        payment["telegram_payment_charge_id"].is_string(),
        "{paid:?}"
    );

    let (stopped, printed) = fake.stop();
    assert!(stopped, "{printed}");
    assert!(printed.contains("paid at once"), "{printed}");
    assert!(printed.contains("answerPreCheckoutQuery"), "{printed}");
}
