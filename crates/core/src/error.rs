//! Errors at the ports and in the handler, and the one place that decides whether a failure is retried.

use std::time::Duration;

use crate::telegram::TelegramError;

/// A boxed error from an adapter's SDK or I/O, kept as the `source` of a [`PortError`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// How a failure is treated (docs/ARCHITECTURE.md §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// Worth retrying after the usual backoff: network errors, timeouts, 5xx, throttling, panics.
    Transient,
    /// The other side named the wait: retry after exactly that long (plus a second).
    RateLimited(Duration),
    /// Retrying cannot help: dead-letter at once.
    Permanent,
}

impl ErrorClass {
    /// The stored and reported name of the class.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Transient => "transient",
            ErrorClass::RateLimited(_) => "rate_limited",
            ErrorClass::Permanent => "permanent",
        }
    }
}

/// A failure of a store or queue adapter.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// The service could not answer now (throttling, 5xx, timeout, network): try again later.
    #[error("{what} is unavailable")]
    Unavailable {
        /// The operation that failed, e.g. `"DynamoDB PutItem"`.
        what: &'static str,
        /// The SDK or I/O error.
        #[source]
        source: BoxError,
    },
    /// The service refused the request itself (validation, size, permissions): retrying cannot help.
    #[error("{what} was rejected")]
    Rejected {
        /// The operation that failed.
        what: &'static str,
        /// The SDK or I/O error.
        #[source]
        source: BoxError,
    },
}

impl PortError {
    /// A transient failure of `what`.
    pub fn unavailable(what: &'static str, source: impl Into<BoxError>) -> Self {
        PortError::Unavailable {
            what,
            source: source.into(),
        }
    }

    /// A permanent refusal of `what`.
    pub fn rejected(what: &'static str, source: impl Into<BoxError>) -> Self {
        PortError::Rejected {
            what,
            source: source.into(),
        }
    }

    /// Transient or permanent.
    pub fn class(&self) -> ErrorClass {
        match self {
            PortError::Unavailable { .. } => ErrorClass::Transient,
            PortError::Rejected { .. } => ErrorClass::Permanent,
        }
    }
}

/// Why a handler run failed. Bot authors return it from [`crate::Handler::handle`].
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// A Bot API call failed; its class follows Telegram's answer.
    #[error(transparent)]
    Telegram(#[from] TelegramError),
    /// The store could not record an action; retried like any transient failure.
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

    /// Decides retryability: every class is settled here, nowhere else.
    pub fn class(&self) -> ErrorClass {
        match self {
            HandlerError::Telegram(e) => e.class(),
            HandlerError::Store(e) => match e.class() {
                // Failing to record an intent must not lose the update: retry it even if the store refused.
                ErrorClass::Permanent | ErrorClass::Transient | ErrorClass::RateLimited(_) => {
                    ErrorClass::Transient
                }
            },
            HandlerError::Transient(_) | HandlerError::Panicked(_) => ErrorClass::Transient,
            HandlerError::Permanent(_) => ErrorClass::Permanent,
        }
    }
}
