//! The operator's use cases and the worker's side of them, on in-memory adapters: replaying and
//! purging dead letters (audited), an operator's redrive through the SQS console, and a second
//! burial after a replay.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use teloxide_core::payloads::SendMessage;
use teloxide_core::types::{Update, UpdateKind};
use tgq_core::audit::{AuditAction, AuditReader};
use tgq_core::clock::{Clock, ManualClock};
use tgq_core::dead::{DeadLetterMarks, DeadReason};
use tgq_core::ids::{BotId, MessageGroupId, RecordKey, UpdateId};
use tgq_core::operate::{
    Operator, OperatorPorts, OperatorSettings, Replay, Report, Selection, Tally,
};
use tgq_core::ports::{DeadLetter, DeadLetters, QueueConsumer, QueueRecord, RecordReader};
use tgq_core::record::Status;
use tgq_core::worker::{BatchReport, RecordOutcome, WorkerSettings, REDRIVE_PRINCIPAL};
use tgq_core::{Context, Handler, HandlerError};
use tgq_memory::{Harness, MemoryDeadLetters, MemoryQueue, MemoryStore, RecordingBotApi};

const PRINCIPAL: &str = "arn:aws:iam::123456789012:user/ops";

/// Replies to every message, or fails it for good while `failing` is set (a bug the operator fixes
/// before replaying).
struct Bot {
    failing: AtomicBool,
    transient: AtomicBool,
}

#[async_trait]
impl Handler for Bot {
    async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        let UpdateKind::Message(message) = &update.kind else {
            return Ok(());
        };
        if self.failing.load(Ordering::SeqCst) {
            return Err(HandlerError::permanent("the bot has a bug"));
        }
        if self.transient.load(Ordering::SeqCst) {
            return Err(HandlerError::transient("the backend is down"));
        }
        let reply = SendMessage::new(message.chat.id, format!("reply to {}", update.id.0));
        ctx.send(reply).await.map(drop)
    }
}

/// The worker of [`Harness`] and an operator over its store, with the updates queue a replay
/// sends to.
struct Rig {
    harness: Harness,
    operator: Operator,
    bot: Arc<Bot>,
    store: Arc<MemoryStore>,
    dead: Arc<MemoryDeadLetters>,
    queue: Arc<MemoryQueue>,
    api: Arc<RecordingBotApi>,
    clock: ManualClock,
}

fn rig() -> Rig {
    let api = Arc::new(RecordingBotApi::new());
    let bot = Arc::new(Bot {
        failing: AtomicBool::new(false),
        transient: AtomicBool::new(false),
    });
    let harness = Harness::with_settings(
        bot_id(),
        bot.clone(),
        api.clone(),
        WorkerSettings::default(),
    );
    let (store, dead, clock) = (
        harness.store.clone(),
        harness.dead.clone(),
        harness.clock.clone(),
    );
    let queue = Arc::new(MemoryQueue::new(Arc::new(clock.clone())));
    let operator = Operator::new(
        OperatorSettings {
            principal: PRINCIPAL.into(),
            audit_ttl: Duration::from_secs(7 * 86_400),
        },
        OperatorPorts {
            dead: dead.clone(),
            records: store.clone(),
            reset: store.clone(),
            queue: queue.clone(),
            audit: store.clone(),
            clock: Arc::new(clock.clone()),
        },
    );
    Rig {
        harness,
        operator,
        bot,
        store,
        dead,
        queue,
        api,
        clock,
    }
}

fn bot_id() -> BotId {
    BotId::new("demo").unwrap()
}

fn key(update_id: i64) -> RecordKey {
    RecordKey::new(bot_id(), UpdateId(update_id))
}

fn body(update_id: i64, chat: i64) -> Bytes {
    Bytes::from(format!(
        r#"{{"update_id":{update_id},"message":{{"message_id":{update_id},"date":1700000000,"chat":{{"id":{chat},"type":"private","first_name":"Ada"}},"from":{{"id":{chat},"is_bot":false,"first_name":"Ada"}},"text":"hi"}}}}"#
    ))
}

/// The message the updates queue would deliver for an update.
fn delivery(update_id: i64, chat: i64) -> QueueRecord {
    QueueRecord {
        message_id: format!("msg-{update_id}"),
        receipt: tgq_core::ports::ReceiptHandle(format!("rcpt-{update_id}")),
        body: body(update_id, chat),
        group_id: MessageGroupId::from_raw(format!("demo:{chat}")),
        receive_count: 1,
        dead_letter: None,
    }
}

