//! The bots one stack hosts (docs/design/fleet.md §2): each bot's id, token, webhook secret,
//! handler name and allowed updates, kept under one SSM prefix on AWS (one parameter per field,
//! [`Layout`]) or in the data directory locally. Both functions read it through a [`BotSource`] and
//! keep it in a [`Registry`], which reads it again at most every [`defaults::REGISTRY_REFRESH`], so a
//! bot added, changed or removed is picked up within a minute without a redeploy.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use secrecy::SecretString;
use teloxide_core::types::AllowedUpdate;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::defaults;
use crate::error::PortError;
use crate::ids::{BotId, InvalidBotId};

/// One bot of the registry.
#[derive(Clone, Debug)]
pub struct BotEntry {
    /// The bot's id: its webhook path (`/webhook/{id}`), and part of its record keys and message
    /// groups.
    pub id: BotId,
    /// The Bot API token. Locally a bot may have none: its sends then go to the offline outbox.
    pub token: Option<SecretString>,
    /// The webhook secret Telegram presents for this bot, and only for it. The worker reads the
    /// registry without secrets (it never checks one), so its entries have none.
    pub secret: Option<SecretString>,
    /// The name of the handler that runs its updates, from the handler registry of `bot/`.
    pub handler: String,
    /// The kinds of update asked of Telegram for it; empty: what its handler says.
    pub allowed_updates: Vec<AllowedUpdate>,
}

/// One field of a bot in the registry: one SSM parameter each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// `token`, a SecureString.
    Token,
    /// `secret`, a SecureString.
    Secret,
    /// `handler`, a String.
    Handler,
    /// `allowed_updates`, a String of comma-separated kinds as the Bot API names them
    /// (`message,callback_query`); absent: what the handler says.
    AllowedUpdates,
}

impl Field {
    /// Every field, in the order `tgq bots add` writes them (the secret and token before the
    /// handler, so that a bot whose `add` stopped half way is incomplete, never half-secret).
    pub const ALL: [Field; 4] = [
        Field::Token,
        Field::Secret,
        Field::AllowedUpdates,
        Field::Handler,
    ];

    /// The parameter's last path segment.
    pub fn as_str(self) -> &'static str {
        match self {
            Field::Token => "token",
            Field::Secret => "secret",
            Field::Handler => "handler",
            Field::AllowedUpdates => "allowed_updates",
        }
    }

    /// Whether the parameter holds a secret (an SSM SecureString, never printed).
    pub fn is_secret(self) -> bool {
        matches!(self, Field::Token | Field::Secret)
    }

    fn parse(name: &str) -> Option<Field> {
        Field::ALL.into_iter().find(|field| field.as_str() == name)
    }
}

/// Where the registry's parameters live: `{prefix}{bot_id}/{field}`, the prefix a path that starts
/// and ends with `/` (the template's `BotsParameterPrefix`, `/tgq/{stack}/bots/` by default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    prefix: String,
}

/// Why a text cannot be a registry prefix.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the bots' parameter prefix must be an SSM path like /tgq/my-stack/bots/ (got {0:?})")]
pub struct InvalidPrefix(pub String);

