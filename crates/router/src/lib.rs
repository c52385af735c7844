//! Routes an update to what the bot does with it: a typed command (with its arguments, addressed to
//! this bot or to none), a button press (its data written by a [`Keyboard`] from a typed value, or
//! starting with a known prefix), a plain text, an inline query, a payment's queries, a member
//! change or join request, or any other update kind — the bot then `match`es the [`Route`], and the
//! compiler checks that every command has an arm. Filters on the chat or the text are match guards
//! (`Route::Text(text, message) if message.chat.is_private()`).
//!
//! Commands are an enum that derives teloxide's [`BotCommands`] (`#[derive(BotCommands)]`, from the
//! `teloxide` crate with its `macros` feature): the derive names the commands, parses their
//! arguments (`/roll 3 6` into `Roll(u8, u8)`) and lists them for `/help` and `setMyCommands`.
//! Only that derive is used; tgq's worker runs the bot.
//!
//! ```
//! use tgq_router::{BotCommands, Route, Router};
//!
//! #[derive(BotCommands, Debug, PartialEq)]
//! #[command(rename_rule = "lowercase")]
//! enum Command {
//!     /// Greets you.
//!     Start,
//!     /// Repeats the text after it.
//!     Say(String),
//! }
//!
//! #[derive(Debug, PartialEq)]
//! enum Button {
//!     Vote(u32),
//! }
//!
//! let router = Router::<Command, Button>::new()
//!     .username("my_bot")
//!     .button("vote:", Button::Vote);
//! # let update: teloxide_core::types::Update = serde_json::from_str(r#"{"update_id": 1,
//! #     "message": {"message_id": 1, "date": 0, "text": "/say@my_bot hi there",
//! #     "chat": {"id": 5, "type": "private", "first_name": "A"}}}"#).unwrap();
//! match router.route(&update) {
//!     Route::Command(Command::Say(text), _message) => assert_eq!(text, "hi there"),
//!     Route::Command(Command::Start, _message) => unreachable!(),
//!     Route::Button(Button::Vote(n), _query) => unreachable!("vote {n}"),
//!     // Everything else, the fallback: wrong arguments, plain text, other kinds of update.
//!     other => panic!("{other:?}"),
//! }
//! ```

use std::convert::Infallible;
use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;

use serde::de::DeserializeOwned;
use teloxide_core::types::{
    CallbackQuery, ChatJoinRequest, ChatMemberUpdated, ChosenInlineResult, InlineQuery, Message,
    PreCheckoutQuery, ShippingQuery, Update, UpdateKind,
};

pub use teloxide::utils::command::{BotCommands, ParseError};

mod keyboard;
pub use keyboard::{Keyboard, KeyboardError, MAX_BUTTON_DATA_BYTES};

