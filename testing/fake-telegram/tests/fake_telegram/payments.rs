//! Payments in Stars as the fake plays them: an invoice, the pre-checkout query Telegram sends when
//! the user presses Pay and the 10 s the bot has to answer it, the charge and its message, refunds
//! once, and the transactions list, each in the shapes teloxide reads.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use teloxide_core::types::{
    Message, MessageKind, StarTransactions, TransactionPartner, TransactionPartnerUserKind, Update,
    UpdateKind,
};
use tgq_fake_telegram::{
    Charge, FakeClock, FakeConfig, FakeTelegram, PRE_CHECKOUT_DEADLINE, STARS, SUBSCRIPTION_PERIOD,
};

use crate::support::call;

/// A user of the fake's, whose private chat has the id.
const USER: i64 = 42;

fn invoice(chat: i64) -> Value {
    json!({
        "chat_id": chat,
        "title": "Dragon egg",
        "description": "One egg, hatches in a week",
        "payload": "egg-1",
        "currency": STARS,
        "prices": [{ "label": "Egg", "amount": 25 }],
    })
}

async fn frozen() -> FakeTelegram {
    FakeTelegram::start_with(FakeConfig {
        clock: FakeClock::Frozen,
        ..FakeConfig::default()
    })
    .await
    .unwrap()
}

/// The updates queued for `getUpdates`, confirmed as read.
async fn updates(telegram: &FakeTelegram) -> Vec<Update> {
    let (status, body) = call(telegram, "getUpdates", json!({})).await;
    assert_eq!(status, 200, "{body}");
    // Read from text, as a client reads the answer: teloxide's Update takes its kind's key
    // borrowed from the text, and reads nothing from an owned `Value`.
    let text = body["result"].to_string();
    let updates: Vec<Update> = serde_json::from_str(&text)
        .unwrap_or_else(|error| panic!("updates do not deserialize: {error}\n{text}"));
    if let Some(last) = updates.last() {
        call(telegram, "getUpdates", json!({ "offset": last.id.0 + 1 })).await;
    }
    updates
}

fn deserialized<T: DeserializeOwned>(value: &Value) -> T {
    serde_json::from_value(value.clone())
        .unwrap_or_else(|error| panic!("does not deserialize: {error}\n{value}"))
}

async fn answer(telegram: &FakeTelegram, query: &str, ok: bool) -> (u16, Value) {
    let mut params = json!({ "pre_checkout_query_id": query, "ok": ok });
    if !ok {
        params["error_message"] = "Sold out".into();
    }
    call(telegram, "answerPreCheckoutQuery", params).await
}

#[tokio::test]
async fn an_answered_checkout_charges_the_user_once_and_tells_the_bot() {
    let telegram = frozen().await;
    let (status, body) = call(&telegram, "sendInvoice", invoice(USER)).await;
    assert_eq!(status, 200, "{body}");
    let sent: Message = deserialized(&body["result"]);
    let shown = sent.invoice().expect("an invoice message");
    assert_eq!((shown.currency.as_str(), shown.total_amount), (STARS, 25));

    let query = telegram.checkout(USER, "egg-1", 25);
    let asked = updates(&telegram).await;
    let [Update {
        kind: UpdateKind::PreCheckoutQuery(asked),
        ..
    }] = asked.as_slice()
    else {
        panic!("one pre-checkout query, not {asked:?}");
    };
    assert_eq!(asked.id.0, query);
    assert_eq!(
        (
            asked.from.id.0,
            asked.total_amount,
            asked.invoice_payload.as_str()
        ),
        (42, 25, "egg-1")
    );

    telegram.advance_clock(PRE_CHECKOUT_DEADLINE - Duration::from_millis(1));
    assert_eq!(answer(&telegram, &query, true).await.0, 200);
    let paid = updates(&telegram).await;
    let [Update {
        kind: UpdateKind::Message(message),
        ..
    }] = paid.as_slice()
    else {
        panic!("one message, not {paid:?}");
    };
    let payment = message.successful_payment().expect("a successful payment");
    assert_eq!(message.chat.id.0, USER);
    assert_eq!(
        (payment.total_amount, payment.invoice_payload.as_str()),
        (25, "egg-1")
    );
    assert_eq!(
        telegram.charges(),
        [Charge {
            id: payment.telegram_payment_charge_id.0.clone(),
            user: USER,
            amount: 25,
            payload: "egg-1".into(),
            refunded: false,
            subscription: None,
        }]
    );

    // A query is answered once.
    let (status, again) = answer(&telegram, &query, true).await;
    assert_eq!(status, 400, "{again}");
    assert_eq!(telegram.charges().len(), 1);
}

