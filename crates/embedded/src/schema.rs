//! The redb tables and how values are laid out in them.
//!
//! Values that carry raw bytes (a record's payload, a message or letter body) are framed as
//! `u32 LE length of the metadata | metadata JSON | raw bytes`, so the bytes come back exactly as they
//! were received and the metadata stays readable with any JSON tool.

use std::collections::BTreeMap;

use bytes::Bytes;
use redb::TableDefinition;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tgq_core::dead::{Burial, DeadLetter};
use tgq_core::ids::{BotId, GroupKey, RecordKey, UpdateId};
use tgq_core::record::{ActionRecord, Status, Timestamp, UpdateRecord};
use tgq_core::state::StoredState;

/// The layout version written into a new database; a file with another version is refused.
///
/// Version 2 keeps each queue message's state and body in one value, the dedup window in one
/// time-ordered table, and the counters with the sequences: a busy commit touches five tables
/// instead of eight, and each table a commit touches costs it pages to copy, checksum and write.
/// Version 3 records actions with their delivery and a compact outcome, the runs' fencing and
/// throttling, and the burial of a dead record; dead letters name their reason from a closed set.
/// Version 4 adds the group states and steps' JSON results. Version 5 adds the pollers' leases and
/// their offset checkpoints. Version 6 adds the timers and the chats' timer part of their state.
/// Version 7 adds the broadcasts. Version 8 adds the payments ledger. A file of version 3 to 7 is
/// upgraded in place when it is opened: it only lacks tables, and nothing it holds changes meaning.
/// An older tgq refuses a file of version 8, whose ledger it would not keep.
pub(crate) const SCHEMA_VERSION: u64 = 8;
/// The earlier versions a file is upgraded from in place.
pub(crate) const UPGRADABLE_FROM: [u64; 5] = [3, 4, 5, 6, 7];

/// Update records by `RecordKey::pk()`: framed `StoredRecord` + payload.
pub(crate) const RECORDS: TableDefinition<&str, &[u8]> = TableDefinition::new("records");
/// `(expires_at, pk)` for every record, so retention finds expired records without a scan.
pub(crate) const RECORD_EXPIRY: TableDefinition<(u64, &str), ()> =
    TableDefinition::new("record_expiry");
/// Group states by `StateKey::pk()`: framed `StoredStateMeta` + the value's JSON. Kept until the
/// bot changes them; retention does not touch them.
pub(crate) const STATES: TableDefinition<&str, &[u8]> = TableDefinition::new("states");
/// The payments ledger by `charge_pk`: each charge as JSON, kept until removed.
pub(crate) const CHARGES: TableDefinition<&str, &[u8]> = TableDefinition::new("charges");
/// Queue messages by send sequence: framed `QueuedMessage` + body (the state is rewritten on every
/// receive; the body comes along, which costs less than a second table in every commit).
pub(crate) const QUEUE: TableDefinition<u64, &[u8]> = TableDefinition::new("queue");
/// The dedup window in time order, `(sent_at, dedup id)`: ids leave from the front, and the writer
/// keeps the ids themselves in memory for lookups.
pub(crate) const DEDUP: TableDefinition<(u64, &str), ()> = TableDefinition::new("dedup");
/// Dead letters in arrival order: framed `StoredLetter` + body.
pub(crate) const DEAD: TableDefinition<u64, &[u8]> = TableDefinition::new("dead_letters");
/// The dedup id of every letter in [`DEAD`] (`DeadLetter::dedup_id`) → its id there: a letter sent
/// again while the first is kept (a run that crashed between its letter and its delete) is kept
/// once, as SQS FIFO's deduplication keeps it once on AWS. Removed with its letter.
pub(crate) const DEAD_IDS: TableDefinition<&str, u64> = TableDefinition::new("dead_letter_ids");
/// The offline outbox by entry id: `StoredOutboxEntry` JSON.
pub(crate) const OUTBOX: TableDefinition<u64, &[u8]> = TableDefinition::new("outbox");
/// The audit trail of operators' actions on dead letters, in time order: `StoredAuditEntry` JSON.
/// Opening a file creates the table when it is missing (it came after schema 3 was released).
pub(crate) const AUDIT: TableDefinition<u64, &[u8]> = TableDefinition::new("audit");
/// The pollers' leases by bot id: `StoredLease` JSON (docs/design/fleet.md §1). Kept for good: the
/// token must keep growing, and the offset checkpoint is what a new leader resumes from.
pub(crate) const POLLER_LEASES: TableDefinition<&str, &[u8]> =
    TableDefinition::new("poller_leases");
