//! The webhook use case (docs/design/webhook.md): admit, store, enqueue — and answer 200 only
//! once the update is durable. Both front ends (the Lambda, `tgq local`) call [`Webhook::admit`] on
//! the request's head, read the body up to [`Webhook::max_body_bytes`], call [`Webhook::ingest`],
//! and answer with [`Answer::of`].

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use subtle::ConstantTimeEq;
use teloxide_core::payloads::AnswerCallbackQuery;
use teloxide_core::requests::Payload as _;
use teloxide_core::types::CallbackQueryId;
use tracing::{error, instrument, warn, Span};

use ::metrics::counter;

use crate::clock::Clock;
use crate::dead::{Burial, DeadLetter, DeadReason, FailureClass};
use crate::envelope::{Envelope, Poison};
use crate::error::{error_chain, PortError};
use crate::ids::{BotId, RecordKey};
use crate::metrics as names;
use crate::ports::{
    AtomicIngest, DeadLetters, Inserted, OutgoingMessage, UpdateQueue, UpdateStore,
};
use crate::record::{Status, Timestamp, UpdateRecord};
use crate::registry::{BotEntry, Registry};
use crate::telegram::method_name;

/// The header Telegram sends the webhook secret in.
pub const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

/// What the webhook knows of a request before reading its body.
#[derive(Clone, Copy, Debug)]
pub struct RequestHead<'a> {
    /// The HTTP method.
    pub method: &'a str,
    /// The value of [`SECRET_HEADER`], if present.
    pub secret: Option<&'a [u8]>,
    /// The body's size, as declared (`Content-Length`) or known (a buffered body).
    pub declared_length: Option<usize>,
}

/// How an accepted request ended; every variant is answered 200.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ingested {
    /// Stored and enqueued.
    Queued,
    /// Already stored and enqueued earlier: nothing done.
    Duplicate(Status),
    /// Stored earlier but its enqueue was never confirmed: sent again (the queue drops a true repeat).
    Requeued,
    /// Not an Update: recorded in the dead-letter queue so Telegram stops resending it.
    Poison(Poison),
    /// An update too large for the store's item limit: recorded in the dead-letter queue.
    TooLarge,
}

impl std::fmt::Display for Ingested {
    /// The short outcome both webhook front ends put in their 200 answer.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ingested::Queued => f.write_str("queued"),
            Ingested::Requeued => f.write_str("queued again"),
            Ingested::Duplicate(status) => write!(f, "duplicate ({status})"),
            Ingested::Poison(reason) => write!(f, "not an update: {reason}"),
            Ingested::TooLarge => f.write_str("too large to store; dead-lettered"),
        }
    }
}

/// Why a request was refused; each maps to one HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// Not a POST.
    #[error("method not allowed: the webhook accepts POST only")]
    MethodNotAllowed,
    /// The secret header is missing or wrong.
    #[error("missing or wrong secret token")]
    Unauthorized,
    /// The path names no bot this deployment serves (docs/design/fleet.md §2).
    #[error("not found: no bot is served at this path")]
    NotFound,
    /// The body is larger than the configured limit.
    #[error("body of {size} bytes exceeds the limit of {limit} bytes")]
    PayloadTooLarge {
        /// The body's size (or the limit plus one when it was cut off while streaming).
        size: usize,
        /// The configured limit.
        limit: usize,
    },
    /// The body could not be read from the connection.
    #[error("the request body could not be read")]
    UnreadableBody,
    /// Storing or enqueueing failed, or the stack is misconfigured: Telegram will retry.
    #[error("the update could not be made durable ({}); Telegram will retry it", .0.cause())]
    Unavailable(#[source] PortError),
}

impl Refused {
    /// The HTTP status the refusal is answered with.
    pub fn status(&self) -> u16 {
        match self {
            Refused::MethodNotAllowed => 405,
            Refused::Unauthorized => 401,
            Refused::NotFound => 404,
            Refused::PayloadTooLarge { .. } => 413,
            Refused::UnreadableBody => 400,
            Refused::Unavailable(_) => 503,
        }
    }
}

/// The webhook's HTTP answer, the same from every front end: `{"ok": …, "result": "…"}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The JSON body.
    pub body: String,
}

