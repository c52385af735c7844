//! `POST /webhook`, `/healthz`, `/readyz` and the admin routes of `tgq local`, over real HTTP.

use crate::common;

use std::time::Duration;

use common::{message_update, Local};
use serde_json::Value;
use tempfile::TempDir;
use tgq_core::echo::reply_text;

const SECRET: &str = "webhook-test-secret";
const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

/// `tgq local` with [`SECRET`] and `envs`, ready, on a data directory of its own: removed when the
/// returned one is dropped.
async fn started(envs: &[(&str, &str)]) -> (TempDir, Local) {
    let dir = tempfile::tempdir().unwrap();
    let mut envs = envs.to_vec();
    envs.push(("TGQ_WEBHOOK_SECRET", SECRET));
    let mut local = Local::start(dir.path(), &envs, &[]);
    local.wait_ready().await;
    (dir, local)
}

async fn json(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}

/// `POST /webhook` of `body` to `local`, with `secret` in the secret header.
async fn post(local: &Local, secret: &str, body: impl Into<reqwest::Body>) -> reqwest::Response {
    reqwest::Client::new()
        .post(local.url("/webhook"))
        .header(SECRET_HEADER, secret)
        .body(body)
        .send()
        .await
        .unwrap()
}

/// `/admin/outbox` once `local` has processed its one update.
async fn outbox_after_one(local: &Local) -> Value {
    local
        .wait_settled(Duration::from_secs(20), |s| s["counters"]["processed"] == 1)
        .await;
    reqwest::get(local.admin_url("/admin/outbox"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn refused_requests_get_the_lambdas_status_codes_and_write_nothing() {
    let (_dir, local) = started(&[("TGQ_MAX_BODY_BYTES", "4096")]).await;
    let client = reqwest::Client::new();
    let body = message_update(1, 42, "hi").to_string();

    let (status, answer) = json(post(&local, "nope", body.clone()).await).await;
    assert_eq!(status, 401);
    assert_eq!(answer["ok"], false);

    let missing = client.post(local.url("/webhook")).body(body.clone());
    assert_eq!(missing.send().await.unwrap().status(), 401);

    let get = client
        .get(local.url("/webhook"))
        .header(SECRET_HEADER, SECRET);
    assert_eq!(get.send().await.unwrap().status(), 405);

    let huge = message_update(2, 42, &"x".repeat(5000)).to_string();
    let (status, answer) = json(post(&local, SECRET, huge).await).await;
    assert_eq!(status, 413);
    assert!(
        answer["result"].as_str().unwrap().contains("4096"),
        "{answer}"
    );

    let status = local.status().await;
    assert_eq!(status["counters"]["received"], 0, "{status}");
    assert_eq!(status["stats"]["records"], 0, "{status}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_accepted_update_is_answered_200_and_its_reply_lands_in_the_outbox() {
    let (_dir, local) = started(&[]).await;
    let body = message_update(7, 4242, "ping over http").to_string();

    let (status, answer) = json(post(&local, SECRET, body.clone()).await).await;
    assert_eq!(
        (status, answer.clone()),
        (200, serde_json::json!({"ok": true, "result": "queued"}))
    );
    let (status, answer) = json(post(&local, SECRET, body).await).await;
    assert_eq!(status, 200);
    assert!(
        answer["result"].as_str().unwrap().starts_with("duplicate"),
        "{answer}"
    );

    let outbox = outbox_after_one(&local).await;
    let entries = outbox["result"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{outbox}");
    assert_eq!(entries[0]["chat_id"], 4242);
    assert_eq!(entries[0]["method"], "sendMessage");
    assert_eq!(entries[0]["text"], reply_text(7, "ping over http"));
    assert_eq!(
        (entries[0]["update_id"].clone(), entries[0]["seq"].clone()),
        (7.into(), 1.into())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_ack_callbacks_a_callback_query_is_answered_in_the_reply_and_not_again_by_the_worker()
{
    let (_dir, local) = started(&[("TGQ_ACK_CALLBACKS", "true")]).await;
    let body = include_str!("../../../events/updates/callback_query.json");
    let (status, answer) = json(post(&local, SECRET, body).await).await;
    assert_eq!(
        (status, answer),
        (
            200,
            serde_json::json!({"method": "answerCallbackQuery", "callback_query_id": "4382139112311411201"})
        )
    );
    let outbox = outbox_after_one(&local).await;
    let methods: Vec<&str> = outbox["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        ["sendMessage"],
        "the echo bot's own answer to the query is not made again: {outbox}"
    );
}

/// A client that sends `head`, then (if `chunks` is given) a chunked body one piece at a time,
/// pausing between pieces, until the server answers; then the terminating chunk if it never did.
/// Returns the whole answer, the body bytes sent before its head came, and whether the whole body
/// was sent.
async fn stream_until_answered(
    local: &Local,
    head: String,
    chunks: Option<(usize, usize)>,
) -> (String, usize, bool) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    let stream = tokio::net::TcpStream::connect(local.addr).await.unwrap();
    let (mut from_server, mut to_server) = stream.into_split();
    // The answer so far, and whether the server has closed the connection after it.
    let (answered, mut answer) = tokio::sync::watch::channel((String::new(), false));
    tokio::spawn(async move {
        let mut text = Vec::new();
        let mut buffer = [0u8; 4096];
        while let Ok(read @ 1..) = from_server.read(&mut buffer).await {
            text.extend_from_slice(&buffer[..read]);
            answered.send_replace((String::from_utf8_lossy(&text).into_owned(), false));
        }
        answered.send_replace((String::from_utf8_lossy(&text).into_owned(), true));
    });
    // The status line and the headers are in: the server has answered.
    let head_arrived = |answer: &tokio::sync::watch::Receiver<(String, bool)>| {
        answer.borrow().0.contains("\r\n\r\n")
    };
    to_server.write_all(head.as_bytes()).await.unwrap();
    let mut sent = 0;
    let mut finished = true;
    if let Some((count, size)) = chunks {
        let piece = format!("{size:x}\r\n{}\r\n", "x".repeat(size));
        finished = false;
        for _ in 0..count {
            // Every piece after the answer would be wasted: a slow client notices and stops.
            if head_arrived(&answer) {
                break;
            }
            if to_server.write_all(piece.as_bytes()).await.is_err() {
                break;
            }
            sent += size;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if !head_arrived(&answer) && to_server.write_all(b"0\r\n\r\n").await.is_ok() {
            finished = true;
        }
    }
    let closed = answer.wait_for(|(_, closed)| *closed);
    let whole = tokio::time::timeout(Duration::from_secs(60), closed)
        .await
        .expect("the server answers and closes the connection")
        .expect("the reader reports")
        .0
        .clone();
    (whole, sent, finished)
}

/// Streams to a `tgq local` whose body limit is 1000 bytes a `POST /webhook` whose body is framed
/// by `framing` (a Transfer-Encoding or a Content-Length header), as [`stream_until_answered`]
/// does, and checks that it is refused with 413 and nothing is stored. Returns what
/// `stream_until_answered` does.
async fn refused_as_too_large(
    framing: &str,
    chunks: Option<(usize, usize)>,
) -> (String, usize, bool) {
    let (_dir, local) = started(&[("TGQ_MAX_BODY_BYTES", "1000")]).await;
    let head = format!(
        "POST /webhook HTTP/1.1\r\nHost: {}\r\n{SECRET_HEADER}: {SECRET}\r\n\
         {framing}\r\nConnection: close\r\n\r\n",
        local.addr
    );

    let (answer, sent, finished) = stream_until_answered(&local, head, chunks).await;

    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert_eq!(local.status().await["stats"]["records"], 0);
    (answer, sent, finished)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chunked_body_over_the_limit_is_refused_with_413_while_it_streams() {
    // No Content-Length: the limit can only be found by reading. The client has 1 MB to send, a
    // quarter KB every 10 ms (40 s in all); the answer must come once the limit is passed.
    let (_, sent, finished) =
        refused_as_too_large("Transfer-Encoding: chunked", Some((4096, 256))).await;
    assert!(
        !finished,
        "the 413 came only after the client had sent the whole body ({sent} bytes)"
    );
    assert!(
        sent > 1000,
        "the refusal came after {sent} bytes, before the limit was even reached"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_declared_length_over_the_limit_is_refused_before_a_byte_of_the_body() {
    let (answer, _, _) = refused_as_too_large("Content-Length: 1000000", None).await;
    assert!(
        answer.contains("1000"),
        "the answer names the limit: {answer}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn health_and_readiness_answer_once_the_worker_loops_run() {
    let (_dir, local) = started(&[]).await;
    let (status, answer) = json(reqwest::get(local.url("/healthz")).await.unwrap()).await;
    assert_eq!((status, answer["result"].as_str()), (200, Some("alive")));
    let (status, answer) = json(reqwest::get(local.url("/readyz")).await.unwrap()).await;
    assert_eq!((status, answer["result"].as_str()), (200, Some("ready")));
}

#[tokio::test(flavor = "multi_thread")]
async fn admin_routes_refuse_a_forwarded_request_without_the_token_and_admit_it_with_the_token() {
    let (_dir, local) = started(&[("TGQ_ADMIN_TOKEN", "let-me-in")]).await;
    let client = reqwest::Client::new();
    // A tunnel on this machine connects from loopback but forwards someone else's request.
    let forwarded = || {
        client
            .get(local.admin_url("/admin/status"))
            .header("x-forwarded-for", "203.0.113.9")
    };

    let (status, answer) = json(forwarded().send().await.unwrap()).await;
    assert_eq!(status, 403);
    assert!(
        answer["result"]
            .as_str()
            .unwrap()
            .contains("TGQ_ADMIN_TOKEN"),
        "{answer}"
    );
    let (status, _) = json(forwarded().bearer_auth("wrong").send().await.unwrap()).await;
    assert_eq!(status, 403);
    let (status, answer) = json(forwarded().bearer_auth("let-me-in").send().await.unwrap()).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["result"]["stats"]["pending"].is_u64(), "{answer}");

    // A direct loopback client needs no token.
    let (status, _) = json(
        client
            .get(local.admin_url("/admin/outbox"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_generated_secret_is_kept_with_mode_0600_reused_and_never_printed() {
    use std::os::unix::fs::PermissionsExt as _;

    let dir = tempfile::tempdir().unwrap();
    let mut local = Local::start(dir.path(), &[], &[]);
    local.wait_ready().await;
    let path = dir.path().join("webhook-secret");
    let secret = std::fs::read_to_string(&path).unwrap().trim().to_owned();
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );

    let body = message_update(9, 77, "hello").to_string();
    assert_eq!(post(&local, &secret, body).await.status(), 200);
    assert!(local.terminate().await.success());

    let mut again = Local::start(dir.path(), &[], &[]);
    again.wait_ready().await;
    let body = message_update(10, 77, "hello again").to_string();
    assert_eq!(
        post(&again, &secret, body).await.status(),
        200,
        "the kept secret is used again"
    );
    assert!(again.terminate().await.success());

    for (stdout, stderr) in [local.output(), again.output()] {
        assert!(!stdout.contains(&secret) && !stderr.contains(&secret));
        assert!(
            stdout.contains(&path.display().to_string()),
            "says where the secret is: {stdout}"
        );
    }
}
