//! The example bot's replies, run through tgq's worker with the test kit, as a bot crate's tests
//! run: from outside the crate, on what it exports.

// The booking form's tests, in a folder of their own: one test binary for the crate.
#[path = "bot/booking.rs"]
mod booking;

use tgq_bot::*;
use tgq_test::{Call, Failure, Outcome, TestBot};

const CHAT: i64 = -4242;
const ADA: i64 = 7;

/// The number in "You rolled N."
fn rolled(text: &str) -> u32 {
    let rest = text.strip_prefix("You rolled ").expect(text);
    rest[..1].parse().unwrap()
}

#[tokio::test]
async fn start_greets_with_a_button_that_counts_its_presses() {
    let mut bot = TestBot::new(handlers()).await;
    let greeting = bot.text_in_group(CHAT, ADA, "/start").await;
    assert!(greeting.texts()[0].starts_with("Hello!"), "{greeting:?}");
    let first = bot.press(CHAT, "Press me").await;
    let second = bot.press(CHAT, "Press me").await;
    assert_eq!(first.texts(), ["Button pressed once."]);
    assert_eq!(second.texts(), ["Button pressed 2 times."]);
    let data: Vec<&str> = [&greeting, &first, &second]
        .iter()
        .map(|ran| ran.calls("sendMessage")[0].button_data("Press me").unwrap())
        .collect();
    assert_eq!(data, ["pressed:1", "pressed:2", "pressed:3"]);
    for ran in [&first, &second] {
        assert_eq!(
            ran.calls("answerCallbackQuery")[0].params["text"],
            "Pressed!"
        );
    }
}

#[tokio::test]
async fn help_lists_the_commands_and_shout_shouts() {
    let mut bot = TestBot::new(handlers()).await;
    let help = bot.text(ADA, "/help").await;
    assert!(
        help.texts()[0].contains("/start") && help.texts()[0].contains("/shout"),
        "{help:?}"
    );
    assert_eq!(
        bot.text(ADA, "/shout hello there").await.texts(),
        ["HELLO THERE"]
    );
    assert_eq!(
        bot.text(ADA, "/shout").await.texts(),
        ["Shout what? Try /shout hello"]
    );
}

#[tokio::test]
async fn text_is_echoed_and_unknown_commands_are_named() {
    let mut bot = TestBot::new(handlers()).await;
    assert_eq!(
        bot.text(ADA, "hello tgq").await.texts(),
        ["You said: hello tgq"]
    );
    assert_eq!(
        bot.text(ADA, "/dance").await.texts(),
        ["I do not know /dance. /help lists my commands."]
    );
}

#[tokio::test]
async fn commands_addressed_by_name_are_answered_only_with_the_bots_username() {
    let mut named = TestBot::with_vars(handlers(), &[(USERNAME_VAR, "example_bot")]).await;
    let mut unnamed = TestBot::new(handlers()).await;
    for bot in [&mut named, &mut unnamed] {
        bot.text_in_group(CHAT, ADA, "/shout@example_bot hi").await;
        bot.text_in_group(CHAT, ADA, "/shout@other_bot hi").await;
    }
    let texts =
        |bot: &TestBot| -> Vec<String> { bot.sent().into_iter().filter_map(|s| s.text).collect() };
    assert_eq!(texts(&named), ["HI"]);
    assert!(texts(&unnamed).is_empty(), "{:?}", unnamed.sent());
}

#[tokio::test]
async fn an_announcement_reaches_every_chat_that_rolled_once_even_when_its_update_is_retried() {
    const ANNOUNCER: i64 = 99;
    let mut bot = TestBot::with_vars(handlers(), &[(ANNOUNCER_VAR, "99")]).await;
    for chat in [11, 12, 13] {
        assert!(bot.text(chat, "/roll").await.is_done());
    }
    bot.text(14, "/help").await;
    let refused = bot.text(12, "/announce free cake").await;
    assert_eq!(
        refused.texts(),
        ["Only the announcer's chat (ANNOUNCER_CHAT) may announce."]
    );

    // The run dies after starting the broadcast (its step) and before replying: the retry
    // finds the job it started, starts no second one, and replies.
    bot.crash_after(1);
    assert_eq!(
        bot.text(ANNOUNCER, "/announce free cake").await.outcome,
        Outcome::Crashed
    );
    let ran = bot.again().await;
    assert_eq!(ran.texts(), ["Broadcast 1 started."]);
    assert_eq!(bot.broadcasts().await.len(), 1);

    bot.fail(Call::to_chat(13), Failure::blocked());
    let ended = bot.run_broadcasts().await;
    assert_eq!(ended[0].counts.sent, 2);
    assert_eq!(ended[0].counts.gone, 1, "chat 13 blocked the bot");
    for chat in [11, 12] {
        let texts: Vec<_> = bot
            .sent_to(chat)
            .into_iter()
            .filter_map(|s| s.text)
            .collect();
        assert_eq!(
            texts.iter().filter(|t| *t == "free cake").count(),
            1,
            "{chat}: {texts:?}"
        );
    }
    assert!(
        bot.sent_to(14)
            .iter()
            .all(|s| s.text.as_deref() != Some("free cake")),
        "14 never rolled"
    );
}

