//! The worker use case on in-memory adapters: order, failure propagation, budgets, fencing, recorded
//! actions and their outcomes, pacing, and deadlines.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;
use teloxide_core::payloads::{EditMessageText, SendMessage, SendPhoto};
use teloxide_core::types::{InputFile, MessageId, Update, UpdateKind};
use tgq_core::clock::{Clock, ManualClock};
use tgq_core::dead::{DeadReason, FailureClass};
use tgq_core::ids::{BotId, GroupKey, MessageGroupId, RecordKey, UpdateId};
use tgq_core::pacer::{Pacer, RateLimits};
use tgq_core::policy::RetryPolicy;
use tgq_core::ports::{
    Claim, ClaimRequest, Lease, QueueRecord, ReceiptHandle, RecordReader, UpdateLedger,
};
use tgq_core::record::{ActionResult, ActionState, Status, Timestamp};
use tgq_core::telegram::TelegramError;
use tgq_core::worker::{BatchReport, GoneRecipients, RecordOutcome, WorkerSettings};
use tgq_core::{Context, ErrorClass, Handler, HandlerError};
use tgq_memory::{
    Fault, Harness, MemoryDeadLetters, MemoryStore, RecordingBotApi, RecordingVisibility,
};

/// What the scripted bot does on one run of one update.
#[derive(Clone)]
enum Step {
    Reply,
    ReplyThenFail(fn() -> HandlerError),
    Fail(fn() -> HandlerError),
    Panic,
    SendOnceAtMostThenFail,
    SendOnceAtMost,
    /// A photo where an earlier run sent a message: the handler took another path.
    Photo,
    /// Edits message 5 of the chat.
    Edit,
    /// Replies `n` times.
    Replies(u32),
    /// Moves the clock on, then replies: the run took that long.
    ReplyAfter(Duration),
    /// Waits longer than any deadline.
    Hang,
    /// Another run takes the update over (its lease ran out), then this one tries to reply.
    LoseLeaseThenReply,
    /// Replies, then the store refuses to record intents, then replies again.
    ReplyThenIntentsRefused,
}

/// Replies `reply to {update_id}` in the update's chat, or does what the script says for that update.
struct ScriptedBot {
    script: Mutex<HashMap<i64, VecDeque<Step>>>,
    clock: ManualClock,
    store: Arc<MemoryStore>,
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
        let chat = message.chat.id;
        let reply = SendMessage::new(chat, format!("reply to {}", update.id.0));
        let photo = || SendPhoto::new(chat, InputFile::file_id("AgAD".to_owned().into()));
        match step {
            Step::Reply => ctx.send(reply).await.map(drop),
            Step::ReplyThenFail(error) => {
                ctx.send(reply).await?;
                Err(error())
            }
            Step::Fail(error) => Err(error()),
            Step::Panic => panic!("scripted panic"),
            Step::SendOnceAtMostThenFail => {
                ctx.send_at_most_once(photo()).await?;
                Err(HandlerError::transient("after the photo"))
            }
            Step::SendOnceAtMost => ctx.send_at_most_once(photo()).await.map(drop),
            Step::Photo => ctx.send(photo()).await.map(drop),
            Step::Edit => ctx
                .send(EditMessageText::new(chat, MessageId(5), "edited"))
                .await
                .map(drop),
            Step::Replies(n) => {
                for i in 0..n {
                    ctx.send(SendMessage::new(chat, format!("reply {i}")))
                        .await?;
                }
                Ok(())
            }
            Step::ReplyAfter(took) => {
                self.clock.advance(took);
                ctx.send(reply).await.map(drop)
            }
            Step::Hang => {
                tokio::time::sleep(Duration::from_secs(24 * 3600)).await;
                Ok(())
            }
            Step::ReplyThenIntentsRefused => {
                ctx.send(reply).await?;
                self.store
                    .outage
                    .fail_only("store record_intent", Fault::Unavailable);
                ctx.send(SendMessage::new(chat, "second")).await.map(drop)
            }
            Step::LoseLeaseThenReply => {
                self.clock.advance(Duration::from_secs(61));
                let now = self.clock.now();
                let takeover = self
                    .store
                    .claim(&ClaimRequest {
                        key: ctx.key().clone(),
                        group: ctx.group().clone(),
                        payload: Bytes::new(),
                        now,
                        lease_until: now.plus(Duration::from_secs(60)),
                        expires_at: now.plus(Duration::from_secs(3600)),
                    })
                    .await
                    .expect("the other run claims");
                assert!(matches!(takeover, Claim::Run(_)), "{takeover:?}");
                ctx.send(reply).await.map(drop)
            }
        }
    }
}

/// A [`Harness`] running the scripted bot, with handles on what the tests look at.
struct Rig {
    harness: Harness,
    bot: Arc<ScriptedBot>,
    store: Arc<MemoryStore>,
    dead: Arc<MemoryDeadLetters>,
    api: Arc<RecordingBotApi>,
    visibility: Arc<RecordingVisibility>,
    clock: ManualClock,
}

fn rig() -> Rig {
    rig_with(RateLimits::UNLIMITED)
}

/// A rig whose worker retries a refused settle or visibility change for up to 5 s.
fn patient_rig() -> Rig {
    rig_full(RateLimits::UNLIMITED, Duration::from_secs(5))
}

fn rig_with(limits: RateLimits) -> Rig {
    rig_full(limits, Duration::ZERO)
}

/// A rig whose bot sends to `api`.
fn rig_on(limits: RateLimits, api: RecordingBotApi) -> Rig {
    rig_built(limits, Duration::ZERO, api)
}

fn rig_full(limits: RateLimits, store_patience: Duration) -> Rig {
    rig_built(limits, store_patience, RecordingBotApi::new())
}

