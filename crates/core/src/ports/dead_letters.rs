//! The dead-letter queue: burying an update, reading the letters, and the operator's hold on one.

use std::time::Duration;

use async_trait::async_trait;

use crate::dead::DeadLetter;
use crate::error::PortError;
use crate::record::Timestamp;

/// Where updates go when they can never be processed.
#[async_trait]
pub trait DeadLetters: Send + Sync {
    /// Sends one letter to the dead-letter queue.
    async fn dead_letter(&self, letter: &DeadLetter) -> Result<(), PortError>;
}

/// Reads the dead-letter queue without consuming it; for operations and tests.
#[async_trait]
pub trait DeadLetterReader: Send + Sync {
    /// Up to `max` letters, oldest first, left on the queue.
    async fn peek(&self, max: usize) -> Result<Vec<DeadLetter>, PortError>;
}

// The operator's ports (docs/design/operate.md): what `tgq dlq` does to records and letters, and
// what the worker needs to take an operator's redrive through the SQS console as a replay.

/// The dead-letter queue's handle on a letter an operator holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LetterHandle(pub String);

/// A dead letter an operator holds: out of sight of other operators' holds until it is released,
/// removed, or the hold ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldLetter {
    /// The letter's id in the queue (SQS's message id; the embedded store's sequence number).
    pub id: String,
    /// The handle to release or remove it by.
    pub handle: LetterHandle,
    /// When it was dead-lettered, when the queue says.
    pub sent_at: Option<Timestamp>,
    /// The letter.
    pub letter: DeadLetter,
}

/// What an operator may do to the dead-letter queue: hold letters to look at them or act on them,
/// release them, remove them.
#[async_trait]
pub trait DeadLetterStore: Send + Sync {
    /// Holds up to `max` letters that nobody holds, oldest first, for at most `hold`. A FIFO queue
    /// gives at most the first ten letters of a chat until those are removed.
    async fn hold(&self, max: usize, hold: Duration) -> Result<Vec<HeldLetter>, PortError>;

    /// Ends a hold: the letter is visible again.
    async fn release(&self, handle: &LetterHandle) -> Result<(), PortError>;

    /// Deletes a held letter.
    async fn remove(&self, handle: &LetterHandle) -> Result<(), PortError>;

    /// About how many letters the queue holds, held ones included.
    async fn depth(&self) -> Result<u64, PortError>;
}
