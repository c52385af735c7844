//! The echo bot built into every tgq binary (`TGQ_HANDLER=echo`): a handler whose every reply names
//! the update it answers, so that a deployment can be smoke-tested and the test suite and
//! `tgq-drill` can tell from the outside which update was processed, how often and in which order —
//! whatever the author's bot in `bot/` does.
//!
//! For an update `U` in chat `C`:
//! - a message (or channel post, or an edit of either) with text `T` → `sendMessage(C, "echo U: T")`;
//!   with `T` = `/once …` the reply is sent at most once; `/fail permanent` fails the update
//!   permanently and `/fail transient` fails it transiently on every run, both before any send;
//!   `/slow MS …` waits MS milliseconds before replying; `/later MS …` replies, and schedules a
//!   timer MS milliseconds ahead that sends `echo timer U: T` when it fires (its key is
//!   `later:U`, so a chat can have several); `/at MS …` does the same for a timer due at MS
//!   milliseconds since the epoch; `/buttons D…` replies with one inline button per word `D` (its
//!   text and its data); `/remember …` keeps the text in the chat's state ([`Remembered`]) and
//!   replies; `/invoice` sends an invoice of 1 Star with the payload `echo` ([`INVOICE_PAYLOAD`]);
//! - a button press with data `D` → `answerCallbackQuery`, then `sendMessage(C, "echo U: callback D")`;
//! - a pre-checkout query for the payload `echo` → `answerPreCheckoutQuery(ok)`; for any other
//!   payload nothing, so tgq refuses it for the bot (docs/design/payments.md §1);
//! - a `successful_payment` of charge `X` for `N` Stars → credited through the ledger once per
//!   charge: the chat's balance ([`Remembered::stars`]) grows by `N`, and the reply is
//!   `echo U: credited X N, balance B` ([`credit_text`]); a charge credited before gets
//!   `echo U: already credited X, balance B` and changes nothing; a payment in another currency
//!   gets nothing;
//! - anything else → nothing is sent.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use teloxide_core::payloads::{
    AnswerCallbackQuery, AnswerPreCheckoutQuery, SendInvoice, SendMessage, SendMessageSetters as _,
};
use teloxide_core::types::{
    AllowedUpdate, ChatId, InlineKeyboardButton, InlineKeyboardMarkup, LabeledPrice, Message,
    SuccessfulPayment, Update, UpdateKind,
};

use crate::context::Context;
use crate::failure::HandlerError;
use crate::handler::Handler;
use crate::payment::{Credit, STARS};
use crate::record::Timestamp;
use crate::timer::{Fired, When};

/// What the echo bot keeps in the chat's state: the text `/remember …` was sent, and the Stars
/// credited in the chat.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remembered {
    /// The whole text, `/remember` included.
    pub said: String,
    /// The Stars of every charge credited in the chat, each counted once.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stars: u64,
}

fn is_zero(stars: &u64) -> bool {
    *stars == 0
}

/// The payload of the echo bot's invoice, the one pre-checkout it answers.
pub const INVOICE_PAYLOAD: &str = "echo";

impl crate::state::ChatState for Remembered {
    const FORMAT: &'static str = "tgq.echo.remembered/v1";
}

/// The built-in echo bot.
#[derive(Clone, Copy, Debug, Default)]
pub struct EchoBot;

/// The reply the echo bot sends for text `text` of update `update_id`.
pub fn reply_text(update_id: i64, text: &str) -> String {
    format!("echo {update_id}: {text}")
}

#[async_trait]
impl Handler for EchoBot {
    fn update_kinds(&self) -> Vec<AllowedUpdate> {
        vec![
            AllowedUpdate::Message,
            AllowedUpdate::EditedMessage,
            AllowedUpdate::ChannelPost,
            AllowedUpdate::EditedChannelPost,
            AllowedUpdate::CallbackQuery,
            AllowedUpdate::PreCheckoutQuery,
        ]
    }

