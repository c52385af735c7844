//! The JSON views of local mode's admin routes: what `tgq local` serves and what `tgq status`,
//! `tgq outbox` and `tgq dlq` read back, the same typed structs on both sides.

use serde::{Deserialize, Serialize};
use tgq_core::ports::DeadLetter;
use tgq_core::record::Timestamp;
use tgq_embedded::{Counters, EmbeddedStore, OutboxEntry, StoreStats};

/// `GET /admin/status`, `tgq status --json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatusView {
    /// Queue depths and table sizes.
    pub stats: StoreStats,
    /// The durable totals.
    pub counters: Counters,
    /// The writer's group commits since this process opened the store: operations per commit
    /// shows how well concurrent writes share an fsync.
    pub writer: WriterView,
}

/// The writer's commits and the operations they carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriterView {
    /// Write transactions committed.
    pub commits: u64,
    /// Operations those commits carried.
    pub operations: u64,
}

/// One dead letter as `tgq dlq list` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetterView {
    /// The bot it was addressed to.
    pub bot_id: String,
    /// The update id, when the body had one.
    pub update_id: Option<i64>,
    /// The original group, when known.
    pub group: Option<String>,
    /// Why it is dead.
    pub reason: String,
    /// The error class.
    pub error_class: String,
    /// The error's description.
    pub error: String,
    /// Handler runs spent on it.
    pub attempts: u32,
    /// The body, lossily as text.
    pub body: String,
}

impl From<&DeadLetter> for DeadLetterView {
    fn from(letter: &DeadLetter) -> Self {
        Self {
            bot_id: letter.bot_id.to_string(),
            update_id: letter.update_id.map(|id| id.0),
            group: letter.group.as_ref().map(ToString::to_string),
            reason: letter.reason.to_string(),
            error_class: letter.error_class.to_string(),
            error: letter.error.clone(),
            attempts: letter.attempts,
            body: String::from_utf8_lossy(&letter.body).into_owned(),
        }
    }
}

impl StatusView {
    /// Reads the status from the store. Blocking.
    pub fn read(store: &EmbeddedStore, now: Timestamp) -> anyhow::Result<Self> {
        Ok(Self {
            stats: store.stats(now)?,
            counters: store.counters()?,
            writer: WriterView {
                commits: store.commits(),
                operations: store.ops_committed(),
            },
        })
    }
}

/// Up to `limit` outbox entries, oldest first. Blocking.
pub fn outbox(store: &EmbeddedStore, limit: usize) -> anyhow::Result<Vec<OutboxEntry>> {
    Ok(store.outbox(limit)?)
}

/// Up to `limit` dead letters, oldest first. Blocking.
pub fn dead_letters(store: &EmbeddedStore, limit: usize) -> anyhow::Result<Vec<DeadLetterView>> {
    Ok(store
        .dead_letters(limit)?
        .iter()
        .map(DeadLetterView::from)
        .collect())
}
