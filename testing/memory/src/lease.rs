//! The poller lease in memory: the rule of `LeaseState` over one value behind a lock.

use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use tgq_core::leadership::{Acquired, HolderId, LeaseError, LeaseState, PollerLease, Term};
use tgq_core::record::Timestamp;
use tgq_core::PortError;

use crate::Outage;

/// One bot's poller lease in memory; the contenders share one instance.
#[derive(Default)]
pub struct MemoryPollerLease {
    state: Mutex<Option<LeaseState>>,
    /// Fails calls while on.
    pub outage: Outage,
}

impl MemoryPollerLease {
    /// A lease nobody has acquired yet.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl PollerLease for MemoryPollerLease {
    async fn acquire(
        &self,
        holder: &HolderId,
        now: Timestamp,
        ttl: Duration,
    ) -> Result<Acquired, LeaseError> {
        self.outage.check("lease acquire")?;
        let mut state = self.state.lock();
        let (acquired, next) = LeaseState::acquire(state.as_ref(), holder, now, ttl);
        if let Some(next) = next {
            *state = Some(next);
        }
        Ok(acquired)
    }

    async fn renew(&self, term: &Term, now: Timestamp, ttl: Duration) -> Result<Term, LeaseError> {
        self.outage.check("lease renew")?;
        let mut state = self.state.lock();
        let (renewed, next) = LeaseState::renew(state.as_ref(), term, now, ttl)?;
        *state = Some(next);
        Ok(renewed)
    }

    async fn checkpoint(&self, term: &Term, offset: i64) -> Result<(), LeaseError> {
        self.outage.check("lease checkpoint")?;
        let mut state = self.state.lock();
        *state = Some(LeaseState::checkpoint(state.as_ref(), term, offset)?);
        Ok(())
    }

    async fn release(&self, term: &Term, now: Timestamp) -> Result<(), LeaseError> {
        self.outage.check("lease release")?;
        let mut state = self.state.lock();
        *state = Some(LeaseState::release(state.as_ref(), term, now)?);
        Ok(())
    }

    async fn read(&self) -> Result<Option<LeaseState>, PortError> {
        self.outage.check("lease read")?;
        Ok(self.state.lock().clone())
    }
}