    async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        let update_id = i64::from(update.id.0);
        match update.kind {
            UpdateKind::Message(message)
            | UpdateKind::EditedMessage(message)
            | UpdateKind::ChannelPost(message)
            | UpdateKind::EditedChannelPost(message) => on_text(update_id, &message, ctx).await,
            UpdateKind::CallbackQuery(query) => {
                ctx.send(AnswerCallbackQuery::new(query.id.clone())).await?;
                let Some(message) = &query.message else {
                    return Ok(());
                };
                let data = query.data.as_deref().unwrap_or("");
                let text = reply_text(update_id, &format!("callback {data}"));
                ctx.send(SendMessage::new(message.chat().id, text)).await?;
                Ok(())
            }
            UpdateKind::PreCheckoutQuery(query) if query.invoice_payload == INVOICE_PAYLOAD => {
                ctx.send(AnswerPreCheckoutQuery::new(query.id, true))
                    .await?;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    async fn timer(&self, fired: Fired, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        let update_id = fired.payload["update_id"].as_i64().unwrap_or_default();
        let text = fired.payload["text"].as_str().unwrap_or_default();
        let reply = timer_reply_text(update_id, text);
        ctx.send(SendMessage::new(ChatId(fired.chat_id), reply))
            .await?;
        Ok(())
    }
}

/// The first word of `text` as a number (0 when it is not one): the drill and the bench follow it
/// with words of their own.
fn first_number(text: &str) -> u64 {
    text.split_whitespace()
        .next()
        .and_then(|word| word.parse().ok())
        .unwrap_or(0)
}

/// The echo bot's reply to update `update_id` carrying charge `charge` of `stars` Stars: credited
/// now when `new`, credited by an earlier update otherwise; `balance` is the chat's after it.
pub fn credit_text(update_id: i64, charge: &str, stars: u32, new: bool, balance: u64) -> String {
    if new {
        reply_text(
            update_id,
            &format!("credited {charge} {stars}, balance {balance}"),
        )
    } else {
        reply_text(
            update_id,
            &format!("already credited {charge}, balance {balance}"),
        )
    }
}

/// What the echo bot sends when the timer of `/later` update `update_id` with text `text` fires.
pub fn timer_reply_text(update_id: i64, text: &str) -> String {
    format!("echo timer {update_id}: {text}")
}

async fn on_text(
    update_id: i64,
    message: &Message,
    ctx: &mut Context<'_>,
) -> Result<(), HandlerError> {
    // The ledger keeps payments in Stars; one in another currency is not the echo bot's to credit.
    if let Some(payment) = message.successful_payment().filter(|p| p.currency == STARS) {
        return on_payment(update_id, message, payment, ctx).await;
    }
    let Some(text) = message.text() else {
        return Ok(());
    };
    let mut reply = SendMessage::new(message.chat.id, reply_text(update_id, text));
    if let Some(rest) = text.strip_prefix("/buttons ") {
        let row = rest
            .split_whitespace()
            .map(|data| InlineKeyboardButton::callback(data, data))
            .collect::<Vec<_>>();
        reply = reply.reply_markup(InlineKeyboardMarkup::new([row]));
    }
    if text.starts_with("/remember") {
        let mut kept: Remembered = ctx.state()?.unwrap_or_default();
        kept.said = text.to_owned();
        ctx.set_state(&kept)?;
    }
    if text.starts_with("/invoice") {
        let price = LabeledPrice::new("Star", 1);
        let title = "Echo";
        let about = "One Star for the echo bot";
        let invoice = SendInvoice::new(
            message.chat.id,
            title,
            about,
            INVOICE_PAYLOAD,
            STARS,
            [price],
        );
        ctx.send(invoice).await?;
        return Ok(());
    }
    if text.starts_with("/fail permanent") {
        return Err(HandlerError::permanent("the echo bot was asked to fail"));
    }
    if text.starts_with("/fail transient") {
        return Err(HandlerError::transient("the echo bot was asked to fail"));
    }
    if text.starts_with("/once") {
        ctx.send_at_most_once(reply).await?;
        return Ok(());
    }
    if let Some(rest) = text.strip_prefix("/slow ") {
        // The first word: the drill follows it with words of its own.
        let ms: u64 = rest
            .split_whitespace()
            .next()
            .and_then(|word| word.parse().ok())
            .unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let timer = match (text.strip_prefix("/later "), text.strip_prefix("/at ")) {
        (Some(rest), _) => Some(When::In(Duration::from_millis(first_number(rest)))),
        (_, Some(rest)) => Some(When::At(Timestamp(first_number(rest)))),
        _ => None,
    };
    if let Some(when) = timer {
        let payload = serde_json::json!({ "update_id": update_id, "text": text });
        ctx.schedule(&format!("later:{update_id}"), when, &payload)?;
    }
    ctx.send(reply).await?;
    Ok(())
}

/// Credits `payment` once per charge (docs/design/payments.md §2): the balance kept in the chat's
/// state grows in the write that settles the update, with the charge's ledger entry.
async fn on_payment(
    update_id: i64,
    message: &Message,
    payment: &SuccessfulPayment,
    ctx: &mut Context<'_>,
) -> Result<(), HandlerError> {
    let credit = ctx.credit(payment)?;
    let mut kept: Remembered = ctx.state()?.unwrap_or_default();
    let new = credit == Credit::New;
    if new {
        kept.stars += u64::from(payment.total_amount);
        ctx.set_state(&kept)?;
    }
    let charge = &payment.telegram_payment_charge_id.0;
    let text = credit_text(update_id, charge, payment.total_amount, new, kept.stars);
    ctx.send(SendMessage::new(message.chat.id, text)).await?;
    Ok(())
}