fn rig_built(limits: RateLimits, store_patience: Duration, api: RecordingBotApi) -> Rig {
    let settings = WorkerSettings {
        retry: RetryPolicy::default(),
        deadline_margin: Duration::from_secs(5),
        record_ttl: Duration::from_secs(7 * 86_400),
        max_receive_count: 1000,
        gone_recipients: GoneRecipients::Settle,
        store_patience,
        ack_callbacks: false,
        max_inline_wait: tgq_core::defaults::MAX_INLINE_WAIT,
        shared_inline_wait: tgq_core::defaults::SHARED_INLINE_WAIT,
        pre_checkout: Default::default(),
    };
    let mut bot = None;
    let harness = Harness::built(
        BotId::new("demo").unwrap(),
        Arc::new(api),
        settings,
        Some(Arc::new(Pacer::new(limits))),
        |store, clock| {
            let scripted = Arc::new(ScriptedBot {
                script: Mutex::default(),
                clock: clock.clone(),
                store: store.clone(),
            });
            bot = Some(scripted.clone());
            scripted
        },
    );
    Rig {
        bot: bot.expect("the harness built the bot"),
        store: harness.store.clone(),
        dead: harness.dead.clone(),
        api: harness.api.clone(),
        visibility: harness.visibility.clone(),
        clock: harness.clock.clone(),
        harness,
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
        group_id: MessageGroupId::from_raw(format!("demo:{chat}")),
        receive_count: 1,
        dead_letter: None,
    }
}

fn key(update_id: i64) -> RecordKey {
    RecordKey::new(BotId::new("demo").unwrap(), UpdateId(update_id))
}

impl Rig {
    /// Moves both clocks on: the store's and the pacer's.
    async fn advance(&self, by: Duration) {
        self.clock.advance(by);
        tokio::time::advance(by).await;
    }

    async fn run(&self, records: &[QueueRecord]) -> BatchReport {
        self.harness.process(records).await
    }

    async fn status(&self, update_id: i64) -> Status {
        self.store
            .get(&key(update_id), self.clock.now())
            .await
            .unwrap()
            .expect("record exists")
            .status
    }

    fn action_state(&self, update_id: i64, seq: u32) -> ActionState {
        self.store
            .record(&key(update_id))
            .expect("record exists")
            .actions[&seq]
            .state
            .clone()
    }
}

fn transient() -> HandlerError {
    HandlerError::transient("backend down")
}

fn outcome(report: &BatchReport, index: usize) -> &RecordOutcome {
    &report.outcomes[index].1
}

#[tokio::test]
async fn a_batch_is_handled_in_order_and_fully_acknowledged() {
    let rig = rig();
    let report = rig
        .run(&[update(1, 10), update(2, 20), update(3, 10)])
        .await;
    assert!(report.failed_message_ids().is_empty());
    assert_eq!(report.outcomes.len(), 3);
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
    assert_eq!(*outcome(&report, 2), RecordOutcome::SkippedBehindFailure);
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
    assert_eq!(
        *outcome(&report, 0),
        RecordOutcome::Retrying(delay, ErrorClass::Transient)
    );
    assert_eq!(rig.status(1).await, Status::Retrying);
}

#[tokio::test]
async fn a_long_flood_wait_from_telegram_is_honoured_exactly_and_spends_no_attempt() {
    let rig = rig();
    rig.api
        .fail_next([TelegramError::RetryAfter(Duration::from_secs(17))]);
    let report = rig.run(&[update(1, 10)]).await;
    assert_eq!(
        rig.visibility.last_for("rcpt-1"),
        Some(Duration::from_secs(18))
    );
    assert_eq!(
        *outcome(&report, 0),
        RecordOutcome::Retrying(
            Duration::from_secs(18),
            ErrorClass::RateLimited(Duration::from_secs(17))
        )
    );
    let record = rig.store.record(&key(1)).unwrap();
    assert_eq!((record.attempts, record.throttled), (1, 1));
    assert!(
        matches!(
            record.actions[&1].state,
            ActionState::Failed { code: 429, .. }
        ),
        "a 429 certainly did not take effect: {:?}",
        record.actions[&1].state
    );
}

#[tokio::test]
async fn while_the_bot_is_held_by_a_long_flood_wait_its_next_updates_go_back_unclaimed() {
    let rig = rig();
    rig.api
        .fail_next([TelegramError::RetryAfter(Duration::from_secs(17))]);
    rig.run(&[update(1, 10)]).await;
    let calls = rig.api.calls().len();
    let report = rig.run(&[update(2, 20)]).await;
    assert!(
        matches!(
            outcome(&report, 0),
            RecordOutcome::Retrying(delay, ErrorClass::RateLimited(_)) if *delay >= Duration::from_secs(17)
        ),
        "{report:?}"
    );
    assert!(
        rig.store.record(&key(2)).is_none(),
        "nothing claimed, nothing written: {:?}",
        rig.store.record(&key(2))
    );
    assert_eq!(rig.api.calls().len(), calls, "nothing sent");
    assert!(rig.visibility.last_for("rcpt-2") >= Some(Duration::from_secs(17)));
}

#[tokio::test(start_paused = true)]
async fn a_short_flood_wait_is_sat_out_inside_the_run_and_holds_every_send_of_the_bot() {
    let rig = rig();
    rig.api
        .fail_next([TelegramError::RetryAfter(Duration::from_secs(3))]);
    let started = tokio::time::Instant::now();
    let report = rig.run(&[update(1, 10), update(2, 20)]).await;
    assert!(report.failed_message_ids().is_empty(), "{report:?}");
    assert_eq!(rig.api.sent_texts(), ["reply to 1", "reply to 2"]);
    assert!(started.elapsed() >= Duration::from_secs(3));
    let paced: Duration = report.runs.iter().map(|r| r.paced).sum();
    assert!(paced >= Duration::from_secs(3), "{paced:?}");
    assert_eq!(rig.store.record(&key(1)).unwrap().attempts, 1);
}

