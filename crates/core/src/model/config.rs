//! Typed configuration from environment variables, with an error that names the variable at fault.
//! Each binary builds its own config struct from these readers.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use secrecy::SecretString;

use crate::defaults;
use crate::ids::BotId;
use crate::pacer::RateLimits;
use crate::policy::{GoneRecipients, PreCheckoutPolicy, RetryPolicy};
use crate::registry::Layout;
use crate::timer::MAX_TIMER_HOLD;

/// A missing or malformed variable. Never carries a secret's value.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// A required variable is not set.
    #[error("{name} is not set: {hint}")]
    Missing {
        /// The variable.
        name: String,
        /// What to set it to.
        hint: &'static str,
    },
    /// A variable is set to something unusable.
    #[error("{name} is malformed: expected {expected}")]
    Malformed {
        /// The variable.
        name: &'static str,
        /// What it should hold.
        expected: &'static str,
    },
}

/// Where a secret comes from: the environment (local), or an SSM parameter read at cold start (AWS).
#[derive(Clone, Debug)]
pub enum SecretSource {
    /// The value itself.
    Value(SecretString),
    /// The name of an SSM SecureString parameter holding it.
    Parameter(String),
}

/// The AWS resources both functions use: the stack's outputs, passed in by `template.yaml`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AwsResources {
    /// `TGQ_TABLE`: the DynamoDB table of update records.
    pub table: String,
    /// `TGQ_QUEUE_URL`: the updates FIFO queue.
    pub queue_url: String,
    /// `TGQ_DLQ_URL`: the dead-letter FIFO queue.
    pub dlq_url: String,
}

/// A stack's timer resources (docs/design/time.md), passed to the worker by `template.yaml`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimerResources {
    /// `TGQ_TIMERS_QUEUE_URL`: the standard queue where timers wait.
    pub queue_url: String,
    /// `TGQ_TIMERS_QUEUE_ARN`: its ARN, which names its records in the worker's events and is
    /// the schedules' target.
    pub queue_arn: String,
    /// `TGQ_SCHEDULE_GROUP`: the stack's EventBridge Scheduler schedule group.
    pub schedule_group: String,
    /// `TGQ_SCHEDULER_ROLE_ARN`: the role the schedules send to the queue with.
    pub scheduler_role_arn: String,
    /// `TGQ_TIMER_QUEUE_REACH_SECS`: timers due within this wait on the queue, later ones as
    /// schedules; 900 (the SQS maximum) unless a test shortens it.
    pub reach: Duration,
}

/// Where a stack's broadcasts run (docs/design/broadcast-runs.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BroadcastResources {
    /// `TGQ_BROADCASTS_QUEUE_URL`: the FIFO queue where a job's steps wait, a group per job.
    pub queue_url: String,
    /// `TGQ_BROADCASTS_QUEUE_ARN`: its ARN, which names its records in the worker's events.
    pub queue_arn: String,
    /// `TGQ_BROADCAST_CHUNK`: how many recipients a step works through before the next chunk;
    /// [`CHUNK`](crate::broadcast::CHUNK) unless a test shortens it.
    pub chunk: u64,
}

/// The environment variable that makes a bot crate's binary one of its stack's Lambda functions,
/// `webhook` or `worker` (`tgq::main` reads it; the template `tgq deploy` renders for a bot crate
/// sets it on each function).
pub const FUNCTION: &str = "TGQ_FUNCTION";