#[tokio::test]
async fn roll_rolls_a_die_and_the_chat_keeps_the_score() {
    let mut bot = TestBot::new(handlers()).await;
    let mut numbers = Vec::new();
    let mut said = Vec::new();
    for _ in 0..3 {
        let ran = bot.text_in_group(CHAT, ADA, "/roll").await;
        assert!(ran.is_done(), "{ran:?}");
        numbers.push(rolled(ran.texts()[0]));
        said.push(ran.texts()[0].to_owned());
    }
    assert!(numbers.iter().all(|n| (1..=6).contains(n)), "{said:?}");
    assert!(
        said[0].ends_with("The first roll in this chat."),
        "{said:?}"
    );
    let total: u32 = numbers.iter().sum();
    assert!(
        said[2].ends_with(&format!("3 rolls in this chat, {total} in all.")),
        "{said:?}"
    );
    assert_eq!(bot.state(CHAT), Some(Score { rolls: 3, total }));
}

#[tokio::test]
async fn a_retried_roll_shows_the_same_number_and_counts_once() {
    let mut bot = TestBot::new(handlers()).await;
    bot.fail(
        Call::method("sendMessage"),
        Failure::api(502, "Bad Gateway"),
    );
    let first = bot.text_in_group(CHAT, ADA, "/roll").await;
    assert!(matches!(first.outcome, Outcome::Retrying(_)), "{first:?}");
    assert_eq!(
        bot.state::<Score>(CHAT),
        None,
        "the failed run counted nothing"
    );
    // The first run rolled, and its step recorded the number; the retry shows that number.
    let retry = bot.again().await;
    assert!(retry.is_done(), "{retry:?}");
    let number = rolled(retry.texts()[0]);
    assert_eq!(bot.sent().len(), 1, "one reply: {:?}", bot.sent());
    assert_eq!(
        bot.state(CHAT),
        Some(Score {
            rolls: 1,
            total: number
        })
    );
}

#[tokio::test]
async fn a_roll_crashed_after_its_step_replays_the_number_it_rolled() {
    for _ in 0..5 {
        let mut bot = TestBot::new(handlers()).await;
        let crashed = bot.crash_after(1).text_in_group(CHAT, ADA, "/roll").await;
        assert_eq!(crashed.outcome, Outcome::Crashed);
        let retry = bot.again().await;
        let number = rolled(retry.texts()[0]);
        assert_eq!(bot.state::<Score>(CHAT).unwrap().total, number);
    }
}

#[tokio::test]
async fn an_inline_query_is_offered_its_text_in_capitals() {
    let mut bot = TestBot::new(handlers()).await;
    let query = |text: &str| {
        serde_json::json!({"inline_query": {
            "id": "iq", "query": text, "offset": "",
            "from": {"id": ADA, "is_bot": false, "first_name": "Ada"},
        }})
    };
    let ran = bot.update(query("hello")).await;
    let answer = &ran.calls("answerInlineQuery")[0].params;
    assert_eq!(answer["inline_query_id"], "iq");
    assert_eq!(
        answer["results"][0]["input_message_content"]["message_text"],
        "HELLO"
    );
    let empty = bot.update(query("  ")).await;
    assert_eq!(
        empty.calls("answerInlineQuery")[0].params["results"],
        serde_json::json!([])
    );
}

#[tokio::test]
async fn an_unknown_button_is_answered_without_a_message() {
    let mut bot = TestBot::new(handlers()).await;
    let ran = bot.press_data(CHAT, 1, &"vote:3").await;
    assert_eq!(ran.sent.len(), 1, "{ran:?}");
    assert_eq!(ran.sent[0].method, "answerCallbackQuery");
}

#[tokio::test]
async fn without_timers_a_reminder_and_the_booking_form_say_so_and_schedule_nothing() {
    let mut bot = TestBot::new(handlers()).await.without_timers();
    let no_timers =
        "Reminders and the booking form need timers, which this deployment does not have.";
    for command in ["/remind 10 tea", "/book"] {
        let ran = bot.text(ADA, command).await;
        assert_eq!(ran.outcome, Outcome::Done, "{command}: {ran:?}");
        assert_eq!(ran.texts(), [no_timers], "{command}");
    }
    // The refused form never started: the next text is echoed, not taken as the name.
    assert_eq!(bot.text(ADA, "Ada").await.texts(), ["You said: Ada"]);
    assert!(bot.timers(ADA).is_empty());
    assert_eq!(bot.dead_letters(), 0);
}
