//! A visibility port that only records what it was asked.

use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use tgq_core::ports::{ReceiptHandle, Visibility};
use tgq_core::PortError;

use crate::outage::Outage;

/// A [`tgq_core::ports::Visibility`] that only records what it was asked; for worker tests fed by
/// Lambda events, where there is no queue to change.
#[derive(Default)]
pub struct RecordingVisibility {
    changes: Mutex<Vec<(ReceiptHandle, Duration)>>,
    /// Makes changes fail (`"visibility change"`); a failed change is not recorded.
    pub outage: Outage,
}

impl RecordingVisibility {
    /// A recorder with nothing recorded.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every change asked for, in order.
    pub fn changes(&self) -> Vec<(ReceiptHandle, Duration)> {
        self.changes.lock().clone()
    }

    /// The last change asked for on one receipt.
    pub fn last_for(&self, receipt: &str) -> Option<Duration> {
        self.changes
            .lock()
            .iter()
            .rev()
            .find(|(r, _)| r.0 == receipt)
            .map(|(_, d)| *d)
    }
}

#[async_trait]
impl Visibility for RecordingVisibility {
    async fn change_visibility(
        &self,
        receipt: &ReceiptHandle,
        after: Duration,
    ) -> Result<(), PortError> {
        self.outage.check("visibility change")?;
        self.changes.lock().push((receipt.clone(), after));
        Ok(())
    }
}