#[tokio::test]
async fn an_answer_after_ten_seconds_is_refused_and_charges_nobody() {
    let telegram = frozen().await;
    let query = telegram.checkout(USER, "egg-1", 25);
    telegram.advance_clock(PRE_CHECKOUT_DEADLINE + Duration::from_millis(1));
    let (status, body) = answer(&telegram, &query, true).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["description"],
        "Bad Request: query is too old and response timeout expired or query ID is invalid"
    );
    assert!(telegram.charges().is_empty());
    assert_eq!(updates(&telegram).await.len(), 1, "the query alone");
}

#[tokio::test]
async fn a_refusal_must_say_why_and_charges_nobody() {
    let telegram = frozen().await;
    let query = telegram.checkout(USER, "egg-1", 25);
    let (status, body) = call(
        &telegram,
        "answerPreCheckoutQuery",
        json!({ "pre_checkout_query_id": query, "ok": false }),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["description"], "Bad Request: ERROR_TEXT_EMPTY");
    assert_eq!(answer(&telegram, &query, false).await.0, 200);
    assert!(telegram.charges().is_empty());
    assert_eq!(updates(&telegram).await.len(), 1, "the query alone");
}

#[tokio::test]
async fn a_charge_is_refunded_once_and_both_are_transactions() {
    let telegram = frozen().await;
    for payload in ["egg-1", "egg-2"] {
        let query = telegram.checkout(USER, payload, 25);
        assert_eq!(answer(&telegram, &query, true).await.0, 200);
    }
    let charges = telegram.charges();
    let refund = json!({ "user_id": USER, "telegram_payment_charge_id": charges[0].id });
    assert_eq!(
        call(&telegram, "refundStarPayment", refund.clone()).await.0,
        200
    );
    let (status, again) = call(&telegram, "refundStarPayment", refund).await;
    assert_eq!(
        (status, again["description"].as_str()),
        (400, Some("Bad Request: CHARGE_ALREADY_REFUNDED"))
    );
    let (status, unknown) = call(
        &telegram,
        "refundStarPayment",
        json!({ "user_id": 7, "telegram_payment_charge_id": charges[1].id }),
    )
    .await;
    assert_eq!(status, 400, "another user's charge: {unknown}");
    assert!(telegram.charges()[0].refunded && !telegram.charges()[1].refunded);

    let told = updates(&telegram).await;
    let refunded: Vec<_> = told
        .iter()
        .filter_map(|update| match &update.kind {
            UpdateKind::Message(Message {
                kind: MessageKind::RefundedPayment(refund),
                ..
            }) => Some(&refund.refunded_payment),
            _ => None,
        })
        .collect();
    assert_eq!(refunded.len(), 1);
    assert_eq!(refunded[0].telegram_payment_charge_id.0, charges[0].id);

    let (status, body) = call(&telegram, "getStarTransactions", json!({})).await;
    assert_eq!(status, 200, "{body}");
    let listed: StarTransactions = deserialized(&body["result"]);
    let lines: Vec<(&str, u32, bool)> = listed
        .transactions
        .iter()
        .map(|t| (t.id.0.as_str(), t.amount, t.receiver.is_some()))
        .collect();
    assert_eq!(
        lines,
        [
            (charges[0].id.as_str(), 25, false),
            (charges[1].id.as_str(), 25, false),
            (charges[0].id.as_str(), 25, true),
        ],
        "oldest first; a refund's user is its receiver"
    );
    assert!(matches!(
        listed.transactions[0].source,
        Some(TransactionPartner::User(_))
    ));
    let (_, page) = call(
        &telegram,
        "getStarTransactions",
        json!({ "offset": 2, "limit": 5 }),
    )
    .await;
    assert_eq!(
        page["result"]["transactions"].as_array().map(Vec::len),
        Some(1)
    );
}

#[tokio::test]
async fn an_invoice_telegram_would_refuse_is_refused() {
    let telegram = FakeTelegram::start().await.unwrap();
    let mut two_prices = invoice(USER);
    two_prices["prices"] = json!([{ "label": "a", "amount": 1 }, { "label": "b", "amount": 2 }]);
    let mut provider = invoice(USER);
    provider["provider_token"] = "284685063:TEST".into();
    let mut dollars = invoice(USER);
    dollars["currency"] = "USD".into();
    let mut untitled = invoice(USER);
    untitled["title"] = "".into();
    for (params, said) in [
        (two_prices, "STARS_INVOICE_INVALID"),
        (provider, "STARS_INVOICE_INVALID"),
        (dollars, "CURRENCY_INVALID"),
        (untitled, "invoice title must be 1-32 characters"),
    ] {
        for method in ["sendInvoice", "createInvoiceLink"] {
            let (status, body) = call(&telegram, method, params.clone()).await;
            assert_eq!(
                (status, body["description"].as_str()),
                (400, Some(format!("Bad Request: {said}").as_str())),
                "{method} {params}"
            );
        }
    }
    let (status, link) = call(&telegram, "createInvoiceLink", invoice(USER)).await;
    assert_eq!(status, 200, "{link}");
    assert!(link["result"]
        .as_str()
        .is_some_and(|l| l.starts_with("https://t.me/$")));
}