impl Answer {
    /// The answer to a request's outcome.
    pub fn of(outcome: &Result<Ingested, Refused>) -> Self {
        let (status, text) = match outcome {
            Ok(ingested) => (200, ingested.to_string()),
            Err(refused) => (refused.status(), refused.to_string()),
        };
        Self {
            status,
            body: serde_json::json!({ "ok": status == 200, "result": text }).to_string(),
        }
    }
}

/// A request's outcome and, when the webhook answers a callback query in its reply, the query.
#[derive(Debug)]
pub struct Reply {
    /// How the request ended.
    pub outcome: Result<Ingested, Refused>,
    /// The callback query answered in the reply body (`TGQ_ACK_CALLBACKS`): set only for an
    /// update that is stored and queued.
    pub acknowledged_callback: Option<String>,
}

impl Reply {
    /// The HTTP answer: for an acknowledged callback query, 200 with the Bot API call
    /// `{"method": "answerCallbackQuery", "callback_query_id": …}` as the body, which Telegram
    /// makes on the bot's behalf; otherwise [`Answer::of`] the outcome.
    pub fn answer(&self) -> Answer {
        let Some(id) = &self.acknowledged_callback else {
            return Answer::of(&self.outcome);
        };
        let payload = AnswerCallbackQuery::new(CallbackQueryId(id.clone()));
        let mut body = match serde_json::to_value(&payload) {
            Ok(Value::Object(fields)) => fields,
            // A payload of one string always serializes to an object; the plain answer is the
            // safe fallback all the same (the worker's own answer would then come too late).
            _ => return Answer::of(&self.outcome),
        };
        body.insert(
            "method".into(),
            Value::from(method_name(AnswerCallbackQuery::NAME)),
        );
        Answer {
            status: 200,
            body: Value::Object(body).to_string(),
        }
    }
}

/// The webhook's settings.
#[derive(Clone, Debug)]
pub struct WebhookSettings {
    /// The bot whose updates arrive here.
    pub bot_id: BotId,
    /// The secret Telegram was given in `setWebhook`.
    pub secret: SecretString,
    /// The largest body accepted.
    pub max_body_bytes: usize,
    /// How long records are kept.
    pub record_ttl: Duration,
    /// `TGQ_ACK_CALLBACKS`: answer a callback query's request with `answerCallbackQuery` once the
    /// update is durable, so the user's spinner stops within the webhook's own time.
    pub ack_callbacks: bool,
}

/// How a new update is made durable, chosen when the webhook is built.
#[derive(Clone)]
pub enum Ingest {
    /// Put the record (conditional), send the message, mark it queued: DynamoDB and SQS.
    PutThenSend {
        /// Stores records.
        store: Arc<dyn UpdateStore>,
        /// Sends to the updates queue.
        queue: Arc<dyn UpdateQueue>,
    },
    /// Store the record and its message in one durable write: a store that holds the queue too.
    Atomic(Arc<dyn AtomicIngest>),
}

/// The ports the webhook uses; built once per cold start and shared by every request.
#[derive(Clone)]
pub struct WebhookPorts {
    /// How new updates are made durable.
    pub ingest: Ingest,
    /// Receives poison and updates too large to store.
    pub dead: Arc<dyn DeadLetters>,
    /// Tells the time.
    pub clock: Arc<dyn Clock>,
}

/// The webhook use case.
#[derive(Clone)]
pub struct Webhook {
    settings: WebhookSettings,
    ports: WebhookPorts,
}

impl Webhook {
    /// A webhook with its settings and ports.
    pub fn new(settings: WebhookSettings, ports: WebhookPorts) -> Self {
        Self { settings, ports }
    }

    /// The webhook's settings.
    pub fn settings(&self) -> &WebhookSettings {
        &self.settings
    }

    /// The largest body to read; a front end stops reading past it and refuses with 413.
    pub fn max_body_bytes(&self) -> usize {
        self.settings.max_body_bytes
    }

    /// The cheap refusals, on the request's head, before a byte of the body is read: nothing is
    /// written for them.
    pub fn admit(&self, head: &RequestHead<'_>) -> Result<(), Refused> {
        if !head.method.eq_ignore_ascii_case("POST") {
            return Err(Refused::MethodNotAllowed);
        }
        if !self.authenticates(head.secret) {
            return Err(Refused::Unauthorized);
        }
        let limit = self.settings.max_body_bytes;
        match head.declared_length {
            Some(size) if size > limit => Err(Refused::PayloadTooLarge { size, limit }),
            _ => Ok(()),
        }
    }

