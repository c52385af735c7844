//! `TestBot::pay`: a payment in Stars as Telegram runs it, the pre-checkout query first and the
//! successful payment only after an ok answer.

use tgq::payloads::AnswerPreCheckoutQuery;
use tgq::prelude::*;
use tgq::types::MessageKind;
use tgq_test::TestBot;

/// Sells eggs and a club's subscription: answers a pre-checkout ok unless the payload is
/// `sold-out`, and thanks the payer, naming a subscription's period.
struct Shop;

#[async_trait]
impl Handler for Shop {
    async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        match &update.kind {
            UpdateKind::PreCheckoutQuery(query) => {
                let mut answer = AnswerPreCheckoutQuery::new(
                    query.id.clone(),
                    query.invoice_payload != "sold-out",
                );
                if query.invoice_payload == "sold-out" {
                    answer.error_message = Some("Sold out".into());
                }
                ctx.send(answer).await?;
            }
            UpdateKind::Message(message) => {
                if let MessageKind::SuccessfulPayment(paid) = &message.kind {
                    let payment = &paid.successful_payment;
                    let mut thanks = format!(
                        "Thanks for {} stars ({})",
                        payment.total_amount, payment.telegram_payment_charge_id.0
                    );
                    if let Some(until) = payment.subscription_expiration_date {
                        let first = payment.is_first_recurring;
                        thanks += &format!(", until {}, first {first}", until.timestamp());
                    }
                    ctx.reply(message, thanks).await?;
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[tokio::test]
async fn an_ok_answer_is_followed_by_the_payment_in_the_user_s_chat() {
    let mut bot = TestBot::handler(Shop);
    let payment = bot.pay(42, "egg", 25).await;
    assert!(payment.checkout.is_done());
    let answers = payment.checkout.calls("answerPreCheckoutQuery");
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].params["ok"], true);
    let charge = payment.charge.expect("charged");
    let paid = payment.paid.expect("the payment delivered");
    assert!(paid.is_done());
    assert_eq!(paid.texts(), [format!("Thanks for 25 stars ({charge})")]);
    assert_eq!(paid.sent[0].chat, Some(42));
}

#[tokio::test]
async fn a_refused_checkout_charges_nobody() {
    let mut bot = TestBot::handler(Shop);
    let payment = bot.pay(42, "sold-out", 25).await;
    assert_eq!(
        payment.checkout.calls("answerPreCheckoutQuery")[0].params["ok"],
        false
    );
    assert_eq!(payment.charge, None);
    assert!(payment.paid.is_none());
    assert!(bot.sent_to(42).is_empty());
}

#[tokio::test]
async fn each_payment_has_a_charge_of_its_own() {
    let mut bot = TestBot::handler(Shop);
    let first = bot.pay(42, "egg", 25).await.charge;
    let second = bot.pay(42, "egg", 25).await.charge;
    assert!(first.is_some() && second.is_some());
    assert_ne!(first, second, "two payments of one invoice are two charges");
}

/// Cannot reach its stock service: every pre-checkout query fails.
struct Broken;

#[async_trait]
impl Handler for Broken {
    async fn handle(&self, update: Update, _ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        match update.kind {
            UpdateKind::PreCheckoutQuery(_) => Err(HandlerError::transient("stock service down")),
            _ => Ok(()),
        }
    }
}

#[tokio::test]
async fn a_checkout_whose_handler_fails_is_refused_by_tgq_in_time() {
    let mut bot = TestBot::handler(Broken);
    let payment = bot.pay(42, "egg", 25).await;
    assert!(payment.checkout.is_done(), "{:?}", payment.checkout.outcome);
    let answers = payment.checkout.calls("answerPreCheckoutQuery");
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].params["ok"], false);
    assert!(answers[0].params["error_message"]
        .as_str()
        .is_some_and(|text| text.contains("could not be confirmed")));
    assert_eq!(payment.charge, None, "nobody is charged");
}

#[derive(Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
struct Stars(u32);

impl ChatState for Stars {
    const FORMAT: &'static str = "pay.stars/v1";
}

/// Credits each new payment to the payer's balance and thanks them for it.
struct Wallet;

#[async_trait]
impl Handler for Wallet {
    async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        match &update.kind {
            UpdateKind::PreCheckoutQuery(query) => {
                ctx.send(AnswerPreCheckoutQuery::new(query.id.clone(), true))
                    .await?;
            }
            UpdateKind::Message(message) => {
                let Some(payment) = message.successful_payment() else {
                    return Ok(());
                };
                if ctx.credit(payment)?.is_new() {
                    let Stars(had) = ctx.state()?.unwrap_or_default();
                    ctx.set_state(&Stars(had + payment.total_amount))?;
                    ctx.reply(message, "credited").await?;
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_payment_delivered_again_after_its_record_expired_is_credited_once() {
    let mut bot = TestBot::handler(Wallet);
    let payment = bot.pay(42, "gem", 50).await;
    assert_eq!(payment.paid.expect("paid").texts(), ["credited"]);
    assert_eq!(bot.state::<Stars>(42), Some(Stars(50)));

    // Past the records' 15 days the record is gone; the same payment update arrives again.
    bot.advance(std::time::Duration::from_secs(16 * 24 * 3600))
        .await;
    let again = bot.again().await;
    assert!(again.is_done(), "{:?}", again.outcome);
    assert!(again.texts().is_empty(), "no second thanks");
    assert_eq!(bot.state::<Stars>(42), Some(Stars(50)), "credited once");

    let second = bot.pay(42, "gem", 50).await;
    assert_eq!(second.paid.expect("paid").texts(), ["credited"]);
    assert_eq!(
        bot.state::<Stars>(42),
        Some(Stars(100)),
        "a second charge is a second credit"
    );
}

#[tokio::test]
async fn a_subscription_is_paid_at_checkout_and_each_renewal_is_a_charge_of_its_own() {
    let mut bot = TestBot::handler(Shop);
    let mut subscription = bot.subscribe(42, "club", 30).await;
    let first = subscription.charge.clone().expect("charged");
    let until = subscription.until.expect("a subscription's period");
    let paid = subscription.paid.clone().expect("the payment delivered");
    assert_eq!(
        paid.texts(),
        [format!(
            "Thanks for 30 stars ({first}), until {until}, first true"
        )]
    );

    let renewal = bot.renew(&mut subscription).await;
    let next = renewal.until;
    assert_eq!(next, until + i64::from(tgq_test::SUBSCRIPTION_PERIOD));
    assert_ne!(renewal.charge, first, "a renewal is a charge of its own");
    assert!(
        renewal.paid.calls("answerPreCheckoutQuery").is_empty(),
        "Telegram asks nothing before a renewal"
    );
    assert_eq!(
        renewal.paid.texts(),
        [format!(
            "Thanks for 30 stars ({}), until {next}, first false",
            renewal.charge
        )]
    );
    let again = bot.renew(&mut subscription).await;
    assert_eq!(again.until, next + i64::from(tgq_test::SUBSCRIPTION_PERIOD));

    let one_off = bot.pay(42, "egg", 25).await;
    assert_eq!(one_off.until, None, "a one-off payment has no period");
}