#[tokio::test]
async fn with_pay_invoices_every_private_invoice_is_paid_at_once() {
    let telegram = FakeTelegram::start_with(FakeConfig {
        pay_invoices: true,
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    assert_eq!(call(&telegram, "sendInvoice", invoice(USER)).await.0, 200);
    assert_eq!(call(&telegram, "sendInvoice", invoice(-1_001)).await.0, 200);
    let asked = updates(&telegram).await;
    let queries: Vec<_> = asked
        .iter()
        .filter_map(|update| match &update.kind {
            UpdateKind::PreCheckoutQuery(query) => Some(query.from.id.0),
            _ => None,
        })
        .collect();
    assert_eq!(queries, [42], "the user of the private chat, not the group");
}

/// The successful payments among `updates`: (charge, expiration, recurring, first).
fn payments(updates: &[Update]) -> Vec<(String, Option<i64>, bool, bool)> {
    updates
        .iter()
        .filter_map(|update| match &update.kind {
            UpdateKind::Message(message) => message.successful_payment(),
            _ => None,
        })
        .map(|paid| {
            (
                paid.telegram_payment_charge_id.0.clone(),
                paid.subscription_expiration_date.map(|at| at.timestamp()),
                paid.is_recurring,
                paid.is_first_recurring,
            )
        })
        .collect()
}

#[tokio::test]
async fn a_subscription_charges_its_first_period_at_checkout_and_each_renewal_apart() {
    let telegram = frozen().await;
    let mut link = invoice(USER);
    link.as_object_mut().unwrap().remove("chat_id");
    link["payload"] = "club".into();
    link["subscription_period"] = 86_400.into();
    let (status, refused) = call(&telegram, "createInvoiceLink", link.clone()).await;
    assert_eq!(
        (status, refused["description"].as_str()),
        (400, Some("Bad Request: SUBSCRIPTION_PERIOD_INVALID")),
        "Telegram takes 30 days only"
    );
    link["subscription_period"] = SUBSCRIPTION_PERIOD.into();
    assert_eq!(call(&telegram, "createInvoiceLink", link).await.0, 200);

    let query = telegram.checkout(USER, "club", 25);
    assert_eq!(answer(&telegram, &query, true).await.0, 200);
    let first = telegram.charges()[0].clone();
    let renewed = telegram.renew(&first.id).expect("a subscription's charge");
    assert_eq!(telegram.renew("fake-charge-99"), None, "no such charge");

    let period = i64::from(SUBSCRIPTION_PERIOD);
    let until = first.subscription.expect("a period").until;
    assert!((until - unix_now() - period).abs() < 60, "{until}");
    let told = payments(&updates(&telegram).await);
    assert_eq!(
        told,
        [
            (first.id.clone(), Some(until), true, true),
            (renewed.clone(), Some(until + period), true, false),
        ],
        "the renewal carries the next period, with no pre-checkout query before it"
    );

    let (_, body) = call(&telegram, "getStarTransactions", json!({})).await;
    let listed: StarTransactions = deserialized(&body["result"]);
    let periods: Vec<_> = listed
        .transactions
        .iter()
        .map(|t| match &t.source {
            Some(TransactionPartner::User(user)) => match &user.kind {
                TransactionPartnerUserKind::InvoicePayment(paid) => {
                    paid.subscription_period.map(|s| s.seconds())
                }
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(
        periods,
        [Some(SUBSCRIPTION_PERIOD), Some(SUBSCRIPTION_PERIOD)],
        "{body}"
    );

    // Renewing the first charge again pays the period after the latest, not the same one.
    let third = telegram.renew(&first.id).expect("still a subscription");
    let periods: Vec<_> = telegram
        .charges()
        .iter()
        .filter_map(|c| c.subscription.map(|p| p.until))
        .collect();
    assert_eq!(
        periods,
        [until, until + period, until + 2 * period],
        "{third}"
    );

    // A one-off invoice of the same payload sells a one-off from then on.
    assert_eq!(
        call(&telegram, "sendInvoice", {
            let mut once = invoice(USER);
            once["payload"] = "club".into();
            once
        })
        .await
        .0,
        200
    );
    let query = telegram.checkout(USER, "club", 25);
    assert_eq!(answer(&telegram, &query, true).await.0, 200);
    assert_eq!(telegram.charges().last().unwrap().subscription, None);

    // A one-off payment renews nothing.
    let query = telegram.checkout(USER, "egg-1", 25);
    assert_eq!(answer(&telegram, &query, true).await.0, 200);
    let one_off = telegram.charges().last().unwrap().clone();
    assert_eq!(
        (one_off.subscription, telegram.renew(&one_off.id)),
        (None, None)
    );
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}
