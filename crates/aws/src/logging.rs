//! The functions' logs: JSON lines on stdout, which Lambda sends to CloudWatch Logs, at `info` unless
//! `RUST_LOG` says otherwise. Nothing logged ever carries a token, a secret or message text.

use tracing::Subscriber;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::EnvFilter;

/// The level when `RUST_LOG` is unset, or set to something that is not a filter.
pub const DEFAULT_LOG_FILTER: &str = "info";

/// Installs the global subscriber for a Lambda function: [`json_logs`] on stdout, filtered by
/// `RUST_LOG` (default [`DEFAULT_LOG_FILTER`]).
pub fn init_logging() {
    let rust_log = std::env::var("RUST_LOG").ok();
    let (filter, refused) = log_filter(rust_log.as_deref());
    json_logs(filter, std::io::stdout).init();
    if let Some(error) = refused {
        tracing::warn!(%error, "RUST_LOG is not a log filter; logging at {DEFAULT_LOG_FILTER}");
    }
}

/// The functions' log lines: JSON, each with the fields of the spans it is in — the invocation's
/// `request_id`, and the use cases' `bot_id`, `update_id`, `group` and `attempt` — written to
/// `writer`.
pub fn json_logs<W>(filter: EnvFilter, writer: W) -> impl Subscriber + Send + Sync
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .json()
        .with_current_span(true)
        .with_span_list(true)
        .with_env_filter(filter)
        .with_writer(writer)
        .finish()
}

/// The filter for `rust_log` (`RUST_LOG`'s value), and why it was refused when it was.
pub fn log_filter(rust_log: Option<&str>) -> (EnvFilter, Option<String>) {
    match rust_log.map(str::trim).filter(|text| !text.is_empty()) {
        None => (EnvFilter::new(DEFAULT_LOG_FILTER), None),
        Some(text) => match EnvFilter::try_new(text) {
            Ok(filter) => (filter, None),
            Err(error) => (EnvFilter::new(DEFAULT_LOG_FILTER), Some(error.to_string())),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_log_at_info_unless_rust_log_says_otherwise() {
        for unset in [None, Some(""), Some("  ")] {
            let (filter, refused) = log_filter(unset);
            assert_eq!(filter.to_string(), "info", "{unset:?}");
            assert!(refused.is_none());
        }
        let (filter, refused) = log_filter(Some("debug,hyper=warn"));
        assert_eq!(filter.to_string(), "hyper=warn,debug");
        assert!(refused.is_none());
        let (filter, refused) = log_filter(Some("tgq=loud"));
        assert_eq!(filter.to_string(), "info");
        assert!(refused.is_some());
    }
}