/// A dead letter moved back to the updates queue by an operator in the SQS console: the letter's
/// body and group, with its attributes.
fn redriven(letter: &DeadLetter, receive_count: u32) -> QueueRecord {
    QueueRecord {
        message_id: "moved-1".into(),
        receipt: tgq_core::ports::ReceiptHandle(format!("moved-rcpt-{receive_count}")),
        body: letter.body.clone(),
        group_id: MessageGroupId::from_raw(letter.group_id()),
        receive_count,
        dead_letter: Some(DeadLetterMarks {
            reason: letter.reason,
            attempts: letter.attempts,
        }),
    }
}

fn all() -> Selection {
    Selection::All
}

fn quiet(_: Tally) {}

impl Rig {
    async fn run(&self, records: &[QueueRecord]) -> BatchReport {
        self.harness.process(records).await
    }

    /// Buries update `update_id` of `chat`: the bot fails it for good.
    async fn bury(&self, update_id: i64, chat: i64) {
        self.bot.failing.store(true, Ordering::SeqCst);
        let report = self.run(&[delivery(update_id, chat)]).await;
        assert_eq!(
            report.outcomes[0].1,
            RecordOutcome::DeadLettered(DeadReason::Permanent)
        );
        self.bot.failing.store(false, Ordering::SeqCst);
    }

    /// Runs what the updates queue holds through the worker, deleting what it acknowledged.
    async fn drain_queue(&self) -> BatchReport {
        let records = self
            .queue
            .receive(10, Duration::from_secs(60), Duration::ZERO)
            .await
            .unwrap();
        let report = self.run(&records).await;
        let failed = report.failed_message_ids();
        for record in records.iter().filter(|r| !failed.contains(&r.message_id)) {
            self.queue.delete(&record.receipt).await.unwrap();
        }
        report
    }

    async fn status(&self, update_id: i64) -> Option<Status> {
        self.store
            .get(&key(update_id), self.clock.now())
            .await
            .unwrap()
            .map(|record| record.status)
    }

    async fn replay_all(&self) -> Report {
        self.operator
            .replay(&all(), Replay::default(), &quiet)
            .await
    }
}

#[tokio::test]
async fn a_replayed_dead_letter_runs_again_with_a_fresh_budget_and_is_deleted_and_audited() {
    let rig = rig();
    rig.bury(1, 10).await;
    assert_eq!(rig.status(1).await, Some(Status::Dead));

    let report = rig.replay_all().await;
    assert_eq!(report.acted.len(), 1, "{report:?}");
    assert!(report.skipped.is_empty(), "{report:?}");
    assert!(rig.dead.letters().is_empty(), "the letter is deleted");
    assert_eq!(rig.status(1).await, Some(Status::Queued));
    let bodies = rig.queue.bodies();
    assert_eq!(
        bodies,
        [body(1, 10)],
        "the update is back on the updates queue"
    );

    let ran = rig.drain_queue().await;
    assert!(
        matches!(ran.outcomes[0].1, RecordOutcome::Done(_)),
        "{ran:?}"
    );
    assert_eq!(rig.api.sent_texts(), ["reply to 1"]);
    let record = rig.store.record(&key(1)).unwrap();
    assert_eq!(
        (record.attempts, record.attempts - record.throttled),
        (2, 1),
        "two runs in all, one of them against the fresh budget"
    );

    let audit = rig.store.recent(10, rig.clock.now()).await.unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!(
        (
            audit[0].action,
            audit[0].principal.as_str(),
            audit[0].update_id
        ),
        (AuditAction::Replay, PRINCIPAL, Some(UpdateId(1)))
    );
}

#[tokio::test]
async fn a_replay_sends_the_update_with_a_new_deduplication_id_every_time() {
    let rig = rig();
    rig.bury(1, 10).await;
    let letter = rig.dead.letters()[0].clone();
    rig.replay_all().await;
    // The queue dropped nothing: a replay's id is neither the original send's nor an earlier
    // replay's, which SQS FIFO would drop for five minutes.
    rig.dead.dead_letter(&letter).await.unwrap();
    rig.replay_all().await;
    assert_eq!(rig.queue.depth(), 2, "both replays reached the queue");
    assert_eq!(rig.queue.sends(), 2);
}

