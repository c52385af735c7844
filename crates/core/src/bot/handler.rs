//! The bot as the pipeline sees it: one [`Handler`], built once per process from a [`BotConfig`],
//! and the error it returns. The handlers a deployment can run, by name, are in
//! [`crate::handlers`].

use std::sync::Arc;

use async_trait::async_trait;
use teloxide_core::types::{AllowedUpdate, Update};

pub use crate::config::HandlerChoice;
use crate::config::Vars;
use crate::context::Context;
pub use crate::failure::HandlerError;
use crate::ids::BotId;
use crate::telegram::BotApi;
use crate::timer::Fired;

/// The bot: the one thing a bot author writes.
#[async_trait]
pub trait Handler: Send + Sync {
    /// Handles one update. Send through `ctx` so that retries never repeat a completed send.
    async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError>;

    /// Handles a timer the bot scheduled ([`Context::schedule`]) or a flow's timeout
    /// ([`Context::wait`]), in the chat that scheduled it. A bot that schedules timers overrides
    /// this; by default a timer is refused, so one that no code takes ends as a dead letter that
    /// says so instead of vanishing.
    async fn timer(&self, fired: Fired, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        let _ = ctx;
        Err(HandlerError::permanent(format!(
            "timer {:?} fired, but the bot's Handler does not implement timer()",
            fired.key
        )))
    }

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
