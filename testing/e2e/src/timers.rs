//! The parts of a stack's timers AWS plays (docs/design/time.md), played by the harness: the
//! standard timer queue and its event source mapping to the worker, and EventBridge Scheduler
//! firing one-time schedules — moto keeps schedules but never fires them. The mapping here is the
//! Lambda one for a standard queue: receive, invoke, delete every record the worker did not name
//! in `batchItemFailures`; a failed record shows again when its visibility ends.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};
use aws_config::SdkConfig;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};

use crate::emulator::{queue_arn, Stack};
use crate::esm::lambda_record;
use crate::functions::Functions;

/// How long a received timer stays hidden: a failed relay shows again this soon.
const VISIBILITY_SECS: i32 = 2;

/// A stack's timer queue and schedule group, and what the harness did with them.
pub struct TimerParts {
    sqs: aws_sdk_sqs::Client,
    scheduler: aws_sdk_scheduler::Client,
    /// The timer queue (`TGQ_TIMERS_QUEUE_URL`).
    pub queue_url: String,
    /// Its ARN.
    pub queue_arn: String,
    /// The schedule group (`TGQ_SCHEDULE_GROUP`).
    pub group: String,
    /// Every schedule fired, by name, with its expression.
    pub fired: BTreeMap<String, String>,
    /// Records handed to the worker.
    pub relayed: u64,
    /// Records the worker reported failed.
    pub failed: u64,
}

impl TimerParts {
    /// Creates `stack`'s timer queue and schedule group.
    pub async fn create(config: &SdkConfig, stack: &Stack) -> anyhow::Result<TimerParts> {
        Self::create_named(config, &format!("{}-timers", stack.table)).await
    }

    /// Creates a timer queue and a schedule group, both named `name`.
    pub async fn create_named(config: &SdkConfig, name: &str) -> anyhow::Result<TimerParts> {
        let sqs = aws_sdk_sqs::Client::new(config);
        let name = name.to_owned();
        let queue_url = sqs
            .create_queue()
            .queue_name(&name)
            .send()
            .await
            .context("CreateQueue timers")?
            .queue_url
            .context("no queue URL")?;
        let queue_arn = queue_arn(&sqs, &queue_url).await?;
        let scheduler = aws_sdk_scheduler::Client::new(config);
        scheduler
            .create_schedule_group()
            .name(&name)
            .send()
            .await
            .context("CreateScheduleGroup")?;
        Ok(TimerParts {
            sqs,
            scheduler,
            queue_url,
            queue_arn,
            group: name,
            fired: BTreeMap::new(),
            relayed: 0,
            failed: 0,
        })
    }