    /// Whether `presented` is the webhook secret; compared in constant time, so the answer's timing
    /// tells nothing about the secret.
    fn authenticates(&self, presented: Option<&[u8]>) -> bool {
        let expected = self.settings.secret.expose_secret().as_bytes();
        presented.is_some_and(|p| bool::from(p.ct_eq(expected)))
    }

    /// Stores and enqueues an admitted body (docs/design/webhook.md, steps 3–6), and counts how
    /// it ended ([`crate::metrics`]).
    pub async fn ingest(&self, body: Bytes) -> Result<Ingested, Refused> {
        self.receive(body).await.outcome
    }

    /// As [`Webhook::ingest`], and decides whether the reply answers a callback query: with
    /// `ack_callbacks`, an update that is stored and queued — new, sent again, or a duplicate of
    /// one queued earlier (Telegram resends only what it saw no answer to, so the first reply's
    /// answer may never have arrived) — and is a callback query. Never a refusal (503, 401, …),
    /// poison or an update too large to store: those are not queued.
    #[instrument(skip_all, fields(bot_id = %self.settings.bot_id, update_id, group))]
    pub async fn receive(&self, body: Bytes) -> Reply {
        let (outcome, callback_query_id) = self.make_durable(body).await;
        count(&self.settings.bot_id, &outcome);
        let durable = matches!(
            outcome,
            Ok(Ingested::Queued | Ingested::Requeued | Ingested::Duplicate(_))
        );
        let acknowledged_callback =
            callback_query_id.filter(|_| self.settings.ack_callbacks && durable);
        Reply {
            outcome,
            acknowledged_callback,
        }
    }

    /// Makes the body durable; returns how that ended and, for a callback query, its id.
    async fn make_durable(&self, body: Bytes) -> (Result<Ingested, Refused>, Option<String>) {
        let limit = self.settings.max_body_bytes;
        if body.len() > limit {
            let refused = Refused::PayloadTooLarge {
                size: body.len(),
                limit,
            };
            return (Err(refused), None);
        }
        let mut envelope = match Envelope::parse(&body) {
            Ok(envelope) => envelope,
            Err(poison) => {
                let letter = DeadLetter::poison(self.settings.bot_id.clone(), body, &poison);
                warn!(reason = %poison, "poison update dead-lettered");
                return (self.bury(&letter, Ingested::Poison(poison)).await, None);
            }
        };
        let callback_query_id = envelope.callback_query_id.take();
        (self.store_envelope(envelope, body).await, callback_query_id)
    }

    async fn store_envelope(&self, envelope: Envelope, body: Bytes) -> Result<Ingested, Refused> {
        Span::current()
            .record("update_id", envelope.update_id.0)
            .record("group", envelope.group.as_str());
        let key = RecordKey::new(self.settings.bot_id.clone(), envelope.update_id);
        let now = self.ports.clock.now();
        match self.store(&key, &envelope, &body, now).await {
            Ok(ingested) => Ok(ingested),
            Err(error @ PortError::TooLarge { .. }) => {
                let burial = Burial {
                    reason: DeadReason::TooLarge,
                    class: FailureClass::Permanent,
                    error: error_chain(&error),
                    attempts: 0,
                };
                warn!(error = %burial.error, "update too large for the store; dead-lettered");
                let letter = DeadLetter::for_update(&key, &envelope.group, body, &burial);
                self.bury(&letter, Ingested::TooLarge).await
            }
            Err(error) => {
                error!(error = %error_chain(&error), cause = error.cause(), "the update could not be made durable; answering 503 so Telegram retries");
                Err(Refused::Unavailable(error))
            }
        }
    }

