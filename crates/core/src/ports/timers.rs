//! Timers: scheduling one for later, and the queue a timer waits on until it is due.

use std::time::Duration;

use async_trait::async_trait;

use crate::error::PortError;
use crate::record::Timestamp;
use crate::timer::TimerMessage;

/// What the worker may do with timers: hand over those a finished run scheduled, before its `DONE`
/// settle (docs/design/time.md). Idempotent by timer id: a retried run hands the same timers
/// over again, and the scheduler keeps one of each. A timer already due is delivered at once.
#[async_trait]
pub trait TimerScheduler: Send + Sync {
    /// Keeps each timer until it is due, then delivers it to its chat's message group.
    async fn schedule(&self, timers: &[TimerMessage], now: Timestamp) -> Result<(), PortError>;
}

/// A deployment's timer queue (AWS: a standard SQS queue, whose messages may wait up to
/// [`MAX_TIMER_HOLD`](crate::timer::MAX_TIMER_HOLD) before they show): where a timer waits for its time before the relay moves
/// it into its chat's message group (docs/design/time.md).
#[async_trait]
pub trait TimerQueue: Send + Sync {
    /// Sends the timer to the queue, to show after `delay` (at most [`MAX_TIMER_HOLD`](crate::timer::MAX_TIMER_HOLD); rounded up
    /// to whole seconds).
    async fn hold(&self, timer: &TimerMessage, delay: Duration) -> Result<(), PortError>;
}