#[tokio::test(start_paused = true)]
async fn rate_limits_never_bury_an_update_until_the_time_budget_is_spent() {
    let rig = rig();
    for _ in 0..12 {
        rig.api
            .fail_next([TelegramError::RetryAfter(Duration::from_secs(60))]);
        let report = rig.run(&[update(1, 10)]).await;
        assert!(
            matches!(outcome(&report, 0), RecordOutcome::Retrying(..)),
            "{report:?}"
        );
        rig.advance(Duration::from_secs(61)).await;
    }
    assert!(
        rig.dead.letters().is_empty(),
        "a throttled update spent its budget"
    );
    assert_eq!(rig.store.record(&key(1)).unwrap().attempts, 12);
    rig.advance(Duration::from_secs(24 * 3600)).await;
    rig.api
        .fail_next([TelegramError::RetryAfter(Duration::from_secs(60))]);
    let report = rig.run(&[update(1, 10)]).await;
    assert_eq!(
        *outcome(&report, 0),
        RecordOutcome::DeadLettered(DeadReason::ThrottledTooLong)
    );
    assert_eq!(rig.dead.letters()[0].error_class, FailureClass::RateLimited);
}

#[tokio::test(start_paused = true)]
async fn sends_are_paced_to_telegram_s_limits_per_chat() {
    let rig = rig_with(RateLimits::default());
    rig.bot.on(1, [Step::Replies(3)]);
    let started = tokio::time::Instant::now();
    let report = rig.run(&[update(1, 10)]).await;
    assert!(report.failed_message_ids().is_empty());
    assert_eq!(rig.api.sent_texts().len(), 3);
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "three sends to one chat took {:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_batch_of_one_bot_s_updates_waits_inline_for_its_chat_s_next_second() {
    let rig = rig_with(RateLimits::default());
    rig.bot.on(1, [Step::Replies(2)]);
    let report = rig.run(&[update(1, 10), update(2, 20)]).await;
    assert!(report.failed_message_ids().is_empty(), "{report:?}");
    assert_eq!(rig.api.sent_texts().len(), 3);
    let paced: Duration = report.runs.iter().map(|r| r.paced).sum();
    assert!(paced >= Duration::from_secs(1), "{paced:?}");
}

#[tokio::test(start_paused = true)]
async fn a_batch_shared_with_another_bot_gives_a_chat_s_second_reply_back_rather_than_wait() {
    let rig = rig_with(RateLimits::default());
    rig.bot.on(1, [Step::Replies(2)]);
    let mut quiet = update(2, 20);
    quiet.group_id = MessageGroupId::from_raw("quiet:20");
    let report = rig.run(&[update(1, 10), quiet]).await;
    assert!(
        matches!(
            outcome(&report, 0),
            RecordOutcome::Retrying(_, ErrorClass::RateLimited(_))
        ),
        "{report:?}"
    );
    assert!(
        matches!(outcome(&report, 1), RecordOutcome::Done(_)),
        "{report:?}"
    );
    assert_eq!(rig.api.sent_texts(), ["reply 0", "reply to 2"]);
    assert_eq!(rig.store.record(&key(1)).unwrap().attempts, 1);
}

#[tokio::test(start_paused = true)]
async fn sends_to_a_bot_api_nobody_reads_at_telegram_s_pace_are_not_held_to_its_limits() {
    let rig = rig_on(RateLimits::default(), RecordingBotApi::unpaced());
    rig.bot.on(1, [Step::Replies(3)]);
    let started = tokio::time::Instant::now();
    let report = rig.run(&[update(1, 10)]).await;
    assert!(report.failed_message_ids().is_empty());
    assert_eq!(rig.api.sent_texts().len(), 3);
    assert_eq!(started.elapsed(), Duration::ZERO);
    let paced: Duration = report.runs.iter().map(|r| r.paced).sum();
    assert_eq!(paced, Duration::ZERO);
}

#[tokio::test]
async fn a_permanent_error_is_dead_lettered_on_the_first_attempt() {
    let rig = rig();
    rig.api.fail_next([TelegramError::Api {
        code: 400,
        description: "Bad Request: message text is empty".into(),
    }]);
    let report = rig.run(&[update(1, 10), update(2, 10)]).await;
    assert_eq!(
        *outcome(&report, 0),
        RecordOutcome::DeadLettered(DeadReason::Permanent)
    );
    // A dead-lettered record is acknowledged, so its chat goes on.
    assert!(report.failed_message_ids().is_empty());
    let letters = rig.dead.letters();
    assert_eq!(letters.len(), 1);
    assert_eq!(
        (
            letters[0].reason,
            letters[0].error_class,
            letters[0].attempts
        ),
        (DeadReason::Permanent, FailureClass::Permanent, 1)
    );
    assert_eq!(letters[0].body, update(1, 10).body);
    assert_eq!(rig.status(1).await, Status::Dead);
}

/// A reaction with neither `user` nor `actor_chat`: teloxide-core's parser unwraps a `None` on it.
fn reaction_naming_nobody(update_id: i64, chat: i64) -> QueueRecord {
    let body = format!(
        r#"{{"update_id":{update_id},"message_reaction":{{"chat":{{"id":{chat},"type":"private","first_name":"Ada"}},"message_id":5,"date":1700000000,"old_reaction":[],"new_reaction":[{{"type":"emoji","emoji":"👍"}}]}}}}"#
    );
    QueueRecord {
        body: Bytes::from(body),
        ..update(update_id, chat)
    }
}