#[tokio::test]
async fn a_letter_replayed_again_after_its_update_ran_is_refused_kept_and_audited() {
    let rig = rig();
    rig.bury(1, 10).await;
    let letter = rig.dead.letters()[0].clone();
    rig.replay_all().await;
    rig.drain_queue().await;
    assert_eq!(rig.status(1).await, Some(Status::Done));

    // A stray copy of the letter (its delete failed, or a second operator held it), a minute on.
    rig.clock.advance(Duration::from_secs(60));
    rig.dead.dead_letter(&letter).await.unwrap();
    let report = rig.replay_all().await;
    assert!(report.acted.is_empty(), "{report:?}");
    assert!(
        report.skipped[0].why.contains("processed since"),
        "{report:?}"
    );
    assert_eq!(rig.dead.letters(), [letter], "the letter is kept");
    assert_eq!(rig.queue.depth(), 0, "nothing was sent");
    assert_eq!(rig.api.sent_texts(), ["reply to 1"], "the update ran once");
    let audit = rig.store.recent(10, rig.clock.now()).await.unwrap();
    assert!(audit[0].outcome.starts_with("refused"), "{audit:?}");
}

#[tokio::test]
async fn a_letter_whose_record_is_gone_is_replayed_only_with_force_which_says_what_may_repeat() {
    let rig = rig();
    rig.bury(1, 10).await;
    // The record outlived by the letter: its TTL ran out (readers ignore an expired record).
    rig.clock
        .advance(WorkerSettings::default().record_ttl + Duration::from_secs(3600));
    assert_eq!(rig.status(1).await, None, "the record is gone");

    let refused = rig.replay_all().await;
    assert!(refused.acted.is_empty(), "{refused:?}");
    assert!(
        refused.skipped[0].why.contains("its record is gone")
            && refused.skipped[0].why.contains("--force"),
        "{refused:?}"
    );
    assert_eq!(rig.dead.letters().len(), 1, "the letter is kept");
    assert_eq!(rig.queue.depth(), 0, "nothing was sent");
    assert_eq!(rig.status(1).await, None, "a refusal writes no record");
    let audit = rig.store.recent(10, rig.clock.now()).await.unwrap();
    assert!(audit[0].outcome.starts_with("refused"), "{audit:?}");

    let forced = rig
        .operator
        .replay(
            &all(),
            Replay {
                dry_run: false,
                force: true,
            },
            &quiet,
        )
        .await;
    assert_eq!(forced.acted.len(), 1, "{forced:?}");
    assert!(
        forced.acted[0].detail.contains("--force") && forced.acted[0].detail.contains("made again"),
        "{forced:?}"
    );
    assert_eq!(rig.queue.depth(), 1);
    assert!(rig.dead.letters().is_empty());
}

#[tokio::test]
async fn a_second_burial_after_a_replay_is_a_new_letter_with_its_own_deduplication_id() {
    let rig = rig();
    rig.bury(1, 10).await;
    let first = rig.dead.letters()[0].clone();
    rig.replay_all().await;
    rig.bot.failing.store(true, Ordering::SeqCst);
    rig.drain_queue().await;
    let letters = rig.dead.letters();
    assert_eq!(letters.len(), 1, "buried again");
    let second = &letters[0];
    assert_ne!(
        first.dedup_id(),
        second.dedup_id(),
        "SQS FIFO would drop a second letter with the first one's id within five minutes"
    );
    assert_eq!((first.attempts, second.attempts), (1, 2));
}

#[tokio::test]
async fn a_dead_letter_moved_back_in_the_sqs_console_runs_again_and_is_audited() {
    let rig = rig();
    rig.bury(1, 10).await;
    let letter = rig.dead.letters()[0].clone();

    let report = rig.run(&[redriven(&letter, 1)]).await;
    assert!(
        matches!(report.outcomes[0].1, RecordOutcome::Done(_)),
        "instead of being acknowledged unseen: {report:?}"
    );
    assert_eq!(rig.api.sent_texts(), ["reply to 1"]);
    let audit = rig.store.recent(10, rig.clock.now()).await.unwrap();
    assert_eq!(
        (audit[0].action, audit[0].principal.as_str()),
        (AuditAction::Redrive, REDRIVE_PRINCIPAL)
    );

    // Delivered again (its delete was lost): the update ran, so nothing runs and nothing is audited.
    let again = rig.run(&[redriven(&letter, 2)]).await;
    assert_eq!(again.outcomes[0].1, RecordOutcome::AlreadyFinal);
    assert_eq!(rig.api.sent_texts(), ["reply to 1"]);
    assert_eq!(
        rig.store.recent(10, rig.clock.now()).await.unwrap().len(),
        1
    );
}

#[tokio::test]
async fn a_redriven_message_that_keeps_failing_gets_its_budget_back_only_once() {
    let rig = rig();
    rig.bury(1, 10).await;
    let letter = rig.dead.letters()[0].clone();
    rig.bot.transient.store(true, Ordering::SeqCst);
    for receive in 1..=3 {
        let report = rig.run(&[redriven(&letter, receive)]).await;
        assert!(
            matches!(report.outcomes[0].1, RecordOutcome::Retrying(..)),
            "{report:?}"
        );
    }
    let record = rig.store.record(&key(1)).unwrap();
    assert_eq!(
        record.attempts - record.throttled,
        3,
        "three runs counted against the budget the redrive gave back once"
    );
}

