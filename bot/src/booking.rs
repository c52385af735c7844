//! A booking form, as a conversation: `/book` asks for a name, then a date from buttons, then a
//! confirmation. Where the chat stands is a [`Flow`] step in the chat's state, moved with the
//! update that answered, exactly once; a question unanswered for ten minutes drops the form once
//! (a flow timeout); `/cancel` leaves it; every other command still works in the middle.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tgq::prelude::*;

/// How long each question waits for its answer.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(10 * 60);

/// The dates the form offers, as buttons.
pub const DATES: [&str; 3] = ["Today", "Tomorrow", "Saturday"];

/// Where a chat's booking stands: the question it waits on, with the answers so far.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Booking {
    /// Asked for the name.
    Name,
    /// Asked for a date.
    Date {
        /// The name given.
        name: String,
    },
    /// Asked to confirm.
    Confirm {
        /// The name given.
        name: String,
        /// The date picked.
        date: String,
    },
}

impl Flow for Booking {
    const NAME: &'static str = "example.booking/v1";
}

/// `/book`: starts the form (again, if the chat was in it).
pub async fn start(message: &Message, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
    if let Err(error) = ctx.wait(&Booking::Name, ANSWER_WITHIN) {
        return crate::without_timers(error, message, ctx).await;
    }
    ctx.reply(
        message,
        "Booking: what name should it be under? (/cancel leaves)",
    )
    .await
}

/// A text while the chat is in the form: the name, when the form asks for one. `false` when the
/// form does not wait for a text, so the bot handles it as any other.
pub async fn text(
    text: &str,
    message: &Message,
    ctx: &mut Context<'_>,
) -> Result<bool, HandlerError> {
    let Some(Booking::Name) = ctx.flow::<Booking>()? else {
        return Ok(false);
    };
    let name = text.trim().to_owned();
    let dates = DATES.iter().fold(Keyboard::new(), |keys, date| {
        keys.push(InlineKeyboardButton::callback(
            *date,
            format!("date:{date}"),
        ))
    });
    ctx.wait(&Booking::Date { name: name.clone() }, ANSWER_WITHIN)?;
    ctx.reply_with(message, format!("Which day for {name}?"), dates)
        .await?;
    Ok(true)
}

/// A date button: asks to confirm, if the form waits for a date.
pub async fn date(
    date: &str,
    query: &CallbackQuery,
    ctx: &mut Context<'_>,
) -> Result<(), HandlerError> {
    let (Some(Booking::Date { name }), Some(message)) = (ctx.flow::<Booking>()?, &query.message)
    else {
        return ctx
            .answer(query, "That booking is over; /book starts one.")
            .await;
    };
    ctx.answer(query, date).await?;
    let yes_no = Keyboard::new()
        .push(InlineKeyboardButton::callback("Yes", "confirm:true"))
        .push(InlineKeyboardButton::callback("No", "confirm:false"));
    let step = Booking::Confirm {
        name: name.clone(),
        date: date.to_owned(),
    };
    ctx.wait(&step, ANSWER_WITHIN)?;
    let ask = SendMessage::new(message.chat().id, format!("Book {name} for {date}?"))
        .reply_markup(yes_no);
    ctx.send(ask).await.map(|_| ())
}

/// The Yes or No button: ends the form.
pub async fn confirm(
    yes: bool,
    query: &CallbackQuery,
    ctx: &mut Context<'_>,
) -> Result<(), HandlerError> {
    let (Some(Booking::Confirm { name, date }), Some(message)) =
        (ctx.flow::<Booking>()?, &query.message)
    else {
        return ctx
            .answer(query, "That booking is over; /book starts one.")
            .await;
    };
    ctx.answer(query, "").await?;
    ctx.end_flow();
    let text = match yes {
        true => format!("Booked: {name}, {date}."),
        false => "Not booked. /book starts again.".to_owned(),
    };
    ctx.send(SendMessage::new(message.chat().id, text))
        .await
        .map(|_| ())
}

/// `/cancel`: leaves the form, if the chat is in it.
pub async fn cancel(message: &Message, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
    let text = match ctx.flow::<Booking>()? {
        Some(_) => {
            ctx.end_flow();
            "Booking cancelled."
        }
        None => "Nothing to cancel.",
    };
    ctx.reply(message, text).await
}

/// A question went unanswered for [`ANSWER_WITHIN`]: the form is dropped, once.
pub async fn timed_out(fired: &Fired, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
    ctx.end_flow();
    let text = "No answer for 10 minutes, so the booking is dropped. /book starts again.";
    ctx.send(SendMessage::new(ChatId(fired.chat_id), text))
        .await
        .map(|_| ())
}
