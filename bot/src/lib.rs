//! The example bot — the one place a bot author edits. It greets `/start` with a button that counts
//! its presses, lists its commands on `/help`, shouts `/shout text` back in capitals, rolls a die on
//! `/roll` keeping the chat's score, and echoes any other text.
//!
//! [`build`] is the one seam: the worker Lambda and `tgq local` call it once per process (and per
//! bot, when a stack hosts several) and run what it returns; [`handlers`] names it, so that a
//! stack's bot registry can pick it. Rename the bot, give it state or clients, change every word:
//! nothing outside this crate names its type, and the test suite asserts the built-in echo bot's
//! replies, not these.
//!
//! Every call to Telegram goes through `ctx.send(..)` with a teloxide-core payload: tgq records it, so
//! when an update is retried, replies that were already sent are not sent twice. Anything else with
//! an effect or a result worth keeping (here the die roll) runs in `ctx.step(..)`, recorded the same
//! way; and what the bot remembers per chat is its state (`ctx.state`, `ctx.set_state`), written
//! with the update's completion, exactly once.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use teloxide::utils::command::BotCommands;
use teloxide_core::payloads::{
    AnswerCallbackQuery, AnswerCallbackQuerySetters, SendMessage, SendMessageSetters,
};
use teloxide_core::types::{
    CallbackQuery, InlineKeyboardButton, InlineKeyboardMarkup, Message, Update, UpdateKind,
};
use tgq_core::error::BoxError;
use tgq_core::handlers::HandlerRegistry;
use tgq_core::state::ChatState;
use tgq_core::{BotConfig, Context, Handler, HandlerError};
use tgq_router::{ParseError, Route, Router};

/// The bot's own setting: its username, so that `/help@that_name` in a group is answered and
/// `/help@another_bot` is not. Optional: without it only bare commands are.
pub const USERNAME_VAR: &str = "BOT_USERNAME";

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
}

/// The handlers this crate offers, by name (docs/ARCHITECTURE.md §11): `example` is the bot
/// below, the one `TGQ_HANDLER=bot` runs; `echo`, tgq's own, is always there. A stack hosting
/// several bots names one of these for each of its bots (`tgq bots add --handler NAME` checks the
/// name here): add a line per bot with other logic.
pub fn handlers() -> HandlerRegistry {
    HandlerRegistry::new().with("example", |config| async move { build(&config).await })
}

/// Builds the bot, once per process and bot: read the bot's own settings from `config.vars`, open
/// its clients, and return the handler that runs every update.
pub async fn build(config: &BotConfig) -> Result<impl Handler, BoxError> {
    let mut router = Router::new().button("pressed:", Button::Pressed);
    if let Some(username) = config.vars.get(USERNAME_VAR) {
        router = router.username(username);
    }
    Ok(ExampleBot { router })
}

/// The example bot.
#[derive(Debug)]
pub struct ExampleBot {
    router: Router<Command, Button>,
}

#[async_trait]
impl Handler for ExampleBot {
    async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        match self.router.route(&update) {
            Route::Command(Command::Start, message) => start(message, ctx).await,
            Route::Command(Command::Help, message) => {
                reply(message, Command::descriptions().to_string(), ctx).await
            }
            Route::Command(Command::Shout(text), message) if text.trim().is_empty() => {
                reply(message, "Shout what? Try /shout hello".into(), ctx).await
            }
            Route::Command(Command::Shout(text), message) => {
                reply(message, text.to_uppercase(), ctx).await
            }
            Route::Command(Command::Roll, message) => roll(message, ctx).await,
            Route::BadCommand(error, message) => {
                reply(message, bad_command_reply(&error), ctx).await
            }
            Route::Button(Button::Pressed(presses), query) => pressed(presses, query, ctx).await,
            Route::Text(text, message) => reply(message, format!("You said: {text}"), ctx).await,
            // A button this bot no longer knows: answer it, so the user's client stops waiting.
            Route::Other(UpdateKind::CallbackQuery(query)) => {
                ctx.send(AnswerCallbackQuery::new(query.id.clone())).await?;
                Ok(())
            }
            // Commands for other bots in a group, and every other kind of update: no reply.
            Route::ForAnotherBot(_) | Route::Other(_) => Ok(()),
        }
    }
}

async fn reply(message: &Message, text: String, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
    ctx.send(SendMessage::new(message.chat.id, text)).await?;
    Ok(())
}

