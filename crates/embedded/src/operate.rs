//! The operator's ports on the embedded store (docs/design/operate.md): restarting a record for a
//! replay, the audit trail, and holding, releasing and removing dead letters. Writes go through the
//! writer like every other; holds live in the process that holds the store's lock, which is the
//! only one that can act on its letters.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use redb::{ReadableTable, ReadableTableMetadata};
use serde::{Deserialize, Serialize};
use tgq_core::audit::{newest, AuditEntry, AuditLog, AuditReader};
use tgq_core::ids::{BotId, UpdateId};
use tgq_core::ports::{
    DeadLetterStore, HeldLetter, LetterHandle, Reset, ResetRequest, UpdateReset,
};
use tgq_core::record::Timestamp;
use tgq_core::PortError;

use crate::schema::{
    decode_letter_sent, decode_record, encode_record, seq, AUDIT, DEAD, DEAD_IDS, RECORDS,
};
use crate::writer::{OpError, Tx};
use crate::{EmbeddedStore, StoreError};

/// An audit entry as the store keeps it.
#[derive(Serialize, Deserialize)]
struct StoredAuditEntry {
    at: u64,
    principal: String,
    action: String,
    bot_id: String,
    update_id: Option<i64>,
    letter_id: Option<String>,
    outcome: String,
    expires_at: u64,
}

impl From<&AuditEntry> for StoredAuditEntry {
    fn from(entry: &AuditEntry) -> Self {
        Self {
            at: entry.at.0,
            principal: entry.principal.clone(),
            action: entry.action.as_str().to_owned(),
            bot_id: entry.bot_id.as_str().to_owned(),
            update_id: entry.update_id.map(|id| id.0),
            letter_id: entry.letter_id.clone(),
            outcome: entry.outcome.clone(),
            expires_at: entry.expires_at.0,
        }
    }
}

impl TryFrom<StoredAuditEntry> for AuditEntry {
    type Error = String;

    fn try_from(stored: StoredAuditEntry) -> Result<Self, String> {
        Ok(Self {
            at: Timestamp(stored.at),
            principal: stored.principal,
            action: stored.action.parse().map_err(|e| format!("{e}"))?,
            bot_id: BotId::new(stored.bot_id).map_err(|e| e.to_string())?,
            update_id: stored.update_id.map(UpdateId),
            letter_id: stored.letter_id,
            outcome: stored.outcome,
            expires_at: Timestamp(stored.expires_at),
        })
    }
}

impl Tx<'_> {
    /// Restarts a record if the request's rule allows it.
    fn reset(&mut self, request: &ResetRequest) -> Result<Reset, OpError> {
        let pk = request.key.pk();
        let stored = match self.table(RECORDS)?.get(pk.as_str())? {
            Some(value) => Some(decode_record(value.value())?),
            None => None,
        };
        let (reset, updated) = request.apply(stored);
        if let Some(record) = updated {
            // The expiry stays as it was, so the expiry index needs no change.
            let value = encode_record(&record).map_err(|e| OpError::Fatal(e.to_string()))?;
            self.table_mut(RECORDS)?
                .insert(pk.as_str(), value.as_slice())?;
            self.journal_record(&record, None);
        }
        Ok(reset)
    }

    /// Appends an audit entry.
    fn append_audit(&mut self, entry: &AuditEntry) -> Result<(), OpError> {
        let value = serde_json::to_vec(&StoredAuditEntry::from(entry))
            .map_err(|e| OpError::Fatal(format!("encoding an audit entry: {e}")))?;
        let id = self.next_in(seq::AUDIT)?;
        self.table_mut(AUDIT)?.insert(id, value.as_slice())?;
        Ok(())
    }

    /// Removes audit entries that expired at or before `now`, from the front (they are in time
    /// order, and all are kept equally long).
    pub(crate) fn purge_audit(&mut self, now: Timestamp) -> Result<u64, OpError> {
        let mut expired = Vec::new();
        for entry in self.table(AUDIT)?.iter()? {
            let (id, value) = entry?;
            let stored: StoredAuditEntry = serde_json::from_slice(value.value())
                .map_err(|e| OpError::Rejected(e.to_string()))?;
            if stored.expires_at > now.0 {
                break;
            }
            expired.push(id.value());
        }
        let mut table = self.table_mut(AUDIT)?;
        for id in &expired {
            table.remove(*id)?;
        }
        Ok(expired.len() as u64)
    }

    /// Deletes one dead letter; a letter already gone is not an error.
    fn remove_letter(&mut self, id: u64) -> Result<(), OpError> {
        let removed = match self.table_mut(DEAD)?.remove(id)? {
            Some(value) => Some(
                decode_letter_sent(value.value())
                    .map_err(|e| OpError::Fatal(e.to_string()))?
                    .0,
            ),
            None => None,
        };
        if let Some(letter) = removed {
            self.table_mut(DEAD_IDS)?
                .remove(letter.dedup_id().as_str())?;
        }
        Ok(())
    }
}

