//! The shop through tgq's test kit: a purchase from the invoice to the gem, a payment delivered
//! again after its record expired, a crash before the payment is finished, refunds, and refunds
//! Telegram refuses.

use std::time::Duration;

use tgq_example_shop::{handlers, Wallet, GEM, GEM_STARS};
use tgq_test::{Call, Failure, Outcome, TestBot};

const USER: i64 = 42;

fn gems(bot: &TestBot) -> Vec<String> {
    bot.state::<Wallet>(USER).unwrap_or_default().gems
}

#[tokio::test]
async fn a_purchase_goes_from_the_invoice_to_one_gem() {
    let mut bot = TestBot::new(handlers()).await;
    let buy = bot.text(USER, "/buy").await;
    let invoice = &buy.calls("sendInvoice")[0];
    assert_eq!(invoice.params["currency"], "XTR");
    assert_eq!(invoice.params["payload"], GEM);
    assert_eq!(invoice.params["prices"][0]["amount"], GEM_STARS);

    let payment = bot.pay(USER, GEM, GEM_STARS).await;
    assert_eq!(
        payment.checkout.calls("answerPreCheckoutQuery")[0].params["ok"],
        true
    );
    let paid = payment
        .paid
        .expect("an ok answer is followed by the payment");
    assert_eq!(paid.texts(), ["Thank you! You have 1 gems."]);
    assert_eq!(gems(&bot), [payment.charge.unwrap()]);
    assert_eq!(
        bot.text(USER, "/balance").await.texts(),
        ["You have 1 gems."]
    );
}

#[tokio::test]
async fn a_wrong_price_is_refused_before_anyone_pays() {
    let mut bot = TestBot::new(handlers()).await;
    let payment = bot.pay(USER, GEM, 1).await;
    let answer = &payment.checkout.calls("answerPreCheckoutQuery")[0];
    assert_eq!(answer.params["ok"], false);
    assert_eq!(answer.params["error_message"], "This is not for sale.");
    assert!(payment.paid.is_none());
    assert!(gems(&bot).is_empty());
}

#[tokio::test]
async fn a_payment_delivered_again_after_its_record_expired_is_one_gem() {
    let mut bot = TestBot::new(handlers()).await;
    bot.pay(USER, GEM, GEM_STARS).await;
    bot.advance(Duration::from_secs(16 * 24 * 3600)).await;
    let again = bot.again().await;
    assert!(again.is_done(), "{:?}", again.outcome);
    assert!(again.texts().is_empty(), "no second thanks");
    assert_eq!(gems(&bot).len(), 1);
}

#[tokio::test]
async fn a_refund_gives_back_the_latest_gem_s_stars_asking_once() {
    let mut bot = TestBot::new(handlers()).await;
    let first = bot.pay(USER, GEM, GEM_STARS).await.charge.unwrap();
    let second = bot.pay(USER, GEM, GEM_STARS).await.charge.unwrap();

    let refund = bot.text(USER, "/refund").await;
    assert_eq!(refund.calls("refundStarPayment").len(), 1, "asked once");
    let call = &refund.calls("refundStarPayment")[0];
    assert_eq!(call.params["user_id"], USER);
    assert_eq!(call.params["telegram_payment_charge_id"], second.as_str());
    assert_eq!(refund.texts(), ["Refunded 50 Stars."]);
    assert_eq!(gems(&bot), [first]);

    let refund = bot.text(USER, "/refund").await;
    assert_eq!(refund.calls("refundStarPayment").len(), 1);
    assert_eq!(
        bot.text(USER, "/refund").await.texts(),
        ["Nothing to refund."]
    );
    assert!(gems(&bot).is_empty());
}

#[tokio::test]
async fn a_refund_telegram_refuses_keeps_the_gem() {
    let mut bot = TestBot::new(handlers()).await;
    let charge = bot.pay(USER, GEM, GEM_STARS).await.charge.unwrap();
    bot.fail(
        Call::method("refundStarPayment"),
        Failure::api(400, "Bad Request: CHARGE_NOT_FOUND"),
    );
    let refund = bot.text(USER, "/refund").await;
    assert!(
        matches!(refund.outcome, Outcome::DeadLettered(_)),
        "{:?}",
        refund.outcome
    );
    assert_eq!(gems(&bot), [charge], "nothing is debited");
}

#[tokio::test]
async fn a_gem_telegram_says_was_refunded_already_leaves_the_wallet() {
    let mut bot = TestBot::new(handlers()).await;
    bot.pay(USER, GEM, GEM_STARS).await;
    bot.fail(
        Call::method("refundStarPayment"),
        Failure::api(400, "Bad Request: CHARGE_ALREADY_REFUNDED"),
    );
    let refund = bot.text(USER, "/refund").await;
    assert_eq!(refund.texts(), ["That gem was refunded already."]);
    assert!(gems(&bot).is_empty());
}

#[tokio::test]
async fn a_crash_between_the_credit_and_the_settle_credits_once() {
    let mut bot = TestBot::new(handlers()).await;
    let paid = serde_json::json!({
        "message": {
            "message_id": 5, "date": 1_800_000_000,
            "chat": {"id": USER, "type": "private", "first_name": "Ada"},
            "from": {"id": USER, "is_bot": false, "first_name": "Ada"},
            "successful_payment": {
                "currency": "XTR", "total_amount": GEM_STARS, "invoice_payload": GEM,
                "telegram_payment_charge_id": "stx-crash", "provider_payment_charge_id": ""
            }
        }
    });
    // The thanks leave; the process dies before the update is finished.
    let crashed = bot.crash_after(1).update(paid).await;
    assert_eq!(crashed.outcome, Outcome::Crashed);
    assert_eq!(crashed.texts(), ["Thank you! You have 1 gems."]);
    assert!(gems(&bot).is_empty(), "nothing was written");

    let again = bot.again().await;
    assert!(again.is_done(), "{:?}", again.outcome);
    assert_eq!(gems(&bot), ["stx-crash"], "credited once");
    // The thanks' outcome died with the process: they are sent again, at least once as any reply.
    assert_eq!(again.texts(), ["Thank you! You have 1 gems."]);
}
