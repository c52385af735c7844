//! The JSON views of local mode's admin routes and of the operations commands: what `tgq local`
//! serves and what `tgq status`, `tgq outbox` and `tgq dlq` print (`--json`) and read back, the
//! same typed structs on both sides and for both targets (AWS and local).

use serde::{Deserialize, Serialize};
use tgq_core::audit::AuditEntry;
use tgq_core::operate::{ListedLetter, Report, Selection};
use tgq_core::record::Timestamp;
use tgq_embedded::{Counters, EmbeddedStore, OldestPending, OutboxEntry, StoreStats};

/// `GET /admin/status`, `tgq status --json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatusView {
    /// Queue depths and table sizes.
    pub stats: StoreStats,
    /// The oldest message on the queue and what its record says: the chat it holds back, its last
    /// error and when it runs again.
    #[serde(default)]
    pub oldest: Option<OldestPending>,
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

/// One dead letter as `tgq dlq list` and `tgq dlq show` print it; the update's body only in `show`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LetterView {
    /// The letter's id in the dead-letter queue: what `show`, `replay` and `purge` take.
    pub id: String,
    /// The bot it was addressed to.
    pub bot_id: String,
    /// The update id, when the body had one.
    pub update_id: Option<i64>,
    /// The original group, when known.
    pub group: Option<String>,
    /// Why it is dead, as stored (`poison`, `permanent_error`, …).
    pub reason: String,
    /// Why it is dead, in words.
    pub reason_text: String,
    /// The error class.
    pub error_class: String,
    /// The error's description.
    pub error: String,
    /// Handler runs spent on it.
    pub attempts: u32,
    /// When it was dead-lettered (epoch milliseconds), when the queue says.
    pub sent_at: Option<u64>,
    /// How long ago that was, in milliseconds.
    pub age_ms: Option<u64>,
    /// The update's body, lossily as text: only in `show`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

impl LetterView {
    /// The view of a listed letter at `now`, with its body or without.
    pub fn of(listed: &ListedLetter, now: Timestamp, with_body: bool) -> Self {
        let letter = &listed.letter;
        Self {
            id: listed.id.clone(),
            bot_id: letter.bot_id.to_string(),
            update_id: letter.update_id.map(|id| id.0),
            group: letter.group.as_ref().map(ToString::to_string),
            reason: letter.reason.to_string(),
            reason_text: letter.reason.describe().to_owned(),
            error_class: letter.error_class.to_string(),
            error: letter.error.clone(),
            attempts: letter.attempts,
            sent_at: listed.sent_at.map(|t| t.0),
            age_ms: listed
                .sent_at
                .map(|t| u64::try_from(now.since(t).as_millis()).unwrap_or(u64::MAX)),
            body: with_body.then(|| String::from_utf8_lossy(&letter.body).into_owned()),
        }
    }
}

/// What `tgq dlq replay` or `purge` asks a running `tgq local` to do (`POST /admin/dlq/replay`,
/// `/admin/dlq/purge`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActRequest {
    /// The letters, by id; empty with `all`.
    pub ids: Vec<String>,
    /// Every letter.
    pub all: bool,
    /// Check, change nothing (replay only).
    pub dry_run: bool,
    /// Replay letters whose record is gone too (replay only).
    #[serde(default)]
    pub force: bool,
    /// Who asks, for the audit trail.
    pub principal: String,
}

impl ActRequest {
    /// How a replay the request asks for goes.
    pub fn replay(&self) -> tgq_core::operate::Replay {
        tgq_core::operate::Replay {
            dry_run: self.dry_run,
            force: self.force,
        }
    }

    /// The letters the request names.
    pub fn selection(&self) -> Selection {
        match self.all {
            true => Selection::All,
            false => Selection::Ids(self.ids.iter().cloned().collect()),
        }
    }
}

/// What a replay or purge came to, as printed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportView {
    /// Nothing was changed.
    pub dry_run: bool,
    /// The letters acted on.
    pub acted: Vec<LetterOutcome>,
    /// The letters that could not be acted on.
    pub skipped: Vec<LetterOutcome>,
    /// Why the walk stopped early, when the queue failed.
    pub stopped: Option<String>,
}

/// One letter of a report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LetterOutcome {
    /// The letter's id.
    pub id: String,
    /// Its update, when known.
    pub update_id: Option<i64>,
    /// What was done, or why not.
    pub detail: String,
}

impl ReportView {
    /// The view of a report.
    pub fn of(report: &Report, dry_run: bool) -> Self {
        Self {
            dry_run,
            acted: report
                .acted
                .iter()
                .map(|a| LetterOutcome {
                    id: a.id.clone(),
                    update_id: a.update_id.map(|id| id.0),
                    detail: a.detail.clone(),
                })
                .collect(),
            skipped: report
                .skipped
                .iter()
                .map(|s| LetterOutcome {
                    id: s.id.clone(),
                    update_id: s.update_id.map(|id| id.0),
                    detail: s.why.clone(),
                })
                .collect(),
            stopped: report.stopped.clone(),
        }
    }
}

/// One audit entry as `tgq dlq audit` prints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditView {
    /// When (epoch milliseconds).
    pub at: u64,
    /// Who.
    pub principal: String,
    /// `replay`, `purge` or `redrive`.
    pub action: String,
    /// The letter's bot.
    pub bot_id: String,
    /// The update, when the letter had one.
    pub update_id: Option<i64>,
    /// The letter's id, when known.
    pub letter_id: Option<String>,
    /// How it ended.
    pub outcome: String,
}

impl From<&AuditEntry> for AuditView {
    fn from(entry: &AuditEntry) -> Self {
        Self {
            at: entry.at.0,
            principal: entry.principal.clone(),
            action: entry.action.to_string(),
            bot_id: entry.bot_id.to_string(),
            update_id: entry.update_id.map(|id| id.0),
            letter_id: entry.letter_id.clone(),
            outcome: entry.outcome.clone(),
        }
    }
}

impl StatusView {
    /// Reads the status from the store. Blocking.
    pub fn read(store: &EmbeddedStore, now: Timestamp) -> anyhow::Result<Self> {
        Ok(Self {
            stats: store.stats(now)?,
            oldest: store.oldest_pending(now)?,
            counters: store.counters()?,
            writer: WriterView {
                commits: store.commits(),
                operations: store.ops_committed(),
            },
        })
    }
}

/// Up to `limit` outbox entries, oldest first. Blocking.
pub fn outbox(store: &EmbeddedStore, after: u64, limit: usize) -> anyhow::Result<Vec<OutboxEntry>> {
    Ok(store.outbox_after(after, limit)?)
}
