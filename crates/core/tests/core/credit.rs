//! A payment is credited once per charge: its charge enters the bot's ledger with the write that
//! finishes the first update carrying it, together with what the handler credited, and an update
//! carrying it again (delivered again, replayed after its record expired) credits nothing.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::{json, Value};
use teloxide_core::types::{Message, SuccessfulPayment, Update, UpdateKind, UserId};
use tgq_core::clock::Clock as _;
use tgq_core::context::Context;
use tgq_core::dead::DeadReason;
use tgq_core::handler::{Handler, HandlerError};
use tgq_core::ids::{BotId, GroupKey, RecordKey, StateKey, UpdateId};
use tgq_core::payment::{Charge, ChargeWrite, Credit, Refund, Subscription};
use tgq_core::ports::{Claim, ClaimRequest, Settlement, UpdateLedger as _};
use tgq_core::record::Timestamp;
use tgq_core::state::ChatState;
use tgq_core::telegram::TelegramError;
use tgq_core::worker::{RecordOutcome, WorkerSettings};
use tgq_memory::{Harness, MemoryStore, RecordingBotApi};

/// The message carrying a `successful_payment`, and the payment.
fn payment_of(update: &Update) -> Option<(&Message, &SuccessfulPayment)> {
    let UpdateKind::Message(message) = &update.kind else {
        return None;
    };
    Some((message, message.successful_payment()?))
}

#[derive(Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
struct Balance {
    stars: u32,
}

impl ChatState for Balance {
    const FORMAT: &'static str = "credit.balance/v1";
}

/// Credits each new payment to the chat's balance, refunds the charge a `/refund CHARGE` names,
/// and notes what `ctx.credit` and `ctx.refund` answered.
#[derive(Default)]
struct Shop {
    answers: Mutex<Vec<Credit>>,
    refunds: Mutex<Vec<Refund>>,
}

#[async_trait]
impl Handler for Shop {
    async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        let refund = match &update.kind {
            UpdateKind::Message(message) => message.text().and_then(|t| t.strip_prefix("/refund ")),
            _ => None,
        };
        if let Some(charge) = refund {
            let refund = ctx.refund(UserId(42), charge).await?;
            self.refunds.lock().push(refund);
            return Ok(());
        }
        let Some((_, payment)) = payment_of(&update) else {
            return Ok(());
        };
        let credit = ctx.credit(payment)?;
        if credit.is_new() {
            let mut balance = ctx.state::<Balance>()?.unwrap_or_default();
            balance.stars += payment.total_amount;
            ctx.set_state(&balance)?;
        }
        self.answers.lock().push(credit);
        Ok(())
    }
}

fn harness(shop: Arc<Shop>) -> Harness {
    harness_for(shop)
}

fn harness_for(handler: Arc<dyn Handler>) -> Harness {
    Harness::with_settings(
        BotId::new("shop").unwrap(),
        handler,
        Arc::new(RecordingBotApi::new()),
        WorkerSettings::default(),
    )
}

/// A message from user 42 in their private chat, with `field` (`text`, `successful_payment`, …).
fn message(update_id: i64, field: &str, value: Value) -> Value {
    json!({
        "update_id": update_id,
        "message": {
            "message_id": update_id, "date": 1_700_000_000,
            "chat": {"id": 42, "type": "private", "first_name": "Ada"},
            "from": {"id": 42, "is_bot": false, "first_name": "Ada"},
            field: value,
        }
    })
}

fn paid(update_id: i64, charge: &str, stars: u32) -> Value {
    let payment = json!({
        "currency": "XTR", "total_amount": stars, "invoice_payload": "gem",
        "telegram_payment_charge_id": charge, "provider_payment_charge_id": ""
    });
    message(update_id, "successful_payment", payment)
}

fn balance(h: &Harness) -> Option<String> {
    let key = StateKey::new(BotId::new("shop").unwrap(), GroupKey::new("42"));
    h.store.state(&key).map(|state| state.json)
}

fn done(report: &tgq_core::worker::BatchReport) -> bool {
    report
        .outcomes
        .iter()
        .all(|(_, outcome)| matches!(outcome, RecordOutcome::Done(_)))
}

