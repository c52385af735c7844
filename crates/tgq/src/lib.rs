//! Everything a bot on tgq uses, from one crate: `use tgq::prelude::*;`.
//!
//! A bot is a [`Handler`]: tgq's worker calls it once per update, in each chat's order, with a
//! [`Context`] through which every effect goes — Bot API calls (`ctx.send`, or the shorthands of
//! [`Replies`]), side effects outside Telegram (`ctx.step`) and the chat's state (`ctx.state`,
//! `ctx.set_state`). tgq records each of them, so an update that runs again after a crash or a
//! failure neither sends twice what was sent nor repeats a recorded step, and its state is written
//! once, when the update finishes (docs/design/worker.md §2).
//!
//! A crate hosting bots exports them by name in a [`HandlerRegistry`] (`pub fn handlers()`); the
//! worker Lambda and `tgq local` build the one a bot's settings name. The crate's binary is one
//! line, `fn main() -> ExitCode { tgq::main(my_bot::handlers) }` (`tgq new` writes it): with the
//! `command` feature it is the `tgq` command for those handlers (`cargo run -- local`; with `aws`
//! as well, the commands that act on AWS: `deploy`, `destroy`, `poll`, any `--stack` or
//! `--table`), and with the `lambda` feature, which `tgq deploy`'s build turns on, it is the
//! stack's webhook and worker functions, chosen by [`FUNCTION`] in its environment.
//!
//! ```
//! use tgq::prelude::*;
//!
//! #[derive(BotCommands, Clone)]
//! #[command(rename_rule = "lowercase")]
//! enum Command {
//!     /// Greets you.
//!     Start,
//! }
//!
//! struct Hello(Router<Command>);
//!
//! #[async_trait]
//! impl Handler for Hello {
//!     async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
//!         match self.0.route(&update) {
//!             Route::Command(Command::Start, message) => ctx.reply(message, "Hello!").await?,
//!             Route::Text(text, message) => ctx.reply(message, format!("You said: {text}")).await?,
//!             _ => return Ok(()),
//!         };
//!         Ok(())
//!     }
//! }
//!
//! pub fn handlers() -> HandlerRegistry {
//!     HandlerRegistry::new().with("hello", |_config| async { Ok(Hello(Router::new())) })
//! }
//! # let _ = handlers();
//! ```
//!
//! What a bot does not see here is the worker's: leases, queues, records and dead letters belong
//! to `tgq-core` and its adapters.

use teloxide_core::payloads::{
    AnswerCallbackQuery, AnswerCallbackQuerySetters, EditMessageText, EditMessageTextInline,
    EditMessageTextInlineSetters, EditMessageTextSetters, SendMessage, SendMessageSetters,
};
use teloxide_core::types::{CallbackQuery, Message};

pub use async_trait::async_trait;
pub use teloxide_core::{payloads, requests::Payload, types};
pub use tgq_core::broadcast::{Audience, BroadcastId, StateFilter};
pub use tgq_core::error::BoxError;
pub use tgq_core::flow::Flow;
pub use tgq_core::handlers::HandlerRegistry;
pub use tgq_core::payment::{Charge, Credit, Refund};
pub use tgq_core::state::{ChatState, StateError};
pub use tgq_core::telegram::TelegramError;
pub use tgq_core::timer::{
    Fired, TimerError, When, MAX_TIMERS_PER_CHAT, MAX_TIMER_DELAY, MAX_TIMER_KEY_BYTES,
    MAX_TIMER_PAYLOAD_BYTES,
};
pub use tgq_core::upload::{Upload, UploadError, MAX_DOWNLOAD_BYTES, MAX_UPLOAD_BYTES};
pub use tgq_core::{BotConfig, Context, Handler, HandlerError};
pub use tgq_router::{
    BotCommands, Keyboard, KeyboardError, ParseError, Route, Router, MAX_BUTTON_DATA_BYTES,
};

#[cfg(any(feature = "command", feature = "lambda"))]
mod entry;

#[cfg(any(feature = "command", feature = "lambda"))]
pub use entry::{main, FUNCTION};

/// The `teloxide` crate, for its `BotCommands` derive: the derive's code names `teloxide::…`,
/// which `use tgq::prelude::*` brings into scope, so a bot needs no `teloxide` dependency of its
/// own.
pub use teloxide;

