//! A pre-checkout query is answered within Telegram's 10 s whatever its handler does: the handler
//! decides while it has time, and tgq refuses a query the handler failed, outran or never
//! answered, so the user hears and is not charged.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::{json, Value};
use teloxide_core::payloads::AnswerPreCheckoutQuery;
use teloxide_core::types::{Update, UpdateKind};
use tgq_core::clock::Clock;
use tgq_core::context::Context;
use tgq_core::handler::{Handler, HandlerError};
use tgq_core::ids::{BotId, GroupKey, RecordKey, StateKey, UpdateId};
use tgq_core::ports::UpdateStore as _;
use tgq_core::record::UpdateRecord;
use tgq_core::state::ChatState;
use tgq_core::telegram::TelegramError;
use tgq_core::worker::{PreCheckoutPolicy, RecordOutcome, WorkerSettings};
use tgq_memory::{Harness, RecordingBotApi};

/// What the handler of a pre-checkout query does.
#[derive(Clone, Copy)]
enum Does {
    /// Answers ok.
    Answer,
    /// Sets the chat's state, then fails before answering.
    Fail,
    /// Sleeps this long, then answers ok.
    AnswerAfter(Duration),
    /// Answers ok, sets the chat's state, then keeps working this long.
    AnswerThenWork(Duration),
    /// Ends without answering.
    Nothing,
}

#[derive(Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
struct Paid(bool);

impl ChatState for Paid {
    const FORMAT: &'static str = "checkout.paid/v1";
}

struct Shop(Does);

#[async_trait]
impl Handler for Shop {
    async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        let UpdateKind::PreCheckoutQuery(query) = update.kind else {
            return Ok(());
        };
        let ok = AnswerPreCheckoutQuery::new(query.id.clone(), true);
        match self.0 {
            Does::Answer => {
                ctx.send(ok).await?;
            }
            Does::Fail => {
                ctx.set_state(&Paid(true))?;
                return Err(HandlerError::transient("the stock service is down"));
            }
            Does::AnswerAfter(pause) => {
                tokio::time::sleep(pause).await;
                ctx.send(ok).await?;
            }
            Does::AnswerThenWork(pause) => {
                ctx.send(ok).await?;
                ctx.set_state(&Paid(true))?;
                tokio::time::sleep(pause).await;
            }
            Does::Nothing => {}
        }
        Ok(())
    }
}

const REFUSAL: &str = "Sold out while you paid";

/// A worker for `does` whose handlers have `handler_time` of the 10 s.
fn harness(does: Does, handler_time: Duration) -> Harness {
    let settings = WorkerSettings {
        pre_checkout: PreCheckoutPolicy {
            margin: Duration::from_secs(10) - handler_time,
            refusal: REFUSAL.into(),
        },
        ..WorkerSettings::default()
    };
    Harness::with_settings(
        BotId::new("demo").unwrap(),
        Arc::new(Shop(does)),
        Arc::new(RecordingBotApi::new()),
        settings,
    )
}

fn checkout(update_id: i64) -> Value {
    json!({
        "update_id": update_id,
        "pre_checkout_query": {
            "id": format!("q{update_id}"), "currency": "XTR", "total_amount": 25,
            "invoice_payload": "egg", "from": {"id": 42, "is_bot": false, "first_name": "Ada"},
        }
    })
}

/// Checkout `update_id`, received by tgq `ago` before the run: its record stored then, and the
/// clock moved on.
async fn received_ago(h: &Harness, update_id: i64, ago: Duration) -> Value {
    let update = checkout(update_id);
    let received = UpdateRecord::received(
        RecordKey::new(BotId::new("demo").unwrap(), UpdateId(update_id)),
        GroupKey::new("user:42"),
        Bytes::from(update.to_string()),
        h.clock.now(),
        Duration::from_secs(3600),
    );
    h.store.insert(&received, h.clock.now()).await.unwrap();
    h.clock.advance(ago);
    update
}

