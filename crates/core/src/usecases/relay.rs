//! The timer relay (docs/design/time.md): on AWS a timer waits on the timer queue, a standard
//! queue whose messages can be held back up to 15 minutes, and reaches it from an EventBridge
//! Scheduler schedule when it is due later. Each time a timer shows on that queue the relay either
//! holds it back again, for what is left of its wait, or, once it is due, sends it into its chat's
//! message group of the updates queue, where it waits behind the chat's earlier updates and runs
//! like any of them.
//!
//! A timer relayed twice (a failed delete, a schedule delivered twice) reaches the updates queue
//! with the same deduplication id, and the claim acknowledges a finished one; a timer whose relay
//! fails is reported failed, and the timer queue shows it again.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tracing::{info, warn};

use crate::clock::Clock;
use crate::error::error_chain;
use crate::ports::{OutgoingMessage, TimerQueue, UpdateQueue};
use crate::timer::{TimerMessage, MAX_TIMER_HOLD};

/// One message from the timer queue.
#[derive(Clone, Debug)]
pub struct RelayRecord {
    /// The queue's id for it: a failure is reported by it.
    pub message_id: String,
    /// What the queue carries ([`TimerMessage::relay_body`]).
    pub body: Bytes,
}

/// Moves due timers from the timer queue into the updates queue.
pub struct TimerRelay {
    timers: Arc<dyn TimerQueue>,
    updates: Arc<dyn UpdateQueue>,
    clock: Arc<dyn Clock>,
}

/// What became of one record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relayed {
    /// Not due yet: back on the timer queue for this long.
    HeldFor(Duration),
    /// Due: in its chat's message group.
    Delivered,
    /// Not relayed: the record is reported failed and shows again.
    Failed,
}

impl TimerRelay {
    /// A relay between the two queues.
    pub fn new(
        timers: Arc<dyn TimerQueue>,
        updates: Arc<dyn UpdateQueue>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            timers,
            updates,
            clock,
        }
    }

    /// Relays every record; returns what became of each, in order.
    pub async fn relay(&self, records: &[RelayRecord]) -> Vec<Relayed> {
        let mut outcomes = Vec::with_capacity(records.len());
        for record in records {
            outcomes.push(self.relay_one(record).await);
        }
        outcomes
    }

    async fn relay_one(&self, record: &RelayRecord) -> Relayed {
        let Some(timer) = TimerMessage::from_relay(&record.body) else {
            // Not tgq's: it shows again until the timer queue's redrive moves it to its
            // dead-letter queue, where nothing is lost.
            warn!(message_id = %record.message_id, "a timer queue message is not a timer tgq sent; left to the queue's redrive");
            return Relayed::Failed;
        };
        let left = timer.due.since(self.clock.now());
        if !left.is_zero() {
            let hold = left.min(MAX_TIMER_HOLD);
            return match self.timers.hold(&timer, hold).await {
                Ok(()) => Relayed::HeldFor(hold),
                Err(error) => {
                    warn!(error = %error_chain(&error), bot_id = %timer.bot_id, "holding a timer back failed; the timer queue shows it again");
                    Relayed::Failed
                }
            };
        }
        match self.updates.enqueue(&OutgoingMessage::timer(&timer)).await {
            Ok(()) => {
                info!(bot_id = %timer.bot_id, group = %timer.group, update_id = timer.update_id.0, "a due timer is queued in its chat");
                Relayed::Delivered
            }
            Err(error) => {
                warn!(error = %error_chain(&error), bot_id = %timer.bot_id, "queueing a due timer failed; the timer queue shows it again");
                Relayed::Failed
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;
    use crate::clock::ManualClock;
    use crate::ids::{BotId, GroupKey, UpdateId};
    use crate::record::Timestamp;
    use crate::PortError;

    #[derive(Default)]
    struct Queues {
        held: Mutex<Vec<(i64, Duration)>>,
        queued: Mutex<Vec<OutgoingMessage>>,
        down: std::sync::atomic::AtomicBool,
    }

    impl Queues {
        fn check(&self) -> Result<(), PortError> {
            if self.down.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(PortError::unavailable("SQS SendMessage", "down"));
            }
            Ok(())
        }
    }

    #[async_trait]
    impl TimerQueue for Queues {
        async fn hold(&self, timer: &TimerMessage, delay: Duration) -> Result<(), PortError> {
            self.check()?;
            self.held.lock().unwrap().push((timer.update_id.0, delay));
            Ok(())
        }
    }

    #[async_trait]
    impl UpdateQueue for Queues {
        async fn enqueue(&self, message: &OutgoingMessage) -> Result<(), PortError> {
            self.check()?;
            self.queued.lock().unwrap().push(message.clone());
            Ok(())
        }
    }

    fn timer(id: i64, due: u64) -> RelayRecord {
        let message = TimerMessage {
            bot_id: BotId::new("b").unwrap(),
            group: GroupKey::new("42"),
            update_id: UpdateId(id),
            chat_id: 42,
            key: format!("k{id}"),
            due: Timestamp(due),
            payload: serde_json::Value::Null,
        };
        RelayRecord {
            message_id: format!("m{id}"),
            body: Bytes::from(message.relay_body()),
        }
    }

    fn relay(queues: &Arc<Queues>, now: u64) -> TimerRelay {
        TimerRelay::new(
            queues.clone(),
            queues.clone(),
            Arc::new(ManualClock::at(Timestamp(now))),
        )
    }

    #[tokio::test]
    async fn a_due_timer_goes_to_its_chat_and_a_later_one_waits_again_at_most_fifteen_minutes() {
        let queues = Arc::new(Queues::default());
        let now = 10_000_000;
        let outcomes = relay(&queues, now)
            .relay(&[
                timer(-1, now - 5),
                timer(-2, now + 1_500),
                timer(-3, now + 3_600_000),
            ])
            .await;
        assert_eq!(
            outcomes,
            [
                Relayed::Delivered,
                Relayed::HeldFor(Duration::from_millis(1_500)),
                Relayed::HeldFor(MAX_TIMER_HOLD),
            ]
        );
        let queued = queues.queued.lock().unwrap();
        assert_eq!(queued.len(), 1);
        assert_eq!(queued[0].group_id.as_str(), "b:42");
        assert_eq!(queued[0].dedup_id, "b:-1");
        assert_eq!(
            *queues.held.lock().unwrap(),
            [(-2, Duration::from_millis(1_500)), (-3, MAX_TIMER_HOLD)]
        );
    }

    #[tokio::test]
    async fn a_failed_send_and_a_foreign_body_are_reported_failed_not_dropped() {
        let queues = Arc::new(Queues::default());
        queues.down.store(true, std::sync::atomic::Ordering::SeqCst);
        let foreign = RelayRecord {
            message_id: "x".into(),
            body: Bytes::from_static(br#"{"update_id":1}"#),
        };
        let outcomes = relay(&queues, 1_000)
            .relay(&[timer(-1, 0), timer(-2, 5_000), foreign])
            .await;
        assert_eq!(outcomes, [Relayed::Failed; 3]);
    }
}
