//! The example bot — the one place a bot author edits. It greets `/start` with a button that counts
//! its presses, lists its commands on `/help`, shouts `/shout text` back in capitals, rolls a die on
//! `/roll` keeping the chat's score, offers `@bot text` in capitals as an inline result, and echoes
//! any other text.
//!
//! [`build`] is the one seam: the worker Lambda and `tgq local` call it once per process (and per
//! bot, when a stack hosts several) and run what it returns; [`handlers`] names it, so that a
//! stack's bot registry can pick it. Rename the bot, give it state or clients, change every word:
//! nothing outside this crate names its type, and the test suite asserts the built-in echo bot's
//! replies, not these.
//!
//! Every call to Telegram goes through `ctx.send(..)` with a teloxide-core payload, or one of its
//! shorthands (`ctx.reply`, `ctx.reply_with`, `ctx.answer`, `ctx.edit`): tgq records it, so
//! when an update is retried, replies that were already sent are not sent twice. Anything else with
//! an effect or a result worth keeping (here the die roll) runs in `ctx.step(..)`, recorded the same
//! way; and what the bot remembers per chat is its state (`ctx.state`, `ctx.set_state`), written
//! with the update's completion, exactly once.

use serde::{Deserialize, Serialize};
use tgq::prelude::*;
use tgq::ParseError;

pub mod booking;

/// The bot's own setting: its username, so that `/help@that_name` in a group is answered and
/// `/help@another_bot` is not. Optional: without it only bare commands are.
pub const USERNAME_VAR: &str = "BOT_USERNAME";
/// The one chat whose `/announce` is obeyed (a chat id); unset, nobody's is.
pub const ANNOUNCER_VAR: &str = "ANNOUNCER_CHAT";

// The commands, as users type them. The derive shows the doc comments below to the user: `/help`
// prints them, and `Command::bot_commands()` is what `setMyCommands` wants.

/// I echo what you send. My commands:
#[derive(BotCommands, Clone, Debug, PartialEq)]
#[command(rename_rule = "lowercase")]
pub enum Command {
    /// A greeting with a button.
    Start,
    /// This list.
    Help,
    /// Repeats the text after it in capitals.
    Shout(String),
    /// Rolls a die; the chat keeps the score.
    Roll,
    /// A booking form: a name, a date, a confirmation.
    Book,
    /// Leaves the booking form.
    Cancel,
    /// "/remind 10 tea": reminds you of tea in 10 minutes.
    Remind(String),
    /// "/announce text": sends the text to every chat that rolled (the announcer's chat only).
    Announce(String),
}

/// What the bot remembers per chat: its die rolls. tgq keeps it with the chat and writes it when
/// an update finishes, so a retried update never counts a roll twice. Change `FORMAT` whenever
/// old values would no longer read as this type.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// Rolls so far.
    pub rolls: u32,
    /// Their sum.
    pub total: u32,
}

impl ChatState for Score {
    const FORMAT: &'static str = "example.score/v1";
}

/// What the bot's buttons carry: `pressed:N`, the presses so far.
#[derive(Clone, Debug, PartialEq)]
pub enum Button {
    /// The counting button, pressed `N` times.
    Pressed(u32),
    /// A date of the booking form (`date:Today`).
    Date(String),
    /// The booking form's Yes or No (`confirm:true`).
    Confirm(bool),
}

/// The handlers this crate offers, by name (docs/design/fleet.md §2): `example` is the bot
/// below, the one `TGQ_HANDLER=bot` runs; `echo`, tgq's own, is always there. A stack hosting
/// several bots names one of these for each of its bots (`tgq bots add --handler NAME` checks the
/// name here): add a line per bot with other logic.
pub fn handlers() -> HandlerRegistry {
    HandlerRegistry::new().with("example", |config| async move { build(&config).await })
}

/// Builds the bot, once per process and bot: read the bot's own settings from `config.vars`, open
/// its clients, and return the handler that runs every update.
pub async fn build(config: &BotConfig) -> Result<impl Handler, BoxError> {
    let mut router = Router::new()
        .button("pressed:", Button::Pressed)
        .button("date:", Button::Date)
        .button("confirm:", Button::Confirm);
    if let Some(username) = config.vars.get(USERNAME_VAR) {
        router = router.username(username);
    }
    let announcer = config
        .vars
        .get(ANNOUNCER_VAR)
        .and_then(|chat| chat.trim().parse::<i64>().ok());
    Ok(ExampleBot { router, announcer })
}

