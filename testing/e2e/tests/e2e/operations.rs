//! Operating the real functions on moto: a dead letter an operator moves back from the dead-letter
//! queue (what the SQS console's redrive does) runs again and is audited, and the worker's log
//! carries its metrics as embedded-metric-format lines.

use std::time::Duration;

use serde_json::Value;
use tgq_aws::DynamoStore;
use tgq_core::audit::{AuditAction, AuditReader as _};
use tgq_core::clock::{Clock as _, SystemClock};
use tgq_core::echo::reply_text;
use tgq_core::worker::REDRIVE_PRINCIPAL;
use tgq_e2e::emulator::{self, drain, record_status, Stack};
use tgq_e2e::esm::EventSourceMapping;
use tgq_e2e::functions::{Functions, WEBHOOK, WORKER};
use tgq_e2e::telegram::{text_update, Telegram};
use tgq_fake_telegram::{FakeTelegram, Fault, Scope, Times};

const BOT_ID: &str = "demo";
const SECRET: &str = "tgq-example-secret";
const DRAIN_LIMIT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_moved_back_by_an_operator_runs_again_and_the_worker_logs_its_metrics() {
    let config = emulator::sdk_config().await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let dynamo = aws_sdk_dynamodb::Client::new(&config);
    let stack = Stack::create(&config, "redrive").await.unwrap();
    let fake = FakeTelegram::start().await.unwrap();
    // Telegram refuses chat 7's first reply as a bad request (permanent): the update is
    // dead-lettered, and once the operator moves it back it goes through.
    fake.inject(Fault::BadRequest, Scope::Chat(7), Times::Once);
    let vars = stack.function_vars(BOT_ID, SECRET, Some(&fake));
    let functions = Functions::start(&[WEBHOOK, WORKER], &vars).await;
    let telegram = Telegram::new(functions.function_url(WEBHOOK), SECRET);
    for (update_id, chat) in [(900_000_001, 7), (900_000_002, 8)] {
        let body = text_update(update_id, chat, 1, &format!("u{update_id}")).to_string();
        assert!(telegram.deliver(&body).await.unwrap().is_empty());
    }
    let mapping = EventSourceMapping::new(sqs.clone(), stack.clone(), &functions);
    mapping
        .run_until_drained(|| true, DRAIN_LIMIT)
        .await
        .unwrap();
    let status = |update_id| record_status(&dynamo, &stack.table, BOT_ID, update_id);
    assert_eq!(status(900_000_001).await.unwrap().as_deref(), Some("DEAD"));

    assert_eq!(
        emulator::redrive(&sqs, &stack, None).await.unwrap(),
        1,
        "one letter moved back"
    );
    mapping
        .run_until_drained(|| true, DRAIN_LIMIT)
        .await
        .unwrap();
    assert_eq!(
        status(900_000_001).await.unwrap().as_deref(),
        Some("DONE"),
        "the moved letter ran instead of being acknowledged unseen; logs: {}",
        functions.logs().display()
    );
    let replies: Vec<String> = fake
        .delivered_to(7)
        .iter()
        .map(|c| c.params["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(replies, [reply_text(900_000_001, "u900000001")]);
    assert!(drain(&sqs, &stack.dlq_url).await.unwrap().is_empty());
    let audit = DynamoStore::new(dynamo, stack.table.clone())
        .recent(10, SystemClock.now())
        .await
        .unwrap();
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(
        (audit[0].action, audit[0].principal.as_str()),
        (AuditAction::Redrive, REDRIVE_PRINCIPAL)
    );

    // The worker's stdout (its CloudWatch log) carries the metrics as EMF lines.
    let log = std::fs::read_to_string(functions.logs().join("worker.log")).unwrap();
    let mut processed = 0.0;
    let mut dead_lettered = 0.0;
    for line in log.lines().filter(|l| l.starts_with(r#"{"_aws""#)) {
        let doc: Value = serde_json::from_str(line).unwrap();
        assert_eq!(doc["_aws"]["CloudWatchMetrics"][0]["Namespace"], "tgq");
        assert_eq!(doc["BotId"], BOT_ID);
        assert!(doc["RequestId"].is_string(), "{line}");
        processed += doc["Processed"].as_f64().unwrap_or(0.0);
        dead_lettered += doc["DeadLettered"].as_f64().unwrap_or(0.0);
    }
    assert_eq!((processed, dead_lettered), (2.0, 1.0), "{log}");
}
