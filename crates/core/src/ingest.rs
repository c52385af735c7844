//! The webhook use case (docs/ARCHITECTURE.md §3): verify, store, enqueue — and answer 200 only
//! once the update is durable.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use secrecy::{ExposeSecret, SecretString};
use subtle::ConstantTimeEq;
use tracing::{instrument, warn, Span};

use crate::clock::Clock;
use crate::envelope::{Envelope, Poison};
use crate::error::PortError;
use crate::ids::{BotId, RecordKey};
use crate::ports::{
    AtomicIngest, DeadLetter, DeadLetters, Inserted, OutgoingMessage, UpdateQueue, UpdateStore,
};
use crate::record::{Status, UpdateRecord};

/// The header Telegram sends the webhook secret in.
pub const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

/// What the webhook knows of a request before looking at the update.
#[derive(Clone, Copy, Debug)]
pub struct InboundRequest<'a> {
    /// The HTTP method.
    pub method: &'a str,
    /// The value of [`SECRET_HEADER`], if present.
    pub secret: Option<&'a [u8]>,
    /// The raw body.
    pub body: &'a Bytes,
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
    /// The store refused the update itself (e.g. too large for an item): recorded in the dead-letter queue.
    Refused(String),
}

impl std::fmt::Display for Ingested {
    /// The short outcome both webhook front ends put in their 200 answer.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ingested::Queued => f.write_str("queued"),
            Ingested::Requeued => f.write_str("queued again"),
            Ingested::Duplicate(status) => write!(f, "duplicate ({status})"),
            Ingested::Poison(reason) => write!(f, "not an update: {reason}"),
            Ingested::Refused(_) => f.write_str("refused by the store; dead-lettered"),
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
    /// The body is larger than the configured limit.
    #[error("body of {size} bytes exceeds the limit of {limit} bytes")]
    PayloadTooLarge {
        /// The body's size.
        size: usize,
        /// The configured limit.
        limit: usize,
    },
    /// Storing or enqueueing failed; Telegram will retry.
    #[error("the update could not be made durable")]
    Unavailable(#[source] PortError),
}

impl Refused {
    /// The HTTP status the refusal is answered with.
    pub fn status(&self) -> u16 {
        match self {
            Refused::MethodNotAllowed => 405,
            Refused::Unauthorized => 401,
            Refused::PayloadTooLarge { .. } => 413,
            Refused::Unavailable(_) => 503,
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
}

/// The ports the webhook uses; built once per cold start and shared by every request.
#[derive(Clone)]
pub struct WebhookPorts {
    /// Stores records.
    pub store: Arc<dyn UpdateStore>,
    /// Sends to the updates queue.
    pub queue: Arc<dyn UpdateQueue>,
    /// Sends poison to the dead-letter queue.
    pub dead: Arc<dyn DeadLetters>,
    /// Tells the time.
    pub clock: Arc<dyn Clock>,
}

/// The webhook use case.
#[derive(Clone)]
pub struct Webhook {
    settings: WebhookSettings,
    ports: WebhookPorts,
    atomic: Option<Arc<dyn AtomicIngest>>,
}

impl Webhook {
    /// A webhook with its settings and ports.
    pub fn new(settings: WebhookSettings, ports: WebhookPorts) -> Self {
        Self {
            settings,
            ports,
            atomic: None,
        }
    }

    /// Stores a new update and its queue message in one write through `atomic` (a store that holds
    /// the queue too); repeats and their healing still go through the separate ports.
    pub fn with_atomic_ingest(mut self, atomic: Arc<dyn AtomicIngest>) -> Self {
        self.atomic = Some(atomic);
        self
    }

    /// The webhook's settings.
    pub fn settings(&self) -> &WebhookSettings {
        &self.settings
    }

    /// Handles one request: cheap refusals first (nothing is written for them), then the update.
    pub async fn handle(&self, request: InboundRequest<'_>) -> Result<Ingested, Refused> {
        if !request.method.eq_ignore_ascii_case("POST") {
            return Err(Refused::MethodNotAllowed);
        }
        if !self.authenticates(request.secret) {
            return Err(Refused::Unauthorized);
        }
        let limit = self.settings.max_body_bytes;
        if request.body.len() > limit {
            return Err(Refused::PayloadTooLarge {
                size: request.body.len(),
                limit,
            });
        }
        self.ingest(request.body.clone()).await
    }

    /// Whether `presented` is the webhook secret; compared in constant time, so the answer's timing
    /// tells nothing about the secret. HTTP front ends use it to refuse before reading a body.
    pub fn authenticates(&self, presented: Option<&[u8]>) -> bool {
        let expected = self.settings.secret.expose_secret().as_bytes();
        presented.is_some_and(|p| bool::from(p.ct_eq(expected)))
    }

    /// Stores and enqueues an authenticated body (docs/ARCHITECTURE.md §1: the steps after the
    /// secret and size checks).
    #[instrument(skip_all, fields(bot_id = %self.settings.bot_id, update_id, group), err(Display))]
    pub async fn ingest(&self, body: Bytes) -> Result<Ingested, Refused> {
        let envelope = match Envelope::parse(&body) {
            Ok(envelope) => envelope,
            Err(poison) => return self.bury_poison(body, poison).await,
        };
        Span::current()
            .record("update_id", envelope.update_id.0)
            .record("group", envelope.group.as_str());
        let key = RecordKey::new(self.settings.bot_id.clone(), envelope.update_id);
        let now = self.ports.clock.now();
        let record = UpdateRecord::received(
            key.clone(),
            envelope.group.clone(),
            body.clone(),
            now,
            self.settings.record_ttl,
        );
        let message = OutgoingMessage::for_update(&key, &envelope.group, body.clone());
        let stored = match &self.atomic {
            Some(atomic) => atomic.insert_queued(&record, now, &message).await,
            None => self.ports.store.insert(&record, now).await,
        };
        let inserted = match stored {
            // Stored together with its queue message: nothing is left to do.
            Ok(Inserted::New) if self.atomic.is_some() => return Ok(Ingested::Queued),
            Ok(inserted) => inserted,
            Err(rejected @ PortError::Rejected { .. }) => {
                return self.bury_refused(body, &envelope, rejected).await
            }
            Err(unavailable) => return Err(Refused::Unavailable(unavailable)),
        };
        let outcome = match inserted {
            Inserted::New => Ingested::Queued,
            // The earlier request stored the update but may have died before its send was confirmed.
            Inserted::Exists(Status::Received) => Ingested::Requeued,
            Inserted::Exists(status) => return Ok(Ingested::Duplicate(status)),
        };
        self.ports
            .queue
            .enqueue(&message)
            .await
            .map_err(Refused::Unavailable)?;
        // The update is durable in the queue now; a failed status write only costs a harmless resend later.
        if let Err(error) = self.ports.store.mark_queued(&key).await {
            warn!(error = %error, "update enqueued but not marked QUEUED");
        }
        Ok(outcome)
    }

    async fn bury_poison(&self, body: Bytes, poison: Poison) -> Result<Ingested, Refused> {
        warn!(reason = %poison, "poison update dead-lettered");
        let letter = DeadLetter {
            bot_id: self.settings.bot_id.clone(),
            update_id: None,
            group: None,
            body,
            reason: "poison".into(),
            error_class: "poison".into(),
            error: poison.to_string(),
            attempts: 0,
        };
        self.ports
            .dead
            .dead_letter(&letter)
            .await
            .map_err(Refused::Unavailable)?;
        Ok(Ingested::Poison(poison))
    }

    async fn bury_refused(
        &self,
        body: Bytes,
        envelope: &Envelope,
        error: PortError,
    ) -> Result<Ingested, Refused> {
        let reason = error_chain(&error);
        warn!(reason = %reason, "store refused the update; dead-lettered");
        let letter = DeadLetter {
            bot_id: self.settings.bot_id.clone(),
            update_id: Some(envelope.update_id),
            group: Some(envelope.group.clone()),
            body,
            reason: "store_rejected".into(),
            error_class: "permanent".into(),
            error: reason.clone(),
            attempts: 0,
        };
        self.ports
            .dead
            .dead_letter(&letter)
            .await
            .map_err(Refused::Unavailable)?;
        Ok(Ingested::Refused(reason))
    }
}

/// An error and its sources on one line.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
