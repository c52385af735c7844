//! Another bot, with another name and other words: `bot_swap.rs` puts it in place of
//! `bot/src/lib.rs` in a copy of the workspace and checks that everything still builds. It uses only
//! the seam every bot has — `handlers`, `build`, `Handler`, `Context::send` — and none of the
//! example bot's items.

use async_trait::async_trait;
use teloxide_core::payloads::SendMessage;
use teloxide_core::types::{Update, UpdateKind};
use tgq_core::error::BoxError;
use tgq_core::handlers::HandlerRegistry;
use tgq_core::{BotConfig, Context, Handler, HandlerError};

/// The handlers this crate offers: the parrot, and tgq's echo.
pub fn handlers() -> HandlerRegistry {
    HandlerRegistry::new().with("parrot", |config| async move { build(&config).await })
}

/// Builds the parrot with its greeting (`PARROT_GREETING`, default "Squawk").
pub async fn build(config: &BotConfig) -> Result<impl Handler, BoxError> {
    let greeting = config.vars.get("PARROT_GREETING").unwrap_or("Squawk");
    Ok(Parrot {
        greeting: greeting.to_owned(),
    })
}

/// Repeats every text message after its greeting.
pub struct Parrot {
    greeting: String,
}

#[async_trait]
impl Handler for Parrot {
    async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        let UpdateKind::Message(message) = &update.kind else {
            return Ok(());
        };
        if let Some(text) = message.text() {
            let words = format!("{}! {text}", self.greeting);
            ctx.send(SendMessage::new(message.chat.id, words)).await?;
        }
        Ok(())
    }
}
