//! Timers on AWS (docs/design/time.md): a timer due within the timer queue's reach waits on
//! that standard SQS queue as a message timer; one due later waits as an EventBridge Scheduler
//! one-time schedule that sends it to the same queue shortly before it is due. Either way the relay
//! ([`tgq_core::relay`]) moves it into its chat's message group when it is due.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_scheduler::types::{
    ActionAfterCompletion, FlexibleTimeWindow, FlexibleTimeWindowMode, Target,
};
use tgq_core::ids::{BotId, UpdateId};
use tgq_core::ports::{TimerQueue, TimerScheduler};
use tgq_core::record::Timestamp;
use tgq_core::timer::{TimerMessage, MAX_TIMER_HOLD};
use tgq_core::PortError;

use crate::error::port_error;
use crate::sqs::SEND;

const CREATE_SCHEDULE: &str = "Scheduler CreateSchedule";
const DELETE_SCHEDULE: &str = "Scheduler DeleteSchedule";

/// How long before a timer is due its schedule fires: the relay holds it back for the rest, so
/// the timer keeps the queue's precision (seconds) unless the schedule is later than this.
pub const SCHEDULE_LEAD: Duration = Duration::from_secs(300);

/// The timer queue, by URL.
#[derive(Clone, Debug)]
pub struct SqsTimerQueue {
    client: aws_sdk_sqs::Client,
    url: String,
}

impl SqsTimerQueue {
    /// The standard queue at `url`.
    pub fn new(client: aws_sdk_sqs::Client, url: impl Into<String>) -> Self {
        Self {
            client,
            url: url.into(),
        }
    }
}

#[async_trait]
impl TimerQueue for SqsTimerQueue {
    async fn hold(&self, timer: &TimerMessage, delay: Duration) -> Result<(), PortError> {
        self.client
            .send_message()
            .queue_url(&self.url)
            .message_body(timer.relay_body())
            .delay_seconds(delay_seconds(delay))
            .send()
            .await
            .map_err(|e| port_error(SEND, e))?;
        Ok(())
    }
}

/// A delay as SQS takes it: whole seconds, rounded up so that a timer never shows early, at most
/// 15 minutes.
fn delay_seconds(delay: Duration) -> i32 {
    let secs = delay.min(MAX_TIMER_HOLD).as_millis().div_ceil(1000);
    i32::try_from(secs).unwrap_or(900)
}

/// Where the schedules go: the stack's schedule group, and the timer queue as their target.
#[derive(Clone, Debug)]
pub struct Schedules {
    /// The Scheduler client.
    pub client: aws_sdk_scheduler::Client,
    /// The stack's schedule group.
    pub group: String,
    /// The timer queue's ARN.
    pub queue_arn: String,
    /// The role EventBridge Scheduler takes to send to it.
    pub role_arn: String,
}

/// The worker's [`TimerScheduler`] on AWS.
#[derive(Clone, Debug)]
pub struct AwsTimers {
    queue: SqsTimerQueue,
    schedules: Schedules,
    reach: Duration,
}

impl AwsTimers {
    /// Timers due within `reach` (at most 15 minutes) wait on `queue`; later ones as schedules.
    pub fn new(queue: SqsTimerQueue, schedules: Schedules, reach: Duration) -> Self {
        Self {
            queue,
            schedules,
            reach: reach.min(MAX_TIMER_HOLD),
        }
    }

