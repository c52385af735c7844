//! Errors at the ports, and the one place that says how a failure is retried ([`ErrorClass`]).

use std::time::Duration;

/// A boxed error from an adapter's SDK or I/O, kept as the `source` of a [`PortError`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// How a failure is treated (docs/design/worker.md §1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// Worth retrying after the usual backoff: network errors, timeouts, 5xx, throttling, panics.
    Transient,
    /// The other side named the wait: retry after exactly that long (plus a second). Pacing, not a
    /// failure of the bot: it spends no attempt.
    RateLimited(Duration),
    /// Retrying cannot help: dead-letter at once.
    Permanent,
}

impl ErrorClass {
    /// The stored and reported name of the class.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Transient => "transient",
            ErrorClass::RateLimited(_) => "rate_limited",
            ErrorClass::Permanent => "permanent",
        }
    }
}

/// A failure of a store or queue adapter. Each variant says what the caller may do about it; the
/// adapters sort their SDK's errors into them in one place each.
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
    /// The stack is set up wrong (access denied, a missing table or queue, bad credentials): no
    /// request can succeed until an operator fixes it, and then every one can. Never the update's
    /// fault, so never a reason to give up on it.
    #[error("{what} is refused by the stack's configuration")]
    Misconfigured {
        /// The operation that failed.
        what: &'static str,
        /// The SDK or I/O error.
        #[source]
        source: BoxError,
    },
    /// The item would exceed the store's size limit (DynamoDB's 400 KB): it can never be stored.
    #[error("{what} would exceed the store's item size limit")]
    TooLarge {
        /// The operation that failed.
        what: &'static str,
        /// The SDK or I/O error.
        #[source]
        source: BoxError,
    },
    /// The run's lease was taken over by another run: this run must stop writing and sending.
    #[error("{what} was refused: another run holds the update's lease")]
    Fenced {
        /// The operation that was refused.
        what: &'static str,
    },
    /// Another writer changed the group's state after this run read it (docs/design/worker.md §2):
    /// the run's settle wrote nothing, and a retry runs the handler again on the new state. The
    /// queue runs one update of a group at a time, so this means a second writer (another
    /// deployment on the same table and bot id, a hand edit) rather than a race of tgq's own.
    #[error("{what} was refused: the state is at version {found}, the run read version {read}")]
    Conflict {
        /// The operation that was refused.
        what: &'static str,
        /// The version stored now.
        found: u64,
        /// The version the run read.
        read: u64,
    },
    /// Another run recorded the charge in the payments ledger, or its refund, after this run read
    /// it (docs/design/payments.md §2): the run's settle wrote nothing, and a retry finds the charge
    /// as it is now.
    #[error(
        "{what} was refused: charge {charge} changed in the payments ledger since the run read it"
    )]
    Credited {
        /// The operation that was refused.
        what: &'static str,
        /// The charge's id.
        charge: String,
    },
    /// The request or the stored data is not what this version expects (a validation error, an
    /// unreadable item, an unknown stored status): a bug or a foreign writer, not the update's fault.
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

    /// A configuration problem behind `what`.
    pub fn misconfigured(what: &'static str, source: impl Into<BoxError>) -> Self {
        PortError::Misconfigured {
            what,
            source: source.into(),
        }
    }

    /// An item `what` cannot store because of its size.
    pub fn too_large(what: &'static str, source: impl Into<BoxError>) -> Self {
        PortError::TooLarge {
            what,
            source: source.into(),
        }
    }

    /// A write of a run whose lease is gone.
    pub fn fenced(what: &'static str) -> Self {
        PortError::Fenced { what }
    }

    /// A request or stored value `what` that this version cannot use.
    pub fn rejected(what: &'static str, source: impl Into<BoxError>) -> Self {
        PortError::Rejected {
            what,
            source: source.into(),
        }
    }

    /// Every name [`PortError::cause`] gives: the values of the `Cause` dimension of
    /// `IngestUnavailable`, which the webhook's alarm sums over.
    #[cfg(test)]
    pub(crate) const CAUSES: [&'static str; 7] = [
        "unavailable",
        "misconfigured",
        "too_large",
        "fenced",
        "conflict",
        "credited",
        "rejected",
    ];

    /// The short name of the failure, for logs and metrics (`IngestUnavailable` carries it).
    pub fn cause(&self) -> &'static str {
        match self {
            PortError::Unavailable { .. } => "unavailable",
            PortError::Misconfigured { .. } => "misconfigured",
            PortError::TooLarge { .. } => "too_large",
            PortError::Fenced { .. } => "fenced",
            PortError::Conflict { .. } => "conflict",
            PortError::Credited { .. } => "credited",
            PortError::Rejected { .. } => "rejected",
        }
    }
}

/// An error and its sources on one line, for logs: the whole chain, not only the outermost words.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_lists_every_cause_the_errors_give() {
        let errors = [
            PortError::unavailable("x", "e"),
            PortError::misconfigured("x", "e"),
            PortError::too_large("x", "e"),
            PortError::fenced("x"),
            PortError::Conflict {
                what: "x",
                found: 2,
                read: 1,
            },
            PortError::Credited {
                what: "x",
                charge: "c".into(),
            },
            PortError::rejected("x", "e"),
        ];
        // One of each variant: a new one stops this match compiling until it is added above.
        for error in &errors {
            match error {
                PortError::Unavailable { .. }
                | PortError::Misconfigured { .. }
                | PortError::TooLarge { .. }
                | PortError::Fenced { .. }
                | PortError::Conflict { .. }
                | PortError::Credited { .. }
                | PortError::Rejected { .. } => {}
            }
        }
        let given: std::collections::BTreeSet<&str> = errors.iter().map(PortError::cause).collect();
        let listed: std::collections::BTreeSet<&str> = PortError::CAUSES.into_iter().collect();
        assert_eq!(
            given.len(),
            errors.len(),
            "each variant has a cause of its own"
        );
        assert_eq!(listed, given);
    }
}
