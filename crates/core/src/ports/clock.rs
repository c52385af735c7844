//! Time as a port, so that leases, backoff and deadlines are testable without sleeping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::record::Timestamp;

/// Tells the current time.
pub trait Clock: Send + Sync {
    /// Now, in milliseconds since the epoch.
    fn now(&self) -> Timestamp;
}

/// The system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        Timestamp(u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock that moves only when told to; for tests.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock showing `start`.
    pub fn at(start: Timestamp) -> Self {
        Self(Arc::new(AtomicU64::new(start.0)))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}