#[tokio::test]
async fn an_update_the_parser_panics_on_is_dead_lettered_unreadable_and_its_chat_goes_on() {
    let rig = rig();
    let report = rig
        .run(&[reaction_naming_nobody(1, 10), update(2, 10)])
        .await;
    assert_eq!(
        *outcome(&report, 0),
        RecordOutcome::DeadLettered(DeadReason::Unreadable)
    );
    assert!(
        matches!(outcome(&report, 1), RecordOutcome::Done(_)),
        "{:?}",
        outcome(&report, 1)
    );
    assert!(report.failed_message_ids().is_empty());
    let letters = rig.dead.letters();
    assert_eq!(letters.len(), 1);
    assert_eq!(
        (letters[0].reason, letters[0].attempts),
        (DeadReason::Unreadable, 1)
    );
    assert!(
        letters[0].error.contains("the parser panicked"),
        "{}",
        letters[0].error
    );
    assert_eq!(letters[0].body, reaction_naming_nobody(1, 10).body);
    assert_eq!(rig.status(1).await, Status::Dead);
}

#[tokio::test]
async fn an_update_that_does_not_parse_names_the_field_but_never_a_value() {
    let rig = rig();
    let mistyped = QueueRecord {
        body: Bytes::from_static(
            br#"{"update_id":3,"message":{"message_id":"a secret","date":1700000000,"chat":{"id":10,"type":"private","first_name":"Ada"},"text":"hi"}}"#,
        ),
        ..update(3, 10)
    };
    let report = rig.run(&[mistyped]).await;
    let letters = rig.dead.letters();
    assert_eq!(
        *outcome(&report, 0),
        RecordOutcome::DeadLettered(DeadReason::Unreadable)
    );
    assert!(!letters[0].error.contains("secret"), "{}", letters[0].error);
}

#[tokio::test]
async fn the_attempt_budget_ends_in_the_dead_letter_queue() {
    let rig = rig();
    rig.bot.on(1, (0..8).map(|_| Step::Fail(transient)));
    for attempt in 1..=8u32 {
        let report = rig.run(&[update(1, 10)]).await;
        if attempt < 8 {
            assert!(
                matches!(outcome(&report, 0), RecordOutcome::Retrying(..)),
                "attempt {attempt}"
            );
        } else {
            assert_eq!(
                *outcome(&report, 0),
                RecordOutcome::DeadLettered(DeadReason::BudgetSpent)
            );
        }
    }
    assert_eq!(rig.dead.letters()[0].attempts, 8);
    assert_eq!(rig.dead.letters()[0].reason, DeadReason::BudgetSpent);
}

#[tokio::test]
async fn a_crash_loop_past_the_budget_is_buried_when_the_next_claim_comes() {
    let rig = rig();
    // Eight runs each died holding the lease: claims without settles.
    for _ in 0..8 {
        let now = rig.clock.now();
        let claim = rig
            .store
            .claim(&ClaimRequest {
                key: key(1),
                group: GroupKey::new("10"),
                payload: update(1, 10).body,
                now,
                lease_until: now.plus(Duration::from_secs(60)),
                expires_at: now.plus(Duration::from_secs(3600)),
            })
            .await
            .unwrap();
        assert!(matches!(claim, Claim::Run(_)));
        rig.clock.advance(Duration::from_secs(61));
    }
    let report = rig.run(&[update(1, 10)]).await;
    assert_eq!(
        *outcome(&report, 0),
        RecordOutcome::DeadLettered(DeadReason::BudgetSpent)
    );
    assert!(rig.api.calls().is_empty(), "the ninth run must not run");
    assert_eq!(rig.dead.letters()[0].attempts, 9);
}

#[tokio::test]
async fn a_redelivered_done_record_sends_nothing() {
    let rig = rig();
    rig.run(&[update(1, 10)]).await;
    let report = rig.run(&[update(1, 10)]).await;
    assert_eq!(*outcome(&report, 0), RecordOutcome::AlreadyFinal);
    assert_eq!(rig.api.sent_texts().len(), 1);
}

#[tokio::test]
async fn a_retry_after_a_partial_run_does_not_repeat_sent_actions() {
    let rig = rig();
    rig.bot.on(1, [Step::ReplyThenFail(transient), Step::Reply]);
    rig.run(&[update(1, 10)]).await;
    let report = rig.run(&[update(1, 10)]).await;
    let RecordOutcome::Done(summary) = outcome(&report, 0) else {
        panic!("{:?}", report.outcomes)
    };
    assert_eq!(summary.replayed, 1);
    assert_eq!(rig.api.sent_texts(), ["reply to 1"]);
}

#[tokio::test]
async fn outcomes_an_intent_write_could_not_carry_are_written_by_the_settle() {
    let rig = rig();
    rig.bot
        .on(1, [Step::ReplyThenIntentsRefused, Step::Replies(2)]);
    let report = rig.run(&[update(1, 10)]).await;
    // The store's refusal is not the update's failure: it backs off and spends no attempt.
    assert!(
        matches!(outcome(&report, 0), RecordOutcome::StoreUnavailable(_)),
        "{report:?}"
    );
    assert_eq!(rig.store.record(&key(1)).unwrap().throttled, 1);
    assert!(
        matches!(rig.action_state(1, 1), ActionState::Succeeded(_)),
        "the first reply's result went with the settle: {:?}",
        rig.action_state(1, 1)
    );
    rig.store.outage.set(false);
    let report = rig.run(&[update(1, 10)]).await;
    assert!(matches!(outcome(&report, 0), RecordOutcome::Done(_)));
    assert_eq!(report.resent_after_unknown_outcome(), 0);
    assert_eq!(rig.api.sent_texts(), ["reply to 1", "reply 1"]);
}

#[tokio::test]
async fn results_are_kept_as_ids_not_as_telegram_s_whole_object() {
    let rig = rig();
    rig.run(&[update(1, 10)]).await;
    assert_eq!(
        rig.action_state(1, 1),
        ActionState::Succeeded(ActionResult::Message {
            chat_id: 10,
            message_id: 1
        })
    );
}

#[tokio::test]
async fn a_call_refused_before_it_reached_telegram_is_sent_again_once() {
    let rig = rig();
    // The first call failed before taking effect (a refused connection, say): the run is retried.
    rig.api.fail_next([TelegramError::Timeout]);
    rig.run(&[update(1, 10)]).await;
    let report = rig.run(&[update(1, 10)]).await;
    assert_eq!(rig.api.sent_texts(), ["reply to 1"]);
    assert_eq!(rig.status(1).await, Status::Done);
    assert_eq!(report.resent_after_unknown_outcome(), 1);
}