    /// Creates the timer's schedule; one that exists already (a retried run) is kept.
    async fn create_schedule(&self, timer: &TimerMessage, now: Timestamp) -> Result<(), PortError> {
        let lead = SCHEDULE_LEAD.min(self.reach);
        let fire = timer.due.minus(lead).max(now);
        let target = Target::builder()
            .arn(&self.schedules.queue_arn)
            .role_arn(&self.schedules.role_arn)
            .input(timer.relay_body())
            .build()
            .map_err(|e| PortError::rejected(CREATE_SCHEDULE, e))?;
        let window = FlexibleTimeWindow::builder()
            .mode(FlexibleTimeWindowMode::Off)
            .build()
            .map_err(|e| PortError::rejected(CREATE_SCHEDULE, e))?;
        let created = self
            .schedules
            .client
            .create_schedule()
            .name(schedule_name(&timer.bot_id, timer.update_id))
            .group_name(&self.schedules.group)
            .schedule_expression(at_expression(fire))
            .schedule_expression_timezone("UTC")
            .flexible_time_window(window)
            .target(target)
            .action_after_completion(ActionAfterCompletion::Delete)
            .send()
            .await;
        match created {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_conflict_exception()) =>
            {
                Ok(())
            }
            Err(e) => Err(port_error(CREATE_SCHEDULE, e)),
        }
    }

    /// Deletes the schedule of a cancelled timer, if it has one that has not fired; a schedule
    /// already gone is no error. Cancelling does not need it: a timer the chat no longer names is
    /// acknowledged without running.
    pub async fn delete_schedule(&self, timer: &TimerMessage) -> Result<(), PortError> {
        delete_schedule(
            &self.schedules.client,
            &self.schedules.group,
            &timer.bot_id,
            timer.update_id,
        )
        .await
    }
}

/// [`AwsTimers::delete_schedule`] for the `tgq` command, which has no timer queue to send to.
pub async fn delete_schedule(
    client: &aws_sdk_scheduler::Client,
    group: &str,
    bot_id: &BotId,
    update_id: UpdateId,
) -> Result<(), PortError> {
    let deleted = client
        .delete_schedule()
        .name(schedule_name(bot_id, update_id))
        .group_name(group)
        .send()
        .await;
    match deleted {
        Ok(_) => Ok(()),
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_resource_not_found_exception()) =>
        {
            Ok(())
        }
        Err(e) => Err(port_error(DELETE_SCHEDULE, e)),
    }
}

#[async_trait]
impl TimerScheduler for AwsTimers {
    async fn schedule(&self, timers: &[TimerMessage], now: Timestamp) -> Result<(), PortError> {
        for timer in timers {
            let ahead = timer.due.since(now);
            if ahead <= self.reach {
                self.queue.hold(timer, ahead).await?;
            } else {
                self.create_schedule(timer, now).await?;
            }
        }
        Ok(())
    }
}

/// A timer's schedule name: its id's 62 bits in hex (unique, as the id is: it hashes the bot in),
/// then as much of the bot id as fits Scheduler's 64 characters. The same timer always has the
/// same name, which makes creating it idempotent.
pub fn schedule_name(bot_id: &BotId, update_id: UpdateId) -> String {
    let magnitude = update_id.0.unsigned_abs();
    let mut name = format!("{magnitude:016x}-{bot_id}");
    name.truncate(64);
    name
}

/// Scheduler's one-time expression for `at`, in UTC to the second.
fn at_expression(at: Timestamp) -> String {
    let secs = i64::try_from(at.0 / 1000).unwrap_or(i64::MAX);
    let time = chrono::DateTime::from_timestamp(secs, 0).unwrap_or_default();
    format!("at({})", time.format("%Y-%m-%dT%H:%M:%S"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_round_up_to_whole_seconds_within_fifteen_minutes() {
        assert_eq!(delay_seconds(Duration::ZERO), 0);
        assert_eq!(delay_seconds(Duration::from_millis(1)), 1);
        assert_eq!(delay_seconds(Duration::from_millis(2_000)), 2);
        assert_eq!(delay_seconds(Duration::from_secs(3_600)), 900);
    }

    #[test]
    fn an_at_expression_is_utc_to_the_second() {
        assert_eq!(
            at_expression(Timestamp(1_798_761_600_999)),
            "at(2027-01-01T00:00:00)"
        );
    }

    #[test]
    fn a_schedule_name_is_unique_by_timer_and_fits_the_limit() {
        let name_of = |bot: &str, id| schedule_name(&BotId::new(bot).unwrap(), UpdateId(id));
        assert_eq!(name_of("shop", -255), "00000000000000ff-shop");
        let name = name_of(&"b".repeat(64), -(1 << 61));
        assert_eq!(name.len(), 64);
        assert!(name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_ne!(name, name_of(&"b".repeat(64), -(1 << 60)));
    }
}
