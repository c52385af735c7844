//! A timer scheduler in memory: it keeps what runs hand over, and a test takes out what is due.

use std::collections::BTreeMap;

use async_trait::async_trait;
use parking_lot::Mutex;
use tgq_core::error::PortError;
use tgq_core::ports::TimerScheduler;
use tgq_core::record::Timestamp;
use tgq_core::timer::TimerMessage;

use crate::Outage;

/// Held timers by id, like a scheduler that keeps one timer per idempotency key.
#[derive(Default)]
pub struct MemoryTimers {
    held: Mutex<BTreeMap<String, TimerMessage>>,
    handed_over: Mutex<u64>,
    /// Fails `schedule` while set.
    pub outage: Outage,
}

impl MemoryTimers {
    /// An empty scheduler.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes out the timers due at `now`, earliest first: what a scheduler delivers then.
    pub fn take_due(&self, now: Timestamp) -> Vec<TimerMessage> {
        let mut held = self.held.lock();
        let due: Vec<String> = held
            .iter()
            .filter(|(_, t)| t.due <= now)
            .map(|(id, _)| id.clone())
            .collect();
        let mut taken: Vec<TimerMessage> = due.iter().filter_map(|id| held.remove(id)).collect();
        taken.sort_by_key(|t| (t.due, t.update_id));
        taken
    }

    /// The timers held, earliest first.
    pub fn held(&self) -> Vec<TimerMessage> {
        let mut held: Vec<TimerMessage> = self.held.lock().values().cloned().collect();
        held.sort_by_key(|t| (t.due, t.update_id));
        held
    }

    /// How many timers were handed over in all, counting repeats of one id.
    pub fn handed_over(&self) -> u64 {
        *self.handed_over.lock()
    }
}

#[async_trait]
impl TimerScheduler for MemoryTimers {
    async fn schedule(&self, timers: &[TimerMessage], _now: Timestamp) -> Result<(), PortError> {
        self.outage.check("schedule timers")?;
        let mut held = self.held.lock();
        for timer in timers {
            held.entry(timer.dedup_id())
                .or_insert_with(|| timer.clone());
        }
        *self.handed_over.lock() += timers.len() as u64;
        Ok(())
    }
}