#[tokio::test]
async fn an_at_least_once_send_whose_answer_was_lost_is_sent_again_and_counted() {
    let rig = rig();
    rig.api.lose_next_answer();
    rig.run(&[update(1, 10)]).await;
    assert_eq!(rig.action_state(1, 1), ActionState::Pending);
    let report = rig.run(&[update(1, 10)]).await;
    assert_eq!(
        rig.api.sent_texts(),
        ["reply to 1", "reply to 1"],
        "at least once: the send whose outcome was unknown went out again"
    );
    assert_eq!(report.resent_after_unknown_outcome(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_run_killed_while_its_send_waits_for_a_slot_leaves_no_unknown_outcome_behind() {
    let rig = rig_with(RateLimits::default());
    rig.bot.on(1, [Step::Replies(2), Step::Replies(2)]);
    // The second reply waits a second for the chat's slot; the process dies during the wait.
    let run = tokio::time::timeout(Duration::from_millis(500), rig.run(&[update(1, 10)])).await;
    assert!(run.is_err(), "the run was meant to be waiting");
    assert_eq!(rig.api.sent_texts(), ["reply 0"]);
    rig.advance(Duration::from_secs(61)).await;

    let report = rig.run(&[update(1, 10)]).await;
    assert!(
        matches!(outcome(&report, 0), RecordOutcome::Done(_)),
        "{report:?}"
    );
    assert_eq!(
        report.resent_after_unknown_outcome(),
        0,
        "the second reply never went out, and the first one's answer was kept"
    );
    assert_eq!(rig.api.sent_texts(), ["reply 0", "reply 1"]);
}

#[tokio::test]
async fn an_uncertain_at_most_once_action_is_marked_and_reported_and_never_sent_again() {
    let rig = rig();
    rig.bot.on(
        1,
        [
            Step::SendOnceAtMostThenFail,
            Step::SendOnceAtMost,
            Step::SendOnceAtMost,
        ],
    );
    rig.api.lose_next_answer();
    rig.run(&[update(1, 10)]).await;
    assert_eq!(rig.action_state(1, 1), ActionState::Pending);
    let report = rig.run(&[update(1, 10)]).await;
    let RecordOutcome::Done(summary) = outcome(&report, 0) else {
        panic!("{:?}", report.outcomes)
    };
    assert_eq!(summary.uncertain.len(), 1, "the skipped send is reported");
    assert_eq!(summary.uncertain[0].method, "sendPhoto");
    assert_eq!(rig.action_state(1, 1), ActionState::Uncertain);
    let photos = rig
        .api
        .calls()
        .iter()
        .filter(|c| c.method == "sendPhoto")
        .count();
    assert_eq!(photos, 1, "an at-most-once action was sent twice");
}

#[tokio::test(start_paused = true)]
async fn an_at_most_once_call_refused_by_a_429_is_sent_again_on_the_retry() {
    let rig = rig();
    rig.bot.on(1, [Step::SendOnceAtMost, Step::SendOnceAtMost]);
    rig.api
        .fail_next([TelegramError::RetryAfter(Duration::from_secs(30))]);
    rig.run(&[update(1, 10)]).await;
    assert!(matches!(
        rig.action_state(1, 1),
        ActionState::Failed { code: 429, .. }
    ));
    rig.advance(Duration::from_secs(31)).await;
    rig.run(&[update(1, 10)]).await;
    assert_eq!(
        rig.api
            .calls()
            .iter()
            .filter(|c| c.method == "sendPhoto")
            .count(),
        1
    );
    assert!(matches!(rig.action_state(1, 1), ActionState::Succeeded(_)));
    assert_eq!(rig.status(1).await, Status::Done);
}

#[tokio::test]
async fn a_retry_that_takes_another_path_records_the_new_call_before_sending_it() {
    let rig = rig();
    rig.bot.on(1, [Step::ReplyThenFail(transient), Step::Photo]);
    rig.run(&[update(1, 10)]).await;
    let report = rig.run(&[update(1, 10)]).await;
    assert_eq!(report.runs[0].diverged, vec![1]);
    let methods: Vec<_> = rig.api.calls().iter().map(|c| c.method.clone()).collect();
    assert_eq!(methods, ["sendMessage", "sendPhoto"]);
    let action = &rig.store.record(&key(1)).unwrap().actions[&1];
    assert_eq!(
        action.method, "sendPhoto",
        "the earlier call's record was replaced"
    );
    assert!(matches!(action.state, ActionState::Succeeded(_)));
}

#[tokio::test]
async fn an_error_proving_the_earlier_send_took_effect_settles_the_action() {
    let rig = rig();
    rig.bot.on(1, [Step::Edit, Step::Edit]);
    rig.api.lose_next_answer();
    rig.run(&[update(1, 10)]).await;
    rig.api.fail_next([TelegramError::Api {
        code: 400,
        description: "Bad Request: message is not modified: specified new message content and reply markup are exactly the same".into(),
    }]);
    let report = rig.run(&[update(1, 10)]).await;
    assert!(
        matches!(outcome(&report, 0), RecordOutcome::Done(_)),
        "{report:?}"
    );
    assert!(rig.dead.letters().is_empty());
    assert!(matches!(rig.action_state(1, 1), ActionState::Succeeded(_)));
}

#[tokio::test]
async fn a_panicking_handler_is_a_transient_failure() {
    let rig = rig();
    rig.bot.on(1, [Step::Panic]);
    let report = rig.run(&[update(1, 10)]).await;
    assert!(
        matches!(
            outcome(&report, 0),
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
        .harness
        .process_until(&[update(1, 10), update(2, 20)], deadline)
        .await;
    assert_eq!(report.failed_message_ids(), ["msg-1", "msg-2"]);
    assert!(report
        .outcomes
        .iter()
        .all(|(_, o)| *o == RecordOutcome::DeadlineReached));
    assert!(rig.api.calls().is_empty());
    assert_eq!(rig.visibility.last_for("rcpt-1"), Some(Duration::ZERO));
    assert_eq!(rig.visibility.last_for("rcpt-2"), Some(Duration::ZERO));
}

#[tokio::test]
async fn the_deadline_reached_in_the_middle_of_a_batch_returns_the_rest_unrun() {
    let rig = rig();
    rig.bot.on(1, [Step::ReplyAfter(Duration::from_secs(56))]);
    let report = rig
        .run(&[update(1, 10), update(2, 20), update(3, 30)])
        .await;
    assert!(matches!(outcome(&report, 0), RecordOutcome::Done(_)));
    assert_eq!(*outcome(&report, 1), RecordOutcome::DeadlineReached);
    assert_eq!(*outcome(&report, 2), RecordOutcome::DeadlineReached);
    assert_eq!(report.failed_message_ids(), ["msg-2", "msg-3"]);
    assert_eq!(rig.api.sent_texts(), ["reply to 1"]);
    assert_eq!(rig.visibility.last_for("rcpt-3"), Some(Duration::ZERO));
}

#[tokio::test(start_paused = true)]
async fn a_handler_running_into_the_deadline_is_cut_off_and_retried() {
    let rig = rig();
    rig.bot.on(1, [Step::Hang]);
    let report = rig.run(&[update(1, 10)]).await;
    assert!(
        matches!(
            outcome(&report, 0),
            RecordOutcome::Retrying(_, ErrorClass::Transient)
        ),
        "{report:?}"
    );
    let record = rig.store.record(&key(1)).unwrap();
    assert_eq!(record.status, Status::Retrying);
    assert!(record.last_error.unwrap().contains("deadline"));
}

#[tokio::test]
async fn a_message_first_received_thirteen_hours_ago_still_backs_off_for_the_whole_delay() {
    // SQS counts its 12-hour visibility ceiling from each receive, so a message first received
    // 13 hours ago (a chat held by a long flood wait) may be hidden again as long as it asks.
    let rig = rig();
    rig.clock.advance(Duration::from_secs(13 * 3600));
    rig.api
        .fail_next([TelegramError::RetryAfter(Duration::from_secs(3600))]);
    rig.run(&[update(1, 10)]).await;
    assert_eq!(
        rig.visibility.last_for("rcpt-1"),
        Some(Duration::from_secs(3601)),
        "retry_after + 1 s, not 0"
    );
}

#[tokio::test]
async fn a_visibility_change_stays_under_twelve_hours_less_the_longest_invocation() {
    let rig = rig();
    // Telegram asks for a day; SQS takes at most 12 hours from this receive.
    rig.api
        .fail_next([TelegramError::RetryAfter(Duration::from_secs(24 * 3600))]);
    rig.run(&[update(1, 10)]).await;
    assert_eq!(
        rig.visibility.last_for("rcpt-1"),
        Some(Duration::from_secs(12 * 3600 - 15 * 60))
    );
}

#[tokio::test]
async fn a_record_whose_previous_run_died_runs_after_the_other_chats_of_its_batch() {
    let rig = rig();
    let now = rig.clock.now();
    rig.store
        .claim(&ClaimRequest {
            key: key(1),
            group: GroupKey::new("10"),
            payload: update(1, 10).body,
            now,
            lease_until: now.plus(Duration::from_secs(1)),
            expires_at: now.plus(Duration::from_secs(3600)),
        })
        .await
        .unwrap();
    rig.clock.advance(Duration::from_secs(2));
    let report = rig
        .run(&[update(1, 10), update(2, 20), update(3, 10), update(4, 30)])
        .await;
    assert!(report.failed_message_ids().is_empty(), "{report:?}");
    assert_eq!(
        rig.api.sent_texts(),
        ["reply to 2", "reply to 4", "reply to 1", "reply to 3"],
        "the resumed chat goes last, in its own order"
    );
    assert_eq!(rig.store.record(&key(1)).unwrap().attempts, 2);
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

#[tokio::test(start_paused = true)]
async fn a_migrated_group_is_followed_after_a_short_flood_wait_too() {
    let rig = rig();
    rig.api.fail_next([
        TelegramError::RetryAfter(Duration::from_secs(1)),
        TelegramError::MigrateToChat(-100_200),
    ]);
    let report = rig.run(&[update(1, -300)]).await;
    assert!(
        matches!(outcome(&report, 0), RecordOutcome::Done(_)),
        "{:?}",
        outcome(&report, 0)
    );
    let calls = rig.api.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].params["chat_id"], -100_200);
    assert_eq!(rig.status(1).await, Status::Done);
    assert!(rig.dead.letters().is_empty());
}

#[tokio::test]
async fn a_record_leased_by_another_worker_is_returned_until_its_lease_ends() {
    let rig = rig();
    let deadline = rig.clock.now().plus(Duration::from_secs(60));
    let record = update(1, 10);
    rig.store
        .claim(&ClaimRequest {
            key: key(1),
            group: GroupKey::new("10"),
            payload: record.body.clone(),
            now: rig.clock.now(),
            lease_until: rig.clock.now().plus(Duration::from_secs(30)),
            expires_at: rig.clock.now().plus(Duration::from_secs(3600)),
        })
        .await
        .unwrap();
    let report = rig
        .harness
        .process_until(&[record, update(2, 10)], deadline)
        .await;
    assert_eq!(
        *outcome(&report, 0),
        RecordOutcome::Busy(Duration::from_secs(30))
    );
    assert_eq!(
        rig.visibility.last_for("rcpt-1"),
        Some(Duration::from_secs(30))
    );
    assert_eq!(*outcome(&report, 1), RecordOutcome::SkippedBehindFailure);
    assert!(rig.api.calls().is_empty());
}

#[tokio::test]
async fn a_run_whose_lease_was_taken_over_stops_before_its_next_send() {
    let rig = rig();
    rig.bot.on(1, [Step::LoseLeaseThenReply]);
    let report = rig.run(&[update(1, 10)]).await;
    assert_eq!(*outcome(&report, 0), RecordOutcome::Fenced);
    assert_eq!(report.failed_message_ids(), ["msg-1"]);
    assert!(rig.api.calls().is_empty(), "the stale run sent");
    assert_eq!(
        rig.visibility.last_for("rcpt-1"),
        None,
        "the message is left to its new owner"
    );
    let record = rig.store.record(&key(1)).unwrap();
    assert_eq!((record.status, record.attempts), (Status::Processing, 2));
    assert!(rig.dead.letters().is_empty());
}

#[tokio::test]
async fn a_claim_the_store_refuses_backs_off_without_spending_an_attempt() {
    let rig = rig();
    rig.store.outage.set(true);
    let mut record = update(1, 10);
    record.receive_count = 3;
    let report = rig.run(&[record]).await;
    let RecordOutcome::StoreUnavailable(delay) = *outcome(&report, 0) else {
        panic!("{report:?}")
    };
    // Like a failed run's backoff, counted by the receives: 2 s · 2² · jitter.
    assert!(
        delay >= Duration::from_secs(4) && delay <= Duration::from_secs(12),
        "{delay:?}"
    );
    assert_eq!(rig.visibility.last_for("rcpt-1"), Some(delay));
    rig.store.outage.set(false);
    assert!(rig.store.record(&key(1)).is_none());
    assert!(rig.api.calls().is_empty());
}

#[tokio::test]
async fn a_store_that_refuses_a_run_s_intent_writes_spends_no_attempt_and_buries_nothing() {
    let rig = rig();
    for _ in 0..12 {
        rig.store
            .outage
            .fail_only_times("store record_intent", Fault::Unavailable, 1);
        let report = rig.run(&[update(1, 10)]).await;
        assert!(
            matches!(outcome(&report, 0), RecordOutcome::StoreUnavailable(_)),
            "{:?}",
            outcome(&report, 0)
        );
    }
    assert!(
        rig.dead.letters().is_empty(),
        "the store's trouble spent the update's budget"
    );
    let record = rig.store.record(&key(1)).unwrap();
    assert_eq!(
        (record.status, record.attempts, record.throttled),
        (Status::Retrying, 12, 12),
        "every run refunded"
    );
    let report = rig.run(&[update(1, 10)]).await;
    assert!(matches!(outcome(&report, 0), RecordOutcome::Done(_)));
    assert_eq!(rig.api.sent_texts(), ["reply to 1"]);
}

#[tokio::test]
async fn a_misconfigured_store_never_buries_an_update() {
    let rig = rig();
    rig.store.outage.fail(Fault::Misconfigured);
    for _ in 0..20 {
        let report = rig.run(&[update(1, 10)]).await;
        assert!(matches!(
            outcome(&report, 0),
            RecordOutcome::StoreUnavailable(_)
        ));
    }
    assert!(rig.dead.letters().is_empty());
}

#[tokio::test]
async fn a_retrying_write_refused_for_a_moment_is_tried_again_so_the_record_does_not_hold_its_lease(
) {
    let rig = patient_rig();
    rig.bot.on(1, [Step::Fail(transient)]);
    rig.store
        .outage
        .fail_only_times("store settle", Fault::Unavailable, 2);
    let report = rig.run(&[update(1, 10)]).await;
    assert!(
        matches!(outcome(&report, 0), RecordOutcome::Retrying(..)),
        "{report:?}"
    );
    // Left PROCESSING, the record would make its next delivery wait for the lease to end.
    assert_eq!(rig.status(1).await, Status::Retrying);
}

#[tokio::test]
async fn a_done_write_refused_for_a_moment_is_tried_again_in_the_run_and_the_reply_is_sent_once() {
    let rig = patient_rig();
    rig.store
        .outage
        .fail_only_times("store settle", Fault::Unavailable, 3);
    let report = rig.run(&[update(1, 10)]).await;
    assert!(
        matches!(outcome(&report, 0), RecordOutcome::Done(_)),
        "{report:?}"
    );
    assert!(report.failed_message_ids().is_empty(), "acknowledged");
    assert_eq!(rig.status(1).await, Status::Done);
    assert_eq!(rig.api.sent_texts(), ["reply to 1"], "not run again");
}

/// Keeps the rig's clock with tokio's (paused) time, so that waits inside the worker move it.
fn follow_tokio_time(clock: &ManualClock) -> tokio::task::JoinHandle<()> {
    let clock = clock.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(10)).await;
            clock.advance(Duration::from_millis(10));
        }
    })
}

