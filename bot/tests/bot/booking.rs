//! The form, through tgq's worker with the test kit: each answer moves it once.

use std::time::Duration;

use tgq_bot::booking::*;
use tgq_bot::handlers;
use tgq_test::{Call, Failure, Outcome, TestBot};

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
