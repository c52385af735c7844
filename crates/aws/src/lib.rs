//! tgq's AWS adapters: update records in DynamoDB ([`DynamoStore`]), the pollers' lease in the same
//! table ([`DynamoPollerLease`]), the updates queue and the dead-letter queue on SQS FIFO
//! ([`SqsQueue`]), timers on a standard queue and EventBridge Scheduler ([`AwsTimers`]), secrets from SSM Parameter Store
//! ([`resolve_secret`]), the bot registry under one SSM prefix ([`SsmRegistry`]), and what both functions set up the same way: the client configuration
//! ([`aws_config`]), their logs ([`init_logging`]) and their metrics ([`init_metrics`]); and the two
//! functions themselves, each built from its configuration in one call ([`webhook::run`],
//! [`worker::run`]). Every SDK type stays
//! inside this crate: the ports speak only `tgq_core` types, and [`PortError`](tgq_core::PortError)
//! says whether a failure is worth retrying.

mod broadcasts;
mod budget;
mod charges;
mod chat_timers;
mod dynamo;
mod error;
mod item;
mod lease;
mod letter;
mod logging;
mod metrics;
mod registry;
mod secret;
mod sqs;
mod timers;
pub mod webhook;
pub mod worker;

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_smithy_http_client::tls;
use aws_smithy_runtime_api::client::http::SharedHttpClient;

pub use broadcasts::DynamoBroadcasts;
pub use budget::DynamoBudgetCells;
pub use chat_timers::StackTimer;
pub use dynamo::DynamoStore;
pub use lease::DynamoPollerLease;
pub use letter::dead_letter_marks;
pub use logging::{init_logging, json_logs, log_filter, DEFAULT_LOG_FILTER};
pub use metrics::init_metrics;
pub use registry::SsmRegistry;
pub use secret::{resolve_secret, SecretError};
pub use sqs::SqsQueue;
pub use timers::{
    delete_schedule, schedule_name, AwsTimers, Schedules, SqsTimerQueue, SCHEDULE_LEAD,
};

/// Longest wait for a connection to an AWS endpoint.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest wait for one attempt of an AWS call.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest wait for an AWS call, retries included: the webhook must answer well inside Telegram's 60 s.
const OPERATION_TIMEOUT: Duration = Duration::from_secs(5);
/// Attempts per AWS call, the first included.
const MAX_ATTEMPTS: u32 = 3;

/// The HTTPS client for AWS calls: rustls on ring, the one TLS stack in tgq's binaries (reqwest's for
/// Telegram too), trusting the system's root certificates. The SDK's own default client is left out
/// of the build (see the workspace `Cargo.toml`): it would add aws-lc beside ring.
pub fn https_client() -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https()
}

/// The timeouts of an AWS call that may legitimately wait `extra` on the server (a long poll).
fn timeouts(extra: Duration) -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .operation_attempt_timeout(ATTEMPT_TIMEOUT + extra)
        .operation_timeout(OPERATION_TIMEOUT + extra)
        .build()
}

/// The configuration every AWS client is built from, once per cold start: region and credentials
/// from the environment, `AWS_ENDPOINT_URL` honoured (moto, LocalStack), short timeouts (connect 1 s,
/// attempt 2 s, call 5 s), the standard retry mode with at most 3 attempts, and [`https_client`].
pub async fn aws_config() -> SdkConfig {
    aws_config_in(None).await
}

/// [`aws_config`] in `region` when one is given (the `tgq` command's `--region`), else the
/// environment's (`AWS_REGION`, the profile).
pub async fn aws_config_in(region: Option<String>) -> SdkConfig {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .http_client(https_client())
        .timeout_config(timeouts(Duration::ZERO))
        .retry_config(RetryConfig::standard().with_max_attempts(MAX_ATTEMPTS));
    if let Some(region) = region {
        loader = loader.region(aws_config::Region::new(region));
    }
    loader.load().await
}