#[tokio::test(start_paused = true)]
async fn the_waits_for_a_refused_visibility_change_end_before_the_invocation_s_deadline() {
    let rig = rig_full(RateLimits::UNLIMITED, tgq_core::defaults::STORE_PATIENCE);
    rig.bot.on(1, [Step::Fail(transient)]);
    rig.visibility
        .outage
        .fail_only("visibility change", Fault::Unavailable);
    let ticker = follow_tokio_time(&rig.clock);
    // Enough time to start the record (the margin is 5 s), far less than the store's patience.
    let deadline = rig.clock.now().plus(Duration::from_secs(8));
    let report = rig
        .harness
        .process_until(&[update(1, 10), update(2, 10)], deadline)
        .await;
    let answered = rig.clock.now();
    ticker.abort();
    assert!(
        matches!(outcome(&report, 0), RecordOutcome::Retrying(..)),
        "{report:?}"
    );
    // Given back unrun, behind its chat's failure or for want of time: its own wait is bounded too.
    assert!(
        matches!(
            outcome(&report, 1),
            RecordOutcome::SkippedBehindFailure | RecordOutcome::DeadlineReached
        ),
        "{report:?}"
    );
    assert!(
        answered <= Timestamp(deadline.0 - 1000),
        "the batch answered {} ms after its deadline less a second",
        answered.0 as i64 - deadline.0 as i64 + 1000
    );
}