impl Layout {
    /// The layout under `prefix`; a missing trailing `/` is added.
    pub fn new(prefix: &str) -> Result<Self, InvalidPrefix> {
        let valid = prefix.starts_with('/')
            && prefix.len() > 1
            && !prefix.contains("//")
            && prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"/_.-".contains(&b));
        if !valid {
            return Err(InvalidPrefix(prefix.to_owned()));
        }
        let mut prefix = prefix.to_owned();
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        Ok(Self { prefix })
    }

    /// The prefix, ending with `/`: the path to read recursively.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The path holding every parameter of `bot`, ending with `/`.
    pub fn bot_path(&self, bot: &BotId) -> String {
        format!("{}{bot}/", self.prefix)
    }

    /// The name of `bot`'s parameter for `field`.
    pub fn parameter(&self, bot: &BotId, field: Field) -> String {
        format!("{}{bot}/{}", self.prefix, field.as_str())
    }

    /// The bots described by `parameters` (name and value, as a recursive read under the prefix
    /// returns them). A bot without a secret or a handler is left out and named in
    /// [`Parsed::incomplete`] (a `tgq bots add` still writing, or a parameter deleted by hand);
    /// a parameter the layout does not know is ignored.
    pub fn parse(&self, parameters: impl IntoIterator<Item = (String, SecretString)>) -> Parsed {
        self.parse_fields(parameters, true)
    }

    /// [`Layout::parse`] of a read that left the secrets out (the worker's): a bot needs a handler,
    /// not a secret, and its entry has none.
    pub fn parse_without_secrets(
        &self,
        parameters: impl IntoIterator<Item = (String, SecretString)>,
    ) -> Parsed {
        self.parse_fields(parameters, false)
    }

    fn parse_fields(
        &self,
        parameters: impl IntoIterator<Item = (String, SecretString)>,
        secret_required: bool,
    ) -> Parsed {
        use secrecy::ExposeSecret as _;
        let mut fields: BTreeMap<String, BTreeMap<&'static str, SecretString>> = BTreeMap::new();
        for (name, value) in parameters {
            let Some(rest) = name.strip_prefix(&self.prefix) else {
                continue;
            };
            let Some((bot, field)) = rest.split_once('/') else {
                continue;
            };
            let Some(field) = Field::parse(field) else {
                continue;
            };
            fields
                .entry(bot.to_owned())
                .or_default()
                .insert(field.as_str(), value);
        }
        let mut parsed = Parsed::default();
        for (bot, mut values) in fields {
            let id = match BotId::new(bot.clone()) {
                Ok(id) => id,
                Err(InvalidBotId(_)) => {
                    parsed
                        .incomplete
                        .push((bot, "its id is not a valid bot id"));
                    continue;
                }
            };
            let secret = values.remove(Field::Secret.as_str());
            let (true, Some(handler)) = (
                secret.is_some() || !secret_required,
                values.remove(Field::Handler.as_str()),
            ) else {
                parsed
                    .incomplete
                    .push((bot, "it has no secret or no handler"));
                continue;
            };
            let allowed_updates = match values.remove(Field::AllowedUpdates.as_str()) {
                None => Vec::new(),
                Some(text) => match parse_allowed_updates(text.expose_secret()) {
                    Ok(kinds) => kinds,
                    Err(_) => {
                        parsed
                            .incomplete
                            .push((bot, "its allowed_updates do not parse"));
                        continue;
                    }
                },
            };
            parsed.bots.push(BotEntry {
                id,
                token: values.remove(Field::Token.as_str()),
                secret,
                handler: handler.expose_secret().to_owned(),
                allowed_updates,
            });
        }
        parsed
    }
}

