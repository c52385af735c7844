//! The bot as the pipeline sees it: one [`Handler`], built once per process from a [`BotConfig`],
//! and the error it returns.

use std::sync::Arc;

use async_trait::async_trait;
use teloxide_core::types::{AllowedUpdate, Update};

use crate::config::Vars;
use crate::context::Context;
use crate::error::{BoxError, ErrorClass, PortError};
use crate::ids::BotId;
use crate::state::StateError;
use crate::telegram::{BotApi, Gone, TelegramError};

/// The bot: the one thing a bot author writes.
#[async_trait]
pub trait Handler: Send + Sync {
    /// Handles one update. Send through `ctx` so that retries never repeat a completed send.
    async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError>;

    /// The kinds of update the bot handles: what `tgq webhook set` asks Telegram for
    /// (`allowed_updates`). Every kind unless the bot says otherwise — including `chat_member`,
    /// `message_reaction` and `message_reaction_count`, which Telegram leaves out unless asked.
    fn update_kinds(&self) -> Vec<AllowedUpdate> {
        EVERY_UPDATE_KIND.to_vec()
    }
}

/// Every kind of update the Bot API delivers.
pub const EVERY_UPDATE_KIND: [AllowedUpdate; 23] = [
    AllowedUpdate::Message,
    AllowedUpdate::EditedMessage,
    AllowedUpdate::ChannelPost,
    AllowedUpdate::EditedChannelPost,
    AllowedUpdate::BusinessConnection,
    AllowedUpdate::BusinessMessage,
    AllowedUpdate::EditedBusinessMessage,
    AllowedUpdate::DeletedBusinessMessages,
    AllowedUpdate::MessageReaction,
    AllowedUpdate::MessageReactionCount,
    AllowedUpdate::InlineQuery,
    AllowedUpdate::ChosenInlineResult,
    AllowedUpdate::CallbackQuery,
    AllowedUpdate::ShippingQuery,
    AllowedUpdate::PreCheckoutQuery,
    AllowedUpdate::PurchasedPaidMedia,
    AllowedUpdate::Poll,
    AllowedUpdate::PollAnswer,
    AllowedUpdate::MyChatMember,
    AllowedUpdate::ChatMember,
    AllowedUpdate::ChatJoinRequest,
    AllowedUpdate::ChatBoost,
    AllowedUpdate::RemovedChatBoost,
];

/// What a bot is built from, once per process (per Lambda container): its id, the environment
/// (the bot's own settings live there, e.g. a backend URL), and the Bot API for calls that are not
/// an update's replies (setMyCommands at start, say).
#[derive(Clone)]
pub struct BotConfig {
    /// The bot's id (`TGQ_BOT_ID`).
    pub bot_id: BotId,
    /// The environment the process started with.
    pub vars: Vars,
    /// The Bot API, as the handler's sends reach it.
    pub api: Arc<dyn BotApi>,
}

/// Which handler a tgq binary runs (`TGQ_HANDLER`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandlerChoice {
    /// The bot in `bot/` (`TGQ_HANDLER` unset or `bot`).
    Bot,
    /// The built-in [`crate::echo::EchoBot`] (`TGQ_HANDLER=echo`), for smoke tests.
    Echo,
}

