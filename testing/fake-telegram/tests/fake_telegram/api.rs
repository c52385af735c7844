//! The fake answers the Bot API methods as Telegram does, and records every call.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::{call, envelope, method_url, send_text, wait_until};
use tgq_fake_telegram::{FakeConfig, FakeTelegram};

#[tokio::test]
async fn get_me_describes_a_bot_whose_id_is_the_token_prefix() {
    let telegram = FakeTelegram::start_with(FakeConfig {
        token: "987654:SECRET".to_owned(),
        ..FakeConfig::default()
    })
    .await
    .unwrap();

    let (status, body) = call(&telegram, "getMe", json!({})).await;

    assert_eq!(status, 200);
    assert_eq!(body["ok"], true);
    assert_eq!(body["result"]["id"], 987_654);
    assert_eq!(body["result"]["is_bot"], true);
    assert!(body["result"]["username"].is_string());
}

#[tokio::test]
async fn send_message_returns_increasing_message_ids_per_chat() {
    let telegram = FakeTelegram::start().await.unwrap();

    let mut ids = Vec::new();
    for chat_id in [10, 10, 20, 10] {
        let (_, body) = send_text(&telegram, chat_id).await;
        ids.push(body["result"]["message_id"].as_i64().unwrap());
    }

    assert_eq!(ids, vec![1, 2, 1, 3]);
    let recorded: Vec<_> = telegram
        .delivered_to(10)
        .iter()
        .map(|call| call.message_id)
        .collect();
    assert_eq!(recorded, vec![Some(1), Some(2), Some(3)]);
}

#[tokio::test]
async fn sent_message_echoes_text_chat_sender_and_inline_keyboard() {
    let telegram = FakeTelegram::start().await.unwrap();
    let keyboard = json!({ "inline_keyboard": [[{ "text": "Yes", "callback_data": "yes" }]] });

    let (_, body) = call(
        &telegram,
        "sendMessage",
        json!({ "chat_id": -100_200, "text": "Proceed?", "reply_markup": keyboard }),
    )
    .await;

    let message = &body["result"];
    assert_eq!(message["text"], "Proceed?");
    assert_eq!(message["chat"]["id"], -100_200);
    assert_eq!(message["chat"]["type"], "supergroup");
    assert_eq!(message["from"]["id"], 123_456);
    assert_eq!(message["reply_markup"], keyboard);
    assert!(message["date"].as_i64().unwrap() > 1_700_000_000);
}

#[tokio::test]
async fn a_chat_id_given_as_a_string_is_recorded_as_a_number() {
    let telegram = FakeTelegram::start().await.unwrap();

    let (status, body) = call(
        &telegram,
        "sendMessage",
        json!({ "chat_id": "77", "text": "hi" }),
    )
    .await;

    assert_eq!(status, 200);
    assert_eq!(body["result"]["chat"]["type"], "private");
    assert_eq!(telegram.delivered_to(77).len(), 1);
}

#[tokio::test]
async fn a_channel_username_is_answered_without_a_recorded_chat_id() {
    let telegram = FakeTelegram::start().await.unwrap();

    let (status, body) = call(
        &telegram,
        "sendMessage",
        json!({ "chat_id": "@news", "text": "breaking" }),
    )
    .await;

    assert_eq!(status, 200);
    assert_eq!(body["result"]["chat"]["type"], "channel");
    assert_eq!(body["result"]["chat"]["username"], "news");
    let calls = telegram.delivered();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].chat_id, None);
}

#[tokio::test]
async fn wrong_token_is_unauthorized() {
    let telegram = FakeTelegram::start().await.unwrap();
    let url = format!("{}/bot999:WRONG/sendMessage", telegram.url());

    let response = reqwest::Client::new()
        .post(url)
        .json(&json!({ "chat_id": 1, "text": "hi" }))
        .send()
        .await
        .unwrap();
    let (status, body) = envelope(response).await;

    assert_eq!(status, 401);
    assert_eq!(
        body,
        json!({ "ok": false, "error_code": 401, "description": "Unauthorized" })
    );
    assert_eq!(telegram.calls().len(), 1);
    assert!(telegram.delivered().is_empty());
}

