//! The built-in echo bot answers each update with a reply naming it, and fails on request.

use std::sync::Arc;

use serde_json::{json, Value};
use tgq_core::dead::DeadReason;
use tgq_core::echo::{credit_text, reply_text, EchoBot, INVOICE_PAYLOAD};
use tgq_core::ids::BotId;
use tgq_core::worker::RecordOutcome;
use tgq_memory::{Harness, RecordingBotApi};

fn message(update_id: i64, chat: i64, text: &str) -> Value {
    json!({
        "update_id": update_id,
        "message": {
            "message_id": update_id, "date": 1_700_000_000, "text": text,
            "chat": {"id": chat, "type": "private", "first_name": "Ada"},
            "from": {"id": chat, "is_bot": false, "first_name": "Ada"},
        }
    })
}

#[tokio::test]
async fn the_echo_bot_names_the_update_in_its_reply_and_fails_when_asked() {
    let api = Arc::new(RecordingBotApi::new());
    let harness = Harness::new(BotId::new("demo").unwrap(), Arc::new(EchoBot), api.clone());
    let report = harness
        .run(&[
            message(10, 5, "hello"),
            message(11, 6, "/fail permanent"),
            message(12, 7, "/fail transient"),
            message(13, 8, "/once hi"),
        ])
        .await;

    assert_eq!(
        api.sent_texts(),
        [reply_text(10, "hello"), reply_text(13, "/once hi")]
    );
    assert_eq!(reply_text(10, "hello"), "echo 10: hello");
    let outcomes: Vec<_> = report.outcomes.iter().map(|(_, o)| o.clone()).collect();
    assert!(matches!(outcomes[0], RecordOutcome::Done(_)));
    assert_eq!(
        outcomes[1],
        RecordOutcome::DeadLettered(DeadReason::Permanent)
    );
    assert!(matches!(outcomes[2], RecordOutcome::Retrying(..)));
    assert!(matches!(outcomes[3], RecordOutcome::Done(_)));
}

#[tokio::test]
async fn slow_waits_the_milliseconds_of_its_first_word_whatever_follows() {
    let api = Arc::new(RecordingBotApi::new());
    let harness = Harness::new(BotId::new("demo").unwrap(), Arc::new(EchoBot), api.clone());
    let started = std::time::Instant::now();
    // As the drill sends it: the words after the milliseconds once made the wait 0.
    harness.run(&[message(20, 5, "/slow 300 c5 m2")]).await;
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(300),
        "replied after {:?}",
        started.elapsed()
    );
    assert_eq!(api.sent_texts(), [reply_text(20, "/slow 300 c5 m2")]);
}

#[tokio::test]
async fn buttons_come_as_one_inline_button_per_word_and_remember_keeps_the_text_in_the_state() {
    let api = Arc::new(RecordingBotApi::new());
    let harness = Harness::new(BotId::new("demo").unwrap(), Arc::new(EchoBot), api.clone());
    harness
        .run(&[
            message(30, 5, "/buttons yes no"),
            message(31, 6, "/remember tea"),
        ])
        .await;

    let calls = api.calls();
    let buttons = &calls[0].params["reply_markup"]["inline_keyboard"][0];
    let pairs: Vec<_> = buttons
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["text"].clone(), b["callback_data"].clone()))
        .collect();
    assert_eq!(
        pairs,
        [(json!("yes"), json!("yes")), (json!("no"), json!("no"))]
    );
    assert_eq!(api.sent_texts()[1], reply_text(31, "/remember tea"));
    let states = harness.store.states();
    assert_eq!(states.len(), 1, "only /remember writes a state: {states:?}");
    let said: Value = serde_json::from_str(&states[0].1.json).unwrap();
    assert_eq!(said, json!({ "said": "/remember tea" }));
    assert_eq!(states[0].1.format, "tgq.echo.remembered/v1");
}

/// A `successful_payment` of charge `charge` for `stars` Stars from user 5 in their chat.
fn paid(update_id: i64, charge: &str, stars: u32) -> Value {
    let mut update = message(update_id, 5, "");
    let message = update["message"].as_object_mut().unwrap();
    message.remove("text");
    message.insert(
        "successful_payment".into(),
        json!({
            "currency": "XTR", "total_amount": stars, "invoice_payload": INVOICE_PAYLOAD,
            "telegram_payment_charge_id": charge, "provider_payment_charge_id": ""
        }),
    );
    update
}

fn pre_checkout(update_id: i64, query: &str, payload: &str) -> Value {
    json!({
        "update_id": update_id,
        "pre_checkout_query": {
            "id": query, "currency": "XTR", "total_amount": 1, "invoice_payload": payload,
            "from": {"id": 5, "is_bot": false, "first_name": "Ada"},
        }
    })
}

#[tokio::test]
async fn a_charge_is_credited_to_the_chat_s_balance_once_however_often_it_comes() {
    let api = Arc::new(RecordingBotApi::new());
    let harness = Harness::new(BotId::new("demo").unwrap(), Arc::new(EchoBot), api.clone());
    harness.run(&[paid(40, "ch-1", 3)]).await;
    // The same charge in another update (a replay after the first's record expired), then a
    // second charge for the same invoice payload, then /remember, which keeps the balance.
    harness.run(&[paid(41, "ch-1", 3)]).await;
    harness.run(&[paid(42, "ch-2", 2)]).await;
    harness.run(&[message(43, 5, "/remember tea")]).await;

    assert_eq!(
        api.sent_texts(),
        [
            credit_text(40, "ch-1", 3, true, 3),
            credit_text(41, "ch-1", 3, false, 3),
            credit_text(42, "ch-2", 2, true, 5),
            reply_text(43, "/remember tea"),
        ]
    );
    assert_eq!(
        credit_text(40, "ch-1", 3, true, 3),
        "echo 40: credited ch-1 3, balance 3"
    );
    assert_eq!(
        credit_text(41, "ch-1", 3, false, 3),
        "echo 41: already credited ch-1, balance 3"
    );
    let states = harness.store.states();
    let kept: Value = serde_json::from_str(&states[0].1.json).unwrap();
    assert_eq!(kept, json!({ "said": "/remember tea", "stars": 5 }));
}

#[tokio::test]
async fn the_echo_bot_invoices_one_star_and_answers_the_pre_checkout_of_its_own_payload_only() {
    let api = Arc::new(RecordingBotApi::new());
    let harness = Harness::new(BotId::new("demo").unwrap(), Arc::new(EchoBot), api.clone());
    harness
        .run(&[
            message(50, 5, "/invoice"),
            pre_checkout(51, "q-own", INVOICE_PAYLOAD),
            pre_checkout(52, "q-other", "egg"),
        ])
        .await;

    let calls = api.calls();
    let invoice = &calls[0];
    assert_eq!(invoice.method, "sendInvoice");
    assert_eq!(
        (
            &invoice.params["payload"],
            &invoice.params["currency"],
            &invoice.params["prices"][0]["amount"]
        ),
        (&json!("echo"), &json!("XTR"), &json!(1))
    );
    let answers: Vec<_> = calls
        .iter()
        .filter(|call| call.method == "answerPreCheckoutQuery")
        .map(|call| {
            (
                call.params["pre_checkout_query_id"].clone(),
                call.params["ok"].clone(),
            )
        })
        .collect();
    // The bot's own invoice is answered by the bot; another is refused for it by tgq.
    assert_eq!(
        answers,
        [
            (json!("q-own"), json!(true)),
            (json!("q-other"), json!(false))
        ]
    );
}
