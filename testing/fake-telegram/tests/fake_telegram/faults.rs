//! Injected faults are answered with Telegram's own error envelopes and consumed in order.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::{call, send_text};
use tgq_fake_telegram::{FakeTelegram, Fault, Scope, Times};

#[tokio::test]
async fn chat_scoped_429_carries_retry_after_and_is_not_delivered() {
    let telegram = FakeTelegram::start().await.unwrap();
    telegram.inject(Fault::RetryAfter(5), Scope::Chat(42), Times::Once);

    let (status, body) = send_text(&telegram, 42).await;

    assert_eq!(status, 429);
    assert_eq!(
        body,
        json!({
            "ok": false,
            "error_code": 429,
            "description": "Too Many Requests: retry after 5",
            "parameters": { "retry_after": 5 },
        })
    );
    assert_eq!(telegram.calls().len(), 1);
    assert_eq!(telegram.calls()[0].status, 429);
    assert!(telegram.delivered_to(42).is_empty());
}

#[tokio::test]
async fn a_once_fault_refuses_only_the_next_call() {
    let telegram = FakeTelegram::start().await.unwrap();
    telegram.inject(Fault::ServerError(502), Scope::Global, Times::Once);

    let (first, body) = send_text(&telegram, 1).await;
    let (second, _) = send_text(&telegram, 1).await;

    assert_eq!((first, second), (502, 200));
    assert_eq!(body["description"], "Bad Gateway");
    assert_eq!(telegram.delivered_to(1).len(), 1);
}

#[tokio::test]
async fn an_n_times_fault_refuses_exactly_n_calls() {
    let telegram = FakeTelegram::start().await.unwrap();
    telegram.inject(Fault::ServerError(500), Scope::Global, Times::N(2));

    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(send_text(&telegram, 1).await.0);
    }

    assert_eq!(statuses, vec![500, 500, 200]);
}

#[tokio::test]
async fn an_always_fault_lasts_until_faults_are_cleared() {
    let telegram = FakeTelegram::start().await.unwrap();
    telegram.inject(Fault::Blocked, Scope::Chat(9), Times::Always);

    let (first, body) = send_text(&telegram, 9).await;
    let (second, _) = send_text(&telegram, 9).await;
    telegram.clear_faults();
    let (after_clear, _) = send_text(&telegram, 9).await;

    assert_eq!((first, second, after_clear), (403, 403, 200));
    assert_eq!(
        body["description"],
        "Forbidden: bot was blocked by the user"
    );
}

#[tokio::test]
async fn a_chat_scoped_fault_takes_precedence_over_a_global_one() {
    let telegram = FakeTelegram::start().await.unwrap();
    telegram.inject(Fault::ServerError(503), Scope::Global, Times::Once);
    telegram.inject(Fault::ChatNotFound, Scope::Chat(7), Times::Once);

    let (first, first_body) = send_text(&telegram, 7).await;
    let (second, second_body) = send_text(&telegram, 7).await;
    let (third, _) = send_text(&telegram, 7).await;

    assert_eq!((first, second, third), (400, 503, 200));
    assert_eq!(first_body["description"], "Bad Request: chat not found");
    assert_eq!(second_body["description"], "Service Unavailable");
}

#[tokio::test]
async fn a_chat_scoped_fault_leaves_other_chats_alone() {
    let telegram = FakeTelegram::start().await.unwrap();
    telegram.inject(Fault::Blocked, Scope::Chat(1), Times::Always);

    let (status, _) = send_text(&telegram, 2).await;

    assert_eq!(status, 200);
    assert_eq!(telegram.delivered_to(2).len(), 1);
}

#[tokio::test]
async fn migrate_fault_names_the_supergroup_to_use() {
    let telegram = FakeTelegram::start().await.unwrap();
    telegram.inject(
        Fault::MigrateToChat(-1_001_234),
        Scope::Chat(-55),
        Times::Once,
    );

    let (status, body) = send_text(&telegram, -55).await;

    assert_eq!(status, 400);
    assert_eq!(
        body,
        json!({
            "ok": false,
            "error_code": 400,
            "description": "Bad Request: group chat was upgraded to a supergroup chat",
            "parameters": { "migrate_to_chat_id": -1_001_234 },
        })
    );
}

#[tokio::test]
async fn unauthorized_fault_answers_401_to_the_right_token() {
    let telegram = FakeTelegram::start().await.unwrap();
    telegram.inject(Fault::Unauthorized, Scope::Global, Times::Once);

    let (status, body) = send_text(&telegram, 1).await;

    assert_eq!(status, 401);
    assert_eq!(body["description"], "Unauthorized");
}