/// Every environment variable that changes what a tgq binary does: docs/CONFIGURATION.md describes
/// each (a test holds the two to the same names, and to every `TGQ_*` and `TELEGRAM_*` name the code
/// reads), and the tools that start tgq (the drill, the bench, the suite) remove each from the
/// environment they inherit, so that a developer's shell cannot change what they measure.
pub const SETTINGS: [&str; 49] = [
    "TELEGRAM_BOT_TOKEN",
    "TELEGRAM_BOT_TOKEN_PARAM",
    "TELEGRAM_API_URL",
    "TGQ_BOT_ID",
    "TGQ_WEBHOOK_SECRET",
    "TGQ_WEBHOOK_SECRET_PARAM",
    "TGQ_HANDLER",
    "TGQ_TABLE",
    "TGQ_QUEUE_URL",
    "TGQ_DLQ_URL",
    "TGQ_TIMERS_QUEUE_URL",
    "TGQ_TIMERS_QUEUE_ARN",
    "TGQ_SCHEDULE_GROUP",
    "TGQ_SCHEDULER_ROLE_ARN",
    "TGQ_TIMER_QUEUE_REACH_SECS",
    "TGQ_BROADCASTS_QUEUE_URL",
    "TGQ_BROADCASTS_QUEUE_ARN",
    "TGQ_BROADCAST_CHUNK",
    "TGQ_STACK",
    "TGQ_BOTS_PARAMETER_PREFIX",
    "TGQ_REGISTRY_REFRESH_SECS",
    "TGQ_MAX_BODY_BYTES",
    "TGQ_ALLOWED_SOURCE_CIDRS",
    "TGQ_ACK_CALLBACKS",
    "TGQ_MAX_ATTEMPTS",
    "TGQ_BACKOFF_BASE_MS",
    "TGQ_BACKOFF_CAP_MS",
    "TGQ_MAX_RETRY_AGE_SECS",
    "TGQ_MAX_RECEIVE_COUNT",
    "TGQ_DEAD_LETTER_GONE_RECIPIENTS",
    "TGQ_PRE_CHECKOUT_MARGIN_MS",
    "TGQ_PRE_CHECKOUT_REFUSAL",
    "TGQ_RECORD_TTL_SECS",
    "TGQ_RATE_PER_SECOND",
    "TGQ_RATE_PER_CHAT_PER_SECOND",
    "TGQ_RATE_PER_GROUP_PER_MINUTE",
    "TGQ_ADMIN_TOKEN",
    "TGQ_PURGE_INTERVAL_SECS",
    "TGQ_WORKER_LOOPS",
    "TGQ_WORKER_BATCH",
    "TGQ_LEASE_TTL_SECS",
    "TGQ_LEASE_RENEW_SECS",
    "TGQ_LEASE_COOLDOWN_SECS",
    "TGQ_LOG_FORMAT",
    "TGQ_TOOLS_DIR",
    "TGQ_STARTED_IN_BOT_CRATE",
    "TGQ_FUNCTION",
    "RUST_LOG",
    "TOKIO_WORKER_THREADS",
];

/// Which handler a tgq binary runs (`TGQ_HANDLER`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandlerChoice {
    /// The bot in `bot/` (`TGQ_HANDLER` unset or `bot`).
    Bot,
    /// The built-in [`crate::echo::EchoBot`] (`TGQ_HANDLER=echo`), for smoke tests.
    Echo,
}

/// The variables to read, captured once so that a config is a pure function of them.
#[derive(Clone, Debug, Default)]
pub struct Vars(BTreeMap<String, String>);

impl Vars {
    /// The process environment.
    pub fn from_env() -> Self {
        Self(std::env::vars().collect())
    }

