//! With limits configured, sending methods are throttled the way Telegram throttles them.
//!
//! The limited servers here run on a frozen clock that only `advance_clock` moves: every send lands
//! in the same instant however slowly the machine runs, so each window's edges are exact.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::{call, send_text};
use tgq_fake_telegram::{FakeClock, FakeConfig, FakeTelegram, Limits};

async fn limited(limits: Limits) -> FakeTelegram {
    FakeTelegram::start_with(FakeConfig {
        limits: Some(limits),
        clock: FakeClock::Frozen,
        ..FakeConfig::default()
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn per_chat_limit_answers_429_on_the_second_message_within_a_second() {
    let telegram = limited(Limits::default()).await;

    let (first, _) = send_text(&telegram, 5).await;
    let (second, body) = send_text(&telegram, 5).await;

    assert_eq!((first, second), (200, 429));
    assert_eq!(body["parameters"]["retry_after"], 1);
    assert_eq!(body["description"], "Too Many Requests: retry after 1");
    assert_eq!(telegram.calls().len(), 2);
    assert_eq!(telegram.delivered_to(5).len(), 1);
}

#[tokio::test]
async fn per_chat_limit_frees_once_the_second_has_passed() {
    let telegram = limited(Limits::default()).await;
    send_text(&telegram, 5).await;

    telegram.advance_clock(Duration::from_millis(999));
    let (just_before, _) = send_text(&telegram, 5).await;
    telegram.advance_clock(Duration::from_millis(1));
    let (after, _) = send_text(&telegram, 5).await;

    assert_eq!((just_before, after), (429, 200));
}

#[tokio::test]
async fn a_full_chat_does_not_hold_back_other_chats() {
    let telegram = limited(Limits::default()).await;
    send_text(&telegram, 5).await;

    let (status, _) = send_text(&telegram, 6).await;

    assert_eq!(status, 200);
}

#[tokio::test]
async fn global_limit_refuses_sends_beyond_it_within_a_second() {
    let telegram = limited(Limits {
        global_per_sec: 3,
        ..Limits::default()
    })
    .await;

    let mut statuses = Vec::new();
    for chat_id in 1..=4 {
        statuses.push(send_text(&telegram, chat_id).await.0);
    }

    assert_eq!(statuses, vec![200, 200, 200, 429]);
}

#[tokio::test]
async fn group_limit_counts_per_minute_and_asks_to_wait_out_the_minute() {
    let telegram = limited(Limits {
        per_chat_per_sec: 100,
        global_per_sec: 100,
        per_group_per_min: 2,
        ..Limits::default()
    })
    .await;

    let mut statuses = Vec::new();
    let mut last = serde_json::Value::Null;
    for _ in 0..3 {
        let (status, body) = send_text(&telegram, -500).await;
        statuses.push(status);
        last = body;
    }

    assert_eq!(statuses, vec![200, 200, 429]);
    assert_eq!(last["parameters"]["retry_after"], 60);

    telegram.advance_clock(Duration::from_secs(45));
    let (status, body) = send_text(&telegram, -500).await;
    assert_eq!(
        (status, body["parameters"]["retry_after"].clone()),
        (429, 15.into())
    );
    telegram.advance_clock(Duration::from_secs(15));
    assert_eq!(send_text(&telegram, -500).await.0, 200);
}

#[tokio::test]
async fn send_chat_action_is_not_rate_limited() {
    let telegram = limited(Limits::default()).await;
    send_text(&telegram, 5).await;

    for _ in 0..3 {
        let (status, _) = call(
            &telegram,
            "sendChatAction",
            json!({ "chat_id": 5, "action": "typing" }),
        )
        .await;
        assert_eq!(status, 200);
    }
}

#[tokio::test]
async fn answers_to_queries_and_get_chat_are_not_rate_limited() {
    let telegram = limited(Limits {
        global_per_sec: 1,
        ..Limits::default()
    })
    .await;
    send_text(&telegram, 5).await;

    for (method, params) in [
        (
            "answerInlineQuery",
            json!({ "inline_query_id": "7", "results": [] }),
        ),
        ("answerCallbackQuery", json!({ "callback_query_id": "8" })),
        ("getChat", json!({ "chat_id": 5 })),
    ] {
        let (status, _) = call(&telegram, method, params).await;
        assert_eq!(status, 200, "{method}");
    }
    assert_eq!(
        send_text(&telegram, 6).await.0,
        429,
        "the second send waits"
    );
}

#[tokio::test]
async fn edits_count_against_the_chat_limit() {
    let telegram = limited(Limits::default()).await;
    send_text(&telegram, 5).await;

    let (status, _) = call(
        &telegram,
        "editMessageText",
        json!({ "chat_id": 5, "message_id": 1, "text": "again" }),
    )
    .await;

    assert_eq!(status, 429);
}

#[tokio::test]
async fn without_limits_a_burst_is_delivered_in_full() {
    let telegram = FakeTelegram::start().await.unwrap();

    for _ in 0..40 {
        assert_eq!(send_text(&telegram, 5).await.0, 200);
    }
    assert_eq!(telegram.delivered_to(5).len(), 40);
}
