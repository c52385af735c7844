//! The worker function fed with the SQS events in `events/sqs/`, sending to the fake Bot API.

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{Context, LambdaEvent};
use secrecy::SecretString;
use tgq_aws::worker::{handle, WorkerConfig};
use tgq_core::bots::OneBot;
use tgq_core::clock::{Clock, SystemClock};
use tgq_core::config::Vars;
use tgq_core::dead::DeadReason;
use tgq_core::echo::{reply_text, EchoBot};
use tgq_core::ids::{BotId, RecordKey, UpdateId};
use tgq_core::pacer::{Pacer, RateLimits};
use tgq_core::record::Status;
use tgq_core::worker::{Worker, WorkerPorts};
use tgq_fake_telegram::{FakeTelegram, Fault, Scope, Times};
use tgq_memory::{MemoryDeadLetters, MemoryStore, RecordingVisibility};
use tgq_telegram::HttpBotApi;

const BATCH: &str = include_str!("../../../../events/sqs/batch_three_groups.json");
const REDELIVERY: &str = include_str!("../../../../events/sqs/redelivery.json");

struct Rig {
    worker: Worker,
    fake: FakeTelegram,
    store: Arc<MemoryStore>,
    dead: Arc<MemoryDeadLetters>,
    visibility: Arc<RecordingVisibility>,
}

async fn rig() -> Rig {
    rig_with(&[]).await
}

/// A worker configured from the environment the template gives it, plus `more`.
async fn rig_with(more: &[(&str, &str)]) -> Rig {
    let fake = FakeTelegram::start().await.unwrap();
    let mut vars = vec![
        ("TELEGRAM_BOT_TOKEN", fake.token()),
        ("TGQ_BOT_ID", "demo"),
        ("TGQ_TABLE", "t"),
        ("TGQ_QUEUE_URL", "q"),
        ("TGQ_DLQ_URL", "d"),
    ];
    vars.extend_from_slice(more);
    let vars = Vars::from_pairs(vars);
    let config = WorkerConfig::from_vars(&vars).unwrap();
    let store = Arc::new(MemoryStore::new());
    let dead = Arc::new(MemoryDeadLetters::new());
    let visibility = Arc::new(RecordingVisibility::new());
    let api = HttpBotApi::new(
        &fake.url(),
        SecretString::from(fake.token().to_owned()),
        Duration::from_secs(2),
    )
    .unwrap();
    let ports = WorkerPorts {
        budget: Arc::new(Pacer::new(RateLimits::default())),
        ..WorkerPorts::around(store.clone(), visibility.clone(), dead.clone())
    };
    Rig {
        worker: Worker::new(
            config.settings,
            ports,
            Arc::new(OneBot::new(Arc::new(api), Arc::new(EchoBot))),
        ),
        fake,
        store,
        dead,
        visibility,
    }
}

fn lambda_event(json: &str) -> LambdaEvent<SqsEvent> {
    let mut context = Context::default();
    context.deadline = SystemClock.now().plus(Duration::from_secs(60)).0;
    LambdaEvent::new(
        serde_json::from_str(json).expect("the fixture is an SQS event"),
        context,
    )
}

fn texts(fake: &FakeTelegram, chat: i64) -> Vec<String> {
    fake.delivered_to(chat)
        .into_iter()
        .filter(|c| c.method == "sendMessage")
        .map(|c| c.params["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn a_batch_over_three_chats_is_answered_in_each_chats_order() {
    let rig = rig().await;
    let response = handle(&rig.worker, lambda_event(BATCH)).await.unwrap();
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(
        texts(&rig.fake, 111_111_111),
        [
            reply_text(500_000_101, "/start"),
            reply_text(500_000_104, "echo this back, please")
        ]
    );
    assert_eq!(
        texts(&rig.fake, -1_001_234_567_890),
        [
            reply_text(500_000_102, "@tgq_demo_bot ping"),
            reply_text(500_000_105, "/help@tgq_demo_bot")
        ]
    );
    assert_eq!(
        texts(&rig.fake, 222_222_222),
        [
            reply_text(500_000_103, "/help"),
            reply_text(500_000_106, "callback pressed:1")
        ]
    );
    assert!(rig
        .fake
        .delivered()
        .iter()
        .any(|c| c.method == "answerCallbackQuery"));
}

#[tokio::test]
async fn a_failing_chat_is_reported_by_message_id_and_holds_back_only_itself() {
    let rig = rig().await;
    rig.fake.inject(
        Fault::ServerError(502),
        Scope::Chat(111_111_111),
        Times::Once,
    );
    let response = handle(&rig.worker, lambda_event(BATCH)).await.unwrap();
    let failed: Vec<_> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(
        failed,
        [
            "1846aa5b-6345-571a-b0ed-92caa454781c",
            "06e06f17-9350-5992-8697-f90731d4afed"
        ]
    );
    assert!(texts(&rig.fake, 111_111_111).is_empty());
    assert_eq!(texts(&rig.fake, 222_222_222).len(), 2);
    assert!(
        rig.visibility.changes().len() == 2,
        "backoff for the failed record, zero for the skipped one"
    );
}

#[tokio::test]
async fn a_redelivered_record_that_already_finished_sends_nothing_again() {
    let rig = rig().await;
    handle(&rig.worker, lambda_event(REDELIVERY)).await.unwrap();
    let sent = rig.fake.delivered().len();
    assert!(sent > 0);
    let response = handle(&rig.worker, lambda_event(REDELIVERY)).await.unwrap();
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(rig.fake.delivered().len(), sent);
}

#[tokio::test]
async fn a_user_who_blocked_the_bot_is_settled_done_and_acknowledged_without_a_dead_letter() {
    let rig = rig().await;
    rig.fake
        .inject(Fault::Blocked, Scope::Chat(222_222_222), Times::Once);
    let response = handle(&rig.worker, lambda_event(BATCH)).await.unwrap();
    assert!(response.batch_item_failures.is_empty());
    assert!(rig.dead.letters().is_empty(), "nobody is paged");
    let key = RecordKey::new(BotId::new("demo").unwrap(), UpdateId(500_000_103));
    let record = rig.store.record(&key).expect("the blocked update's record");
    assert_eq!(record.status, Status::Done);
    assert!(
        record.last_error.unwrap().contains("bot was blocked"),
        "the record says why"
    );
}

#[tokio::test]
async fn with_gone_recipients_dead_lettered_a_blocked_bot_dead_letters_the_update() {
    let rig = rig_with(&[("TGQ_DEAD_LETTER_GONE_RECIPIENTS", "true")]).await;
    rig.fake
        .inject(Fault::Blocked, Scope::Chat(222_222_222), Times::Once);
    let response = handle(&rig.worker, lambda_event(BATCH)).await.unwrap();
    assert!(response.batch_item_failures.is_empty());
    let letters = rig.dead.letters();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].reason, DeadReason::Permanent);
    assert!(
        letters[0]
            .error
            .contains("Forbidden: bot was blocked by the user"),
        "{}",
        letters[0].error
    );
}