/// What [`Layout::parse`] found.
#[derive(Debug, Default)]
pub struct Parsed {
    /// The complete bots, by id.
    pub bots: Vec<BotEntry>,
    /// The bots left out, with why (never a value).
    pub incomplete: Vec<(String, &'static str)>,
}

/// A kind of update the Bot API does not know.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0:?} is not a kind of update (e.g. message, callback_query, chat_member)")]
pub struct UnknownUpdateKind(pub String);

/// Reads `message,callback_query` (spaces allowed, empty parts ignored) as the Bot API's kinds.
pub fn parse_allowed_updates(text: &str) -> Result<Vec<AllowedUpdate>, UnknownUpdateKind> {
    text.split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(|part| {
            serde_json::from_value(serde_json::Value::String(part.to_owned()))
                .map_err(|_| UnknownUpdateKind(part.to_owned()))
        })
        .collect()
}

/// Writes kinds the way [`parse_allowed_updates`] reads them.
pub fn format_allowed_updates(kinds: &[AllowedUpdate]) -> String {
    kinds
        .iter()
        .filter_map(|kind| match serde_json::to_value(kind) {
            Ok(serde_json::Value::String(name)) => Some(name),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Where the registry is read from: SSM on AWS, a file in the data directory locally, a list in
/// tests.
#[async_trait]
pub trait BotSource: Send + Sync {
    /// Every complete bot, read now.
    async fn load(&self) -> Result<Vec<BotEntry>, PortError>;
}

/// The bots, as last read.
pub(crate) type Bots = Arc<BTreeMap<BotId, BotEntry>>;

/// The registry as both functions keep it: read at first use, read again when older than its
/// refresh interval. A failed read keeps serving the bots read before (a registry that cannot be
/// read for a moment must not turn every request into a 503); with none read yet, the error.
pub struct Registry {
    source: Arc<dyn BotSource>,
    refresh: Duration,
    miss_reread: Duration,
    cache: Mutex<Option<LastRead>>,
}

/// What the registry read last, and when.
struct LastRead {
    bots: Bots,
    /// When the source was last read, for whatever reason.
    at: Instant,
    /// When the last scheduled read was: the next one is due a refresh interval after it.
    scheduled_at: Instant,
    /// Whether an id the registry did not know has made it read since that scheduled read: the
    /// ids it does not know are then taken as unknown until the next one.
    reread_for_a_miss: bool,
}

impl Registry {
    /// A registry reading `source` again at most every `refresh`; a bot it does not know makes
    /// it read again once between two scheduled reads, and not within
    /// [`defaults::REGISTRY_MISS_REREAD`] (or `refresh`, if shorter) of the last read.
    pub fn new(source: Arc<dyn BotSource>, refresh: Duration) -> Self {
        Self {
            source,
            refresh,
            miss_reread: refresh.min(defaults::REGISTRY_MISS_REREAD),
            cache: Mutex::new(None),
        }
    }

    /// The bots, read again first when the last scheduled read is older than the refresh
    /// interval.
    pub(crate) async fn bots(&self) -> Result<Bots, PortError> {
        let mut cache = self.cache.lock().await;
        if let Some(last) = cache.as_ref() {
            if last.scheduled_at.elapsed() < self.refresh {
                return Ok(last.bots.clone());
            }
        }
        let read = self.source.load().await;
        let now = Instant::now();
        match (read, cache.as_mut()) {
            (Ok(entries), _) => {
                let bots = index(entries);
                *cache = Some(LastRead {
                    bots: bots.clone(),
                    at: now,
                    scheduled_at: now,
                    reread_for_a_miss: false,
                });
                Ok(bots)
            }
            (Err(error), Some(last)) => {
                served_before(&error);
                // Try again after another interval, not on every request.
                last.at = now;
                last.scheduled_at = now;
                Ok(last.bots.clone())
            }
            (Err(error), None) => {
                crate::metrics::registry_unavailable(&error);
                Err(error)
            }
        }
    }

    /// The bot `id`. One the registry does not know makes it read again at once — a bot
    /// `tgq bots add` just wrote (whose webhook Telegram calls at once) is found — but only once
    /// between two scheduled reads, and not within [`defaults::REGISTRY_MISS_REREAD`] of the last
    /// read: until the next scheduled read every id it still does not know is taken as unknown,
    /// so posts to made-up ids at any rate cost one read per refresh interval at most.
    /// `Ok(None)`: no such bot; `Err`: the registry was never read and cannot be now.
    pub(crate) async fn find(&self, id: &BotId) -> Result<Option<BotEntry>, PortError> {
        if let Some(entry) = self.bots().await?.get(id) {
            return Ok(Some(entry.clone()));
        }
        let mut cache = self.cache.lock().await;
        let Some(last) = cache.as_mut() else {
            return Ok(None);
        };
        if last.reread_for_a_miss || last.at.elapsed() < self.miss_reread {
            return Ok(last.bots.get(id).cloned());
        }
        last.reread_for_a_miss = true;
        last.at = Instant::now();
        match self.source.load().await {
            Ok(entries) => last.bots = index(entries),
            Err(error) => served_before(&error),
        }
        Ok(last.bots.get(id).cloned())
    }

    /// Forgets what was read, so that the next call reads the source (a worker meeting a bot id
    /// it does not know, say, once per refresh interval at most is the caller's to decide).
    #[cfg(test)]
    pub(crate) async fn invalidate(&self) {
        *self.cache.lock().await = None;
    }
}

/// The bots of a read, by id.
fn index(entries: Vec<BotEntry>) -> Bots {
    Arc::new(
        entries
            .into_iter()
            .map(|entry| (entry.id.clone(), entry))
            .collect(),
    )
}

/// Counts and logs a failed read while the bots read before are served.
fn served_before(error: &PortError) {
    crate::metrics::registry_unavailable(error);
    tracing::warn!(error = %crate::error::error_chain(error), "reading the bot registry failed; serving the bots read before");
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret as _;

    fn param(name: &str, value: &str) -> (String, SecretString) {
        (name.to_owned(), SecretString::from(value.to_owned()))
    }

    #[test]
    fn a_prefix_must_be_an_ssm_path_and_gets_its_trailing_slash() {
        assert_eq!(Layout::new("/tgq/s/bots").unwrap().prefix(), "/tgq/s/bots/");
        assert_eq!(
            Layout::new("/tgq/s/bots/").unwrap().prefix(),
            "/tgq/s/bots/"
        );
        for bad in ["tgq/bots", "/", "/a//b", "/a b/"] {
            assert_eq!(Layout::new(bad), Err(InvalidPrefix(bad.to_owned())));
        }
    }

    #[test]
    fn complete_bots_are_read_and_incomplete_ones_named() {
        let layout = Layout::new("/tgq/s/bots/").unwrap();
        let parsed = layout.parse([
            param("/tgq/s/bots/shop/token", "1:abc"),
            param("/tgq/s/bots/shop/secret", "s3cret"),
            param("/tgq/s/bots/shop/handler", "echo"),
            param(
                "/tgq/s/bots/shop/allowed_updates",
                "message, callback_query",
            ),
            param("/tgq/s/bots/half/token", "2:def"),
            param("/tgq/s/bots/shop/unknown_field", "x"),
            param("/elsewhere/shop/secret", "x"),
        ]);
        assert_eq!(parsed.bots.len(), 1);
        let shop = &parsed.bots[0];
        assert_eq!(shop.id.as_str(), "shop");
        assert_eq!(shop.token.as_ref().unwrap().expose_secret(), "1:abc");
        assert_eq!(shop.secret.as_ref().unwrap().expose_secret(), "s3cret");
        assert_eq!(shop.handler, "echo");
        assert_eq!(
            shop.allowed_updates,
            vec![AllowedUpdate::Message, AllowedUpdate::CallbackQuery]
        );
        assert_eq!(
            parsed.incomplete,
            vec![("half".to_owned(), "it has no secret or no handler")]
        );
        assert_eq!(
            layout.parameter(&shop.id, Field::AllowedUpdates),
            "/tgq/s/bots/shop/allowed_updates"
        );
    }

    #[test]
    fn allowed_updates_read_back_what_was_written() {
        let kinds = vec![AllowedUpdate::ChatMember, AllowedUpdate::MessageReaction];
        let text = format_allowed_updates(&kinds);
        assert_eq!(text, "chat_member,message_reaction");
        assert_eq!(parse_allowed_updates(&text), Ok(kinds));
        assert_eq!(
            parse_allowed_updates("message,mesage"),
            Err(UnknownUpdateKind("mesage".to_owned()))
        );
    }

    struct Counting {
        reads: std::sync::atomic::AtomicUsize,
        fail: std::sync::atomic::AtomicBool,
    }

    #[async_trait]
    impl BotSource for Counting {
        async fn load(&self) -> Result<Vec<BotEntry>, PortError> {
            use std::sync::atomic::Ordering::SeqCst;
            let read = self.reads.fetch_add(1, SeqCst);
            if self.fail.load(SeqCst) {
                return Err(PortError::unavailable(
                    "SSM GetParametersByPath",
                    "throttled",
                ));
            }
            Ok(vec![BotEntry {
                id: BotId::new(format!("bot{read}")).unwrap(),
                token: None,
                secret: Some(SecretString::from("s".to_owned())),
                handler: "echo".to_owned(),
                allowed_updates: Vec::new(),
            }])
        }
    }

    #[tokio::test(start_paused = true)]
    async fn unknown_ids_at_any_rate_cost_at_most_one_read_per_refresh_interval() {
        use std::sync::atomic::Ordering::SeqCst;
        let source = Arc::new(Counting {
            reads: Default::default(),
            fail: Default::default(),
        });
        let registry = Registry::new(source.clone(), Duration::from_secs(30));
        // Five minutes of posts to made-up ids, ten a second.
        for n in 0..3000 {
            let id = BotId::new(format!("x{n}")).unwrap();
            assert!(registry.find(&id).await.unwrap().is_none());
            tokio::time::advance(Duration::from_millis(100)).await;
        }
        // Ten intervals: each its scheduled read, and at most one more for the ids it did not know.
        let reads = source.reads.load(SeqCst);
        assert!(reads <= 20, "{reads} reads of the registry in 5 minutes");
    }

    #[tokio::test]
    async fn the_registry_is_read_again_after_its_interval_and_keeps_the_last_read_on_a_failure() {
        use std::sync::atomic::Ordering::SeqCst;
        let source = Arc::new(Counting {
            reads: Default::default(),
            fail: Default::default(),
        });
        let registry = Registry::new(source.clone(), Duration::from_millis(50));
        let first = registry.bots().await.unwrap();
        assert!(first.contains_key(&BotId::new("bot0").unwrap()));
        registry.bots().await.unwrap();
        assert_eq!(source.reads.load(SeqCst), 1, "cached within the interval");
        tokio::time::sleep(Duration::from_millis(60)).await;
        let second = registry.bots().await.unwrap();
        assert!(second.contains_key(&BotId::new("bot1").unwrap()));
        source.fail.store(true, SeqCst);
        tokio::time::sleep(Duration::from_millis(60)).await;
        let kept = registry.bots().await.unwrap();
        assert!(
            kept.contains_key(&BotId::new("bot1").unwrap()),
            "the last read is served"
        );
        registry.invalidate().await;
        assert!(
            registry.bots().await.is_err(),
            "nothing read yet: the error"
        );
    }
}
