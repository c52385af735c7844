//! A pre-checkout query through Telegram's faults, from outside: `tgq local` behind its webhook,
//! the echo bot (which never answers a pre-checkout, so tgq answers for it), and the fake Bot API
//! counting what arrived. Through 502s, a revoked token, refused connections and a SIGKILL while
//! the answer is on the wire, each query is finished — never dead-lettered, nobody charged — and
//! Telegram takes at most one answer per query.

use crate::common;

use std::time::{Duration, Instant};

use common::{Local, OnFake};
use serde_json::{json, Value};
use tgq_fake_telegram::{FakeTelegram, Fault, RecordedCall, Scope, Times};

const SECRET: &str = "checkout-secret";

/// The answers to `query` that arrived at `fake`.
fn answers(fake: &FakeTelegram, query: &str) -> Vec<RecordedCall> {
    fake.calls()
        .into_iter()
        .filter(|call| call.method == "answerPreCheckoutQuery")
        .filter(|call| call.params["pre_checkout_query_id"] == query)
        .collect()
}

/// User `user` presses Pay: the query Telegram posts to the webhook, as update `update_id`.
async fn post_checkout(local: &Local, update_id: i64, query: &str, user: i64) {
    let update = json!({
        "update_id": update_id,
        "pre_checkout_query": {
            "id": query, "currency": "XTR", "total_amount": 25, "invoice_payload": "egg",
            "from": {"id": user, "is_bot": false, "first_name": "Ada"},
        }
    });
    let response = reqwest::Client::new()
        .post(local.url("/webhook"))
        .header("x-telegram-bot-api-secret-token", SECRET)
        .json(&update)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "update {update_id} was not taken");
}

/// Waits until `n` updates are processed and none dead-lettered: the status then.
async fn processed(local: &Local, n: u64) -> Value {
    let status = local
        .wait_settled(Duration::from_secs(30), |s| s["counters"]["processed"] == n)
        .await;
    assert_eq!(status["counters"]["dead_lettered"], 0, "{status}");
    status
}

/// Waits until `done`, for at most `limit`.
async fn wait_for(what: &str, limit: Duration, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_checkout_query_is_finished_once_through_5xx_a_revoked_token_an_outage_and_a_kill() {
    let (on, fake, mut local) = OnFake::start(SECRET).await;

    // Healthy: tgq's refusal arrives, and Telegram takes it.
    let query = fake.checkout(101, "egg", 25);
    let posted = Instant::now();
    post_checkout(&local, 1, &query, 101).await;
    processed(&local, 1).await;
    let healthy = answers(&fake, &query);
    assert_eq!(healthy.len(), 1, "{healthy:?}");
    assert_eq!(
        (healthy[0].status, &healthy[0].params["ok"]),
        (200, &json!(false))
    );
    assert!(
        posted.elapsed() < Duration::from_secs(10),
        "{:?}",
        posted.elapsed()
    );

    // Telegram answers 502: the query is finished, not retried past its 10 s.
    fake.inject(Fault::ServerError(502), Scope::Global, Times::Always);
    let query = fake.checkout(102, "egg", 25);
    post_checkout(&local, 2, &query, 102).await;
    processed(&local, 2).await;
    fake.clear_faults();
    let failed = answers(&fake, &query);
    assert!(!failed.is_empty(), "tgq's refusal reached the fake");
    assert!(failed.iter().all(|call| call.status == 502), "{failed:?}");

    // The token is revoked: the same.
    fake.inject(Fault::Unauthorized, Scope::Global, Times::Always);
    let query = fake.checkout(103, "egg", 25);
    post_checkout(&local, 3, &query, 103).await;
    processed(&local, 3).await;
    fake.clear_faults();
    let refused = answers(&fake, &query);
    assert!(!refused.is_empty());
    assert!(refused.iter().all(|call| call.status == 401), "{refused:?}");
    let before_outage = fake.calls().len();

    // Telegram's connections are refused: nothing arrives, and the query is finished.
    let stopped = fake.clone();
    fake.shutdown().await;
    post_checkout(&local, 4, "q-during-the-outage", 104).await;
    processed(&local, 4).await;
    assert_eq!(
        stopped.calls().len(),
        before_outage,
        "nothing reached a stopped Telegram"
    );
    let fake = FakeTelegram::start_at(on.addr, Default::default())
        .await
        .unwrap();

    // SIGKILL while tgq's refusal is on the wire (Telegram took it and holds the answer 3 s):
    // the restarted process finishes the query without sending it again (its outcome is unknown,
    // and a second answer could only be refused).
    fake.inject(
        Fault::Timeout(Duration::from_secs(3)),
        Scope::Global,
        Times::Once,
    );
    let query = fake.checkout(105, "egg", 25);
    post_checkout(&local, 5, &query, 105).await;
    wait_for("tgq's refusal at the fake", Duration::from_secs(10), || {
        !answers(&fake, &query).is_empty()
    })
    .await;
    local.kill();
    let mut local = on.restart();
    local.wait_ready().await;
    processed(&local, 5).await;
    let killed = answers(&fake, &query);
    let statuses: Vec<u16> = killed.iter().map(|call| call.status).collect();
    assert_eq!(statuses, [200], "one answer, sent once: {killed:?}");
    assert!(fake.charges().is_empty(), "nobody was charged");
    assert!(local.terminate().await.success());
}
