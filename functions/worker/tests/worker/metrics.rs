//! Both functions' metrics as CloudWatch reads them: every outcome of the webhook and of a worker
//! batch driven through the functions' handlers, the recorder the functions install flushed, and
//! its embedded-metric-format lines parsed, each under the `BotId` of the bot it counts (the
//! environment's `demo`, the registry's `shop`, and `ghost`, a bot nobody knows). One test: the
//! recorder is global to the process.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_http::Body;
use lambda_runtime::{Context, LambdaEvent};
use secrecy::SecretString;
use serde_json::Value;
use tgq_aws::worker::{handle, handle_event, BroadcastSource, Sources};
use tgq_core::bots::OneBot;
use tgq_core::broadcast::chain::{BroadcastQueue, ChainStep};
use tgq_core::broadcast::steps::BroadcastSteps;
use tgq_core::broadcast::{BroadcastId, BroadcastRunner};
use tgq_core::clock::{Clock, SystemClock};
use tgq_core::config::Vars;
use tgq_core::echo::EchoBot;
use tgq_core::handlers::HandlerRegistry;
use tgq_core::ids::{BotId, MessageGroupId, RecordKey, UpdateId};
use tgq_core::ingest::{Ingest, WebhookPorts, SECRET_HEADER};
use tgq_core::pacer::{Pacer, RateLimits};
use tgq_core::policy::RetryPolicy;
use tgq_core::ports::{QueueRecord, ReceiptHandle};
use tgq_core::record::Status;
use tgq_core::registry::{BotEntry, Registry};
use tgq_core::telegram::BotApi;
use tgq_core::worker::Worker;
use tgq_core::PortError;
use tgq_fake_telegram::{FakeTelegram, Fault, Scope, Times};
use tgq_memory::{
    Fault as Outage, MemoryBots, MemoryBroadcasts, MemoryDeadLetters, MemoryQueue, MemoryStore,
    RecordingBotApi, RecordingVisibility,
};

const BATCH: &str = include_str!("../../../../events/sqs/batch_three_groups.json");
const SECRET: &str = "metrics-test-secret";

/// A metric as one EMF line reports it: its name and its labels (`BotId` among them).
type Series = (String, BTreeMap<String, String>);

/// What the flushed lines report: each counter's total and each histogram's number of values.
#[derive(Debug, Default)]
struct Emitted {
    counters: BTreeMap<Series, f64>,
    histograms: BTreeMap<Series, f64>,
}

impl Emitted {
    /// Reads EMF lines; panics on anything that is not one of tgq's metric documents.
    fn parse(text: &str) -> Self {
        let mut emitted = Emitted::default();
        for line in text.lines().filter(|line| !line.trim().is_empty()) {
            let doc: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            let directive = &doc["_aws"]["CloudWatchMetrics"][0];
            assert_eq!(directive["Namespace"], "tgq", "{line}");
            let dimensions: Vec<&str> = directive["Dimensions"][0]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_str().unwrap())
                .collect();
            // A count of the stack's, not of one bot's, goes by its cause alone.
            assert!(
                dimensions.contains(&"BotId") || dimensions == ["Cause"],
                "{line}"
            );
            let labels: BTreeMap<String, String> = dimensions
                .iter()
                .map(|d| ((*d).to_owned(), doc[*d].as_str().unwrap().to_owned()))
                .collect();
            for metric in directive["Metrics"].as_array().unwrap() {
                let name = metric["Name"].as_str().unwrap().to_owned();
                let series = (name.clone(), labels.clone());
                match &doc[&name] {
                    Value::Number(n) => {
                        *emitted.counters.entry(series).or_default() += n.as_f64().unwrap();
                    }
                    Value::Array(values) => {
                        assert_eq!(metric["Unit"], "Milliseconds", "{line}");
                        *emitted.histograms.entry(series).or_default() += values.len() as f64;
                    }
                    other => panic!("{name}: {other} in {line}"),
                }
            }
        }
        emitted
    }

    /// The counter `name` with `labels` (and `BotId` `demo` unless they name one).
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let key = (name.to_owned(), label_map(labels));
        self.counters.get(&key).copied().unwrap_or(0.0)
    }

    /// The counter `name` of the stack, counted by its cause alone.
    fn stack_counter(&self, name: &str, cause: &str) -> f64 {
        let labels = BTreeMap::from([("Cause".to_owned(), cause.to_owned())]);
        self.counters
            .get(&(name.to_owned(), labels))
            .copied()
            .unwrap_or(0.0)
    }

    /// How many values the histogram `name` of `bot` received.
    fn values(&self, name: &str, bot: &str) -> f64 {
        let key = (name.to_owned(), label_map(&[("BotId", bot)]));
        self.histograms.get(&key).copied().unwrap_or(0.0)
    }
}

