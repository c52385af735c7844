//! The pollers' lease in the embedded store (docs/design/fleet.md §1): `tgq local --poll` holds it
//! the way `tgq poll` holds its lease in DynamoDB, with the same rule (`LeaseState`'s) applied
//! inside the writer's transaction, and its offset checkpoint stored with the fencing token.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redb::ReadableTable;
use serde::{Deserialize, Serialize};
use tgq_core::ids::BotId;
use tgq_core::leadership::{Acquired, HolderId, LeaseError, LeaseState, PollerLease, Term};
use tgq_core::record::Timestamp;
use tgq_core::PortError;

use crate::schema::{CodecError, POLLER_LEASES};
use crate::writer::{OpError, Tx};
use crate::EmbeddedStore;

/// One bot's poller lease in an embedded store.
pub struct EmbeddedPollerLease {
    store: Arc<EmbeddedStore>,
    bot: BotId,
}

impl EmbeddedStore {
    /// The poller lease of `bot` in this store.
    pub fn poller_lease(self: &Arc<Self>, bot: &BotId) -> EmbeddedPollerLease {
        EmbeddedPollerLease {
            store: self.clone(),
            bot: bot.clone(),
        }
    }
}

/// A lease as stored.
#[derive(Serialize, Deserialize)]
struct StoredLease {
    holder: Option<String>,
    token: u64,
    until: u64,
    acquired_at: u64,
    last_takeover_at: Option<u64>,
    takeovers: u64,
    flaps: u64,
    offset: Option<i64>,
    offset_token: Option<u64>,
}

impl From<&LeaseState> for StoredLease {
    fn from(state: &LeaseState) -> Self {
        Self {
            holder: state.holder.as_ref().map(|h| h.as_str().to_owned()),
            token: state.token,
            until: state.until.0,
            acquired_at: state.acquired_at.0,
            last_takeover_at: state.last_takeover_at.map(|t| t.0),
            takeovers: state.takeovers,
            flaps: state.flaps,
            offset: state.offset,
            offset_token: state.offset_token,
        }
    }
}

impl TryFrom<StoredLease> for LeaseState {
    type Error = CodecError;

    fn try_from(stored: StoredLease) -> Result<Self, CodecError> {
        let holder = stored
            .holder
            .map(HolderId::new)
            .transpose()
            .map_err(|e| CodecError::Invalid(e.to_string()))?;
        Ok(Self {
            holder,
            token: stored.token,
            until: Timestamp(stored.until),
            acquired_at: Timestamp(stored.acquired_at),
            last_takeover_at: stored.last_takeover_at.map(Timestamp),
            takeovers: stored.takeovers,
            flaps: stored.flaps,
            offset: stored.offset,
            offset_token: stored.offset_token,
        })
    }
}

impl Tx<'_> {
    /// The lease of `bot`, if any poller ever acquired it.
    fn load_lease(&self, bot: &BotId) -> Result<Option<LeaseState>, OpError> {
        let table = self.table(POLLER_LEASES)?;
        let Some(value) = table.get(bot.as_str())? else {
            return Ok(None);
        };
        let stored: StoredLease =
            serde_json::from_slice(value.value()).map_err(CodecError::from)?;
        Ok(Some(LeaseState::try_from(stored)?))
    }

    fn put_lease(&mut self, bot: &BotId, state: &LeaseState) -> Result<(), OpError> {
        let value = serde_json::to_vec(&StoredLease::from(state))
            .map_err(|e| OpError::Fatal(e.to_string()))?;
        self.table_mut(POLLER_LEASES)?
            .insert(bot.as_str(), value.as_slice())?;
        Ok(())
    }

    /// Releases every poller lease still held: only the process that holds the store's lock calls
    /// this, at start, so no poller of an earlier process can be alive.
    pub(crate) fn release_poller_leases(&mut self, now: Timestamp) -> Result<u64, OpError> {
        // Read first, write after: the table cannot be open for reading while it is written.
        let mut held = Vec::new();
        for entry in self.table(POLLER_LEASES)?.iter()? {
            let (bot, value) = entry?;
            let bot = BotId::new(bot.value()).map_err(|e| OpError::Rejected(e.to_string()))?;
            let stored: StoredLease =
                serde_json::from_slice(value.value()).map_err(CodecError::from)?;
            let state = LeaseState::try_from(stored)?;
            if state.holder.is_some() {
                held.push((bot, state));
            }
        }
        for (bot, state) in &mut held {
            state.holder = None;
            state.until = now;
            self.put_lease(bot, state)?;
        }
        Ok(held.len() as u64)
    }

    /// Applies a holder's call to the stored lease: writes what `change` returns, or nothing when
    /// it refuses.
    fn change_lease<T>(
        &mut self,
        bot: &BotId,
        change: impl FnOnce(Option<&LeaseState>) -> Result<(T, LeaseState), LeaseError>,
    ) -> Result<Result<T, LeaseError>, OpError> {
        let stored = self.load_lease(bot)?;
        match change(stored.as_ref()) {
            Ok((value, next)) => {
                self.put_lease(bot, &next)?;
                Ok(Ok(value))
            }
            Err(refused) => Ok(Err(refused)),
        }
    }
}

impl EmbeddedPollerLease {
    async fn change<T, F>(&self, what: &'static str, change: F) -> Result<T, LeaseError>
    where
        T: Send + 'static,
        F: FnOnce(Option<&LeaseState>) -> Result<(T, LeaseState), LeaseError> + Send + 'static,
    {
        let bot = self.bot.clone();
        self.store
            .writer
            .run(what, move |tx| tx.change_lease(&bot, change))
            .await?
    }
}

#[async_trait]
impl PollerLease for EmbeddedPollerLease {
    async fn acquire(
        &self,
        holder: &HolderId,
        now: Timestamp,
        ttl: Duration,
    ) -> Result<Acquired, LeaseError> {
        let (bot, holder) = (self.bot.clone(), holder.clone());
        self.store
            .writer
            .run("lease acquire", move |tx| {
                let stored = tx.load_lease(&bot)?;
                let (acquired, next) = LeaseState::acquire(stored.as_ref(), &holder, now, ttl);
                if let Some(next) = next {
                    tx.put_lease(&bot, &next)?;
                }
                Ok(acquired)
            })
            .await
            .map_err(LeaseError::from)
    }

    async fn renew(&self, term: &Term, now: Timestamp, ttl: Duration) -> Result<Term, LeaseError> {
        let term = term.clone();
        self.change("lease renew", move |stored| {
            LeaseState::renew(stored, &term, now, ttl)
        })
        .await
    }

    async fn checkpoint(&self, term: &Term, offset: i64) -> Result<(), LeaseError> {
        let term = term.clone();
        self.change("lease checkpoint", move |stored| {
            LeaseState::checkpoint(stored, &term, offset).map(|next| ((), next))
        })
        .await
    }

    async fn release(&self, term: &Term, now: Timestamp) -> Result<(), LeaseError> {
        let term = term.clone();
        self.change("lease release", move |stored| {
            LeaseState::release(stored, &term, now).map(|next| ((), next))
        })
        .await
    }

    async fn read(&self) -> Result<Option<LeaseState>, PortError> {
        let bot = self.bot.clone();
        self.store
            .writer
            .run("lease read", move |tx| tx.load_lease(&bot))
            .await
    }
}
