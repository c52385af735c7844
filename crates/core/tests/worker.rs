//! The worker use case on in-memory adapters: order, failure propagation, budget, recorded actions.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;
use teloxide_core::payloads::{SendMessage, SendPhoto};
use teloxide_core::types::{InputFile, Update, UpdateKind};
use tgq_core::clock::{Clock, ManualClock};
use tgq_core::ids::{BotId, RecordKey, UpdateId};
use tgq_core::policy::{BuryReason, RetryPolicy};
use tgq_core::ports::{QueueRecord, ReceiptHandle, RecordReader};
use tgq_core::record::{Status, Timestamp};
use tgq_core::telegram::TelegramError;
use tgq_core::worker::{RecordOutcome, Worker, WorkerPorts, WorkerSettings};
use tgq_core::{Context, ErrorClass, Handler, HandlerError};
use tgq_memory::{MemoryDeadLetters, MemoryStore, RecordingBotApi, RecordingVisibility};

/// What the scripted bot does on one run of one update.
#[derive(Clone)]
enum Step {
    Reply,
    ReplyThenFail(fn() -> HandlerError),
    Fail(fn() -> HandlerError),
    Panic,
    SendOnceAtMostThenFail,
}

/// Replies `reply to {update_id}` in the update's chat, or does what the script says for that update.
#[derive(Default)]
struct ScriptedBot {
    script: Mutex<HashMap<i64, VecDeque<Step>>>,
}

impl ScriptedBot {
    fn on(&self, update_id: i64, steps: impl IntoIterator<Item = Step>) {
        self.script
            .lock()
            .entry(update_id)
            .or_default()
            .extend(steps);
    }
}

#[async_trait]
impl Handler for ScriptedBot {
    async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        let UpdateKind::Message(message) = &update.kind else {
            return Ok(());
        };
        let step = self
            .script
            .lock()
            .get_mut(&update.id.0.into())
            .and_then(VecDeque::pop_front)
            .unwrap_or(Step::Reply);
        let reply = SendMessage::new(message.chat.id, format!("reply to {}", update.id.0));
        match step {
            Step::Reply => ctx.send(reply).await.map(drop),
            Step::ReplyThenFail(error) => {
                ctx.send(reply).await?;
                Err(error())
            }
            Step::Fail(error) => Err(error()),
            Step::Panic => panic!("scripted panic"),
            Step::SendOnceAtMostThenFail => {
                let photo = SendPhoto::new(
                    message.chat.id,
                    InputFile::file_id("AgAD".to_owned().into()),
                );
                ctx.send_at_most_once(photo).await?;
                Err(HandlerError::transient("after the photo"))
            }
        }
    }
}

struct Rig {
    worker: Worker,
    bot: Arc<ScriptedBot>,
    store: Arc<MemoryStore>,
    dead: Arc<MemoryDeadLetters>,
    api: Arc<RecordingBotApi>,
    visibility: Arc<RecordingVisibility>,
    clock: ManualClock,
}

const T0: Timestamp = Timestamp(1_800_000_000_000);

fn rig() -> Rig {
    let store = Arc::new(MemoryStore::new());
    let dead = Arc::new(MemoryDeadLetters::new());
    let api = Arc::new(RecordingBotApi::new());
    let visibility = Arc::new(RecordingVisibility::new());
    let clock = ManualClock::at(T0);
    let bot = Arc::new(ScriptedBot::default());
    let ports = WorkerPorts {
        ledger: store.clone(),
        visibility: visibility.clone(),
        dead: dead.clone(),
        api: api.clone(),
        clock: Arc::new(clock.clone()),
    };
    let settings = WorkerSettings {
        retry: RetryPolicy::default(),
        deadline_margin: Duration::from_secs(5),
        record_ttl: Duration::from_secs(86_400),
    };
    Rig {
        worker: Worker::new(settings, ports, bot.clone()),
        bot,
        store,
        dead,
        api,
        visibility,
        clock,
    }
}