fn label_map(labels: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut map: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    map.entry("BotId".to_owned())
        .or_insert_with(|| "demo".to_owned());
    map
}

fn post(body: &str) -> lambda_http::Request {
    lambda_http::http::Request::builder()
        .method("POST")
        .header(SECRET_HEADER, SECRET)
        .body(Body::from(body.to_owned()))
        .unwrap()
}

fn message(update_id: i64) -> String {
    format!(
        r#"{{"update_id":{update_id},"message":{{"message_id":1,"date":0,"chat":{{"id":5,"type":"private","first_name":"A"}},"text":"hi"}}}}"#
    )
}

async fn webhook_outcomes() {
    let store = Arc::new(MemoryStore::new());
    let webhook = common::memory_webhook(&store, SECRET, &[]);
    let status = |request| async {
        let response = tgq_aws::webhook::handle(&webhook, &Default::default(), request)
            .await
            .unwrap();
        response.status().as_u16()
    };
    assert_eq!(status(post(&message(1))).await, 200);
    assert_eq!(status(post(&message(2))).await, 200);
    // A worker has taken update 1: a repeat is a duplicate. Update 2 still waits for one: a
    // repeat sends it again.
    let key = RecordKey::new(BotId::new("demo").unwrap(), UpdateId(1));
    store.set_status(&key, Status::Processing);
    assert_eq!(status(post(&message(1))).await, 200, "a duplicate");
    assert_eq!(status(post(&message(2))).await, 200, "requeued");
    assert_eq!(status(post(r#"{"no": "update"}"#)).await, 200, "poison");
    store.outage.fail(Outage::Misconfigured);
    assert_eq!(status(post(&message(3))).await, 503);
    store.outage.fail(Outage::Unavailable);
    assert_eq!(status(post(&message(4))).await, 503);
    assert_eq!(status(post(&message(5))).await, 503);
    store.outage.set(false);
}

async fn worker_outcomes() {
    let fake = FakeTelegram::start().await.unwrap();
    let worker = common::demo_worker(&fake);
    // Chat 111111111: its first update fails with a 502 (the second waits behind it). Chat
    // 222222222: Telegram refuses its first reply as a bad request (a dead letter), and the user
    // has blocked the bot by the second (recipient gone).
    fake.inject(
        Fault::ServerError(502),
        Scope::Chat(111_111_111),
        Times::Once,
    );
    fake.inject(Fault::BadRequest, Scope::Chat(222_222_222), Times::Once);
    fake.inject(Fault::Blocked, Scope::Chat(222_222_222), Times::Once);
    let mut context = Context::default();
    context.deadline = SystemClock.now().plus(Duration::from_secs(60)).0;
    let event: SqsEvent = serde_json::from_str(BATCH).unwrap();
    handle(&worker, LambdaEvent::new(event, context))
        .await
        .unwrap();
}

/// A stack with the environment's bot `demo` and the registry bot `shop`: one update of shop
/// through the webhook and the worker, and one of `ghost`, which no registry knows.
async fn registry_outcomes() {
    let fake = FakeTelegram::start().await.unwrap();
    fake.accept_token("111:SHOP");
    let url = fake.url();
    let vars = Vars::from_pairs([
        ("TELEGRAM_BOT_TOKEN", fake.token()),
        ("TELEGRAM_API_URL", url.as_str()),
        ("TGQ_BOT_ID", "demo"),
        ("TGQ_WEBHOOK_SECRET", SECRET),
        ("TGQ_HANDLER", "echo"),
        ("TGQ_BOTS_PARAMETER_PREFIX", "/tgq/test/bots/"),
        ("TGQ_TABLE", "t"),
        ("TGQ_QUEUE_URL", "q"),
        ("TGQ_DLQ_URL", "d"),
    ]);
    let shop = BotEntry {
        id: BotId::new("shop").unwrap(),
        token: Some(SecretString::from("111:SHOP".to_owned())),
        secret: Some(SecretString::from("shop-secret".to_owned())),
        handler: "echo".to_owned(),
        allowed_updates: Vec::new(),
    };
    let registry = Arc::new(MemoryBots::new([shop]));

    let config = tgq_aws::webhook::WebhookConfig::from_vars(&vars).unwrap();
    let webhooks = config.webhooks(
        WebhookPorts {
            ingest: Ingest::PutThenSend {
                store: Arc::new(MemoryStore::new()),
                queue: Arc::new(MemoryQueue::new(Arc::new(SystemClock))),
            },
            dead: Arc::new(MemoryDeadLetters::new()),
            clock: Arc::new(SystemClock),
        },
        Some(SecretString::from(SECRET.to_owned())),
        Some(Arc::new(Registry::new(
            registry.clone(),
            config.registry_refresh,
        ))),
    );
    let request = lambda_http::http::Request::builder()
        .method("POST")
        .uri("/webhook/shop")
        .header(SECRET_HEADER, "shop-secret")
        .body(Body::from(message(7)))
        .unwrap();
    let response = tgq_aws::webhook::handle(&webhooks, &Default::default(), request)
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);

    let config = tgq_aws::worker::WorkerConfig::from_vars(&vars).unwrap();
    let env_token = SecretString::from(fake.token().to_owned());
    let fleet = config
        .fleet(
            &vars,
            HandlerRegistry::new(),
            Some(env_token),
            Some(registry),
        )
        .await
        .unwrap();
    let store = Arc::new(MemoryStore::new());
    let worker = Worker::new(
        config.settings,
        tgq_memory::worker_ports(
            &store,
            Arc::new(MemoryDeadLetters::new()),
            Arc::new(SystemClock),
        ),
        Arc::new(fleet),
    );
    let record = |bot: &str, update_id: i64| QueueRecord {
        message_id: format!("m-{bot}"),
        receipt: ReceiptHandle(format!("r-{bot}")),
        body: message(update_id).into(),
        group_id: MessageGroupId::from_raw(format!("{bot}:5")),
        receive_count: 1,
        dead_letter: None,
    };
    let deadline = SystemClock.now().plus(Duration::from_secs(60));
    let report = worker
        .process_batch(&[record("shop", 7), record("ghost", 8)], deadline)
        .await;
    assert!(report.failed_message_ids().is_empty(), "{report:?}");
}

/// Where the steps' successors would go; none is queued here.
struct NoSuccessors;

#[async_trait::async_trait]
impl BroadcastQueue for NoSuccessors {
    async fn queue(&self, _step: &ChainStep, _dedup: &str) -> Result<(), PortError> {
        panic!("a step that could not run queued a successor")
    }
}

/// Two steps of a job whose table is down, on their ninth and tenth receive: the tenth is stuck.
async fn broadcast_outcomes() {
    const STEPS_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:tgq-broadcasts.fifo";
    let fake = FakeTelegram::start().await.unwrap();
    let worker = common::demo_worker(&fake);
    let store = Arc::new(MemoryBroadcasts::new());
    store.outage.fail(Outage::Unavailable);
    let visibility = Arc::new(RecordingVisibility::new());
    let api: Arc<dyn BotApi> = Arc::new(RecordingBotApi::new());
    let sources = Sources {
        timers: None,
        broadcasts: Some(BroadcastSource {
            steps: BroadcastSteps {
                runner: BroadcastRunner {
                    store,
                    budget: Arc::new(Pacer::new(RateLimits::UNLIMITED)),
                    bot_rate: None,
                    clock: Arc::new(SystemClock),
                    retry: RetryPolicy::default(),
                },
                bots: Arc::new(OneBot::new(api, Arc::new(EchoBot))),
                queue: Arc::new(NoSuccessors),
                visibility: visibility.clone(),
                chunk: 1_000,
                clock: Arc::new(SystemClock),
            },
            queue_arn: STEPS_ARN.to_owned(),
        }),
    };
    let step = ChainStep::start(&BroadcastId(1)).body();
    let record = |receives: u32| {
        serde_json::json!({
            "messageId": format!("step-{receives}"),
            "receiptHandle": format!("r-{receives}"),
            "body": step,
            "attributes": {
                "ApproximateReceiveCount": receives.to_string(),
                "MessageGroupId": "broadcast:1",
            },
            "messageAttributes": {},
            "eventSourceARN": STEPS_ARN,
        })
    };
    let event: SqsEvent =
        serde_json::from_value(serde_json::json!({"Records": [record(9), record(10)]})).unwrap();
    let mut context = Context::default();
    context.deadline = SystemClock.now().plus(Duration::from_secs(60)).0;
    let response = handle_event(&worker, &sources, LambdaEvent::new(event, context))
        .await
        .unwrap();
    let failed: Vec<_> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect();
    assert_eq!(failed, ["step-9", "step-10"], "both run again later");
    assert_eq!(visibility.changes().len(), 2, "each hidden for a while");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_functions_emit_every_outcome_as_embedded_metric_format_lines() {
    let collector = tgq_aws::init_metrics().unwrap();
    webhook_outcomes().await;
    worker_outcomes().await;
    registry_outcomes().await;
    broadcast_outcomes().await;
    let mut flushed = Vec::new();
    collector.flush(&mut flushed).unwrap();
    let emitted = Emitted::parse(&String::from_utf8(flushed).unwrap());

    for (name, labels, expected) in [
        ("Received", &[][..], 2.0),
        ("Duplicate", &[], 1.0),
        ("Requeued", &[], 1.0),
        ("Enqueued", &[], 3.0),
        ("Poison", &[], 1.0),
        ("IngestUnavailable", &[("Cause", "misconfigured")], 1.0),
        ("IngestUnavailable", &[("Cause", "unavailable")], 2.0),
        ("Processed", &[], 2.0),
        ("RecipientGone", &[], 1.0),
        ("Retried", &[("ErrorClass", "transient")], 1.0),
        ("DeadLettered", &[("Reason", "permanent_error")], 1.0),
    ] {
        assert_eq!(
            emitted.counter(name, labels),
            expected,
            "{name} {labels:?} in {emitted:#?}"
        );
    }
    assert_eq!(
        emitted.values("HandlerDurationMs", "demo"),
        5.0,
        "{emitted:#?}"
    );
    assert_eq!(
        emitted.values("EndToEndLatencyMs", "demo"),
        2.0,
        "{emitted:#?}"
    );
    // The registry's bots are counted apart, each under its own id.
    for (name, labels, expected) in [
        ("Received", &[("BotId", "shop")][..], 1.0),
        ("Enqueued", &[("BotId", "shop")], 1.0),
        ("Processed", &[("BotId", "shop")], 1.0),
        (
            "DeadLettered",
            &[("BotId", "ghost"), ("Reason", "unknown_bot")],
            1.0,
        ),
    ] {
        assert_eq!(
            emitted.counter(name, labels),
            expected,
            "{name} {labels:?} in {emitted:#?}"
        );
    }
    assert_eq!(
        emitted.values("EndToEndLatencyMs", "shop"),
        1.0,
        "{emitted:#?}"
    );
    // The step on its tenth receive is stuck; the one on its ninth is not yet.
    assert_eq!(
        emitted.stack_counter("BroadcastStuck", "unavailable"),
        1.0,
        "{emitted:#?}"
    );
}