/// The names a bot uses: `use tgq::prelude::*;`.
pub mod prelude {
    pub use crate::{
        async_trait, teloxide, Audience, BotCommands, BotConfig, BoxError, BroadcastId, ChatState,
        Context, Credit, Fired, Flow, Handler, HandlerError, HandlerRegistry, Keyboard, Replies,
        Route, Router, StateFilter, Upload,
    };
    pub use teloxide_core::payloads::setters::*;
    pub use teloxide_core::payloads::*;
    pub use teloxide_core::types::{
        CallbackQuery, Chat, ChatId, InlineKeyboardButton, InlineKeyboardMarkup, InlineQuery,
        InputFile, InputMedia, InputMediaAudio, InputMediaDocument, InputMediaPhoto,
        InputMediaVideo, MaybeInaccessibleMessage, Message, MessageId, ParseMode, ReplyMarkup,
        Update, UpdateKind, User, UserId,
    };
}

/// The calls most bots make, in one line each. Each is a `ctx.send` of the teloxide-core payload
/// it names, recorded like any other: use `ctx.send` for every other method and option, and for
/// the `Message` Telegram answers with.
#[async_trait]
pub trait Replies {
    /// Sends `text` to the chat `message` came from (`SendMessage`).
    async fn reply(
        &mut self,
        message: &Message,
        text: impl Into<String> + Send,
    ) -> Result<(), HandlerError>;

    /// Sends `text` with `keyboard` under it to the chat `message` came from. A keyboard with a
    /// button Telegram would refuse is refused here, naming the button.
    async fn reply_with(
        &mut self,
        message: &Message,
        text: impl Into<String> + Send,
        keyboard: Keyboard,
    ) -> Result<(), HandlerError>;

    /// Answers a button press, so the user's client stops waiting; a non-empty `text` shows as a
    /// notification (`AnswerCallbackQuery`).
    async fn answer(
        &mut self,
        query: &CallbackQuery,
        text: impl Into<String> + Send,
    ) -> Result<(), HandlerError>;

    /// Replaces the text and keyboard of the message whose button was pressed — in a chat, or sent
    /// inline through the bot (`EditMessageText`, `EditMessageTextInline`).
    async fn edit(
        &mut self,
        query: &CallbackQuery,
        text: impl Into<String> + Send,
        keyboard: Keyboard,
    ) -> Result<(), HandlerError>;
}

#[async_trait]
impl Replies for Context<'_> {
    async fn reply(
        &mut self,
        message: &Message,
        text: impl Into<String> + Send,
    ) -> Result<(), HandlerError> {
        self.send(SendMessage::new(message.chat.id, text)).await?;
        Ok(())
    }

    async fn reply_with(
        &mut self,
        message: &Message,
        text: impl Into<String> + Send,
        keyboard: Keyboard,
    ) -> Result<(), HandlerError> {
        let markup = checked(keyboard)?;
        self.send(SendMessage::new(message.chat.id, text).reply_markup(markup))
            .await?;
        Ok(())
    }

    async fn answer(
        &mut self,
        query: &CallbackQuery,
        text: impl Into<String> + Send,
    ) -> Result<(), HandlerError> {
        let text = text.into();
        let mut answer = AnswerCallbackQuery::new(query.id.clone());
        if !text.is_empty() {
            answer = answer.text(text);
        }
        self.send(answer).await?;
        Ok(())
    }

    async fn edit(
        &mut self,
        query: &CallbackQuery,
        text: impl Into<String> + Send,
        keyboard: Keyboard,
    ) -> Result<(), HandlerError> {
        let markup = checked(keyboard)?;
        match (&query.message, &query.inline_message_id) {
            (Some(message), _) => {
                let edit = EditMessageText::new(message.chat().id, message.id(), text);
                self.send(edit.reply_markup(markup)).await?;
            }
            (None, Some(inline)) => {
                let edit = EditMessageTextInline::new(inline.clone(), text);
                self.send(edit.reply_markup(markup)).await?;
            }
            (None, None) => {
                return Err(HandlerError::permanent(
                    "the button press names no message to edit",
                ))
            }
        }
        Ok(())
    }
}

/// The keyboard's markup, or the update's failure for good: a button Telegram would refuse is
/// refused again on every retry.
fn checked(keyboard: Keyboard) -> Result<types::InlineKeyboardMarkup, HandlerError> {
    keyboard
        .markup()
        .map_err(|e| HandlerError::permanent(e.to_string()))
}
