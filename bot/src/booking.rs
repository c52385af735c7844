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

#[cfg(test)]
mod tests {
    //! The form, through tgq's worker with the test kit: each answer moves it once.

    use tgq_test::{Call, Failure, Outcome, TestBot};

    use super::*;
    use crate::handlers;

    const ADA: i64 = 7;

    async fn at_confirm(bot: &mut TestBot) {
        bot.text(ADA, "/book").await;
        let asked = bot.text(ADA, "Ada Lovelace").await;
        assert_eq!(asked.texts(), ["Which day for Ada Lovelace?"]);
        assert_eq!(asked.buttons(), [DATES.to_vec()]);
        let confirm = bot.press(ADA, "Tomorrow").await;
        assert_eq!(confirm.texts(), ["Book Ada Lovelace for Tomorrow?"]);
    }

    #[tokio::test]
    async fn the_form_asks_a_name_then_a_date_then_a_confirmation_and_books() {
        let mut bot = TestBot::new(handlers()).await;
        let asked = bot.text(ADA, "/book").await;
        assert!(
            asked.texts()[0].starts_with("Booking: what name"),
            "{asked:?}"
        );
        at_confirm(&mut bot).await;
        let booked = bot.press(ADA, "Yes").await;
        assert_eq!(booked.texts(), ["Booked: Ada Lovelace, Tomorrow."]);
        assert!(
            bot.timers(ADA).is_empty(),
            "the form's timeout went with it"
        );
        assert_eq!(
            bot.text(ADA, "hello").await.texts(),
            ["You said: hello"],
            "the form is over"
        );
        assert!(bot
            .advance(ANSWER_WITHIN)
            .await
            .iter()
            .all(|r| r.sent.is_empty()));
    }

    #[tokio::test]
    async fn commands_still_work_in_the_middle_and_cancel_leaves_the_form() {
        let mut bot = TestBot::new(handlers()).await;
        bot.text(ADA, "/book").await;
        assert!(bot.text(ADA, "/help").await.texts()[0].contains("/book"));
        assert_eq!(
            bot.text(ADA, "Grace").await.texts(),
            ["Which day for Grace?"],
            "the form still waits for the name after /help"
        );
        assert_eq!(
            bot.text(ADA, "/cancel").await.texts(),
            ["Booking cancelled."]
        );
        assert_eq!(
            bot.text(ADA, "/cancel").await.texts(),
            ["Nothing to cancel."]
        );
        let late = bot.press(ADA, "Today").await;
        assert_eq!(
            late.calls("answerCallbackQuery")[0].params["text"],
            "That booking is over; /book starts one."
        );
    }

    #[tokio::test]
    async fn an_unanswered_question_drops_the_form_once_after_ten_minutes() {
        let mut bot = TestBot::new(handlers()).await;
        bot.text(ADA, "/book").await;
        bot.advance(ANSWER_WITHIN / 2).await;
        bot.text(ADA, "Ada").await;
        assert!(
            bot.advance(ANSWER_WITHIN / 2)
                .await
                .iter()
                .all(|r| r.sent.is_empty()),
            "answering moved the timeout on"
        );
        let dropped = bot.advance(ANSWER_WITHIN / 2).await;
        let texts: Vec<&str> = dropped.iter().flat_map(|r| r.texts()).collect();
        assert_eq!(
            texts,
            ["No answer for 10 minutes, so the booking is dropped. /book starts again."]
        );
        assert!(bot.advance(ANSWER_WITHIN * 6).await.is_empty(), "once");
        assert_eq!(bot.text(ADA, "Ada").await.texts(), ["You said: Ada"]);
    }

    #[tokio::test]
    async fn a_retried_or_repeated_answer_moves_the_form_once() {
        let mut bot = TestBot::new(handlers()).await;
        bot.text(ADA, "/book").await;
        bot.fail(
            Call::method("sendMessage"),
            Failure::api(502, "Bad Gateway"),
        );
        let failed = bot.text(ADA, "Ada").await;
        assert!(matches!(failed.outcome, Outcome::Retrying(_)), "{failed:?}");
        let again = bot.again().await;
        assert_eq!(
            again.texts(),
            ["Which day for Ada?"],
            "still at the name on the retry"
        );
        assert_eq!(bot.again().await.outcome, Outcome::AlreadyDone);
        bot.press(ADA, "Today").await;
        bot.crash_after(1);
        assert_eq!(bot.press(ADA, "Yes").await.outcome, Outcome::Crashed);
        let booked = bot.again().await;
        assert_eq!(booked.texts(), ["Booked: Ada, Today."]);
        assert_eq!(
            bot.press(ADA, "Yes").await.calls("answerCallbackQuery")[0].params["text"],
            "That booking is over; /book starts one."
        );
    }

    #[tokio::test]
    async fn remind_sends_the_reminder_once_when_it_is_due() {
        let mut bot = TestBot::new(handlers()).await;
        let set = bot.text(ADA, "/remind 5 tea").await;
        assert_eq!(set.texts(), ["I will remind you in 5 min."]);
        assert!(bot.advance(Duration::from_secs(4 * 60)).await.is_empty());
        let fired = bot.advance(Duration::from_secs(60)).await;
        assert_eq!(fired[0].texts(), ["Reminder: tea"]);
        assert!(bot.advance(Duration::from_secs(3600)).await.is_empty());
    }
}
