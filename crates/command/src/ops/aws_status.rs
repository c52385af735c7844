//! `tgq status` for a deployment on AWS: the queues' depths and oldest message ages, the webhook as
//! Telegram sees it (getWebhookInfo, when a bot token is at hand), and the stack's alarm states.

use std::time::{Duration, SystemTime};

use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{Dimension, Statistic};
use serde::{Deserialize, Serialize};
use teloxide_core::payloads::GetWebhookInfo;
use tgq_aws::DynamoPollerLease;
use tgq_core::clock::{Clock as _, SystemClock};
use tgq_core::config::{SecretSource, Vars};
use tgq_core::ids::BotId;
use tgq_core::leadership::PollerLease as _;
use tgq_telegram::HttpBotApi;

use super::target::Deployment;

/// How long one call to Telegram may take.
const TELEGRAM_TIMEOUT: Duration = Duration::from_secs(10);
/// How far back the oldest-message age is looked up (SQS reports it every minute).
const AGE_WINDOW: Duration = Duration::from_secs(15 * 60);

/// `tgq status --json` for a deployment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AwsStatusView {
    /// The stack, when named.
    pub stack: Option<String>,
    /// The updates queue.
    pub queue: QueueView,
    /// The dead-letter queue.
    pub dead_letters: QueueView,
    /// The webhook as Telegram sees it.
    pub webhook: WebhookView,
    /// The stack's alarms (named `{stack}-…`), with their states.
    pub alarms: Vec<AlarmView>,
    /// The pollers' lease of the bot (`tgq poll`), when the bot id is known (TGQ_BOT_ID or the
    /// stack's BotId output) and a poller ever ran.
    #[serde(default)]
    pub poller_lease: Option<PollerLeaseView>,
}

/// The pollers' lease as the table holds it (docs/design/fleet.md §1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PollerLeaseView {
    /// The poller that leads; `None` once it released the lease or its lease ran out.
    pub leader: Option<String>,
    /// The fencing token of the last acquisition.
    pub token: u64,
    /// Milliseconds until the lease ends unless renewed; `None` when nobody leads.
    pub remaining_ms: Option<u64>,
    /// The offset checkpoint a new leader resumes from.
    pub offset: Option<i64>,
    /// Takeovers of a lapsed lease so far.
    pub takeovers: u64,
    /// Of those, within a minute of the previous one.
    pub flaps: u64,
}

/// One queue's depth and age.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueView {
    /// Messages ready to be received.
    pub visible: u64,
    /// Messages received and not yet deleted, or hidden for their backoff.
    pub in_flight: u64,
    /// The oldest message's age in seconds (CloudWatch's `ApproximateAgeOfOldestMessage`, the
    /// latest minute it reported); `None` when it reported none lately.
    pub oldest_age_secs: Option<f64>,
}

/// The webhook as Telegram's getWebhookInfo tells it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WebhookView {
    /// The URL Telegram posts to.
    pub url: Option<String>,
    /// Updates Telegram holds for the bot, not yet delivered.
    pub pending_update_count: Option<u32>,
    /// The last delivery error Telegram saw.
    pub last_error_message: Option<String>,
    /// When (epoch seconds).
    pub last_error_date: Option<i64>,
    /// Why Telegram was not asked, or what went wrong asking.
    pub unavailable: Option<String>,
}

/// One alarm and its state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlarmView {
    /// Its name.
    pub name: String,
    /// `OK`, `ALARM` or `INSUFFICIENT_DATA`.
    pub state: String,
    /// Why, as CloudWatch says.
    pub reason: Option<String>,
}

/// Reads the status of a deployment.
pub async fn read(deployment: &Deployment) -> anyhow::Result<AwsStatusView> {
    let cloudwatch = aws_sdk_cloudwatch::Client::new(&deployment.sdk);
    let (visible, in_flight) = deployment.queue().depth_by_state().await?;
    let (dead_visible, dead_in_flight) = deployment.dlq().depth_by_state().await?;
    let alarms = match &deployment.stack {
        Some(stack) => alarms(&cloudwatch, &format!("{stack}-")).await?,
        None => Vec::new(),
    };
    Ok(AwsStatusView {
        stack: deployment.stack.clone(),
        queue: QueueView {
            visible,
            in_flight,
            oldest_age_secs: oldest_age(&cloudwatch, &deployment.queue_url).await,
        },
        dead_letters: QueueView {
            visible: dead_visible,
            in_flight: dead_in_flight,
            oldest_age_secs: oldest_age(&cloudwatch, &deployment.dlq_url).await,
        },
        webhook: webhook(deployment).await,
        alarms,
        poller_lease: poller_lease(deployment).await?,
    })
}

/// The bot's poller lease, when the bot id is known and a poller ever ran.
async fn poller_lease(deployment: &Deployment) -> anyhow::Result<Option<PollerLeaseView>> {
    let vars = Vars::from_env();
    let Some(bot) = vars.get("TGQ_BOT_ID").or(deployment.bot_id.as_deref()) else {
        return Ok(None);
    };
    let bot = BotId::new(bot).map_err(|e| anyhow::anyhow!(e))?;
    let lease = DynamoPollerLease::new(
        aws_sdk_dynamodb::Client::new(&deployment.sdk),
        &deployment.table,
        &bot,
    );
    let Some(state) = lease.read().await? else {
        return Ok(None);
    };
    let now = SystemClock.now();
    let held = state.held_at(now);
    Ok(Some(PollerLeaseView {
        leader: held.as_ref().map(|h| h.holder.to_string()),
        token: state.token,
        remaining_ms: held.map(|h| h.until.0.saturating_sub(now.0)),
        offset: state.offset,
        takeovers: state.takeovers,
        flaps: state.flaps,
    }))
}