    /// Makes a new update durable by the chosen strategy; a repeat heals an unconfirmed enqueue.
    async fn store(
        &self,
        key: &RecordKey,
        envelope: &Envelope,
        body: &Bytes,
        now: Timestamp,
    ) -> Result<Ingested, PortError> {
        let record = UpdateRecord::received(
            key.clone(),
            envelope.group.clone(),
            body.clone(),
            now,
            self.settings.record_ttl,
        );
        let message = OutgoingMessage::for_update(key, &envelope.group, body.clone());
        match &self.ports.ingest {
            Ingest::Atomic(atomic) => match atomic.insert_queued(&record, now, &message).await? {
                Inserted::New => Ok(Ingested::Queued),
                Inserted::Exists(status) => Ok(Ingested::Duplicate(status)),
            },
            Ingest::PutThenSend { store, queue } => {
                let outcome = match store.insert(&record, now).await? {
                    Inserted::New => Ingested::Queued,
                    // The earlier request stored the update but may have died before its send was
                    // confirmed.
                    Inserted::Exists(Status::Received) => Ingested::Requeued,
                    Inserted::Exists(status) => return Ok(Ingested::Duplicate(status)),
                };
                // No write after the send: the record stays RECEIVED until the worker claims it,
                // and a repeat of a RECEIVED update is sent again, which is harmless (the queue
                // drops it as a duplicate within five minutes; after that the claim finds the
                // record finished, or runs it once) — docs/design/webhook.md.
                queue.enqueue(&message).await?;
                Ok(outcome)
            }
        }
    }

    /// Sends a letter and answers 200 with `ingested`, or 503 when the letter cannot be sent, so
    /// Telegram keeps the update.
    async fn bury(&self, letter: &DeadLetter, ingested: Ingested) -> Result<Ingested, Refused> {
        match self.ports.dead.dead_letter(letter).await {
            Ok(()) => Ok(ingested),
            Err(error) => {
                error!(error = %error_chain(&error), "dead-letter send failed; answering 503 so Telegram retries");
                Err(Refused::Unavailable(error))
            }
        }
    }
}

/// The path of the environment's bot, and the prefix of each registry bot's: `/webhook/{bot_id}`.
pub(crate) const WEBHOOK_PATH: &str = "/webhook";

/// The settings every bot's webhook shares.
#[derive(Clone, Debug)]
pub struct SharedSettings {
    /// The largest body accepted.
    pub max_body_bytes: usize,
    /// How long records are kept.
    pub record_ttl: Duration,
    /// `TGQ_ACK_CALLBACKS`.
    pub ack_callbacks: bool,
}

impl SharedSettings {
    /// The webhook settings of one bot.
    pub fn for_bot(&self, bot_id: BotId, secret: SecretString) -> WebhookSettings {
        WebhookSettings {
            bot_id,
            secret,
            max_body_bytes: self.max_body_bytes,
            record_ttl: self.record_ttl,
            ack_callbacks: self.ack_callbacks,
        }
    }
}

/// The webhooks of one deployment, by request path (docs/design/fleet.md §2): `/webhook/{bot_id}`
/// is the registry's bot of that id, with its own secret; any other path is the environment's bot
/// (`TGQ_BOT_ID`), as a single-bot deployment always served it. Both front ends (the Lambda, `tgq
/// local`) route every request here before [`Webhook::admit`].
#[derive(Clone)]
pub struct Webhooks {
    env: Option<Webhook>,
    registry: Option<Arc<Registry>>,
    shared: SharedSettings,
    ports: WebhookPorts,
}

impl Webhooks {
    /// The webhooks of the environment's bot (`env`: its id and secret), if any, and of the
    /// registry's bots, if there is a registry.
    pub fn new(
        shared: SharedSettings,
        ports: WebhookPorts,
        env: Option<(BotId, SecretString)>,
        registry: Option<Arc<Registry>>,
    ) -> Self {
        let env =
            env.map(|(bot_id, secret)| Webhook::new(shared.for_bot(bot_id, secret), ports.clone()));
        Self {
            env,
            registry,
            shared,
            ports,
        }
    }

    /// A deployment of the one bot `webhook` serves on every path but `/webhook/{id}` (which
    /// finds no bot): the single-bot webhook as it always was.
    pub fn single(webhook: Webhook) -> Self {
        let settings = webhook.settings();
        let shared = SharedSettings {
            max_body_bytes: settings.max_body_bytes,
            record_ttl: settings.record_ttl,
            ack_callbacks: settings.ack_callbacks,
        };
        Self {
            ports: webhook.ports.clone(),
            env: Some(webhook),
            registry: None,
            shared,
        }
    }