    /// The worker's settings for these parts; timers further than `reach` ahead become schedules.
    pub fn function_vars(&self, reach: Duration) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("TGQ_TIMERS_QUEUE_URL".into(), self.queue_url.clone()),
            ("TGQ_TIMERS_QUEUE_ARN".into(), self.queue_arn.clone()),
            ("TGQ_SCHEDULE_GROUP".into(), self.group.clone()),
            (
                "TGQ_SCHEDULER_ROLE_ARN".into(),
                "arn:aws:iam::123456789012:role/tgq-e2e-scheduler".into(),
            ),
            (
                "TGQ_TIMER_QUEUE_REACH_SECS".into(),
                reach.as_secs().to_string(),
            ),
        ])
    }

    /// One receive from the timer queue and, when it found something, one invocation of the
    /// worker with it; returns how many records it handed over.
    pub async fn relay_once(
        &mut self,
        functions: &Functions,
        stack: &Stack,
    ) -> anyhow::Result<usize> {
        self.relay_with(stack, |event| async move {
            functions.invoke_worker(&event).await
        })
        .await
    }

    /// [`TimerParts::relay_once`] with the worker invoked by `invoke` (another harness's runtime).
    /// An invocation that fails hands nothing back: its records show again when their visibility
    /// ends, as Lambda's mapping leaves them.
    pub async fn relay_with<F, Fut>(&mut self, stack: &Stack, invoke: F) -> anyhow::Result<usize>
    where
        F: FnOnce(SqsEvent) -> Fut,
        Fut: Future<Output = anyhow::Result<SqsBatchResponse>>,
    {
        let messages = self
            .sqs
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(10)
            .visibility_timeout(VISIBILITY_SECS)
            .wait_time_seconds(0)
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
            .send()
            .await
            .context("ReceiveMessage timers")?
            .messages
            .unwrap_or_default();
        if messages.is_empty() {
            return Ok(0);
        }
        let mut event = SqsEvent::default();
        event.records = messages
            .iter()
            .map(|m| {
                let mut record = lambda_record(m, stack);
                record.event_source_arn = Some(self.queue_arn.clone());
                record
            })
            .collect();
        let response = invoke(event).await?;
        let failed: Vec<String> = response
            .batch_item_failures
            .into_iter()
            .map(|f| f.item_identifier)
            .collect();
        for message in &messages {
            let id = message.message_id.clone().unwrap_or_default();
            if failed.contains(&id) {
                continue;
            }
            self.sqs
                .delete_message()
                .queue_url(&self.queue_url)
                .receipt_handle(message.receipt_handle.clone().unwrap_or_default())
                .send()
                .await
                .context("DeleteMessage timers")?;
        }
        self.relayed += messages.len() as u64;
        self.failed += failed.len() as u64;
        Ok(messages.len())
    }

    /// Fires every schedule of the group whose time has come: sends its input to its target (the
    /// timer queue) `times` times — Scheduler delivers at least once — and deletes it, as
    /// `ActionAfterCompletion: DELETE` does. Returns how many it fired.
    pub async fn fire_due_schedules(&mut self, times: usize) -> anyhow::Result<usize> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
        let mut fired = 0;
        for name in self.schedule_names().await? {
            let schedule = self
                .scheduler
                .get_schedule()
                .group_name(&self.group)
                .name(&name)
                .send()
                .await
                .context("GetSchedule")?;
            let expression = schedule.schedule_expression.unwrap_or_default();
            if at_seconds(&expression)? > now {
                continue;
            }
            let target = schedule.target.context("a schedule without a target")?;
            if target.arn != self.queue_arn {
                bail!(
                    "schedule {name} targets {}, not the timer queue",
                    target.arn
                );
            }
            for _ in 0..times {
                self.sqs
                    .send_message()
                    .queue_url(&self.queue_url)
                    .message_body(target.input.clone().unwrap_or_default())
                    .send()
                    .await
                    .context("SendMessage from a schedule")?;
            }
            self.scheduler
                .delete_schedule()
                .group_name(&self.group)
                .name(&name)
                .send()
                .await
                .context("DeleteSchedule")?;
            self.fired.insert(name, expression);
            fired += 1;
        }
        Ok(fired)
    }

    /// The schedules the group still holds.
    pub async fn pending_schedules(&self) -> anyhow::Result<usize> {
        Ok(self.schedule_names().await?.len())
    }

    /// The names of the group's schedules (one page: a test holds a handful).
    async fn schedule_names(&self) -> anyhow::Result<Vec<String>> {
        let listed = self
            .scheduler
            .list_schedules()
            .group_name(&self.group)
            .send()
            .await
            .context("ListSchedules")?;
        Ok(listed
            .schedules
            .into_iter()
            .filter_map(|s| s.name)
            .collect())
    }
}

/// The time of `at(yyyy-mm-ddThh:mm:ss)`, in seconds since the epoch (UTC).
fn at_seconds(expression: &str) -> anyhow::Result<u64> {
    let inner = expression
        .strip_prefix("at(")
        .and_then(|e| e.strip_suffix(')'))
        .with_context(|| format!("{expression:?} is not a one-time expression"))?;
    let number = |range: std::ops::Range<usize>| -> anyhow::Result<i64> {
        inner
            .get(range)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("{expression:?} is malformed"))
    };
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Ok(u64::try_from(
        days * 86_400 + hour * 3_600 + minute * 60 + second,
    )?)
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_at_expression_reads_as_utc_seconds() {
        assert_eq!(
            super::at_seconds("at(2027-01-01T00:00:00)").unwrap(),
            1_798_761_600
        );
        assert_eq!(super::at_seconds("at(1970-01-01T00:01:05)").unwrap(), 65);
        assert!(super::at_seconds("rate(1 minute)").is_err());
    }
}
