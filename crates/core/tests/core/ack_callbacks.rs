//! `TGQ_ACK_CALLBACKS`: the webhook answers a queued callback query in its reply body, and the
//! worker takes the handler's own answer to that query as done without a call.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use secrecy::SecretString;
use serde_json::{json, Value};
use tgq_core::clock::SystemClock;
use tgq_core::echo::EchoBot;
use tgq_core::ids::{BotId, RecordKey, UpdateId};
use tgq_core::ingest::{Ingest, Ingested, Reply, Webhook, WebhookPorts, WebhookSettings};
use tgq_core::record::{ActionResult, ActionState, Status};
use tgq_core::worker::{RecordOutcome, WorkerSettings};
use tgq_memory::Harness;
use tgq_memory::{MemoryDeadLetters, MemoryQueue, MemoryStore, RecordingBotApi};

const CALLBACK: &str = include_str!("../../../../events/updates/callback_query.json");
const MESSAGE: &str = include_str!("../../../../events/updates/message.json");
const CALLBACK_ID: &str = "4382139112311411201";

struct Rig {
    webhook: Webhook,
    store: Arc<MemoryStore>,
    queue: Arc<MemoryQueue>,
}

fn rig(ack_callbacks: bool) -> Rig {
    let store = Arc::new(MemoryStore::new());
    let queue = Arc::new(MemoryQueue::new(Arc::new(SystemClock)));
    let settings = WebhookSettings {
        bot_id: BotId::new("demo").unwrap(),
        secret: SecretString::from("tgq-example-secret".to_owned()),
        max_body_bytes: 1 << 20,
        record_ttl: Duration::from_secs(3600),
        ack_callbacks,
    };
    let ports = WebhookPorts {
        ingest: Ingest::PutThenSend {
            store: store.clone(),
            queue: queue.clone(),
        },
        dead: Arc::new(MemoryDeadLetters::new()),
        clock: Arc::new(SystemClock),
    };
    Rig {
        webhook: Webhook::new(settings, ports),
        store,
        queue,
    }
}

impl Rig {
    async fn post(&self, body: &str) -> Reply {
        self.webhook.receive(Bytes::from(body.to_owned())).await
    }
}

fn body_of(reply: &Reply) -> (u16, Value) {
    let answer = reply.answer();
    (answer.status, serde_json::from_str(&answer.body).unwrap())
}

fn answer_callback_query() -> Value {
    json!({"method": "answerCallbackQuery", "callback_query_id": CALLBACK_ID})
}

#[tokio::test]
async fn a_queued_callback_query_is_answered_in_the_reply_body() {
    let rig = rig(true);
    let reply = rig.post(CALLBACK).await;
    assert_eq!(reply.outcome.as_ref().unwrap(), &Ingested::Queued);
    assert_eq!(body_of(&reply), (200, answer_callback_query()));
    assert_eq!(rig.queue.depth(), 1, "answered only once it is queued");
}

#[tokio::test]
async fn other_updates_and_a_bot_without_the_setting_get_the_plain_answer() {
    let message = rig(true).post(MESSAGE).await;
    assert_eq!(
        body_of(&message),
        (200, json!({"ok": true, "result": "queued"}))
    );
    let callback = rig(false).post(CALLBACK).await;
    assert_eq!(
        body_of(&callback),
        (200, json!({"ok": true, "result": "queued"}))
    );
    assert_eq!(callback.acknowledged_callback, None);
}

#[tokio::test]
async fn a_callback_query_that_could_not_be_queued_gets_503_and_no_answer() {
    let rig = rig(true);
    rig.queue.outage.set(true);
    let reply = rig.post(CALLBACK).await;
    assert_eq!(reply.acknowledged_callback, None);
    let (status, body) = body_of(&reply);
    assert_eq!(status, 503);
    assert_eq!(body["ok"], false, "{body}");
    assert!(body.get("method").is_none(), "{body}");

    rig.queue.outage.set(false);
    rig.store.outage.set(true);
    let reply = rig.post(CALLBACK).await;
    assert_eq!(reply.answer().status, 503);
    assert_eq!(reply.acknowledged_callback, None);
}

#[tokio::test]
async fn a_duplicate_of_a_queued_callback_query_is_answered_again() {
    // Telegram resends only what it saw no answer to: the first reply, with its answer, may have
    // been lost. Answering a query twice is harmless; never answering it leaves the spinner on.
    let rig = rig(true);
    rig.post(CALLBACK).await;
    // No worker has claimed it yet: sent again (the queue keeps one), and answered again.
    let again = rig.post(CALLBACK).await;
    assert_eq!(again.outcome.as_ref().unwrap(), &Ingested::Requeued);
    assert_eq!(body_of(&again), (200, answer_callback_query()));
    assert_eq!(rig.queue.depth(), 1);
    // A worker has it: a duplicate, answered all the same.
    rig.store.set_status(&callback_key(), Status::Processing);
    let later = rig.post(CALLBACK).await;
    assert_eq!(
        later.outcome.as_ref().unwrap(),
        &Ingested::Duplicate(Status::Processing)
    );
    assert_eq!(body_of(&later), (200, answer_callback_query()));
}

#[tokio::test]
async fn poison_is_never_answered_as_a_callback_query() {
    let rig = rig(true);
    let reply = rig
        .post(r#"{"callback_query": {"id": "1", "from": {"id": 1}}}"#)
        .await;
    assert!(matches!(reply.outcome, Ok(Ingested::Poison(_))));
    assert_eq!(reply.acknowledged_callback, None);
}

fn callback_key() -> RecordKey {
    RecordKey::new(BotId::new("demo").unwrap(), UpdateId(500_000_018))
}

fn callback_update() -> Value {
    serde_json::from_str(CALLBACK).unwrap()
}

fn worker(ack_callbacks: bool) -> Harness {
    let api = Arc::new(RecordingBotApi::new());
    let settings = WorkerSettings {
        ack_callbacks,
        ..WorkerSettings::default()
    };
    Harness::with_settings(
        BotId::new("demo").unwrap(),
        Arc::new(EchoBot),
        api,
        settings,
    )
}

#[tokio::test]
async fn the_worker_records_the_handler_s_answer_as_done_without_sending_it() {
    let harness = worker(true);
    let report = harness.run(&[callback_update()]).await;
    assert!(
        matches!(report.outcomes[0].1, RecordOutcome::Done(_)),
        "{report:?}"
    );
    let methods: Vec<String> = harness.api.calls().into_iter().map(|c| c.method).collect();
    assert_eq!(
        methods,
        ["sendMessage"],
        "the echo bot's answerCallbackQuery is not sent: the webhook made it"
    );
    let record = harness.store.record(&callback_key()).unwrap();
    let answered = &record.actions[&1];
    assert_eq!(answered.method, "answerCallbackQuery");
    assert_eq!(
        answered.state,
        ActionState::Succeeded(ActionResult::of(&Value::Bool(true)))
    );
}

#[tokio::test]
async fn without_the_setting_the_handler_s_answer_is_sent() {
    let harness = worker(false);
    harness.run(&[callback_update()]).await;
    let methods: Vec<String> = harness.api.calls().into_iter().map(|c| c.method).collect();
    assert_eq!(methods, ["answerCallbackQuery", "sendMessage"]);
}