/// Named numbers: the schema version, the next values of the id sequences, and the durable totals.
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// Timers kept until due, in due order, `(due, dedup id)`: framed `StoredTimer` + the timer
/// update's body. The timer loop takes them from the front.
pub(crate) const TIMERS: TableDefinition<(u64, &str), &[u8]> = TableDefinition::new("timers");
/// The kept timers' dedup ids, with when each is due: a timer handed over again is kept once.
pub(crate) const TIMER_IDS: TableDefinition<&str, u64> = TableDefinition::new("timer_ids");
/// Broadcast jobs by id: `StoredJob` JSON (the job and its cursor).
pub(crate) const BROADCASTS: TableDefinition<u64, &[u8]> = TableDefinition::new("broadcasts");
/// Each job's recipients by `(job, index)`: `Recipient` JSON.
pub(crate) const BROADCAST_RECIPIENTS: TableDefinition<(u64, u64), &[u8]> =
    TableDefinition::new("broadcast_recipients");
/// The recipients waiting for another try, `(job, due, index)`.
pub(crate) const BROADCAST_RETRIES: TableDefinition<(u64, u64, u64), ()> =
    TableDefinition::new("broadcast_retries");
/// The recipients whose send began and has no outcome yet, `(job, index)`.
pub(crate) const BROADCAST_BEGUN: TableDefinition<(u64, u64), ()> =
    TableDefinition::new("broadcast_begun");
/// The job a handler's start made, by its origin: a retried run finds it.
pub(crate) const BROADCAST_ORIGINS: TableDefinition<&str, u64> =
    TableDefinition::new("broadcast_origins");
/// Where schema 1 kept its version (and sequences), to recognise a file of that layout.
pub(crate) const SCHEMA_1_SEQUENCES: &str = "sequences";

/// Sequence names in [`META`].
pub(crate) mod seq {
    /// The layout version of the file.
    pub(crate) const SCHEMA: &str = "schema";
    /// Queue send order.
    pub(crate) const QUEUE: &str = "seq.queue";
    /// Dead-letter arrival order.
    pub(crate) const DEAD: &str = "seq.dead";
    /// Outbox entry ids (also the offline message ids, so they never repeat).
    pub(crate) const OUTBOX: &str = "seq.outbox";
    /// Audit entry order.
    pub(crate) const AUDIT: &str = "seq.audit";
    /// Broadcast job ids.
    pub(crate) const BROADCAST: &str = "seq.broadcast";
    /// The oldest broadcast job that may not have ended: every job before it has (absent: 1).
    /// Not a sequence: it moves back when a job that ended runs again.
    pub(crate) const BROADCAST_FIRST_OPEN: &str = "broadcast.first_open";
}

/// Counter names in [`META`].
pub(crate) mod counter {
    pub(crate) const RECEIVED: &str = "count.received";
    pub(crate) const DUPLICATES: &str = "count.duplicates";
    pub(crate) const POISON: &str = "count.poison";
    pub(crate) const PROCESSED: &str = "count.processed";
    pub(crate) const RETRIED: &str = "count.retried";
    pub(crate) const DEAD_LETTERED: &str = "count.dead_lettered";
    pub(crate) const RESENT: &str = "count.resent_after_unknown_outcome";
    pub(crate) const UNCERTAIN: &str = "count.uncertain_sends";
    pub(crate) const FENCED: &str = "count.fenced_writes";
    pub(crate) const RECIPIENT_GONE: &str = "count.recipient_gone";
}

/// A stored value that cannot be read back.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CodecError {
    #[error("stored value is shorter than its frame says")]
    Truncated,
    #[error("stored metadata is not valid JSON")]
    Json(#[from] serde_json::Error),
    #[error("stored value names an unknown {0}")]
    Invalid(String),
}