#[tokio::test]
async fn unknown_method_is_not_found() {
    let telegram = FakeTelegram::start().await.unwrap();

    let (status, body) = call(&telegram, "sendTelepathy", json!({ "chat_id": 1 })).await;

    assert_eq!(status, 404);
    assert_eq!(
        body,
        json!({ "ok": false, "error_code": 404, "description": "Not Found" })
    );
    assert_eq!(telegram.calls()[0].status, 404);
}

#[tokio::test]
async fn send_message_without_text_is_a_bad_request_and_not_delivered() {
    let telegram = FakeTelegram::start().await.unwrap();

    let (status, body) = call(&telegram, "sendMessage", json!({ "chat_id": 5 })).await;

    assert_eq!(status, 400);
    assert_eq!(body["description"], "Bad Request: message text is empty");
    assert_eq!(telegram.calls().len(), 1);
    assert!(telegram.delivered_to(5).is_empty());
}

#[tokio::test]
async fn form_encoded_and_query_string_parameters_are_read() {
    let telegram = FakeTelegram::start().await.unwrap();
    let client = reqwest::Client::new();

    let form = client
        .post(method_url(&telegram, "sendMessage"))
        .form(&[
            ("chat_id", "8"),
            ("text", "from a form"),
            (
                "reply_markup",
                r#"{"inline_keyboard":[[{"text":"A","callback_data":"a"}]]}"#,
            ),
        ])
        .send()
        .await
        .unwrap();
    let (form_status, form_body) = envelope(form).await;
    let query = client
        .get(method_url(&telegram, "sendMessage"))
        .query(&[("chat_id", "8"), ("text", "from a query")])
        .send()
        .await
        .unwrap();
    let (query_status, query_body) = envelope(query).await;

    assert_eq!(form_status, 200);
    assert_eq!(form_body["result"]["text"], "from a form");
    assert_eq!(
        form_body["result"]["reply_markup"]["inline_keyboard"][0][0]["text"],
        "A"
    );
    assert_eq!(query_status, 200);
    assert_eq!(query_body["result"]["message_id"], 2);
}

#[tokio::test]
async fn copy_message_answers_only_the_new_message_id() {
    let telegram = FakeTelegram::start().await.unwrap();
    send_text(&telegram, 1).await;

    let (status, body) = call(
        &telegram,
        "copyMessage",
        json!({ "chat_id": 2, "from_chat_id": 1, "message_id": 1 }),
    )
    .await;

    assert_eq!(status, 200);
    assert_eq!(body["result"], json!({ "message_id": 1 }));
}

#[tokio::test]
async fn forwarded_message_carries_the_original_text_and_origin() {
    let telegram = FakeTelegram::start().await.unwrap();
    send_text(&telegram, 1).await;

    let (_, body) = call(
        &telegram,
        "forwardMessage",
        json!({ "chat_id": 2, "from_chat_id": 1, "message_id": 1 }),
    )
    .await;

    assert_eq!(body["result"]["text"], "hello");
    assert_eq!(body["result"]["forward_origin"]["type"], "user");
    assert_eq!(
        body["result"]["forward_origin"]["sender_user"]["id"],
        123_456
    );
}

#[tokio::test]
async fn edit_message_text_keeps_the_message_id_and_sets_edit_date() {
    let telegram = FakeTelegram::start().await.unwrap();
    send_text(&telegram, 3).await;

    let (status, body) = call(
        &telegram,
        "editMessageText",
        json!({ "chat_id": 3, "message_id": 1, "text": "edited" }),
    )
    .await;

    assert_eq!(status, 200);
    assert_eq!(body["result"]["message_id"], 1);
    assert_eq!(body["result"]["text"], "edited");
    assert!(body["result"]["edit_date"].is_i64());
}

