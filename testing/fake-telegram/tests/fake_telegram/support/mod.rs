//! Helpers shared by the integration tests: one HTTP call to the fake, read as (status, envelope).

#![allow(dead_code)]

use std::time::{Duration, Instant};

use serde_json::Value;
use tgq_fake_telegram::FakeTelegram;

/// Waits until `done` holds, looking every few milliseconds; fails naming `what` after 30 s, a
/// bound no healthy run comes near even on a loaded machine.
pub async fn wait_until(what: &str, done: impl Fn() -> bool) {
    let limit = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < limit, "not within 30 s: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The address of `method` for the fake's own token.
pub fn method_url(telegram: &FakeTelegram, method: &str) -> String {
    format!("{}/bot{}/{method}", telegram.url(), telegram.token())
}

/// POSTs `params` as JSON and returns the HTTP status and the decoded envelope.
pub async fn call(telegram: &FakeTelegram, method: &str, params: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(method_url(telegram, method))
        .json(&params)
        .send()
        .await
        .expect("the fake answers");
    envelope(response).await
}

/// Reads a response as (status, envelope).
pub async fn envelope(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let body = response
        .json()
        .await
        .expect("the answer is a JSON envelope");
    (status, body)
}

/// `sendMessage` to `chat_id` with a fixed text.
pub async fn send_text(telegram: &FakeTelegram, chat_id: i64) -> (u16, Value) {
    call(
        telegram,
        "sendMessage",
        serde_json::json!({ "chat_id": chat_id, "text": "hello" }),
    )
    .await
}