async fn start(message: &Message, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
    let greeting = SendMessage::new(
        message.chat.id,
        "Hello! I am a tgq example bot. Send me text and I will echo it; /help lists my commands.",
    )
    .reply_markup(counter(0));
    ctx.send(greeting).await?;
    Ok(())
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
    reply(message, text, ctx).await
}

/// The counting button, after `presses` presses.
fn counter(presses: u32) -> InlineKeyboardMarkup {
    let next = presses.saturating_add(1);
    InlineKeyboardMarkup::new([[InlineKeyboardButton::callback(
        "Press me",
        format!("pressed:{next}"),
    )]])
}

async fn pressed(
    presses: u32,
    query: &CallbackQuery,
    ctx: &mut Context<'_>,
) -> Result<(), HandlerError> {
    ctx.send(AnswerCallbackQuery::new(query.id.clone()).text("Pressed!"))
        .await?;
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
    //! The example bot's replies, run through tgq's worker on in-memory adapters.

    use std::sync::Arc;

    use serde_json::{json, Value};
    use tgq_core::config::Vars;
    use tgq_core::ids::{BotId, GroupKey, RecordKey, StateKey, UpdateId};
    use tgq_core::record::{ActionResult, ActionState};
    use tgq_core::telegram::TelegramError;
    use tgq_core::worker::RecordOutcome;
    use tgq_memory::{Harness, RecordedCall, RecordingBotApi};

    use super::*;

    const CHAT: i64 = 4242;

    /// The bot built with `vars`, behind a worker on in-memory adapters.
    async fn harness(vars: &[(&str, &str)]) -> Harness {
        let api = Arc::new(RecordingBotApi::new());
        let config = BotConfig {
            bot_id: BotId::new("example").unwrap(),
            vars: Vars::from_pairs(vars.iter().copied()),
            api: api.clone(),
        };
        let bot = build(&config).await.unwrap();
        Harness::new(config.bot_id, Arc::new(bot), api)
    }

    /// Builds the bot with `vars` and runs `updates` through a worker, in one batch; returns the
    /// Bot API calls it made.
    async fn run(vars: &[(&str, &str)], updates: &[Value]) -> Vec<RecordedCall> {
        let harness = harness(vars).await;
        let report = harness.run(updates).await;
        for (_, outcome) in &report.outcomes {
            assert!(matches!(outcome, RecordOutcome::Done(_)), "{outcome:?}");
        }
        harness.api.calls()
    }

    /// The chat's score as the store keeps it.
    fn score(harness: &Harness) -> Option<Score> {
        let key = StateKey::new(
            BotId::new("example").unwrap(),
            GroupKey::new(CHAT.to_string()),
        );
        let stored = harness.store.state(&key)?;
        assert_eq!(stored.format, Score::FORMAT);
        Some(serde_json::from_str(&stored.json).unwrap())
    }

    /// The number in "You rolled N."
    fn rolled(text: &str) -> u32 {
        let rest = text.strip_prefix("You rolled ").expect(text);
        rest[..1].parse().unwrap()
    }

    fn text(update_id: i64, text: &str) -> Value {
        json!({
            "update_id": update_id,
            "message": {
                "message_id": update_id, "date": 1_767_607_200, "text": text,
                "chat": {"id": CHAT, "type": "group", "title": "Friends"},
                "from": {"id": 7, "is_bot": false, "first_name": "Ada"},
            }
        })
    }

    fn press(update_id: i64, data: &str) -> Value {
        json!({
            "update_id": update_id,
            "callback_query": {
                "id": format!("q{update_id}"), "chat_instance": "1", "data": data,
                "from": {"id": 7, "is_bot": false, "first_name": "Ada"},
                "message": {
                    "message_id": 1, "date": 1_767_607_200, "text": "Hello!",
                    "chat": {"id": CHAT, "type": "group", "title": "Friends"},
                },
            }
        })
    }

    fn texts(calls: &[RecordedCall]) -> Vec<&str> {
        calls
            .iter()
            .filter(|call| call.method == "sendMessage")
            .map(|call| call.params["text"].as_str().unwrap())
            .collect()
    }

    #[tokio::test]
    async fn start_greets_with_a_button_that_counts_its_presses() {
        let calls = run(
            &[],
            &[
                text(1, "/start"),
                press(2, "pressed:1"),
                press(3, "pressed:2"),
            ],
        )
        .await;
        let buttons: Vec<&Value> = calls
            .iter()
            .filter(|call| call.method == "sendMessage")
            .map(|call| &call.params["reply_markup"]["inline_keyboard"][0][0]["callback_data"])
            .collect();
        assert_eq!(buttons, ["pressed:1", "pressed:2", "pressed:3"]);
        let said = texts(&calls);
        assert!(said[0].starts_with("Hello!"), "{said:?}");
        assert_eq!(
            said[1..],
            ["Button pressed once.", "Button pressed 2 times."]
        );
        let answered: Vec<&Value> = calls
            .iter()
            .filter(|call| call.method == "answerCallbackQuery")
            .map(|call| &call.params["callback_query_id"])
            .collect();
        assert_eq!(answered, ["q2", "q3"]);
    }

    #[tokio::test]
    async fn help_lists_the_commands_and_shout_shouts() {
        let calls = run(
            &[],
            &[
                text(1, "/help"),
                text(2, "/shout hello there"),
                text(3, "/shout"),
            ],
        )
        .await;
        let said = texts(&calls);
        assert!(
            said[0].contains("/start") && said[0].contains("/shout"),
            "{said:?}"
        );
        assert_eq!(said[1..], ["HELLO THERE", "Shout what? Try /shout hello"]);
    }

    #[tokio::test]
    async fn text_is_echoed_and_unknown_commands_are_named() {
        let calls = run(&[], &[text(1, "hello tgq"), text(2, "/dance")]).await;
        assert_eq!(
            texts(&calls),
            [
                "You said: hello tgq",
                "I do not know /dance. /help lists my commands."
            ]
        );
    }

    #[tokio::test]
    async fn commands_addressed_by_name_are_answered_only_with_the_bots_username() {
        let addressed = [
            text(1, "/shout@example_bot hi"),
            text(2, "/shout@other_bot hi"),
        ];
        let calls = run(&[(USERNAME_VAR, "example_bot")], &addressed).await;
        assert_eq!(texts(&calls), ["HI"]);
        let calls = run(&[], &addressed).await;
        assert!(calls.is_empty(), "{calls:?}");
    }

    #[tokio::test]
    async fn roll_rolls_a_die_and_the_chat_keeps_the_score() {
        let harness = harness(&[]).await;
        let report = harness
            .run(&[text(1, "/roll"), text(2, "/roll"), text(3, "/roll")])
            .await;
        assert!(report.failed_message_ids().is_empty(), "{report:?}");
        let calls = harness.api.calls();
        let said = texts(&calls);
        let numbers: Vec<u32> = said.iter().map(|t| rolled(t)).collect();
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
        assert_eq!(score(&harness), Some(Score { rolls: 3, total }));
    }

    #[tokio::test]
    async fn a_retried_roll_shows_the_same_number_and_counts_once() {
        let harness = harness(&[]).await;
        harness.api.fail_next([TelegramError::Api {
            code: 502,
            description: "Bad Gateway".into(),
        }]);
        let first = harness.run(&[text(1, "/roll")]).await;
        assert!(matches!(first.outcomes[0].1, RecordOutcome::Retrying(..)));
        assert_eq!(score(&harness), None, "the failed run counted nothing");
        let retry = harness.run(&[text(1, "/roll")]).await;
        assert!(matches!(retry.outcomes[0].1, RecordOutcome::Done(_)));

        let key = RecordKey::new(BotId::new("example").unwrap(), UpdateId(1));
        let recorded = harness.store.record(&key).unwrap().actions[&1]
            .state
            .clone();
        let ActionState::Succeeded(ActionResult::Json { json }) = recorded else {
            panic!("the roll is recorded: {recorded:?}")
        };
        let calls = harness.api.calls();
        let said = texts(&calls);
        assert_eq!(said.len(), 1, "{said:?}");
        assert_eq!(
            rolled(said[0]).to_string(),
            json,
            "the number the first run rolled"
        );
        assert_eq!(
            score(&harness),
            Some(Score {
                rolls: 1,
                total: rolled(said[0])
            })
        );
    }

    #[tokio::test]
    async fn an_unknown_button_is_answered_without_a_message() {
        let calls = run(&[], &[press(1, "vote:3")]).await;
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert_eq!(calls[0].method, "answerCallbackQuery");
    }
}