#[tokio::test]
async fn a_visibility_change_refused_for_a_moment_is_tried_again_so_the_message_returns_on_time() {
    let rig = patient_rig();
    rig.store
        .outage
        .fail_only("store claim", Fault::Unavailable);
    rig.visibility
        .outage
        .fail_only_times("visibility change", Fault::Unavailable, 2);
    let report = rig.run(&[update(1, 10)]).await;
    assert!(matches!(
        outcome(&report, 0),
        RecordOutcome::StoreUnavailable(_)
    ));
    let asked = rig
        .visibility
        .last_for("rcpt-1")
        .expect("the backoff reached the queue after the refusals");
    assert!(asked < Duration::from_secs(60), "{asked:?}");
}

#[tokio::test]
async fn a_failed_done_write_leaves_the_message_and_the_next_run_settles_it() {
    let rig = rig();
    rig.store
        .outage
        .fail_only("store settle", Fault::Unavailable);
    let report = rig.run(&[update(1, 10)]).await;
    assert!(matches!(
        outcome(&report, 0),
        RecordOutcome::StoreUnavailable(_)
    ));
    assert_eq!(report.failed_message_ids(), ["msg-1"], "never acknowledged");
    rig.store.outage.set(false);
    // The run's lease ends; the message comes back.
    rig.clock.advance(Duration::from_secs(61));
    let report = rig.run(&[update(1, 10)]).await;
    assert!(matches!(outcome(&report, 0), RecordOutcome::Done(_)));
    assert_eq!(rig.status(1).await, Status::Done);
    // Its reply's result went with the settle that failed, so its outcome was unknown: at least once.
    assert_eq!(rig.api.sent_texts(), ["reply to 1", "reply to 1"]);
    assert_eq!(report.resent_after_unknown_outcome(), 1);
}