#[tokio::test]
async fn faults_spare_get_me_get_updates_set_my_commands_and_the_webhook_methods() {
    let telegram = FakeTelegram::start().await.unwrap();
    telegram.inject(Fault::ServerError(500), Scope::Global, Times::Once);

    for method in [
        "getMe",
        "getUpdates",
        "setWebhook",
        "getWebhookInfo",
        "deleteWebhook",
        "setMyCommands",
    ] {
        let (status, _) = call(&telegram, method, json!({})).await;
        assert_eq!(status, 200, "{method}");
    }
    let (status, _) = call(
        &telegram,
        "answerCallbackQuery",
        json!({ "callback_query_id": "1" }),
    )
    .await;
    assert_eq!(
        status, 500,
        "the fault is still queued for the first call that accepts it"
    );
}

#[tokio::test]
async fn timeout_fault_delays_the_answer() {
    let telegram = FakeTelegram::start().await.unwrap();
    telegram.inject(
        Fault::Timeout(Duration::from_millis(400)),
        Scope::Chat(3),
        Times::Once,
    );
    let started = Instant::now();

    let (status, body) = send_text(&telegram, 3).await;

    assert!(started.elapsed() >= Duration::from_millis(400));
    assert_eq!(status, 200);
    assert_eq!(body["result"]["message_id"], 1);
    assert_eq!(telegram.delivered_to(3).len(), 1, "the message got through");
}

#[tokio::test]
async fn a_client_that_times_out_still_leaves_the_message_delivered() {
    let telegram = FakeTelegram::start().await.unwrap();
    telegram.inject(
        Fault::Timeout(Duration::from_secs(30)),
        Scope::Global,
        Times::Once,
    );
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();

    let outcome = client
        .post(support::method_url(&telegram, "sendMessage"))
        .json(&json!({ "chat_id": 4, "text": "hello" }))
        .send()
        .await;

    assert!(outcome.unwrap_err().is_timeout());
    assert_eq!(telegram.delivered_to(4).len(), 1);
    let started = Instant::now();
    telegram.shutdown().await;
    // Half the 30 s hold: a shutdown that waited the hold out could not finish in time.
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "shutdown cuts the held answer short"
    );
}

#[tokio::test]
async fn a_send_before_retry_after_ran_out_and_an_answer_the_client_gave_up_on_are_counted() {
    let telegram = FakeTelegram::start().await.unwrap();
    let url = format!("{}/bot{}/sendMessage", telegram.url(), telegram.token());
    let http = reqwest::Client::new();
    let send = |chat: i64| {
        http.post(&url)
            .json(&serde_json::json!({ "chat_id": chat, "text": "hi" }))
            .send()
    };
    telegram.inject(Fault::RetryAfter(5), Scope::Chat(1), Times::Once);
    assert_eq!(send(1).await.unwrap().status(), 429);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(
        send(1).await.unwrap().status(),
        200,
        "the fault was used up"
    );
    assert_eq!(send(2).await.unwrap().status(), 200);
    assert_eq!(telegram.violations().early_sends, 1, "chat 1 only");

    telegram.inject(
        Fault::Timeout(std::time::Duration::from_secs(2)),
        Scope::Chat(3),
        Times::Once,
    );
    let impatient = http
        .post(&url)
        .timeout(std::time::Duration::from_millis(300))
        .json(&serde_json::json!({ "chat_id": 3, "text": "hi" }))
        .send()
        .await;
    assert!(impatient.is_err(), "the client gave up");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let delivered = telegram.delivered_to(3);
    assert_eq!(delivered.len(), 1, "the call took effect");
    assert_eq!(
        telegram.violations().unanswered,
        std::collections::BTreeSet::from([delivered[0].seq])
    );
}

#[tokio::test]
async fn an_inline_query_answer_sees_global_faults() {
    let telegram = FakeTelegram::start().await.unwrap();
    telegram.inject(Fault::ServerError(502), Scope::Global, Times::Once);
    let answer = json!({ "inline_query_id": "7", "results": [] });

    let (first, _) = call(&telegram, "answerInlineQuery", answer.clone()).await;
    let (second, _) = call(&telegram, "answerInlineQuery", answer).await;

    assert_eq!((first, second), (502, 200));
}

/// A sender killed the moment after writing its request: Telegram got the whole call and acts on
/// it, and the client never reads the answer. Each such call is recorded and counted unanswered.
#[tokio::test]
async fn a_call_written_in_full_takes_effect_though_the_client_leaves_at_once() {
    use tokio::io::AsyncWriteExt;

    let telegram = FakeTelegram::start().await.unwrap();
    let path = format!("/bot{}/sendMessage", telegram.token());
    for chat in 1..=20 {
        let body = json!({ "chat_id": chat, "text": "hi" }).to_string();
        let request = format!(
            "POST {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n{body}",
            telegram.addr(),
            body.len()
        );
        let mut socket = tokio::net::TcpStream::connect(telegram.addr())
            .await
            .unwrap();
        socket.write_all(request.as_bytes()).await.unwrap();
        drop(socket);
    }

    let deadline = Instant::now() + Duration::from_secs(5);
    while telegram.calls().len() < 20 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let calls = telegram.calls();
    assert_eq!(calls.len(), 20, "every call written in full is recorded");
    assert!(calls.iter().all(|call| call.status == 200));
    assert_eq!(
        telegram.violations().unanswered,
        calls.iter().map(|call| call.seq).collect(),
        "no client read its answer"
    );
}

