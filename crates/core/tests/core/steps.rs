//! Steps (`ctx.step`) through the worker on in-memory adapters: a side effect outside Telegram is
//! recorded like a send and, once its result is recorded, never run again — not after a failed
//! settle, not after a crash right after it. A crash during the step leaves its outcome unknown:
//! run again at least once, or reported uncertain at most once.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use teloxide_core::payloads::SendMessage;
use teloxide_core::types::{Update, UpdateKind};
use tgq_core::dead::DeadReason;
use tgq_core::ids::{BotId, RecordKey, UpdateId};
use tgq_core::record::{ActionResult, ActionState, Delivery, MAX_STEP_RESULT_BYTES};
use tgq_core::worker::{BatchReport, RecordOutcome};
use tgq_core::{Context, ErrorClass, Handler, HandlerError};
use tgq_memory::{Fault, Harness, RecordingBotApi};

/// What one run of an update does besides charging and replying.
#[derive(Clone, Copy, Debug)]
enum Act {
    /// Charges, then replies.
    Plain,
    /// Charges, then never finishes: the process dies before the next write.
    HangAfterStep,
    /// Never finishes the charge: the process dies during the step.
    HangInStep,
    /// The card is declined: the step fails.
    Decline,
    /// The charge's result is too large to keep.
    HugeReceipt,
}

/// What the charge returns.
#[derive(Serialize, Deserialize)]
struct Receipt {
    id: String,
}

/// Charges a card (counted) for every message and replies with the receipt.
#[derive(Default)]
struct ChargeBot {
    charges: AtomicU32,
    script: Mutex<HashMap<i64, VecDeque<Act>>>,
    at_most_once: bool,
}

impl ChargeBot {
    fn on(&self, update_id: i64, acts: impl IntoIterator<Item = Act>) {
        self.script
            .lock()
            .entry(update_id)
            .or_default()
            .extend(acts);
    }

    fn charges(&self) -> u32 {
        self.charges.load(Ordering::SeqCst)
    }

    async fn charge(&self, act: Act) -> Result<Receipt, HandlerError> {
        let n = self.charges.fetch_add(1, Ordering::SeqCst) + 1;
        match act {
            Act::HangInStep => tokio::time::sleep(Duration::from_secs(24 * 3600)).await,
            Act::Decline => return Err(HandlerError::transient("card declined")),
            _ => {}
        }
        let id = match act {
            Act::HugeReceipt => "x".repeat(MAX_STEP_RESULT_BYTES),
            _ => format!("ch_{n}"),
        };
        Ok(Receipt { id })
    }
}

#[async_trait]
impl Handler for ChargeBot {
    async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        let UpdateKind::Message(message) = &update.kind else {
            return Ok(());
        };
        let act = self
            .script
            .lock()
            .get_mut(&i64::from(update.id.0))
            .and_then(VecDeque::pop_front)
            .unwrap_or(Act::Plain);
        let receipt = if self.at_most_once {
            match ctx.step_at_most_once("charge", || self.charge(act)).await? {
                Some(receipt) => receipt,
                None => {
                    let reply = SendMessage::new(message.chat.id, "payment uncertain");
                    ctx.send(reply).await?;
                    return Ok(());
                }
            }
        } else {
            ctx.step("charge", || self.charge(act)).await?
        };
        if let Act::HangAfterStep = act {
            tokio::time::sleep(Duration::from_secs(24 * 3600)).await;
        }
        let reply = SendMessage::new(message.chat.id, format!("paid {}", receipt.id));
        ctx.send(reply).await?;
        Ok(())
    }
}

fn rig(at_most_once: bool) -> (Arc<ChargeBot>, Harness) {
    let bot = Arc::new(ChargeBot {
        at_most_once,
        ..ChargeBot::default()
    });
    let harness = Harness::new(
        BotId::new("demo").unwrap(),
        bot.clone(),
        Arc::new(RecordingBotApi::new()),
    );
    (bot, harness)
}

fn text(update_id: i64) -> Value {
    json!({
        "update_id": update_id,
        "message": {
            "message_id": update_id, "date": 1_700_000_000, "text": "pay",
            "chat": {"id": 10, "type": "private", "first_name": "Ada"},
            "from": {"id": 10, "is_bot": false, "first_name": "Ada"},
        }
    })
}

fn outcome(report: &BatchReport) -> &RecordOutcome {
    &report.outcomes[0].1
}

/// What the record holds of the update's first action (the charge).
fn charge_state(harness: &Harness) -> ActionState {
    let key = RecordKey::new(BotId::new("demo").unwrap(), UpdateId(1));
    let record = harness.store.record(&key).expect("record exists");
    assert_eq!(record.actions[&1].method, "step:charge");
    record.actions[&1].state.clone()
}

/// Runs the update until the process "dies": the batch is dropped where it stands, as a killed
/// process would leave it; then the clock moves past the dead run's lease.
async fn crash(harness: &Harness) {
    let run = tokio::time::timeout(Duration::from_millis(100), harness.run(&[text(1)])).await;
    assert!(run.is_err(), "the run was meant to hang");
    harness.clock.advance(Duration::from_secs(61));
}