#[tokio::test]
async fn a_failed_dead_letter_send_leaves_the_message_and_the_next_delivery_sends_the_letter() {
    let rig = rig();
    rig.bot
        .on(1, [Step::Fail(|| HandlerError::permanent("no"))]);
    rig.dead.outage.set(true);
    let report = rig.run(&[update(1, 10)]).await;
    assert!(
        matches!(outcome(&report, 0), RecordOutcome::StoreUnavailable(_)),
        "{report:?}"
    );
    assert_eq!(report.failed_message_ids(), ["msg-1"], "never acknowledged");
    assert_eq!(rig.status(1).await, Status::Dead);
    rig.dead.outage.set(false);
    let report = rig.run(&[update(1, 10)]).await;
    assert_eq!(
        *outcome(&report, 0),
        RecordOutcome::DeadLettered(DeadReason::Permanent)
    );
    assert_eq!(rig.dead.letters().len(), 1);
    assert_eq!(rig.dead.letters()[0].body, update(1, 10).body);
    assert_eq!(rig.api.calls().len(), 0, "the handler did not run again");
}

#[tokio::test]
async fn an_unreadable_message_is_dead_lettered_as_poison() {
    let rig = rig();
    let mut bad_group = update(1, 10);
    bad_group.group_id = MessageGroupId::from_raw("no-separator");
    let mut bad_body = update(2, 20);
    bad_body.body = Bytes::from_static(b"\xff not json");
    let report = rig.run(&[bad_group, bad_body, update(3, 30)]).await;
    assert!(report.failed_message_ids().is_empty(), "{report:?}");
    let letters = rig.dead.letters();
    assert_eq!(letters.len(), 2);
    assert!(letters.iter().all(|l| l.reason == DeadReason::Poison));
    assert_eq!(letters[1].body, Bytes::from_static(b"\xff not json"));
    assert_eq!(letters[1].bot_id.as_str(), "demo");
    assert_eq!(rig.api.sent_texts(), ["reply to 3"]);
}

#[tokio::test]
async fn a_record_that_would_outgrow_the_item_limit_is_buried_as_too_large() {
    let rig = rig();
    let mut record = update(1, 10);
    let text = "x".repeat(tgq_core::defaults::MAX_ITEM_BYTES - 1200);
    record.body = Bytes::from(
        serde_json::json!({"update_id": 1, "message": {"message_id": 1, "date": 1, "text": text,
            "chat": {"id": 10, "type": "private", "first_name": "A"}}})
        .to_string(),
    );
    rig.bot.on(1, [Step::Replies(40)]);
    let report = rig.run(&[record]).await;
    assert_eq!(
        *outcome(&report, 0),
        RecordOutcome::DeadLettered(DeadReason::TooLarge)
    );
    assert!(
        rig.api.calls().len() < 40,
        "the run stopped when its record was full"
    );
}

#[tokio::test]
async fn a_record_nearly_redriven_by_the_queue_still_runs() {
    let rig = rig();
    let mut record = update(1, 10);
    record.receive_count = 999;
    let report = rig.run(&[record]).await;
    assert!(matches!(outcome(&report, 0), RecordOutcome::Done(_)));
}

#[tokio::test]
async fn the_lease_of_a_claimed_run_is_its_fencing_token() {
    let rig = rig();
    rig.run(&[update(1, 10)]).await;
    let record = rig.store.record(&key(1)).unwrap();
    let stale = Lease {
        key: key(1),
        token: record.attempts,
    };
    // The record is DONE: no run holds it any more, not even the one that finished it.
    let refused = rig
        .store
        .settle(&stale, &tgq_core::ports::Settlement::DONE, &[])
        .await;
    assert!(matches!(refused, Err(tgq_core::PortError::Fenced { .. })));
}