#[tokio::test]
async fn poison_is_not_replayed_and_a_letter_that_cannot_be_replayed_holds_back_its_chat() {
    let rig = rig();
    rig.bury(1, 10).await;
    rig.bury(2, 10).await;
    rig.bury(3, 20).await;
    let poison = DeadLetter::unidentified(bot_id(), Bytes::from_static(b"not json"), "x".into());
    rig.dead.dead_letter(&poison).await.unwrap();
    // Update 1 ran since (a stray letter): it cannot be replayed, so update 2 of the same chat
    // must not overtake it; chat 20 goes on.
    rig.store.set_status(&key(1), Status::Done);

    let report = rig.replay_all().await;
    let acted: Vec<Option<UpdateId>> = report.acted.iter().map(|a| a.update_id).collect();
    assert_eq!(acted, [Some(UpdateId(3))], "{report:?}");
    let skipped: Vec<(Option<UpdateId>, bool)> = report
        .skipped
        .iter()
        .map(|s| (s.update_id, s.why.contains("overtake")))
        .collect();
    assert_eq!(
        skipped,
        [
            (Some(UpdateId(1)), false),
            (Some(UpdateId(2)), true),
            (None, false)
        ],
        "{report:?}"
    );
    assert!(report.skipped[2].why.contains("poison"), "{report:?}");
    assert_eq!(rig.dead.letters().len(), 3);
}

#[tokio::test]
async fn a_failed_send_to_the_updates_queue_keeps_the_letter_for_another_replay() {
    let rig = rig();
    rig.bury(1, 10).await;
    rig.queue.outage.set(true);
    let report = rig.replay_all().await;
    assert!(
        report.skipped[0].why.contains("replay it again"),
        "{report:?}"
    );
    assert_eq!(rig.dead.letters().len(), 1, "the letter is kept");

    rig.queue.outage.set(false);
    let report = rig.replay_all().await;
    assert_eq!(
        report.acted.len(),
        1,
        "the record restarted before is replayable: {report:?}"
    );
    assert!(rig.dead.letters().is_empty());
    assert_eq!(rig.queue.depth(), 1);
}

#[tokio::test]
async fn a_dry_run_checks_each_letter_and_changes_nothing() {
    let rig = rig();
    rig.bury(1, 10).await;
    let report = rig
        .operator
        .replay(
            &all(),
            Replay {
                dry_run: true,
                force: false,
            },
            &quiet,
        )
        .await;
    assert!(
        report.acted[0].detail.starts_with("would replay"),
        "{report:?}"
    );
    assert_eq!(rig.status(1).await, Some(Status::Dead));
    assert_eq!(rig.dead.letters().len(), 1);
    assert_eq!(rig.queue.depth(), 0);
    assert!(rig
        .store
        .recent(10, rig.clock.now())
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn purge_deletes_the_selected_letters_audits_each_and_names_ids_it_did_not_find() {
    let rig = rig();
    rig.bury(1, 10).await;
    rig.bury(2, 20).await;
    let listed = rig.operator.list(10).await.unwrap();
    assert_eq!(listed.len(), 2);
    let ids = BTreeSet::from([listed[0].id.clone(), "no-such-letter".to_owned()]);

    let report = rig.operator.purge(&Selection::Ids(ids), &quiet).await;
    assert_eq!(report.acted.len(), 1, "{report:?}");
    assert_eq!(report.skipped[0].id, "no-such-letter");
    let left = rig.dead.letters();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].update_id, Some(UpdateId(2)));
    let audit = rig.store.recent(10, rig.clock.now()).await.unwrap();
    assert_eq!(
        (audit.len(), audit[0].action, audit[0].update_id),
        (1, AuditAction::Purge, Some(UpdateId(1)))
    );
    assert_eq!(
        rig.status(1).await,
        Some(Status::Dead),
        "a purge leaves the record"
    );
}

#[tokio::test]
async fn listing_and_showing_leave_every_letter_in_place() {
    let rig = rig();
    rig.bury(1, 10).await;
    rig.bury(2, 10).await;
    let listed = rig.operator.list(10).await.unwrap();
    let shown = rig.operator.show(&listed[1].id).await.unwrap().unwrap();
    assert_eq!(shown.letter.update_id, Some(UpdateId(2)));
    assert_eq!(shown.letter.body, body(2, 10));
    assert_eq!(rig.operator.list(10).await.unwrap(), listed);
    assert_eq!(rig.operator.depth().await.unwrap(), 2);
}