/// Why a handler run failed. Bot authors return it from [`Handler::handle`].
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// A Bot API call failed; its class follows Telegram's answer.
    #[error(transparent)]
    Telegram(#[from] TelegramError),
    /// A Bot API call's recipient is gone for good ([`TelegramError::recipient_gone`]): by default
    /// the update settles `DONE` as `recipient_gone` instead of being dead-lettered
    /// (`TGQ_DEAD_LETTER_GONE_RECIPIENTS`). A handler that writes to several chats can match it
    /// ([`HandlerError::recipient_gone`]) and go on with the others.
    #[error("the recipient is gone ({gone}): {error}")]
    RecipientGone {
        /// Why.
        gone: Gone,
        /// Telegram's answer.
        #[source]
        error: TelegramError,
    },
    /// The chat's state could not be read or written as the handler asked (a changed type, a value
    /// over the size limit): a mistake retrying cannot fix.
    #[error(transparent)]
    State(#[from] StateError),
    /// The store could not record an action (or refused it: see [`PortError`]).
    #[error("recording an outbound action failed")]
    Store(#[from] PortError),
    /// The bot's own backend failed in a way worth retrying.
    #[error("transient: {0}")]
    Transient(String),
    /// The bot decided the update can never succeed.
    #[error("permanent: {0}")]
    Permanent(String),
    /// The handler panicked; counted as a transient failure.
    #[error("handler panicked: {0}")]
    Panicked(String),
    /// The run reached the invocation's deadline less the margin and was cut off.
    #[error("the run was cut off at the invocation's deadline")]
    Deadline,
    /// Telegram's pacing would have the next send wait longer than the run may: the update goes
    /// back to the queue for that long, which costs it no attempt.
    #[error("Telegram's pacing holds the bot's sends for {} ms", .0.as_millis())]
    Paced(std::time::Duration),
}

impl HandlerError {
    /// A failure of the bot's own backend that is worth retrying.
    pub fn transient(reason: impl Into<String>) -> Self {
        HandlerError::Transient(reason.into())
    }

    /// A failure that retrying cannot fix.
    pub fn permanent(reason: impl Into<String>) -> Self {
        HandlerError::Permanent(reason.into())
    }

    /// Why the recipient of a call is gone, if that is what failed.
    pub fn recipient_gone(&self) -> Option<Gone> {
        match self {
            HandlerError::RecipientGone { gone, .. } => Some(*gone),
            _ => None,
        }
    }

    /// Whether the run stopped because another run took its lease over: not a failure of this
    /// update, and nothing more may be written or sent for it by this run.
    pub fn is_fenced(&self) -> bool {
        matches!(self, HandlerError::Store(PortError::Fenced { .. }))
    }

    /// Whether the run stopped because the store refused one of its writes for now — throttled,
    /// down, or set up wrong: the store's trouble, not the update's, so like a refused claim it
    /// spends no attempt.
    pub fn is_store_trouble(&self) -> bool {
        matches!(
            self,
            HandlerError::Store(PortError::Unavailable { .. } | PortError::Misconfigured { .. })
        )
    }

    /// Decides retryability: every class is settled here, nowhere else.
    pub fn class(&self) -> ErrorClass {
        match self {
            HandlerError::Telegram(e) => e.class(),
            // Dead-lettered as permanent only when TGQ_DEAD_LETTER_GONE_RECIPIENTS asks for it.
            HandlerError::RecipientGone { .. } | HandlerError::State(_) => ErrorClass::Permanent,
            // The record cannot hold what the run did: every retry would end the same way.
            HandlerError::Store(PortError::TooLarge { .. }) => ErrorClass::Permanent,
            // Any other store failure loses nothing if the run is retried; a misconfigured stack
            // is an operator's to fix, never a reason to give up on the update.
            HandlerError::Store(_) => ErrorClass::Transient,
            HandlerError::Transient(_) | HandlerError::Panicked(_) | HandlerError::Deadline => {
                ErrorClass::Transient
            }
            HandlerError::Permanent(_) => ErrorClass::Permanent,
            HandlerError::Paced(wait) => ErrorClass::RateLimited(*wait),
        }
    }
}

/// What builds one handler: a [`BotConfig`] in, the handler (or why it could not be built) out.
type Build = Arc<
    dyn Fn(BotConfig) -> futures::future::BoxFuture<'static, Result<Arc<dyn Handler>, BoxError>>
        + Send
        + Sync,
>;

/// The handlers one deployment can run, by name (docs/ARCHITECTURE.md §11): `bot/` lists its own
/// (`tgq_bot::handlers()`), and every registry names one of them for each bot, so bots with
/// different logic share a stack. The built-in `echo` is always there.
#[derive(Clone)]
pub struct HandlerRegistry {
    handlers: Vec<(String, Build)>,
}

/// The name of the built-in [`crate::echo::EchoBot`] in every [`HandlerRegistry`].
pub const ECHO_HANDLER: &str = "echo";

/// Why a handler could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// No handler by that name.
    #[error("no handler is named {name:?} (known: {})", .known.join(", "))]
    Unknown {
        /// The name asked for.
        name: String,
        /// The names there are.
        known: Vec<String>,
    },
    /// The handler's own `build` failed.
    #[error("the handler {name:?} could not be built")]
    Failed {
        /// The handler.
        name: String,
        /// Why.
        #[source]
        error: BoxError,
    },
}

impl Default for HandlerRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl HandlerRegistry {
    /// A registry holding the built-in `echo`.
    pub fn new() -> Self {
        Self {
            handlers: Vec::new(),
        }
        .with(ECHO_HANDLER, |_config| async { Ok(crate::echo::EchoBot) })
    }

    /// Adds (or replaces) the handler `name`, built by `build` once per bot and process. The first
    /// one added besides `echo` is the bot's own: the one `TGQ_HANDLER=bot` runs.
    pub fn with<F, Fut, H>(mut self, name: &str, build: F) -> Self
    where
        F: Fn(BotConfig) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<H, BoxError>> + Send + 'static,
        H: Handler + 'static,
    {
        let build: Build = Arc::new(move |config| {
            let built = build(config);
            Box::pin(async move { Ok(Arc::new(built.await?) as Arc<dyn Handler>) })
        });
        match self.handlers.iter_mut().find(|(known, _)| known == name) {
            Some(slot) => slot.1 = build,
            None => self.handlers.push((name.to_owned(), build)),
        }
        self
    }

    /// Every handler's name, the bot's own first and `echo` last: what `tgq bots add` checks a
    /// bot's handler against.
    pub fn names(&self) -> Vec<&str> {
        let (echo, own): (Vec<&str>, Vec<&str>) = self
            .handlers
            .iter()
            .map(|(name, _)| name.as_str())
            .partition(|name| *name == ECHO_HANDLER);
        own.into_iter().chain(echo).collect()
    }

    /// Whether a handler is named `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.handlers.iter().any(|(known, _)| known == name)
    }

    /// The name `TGQ_HANDLER` picks: the bot's own handler for `bot` (`echo` when `bot/` lists
    /// none), `echo` for `echo`.
    pub fn name_of(&self, choice: HandlerChoice) -> &str {
        match choice {
            HandlerChoice::Echo => ECHO_HANDLER,
            HandlerChoice::Bot => self.names().first().copied().unwrap_or(ECHO_HANDLER),
        }
    }

    /// Builds the handler `name` for one bot.
    pub async fn build(
        &self,
        name: &str,
        config: BotConfig,
    ) -> Result<Arc<dyn Handler>, BuildError> {
        let Some((_, build)) = self.handlers.iter().find(|(known, _)| known == name) else {
            return Err(BuildError::Unknown {
                name: name.to_owned(),
                known: self.names().into_iter().map(str::to_owned).collect(),
            });
        };
        build(config).await.map_err(|error| BuildError::Failed {
            name: name.to_owned(),
            error,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::HandlerError;

    #[test]
    fn a_pacing_wait_under_a_second_is_told_in_milliseconds() {
        // Whole seconds told every wait the worker gives back (250 ms to 2 s) as "0s" or "1s".
        let paced = HandlerError::Paced(Duration::from_millis(1884));
        assert_eq!(
            paced.to_string(),
            "Telegram's pacing holds the bot's sends for 1884 ms"
        );
    }
}
