//! The example bot — the one place a bot author edits. It answers `/start` with a button, `/help` with
//! what it can do, echoes any other text, and answers button presses.
//!
//! [`build`] is the one seam: the worker Lambda and `tgq local` call it once per process and run
//! what it returns. Rename the bot, give it state or clients, change every word: nothing outside
//! this crate names its type.
//!
//! Every call to Telegram goes through `ctx.send(..)` with a teloxide-core payload: tgq records it, so
//! when an update is retried, replies that were already sent are not sent twice.

use async_trait::async_trait;
use teloxide_core::payloads::{
    AnswerCallbackQuery, AnswerCallbackQuerySetters, SendMessage, SendMessageSetters,
};
use teloxide_core::types::{
    CallbackQuery, InlineKeyboardButton, InlineKeyboardMarkup, Message, Update, UpdateKind,
};
use tgq_core::error::BoxError;
use tgq_core::{BotConfig, Context, Handler, HandlerError};

/// The callback data carried by the `/start` button.
pub const BUTTON_DATA: &str = "pressed:1";

/// Builds the bot, once per process: read the bot's own settings from `config.vars`, open its
/// clients, and return the handler that runs every update.
pub async fn build(config: &BotConfig) -> Result<impl Handler, BoxError> {
    let _ = config;
    Ok(ExampleBot)
}

/// The example bot.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExampleBot;

#[async_trait]
impl Handler for ExampleBot {
    async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        match update.kind {
            UpdateKind::Message(message) => on_message(&message, ctx).await,
            UpdateKind::CallbackQuery(query) => on_button(&query, ctx).await,
            // Other kinds are acknowledged without a reply.
            _ => Ok(()),
        }
    }
}

async fn on_message(message: &Message, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
    let Some(text) = message.text() else {
        return Ok(());
    };
    let chat = message.chat.id;
    let reply = match command_of(text) {
        Some("start") => {
            let button = InlineKeyboardButton::callback("Press me", BUTTON_DATA);
            SendMessage::new(
                chat,
                "Hello! I am a tgq example bot. Send me text and I will echo it.",
            )
            .reply_markup(InlineKeyboardMarkup::new([[button]]))
        }
        Some("help") => SendMessage::new(
            chat,
            "/start – greeting with a button\n/help – this text\nanything else – echoed back",
        ),
        _ => SendMessage::new(chat, format!("You said: {text}")),
    };
    ctx.send(reply).await?;
    Ok(())
}

async fn on_button(query: &CallbackQuery, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
    ctx.send(AnswerCallbackQuery::new(query.id.clone()).text("Pressed!"))
        .await?;
    if let Some(message) = &query.message {
        let data = query.data.as_deref().unwrap_or("");
        ctx.send(SendMessage::new(
            message.chat().id,
            format!("Button pressed ({data})"),
        ))
        .await?;
    }
    Ok(())
}

/// The command of a `/command` or `/command@botname` text, without the slash.
fn command_of(text: &str) -> Option<&str> {
    let word = text.strip_prefix('/')?.split_whitespace().next()?;
    Some(word.split('@').next().unwrap_or(word))
}

#[cfg(test)]
mod tests {
    use super::command_of;

    #[test]
    fn commands_are_read_with_or_without_the_bot_name() {
        assert_eq!(command_of("/start"), Some("start"));
        assert_eq!(command_of("/help@tgq_demo_bot extra"), Some("help"));
        assert_eq!(command_of("hello /start"), None);
    }
}