/// A queue's name: the last part of its URL.
fn queue_name(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or(url)
}

/// The latest `ApproximateAgeOfOldestMessage` CloudWatch has for the queue, in seconds.
async fn oldest_age(cloudwatch: &aws_sdk_cloudwatch::Client, url: &str) -> Option<f64> {
    let now = SystemTime::now();
    let output = cloudwatch
        .get_metric_statistics()
        .namespace("AWS/SQS")
        .metric_name("ApproximateAgeOfOldestMessage")
        .dimensions(
            Dimension::builder()
                .name("QueueName")
                .value(queue_name(url))
                .build(),
        )
        .start_time(DateTime::from(now - AGE_WINDOW))
        .end_time(DateTime::from(now))
        .period(60)
        .statistics(Statistic::Maximum)
        .send()
        .await
        .ok()?;
    output
        .datapoints
        .unwrap_or_default()
        .into_iter()
        .filter_map(|point| Some((point.timestamp?, point.maximum?)))
        .max_by_key(|(at, _)| at.secs())
        .map(|(_, age)| age)
}

/// The alarms whose names start with `prefix`.
async fn alarms(
    cloudwatch: &aws_sdk_cloudwatch::Client,
    prefix: &str,
) -> anyhow::Result<Vec<AlarmView>> {
    let output = cloudwatch
        .describe_alarms()
        .alarm_name_prefix(prefix)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!(aws_sdk_cloudwatch::error::DisplayErrorContext(e)))?;
    Ok(output
        .metric_alarms
        .unwrap_or_default()
        .into_iter()
        .map(|alarm| AlarmView {
            name: alarm.alarm_name.unwrap_or_default(),
            state: alarm
                .state_value
                .map_or_else(|| "UNKNOWN".to_owned(), |s| s.as_str().to_owned()),
            reason: alarm.state_reason,
        })
        .collect())
}

/// Asks Telegram about the webhook, with `TELEGRAM_BOT_TOKEN` or the stack's token parameter.
async fn webhook(deployment: &Deployment) -> WebhookView {
    let unavailable = |why: String| WebhookView {
        unavailable: Some(why),
        ..WebhookView::default()
    };
    let vars = Vars::from_env();
    let source = match (vars.bot_token(), &deployment.token_parameter) {
        (Some(source), _) => source,
        (None, Some(name)) => SecretSource::Parameter(name.clone()),
        (None, None) => {
            return unavailable(
                "no bot token: set TELEGRAM_BOT_TOKEN, or name the stack with --stack".into(),
            )
        }
    };
    let ssm = aws_sdk_ssm::Client::new(&deployment.sdk);
    let token = match tgq_aws::resolve_secret(&ssm, source).await {
        Ok(token) => token,
        Err(error) => return unavailable(format!("{:#}", anyhow::Error::from(error))),
    };
    let api_url = match deployment.api_url(&vars) {
        Ok(url) => url,
        Err(error) => return unavailable(format!("{error:#}")),
    };
    let api = match HttpBotApi::new(&api_url, token, TELEGRAM_TIMEOUT) {
        Ok(api) => api,
        Err(error) => return unavailable(error.to_string()),
    };
    match tgq_telegram::call(&api, &GetWebhookInfo::new()).await {
        Ok(info) => WebhookView {
            url: info.url.map(|url| url.to_string()),
            pending_update_count: Some(info.pending_update_count),
            last_error_message: info.last_error_message,
            last_error_date: info.last_error_date.map(|date| date.timestamp()),
            unavailable: None,
        },
        Err(error) => unavailable(format!("getWebhookInfo failed: {error}")),
    }
}

/// `tgq status` for a deployment, as text.
pub fn render(view: &AwsStatusView) {
    let age = |age: Option<f64>| match age {
        Some(secs) => format!(
            ", oldest {}",
            super::render::human_duration(Duration::from_secs_f64(secs))
        ),
        None => String::new(),
    };
    if let Some(stack) = &view.stack {
        outln!("stack          {stack}");
    }
    outln!(
        "queue          {} visible, {} in flight{}",
        view.queue.visible,
        view.queue.in_flight,
        age(view.queue.oldest_age_secs)
    );
    outln!(
        "dead letters   {}{}",
        view.dead_letters.visible + view.dead_letters.in_flight,
        age(view.dead_letters.oldest_age_secs)
    );
    match &view.webhook.unavailable {
        Some(why) => outln!("webhook        unknown: {why}"),
        None => {
            outln!(
                "webhook        {}",
                view.webhook.url.as_deref().unwrap_or("none set")
            );
            outln!(
                "pending        {} update(s) waiting at Telegram",
                view.webhook.pending_update_count.unwrap_or(0)
            );
            if let Some(error) = &view.webhook.last_error_message {
                let when = view
                    .webhook
                    .last_error_date
                    .map(|d| format!(" (at {})", super::render::utc(d.unsigned_abs() * 1000)))
                    .unwrap_or_default();
                outln!("last error     {error}{when}");
            }
        }
    }
    if let Some(lease) = &view.poller_lease {
        let leader = match (&lease.leader, lease.remaining_ms) {
            (Some(leader), Some(ms)) => {
                format!("leader {leader}, ends in {:.1} s", ms as f64 / 1000.0)
            }
            _ => "no leader".to_owned(),
        };
        outln!(
            "poller lease   {leader}, token {}, offset {}, {} takeovers ({} flapping)",
            lease.token,
            lease.offset.map_or("-".to_owned(), |o| o.to_string()),
            lease.takeovers,
            lease.flaps
        );
    }
    if view.alarms.is_empty() {
        return;
    }
    outln!("alarms");
    for alarm in &view.alarms {
        outln!("  {:<18} {}", alarm.state, alarm.name);
    }
}
