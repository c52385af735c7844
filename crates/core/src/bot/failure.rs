//! Why a handler run failed ([`HandlerError`]), and how the worker weighs it: the one place each
//! failure gets its class (docs/design/worker.md §1). [`crate::handler::Handler::handle`] returns
//! it, and so does every send through [`crate::Context`].

use crate::error::{ErrorClass, PortError};
use crate::state::StateError;
use crate::telegram::{Gone, TelegramError};
use crate::timer::TimerError;

/// Why a handler run failed. Bot authors return it from [`crate::handler::Handler::handle`].
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// A Bot API call failed; its class follows Telegram's answer.
    #[error(transparent)]
    Telegram(#[from] TelegramError),
    /// A Bot API call's recipient is gone for good ([`TelegramError::recipient_gone`]): by default
    /// the update settles `DONE` as `recipient_gone` instead of being dead-lettered
    /// (`TGQ_DEAD_LETTER_GONE_RECIPIENTS`). A handler that writes to several chats can match it
    /// ([`HandlerError::recipient_gone`]) and go on with the others.
    #[error("the recipient is gone ({gone}): {error}")]
    RecipientGone {
        /// Why.
        gone: Gone,
        /// Telegram's answer.
        #[source]
        error: TelegramError,
    },
    /// The chat's state could not be read or written as the handler asked (a changed type, a value
    /// over the size limit): a mistake retrying cannot fix.
    #[error(transparent)]
    State(#[from] StateError),
    /// A timer could not be scheduled as asked (over a limit, or from an update with no chat): a
    /// mistake in the bot, never worth a retry.
    #[error(transparent)]
    Timer(#[from] TimerError),
    /// The store could not record an action (or refused it: see [`PortError`]).
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
    /// The update could not be read into Telegram's types (a parse error, or a parser that
    /// panicked): no retry reads it better, so it is dead-lettered as `unreadable` on its first
    /// run (docs/design/webhook.md). tgq returns it; a handler never sees the update.
    #[error("the update cannot be read: {0}")]
    Unreadable(String),
    /// The run reached the invocation's deadline less the margin and was cut off.
    #[error("the run was cut off at the invocation's deadline")]
    Deadline,
    /// Telegram's pacing would have the next send wait longer than the run may: the update goes
    /// back to the queue for that long, which costs it no attempt.
    #[error("Telegram's pacing holds the bot's sends for {} ms", .0.as_millis())]
    Paced(std::time::Duration),
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

    /// Why the recipient of a call is gone, if that is what failed.
    pub(crate) fn recipient_gone(&self) -> Option<Gone> {
        match self {
            HandlerError::RecipientGone { gone, .. } => Some(*gone),
            _ => None,
        }
    }

    /// Whether the run stopped because another run took its lease over: not a failure of this
    /// update, and nothing more may be written or sent for it by this run.
    pub(crate) fn is_fenced(&self) -> bool {
        matches!(self, HandlerError::Store(PortError::Fenced { .. }))
    }

    /// Whether the run stopped because the store refused one of its writes for now — throttled,
    /// down, or set up wrong: the store's trouble, not the update's, so like a refused claim it
    /// spends no attempt.
    pub(crate) fn is_store_trouble(&self) -> bool {
        matches!(
            self,
            HandlerError::Store(PortError::Unavailable { .. } | PortError::Misconfigured { .. })
        )
    }

    /// Decides retryability: every class is settled here, nowhere else.
    pub(crate) fn class(&self) -> ErrorClass {
        match self {
            HandlerError::Telegram(e) => e.class(),
            // Dead-lettered as permanent only when TGQ_DEAD_LETTER_GONE_RECIPIENTS asks for it.
            HandlerError::RecipientGone { .. }
            | HandlerError::State(_)
            | HandlerError::Timer(_) => ErrorClass::Permanent,
            // The record cannot hold what the run did: every retry would end the same way.
            HandlerError::Store(PortError::TooLarge { .. }) => ErrorClass::Permanent,
            // Any other store failure loses nothing if the run is retried; a misconfigured stack
            // is an operator's to fix, never a reason to give up on the update.
            HandlerError::Store(_) => ErrorClass::Transient,
            HandlerError::Transient(_) | HandlerError::Panicked(_) | HandlerError::Deadline => {
                ErrorClass::Transient
            }
            HandlerError::Permanent(_) | HandlerError::Unreadable(_) => ErrorClass::Permanent,
            HandlerError::Paced(wait) => ErrorClass::RateLimited(*wait),
        }
    }
}

impl From<crate::upload::UploadError> for HandlerError {
    /// A file Telegram would not take, or that is not there, fails the update for good: retrying
    /// reads the same file.
    fn from(error: crate::upload::UploadError) -> Self {
        HandlerError::permanent(error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::HandlerError;

    #[test]
    fn a_pacing_wait_under_a_second_is_told_in_milliseconds() {
        // Whole seconds told every wait the worker gives back (250 ms to 2 s) as "0s" or "1s".
        let paced = HandlerError::Paced(Duration::from_millis(1884));
        assert_eq!(
            paced.to_string(),
            "Telegram's pacing holds the bot's sends for 1884 ms"
        );
    }
}