    /// Given pairs; for tests.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self(
            pairs
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        )
    }

    /// The value of a variable, if set and not empty.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// A required variable.
    pub(crate) fn required(&self, name: &str, hint: &'static str) -> Result<String, ConfigError> {
        self.get(name)
            .map(str::to_owned)
            .ok_or_else(|| ConfigError::Missing {
                name: name.to_owned(),
                hint,
            })
    }

    /// An optional variable parsed as `T`, or `default` when unset.
    pub fn parsed<T: FromStr>(
        &self,
        name: &'static str,
        expected: &'static str,
        default: T,
    ) -> Result<T, ConfigError> {
        match self.get(name) {
            None => Ok(default),
            Some(raw) => raw
                .trim()
                .parse()
                .map_err(|_| ConfigError::Malformed { name, expected }),
        }
    }

    /// `TGQ_BOT_ID`.
    pub fn bot_id(&self) -> Result<BotId, ConfigError> {
        let raw = self.required("TGQ_BOT_ID", "a short id for this bot, e.g. `mybot`")?;
        BotId::new(raw).map_err(|_| ConfigError::Malformed {
            name: "TGQ_BOT_ID",
            expected: "1–64 characters of A–Z, a–z, 0–9, '-' or '_'",
        })
    }

    /// A secret given directly in `name` or as an SSM parameter name in `{name}_PARAM`.
    pub fn secret(&self, name: &'static str, param: &'static str) -> Option<SecretSource> {
        match (self.get(name), self.get(param)) {
            (Some(value), _) => Some(SecretSource::Value(SecretString::from(value.to_owned()))),
            (None, Some(parameter)) => Some(SecretSource::Parameter(parameter.to_owned())),
            (None, None) => None,
        }
    }

    /// `TGQ_WEBHOOK_SECRET` or `TGQ_WEBHOOK_SECRET_PARAM`, required.
    pub fn webhook_secret(&self) -> Result<SecretSource, ConfigError> {
        self.secret("TGQ_WEBHOOK_SECRET", "TGQ_WEBHOOK_SECRET_PARAM").ok_or(ConfigError::Missing {
            name: "TGQ_WEBHOOK_SECRET".into(),
            hint: "the secret_token given to setWebhook (or TGQ_WEBHOOK_SECRET_PARAM: an SSM parameter name)",
        })
    }

    /// `TELEGRAM_BOT_TOKEN` or `TELEGRAM_BOT_TOKEN_PARAM`, if either is set.
    pub fn bot_token(&self) -> Option<SecretSource> {
        self.secret("TELEGRAM_BOT_TOKEN", "TELEGRAM_BOT_TOKEN_PARAM")
    }

    /// `TELEGRAM_API_URL`, default Telegram's own.
    pub fn telegram_api_url(&self) -> Result<String, ConfigError> {
        let url = self
            .get("TELEGRAM_API_URL")
            .unwrap_or(defaults::TELEGRAM_API_URL);
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(ConfigError::Malformed {
                name: "TELEGRAM_API_URL",
                expected: "an http:// or https:// URL",
            });
        }
        Ok(url.trim_end_matches('/').to_owned())
    }

    /// `TGQ_TABLE`, `TGQ_QUEUE_URL` and `TGQ_DLQ_URL`, all required.
    pub fn aws_resources(&self) -> Result<AwsResources, ConfigError> {
        Ok(AwsResources {
            table: self.required(
                "TGQ_TABLE",
                "the DynamoDB table name (template output TableName)",
            )?,
            queue_url: self.required(
                "TGQ_QUEUE_URL",
                "the updates FIFO queue URL (template output UpdatesQueueUrl)",
            )?,
            dlq_url: self.required(
                "TGQ_DLQ_URL",
                "the dead-letter FIFO queue URL (template output DeadLetterQueueUrl)",
            )?,
        })
    }

    /// The timer resources, when `TGQ_TIMERS_QUEUE_URL` is set (then all of them are required);
    /// `None`: the deployment schedules no timers, and a handler that tries is told so.
    pub fn timer_resources(&self) -> Result<Option<TimerResources>, ConfigError> {
        if self.get("TGQ_TIMERS_QUEUE_URL").is_none() {
            return Ok(None);
        }
        let reach = self.seconds("TGQ_TIMER_QUEUE_REACH_SECS", MAX_TIMER_HOLD)?;
        if reach > MAX_TIMER_HOLD {
            return Err(ConfigError::Malformed {
                name: "TGQ_TIMER_QUEUE_REACH_SECS",
                expected: "1 to 900 seconds, the longest an SQS message timer holds a message",
            });
        }
        Ok(Some(TimerResources {
            queue_url: self.required(
                "TGQ_TIMERS_QUEUE_URL",
                "the timer queue URL (template output TimersQueueUrl)",
            )?,
            queue_arn: self.required(
                "TGQ_TIMERS_QUEUE_ARN",
                "the timer queue's ARN, which its records name",
            )?,
            schedule_group: self.required(
                "TGQ_SCHEDULE_GROUP",
                "the EventBridge Scheduler schedule group for timers due later than 15 minutes",
            )?,
            scheduler_role_arn: self.required(
                "TGQ_SCHEDULER_ROLE_ARN",
                "the role EventBridge Scheduler sends due timers to the timer queue with",
            )?,
            reach,
        }))
    }

    /// The broadcasts queue, when `TGQ_BROADCASTS_QUEUE_URL` is set (then its ARN is required);
    /// `None`: the deployment runs no broadcasts, and a handler that starts one is told so.
    pub fn broadcast_resources(&self) -> Result<Option<BroadcastResources>, ConfigError> {
        if self.get("TGQ_BROADCASTS_QUEUE_URL").is_none() {
            return Ok(None);
        }
        Ok(Some(BroadcastResources {
            queue_url: self.required(
                "TGQ_BROADCASTS_QUEUE_URL",
                "the broadcasts queue URL (template output BroadcastsQueueUrl)",
            )?,
            queue_arn: self.required(
                "TGQ_BROADCASTS_QUEUE_ARN",
                "the broadcasts queue's ARN, which its records name",
            )?,
            chunk: self.positive(
                "TGQ_BROADCAST_CHUNK",
                "a whole number of recipients from 1",
                crate::broadcast::CHUNK,
            )?,
        }))
    }

    /// `TGQ_HANDLER`: the bot in `bot/` (unset or `bot`) or the built-in echo bot (`echo`).
    pub fn handler(&self) -> Result<HandlerChoice, ConfigError> {
        match self.get("TGQ_HANDLER") {
            None | Some("bot") => Ok(HandlerChoice::Bot),
            Some("echo") => Ok(HandlerChoice::Echo),
            Some(_) => Err(ConfigError::Malformed {
                name: "TGQ_HANDLER",
                expected: "`bot` (the bot in bot/, the default) or `echo` (the built-in echo bot)",
            }),
        }
    }

    /// `TGQ_MAX_BODY_BYTES`, default 512 KiB.
    pub fn max_body_bytes(&self) -> Result<usize, ConfigError> {
        self.positive(
            "TGQ_MAX_BODY_BYTES",
            "a positive number of bytes",
            defaults::MAX_BODY_BYTES,
        )
    }

    /// An optional whole number that must be at least 1, or `default` when unset.
    pub(crate) fn positive<T>(
        &self,
        name: &'static str,
        expected: &'static str,
        default: T,
    ) -> Result<T, ConfigError>
    where
        T: FromStr + PartialOrd + From<u8>,
    {
        let value = self.parsed(name, expected, default)?;
        if value < T::from(1) {
            return Err(ConfigError::Malformed { name, expected });
        }
        Ok(value)
    }

    /// An optional duration in whole seconds from 1, or `default` when unset.
    pub(crate) fn seconds(
        &self,
        name: &'static str,
        default: Duration,
    ) -> Result<Duration, ConfigError> {
        let secs = self.positive(name, "a whole number of seconds from 1", default.as_secs())?;
        Ok(Duration::from_secs(secs))
    }

    /// `TGQ_BOT_ID` if set: the bot of the environment, which a deployment hosting only
    /// registry bots (docs/design/fleet.md §2) does without.
    pub fn env_bot_id(&self) -> Result<Option<BotId>, ConfigError> {
        match self.get("TGQ_BOT_ID") {
            None => Ok(None),
            Some(_) => self.bot_id().map(Some),
        }
    }

    /// `TGQ_BOTS_PARAMETER_PREFIX`: where the bot registry lives in SSM (`/tgq/{stack}/bots/`);
    /// unset, no registry bots.
    pub fn bots_layout(&self) -> Result<Option<Layout>, ConfigError> {
        match self.get("TGQ_BOTS_PARAMETER_PREFIX") {
            None => Ok(None),
            Some(prefix) => Layout::new(prefix)
                .map(Some)
                .map_err(|_| ConfigError::Malformed {
                    name: "TGQ_BOTS_PARAMETER_PREFIX",
                    expected: "an SSM path like /tgq/my-stack/bots/",
                }),
        }
    }

    /// `TGQ_REGISTRY_REFRESH_SECS`, default 30 s: how often the bot registry is read again.
    pub fn registry_refresh(&self) -> Result<Duration, ConfigError> {
        self.seconds("TGQ_REGISTRY_REFRESH_SECS", defaults::REGISTRY_REFRESH)
    }

    /// `TGQ_RECORD_TTL_SECS`, default 15 days: how long update records (and, in local mode, outbox
    /// entries) are kept before DynamoDB's TTL or local retention removes them.
    pub fn record_ttl(&self) -> Result<Duration, ConfigError> {
        self.seconds("TGQ_RECORD_TTL_SECS", defaults::RECORD_TTL)
    }

    /// `TGQ_MAX_RECEIVE_COUNT`, default SQS's maximum: the updates queue's redrive setting, which the
    /// worker warns about before it is reached.
    pub fn max_receive_count(&self) -> Result<u32, ConfigError> {
        self.positive(
            "TGQ_MAX_RECEIVE_COUNT",
            "a whole number from 1",
            defaults::MAX_RECEIVE_COUNT,
        )
    }

    /// `TGQ_RATE_PER_SECOND`, `TGQ_RATE_PER_CHAT_PER_SECOND`, `TGQ_RATE_PER_GROUP_PER_MINUTE`:
    /// Telegram's flood limits per bot and process; `0` lifts one.
    pub fn rate_limits(&self) -> Result<RateLimits, ConfigError> {
        let limit = |name, default| -> Result<Option<u32>, ConfigError> {
            let n = self.parsed(name, "a whole number (0: no limit)", default)?;
            Ok((n > 0).then_some(n))
        };
        Ok(RateLimits {
            per_second: limit("TGQ_RATE_PER_SECOND", defaults::RATE_PER_SECOND)?,
            per_chat_per_second: limit(
                "TGQ_RATE_PER_CHAT_PER_SECOND",
                defaults::RATE_PER_CHAT_PER_SECOND,
            )?,
            per_group_per_minute: limit(
                "TGQ_RATE_PER_GROUP_PER_MINUTE",
                defaults::RATE_PER_GROUP_PER_MINUTE,
            )?,
        })
    }

    /// `TGQ_ACK_CALLBACKS` (webhook, worker, local): `true` has the webhook answer a queued
    /// callback query in its reply and the worker take the handler's own answer to it as done;
    /// unset or `false`, the handler's answer is sent as any other call.
    pub fn ack_callbacks(&self) -> Result<bool, ConfigError> {
        match self.get("TGQ_ACK_CALLBACKS") {
            None | Some("false") => Ok(false),
            Some("true") => Ok(true),
            Some(_) => Err(ConfigError::Malformed {
                name: "TGQ_ACK_CALLBACKS",
                expected: "`true` or `false`",
            }),
        }
    }

    /// `TGQ_PRE_CHECKOUT_MARGIN_MS` (0 to 8000) and `TGQ_PRE_CHECKOUT_REFUSAL` (1 to 255
    /// characters): how a pre-checkout query is answered in time whatever its handler does.
    pub fn pre_checkout(&self) -> Result<PreCheckoutPolicy, ConfigError> {
        const MARGIN: &str = "TGQ_PRE_CHECKOUT_MARGIN_MS";
        const MARGIN_RANGE: &str = "milliseconds from 0 to 8000";
        let margin: u64 =
            self.parsed(MARGIN, MARGIN_RANGE, millis(defaults::PRE_CHECKOUT_MARGIN))?;
        if margin > 8000 {
            return Err(ConfigError::Malformed {
                name: MARGIN,
                expected: MARGIN_RANGE,
            });
        }
        let refusal = match self.get("TGQ_PRE_CHECKOUT_REFUSAL") {
            None => defaults::PRE_CHECKOUT_REFUSAL.to_owned(),
            Some(text) if (1..=255).contains(&text.trim().chars().count()) => {
                text.trim().to_owned()
            }
            Some(_) => {
                return Err(ConfigError::Malformed {
                    name: "TGQ_PRE_CHECKOUT_REFUSAL",
                    expected: "a message of 1 to 255 characters",
                })
            }
        };
        Ok(PreCheckoutPolicy {
            margin: Duration::from_millis(margin),
            refusal,
        })
    }

    /// `TGQ_DEAD_LETTER_GONE_RECIPIENTS`: `true` dead-letters updates whose recipient is gone
    /// (blocked the bot, deleted their account); unset or `false` settles them `DONE` as
    /// `recipient_gone`.
    pub fn gone_recipients(&self) -> Result<GoneRecipients, ConfigError> {
        match self.get("TGQ_DEAD_LETTER_GONE_RECIPIENTS") {
            None => Ok(GoneRecipients::default()),
            Some("false") => Ok(GoneRecipients::Settle),
            Some("true") => Ok(GoneRecipients::DeadLetter),
            Some(_) => Err(ConfigError::Malformed {
                name: "TGQ_DEAD_LETTER_GONE_RECIPIENTS",
                expected: "`true` or `false`",
            }),
        }
    }

    /// `TGQ_MAX_ATTEMPTS`, `TGQ_BACKOFF_BASE_MS`, `TGQ_BACKOFF_CAP_MS`, `TGQ_MAX_RETRY_AGE_SECS`.
    pub fn retry_policy(&self) -> Result<RetryPolicy, ConfigError> {
        let default = RetryPolicy::default();
        let max_attempts = self.positive(
            "TGQ_MAX_ATTEMPTS",
            "a whole number from 1",
            default.max_attempts,
        )?;
        let base = self.parsed("TGQ_BACKOFF_BASE_MS", "milliseconds", millis(default.base))?;
        let cap = self.parsed("TGQ_BACKOFF_CAP_MS", "milliseconds", millis(default.cap))?;
        if cap < base {
            return Err(ConfigError::Malformed {
                name: "TGQ_BACKOFF_CAP_MS",
                expected: "milliseconds, at least TGQ_BACKOFF_BASE_MS",
            });
        }
        Ok(RetryPolicy {
            max_attempts,
            base: Duration::from_millis(base),
            cap: Duration::from_millis(cap),
            max_retry_age: self.seconds("TGQ_MAX_RETRY_AGE_SECS", default.max_retry_age)?,
        })
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_bot_id_names_the_variable() {
        let err = Vars::default().bot_id().unwrap_err();
        assert!(
            err.to_string().starts_with("TGQ_BOT_ID is not set"),
            "{err}"
        );
    }

    #[test]
    fn malformed_numbers_name_the_variable_and_not_the_value() {
        let vars = Vars::from_pairs([("TGQ_MAX_ATTEMPTS", "eight")]);
        assert_eq!(
            vars.retry_policy().unwrap_err(),
            ConfigError::Malformed {
                name: "TGQ_MAX_ATTEMPTS",
                expected: "a whole number from 1"
            }
        );
        let vars = Vars::from_pairs([
            ("TGQ_BACKOFF_BASE_MS", "5000"),
            ("TGQ_BACKOFF_CAP_MS", "10"),
        ]);
        assert!(vars
            .retry_policy()
            .unwrap_err()
            .to_string()
            .contains("TGQ_BACKOFF_CAP_MS"));
    }

    #[test]
    fn defaults_apply_when_nothing_is_set() {
        let vars = Vars::default();
        assert_eq!(vars.retry_policy().unwrap(), RetryPolicy::default());
        assert_eq!(vars.max_body_bytes().unwrap(), 512 * 1024);
        assert_eq!(vars.telegram_api_url().unwrap(), "https://api.telegram.org");
        assert_eq!(vars.record_ttl().unwrap(), defaults::RECORD_TTL);
    }

    #[test]
    fn the_record_ttl_is_read_in_seconds_and_must_be_positive() {
        let vars = Vars::from_pairs([("TGQ_RECORD_TTL_SECS", "10")]);
        assert_eq!(vars.record_ttl().unwrap(), Duration::from_secs(10));
        for bad in ["0", "-5", "1d"] {
            let vars = Vars::from_pairs([("TGQ_RECORD_TTL_SECS", bad)]);
            assert_eq!(
                vars.record_ttl().unwrap_err(),
                ConfigError::Malformed {
                    name: "TGQ_RECORD_TTL_SECS",
                    expected: "a whole number of seconds from 1"
                },
                "{bad}"
            );
        }
    }

    #[test]
    fn rate_limits_default_to_telegram_s_and_zero_lifts_one() {
        assert_eq!(
            Vars::default().rate_limits().unwrap(),
            RateLimits::default()
        );
        let vars = Vars::from_pairs([("TGQ_RATE_PER_CHAT_PER_SECOND", "0")]);
        assert_eq!(vars.rate_limits().unwrap().per_chat_per_second, None);
        let vars = Vars::from_pairs([("TGQ_RATE_PER_SECOND", "fast")]);
        assert!(vars
            .rate_limits()
            .unwrap_err()
            .to_string()
            .contains("TGQ_RATE_PER_SECOND"));
    }

    #[test]
    fn gone_recipients_settle_unless_told_to_dead_letter() {
        let read = |value: &'static str| {
            Vars::from_pairs([("TGQ_DEAD_LETTER_GONE_RECIPIENTS", value)]).gone_recipients()
        };
        assert_eq!(
            Vars::default().gone_recipients(),
            Ok(GoneRecipients::Settle)
        );
        assert_eq!(read("false"), Ok(GoneRecipients::Settle));
        assert_eq!(read("true"), Ok(GoneRecipients::DeadLetter));
        assert_eq!(
            read("yes"),
            Err(ConfigError::Malformed {
                name: "TGQ_DEAD_LETTER_GONE_RECIPIENTS",
                expected: "`true` or `false`",
            })
        );
    }

    #[test]
    fn the_pre_checkout_margin_and_refusal_are_read_within_their_bounds() {
        assert_eq!(
            Vars::default().pre_checkout(),
            Ok(PreCheckoutPolicy::default())
        );
        let set = Vars::from_pairs([
            ("TGQ_PRE_CHECKOUT_MARGIN_MS", "1500"),
            ("TGQ_PRE_CHECKOUT_REFUSAL", " Sold out "),
        ]);
        assert_eq!(
            set.pre_checkout(),
            Ok(PreCheckoutPolicy {
                margin: Duration::from_millis(1500),
                refusal: "Sold out".into(),
            })
        );
        for (name, value) in [
            ("TGQ_PRE_CHECKOUT_MARGIN_MS", "8001"),
            ("TGQ_PRE_CHECKOUT_MARGIN_MS", "two"),
            ("TGQ_PRE_CHECKOUT_REFUSAL", "  "),
        ] {
            let refused = Vars::from_pairs([(name, value)])
                .pre_checkout()
                .unwrap_err();
            assert!(refused.to_string().contains(name), "{refused}");
        }
        let long = "x".repeat(256);
        let refused =
            Vars::from_pairs([("TGQ_PRE_CHECKOUT_REFUSAL", long.as_str())]).pre_checkout();
        assert!(refused.is_err());
    }

    #[test]
    fn a_secret_value_wins_over_its_parameter_name() {
        let vars = Vars::from_pairs([
            ("TGQ_WEBHOOK_SECRET", "s"),
            ("TGQ_WEBHOOK_SECRET_PARAM", "/p"),
        ]);
        assert!(matches!(
            vars.webhook_secret().unwrap(),
            SecretSource::Value(_)
        ));
        let vars = Vars::from_pairs([("TGQ_WEBHOOK_SECRET_PARAM", "/p")]);
        assert!(matches!(vars.webhook_secret().unwrap(), SecretSource::Parameter(p) if p == "/p"));
    }
}
