//! The audit trail of operators' actions (docs/design/operate.md): every replay and purge by `tgq
//! dlq`, every redrive an operator started in the SQS console, and every refund `tgq payments
//! refund` asked of Telegram (docs/design/payments.md §3), with who, when, what and how it ended.
//! Kept where the records are, for as long as they are.

use std::fmt;
use std::str::FromStr;

use async_trait::async_trait;

use crate::dead::UnknownName;
use crate::error::PortError;
use crate::ids::{BotId, UpdateId};
use crate::record::Timestamp;

/// What an operator did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AuditAction {
    /// `tgq dlq replay`: the update was put back on the updates queue.
    Replay,
    /// `tgq dlq purge`: the letter was deleted.
    Purge,
    /// A dead letter moved back to the updates queue outside tgq (the SQS console), taken by the
    /// worker as a replay.
    Redrive,
    /// `tgq payments refund`: Telegram was asked to give a charge's Stars back.
    Refund,
}

impl AuditAction {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditAction::Replay => "replay",
            AuditAction::Purge => "purge",
            AuditAction::Redrive => "redrive",
            AuditAction::Refund => "refund",
        }
    }
}

impl fmt::Display for AuditAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AuditAction {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            AuditAction::Replay,
            AuditAction::Purge,
            AuditAction::Redrive,
            AuditAction::Refund,
        ]
        .into_iter()
        .find(|a| a.as_str() == s)
        .ok_or_else(|| UnknownName {
            what: "audit action",
            value: s.to_owned(),
        })
    }
}

/// One operator's action on one dead letter, or on one charge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEntry {
    /// When it was done.
    pub at: Timestamp,
    /// Who did it: the caller's IAM identity, the local user, or the SQS console's redrive.
    pub principal: String,
    /// What was done.
    pub action: AuditAction,
    /// The bot of the letter.
    pub bot_id: BotId,
    /// The update, when the letter had one.
    pub update_id: Option<UpdateId>,
    /// The letter's id in the dead-letter queue, when known.
    pub letter_id: Option<String>,
    /// How it ended, in words (never message text).
    pub outcome: String,
    /// When the entry may be deleted: as long as the records are kept.
    pub expires_at: Timestamp,
}

/// Where audit entries are appended.
#[async_trait]
pub trait AuditLog: Send + Sync {
    /// Appends one entry.
    async fn append(&self, entry: &AuditEntry) -> Result<(), PortError>;
}

/// Reads the audit trail back, for `tgq dlq audit`.
#[async_trait]
pub trait AuditReader: Send + Sync {
    /// Up to `max` unexpired entries, newest first.
    async fn recent(&self, max: usize, now: Timestamp) -> Result<Vec<AuditEntry>, PortError>;
}

/// Keeps the newest `max` of unexpired entries, newest first: the reading rule every adapter that
/// holds entries in process applies.
pub fn newest(mut entries: Vec<AuditEntry>, max: usize, now: Timestamp) -> Vec<AuditEntry> {
    entries.retain(|entry| entry.expires_at > now);
    entries.sort_by_key(|entry| std::cmp::Reverse(entry.at));
    entries.truncate(max);
    entries
}
