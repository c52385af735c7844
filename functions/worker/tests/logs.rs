//! The functions' logs at trace level, every path driven through the handlers: JSON lines that
//! carry the request id and the update's ids, and never the bot token, the webhook secret or message
//! text. One test: the log subscriber is global to the process.

// A test binary of its own, apart from tests/worker: its subscriber is the process's, and the
// worker's other tests, run beside it in one process, left the record's span out of its lines.
#[path = "worker/common/mod.rs"]
mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use bytes::Bytes;
use lambda_http::{Body, RequestExt as _};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::Value;
use tgq_core::clock::{Clock, SystemClock};
use tgq_core::ids::{BotId, GroupKey, RecordKey, UpdateId};
use tgq_core::ingest::SECRET_HEADER;
use tgq_core::ports::{ClaimRequest, UpdateLedger};
use tgq_fake_telegram::{FakeConfig, FakeTelegram, Fault, Scope, Times};
use tgq_memory::MemoryStore;
use tracing_subscriber::EnvFilter;

const TOKEN: &str = "987654:NEVER-LOGGED-bot-token";
const SECRET: &str = "never-logged-webhook-secret";
const TEXT: &str = "never logged message text";

/// Every log line, as the functions write them.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// The fake Bot API on its own thread and runtime, outside the captured logs: it is the test's
/// Telegram, not the function under test.
fn fake_telegram() -> FakeTelegram {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _quiet = tracing::subscriber::set_default(tracing::subscriber::NoSubscriber::new());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let config = FakeConfig {
                token: TOKEN.to_owned(),
                ..FakeConfig::default()
            };
            let fake = FakeTelegram::start_with(config).await.unwrap();
            sender.send(fake.clone()).unwrap();
            std::future::pending::<()>().await;
        });
    });
    receiver.recv().unwrap()
}

fn update(update_id: i64, chat: i64) -> String {
    format!(
        r#"{{"update_id":{update_id},"message":{{"message_id":{update_id},"date":0,"chat":{{"id":{chat},"type":"private","first_name":"A"}},"text":"{TEXT}"}}}}"#
    )
}