/// Frames metadata and raw bytes into one value.
pub(crate) fn frame<M: Serialize>(meta: &M, body: &[u8]) -> Result<Vec<u8>, CodecError> {
    let meta = serde_json::to_vec(meta)?;
    let len = u32::try_from(meta.len()).map_err(|_| CodecError::Invalid("frame size".into()))?;
    let mut out = Vec::with_capacity(4 + meta.len() + body.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&meta);
    out.extend_from_slice(body);
    Ok(out)
}

/// Splits a framed value into its metadata and its raw bytes.
pub(crate) fn unframe<M: DeserializeOwned>(value: &[u8]) -> Result<(M, &[u8]), CodecError> {
    let (len, rest) = value.split_at_checked(4).ok_or(CodecError::Truncated)?;
    let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
    let (meta, body) = rest.split_at_checked(len).ok_or(CodecError::Truncated)?;
    Ok((serde_json::from_slice(meta)?, body))
}

/// An update record's fields besides its payload.
#[derive(Serialize, Deserialize)]
struct StoredRecord {
    bot_id: String,
    update_id: i64,
    status: String,
    group: String,
    received_at: u64,
    attempts: u32,
    throttled: u32,
    first_attempt_at: Option<u64>,
    last_error: Option<String>,
    lease_until: Option<u64>,
    actions: BTreeMap<u32, ActionRecord>,
    burial: Option<StoredBurial>,
    expires_at: u64,
}

/// A burial, its reason and class in their stored spelling.
#[derive(Serialize, Deserialize)]
struct StoredBurial {
    reason: String,
    class: String,
    error: String,
    attempts: u32,
}

impl From<&Burial> for StoredBurial {
    fn from(burial: &Burial) -> Self {
        Self {
            reason: burial.reason.as_str().to_owned(),
            class: burial.class.as_str().to_owned(),
            error: burial.error.clone(),
            attempts: burial.attempts,
        }
    }
}

impl TryFrom<StoredBurial> for Burial {
    type Error = CodecError;

    fn try_from(stored: StoredBurial) -> Result<Self, CodecError> {
        Ok(Self {
            reason: stored.reason.parse().map_err(invalid)?,
            class: stored.class.parse().map_err(invalid)?,
            error: stored.error,
            attempts: stored.attempts,
        })
    }
}

fn invalid(e: impl std::fmt::Display) -> CodecError {
    CodecError::Invalid(e.to_string())
}

/// The stored form of a record.
pub(crate) fn encode_record(record: &UpdateRecord) -> Result<Vec<u8>, CodecError> {
    let meta = StoredRecord {
        bot_id: record.key.bot_id.as_str().to_owned(),
        update_id: record.key.update_id.0,
        status: record.status.as_str().to_owned(),
        group: record.group.as_str().to_owned(),
        received_at: record.received_at.0,
        attempts: record.attempts,
        throttled: record.throttled,
        first_attempt_at: record.first_attempt_at.map(|t| t.0),
        last_error: record.last_error.clone(),
        lease_until: record.lease_until.map(|t| t.0),
        actions: record.actions.clone(),
        burial: record.burial.as_ref().map(StoredBurial::from),
        expires_at: record.expires_at.0,
    };
    frame(&meta, &record.payload)
}

/// A record read back.
pub(crate) fn decode_record(value: &[u8]) -> Result<UpdateRecord, CodecError> {
    let (meta, payload) = unframe::<StoredRecord>(value)?;
    Ok(UpdateRecord {
        key: RecordKey::new(
            BotId::new(meta.bot_id).map_err(invalid)?,
            UpdateId(meta.update_id),
        ),
        status: meta.status.parse::<Status>().map_err(invalid)?,
        payload: Bytes::copy_from_slice(payload),
        group: GroupKey::new(meta.group),
        received_at: Timestamp(meta.received_at),
        attempts: meta.attempts,
        throttled: meta.throttled,
        first_attempt_at: meta.first_attempt_at.map(Timestamp),
        last_error: meta.last_error,
        lease_until: meta.lease_until.map(Timestamp),
        actions: meta.actions,
        burial: meta.burial.map(Burial::try_from).transpose()?,
        expires_at: Timestamp(meta.expires_at),
    })
}

