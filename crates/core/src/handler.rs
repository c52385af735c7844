//! The bot as the pipeline sees it: one [`Handler`], built once per process from a [`BotConfig`].

use std::sync::Arc;

use async_trait::async_trait;
use teloxide_core::types::Update;

use crate::config::Vars;
use crate::context::Context;
use crate::error::HandlerError;
use crate::ids::BotId;
use crate::telegram::BotApi;

/// The bot: the one thing a bot author writes.
#[async_trait]
pub trait Handler: Send + Sync {
    /// Handles one update. Send through `ctx` so that retries never repeat a completed send.
    async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError>;
}

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