#[tokio::test]
async fn a_payment_replayed_after_its_record_expired_is_credited_once() {
    let shop = Arc::new(Shop::default());
    let h = harness(shop.clone());
    assert!(done(&h.run(&[paid(1, "stx-1", 50)]).await));
    // The record is gone (its TTL passed); the same update comes again, as an operator's replay
    // of a saved copy, or Telegram's after a restore, would bring it.
    h.clock
        .advance(WorkerSettings::default().record_ttl + Duration::from_secs(60));
    assert!(done(&h.run(&[paid(1, "stx-1", 50)]).await));

    assert_eq!(balance(&h).as_deref(), Some(r#"{"stars":50}"#));
    let answers = shop.answers.lock().clone();
    assert_eq!(answers.len(), 2, "the handler ran twice");
    assert_eq!(answers[0], Credit::New);
    assert!(
        matches!(&answers[1], Credit::Already(charge) if charge.id == "stx-1" && charge.stars == 50 && charge.update_id == 1),
        "{answers:?}"
    );
}

#[tokio::test]
async fn two_charges_for_one_invoice_payload_are_two_credits() {
    let shop = Arc::new(Shop::default());
    let h = harness(shop.clone());
    assert!(done(&h.run(&[paid(1, "stx-1", 50)]).await));
    assert!(done(&h.run(&[paid(2, "stx-2", 50)]).await));
    assert_eq!(balance(&h).as_deref(), Some(r#"{"stars":100}"#));
    let bot = BotId::new("shop").unwrap();
    for id in ["stx-1", "stx-2"] {
        let charge = h.store.charge(&bot, id).await.unwrap().unwrap();
        assert_eq!(
            (charge.user, charge.stars, charge.payload.as_str()),
            (42, 50, "gem")
        );
    }
}

/// A subscription's first payment and its renewal: each period's charge is credited once, and
/// kept in the ledger with the period it pays for.
#[tokio::test]
async fn a_subscription_s_renewal_is_a_charge_of_its_own_credited_once() {
    let shop = Arc::new(Shop::default());
    let h = harness(shop.clone());
    let period = |update_id, charge: &str, first: bool, until: i64| {
        let payment = json!({
            "currency": "XTR", "total_amount": 30, "invoice_payload": "club",
            "telegram_payment_charge_id": charge, "provider_payment_charge_id": "",
            "subscription_expiration_date": until, "is_recurring": true,
            "is_first_recurring": first
        });
        message(update_id, "successful_payment", payment)
    };
    let (first, renewal) = (1_800_000_000, 1_802_592_000);
    assert!(done(&h.run(&[period(1, "stx-sub-1", true, first)]).await));
    assert!(done(
        &h.run(&[period(2, "stx-sub-2", false, renewal)]).await
    ));
    // The renewal delivered again: nothing more.
    assert!(done(
        &h.run(&[period(3, "stx-sub-2", false, renewal)]).await
    ));

    assert_eq!(balance(&h).as_deref(), Some(r#"{"stars":60}"#));
    let bot = BotId::new("shop").unwrap();
    let kept = |id: &'static str| {
        let (store, bot) = (h.store.clone(), bot.clone());
        async move { store.charge(&bot, id).await.unwrap().unwrap().subscription }
    };
    assert_eq!(
        kept("stx-sub-1").await,
        Some(Subscription {
            until: first,
            renewal: false
        })
    );
    assert_eq!(
        kept("stx-sub-2").await,
        Some(Subscription {
            until: renewal,
            renewal: true
        })
    );
}

/// Credits as [`Shop`] does; on its first run, before it ends, another update carrying the same
/// charge finishes (read absent by this run, there by its settle).
struct Racing {
    shop: Arc<Shop>,
    store: Arc<MemoryStore>,
}

#[async_trait]
impl Handler for Racing {
    async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        self.shop.handle(update, ctx).await?;
        if ctx.attempt() == 1 {
            let bot = BotId::new("shop").unwrap();
            let key = RecordKey::new(bot, UpdateId(7));
            let at = Timestamp(1_800_000_000_000);
            let request = ClaimRequest {
                key: key.clone(),
                group: GroupKey::new("user:42"),
                payload: paid(7, "stx-1", 50).to_string().into(),
                now: at,
                lease_until: at.plus(Duration::from_secs(30)),
                expires_at: at.plus(Duration::from_secs(3600)),
            };
            let Claim::Run(claimed) = self.store.claim(&request).await? else {
                unreachable!("a new record runs")
            };
            let charge = Charge {
                id: "stx-1".into(),
                user: 42,
                stars: 50,
                payload: "gem".into(),
                update_id: 7,
                recorded_at: at,
                refunded_at: None,
                subscription: None,
            };
            let settlement = Settlement::Done {
                state: None,
                charges: vec![ChargeWrite::paid(charge)],
            };
            self.store.settle(&claimed.lease, &settlement, &[]).await?;
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_charge_recorded_while_the_handler_ran_fails_the_run_and_the_retry_credits_nothing() {
    let shop = Arc::new(Shop::default());
    let h = Harness::built(
        BotId::new("shop").unwrap(),
        Arc::new(RecordingBotApi::new()),
        WorkerSettings::default(),
        None,
        |store, _| {
            Arc::new(Racing {
                shop: shop.clone(),
                store: store.clone(),
            })
        },
    );
    let report = h.run(&[paid(1, "stx-1", 50)]).await;
    assert!(!done(&report), "the settle is refused: {report:?}");
    assert_eq!(
        balance(&h),
        None,
        "nothing of the refused settle was written"
    );

    assert!(done(&h.run(&[paid(1, "stx-1", 50)]).await));
    assert_eq!(balance(&h), None, "the retry credits nothing");
    let answers = shop.answers.lock().clone();
    assert_eq!(answers[0], Credit::New);
    assert!(
        matches!(&answers[1], Credit::Already(charge) if charge.update_id == 7),
        "{answers:?}"
    );
}

#[tokio::test]
async fn a_payment_without_a_charge_id_is_dead_lettered_and_never_credited() {
    let shop = Arc::new(Shop::default());
    let h = harness(shop.clone());
    h.run(&[paid(1, "", 50)]).await;
    let letters = h.dead.letters();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].reason, DeadReason::Permanent);
    assert!(
        letters[0]
            .error
            .contains("telegram_payment_charge_id is empty"),
        "{}",
        letters[0].error
    );
    assert!(shop.answers.lock().is_empty(), "the handler never ran");
    assert_eq!(balance(&h), None);
}

#[tokio::test]
async fn credit_refuses_a_payment_that_is_not_the_update_s() {
    struct Other;
    #[async_trait]
    impl Handler for Other {
        async fn handle(&self, _: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
            // From text: teloxide reads an update's kind from borrowed keys only.
            let foreign: Update = serde_json::from_str(&paid(9, "stx-9", 1).to_string()).unwrap();
            let UpdateKind::Message(message) = foreign.kind else {
                unreachable!()
            };
            ctx.credit(message.successful_payment().unwrap())?;
            Ok(())
        }
    }
    for update in [
        paid(1, "stx-1", 50),
        json!({"update_id": 2, "message": {
        "message_id": 2, "date": 1_700_000_000, "text": "hi",
        "chat": {"id": 42, "type": "private", "first_name": "Ada"}}}),
    ] {
        let h = Harness::new(
            BotId::new("shop").unwrap(),
            Arc::new(Other),
            Arc::new(RecordingBotApi::new()),
        );
        h.run(&[update]).await;
        let letters = h.dead.letters();
        assert_eq!(letters.len(), 1);
        assert!(
            letters[0].error.contains("ctx.credit"),
            "{}",
            letters[0].error
        );
    }
}

fn refunded(update_id: i64, charge: &str) -> Value {
    let refund = json!({
        "currency": "XTR", "total_amount": 50, "invoice_payload": "gem",
        "telegram_payment_charge_id": charge
    });
    message(update_id, "refunded_payment", refund)
}

async fn entry(h: &Harness, id: &str) -> Option<Charge> {
    h.store
        .charge(&BotId::new("shop").unwrap(), id)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_refunded_payment_marks_its_charge_once() {
    let h = harness(Arc::new(Shop::default()));
    assert!(done(&h.run(&[paid(1, "stx-1", 50)]).await));
    h.clock.advance(Duration::from_secs(5));
    let refunded_at = h.clock.now();
    assert!(done(&h.run(&[refunded(2, "stx-1")]).await));
    let marked = entry(&h, "stx-1").await.unwrap();
    assert_eq!(
        (marked.update_id, marked.refunded_at),
        (1, Some(refunded_at))
    );

    // The same refund again, after its record expired: the mark stays as it was.
    h.clock
        .advance(WorkerSettings::default().record_ttl + Duration::from_secs(60));
    assert!(done(&h.run(&[refunded(2, "stx-1")]).await));
    assert_eq!(
        entry(&h, "stx-1").await.unwrap().refunded_at,
        Some(refunded_at)
    );

    // A refund of a charge tgq never saw paid enters the ledger refunded.
    assert!(done(&h.run(&[refunded(3, "stx-old")]).await));
    assert!(entry(&h, "stx-old").await.unwrap().refunded_at.is_some());
}

fn text(update_id: i64, text: &str) -> Value {
    message(update_id, "text", text.into())
}

/// A harness for `handler` after a payment of 50 Stars, charge `stx-1`, finished.
async fn paid_once(handler: Arc<dyn Handler>) -> Harness {
    let h = harness_for(handler);
    assert!(done(&h.run(&[paid(1, "stx-1", 50)]).await));
    h
}

fn refund_calls(h: &Harness) -> usize {
    h.api
        .calls()
        .iter()
        .filter(|call| call.method == "refundStarPayment")
        .count()
}

#[tokio::test]
async fn a_refund_is_asked_once_and_marks_the_charge() {
    let shop = Arc::new(Shop::default());
    let h = paid_once(shop.clone()).await;
    assert!(done(&h.run(&[text(2, "/refund stx-1")]).await));
    assert_eq!(refund_calls(&h), 1);
    assert!(entry(&h, "stx-1").await.unwrap().refunded_at.is_some());

    // Asked again: the ledger knows it, and Telegram is not asked.
    assert!(done(&h.run(&[text(3, "/refund stx-1")]).await));
    assert_eq!(refund_calls(&h), 1);
    assert_eq!(*shop.refunds.lock(), [Refund::Refunded, Refund::Already]);
}

#[tokio::test]
async fn a_refund_whose_answer_was_lost_is_not_asked_again() {
    let shop = Arc::new(Shop::default());
    let h = paid_once(shop.clone()).await;
    h.api.lose_next_answer();
    let lost = h.run(&[text(2, "/refund stx-1")]).await;
    assert!(!done(&lost), "the run fails on the lost answer: {lost:?}");
    h.clock.advance(Duration::from_secs(600));
    assert!(done(&h.run(&[text(2, "/refund stx-1")]).await));
    assert_eq!(refund_calls(&h), 1, "never asked twice");
    assert_eq!(*shop.refunds.lock(), [Refund::Uncertain]);
    assert_eq!(
        entry(&h, "stx-1").await.unwrap().refunded_at,
        None,
        "not known refunded"
    );
}

#[tokio::test]
async fn a_charge_telegram_says_was_refunded_is_marked_and_nothing_is_given_back() {
    let shop = Arc::new(Shop::default());
    let h = paid_once(shop.clone()).await;
    h.api.fail_next([TelegramError::Api {
        code: 400,
        description: "Bad Request: CHARGE_ALREADY_REFUNDED".into(),
    }]);
    assert!(done(&h.run(&[text(2, "/refund stx-1")]).await));
    assert_eq!(*shop.refunds.lock(), [Refund::Already]);
    assert!(entry(&h, "stx-1").await.unwrap().refunded_at.is_some());
}

/// Credits the payment, then thanks the payer, who blocked the bot meanwhile.
struct ThanksToNobody;

#[async_trait]
impl Handler for ThanksToNobody {
    async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        let Some((message, payment)) = payment_of(&update) else {
            return Ok(());
        };
        if ctx.credit(payment)?.is_new() {
            ctx.set_state(&Balance {
                stars: payment.total_amount,
            })?;
        }
        ctx.send(teloxide_core::payloads::SendMessage::new(
            message.chat.id,
            "thanks",
        ))
        .await?;
        Ok(())
    }
}

#[tokio::test]
async fn a_payment_whose_payer_blocked_the_bot_is_dead_lettered_not_lost() {
    let h = harness_for(Arc::new(ThanksToNobody));
    h.api.fail_next([TelegramError::Api {
        code: 403,
        description: "Forbidden: bot was blocked by the user".into(),
    }]);
    let report = h.run(&[paid(1, "stx-1", 50)]).await;
    assert!(!done(&report), "not settled as gone: {report:?}");
    let letters = h.dead.letters();
    assert_eq!(letters.len(), 1, "kept for a replay");
    assert_eq!(letters[0].reason, DeadReason::Permanent);
    assert_eq!(
        entry(&h, "stx-1").await,
        None,
        "not recorded without its credit"
    );
    assert_eq!(balance(&h), None);
}