/// What an update is for the bot, borrowed from the update.
#[derive(Debug)]
pub enum Route<'u, C, B> {
    /// A command of `C`, addressed to this bot or to no bot in particular, with its arguments
    /// parsed.
    Command(C, &'u Message),
    /// A text starting with `/`, addressed to this bot or to none, that `C` does not accept: an
    /// unknown command, or arguments that do not parse. Worth an answer that says what went wrong.
    BadCommand(ParseError, &'u Message),
    /// A command addressed to another bot (`/start@other_bot`) — or to any `@name` when the router
    /// does not know this bot's username. Usually ignored.
    ForAnotherBot(&'u Message),
    /// A button press whose data starts with one of the router's prefixes and whose rest parsed.
    /// Its query still wants an `answerCallbackQuery`.
    Button(B, &'u CallbackQuery),
    /// A new text message that is not a command.
    Text(&'u str, &'u Message),
    /// An inline query (`@this_bot text` in any chat); answered with `AnswerInlineQuery`.
    InlineQuery(&'u InlineQuery),
    /// An inline result a user chose (needs inline feedback turned on with @BotFather).
    ChosenInlineResult(&'u ChosenInlineResult),
    /// A payment about to be made: answer `AnswerPreCheckoutQuery` within 10 seconds.
    PreCheckout(&'u PreCheckoutQuery),
    /// A shipping address to price: answer `AnswerShippingQuery`.
    Shipping(&'u ShippingQuery),
    /// A member of a chat the bot administers joined, left, or changed rights (`chat_member`,
    /// delivered only when `allowed_updates` asks for it).
    MemberChanged(&'u ChatMemberUpdated),
    /// The bot itself was added, removed, blocked or promoted (`my_chat_member`).
    BotMemberChanged(&'u ChatMemberUpdated),
    /// Someone asked to join a chat whose invite link needs approval.
    JoinRequest(&'u ChatJoinRequest),
    /// Everything else, by kind: messages without text, edits, channel posts, button presses with
    /// data no prefix took, polls, reactions, boosts, …
    Other(&'u UpdateKind),
}

/// Routes updates for commands `C` and button data `B` (none by default).
///
/// Built once with the bot, then asked for every update; it only reads the update.
pub struct Router<C, B = Infallible> {
    username: Option<String>,
    buttons: Vec<ButtonPrefix<B>>,
    commands: PhantomData<fn() -> C>,
}

/// One button prefix and how the rest of its data becomes a `B`.
struct ButtonPrefix<B> {
    prefix: &'static str,
    parse: ParseRest<B>,
}

/// Parses what follows a button prefix; `None` when it does not parse.
type ParseRest<B> = Box<dyn Fn(&str) -> Option<B> + Send + Sync>;

impl<C: BotCommands, B> Default for Router<C, B> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: BotCommands, B> Router<C, B> {
    /// A router that does not know the bot's username (see [`Router::username`]) and takes no
    /// button data.
    pub fn new() -> Self {
        Self {
            username: None,
            buttons: Vec::new(),
            commands: PhantomData,
        }
    }

    /// The bot's username (with or without the `@`), so that `/start@this_bot` is a command and
    /// `/start@other_bot` is not. Without it every `@`-addressed command counts as another bot's:
    /// in a group with several bots, answering one meant for another is worse than staying silent.
    pub fn username(mut self, username: impl Into<String>) -> Self {
        let username = username.into();
        let username = username.trim_start_matches('@');
        self.username = (!username.is_empty()).then(|| username.to_owned());
        self
    }

    /// Button data that starts with `prefix` becomes `make(rest)` when the rest parses as a `T`
    /// (`.button("vote:", Button::Vote)` turns `vote:3` into `Button::Vote(3)`). Prefixes are tried
    /// in the order they were added; the first whose rest parses wins.
    pub fn button<T>(mut self, prefix: &'static str, make: fn(T) -> B) -> Self
    where
        T: FromStr + 'static,
        B: 'static,
    {
        self.buttons.push(ButtonPrefix {
            prefix,
            parse: Box::new(move |rest| rest.parse().ok().map(make)),
        });
        self
    }

    /// Button data a [`Keyboard`] wrote becomes the `B` it was written from: the router parses
    /// what the builder serialized, so a press routes as `Route::Button(B, query)` with no prefix
    /// to keep in step. Tried after the prefixes of [`Router::button`].
    pub fn keyboard_buttons(mut self) -> Self
    where
        B: DeserializeOwned + 'static,
    {
        self.buttons.push(ButtonPrefix {
            prefix: "",
            parse: Box::new(keyboard::decode),
        });
        self
    }

    /// What `update` is for the bot.
    pub fn route<'u>(&self, update: &'u Update) -> Route<'u, C, B> {
        match &update.kind {
            UpdateKind::Message(message) => self.message(message, &update.kind),
            UpdateKind::CallbackQuery(query) => match self.button_of(query) {
                Some(button) => Route::Button(button, query),
                None => Route::Other(&update.kind),
            },
            UpdateKind::InlineQuery(query) => Route::InlineQuery(query),
            UpdateKind::ChosenInlineResult(chosen) => Route::ChosenInlineResult(chosen),
            UpdateKind::PreCheckoutQuery(query) => Route::PreCheckout(query),
            UpdateKind::ShippingQuery(query) => Route::Shipping(query),
            UpdateKind::ChatMember(change) => Route::MemberChanged(change),
            UpdateKind::MyChatMember(change) => Route::BotMemberChanged(change),
            UpdateKind::ChatJoinRequest(request) => Route::JoinRequest(request),
            kind => Route::Other(kind),
        }
    }

    fn message<'u>(&self, message: &'u Message, kind: &'u UpdateKind) -> Route<'u, C, B> {
        let Some(text) = message.text() else {
            return Route::Other(kind);
        };
        // Telegram's commands start with '/'; anything else is text, even with an `@` in its first
        // word (an e-mail address is not a command for another bot).
        if !text.starts_with('/') {
            return Route::Text(text, message);
        }
        match C::parse(text, self.username.as_deref().unwrap_or("")) {
            Ok(command) => Route::Command(command, message),
            Err(ParseError::WrongBotName(_)) => Route::ForAnotherBot(message),
            Err(error) => Route::BadCommand(error, message),
        }
    }

    fn button_of(&self, query: &CallbackQuery) -> Option<B> {
        let data = query.data.as_deref()?;
        self.buttons.iter().find_map(|button| {
            let rest = data.strip_prefix(button.prefix)?;
            (button.parse)(rest)
        })
    }
}

impl<C, B> fmt::Debug for Router<C, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefixes: Vec<&str> = self.buttons.iter().map(|b| b.prefix).collect();
        f.debug_struct("Router")
            .field("username", &self.username)
            .field("button_prefixes", &prefixes)
            .finish()
    }
}