/// A group state's fields besides its JSON.
#[derive(Serialize, Deserialize)]
struct StoredStateMeta {
    format: String,
    version: u64,
    /// tgq's part of the state (timers, flow); absent in files of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    time: Option<String>,
}

/// The stored form of a group state.
pub(crate) fn encode_state(state: &StoredState) -> Result<Vec<u8>, CodecError> {
    let meta = StoredStateMeta {
        format: state.format.clone(),
        version: state.version,
        time: state.time.clone(),
    };
    frame(&meta, state.json.as_bytes())
}

/// A group state read back.
pub(crate) fn decode_state(value: &[u8]) -> Result<StoredState, CodecError> {
    let (meta, json) = unframe::<StoredStateMeta>(value)?;
    Ok(StoredState {
        format: meta.format,
        json: String::from_utf8(json.to_vec()).map_err(invalid)?,
        version: meta.version,
        time: meta.time,
    })
}

/// A dead letter's fields besides its body.
#[derive(Serialize, Deserialize)]
struct StoredLetter {
    bot_id: String,
    update_id: Option<i64>,
    group: Option<String>,
    reason: String,
    error_class: String,
    error: String,
    attempts: u32,
    /// When the letter arrived, in milliseconds (absent in letters of earlier versions).
    #[serde(default)]
    sent_at: Option<u64>,
}

/// The stored form of a dead letter that arrived at `sent_at`.
pub(crate) fn encode_letter(
    letter: &DeadLetter,
    sent_at: Timestamp,
) -> Result<Vec<u8>, CodecError> {
    let meta = StoredLetter {
        bot_id: letter.bot_id.as_str().to_owned(),
        update_id: letter.update_id.map(|id| id.0),
        group: letter.group.as_ref().map(|g| g.as_str().to_owned()),
        reason: letter.reason.as_str().to_owned(),
        error_class: letter.error_class.as_str().to_owned(),
        error: letter.error.clone(),
        attempts: letter.attempts,
        sent_at: Some(sent_at.0),
    };
    frame(&meta, &letter.body)
}

/// A dead letter read back.
pub(crate) fn decode_letter(value: &[u8]) -> Result<DeadLetter, CodecError> {
    decode_letter_sent(value).map(|(letter, _)| letter)
}

/// A dead letter read back, with when it arrived when the store knows.
pub(crate) fn decode_letter_sent(
    value: &[u8],
) -> Result<(DeadLetter, Option<Timestamp>), CodecError> {
    let (meta, body) = unframe::<StoredLetter>(value)?;
    let sent_at = meta.sent_at.map(Timestamp);
    let letter = DeadLetter {
        bot_id: BotId::new(meta.bot_id).map_err(invalid)?,
        update_id: meta.update_id.map(UpdateId),
        group: meta.group.map(GroupKey::new),
        body: Bytes::copy_from_slice(body),
        reason: meta.reason.parse().map_err(invalid)?,
        error_class: meta.error_class.parse().map_err(invalid)?,
        error: meta.error,
        attempts: meta.attempts,
    };
    Ok((letter, sent_at))
}

/// One offline Bot API call as the outbox keeps it; the id is the table key.
#[derive(Serialize, Deserialize)]
pub(crate) struct StoredOutboxEntry {
    /// The bot whose run made the call (absent in entries written before bots were told apart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) bot_id: Option<String>,
    pub(crate) chat_id: Option<i64>,
    pub(crate) update_id: Option<i64>,
    pub(crate) seq: Option<u32>,
    pub(crate) method: String,
    pub(crate) text: Option<String>,
    pub(crate) params: serde_json::Value,
    pub(crate) at: u64,
}

/// An outbox entry read back.
pub(crate) fn decode_outbox_entry(value: &[u8]) -> Result<StoredOutboxEntry, CodecError> {
    Ok(serde_json::from_slice(value)?)
}
