//! A run that dies between two of its actions, as a process does when it is killed: the ledger the
//! worker writes through stops answering at the chosen write, and the kit drops the run there.
//!
//! Every action (a Bot API call or a step) writes its intent before it is made, and the run writes
//! its settlement when it ends (docs/design/worker.md §2). "After `k` actions" is therefore the
//! `k + 1`-th intent of the run, or its settlement when it makes no more (or fewer): neither is written, nor
//! what they would have carried — the outcome of the last call, which tgq writes with the next
//! write. A call Telegram had answered but tgq had not written down is made again when the update
//! runs again, as it is after a real crash (at least once); a step's result is written as soon as it
//! returns, so it is replayed.

use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;
use tgq_core::ids::BotId;
use tgq_core::payment::Charge;
use tgq_core::ports::{Claim, ClaimRequest, Lease, Settlement, UpdateLedger};
use tgq_core::record::{ActionIntent, ActionOutcome};
use tgq_core::PortError;
use tokio::sync::Notify;

/// When the next run is to die.
#[derive(Debug, Default)]
pub(crate) struct CrashSwitch {
    /// Actions still to make before dying; `None` when no crash is armed.
    armed: Mutex<Option<u32>>,
    fired: Notify,
}

impl CrashSwitch {
    pub(crate) fn arm(&self, after_actions: u32) {
        *self.armed.lock() = Some(after_actions);
    }

    pub(crate) fn disarm(&self) {
        *self.armed.lock() = None;
    }

    /// Resolves once the armed run died.
    pub(crate) async fn fired(&self) {
        self.fired.notified().await;
    }

    /// Whether a write that starts an action (`starts_action`) or ends the run dies here.
    fn dies_at(&self, starts_action: bool) -> bool {
        let mut armed = self.armed.lock();
        match armed.as_mut() {
            None => false,
            Some(0) => {
                *armed = None;
                true
            }
            Some(left) if starts_action => {
                *left -= 1;
                false
            }
            // A run that made fewer actions dies as it ends.
            Some(_) => {
                *armed = None;
                true
            }
        }
    }

    async fn die(&self) -> ! {
        self.fired.notify_one();
        std::future::pending().await
    }
}

/// The store's ledger, dying where the switch says.
pub(crate) struct CrashingLedger {
    pub(crate) inner: Arc<dyn UpdateLedger>,
    pub(crate) switch: Arc<CrashSwitch>,
}

#[async_trait]
impl UpdateLedger for CrashingLedger {
    async fn claim(&self, request: &ClaimRequest) -> Result<Claim, PortError> {
        self.inner.claim(request).await
    }

    async fn record_intent(
        &self,
        lease: &Lease,
        intent: &ActionIntent,
        outcomes: &[ActionOutcome],
    ) -> Result<(), PortError> {
        if self.switch.dies_at(true) {
            self.switch.die().await;
        }
        self.inner.record_intent(lease, intent, outcomes).await
    }

    async fn record_outcomes(
        &self,
        lease: &Lease,
        outcomes: &[ActionOutcome],
    ) -> Result<(), PortError> {
        self.inner.record_outcomes(lease, outcomes).await
    }

    async fn settle(
        &self,
        lease: &Lease,
        settlement: &Settlement,
        outcomes: &[ActionOutcome],
    ) -> Result<(), PortError> {
        if self.switch.dies_at(false) {
            self.switch.die().await;
        }
        self.inner.settle(lease, settlement, outcomes).await
    }

    async fn charge(&self, bot: &BotId, id: &str) -> Result<Option<Charge>, PortError> {
        self.inner.charge(bot, id).await
    }
}