async fn webhook_paths() {
    let store = Arc::new(MemoryStore::new());
    let webhook = common::memory_webhook(&store, SECRET, &[("TGQ_MAX_BODY_BYTES", "2048")]);
    let post = |secret: &str, body: String| {
        let mut context = Context::default();
        context.request_id = "req-webhook".into();
        lambda_http::http::Request::builder()
            .method("POST")
            .header(SECRET_HEADER, secret)
            .body(Body::from(body))
            .unwrap()
            .with_lambda_context(context)
    };
    let status = |request| async {
        let response = tgq_aws::webhook::handle(&webhook, &Default::default(), request)
            .await
            .unwrap();
        response.status().as_u16()
    };
    assert_eq!(status(post(SECRET, update(1, 5))).await, 200, "accepted");
    assert_eq!(status(post(SECRET, update(1, 5))).await, 200, "duplicate");
    let poison = format!(r#"{{"text": "{TEXT}"}}"#);
    assert_eq!(status(post(SECRET, poison)).await, 200, "poison");
    let wrong = format!("{SECRET}-but-wrong");
    assert_eq!(status(post(&wrong, update(2, 5))).await, 401);
    let oversized = format!(r#"{{"update_id":3,"text":"{}"}}"#, TEXT.repeat(100));
    assert_eq!(status(post(SECRET, oversized)).await, 413);
    store.outage.set(true);
    assert_eq!(status(post(SECRET, update(4, 5))).await, 503);
    store.outage.set(false);
}

async fn worker_paths(fake: &FakeTelegram) {
    let vars = common::demo_vars(TOKEN);
    let store = Arc::new(MemoryStore::new());
    let worker = common::echo_worker(&vars, fake, Duration::from_millis(500), store.clone());
    // Chat 10 goes through; 20 gets a 502 (retry); 30 is refused as a bad request (dead letter); 40's
    // answer comes too late (a send failure whose outcome is unknown), then is sent again; 50's
    // previous run died holding its lease, so it runs after the others, in a pass of its own.
    let now = SystemClock.now();
    store
        .claim(&ClaimRequest {
            key: RecordKey::new(BotId::new("demo").unwrap(), UpdateId(51)),
            group: GroupKey::new("50"),
            payload: Bytes::from(update(51, 50)),
            now,
            lease_until: now.plus(Duration::from_millis(1)),
            expires_at: now.plus(Duration::from_secs(3600)),
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    fake.inject(Fault::ServerError(502), Scope::Chat(20), Times::Once);
    fake.inject(Fault::BadRequest, Scope::Chat(30), Times::Once);
    fake.inject(
        Fault::Timeout(Duration::from_secs(1)),
        Scope::Chat(40),
        Times::Once,
    );
    let records: Vec<Value> = [(11, 10), (21, 20), (31, 30), (41, 40), (51, 50)]
        .iter()
        .map(|(id, chat)| {
            serde_json::json!({
                "messageId": format!("m-{id}"),
                "receiptHandle": format!("r-{id}"),
                "body": update(*id, *chat),
                "attributes": {
                    "MessageGroupId": format!("demo:{chat}"),
                    "ApproximateReceiveCount": "1",
                },
                "messageAttributes": {},
                "eventSource": "aws:sqs",
            })
        })
        .collect();
    let event: SqsEvent =
        serde_json::from_value(serde_json::json!({ "Records": records })).unwrap();
    for _ in 0..2 {
        let mut context = Context::default();
        context.request_id = "req-worker".into();
        context.deadline = SystemClock.now().plus(Duration::from_secs(60)).0;
        tgq_aws::worker::handle(&worker, LambdaEvent::new(event.clone(), context))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "current_thread")]
async fn no_path_logs_the_token_the_secret_or_message_text_at_trace_level() {
    let fake = fake_telegram();
    let captured = Captured::default();
    let sink = captured.clone();
    let subscriber = tgq_aws::json_logs(EnvFilter::new("trace"), move || sink.clone());
    tracing::subscriber::set_global_default(subscriber).unwrap();

    webhook_paths().await;
    worker_paths(&fake).await;
    let logs = captured.text();

    let lines: Vec<Value> = logs
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    assert!(
        lines.iter().any(|l| l["level"] == "TRACE"),
        "trace level is on"
    );
    for (request_id, outcome) in [
        ("req-webhook", "poison update dead-lettered"),
        ("req-webhook", "the update could not be made durable"),
        ("req-worker", "run failed; retrying"),
        ("req-worker", "dead-lettering update"),
        ("req-worker", "processed"),
    ] {
        let line = lines
            .iter()
            .find(|l| {
                l["fields"]["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with(outcome))
            })
            .unwrap_or_else(|| panic!("no line says {outcome:?}"));
        let text = line.to_string();
        assert!(
            text.contains(&format!(r#""request_id":"{request_id}""#)),
            "{text}"
        );
    }
    // Every run's lines name its update: the first pass's and the resumed one's (which ran
    // outside the record's span, its lines naming no update: the drill could not tell which
    // update tgq said it sent again).
    let processed: Vec<String> = lines
        .iter()
        .filter(|l| l["fields"]["message"] == "processed")
        .map(Value::to_string)
        .collect();
    assert!(
        processed.iter().any(|p| p.contains(r#""update_id":51"#)),
        "the resumed update was processed: {processed:#?}"
    );
    for line in &processed {
        for field in ["bot_id", "update_id", "group", "attempt"] {
            assert!(
                line.contains(&format!(r#""{field}":"#)),
                "{field} in {line}"
            );
        }
    }
    for (what, secret) in [
        ("the bot token", TOKEN),
        ("the token's secret part", "NEVER-LOGGED-bot-token"),
        ("the webhook secret", SECRET),
        ("message text", TEXT),
    ] {
        let leaked: Vec<&str> = logs.lines().filter(|l| l.contains(secret)).collect();
        assert!(leaked.is_empty(), "{what} is logged: {leaked:#?}");
    }
}