fn update(update_id: i64, chat: i64) -> QueueRecord {
    let chat_json = if chat > 0 {
        format!(r#"{{"id":{chat},"type":"private","first_name":"Ada"}}"#)
    } else {
        format!(r#"{{"id":{chat},"type":"group","title":"Team"}}"#)
    };
    let body = format!(
        r#"{{"update_id":{update_id},"message":{{"message_id":{update_id},"date":1700000000,"chat":{chat_json},"from":{{"id":7,"is_bot":false,"first_name":"Ada"}},"text":"hi"}}}}"#
    );
    QueueRecord {
        message_id: format!("msg-{update_id}"),
        receipt: ReceiptHandle(format!("rcpt-{update_id}")),
        body: Bytes::from(body),
        group_id: format!("demo:{chat}"),
        receive_count: 1,
    }
}

fn key(update_id: i64) -> RecordKey {
    RecordKey::new(BotId::new("demo").unwrap(), UpdateId(update_id))
}

impl Rig {
    async fn run(&self, records: &[QueueRecord]) -> tgq_core::worker::BatchReport {
        self.worker
            .process_batch(records, self.clock.now().plus(Duration::from_secs(60)))
            .await
    }

    async fn status(&self, update_id: i64) -> Status {
        self.store
            .get(&key(update_id), self.clock.now())
            .await
            .unwrap()
            .expect("record exists")
            .status
    }
}

fn transient() -> HandlerError {
    HandlerError::transient("backend down")
}

#[tokio::test]
async fn a_batch_is_handled_in_order_and_fully_acknowledged() {
    let rig = rig();
    let report = rig
        .run(&[update(1, 10), update(2, 20), update(3, 10)])
        .await;
    assert!(report.failed_message_ids().is_empty());
    assert_eq!(
        rig.api.sent_texts(),
        ["reply to 1", "reply to 2", "reply to 3"]
    );
    assert_eq!(rig.status(3).await, Status::Done);
}

#[tokio::test]
async fn a_failed_record_holds_back_only_later_records_of_its_own_group() {
    let rig = rig();
    rig.bot.on(1, [Step::Fail(transient)]);
    let report = rig
        .run(&[update(1, 10), update(2, 20), update(3, 10), update(4, 20)])
        .await;
    assert_eq!(report.failed_message_ids(), ["msg-1", "msg-3"]);
    assert_eq!(rig.api.sent_texts(), ["reply to 2", "reply to 4"]);
    assert_eq!(report.outcomes[2].1, RecordOutcome::SkippedBehindFailure);
    // The skipped record is shown again at once and was never claimed, so it spent no attempt.
    assert_eq!(rig.visibility.last_for("rcpt-3"), Some(Duration::ZERO));
    assert!(rig.store.record(&key(3)).is_none());
    assert_eq!(rig.store.record(&key(1)).unwrap().attempts, 1);
}

#[tokio::test]
async fn a_transient_failure_backs_off_through_the_visibility_timeout_within_jitter_bounds() {
    let rig = rig();
    rig.bot.on(1, [Step::Fail(transient)]);
    let report = rig.run(&[update(1, 10)]).await;
    let delay = rig
        .visibility
        .last_for("rcpt-1")
        .expect("visibility changed");
    assert!(
        delay >= Duration::from_secs(1) && delay <= Duration::from_secs(3),
        "{delay:?}"
    );
    assert!(matches!(
        report.outcomes[0].1,
        RecordOutcome::Retrying(_, ErrorClass::Transient)
    ));
    assert_eq!(rig.status(1).await, Status::Retrying);
}

#[tokio::test]
async fn retry_after_from_telegram_is_honoured_exactly() {
    let rig = rig();
    rig.api
        .fail_next([TelegramError::RetryAfter(Duration::from_secs(17))]);
    rig.run(&[update(1, 10)]).await;
    assert_eq!(
        rig.visibility.last_for("rcpt-1"),
        Some(Duration::from_secs(18))
    );
}

#[tokio::test]
async fn a_permanent_error_is_dead_lettered_on_the_first_attempt() {
    let rig = rig();
    rig.api.fail_next([TelegramError::Api {
        code: 403,
        description: "Forbidden: bot was blocked by the user".into(),
    }]);
    let report = rig.run(&[update(1, 10), update(2, 10)]).await;
    assert_eq!(
        report.outcomes[0].1,
        RecordOutcome::DeadLettered(BuryReason::Permanent)
    );
    // A dead-lettered record is acknowledged, so its chat goes on.
    assert!(report.failed_message_ids().is_empty());
    let letters = rig.dead.letters();
    assert_eq!(letters.len(), 1);
    assert_eq!(
        (
            letters[0].reason.as_str(),
            letters[0].error_class.as_str(),
            letters[0].attempts
        ),
        ("permanent_error", "permanent", 1)
    );
    assert_eq!(letters[0].body, update(1, 10).body);
    assert_eq!(rig.status(1).await, Status::Dead);
}

#[tokio::test]
async fn the_attempt_budget_ends_in_the_dead_letter_queue() {
    let rig = rig();
    rig.bot.on(1, (0..8).map(|_| Step::Fail(transient)));
    for attempt in 1..=8u32 {
        let report = rig.run(&[update(1, 10)]).await;
        if attempt < 8 {
            assert!(
                matches!(report.outcomes[0].1, RecordOutcome::Retrying(..)),
                "attempt {attempt}"
            );
        } else {
            assert_eq!(
                report.outcomes[0].1,
                RecordOutcome::DeadLettered(BuryReason::BudgetSpent)
            );
        }
    }
    assert_eq!(rig.dead.letters()[0].attempts, 8);
    assert_eq!(rig.dead.letters()[0].reason, "attempt_budget_spent");
}

#[tokio::test]
async fn a_redelivered_done_record_sends_nothing() {
    let rig = rig();
    rig.run(&[update(1, 10)]).await;
    let report = rig.run(&[update(1, 10)]).await;
    assert_eq!(report.outcomes[0].1, RecordOutcome::AlreadyFinal);
    assert_eq!(rig.api.sent_texts().len(), 1);
}

#[tokio::test]
async fn a_retry_after_a_partial_run_does_not_repeat_sent_actions() {
    let rig = rig();
    rig.bot.on(1, [Step::ReplyThenFail(transient), Step::Reply]);
    rig.run(&[update(1, 10)]).await;
    let report = rig.run(&[update(1, 10)]).await;
    let RecordOutcome::Done(summary) = &report.outcomes[0].1 else {
        panic!("{:?}", report.outcomes)
    };
    assert_eq!(summary.replayed, 1);
    assert_eq!(rig.api.sent_texts(), ["reply to 1"]);
}

#[tokio::test]
async fn an_uncertain_at_least_once_action_is_sent_again() {
    let rig = rig();
    // The first send fails in flight: its intent is recorded without a result.
    rig.api.fail_next([TelegramError::Timeout]);
    rig.run(&[update(1, 10)]).await;
    rig.run(&[update(1, 10)]).await;
    assert_eq!(rig.api.sent_texts(), ["reply to 1"]);
    assert_eq!(rig.status(1).await, Status::Done);
}

#[tokio::test]
async fn an_uncertain_at_most_once_action_is_reported_and_never_sent_again() {
    let rig = rig();
    rig.bot.on(
        1,
        [Step::SendOnceAtMostThenFail, Step::SendOnceAtMostThenFail],
    );
    rig.api.fail_next([TelegramError::Timeout]);
    rig.run(&[update(1, 10)]).await;
    let record = rig.store.record(&key(1)).unwrap();
    assert_eq!(
        record.actions[&1].result, None,
        "the intent is recorded without a result"
    );
    rig.run(&[update(1, 10)]).await;
    assert!(
        rig.api.calls().iter().all(|c| c.method != "sendPhoto"),
        "an at-most-once action was re-sent"
    );
}

#[tokio::test]
async fn a_panicking_handler_is_a_transient_failure() {
    let rig = rig();
    rig.bot.on(1, [Step::Panic]);
    let report = rig.run(&[update(1, 10)]).await;
    assert!(
        matches!(
            report.outcomes[0].1,
            RecordOutcome::Retrying(_, ErrorClass::Transient)
        ),
        "{:?}",
        report.outcomes
    );
    assert!(rig
        .store
        .record(&key(1))
        .unwrap()
        .last_error
        .unwrap()
        .contains("scripted panic"));
}

#[tokio::test]
async fn the_deadline_margin_returns_the_rest_of_the_batch_unrun() {
    let rig = rig();
    let deadline = rig.clock.now().plus(Duration::from_secs(4));
    let report = rig
        .worker
        .process_batch(&[update(1, 10), update(2, 20)], deadline)
        .await;
    assert_eq!(report.failed_message_ids(), ["msg-1", "msg-2"]);
    assert!(report
        .outcomes
        .iter()
        .all(|(_, o)| *o == RecordOutcome::DeadlineReached));
    assert!(rig.api.calls().is_empty());
    assert_eq!(rig.visibility.last_for("rcpt-2"), Some(Duration::ZERO));
}

#[tokio::test]
async fn batch_item_failures_never_carry_an_empty_message_id() {
    let rig = rig();
    let mut nameless = update(1, 10);
    nameless.message_id = String::new();
    rig.bot.on(1, [Step::Fail(transient)]);
    let report = rig.run(&[nameless, update(2, 20)]).await;
    assert!(report.failed_message_ids().iter().all(|id| !id.is_empty()));
}

#[tokio::test]
async fn a_migrated_group_is_followed_once_and_the_reply_lands_in_the_supergroup() {
    let rig = rig();
    rig.api.fail_next([TelegramError::MigrateToChat(-100_200)]);
    rig.run(&[update(1, -300)]).await;
    let calls = rig.api.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].params["chat_id"], -100_200);
    assert_eq!(rig.status(1).await, Status::Done);
}

