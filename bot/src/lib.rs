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