/// The answers the run gave, as (ok, error_message).
fn answers(h: &Harness) -> Vec<(bool, Option<String>)> {
    h.api
        .calls()
        .iter()
        .filter(|call| call.method == "answerPreCheckoutQuery")
        .map(|call| {
            (
                call.params["ok"].as_bool().unwrap(),
                call.params["error_message"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

/// The state of the buyer's group, where a pre-checkout query runs.
fn buyer() -> StateKey {
    StateKey::new(BotId::new("demo").unwrap(), GroupKey::new("user:42"))
}

fn done(report: &tgq_core::worker::BatchReport) -> bool {
    matches!(report.outcomes[0].1, RecordOutcome::Done(_))
}

#[tokio::test]
async fn the_handler_s_own_answer_is_the_only_one() {
    let h = harness(Does::Answer, Duration::from_secs(8));
    let report = h.run(&[checkout(1)]).await;
    assert!(done(&report), "{report:?}");
    assert_eq!(answers(&h), [(true, None)]);
}

#[tokio::test]
async fn a_handler_that_fails_is_answered_for_with_the_refusal_and_the_update_is_done() {
    let h = harness(Does::Fail, Duration::from_secs(8));
    let report = h.run(&[checkout(1)]).await;
    assert!(
        done(&report),
        "no retry: it would come after Telegram gave up: {report:?}"
    );
    assert_eq!(answers(&h), [(false, Some(REFUSAL.to_owned()))]);
    assert!(h.dead.letters().is_empty());
    assert!(
        h.store.state(&buyer()).is_none(),
        "what the failed run set is dropped"
    );
}

#[tokio::test]
async fn a_handler_still_working_at_its_time_is_cut_off_and_refused_for() {
    let h = harness(
        Does::AnswerAfter(Duration::from_secs(3)),
        Duration::from_millis(200),
    );
    let report = h.run(&[checkout(1)]).await;
    assert!(done(&report), "{report:?}");
    assert_eq!(answers(&h), [(false, Some(REFUSAL.to_owned()))]);
}

#[tokio::test]
async fn a_handler_that_answered_in_time_may_finish_its_work_after() {
    let h = harness(
        Does::AnswerThenWork(Duration::from_millis(600)),
        Duration::from_millis(200),
    );
    let report = h.run(&[checkout(1)]).await;
    assert!(done(&report), "{report:?}");
    assert_eq!(answers(&h), [(true, None)]);
    assert!(
        h.store
            .state(&buyer())
            .is_some_and(|s| s.json.contains("true")),
        "the state it set after answering is kept"
    );
}

#[tokio::test]
async fn a_handler_that_never_answers_is_answered_for() {
    let h = harness(Does::Nothing, Duration::from_secs(8));
    let report = h.run(&[checkout(1)]).await;
    assert!(done(&report), "{report:?}");
    assert_eq!(answers(&h), [(false, Some(REFUSAL.to_owned()))]);
}

#[tokio::test]
async fn a_query_that_comes_to_run_after_ten_seconds_is_not_answered_at_all() {
    let h = harness(Does::Answer, Duration::from_secs(8));
    let update = received_ago(&h, 1, Duration::from_secs(10)).await;
    let report = h.run(&[update]).await;
    assert!(done(&report), "{report:?}");
    assert!(
        answers(&h).is_empty(),
        "Telegram would refuse any answer now"
    );
}

#[tokio::test]
async fn a_refusal_telegram_does_not_take_still_finishes_the_update() {
    let h = harness(Does::Fail, Duration::from_secs(8));
    h.api.fail_next([TelegramError::Api {
        code: 400,
        description:
            "Bad Request: query is too old and response timeout expired or query ID is invalid"
                .into(),
    }]);
    let report = h.run(&[checkout(1)]).await;
    assert!(done(&report), "the query is over either way: {report:?}");
    assert!(h.dead.letters().is_empty(), "nobody is paged for it");
}

/// Telegram answers the whole bot 429 three times running: the handler's own answer sits every
/// flood wait out while its time lasts, so the user is charged rather than refused.
#[tokio::test]
async fn a_handler_s_answer_sits_out_a_storm_of_flood_waits_while_its_time_lasts() {
    let h = harness(Does::Answer, Duration::from_secs(8));
    h.api
        .fail_next([const { TelegramError::RetryAfter(Duration::from_secs(1)) }; 3]);
    let report = h.run(&[checkout(1)]).await;
    assert!(done(&report), "{report:?}");
    assert_eq!(answers(&h), [(true, None)]);
}

/// tgq's refusal waits out no flood wait that ends after Telegram stops taking answers: at 7 s,
/// a 429 of 4 s is given up at once, not sat out to send an answer Telegram would refuse.
#[tokio::test]
async fn tgq_s_refusal_sits_out_no_flood_wait_that_ends_past_the_ten_seconds() {
    let h = harness(Does::Fail, Duration::from_secs(8));
    let update = received_ago(&h, 1, Duration::from_secs(7)).await;
    h.api
        .fail_next([TelegramError::RetryAfter(Duration::from_secs(4))]);
    let report = h.run(&[update]).await;
    assert!(done(&report), "{report:?}");
    assert!(
        answers(&h).is_empty(),
        "an answer at 11 s would only be refused: {:?}",
        answers(&h)
    );
}