#[tokio::test]
async fn a_record_leased_by_another_worker_is_returned_until_its_lease_ends() {
    let rig = rig();
    let deadline = rig.clock.now().plus(Duration::from_secs(60));
    // Another invocation claimed it and is still within its lease.
    rig.bot.on(1, [Step::Reply]);
    use tgq_core::ports::{ClaimRequest, UpdateLedger};
    let record = update(1, 10);
    rig.store
        .claim(&ClaimRequest {
            key: key(1),
            group: tgq_core::ids::GroupKey::new("10"),
            payload: record.body.clone(),
            now: rig.clock.now(),
            lease_until: rig.clock.now().plus(Duration::from_secs(30)),
            expires_at: rig.clock.now().plus(Duration::from_secs(3600)),
        })
        .await
        .unwrap();
    let report = rig
        .worker
        .process_batch(&[record, update(2, 10)], deadline)
        .await;
    assert_eq!(
        report.outcomes[0].1,
        RecordOutcome::Busy(Duration::from_secs(30))
    );
    assert_eq!(report.outcomes[1].1, RecordOutcome::SkippedBehindFailure);
    assert!(rig.api.calls().is_empty());
}

#[tokio::test]
async fn a_store_outage_fails_the_record_without_spending_an_attempt() {
    let rig = rig();
    rig.store.outage.set(true);
    let report = rig.run(&[update(1, 10)]).await;
    assert!(matches!(
        report.outcomes[0].1,
        RecordOutcome::StoreUnavailable(_)
    ));
    rig.store.outage.set(false);
    assert!(rig.store.record(&key(1)).is_none());
    assert!(rig.api.calls().is_empty());
}