#[test]
fn the_worker_requires_a_bot_token() {
    let err = WorkerConfig::from_vars(&Vars::from_pairs([("TGQ_TABLE", "t")])).unwrap_err();
    assert!(
        err.to_string().starts_with("TELEGRAM_BOT_TOKEN is not set"),
        "{err}"
    );
}

#[tokio::test]
async fn a_deadline_already_past_at_the_start_falls_back_to_the_worker_timeout() {
    // `cargo lambda watch` sends 600000 (ten minutes as a duration) where Lambda sends an epoch time.
    let rig = rig().await;
    let mut event = lambda_event(REDELIVERY);
    event.context.deadline = 600_000;
    let response = handle(&rig.worker, event).await.unwrap();
    assert!(
        response.batch_item_failures.is_empty(),
        "the record ran instead of being returned"
    );
    assert!(!rig.fake.delivered().is_empty());
}

#[test]
fn a_dead_letter_moved_back_to_the_queue_is_known_by_the_message_attributes_the_mapping_passes() {
    let record = |attributes: serde_json::Value| {
        let message: aws_lambda_events::event::sqs::SqsMessage =
            serde_json::from_value(serde_json::json!({
                "messageId": "m-1",
                "receiptHandle": "r-1",
                "body": "{}",
                "attributes": {"MessageGroupId": "demo:5", "ApproximateReceiveCount": "1"},
                "messageAttributes": attributes,
            }))
            .unwrap();
        tgq_aws::worker::queue_record(message).unwrap()
    };
    let text = |value: &str| serde_json::json!({"stringValue": value, "dataType": "String"});
    let moved = record(serde_json::json!({
        "bot_id": text("demo"),
        "reason": text("attempt_budget_spent"),
        "attempts": {"stringValue": "8", "dataType": "Number"},
    }));
    assert_eq!(
        moved.dead_letter,
        Some(tgq_core::dead::DeadLetterMarks {
            reason: DeadReason::BudgetSpent,
            attempts: 8
        })
    );
    assert_eq!(record(serde_json::json!({})).dead_letter, None);
}

#[tokio::test]
async fn a_pre_checkout_query_the_bot_leaves_unanswered_is_refused_in_the_configured_words() {
    let rig = rig_with(&[("TGQ_PRE_CHECKOUT_REFUSAL", "Out of eggs, sorry")]).await;
    let query = rig.fake.checkout(42, "egg", 25);
    let update = serde_json::json!({
        "update_id": 500_000_900,
        "pre_checkout_query": {
            "id": query, "currency": "XTR", "total_amount": 25, "invoice_payload": "egg",
            "from": {"id": 42, "is_bot": false, "first_name": "Ada"},
        }
    });
    let event = serde_json::json!({ "Records": [{
        "messageId": "pre-checkout-1",
        "receiptHandle": "r-pre-checkout-1",
        "body": update.to_string(),
        "attributes": {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": "1767607202317",
            "MessageGroupId": "demo:user:42",
            "MessageDeduplicationId": "demo:500000900",
        },
        "messageAttributes": {},
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:eu-west-1:123456789012:tgq-updates.fifo",
        "awsRegion": "eu-west-1",
    }]});
    let response = handle(&rig.worker, lambda_event(&event.to_string()))
        .await
        .unwrap();
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    let answers: Vec<_> = rig
        .fake
        .calls()
        .into_iter()
        .filter(|call| call.method == "answerPreCheckoutQuery")
        .collect();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(
        (
            answers[0].status,
            answers[0].params["ok"].as_bool(),
            answers[0].params["error_message"].as_str()
        ),
        (200, Some(false), Some("Out of eggs, sorry"))
    );
    assert!(rig.fake.charges().is_empty());
    let record = rig
        .store
        .record(&RecordKey::new(
            BotId::new("demo").unwrap(),
            UpdateId(500_000_900),
        ))
        .unwrap();
    assert_eq!(record.status, Status::Done);
}
