//! Defaults shared by the code, `template.yaml` and the README; a test keeps them in step.

use std::time::Duration;

/// Handler runs allowed per update before it is dead-lettered.
pub const MAX_ATTEMPTS: u32 = 8;
/// First backoff step; doubled on every further attempt.
pub const BACKOFF_BASE: Duration = Duration::from_secs(2);
/// Largest backoff step before jitter.
pub const BACKOFF_CAP: Duration = Duration::from_secs(300);
/// Largest webhook body accepted (Telegram updates are far smaller).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// How long an update record is kept before DynamoDB's TTL (or local retention) removes it.
pub const RECORD_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// Below this much remaining invocation time, the worker starts no further record.
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(5);
/// The worker Lambda's timeout in `template.yaml`; the queue's visibility timeout must be ≥ 6× this.
pub const WORKER_TIMEOUT: Duration = Duration::from_secs(60);
/// The SQS ceiling for a message's visibility timeout.
pub const MAX_VISIBILITY: Duration = Duration::from_secs(12 * 3600);
/// The Telegram Bot API base URL used when `TELEGRAM_API_URL` is not set.
pub const TELEGRAM_API_URL: &str = "https://api.telegram.org";
