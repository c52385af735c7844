//! The Prometheus face of `tgq_core::metrics`, served at `/metrics` by `tgq local` and `tgq poll`.
//!
//! The use cases count under CloudWatch's names (`Received`, `EndToEndLatencyMs`, dimension
//! `BotId`), which the stack's alarms and dashboard name. A Prometheus scraper expects its own
//! conventions instead (prometheus.io, "Metric and label naming"): a `tgq_` prefix, snake case,
//! counters ending in `_total`, durations in seconds, snake-case labels. [`install`] puts a recorder
//! in front of the exporter that renames each metric as it is registered and scales milliseconds
//! to seconds; the use cases keep one set of names. [`record_store`] sets the gauges of the local
//! store's queue before each scrape.

use std::sync::Arc;

use anyhow::Context as _;
use metrics::{
    gauge, Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Label, Metadata, Recorder,
    SharedString, Unit,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use tgq_core::metrics::{COUNTERS, HISTOGRAMS, POLLER_COUNTERS};
use tgq_embedded::StoreStats;

/// Messages on the local queue that no run holds.
pub const PENDING: &str = "tgq_queue_pending_messages";
/// Messages on the local queue a run holds now.
pub const IN_FLIGHT: &str = "tgq_queue_in_flight_messages";
/// Dead letters in the local store.
pub const DEAD_LETTERS: &str = "tgq_dead_letters";
/// How long ago the oldest message on the local queue was sent; 0 when the queue is empty.
pub const OLDEST_AGE: &str = "tgq_queue_oldest_message_age_seconds";

/// Installs the renaming recorder in front of a Prometheus exporter as the global recorder, and
/// describes every metric; the handle renders the text `/metrics` serves.
pub fn install() -> anyhow::Result<PrometheusHandle> {
    let exporter = PrometheusBuilder::new().build_recorder();
    let handle = exporter.handle();
    metrics::set_global_recorder(Renamed(exporter)).context("installing the metrics recorder")?;
    tgq_core::metrics::describe();
    for (name, help) in [
        (PENDING, "Messages on the queue that no run holds."),
        (IN_FLIGHT, "Messages on the queue a run holds now."),
        (DEAD_LETTERS, "Dead letters kept in the store."),
    ] {
        metrics::describe_gauge!(name, Unit::Count, help);
    }
    metrics::describe_gauge!(
        OLDEST_AGE,
        Unit::Seconds,
        "How long ago the oldest message on the queue was sent."
    );
    Ok(handle)
}

/// Sets the store's gauges from `stats`, read just before a scrape.
pub fn record_store(stats: &StoreStats) {
    gauge!(PENDING).set(stats.pending as f64);
    gauge!(IN_FLIGHT).set(stats.in_flight as f64);
    gauge!(DEAD_LETTERS).set(stats.dead as f64);
    let oldest = stats
        .oldest_pending_age
        .map_or(0.0, |age| age.as_secs_f64());
    gauge!(OLDEST_AGE).set(oldest);
}

/// The Prometheus name of one of `tgq_core::metrics`' counters or histograms; any other name is
/// already a Prometheus name and stays as it is.
pub fn name(cloudwatch: &str) -> String {
    if COUNTERS.contains(&cloudwatch) || POLLER_COUNTERS.contains(&cloudwatch) {
        return format!("tgq_{}_total", snake(cloudwatch));
    }
    if HISTOGRAMS.contains(&cloudwatch) {
        let base = cloudwatch.strip_suffix("Ms").unwrap_or(cloudwatch);
        return format!("tgq_{}_seconds", snake(base));
    }
    cloudwatch.to_owned()
}

/// `EndToEndLatency` → `end_to_end_latency`, `BotId` → `bot_id`.
fn snake(camel: &str) -> String {
    let mut snake = String::with_capacity(camel.len() + 4);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                snake.push('_');
            }
            snake.push(c.to_ascii_lowercase());
        } else {
            snake.push(c);
        }
    }
    snake
}

/// `key` under its Prometheus name, with snake-case label names.
fn renamed(key: &Key) -> Key {
    let labels: Vec<Label> = key
        .labels()
        .map(|label| Label::new(snake(label.key()), label.value().to_owned()))
        .collect();
    Key::from_parts(name(key.name()), labels)
}

/// Whether `key` is one of the histograms counted in milliseconds.
fn in_millis(key: &Key) -> bool {
    HISTOGRAMS.contains(&key.name())
}

/// The exporter behind the renaming.
struct Renamed(PrometheusRecorder);

impl Recorder for Renamed {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        let key = KeyName::from(name(key.as_str()));
        self.0.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        let unit = match unit {
            Some(Unit::Milliseconds) => Some(Unit::Seconds),
            other => other,
        };
        let key = KeyName::from(name(key.as_str()));
        self.0.describe_histogram(key, unit, description);
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        self.0.register_counter(&renamed(key), metadata)
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        self.0.register_gauge(&renamed(key), metadata)
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        let histogram = self.0.register_histogram(&renamed(key), metadata);
        match in_millis(key) {
            true => Histogram::from_arc(Arc::new(Seconds(histogram))),
            false => histogram,
        }
    }
}

/// A histogram handed milliseconds that records seconds.
struct Seconds(Histogram);

impl HistogramFn for Seconds {
    fn record(&self, millis: f64) {
        self.0.record(millis / 1000.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_end_in_total_and_durations_are_in_seconds() {
        assert_eq!(name("Received"), "tgq_received_total");
        assert_eq!(name("IngestUnavailable"), "tgq_ingest_unavailable_total");
        assert_eq!(name("PollerTakeovers"), "tgq_poller_takeovers_total");
        assert_eq!(name("EndToEndLatencyMs"), "tgq_end_to_end_latency_seconds");
        assert_eq!(name("ThrottledWaitMs"), "tgq_throttled_wait_seconds");
        assert_eq!(name(PENDING), PENDING);
    }

    #[test]
    fn every_metric_has_help_text() {
        for metric in COUNTERS.iter().chain(&POLLER_COUNTERS).chain(&HISTOGRAMS) {
            assert!(!tgq_core::metrics::help(metric).is_empty(), "{metric}");
        }
    }

    #[test]
    fn every_name_follows_prometheus_conventions() {
        for metric in COUNTERS.iter().chain(&POLLER_COUNTERS).chain(&HISTOGRAMS) {
            let renamed = name(metric);
            assert!(renamed.starts_with("tgq_"), "{renamed}");
            assert!(
                renamed
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{renamed}"
            );
            assert!(
                renamed.ends_with("_total") || renamed.ends_with("_seconds"),
                "{renamed}"
            );
        }
    }
}
