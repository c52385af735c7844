//! The worker's view of the bots it runs (docs/design/fleet.md §2): for the bot a record belongs
//! to, its own Bot API client (its token) and its own handler, or why it has none. The single bot
//! of the environment and the bots of the registry are looked up the same way.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;
use secrecy::{ExposeSecret as _, SecretString};
use tracing::warn;

use crate::config::Vars;
use crate::dead::DeadReason;
use crate::error::{error_chain, BoxError, PortError};
use crate::handler::{BotConfig, Handler};
use crate::handlers::{BuildError, HandlerRegistry};
use crate::ids::BotId;
use crate::registry::{BotEntry, Registry};
use crate::telegram::BotApi;

const CONNECT: &str = "connecting a registry bot to the Bot API";
const BUILD: &str = "building a registry bot's handler";

/// What runs one bot's updates: its Bot API client and its handler.
#[derive(Clone)]
pub struct BotRuntime {
    /// The Bot API, with the bot's own token (or local mode's outbox).
    pub api: Arc<dyn BotApi>,
    /// The bot's handler.
    pub handler: Arc<dyn Handler>,
}

/// What looking a bot up came to.
pub enum Lookup {
    /// The bot runs here.
    Found(Arc<BotRuntime>),
    /// The bot cannot run anywhere until an operator acts: its updates are dead-lettered with
    /// `reason`, whose words say why (never a token or a secret).
    Refused(DeadReason, String),
    /// The registry cannot be read, or the bot's handler or client cannot be built now: its
    /// updates back off without spending an attempt.
    Unavailable(PortError),
}

/// Finds the bot of a record.
#[async_trait]
pub trait BotDirectory: Send + Sync {
    /// The bot `bot`, as its records should run.
    async fn lookup(&self, bot: &BotId) -> Lookup;
}

/// One client and handler for every record, whatever its bot: the worker of the test suite, the
/// benchmarks and the drills.
pub struct OneBot(Arc<BotRuntime>);

impl OneBot {
    /// Every record runs `handler`, its sends going to `api`.
    pub fn new(api: Arc<dyn BotApi>, handler: Arc<dyn Handler>) -> Self {
        Self(Arc::new(BotRuntime { api, handler }))
    }
}

#[async_trait]
impl BotDirectory for OneBot {
    async fn lookup(&self, _bot: &BotId) -> Lookup {
        Lookup::Found(self.0.clone())
    }
}

/// Builds the Bot API client of a registry bot from its entry (its token; local mode's outbox
/// when it has none). An error says why without the token.
pub type Connect = Arc<dyn Fn(&BotEntry) -> Result<Arc<dyn BotApi>, BoxError> + Send + Sync>;

/// The bots of a deployment: the bot of the environment (`TGQ_BOT_ID`, its token and
/// `TGQ_HANDLER`), if any, and the bots of the registry, each built once per process with its own
/// client and handler and built again when its token or handler changes.
pub struct Fleet {
    env: Option<(BotId, Arc<BotRuntime>)>,
    registry: Option<RegistryBots>,
}

/// The registry's side of a [`Fleet`].
pub struct RegistryBots {
    registry: Arc<Registry>,
    handlers: HandlerRegistry,
    connect: Connect,
    vars: Vars,
    built: Mutex<HashMap<BotId, Built>>,
}

/// A registry bot as built, with what it was built from.
struct Built {
    token: Option<SecretString>,
    handler: String,
    runtime: Arc<BotRuntime>,
}

impl Built {
    fn is_for(&self, entry: &BotEntry) -> bool {
        let token = |t: &Option<SecretString>| t.as_ref().map(|t| t.expose_secret().to_owned());
        self.handler == entry.handler && token(&self.token) == token(&entry.token)
    }
}

impl RegistryBots {
    /// The bots of `registry`, their handlers from `handlers` (given `vars` as their settings),
    /// their clients from `connect`.
    pub fn new(
        registry: Arc<Registry>,
        handlers: HandlerRegistry,
        connect: Connect,
        vars: Vars,
    ) -> Self {
        Self {
            registry,
            handlers,
            connect,
            vars,
            built: Mutex::new(HashMap::new()),
        }
    }

    async fn lookup(&self, bot: &BotId) -> Lookup {
        let entry = match self.registry.find(bot).await {
            Ok(Some(entry)) => entry,
            Ok(None) => {
                return Lookup::Refused(
                    DeadReason::UnknownBot,
                    format!("no bot {bot} in the environment or the bot registry"),
                )
            }
            Err(error) => return Lookup::Unavailable(error),
        };
        if let Some(known) = self
            .built
            .lock()
            .get(bot)
            .filter(|known| known.is_for(&entry))
        {
            return Lookup::Found(known.runtime.clone());
        }
        // Built without the lock held: a bot whose handler takes long to build (it connects to
        // its backend, say) must not hold back the lookups of the other bots. Two batches of a
        // new bot may build it twice, once per process and change; the last one is kept.
        match self.build(&entry).await {
            Ok(runtime) => {
                let runtime = Arc::new(runtime);
                self.built.lock().insert(
                    bot.clone(),
                    Built {
                        token: entry.token.clone(),
                        handler: entry.handler.clone(),
                        runtime: runtime.clone(),
                    },
                );
                Lookup::Found(runtime)
            }
            Err(lookup) => lookup,
        }
    }

    async fn build(&self, entry: &BotEntry) -> Result<BotRuntime, Lookup> {
        let api = (self.connect)(entry).map_err(|error| {
            let why = format!("bot {}: {}", entry.id, error_chain(&*error));
            Lookup::Unavailable(PortError::misconfigured(CONNECT, why))
        })?;
        let config = BotConfig {
            bot_id: entry.id.clone(),
            vars: self.vars.clone(),
            api: api.clone(),
        };
        match self.handlers.build(&entry.handler, config).await {
            Ok(handler) => Ok(BotRuntime { api, handler }),
            Err(error @ BuildError::Unknown { .. }) => Err(Lookup::Refused(
                DeadReason::UnknownHandler,
                format!("bot {}: {error}", entry.id),
            )),
            Err(error) => {
                warn!(bot_id = %entry.id, error = %error_chain(&error), "a registry bot's handler could not be built; its updates back off");
                let why = format!("bot {}: {}", entry.id, error_chain(&error));
                Err(Lookup::Unavailable(PortError::misconfigured(BUILD, why)))
            }
        }
    }
}

impl Fleet {
    /// The bot of the environment, if there is one, and the registry's bots, if there is a
    /// registry.
    pub fn new(env: Option<(BotId, BotRuntime)>, registry: Option<RegistryBots>) -> Self {
        Self {
            env: env.map(|(id, runtime)| (id, Arc::new(runtime))),
            registry,
        }
    }
}

#[async_trait]
impl BotDirectory for Fleet {
    async fn lookup(&self, bot: &BotId) -> Lookup {
        if let Some((id, runtime)) = &self.env {
            if id == bot {
                return Lookup::Found(runtime.clone());
            }
        }
        match &self.registry {
            Some(registry) => registry.lookup(bot).await,
            None => Lookup::Refused(
                DeadReason::UnknownBot,
                format!("no bot {bot} here: the environment's bot is another and there is no bot registry"),
            ),
        }
    }
}