#[tokio::test]
async fn simple_methods_answer_true() {
    let telegram = FakeTelegram::start().await.unwrap();

    for (method, params) in [
        ("answerCallbackQuery", json!({ "callback_query_id": "42" })),
        ("deleteMessage", json!({ "chat_id": 1, "message_id": 9 })),
        (
            "sendChatAction",
            json!({ "chat_id": 1, "action": "typing" }),
        ),
        ("setWebhook", json!({ "url": "https://example.com/hook" })),
        ("deleteWebhook", json!({})),
    ] {
        let (status, body) = call(&telegram, method, params).await;
        assert_eq!(
            (status, body),
            (200, json!({ "ok": true, "result": true })),
            "{method}"
        );
    }
    assert_eq!(telegram.calls()[1].message_id, Some(9));
}

#[tokio::test]
async fn an_inline_query_is_answered_true_and_recorded_with_its_results() {
    let telegram = FakeTelegram::start().await.unwrap();
    let results = json!([{
        "type": "article", "id": "shout", "title": "Shout HELLO",
        "input_message_content": { "message_text": "HELLO" },
    }]);

    let (status, body) = call(
        &telegram,
        "answerInlineQuery",
        json!({ "inline_query_id": "4382139112311411203", "results": results }),
    )
    .await;
    let (empty, _) = call(
        &telegram,
        "answerInlineQuery",
        json!({ "inline_query_id": "4382139112311411204", "results": [] }),
    )
    .await;

    assert_eq!((status, body), (200, json!({ "ok": true, "result": true })));
    assert_eq!(empty, 200, "no results is an answer too");
    let calls = telegram.delivered();
    assert_eq!(calls[0].method, "answerInlineQuery");
    assert_eq!(calls[0].params["results"], results);
    assert_eq!((calls[0].chat_id, calls[0].message_id), (None, None));
}

#[tokio::test]
async fn an_inline_answer_without_a_query_id_or_with_a_result_lacking_its_id_is_refused() {
    let telegram = FakeTelegram::start().await.unwrap();

    let (no_id, no_id_body) = call(&telegram, "answerInlineQuery", json!({ "results": [] })).await;
    let (bad_result, bad_result_body) = call(
        &telegram,
        "answerInlineQuery",
        json!({ "inline_query_id": "1", "results": [{ "type": "article" }] }),
    )
    .await;

    assert_eq!((no_id, bad_result), (400, 400));
    assert_eq!(
        no_id_body["description"],
        "Bad Request: query is too old and response timeout expired or query ID is invalid"
    );
    assert_eq!(
        bad_result_body["description"],
        "Bad Request: can't parse inline query result: Can't find field \"id\""
    );
    assert!(telegram.delivered().is_empty());
    assert_eq!(telegram.calls().len(), 2, "refused calls are recorded too");
}

#[tokio::test]
async fn set_my_commands_takes_a_valid_list_and_refuses_a_name_telegram_does_not_allow() {
    let telegram = FakeTelegram::start().await.unwrap();
    let commands =
        |name: &str| json!({ "commands": [{ "command": name, "description": "Rolls a die." }] });

    let (status, body) = call(&telegram, "setMyCommands", commands("roll")).await;
    let (refused, refused_body) = call(&telegram, "setMyCommands", commands("Roll")).await;

    assert_eq!((status, body), (200, json!({ "ok": true, "result": true })));
    assert_eq!(refused, 400);
    assert_eq!(
        refused_body["description"],
        "Bad Request: BOT_COMMAND_INVALID"
    );
}

#[tokio::test]
async fn get_chat_describes_private_chats_groups_and_channels() {
    let telegram = FakeTelegram::start().await.unwrap();

    let (_, private) = call(&telegram, "getChat", json!({ "chat_id": 42 })).await;
    let (_, group) = call(&telegram, "getChat", json!({ "chat_id": -100_200 })).await;
    let (_, channel) = call(&telegram, "getChat", json!({ "chat_id": "@news" })).await;
    let (missing, missing_body) = call(&telegram, "getChat", json!({})).await;

    assert_eq!(private["result"]["id"], 42);
    assert_eq!(private["result"]["type"], "private");
    assert_eq!(group["result"]["type"], "supergroup");
    assert_eq!(channel["result"]["type"], "channel");
    assert_eq!(channel["result"]["username"], "news");
    assert_eq!(missing, 400);
    assert_eq!(missing_body["description"], "Bad Request: chat_id is empty");
}