/// The example bot.
#[derive(Debug)]
pub struct ExampleBot {
    router: Router<Command, Button>,
    /// The chat whose `/announce` is obeyed.
    announcer: Option<i64>,
}

#[async_trait]
impl Handler for ExampleBot {
    async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        match self.router.route(&update) {
            Route::Command(Command::Start, message) => {
                let greeting = "Hello! I am a tgq example bot. Send me text and I will echo it; \
                                /help lists my commands.";
                ctx.reply_with(message, greeting, counter(0)).await
            }
            Route::Command(Command::Help, message) => {
                ctx.reply(message, Command::descriptions().to_string())
                    .await
            }
            Route::Command(Command::Shout(text), message) if text.trim().is_empty() => {
                ctx.reply(message, "Shout what? Try /shout hello").await
            }
            Route::Command(Command::Shout(text), message) => {
                ctx.reply(message, text.to_uppercase()).await
            }
            Route::Command(Command::Roll, message) => roll(message, ctx).await,
            Route::Command(Command::Book, message) => booking::start(message, ctx).await,
            Route::Command(Command::Cancel, message) => booking::cancel(message, ctx).await,
            Route::Command(Command::Remind(what), message) => remind(&what, message, ctx).await,
            Route::Command(Command::Announce(text), message) => {
                announce(self.announcer, &text, message, ctx).await
            }
            Route::BadCommand(error, message) => {
                ctx.reply(message, bad_command_reply(&error)).await
            }
            Route::Button(Button::Pressed(presses), query) => pressed(presses, query, ctx).await,
            Route::Button(Button::Date(date), query) => booking::date(&date, query, ctx).await,
            Route::Button(Button::Confirm(yes), query) => booking::confirm(yes, query, ctx).await,
            Route::Text(text, message) => {
                if booking::text(text, message, ctx).await? {
                    return Ok(());
                }
                ctx.reply(message, format!("You said: {text}")).await
            }
            Route::InlineQuery(query) => shout_inline(query, ctx).await,
            // A button this bot no longer knows: answer it, so the user's client stops waiting.
            Route::Other(UpdateKind::CallbackQuery(query)) => ctx.answer(query, "").await,
            // Commands for other bots in a group, and every other kind of update: no reply.
            _ => Ok(()),
        }
    }

    /// A timer this bot scheduled, in the chat that scheduled it: a `/remind`, or the booking
    /// form's unanswered question.
    async fn timer(&self, fired: Fired, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        if fired.is_timeout_of::<booking::Booking>() {
            return booking::timed_out(&fired, ctx).await;
        }
        let what: String = fired.payload()?;
        let text = format!("Reminder: {what}");
        ctx.send(SendMessage::new(ChatId(fired.chat_id), text))
            .await
            .map(|_| ())
    }
}

/// `/remind N what`: a timer N minutes ahead (1 by default), kept with the chat, delivered once.
/// A second `/remind` replaces the first: the timer's key is the same.
async fn remind(what: &str, message: &Message, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
    let counted = what
        .trim()
        .split_once(' ')
        .and_then(|(n, rest)| Some((n.parse::<u32>().ok()?, rest.trim())));
    let (minutes, what) = counted.unwrap_or((1, what.trim()));
    if what.is_empty() {
        return ctx
            .reply(message, "Remind you of what? Try /remind 10 tea")
            .await;
    }
    let delay = std::time::Duration::from_secs(60 * u64::from(minutes));
    if let Err(error) = ctx.schedule("remind", delay, &what) {
        return without_timers(error, message, ctx).await;
    }
    ctx.reply(message, format!("I will remind you in {minutes} min."))
        .await
}