#[tokio::test]
async fn a_step_recorded_before_a_failed_settle_is_not_run_again_and_its_result_comes_back() {
    let (bot, harness) = rig(false);
    harness
        .store
        .outage
        .fail_only("store settle", Fault::Unavailable);
    let report = harness.run(&[text(1)]).await;
    assert!(matches!(
        outcome(&report),
        RecordOutcome::StoreUnavailable(_)
    ));
    harness.store.outage.set(false);
    harness.clock.advance(Duration::from_secs(61));

    let report = harness.run(&[text(1)]).await;
    assert!(
        matches!(outcome(&report), RecordOutcome::Done(_)),
        "{report:?}"
    );
    assert_eq!(bot.charges(), 1, "charged once");
    // The reply's outcome went with the settle that failed: at least once, with the first receipt.
    assert_eq!(harness.api.sent_texts(), ["paid ch_1", "paid ch_1"]);
}

#[tokio::test]
async fn a_step_whose_result_the_store_refuses_to_record_spends_no_attempt() {
    let (bot, harness) = rig(false);
    harness
        .store
        .outage
        .fail_only_times("store record_outcomes", Fault::Unavailable, 1);
    let report = harness.run(&[text(1)]).await;
    assert!(
        matches!(outcome(&report), RecordOutcome::StoreUnavailable(_)),
        "{report:?}"
    );
    let key = RecordKey::new(BotId::new("demo").unwrap(), UpdateId(1));
    let record = harness.store.record(&key).expect("record exists");
    assert_eq!(
        (record.attempts, record.throttled),
        (1, 1),
        "the run is refunded"
    );

    let report = harness.run(&[text(1)]).await;
    assert!(
        matches!(outcome(&report), RecordOutcome::Done(_)),
        "{report:?}"
    );
    assert_eq!(
        bot.charges(),
        1,
        "the result went with the settle: charged once"
    );
    assert_eq!(harness.api.sent_texts(), ["paid ch_1"]);
}

#[tokio::test(start_paused = true)]
async fn a_step_is_durable_before_the_handler_goes_on_so_a_crash_after_it_does_not_repeat_it() {
    let (bot, harness) = rig(false);
    bot.on(1, [Act::HangAfterStep]);
    crash(&harness).await;
    assert_eq!(
        charge_state(&harness),
        ActionState::Succeeded(ActionResult::Json {
            json: r#"{"id":"ch_1"}"#.into()
        })
    );

    let report = harness.run(&[text(1)]).await;
    assert!(
        matches!(outcome(&report), RecordOutcome::Done(_)),
        "{report:?}"
    );
    assert_eq!(bot.charges(), 1, "charged once");
    assert_eq!(harness.api.sent_texts(), ["paid ch_1"]);
}

#[tokio::test(start_paused = true)]
async fn a_step_that_died_midway_runs_again_at_least_once_and_is_counted() {
    let (bot, harness) = rig(false);
    bot.on(1, [Act::HangInStep]);
    crash(&harness).await;
    assert_eq!(charge_state(&harness), ActionState::Pending);

    let report = harness.run(&[text(1)]).await;
    assert!(
        matches!(outcome(&report), RecordOutcome::Done(_)),
        "{report:?}"
    );
    assert_eq!(bot.charges(), 2, "at least once: its outcome was unknown");
    assert_eq!(report.resent_after_unknown_outcome(), 1);
    assert_eq!(harness.api.sent_texts(), ["paid ch_2"]);
}

#[tokio::test(start_paused = true)]
async fn an_at_most_once_step_that_died_midway_is_not_run_again_and_is_reported_uncertain() {
    let (bot, harness) = rig(true);
    bot.on(1, [Act::HangInStep]);
    crash(&harness).await;

    let report = harness.run(&[text(1)]).await;
    let RecordOutcome::Done(summary) = outcome(&report) else {
        panic!("{report:?}")
    };
    assert_eq!(bot.charges(), 1, "at most once");
    assert_eq!(summary.uncertain.len(), 1);
    assert_eq!(
        (
            summary.uncertain[0].method.as_str(),
            summary.uncertain[0].delivery
        ),
        ("step:charge", Delivery::AtMostOnce)
    );
    assert_eq!(charge_state(&harness), ActionState::Uncertain);
    assert_eq!(harness.api.sent_texts(), ["payment uncertain"]);
}

#[tokio::test]
async fn a_failed_step_did_not_happen_and_runs_again_on_the_retry() {
    let (bot, harness) = rig(false);
    bot.on(1, [Act::Decline]);
    let report = harness.run(&[text(1)]).await;
    assert!(matches!(
        outcome(&report),
        RecordOutcome::Retrying(_, ErrorClass::Transient)
    ));
    assert!(
        matches!(charge_state(&harness), ActionState::Failed { code: 0, ref description } if description.contains("card declined")),
        "{:?}",
        charge_state(&harness)
    );

    let report = harness.run(&[text(1)]).await;
    assert!(matches!(outcome(&report), RecordOutcome::Done(_)));
    assert_eq!(bot.charges(), 2);
    assert_eq!(harness.api.sent_texts(), ["paid ch_2"]);
}

#[tokio::test]
async fn a_step_result_too_large_to_keep_is_recorded_as_done_and_the_update_dead_lettered() {
    let (bot, harness) = rig(false);
    bot.on(1, [Act::HugeReceipt]);
    let report = harness.run(&[text(1)]).await;
    assert_eq!(
        *outcome(&report),
        RecordOutcome::DeadLettered(DeadReason::Permanent)
    );
    assert_eq!(
        charge_state(&harness),
        ActionState::Succeeded(ActionResult::NotKept),
        "it happened, so it is never run again"
    );
    let error = &harness.dead.letters()[0].error;
    assert!(
        error.contains("step:charge") && error.contains("16384"),
        "{error}"
    );
    assert_eq!(bot.charges(), 1);
    assert!(harness.api.calls().is_empty());
}