/// A request cut off before its end never reached the Bot API: nothing is recorded.
#[tokio::test]
async fn a_call_cut_off_midway_takes_no_effect() {
    use tokio::io::AsyncWriteExt;

    let telegram = FakeTelegram::start().await.unwrap();
    let body = json!({ "chat_id": 1, "text": "hi" }).to_string();
    let request = format!(
        "POST /bot{}/sendMessage HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{}",
        telegram.token(),
        telegram.addr(),
        body.len(),
        &body[..body.len() / 2]
    );
    let mut socket = tokio::net::TcpStream::connect(telegram.addr())
        .await
        .unwrap();
    socket.write_all(request.as_bytes()).await.unwrap();
    drop(socket);

    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(telegram.delivered_to(1).is_empty());
}

/// A call written on a kept-alive connection just as the fake goes away crosses the close: the
/// client sees the connection end with no answer. Telegram may have taken it, so its caller is
/// right to doubt it; the fake takes it and counts it unanswered rather than throw it away
/// unread, which would make that doubt look groundless.
#[tokio::test]
async fn a_call_that_crosses_the_fake_s_close_is_taken_and_counted_unanswered() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let telegram = FakeTelegram::start().await.unwrap();
    let request = |chat: i64| {
        let body = json!({ "chat_id": chat, "text": "hi" }).to_string();
        format!(
            "POST /bot{}/sendMessage HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n{body}",
            telegram.token(),
            telegram.addr(),
            body.len()
        )
    };
    let mut socket = tokio::net::TcpStream::connect(telegram.addr())
        .await
        .unwrap();
    socket.write_all(request(1).as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    while !String::from_utf8_lossy(&answer).ends_with('}') {
        let mut chunk = [0_u8; 4096];
        let read = socket.read(&mut chunk).await.unwrap();
        assert!(read > 0, "the first call is answered");
        answer.extend_from_slice(&chunk[..read]);
    }

    // The fake goes away; its close of the idle connection reaches the client after the client
    // wrote its next call.
    let stopping = tokio::spawn(telegram.clone().shutdown());
    // The close reaches the client: the end of its input.
    let closed_by = Instant::now() + Duration::from_secs(5);
    loop {
        socket.readable().await.unwrap();
        let mut byte = [0_u8; 1];
        if socket.peek(&mut byte).await.unwrap() == 0 {
            break;
        }
        assert!(
            Instant::now() < closed_by,
            "the fake closed the idle connection"
        );
    }
    socket.write_all(request(2).as_bytes()).await.unwrap();
    socket.shutdown().await.unwrap();
    let mut rest = Vec::new();
    let _ = socket.read_to_end(&mut rest).await;
    stopping.await.unwrap();

    assert!(rest.is_empty(), "no answer to the second call");
    let calls = telegram.calls();
    assert_eq!(
        calls.iter().map(|c| c.chat_id).collect::<Vec<_>>(),
        [Some(1), Some(2)],
        "both calls taken"
    );
    assert_eq!(
        telegram.violations().unanswered,
        [calls[1].seq].into(),
        "only the second went unanswered"
    );
}

/// A call whose connection the kernel completed but the fake had not yet accepted when it went
/// away sits in the listen backlog: closing the listener would reset it unread, and its client,
/// whose request was written, would rightly doubt a call the fake never counted. The fake takes
/// what the backlog holds as it takes the calls that cross its close.
///
/// The test runs on one thread: the fake's server task is first polled inside `shutdown`, after
/// the close, so the call is still in the backlog when the fake stops accepting.
#[tokio::test(flavor = "current_thread")]
async fn a_call_left_in_the_listen_backlog_at_the_close_is_taken_and_counted_unanswered() {
    use std::io::{Read, Write};

    let telegram = FakeTelegram::start().await.unwrap();
    let body = json!({ "chat_id": 7, "text": "hi" }).to_string();
    let request = format!(
        "POST /bot{}/sendMessage HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        telegram.token(),
        telegram.addr(),
        body.len()
    );
    // Blocking calls: the kernel completes the connection and takes the request while the
    // fake's task has not run.
    let mut socket = std::net::TcpStream::connect(telegram.addr()).unwrap();
    socket.write_all(request.as_bytes()).unwrap();

    telegram.clone().shutdown().await;

    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut rest = Vec::new();
    let _ = socket.read_to_end(&mut rest);
    assert!(rest.is_empty(), "no answer to the call");
    let calls = telegram.calls();
    assert_eq!(
        calls.iter().map(|c| c.chat_id).collect::<Vec<_>>(),
        [Some(7)],
        "the call in the backlog taken"
    );
    assert_eq!(
        telegram.violations().unanswered,
        [calls[0].seq].into(),
        "and counted unanswered"
    );
}
