//! The handlers one deployment can run, by name: the bot's own (`bot/`'s `handlers()`) and the
//! built-in [`crate::echo::EchoBot`]; each bot of a registry names one (docs/design/fleet.md §2).

use std::sync::Arc;

use crate::config::HandlerChoice;
use crate::error::BoxError;
use crate::handler::{BotConfig, Handler};

/// What builds one handler: a [`BotConfig`] in, the handler (or why it could not be built) out.
type Build = Arc<
    dyn Fn(BotConfig) -> futures::future::BoxFuture<'static, Result<Arc<dyn Handler>, BoxError>>
        + Send
        + Sync,
>;

/// The handlers one deployment can run, by name (docs/design/fleet.md §2): `bot/` lists its own
/// (`tgq_bot::handlers()`), and every registry names one of them for each bot, so bots with
/// different logic share a stack. The built-in `echo` is always there.
#[derive(Clone)]
pub struct HandlerRegistry {
    handlers: Vec<(String, Build)>,
}

/// The name of the built-in [`crate::echo::EchoBot`] in every [`HandlerRegistry`].
pub(crate) const ECHO_HANDLER: &str = "echo";

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

    /// Adds (or replaces) the handler `name`, one that needs neither settings nor clients: every
    /// bot that names it runs this same value. [`HandlerRegistry::with`] builds one per bot.
    pub fn with_handler(self, name: &str, handler: impl Handler + 'static) -> Self {
        let handler: Arc<dyn Handler> = Arc::new(handler);
        self.with_built(
            name,
            Arc::new(move |_config| {
                let handler = handler.clone();
                Box::pin(async move { Ok(handler) })
            }),
        )
    }

    /// Adds (or replaces) the handler `name`, built by `build` once per bot and process. The first
    /// one added besides `echo` is the bot's own: the one `TGQ_HANDLER=bot` runs.
    pub fn with<F, Fut, H>(self, name: &str, build: F) -> Self
    where
        F: Fn(BotConfig) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<H, BoxError>> + Send + 'static,
        H: Handler + 'static,
    {
        self.with_built(
            name,
            Arc::new(move |config| {
                let built = build(config);
                Box::pin(async move { Ok(Arc::new(built.await?) as Arc<dyn Handler>) })
            }),
        )
    }

    fn with_built(mut self, name: &str, build: Build) -> Self {
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