#[tokio::test]
async fn get_updates_serves_pushed_updates_until_an_offset_confirms_them() {
    let telegram = FakeTelegram::start().await.unwrap();
    telegram.push_update(json!({ "update_id": 7, "message": { "text": "a" } }));
    telegram.push_update(json!({ "message": { "text": "b" } }));

    let (_, first) = call(&telegram, "getUpdates", json!({})).await;
    let (_, again) = call(&telegram, "getUpdates", json!({ "limit": 1 })).await;
    let (_, confirmed) = call(&telegram, "getUpdates", json!({ "offset": 8 })).await;
    let (_, drained) = call(&telegram, "getUpdates", json!({ "offset": 9 })).await;

    let ids = |body: &serde_json::Value| -> Vec<i64> {
        body["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|update| update["update_id"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(ids(&first), vec![7, 8]);
    assert_eq!(ids(&again), vec![7]);
    assert_eq!(ids(&confirmed), vec![8]);
    assert_eq!(ids(&drained), Vec::<i64>::new());
}

#[tokio::test]
async fn get_updates_long_poll_returns_as_soon_as_an_update_is_pushed() {
    let telegram = FakeTelegram::start_with(FakeConfig {
        long_poll_cap: Duration::from_secs(120),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let polling = {
        let telegram = telegram.clone();
        tokio::spawn(async move { call(&telegram, "getUpdates", json!({ "timeout": 300 })).await })
    };
    wait_until("the poll waits for an update", || {
        telegram.waiting_polls() == 1
    })
    .await;

    telegram.push_update(json!({ "update_id": 1 }));

    // Woken by the push, not by its two-minute cap running out.
    let (_, body) = tokio::time::timeout(Duration::from_secs(60), polling)
        .await
        .expect("the push woke the waiting poll")
        .unwrap();
    assert_eq!(body["result"], json!([{ "update_id": 1 }]));
    assert_eq!(telegram.waiting_polls(), 0);
    assert_eq!(telegram.handed_out(), vec![1]);
}

#[tokio::test]
async fn get_updates_long_poll_gives_up_empty_at_its_cap_not_the_clients_timeout() {
    let cap = Duration::from_millis(300);
    let telegram = FakeTelegram::start_with(FakeConfig {
        long_poll_cap: cap,
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let started = Instant::now();

    let (status, body) = call(&telegram, "getUpdates", json!({ "timeout": 30 })).await;

    assert_eq!((status, body["result"].clone()), (200, json!([])));
    let waited = started.elapsed();
    assert!(waited >= cap, "it held the poll for its cap: {waited:?}");
    assert!(
        waited < Duration::from_secs(30),
        "it did not hold the poll for the 30 s the client asked: {waited:?}"
    );
}

#[tokio::test]
async fn get_updates_long_poll_ends_at_the_clients_timeout_when_it_is_shorter_than_the_cap() {
    let telegram = FakeTelegram::start_with(FakeConfig {
        long_poll_cap: Duration::from_secs(120),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let started = Instant::now();
    let (status, body) = call(&telegram, "getUpdates", json!({ "timeout": 1 })).await;
    assert_eq!((status, body["result"].clone()), (200, json!([])));
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(1) && waited < Duration::from_secs(30),
        "{waited:?}"
    );
}

#[tokio::test]
async fn get_updates_calls_that_overlap_in_time_are_counted_and_calls_one_after_another_are_not() {
    let telegram = FakeTelegram::start_with(FakeConfig {
        long_poll_cap: Duration::from_secs(120),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    call(&telegram, "getUpdates", json!({ "timeout": 0 })).await;
    call(&telegram, "getUpdates", json!({ "timeout": 0 })).await;
    assert_eq!(telegram.overlapping_polls(), 0);
    let first = {
        let telegram = telegram.clone();
        tokio::spawn(async move { call(&telegram, "getUpdates", json!({ "timeout": 300 })).await })
    };
    wait_until("the first poll waits", || telegram.waiting_polls() == 1).await;
    let (status, _) = call(&telegram, "getUpdates", json!({ "timeout": 0 })).await;
    assert_eq!(status, 200);
    assert_eq!(telegram.overlapping_polls(), 1);
    telegram.push_update(json!({ "update_id": 1 }));
    first.await.unwrap();
}

#[tokio::test]
async fn an_unconfirmed_update_is_handed_out_again_and_stays_pending() {
    let telegram = FakeTelegram::start().await.unwrap();
    telegram.push_update(json!({ "update_id": 4 }));
    telegram.push_update(json!({ "update_id": 5 }));

    call(&telegram, "getUpdates", json!({})).await;
    call(&telegram, "getUpdates", json!({ "offset": 5 })).await;

    assert_eq!(telegram.handed_out(), vec![4, 5, 5]);
    assert_eq!(telegram.pending_updates(), 1);
}

#[tokio::test]
async fn get_updates_is_refused_while_a_webhook_is_set() {
    let telegram = FakeTelegram::start().await.unwrap();
    telegram.set_webhook_url(Some("https://example.com/hook".to_owned()));

    let (status, body) = call(&telegram, "getUpdates", json!({})).await;

    assert_eq!(status, 409);
    assert_eq!(
        body["description"],
        "Conflict: can't use getUpdates method while webhook is active; \
         use deleteWebhook to delete the webhook first"
    );
    call(&telegram, "deleteWebhook", json!({})).await;
    let (status, _) = call(&telegram, "getUpdates", json!({})).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn webhook_info_reports_the_url_and_pending_updates() {
    let telegram = FakeTelegram::start().await.unwrap();
    call(
        &telegram,
        "setWebhook",
        json!({ "url": "https://example.com/hook" }),
    )
    .await;
    telegram.push_update(json!({ "update_id": 1 }));
    telegram.push_update(json!({ "update_id": 2 }));

    let (_, body) = call(&telegram, "getWebhookInfo", json!({})).await;

    assert_eq!(
        body["result"],
        json!({
            "url": "https://example.com/hook",
            "has_custom_certificate": false,
            "pending_update_count": 2,
        })
    );
}

#[tokio::test]
async fn delete_webhook_can_drop_pending_updates() {
    let telegram = FakeTelegram::start().await.unwrap();
    telegram.push_update(json!({ "update_id": 1 }));

    call(
        &telegram,
        "deleteWebhook",
        json!({ "drop_pending_updates": true }),
    )
    .await;
    let (_, body) = call(&telegram, "getWebhookInfo", json!({})).await;

    assert_eq!(body["result"]["pending_update_count"], 0);
    assert_eq!(body["result"]["url"], "");
}

#[tokio::test]
async fn calls_are_recorded_in_arrival_order_with_their_params() {
    let telegram = FakeTelegram::start().await.unwrap();
    send_text(&telegram, 1).await;
    call(&telegram, "getMe", json!({})).await;

    let calls = telegram.calls();

    assert_eq!(calls.len(), 2);
    assert_eq!((calls[0].seq, calls[0].method.as_str()), (1, "sendMessage"));
    assert_eq!(calls[0].params, json!({ "chat_id": 1, "text": "hello" }));
    assert_eq!((calls[1].seq, calls[1].method.as_str()), (2, "getMe"));
    assert!(calls[0].at <= calls[1].at);
}

#[tokio::test]
async fn shutdown_stops_the_server_for_every_handle() {
    let telegram = FakeTelegram::start().await.unwrap();
    let url = method_url(&telegram, "getMe");
    let other_handle = telegram.clone();

    telegram.shutdown().await;
    let refused = reqwest::Client::new().post(&url).send().await;

    assert!(refused.is_err());
    drop(other_handle);
}

#[tokio::test]
async fn dropping_the_last_handle_stops_the_server() {
    let telegram = FakeTelegram::start().await.unwrap();
    let url = method_url(&telegram, "getMe");
    let clone = telegram.clone();
    drop(telegram);
    assert!(reqwest::Client::new().post(&url).send().await.is_ok());

    drop(clone);

    let refused_within = Instant::now() + Duration::from_secs(30);
    while reqwest::Client::new().post(&url).send().await.is_ok() {
        assert!(
            Instant::now() < refused_within,
            "the server still answers 30 s after its last handle was dropped"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