fn letter_id(handle: &LetterHandle) -> Result<u64, PortError> {
    handle
        .0
        .parse()
        .map_err(|_| PortError::rejected("dead-letter handle", "not a letter id"))
}

#[async_trait]
impl UpdateReset for EmbeddedStore {
    async fn reset(&self, request: &ResetRequest) -> Result<Reset, PortError> {
        let request = request.clone();
        self.writer
            .run("store reset", move |tx| tx.reset(&request))
            .await
    }
}

#[async_trait]
impl AuditLog for EmbeddedStore {
    async fn append(&self, entry: &AuditEntry) -> Result<(), PortError> {
        let entry = entry.clone();
        self.writer
            .run("audit append", move |tx| tx.append_audit(&entry))
            .await
    }
}

#[async_trait]
impl AuditReader for EmbeddedStore {
    async fn recent(&self, max: usize, now: Timestamp) -> Result<Vec<AuditEntry>, PortError> {
        let db = self.db.clone();
        let read = move || -> Result<Vec<AuditEntry>, StoreError> {
            let read = db.get()?.begin_read()?;
            let table = read.open_table(AUDIT)?;
            let mut entries = Vec::new();
            for entry in table.iter()? {
                let (id, value) = entry?;
                let corrupt = |reason: String| StoreError::Corrupt {
                    what: format!("audit entry {}", id.value()),
                    reason,
                };
                let stored: StoredAuditEntry =
                    serde_json::from_slice(value.value()).map_err(|e| corrupt(e.to_string()))?;
                entries.push(AuditEntry::try_from(stored).map_err(corrupt)?);
            }
            Ok(entries)
        };
        let entries = tokio::task::spawn_blocking(read)
            .await
            .map_err(|e| PortError::unavailable("audit read", e))?
            .map_err(|e| PortError::unavailable("audit read", e))?;
        Ok(newest(entries, max, now))
    }
}

#[async_trait]
impl DeadLetterStore for EmbeddedStore {
    async fn hold(&self, max: usize, hold: Duration) -> Result<Vec<HeldLetter>, PortError> {
        let now = Instant::now();
        let held: Vec<u64> = {
            let mut holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
            holds.retain(|_, until| *until > now);
            holds.keys().copied().collect()
        };
        let db = self.db.clone();
        let read = move || -> Result<Vec<HeldLetter>, StoreError> {
            let read = db.get()?.begin_read()?;
            let table = read.open_table(DEAD)?;
            let mut taken = Vec::new();
            for entry in table.range::<u64>(..)? {
                if taken.len() >= max {
                    break;
                }
                let (id, value) = entry?;
                let id = id.value();
                if held.contains(&id) {
                    continue;
                }
                let (letter, sent_at) = decode_letter_sent(value.value())
                    .map_err(StoreError::corrupt(format!("dead letter {id}")))?;
                taken.push(HeldLetter {
                    id: id.to_string(),
                    handle: LetterHandle(id.to_string()),
                    sent_at,
                    letter,
                });
            }
            Ok(taken)
        };
        let taken = tokio::task::spawn_blocking(read)
            .await
            .map_err(|e| PortError::unavailable("dead-letter hold", e))?
            .map_err(|e| PortError::unavailable("dead-letter hold", e))?;
        let mut holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        for letter in &taken {
            holds.insert(letter_id(&letter.handle)?, now + hold);
        }
        Ok(taken)
    }

    async fn release(&self, handle: &LetterHandle) -> Result<(), PortError> {
        let id = letter_id(handle)?;
        self.holds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        Ok(())
    }

    async fn remove(&self, handle: &LetterHandle) -> Result<(), PortError> {
        let id = letter_id(handle)?;
        self.writer
            .run("dead-letter remove", move |tx| tx.remove_letter(id))
            .await?;
        self.holds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        Ok(())
    }

    async fn depth(&self) -> Result<u64, PortError> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || -> Result<u64, StoreError> {
            Ok(db.get()?.begin_read()?.open_table(DEAD)?.len()?)
        })
        .await
        .map_err(|e| PortError::unavailable("dead-letter depth", e))?
        .map_err(|e| PortError::unavailable("dead-letter depth", e))
    }
}