    /// The environment's bot's webhook, if there is one (what long polling feeds).
    pub fn env(&self) -> Option<&Webhook> {
        self.env.as_ref()
    }

    /// The webhook a request to `path` is for. Nothing is written before this answers: a path
    /// naming no bot is [`Refused::NotFound`], and a registry that cannot be read (and was never
    /// read) is [`Refused::Unavailable`], a 503 that Telegram retries — never a 404, which would
    /// lose the update.
    pub async fn route(&self, path: &str) -> Result<Webhook, Refused> {
        let Some(id) = registry_bot_in(path) else {
            return self.env.clone().ok_or(Refused::NotFound);
        };
        let Ok(id) = BotId::new(id) else {
            return Err(Refused::NotFound);
        };
        if let Some(env) = self.env.as_ref().filter(|env| env.settings.bot_id == id) {
            return Ok(env.clone());
        }
        let Some(registry) = &self.registry else {
            return Err(Refused::NotFound);
        };
        match registry.find(&id).await {
            Ok(Some(BotEntry {
                id,
                secret: Some(secret),
                ..
            })) => Ok(Webhook::new(
                self.shared.for_bot(id, secret),
                self.ports.clone(),
            )),
            // A bot without a secret could never be authenticated (the webhook's read requires
            // one; this is a registry read without secrets).
            Ok(Some(_)) => Err(Refused::NotFound),
            Ok(None) => Err(Refused::NotFound),
            Err(error) => {
                error!(error = %error_chain(&error), cause = error.cause(), "the bot registry cannot be read; answering 503 so Telegram retries");
                Err(Refused::Unavailable(error))
            }
        }
    }
}

/// The bot id of a `/webhook/{bot_id}` path (a trailing `/` allowed), or `None` for any other path.
fn registry_bot_in(path: &str) -> Option<&str> {
    let rest = path.strip_prefix(WEBHOOK_PATH)?.strip_prefix('/')?;
    let id = rest.strip_suffix('/').unwrap_or(rest);
    (!id.is_empty()).then_some(id)
}

/// Counts how one webhook request of `bot` that reached [`crate::ingest::Webhook::ingest`] ended.
fn count(bot: &BotId, outcome: &Result<Ingested, Refused>) {
    let bot = bot.to_string();
    match outcome {
        Ok(Ingested::Queued) => {
            counter!(names::RECEIVED, names::BOT_ID => bot.clone()).increment(1);
            counter!(names::ENQUEUED, names::BOT_ID => bot).increment(1);
        }
        Ok(Ingested::Requeued) => {
            counter!(names::REQUEUED, names::BOT_ID => bot.clone()).increment(1);
            counter!(names::ENQUEUED, names::BOT_ID => bot).increment(1);
        }
        Ok(Ingested::Duplicate(_)) => counter!(names::DUPLICATE, names::BOT_ID => bot).increment(1),
        Ok(Ingested::Poison(_)) => counter!(names::POISON, names::BOT_ID => bot).increment(1),
        Ok(Ingested::TooLarge) => {
            let reason = DeadReason::TooLarge.as_str();
            counter!(names::DEAD_LETTERED, names::BOT_ID => bot, names::REASON => reason)
                .increment(1);
        }
        Err(Refused::Unavailable(error)) => {
            counter!(names::INGEST_UNAVAILABLE, names::BOT_ID => bot, names::CAUSE => error.cause()).increment(1);
        }
        // Refusals of the request itself (a wrong secret, an oversized body) are answered before
        // anything is stored; Lambda's and the endpoint's own metrics count them.
        Err(_) => {}
    }
}

#[cfg(test)]
mod routing_tests {
    use super::registry_bot_in;

    #[test]
    fn only_a_path_below_webhook_names_a_registry_bot() {
        assert_eq!(registry_bot_in("/webhook/shop"), Some("shop"));
        assert_eq!(registry_bot_in("/webhook/shop/"), Some("shop"));
        assert_eq!(registry_bot_in("/webhook/a/b"), Some("a/b"));
        for other in [
            "/",
            "",
            "/webhook",
            "/webhook/",
            "/webhookshop",
            "/other/shop",
        ] {
            assert_eq!(registry_bot_in(other), None, "{other:?}");
        }
    }
}