/// A broadcast to every chat that keeps a score: tgq sends it as a job of its own, once to each,
/// paced to leave the bot's replies room, and `tgq broadcast status N` follows it.
async fn announce(
    announcer: Option<i64>,
    text: &str,
    message: &Message,
    ctx: &mut Context<'_>,
) -> Result<(), HandlerError> {
    if announcer != Some(message.chat.id.0) {
        return ctx
            .reply(
                message,
                format!("Only the announcer's chat ({ANNOUNCER_VAR}) may announce."),
            )
            .await;
    }
    if text.trim().is_empty() {
        return ctx
            .reply(message, "Announce what? Try /announce We are back!")
            .await;
    }
    let everyone_who_rolled = Audience::States {
        filter: StateFilter {
            format: Some(Score::FORMAT.into()),
            equals: None,
        },
    };
    let id = ctx
        .broadcast(
            "announce",
            SendMessage::new(ChatId(0), text.trim()),
            everyone_who_rolled,
        )
        .await?;
    ctx.reply(message, format!("Broadcast {id} started.")).await
}

async fn roll(message: &Message, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
    // A step: rolled once and recorded, so a retry of this update shows the same number. A payment
    // or an LLM call goes in a step the same way.
    let rolled: u8 = ctx
        .step("roll", || async { Ok(rand::random_range(1..=6)) })
        .await?;
    let mut score = ctx.state::<Score>()?.unwrap_or_default();
    score.rolls += 1;
    score.total += u32::from(rolled);
    ctx.set_state(&score)?;
    let text = match score.rolls {
        1 => format!("You rolled {rolled}. The first roll in this chat."),
        n => format!(
            "You rolled {rolled}. {n} rolls in this chat, {} in all.",
            score.total
        ),
    };
    ctx.reply(message, text).await
}

/// The counting button, after `presses` presses: its data is `pressed:N`, by prefix.
fn counter(presses: u32) -> Keyboard {
    let next = presses.saturating_add(1);
    Keyboard::new().push(InlineKeyboardButton::callback(
        "Press me",
        format!("pressed:{next}"),
    ))
}

async fn pressed(
    presses: u32,
    query: &CallbackQuery,
    ctx: &mut Context<'_>,
) -> Result<(), HandlerError> {
    ctx.answer(query, "Pressed!").await?;
    // A button on an inline message has no chat to answer in.
    if let Some(message) = &query.message {
        let text = match presses {
            1 => "Button pressed once.".to_owned(),
            n => format!("Button pressed {n} times."),
        };
        let answer = SendMessage::new(message.chat().id, text).reply_markup(counter(presses));
        ctx.send(answer).await?;
    }
    Ok(())
}

/// `@this_bot some text` in any chat: offers the text in capitals, to send as a message.
async fn shout_inline(query: &InlineQuery, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
    use tgq::types::{
        InlineQueryResult, InlineQueryResultArticle, InputMessageContent, InputMessageContentText,
    };
    let shouted = query.query.to_uppercase();
    let results = match shouted.trim() {
        "" => Vec::new(),
        text => vec![InlineQueryResult::Article(InlineQueryResultArticle::new(
            "shout",
            format!("Shout {text}"),
            InputMessageContent::Text(InputMessageContentText::new(text)),
        ))],
    };
    ctx.send(AnswerInlineQuery::new(query.id.clone(), results))
        .await?;
    Ok(())
}

/// Says so when the deployment has no timers (tgq on AWS schedules none yet); any other refusal
/// fails the update as it is.
async fn without_timers(
    error: HandlerError,
    message: &Message,
    ctx: &mut Context<'_>,
) -> Result<(), HandlerError> {
    match error {
        HandlerError::Timer(tgq::TimerError::Unavailable(_)) => {
            let text =
                "Reminders and the booking form need timers, which this deployment does not have.";
            ctx.reply(message, text).await
        }
        other => Err(other),
    }
}

fn bad_command_reply(error: &ParseError) -> String {
    match error {
        ParseError::UnknownCommand(command) => {
            format!("I do not know {command}. /help lists my commands.")
        }
        other => format!("{other}. /help lists my commands."),
    }
}

#[cfg(test)]
mod tests {
    //! The example bot's replies, run through tgq's worker with the test kit.

    use tgq_test::{Call, Failure, Outcome, TestBot};

    use super::*;

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
        let texts = |bot: &TestBot| -> Vec<String> {
            bot.sent().into_iter().filter_map(|s| s.text).collect()
        };
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
}
