//! Summaries of latency samples.

use std::time::Duration;

/// Count, mean, percentiles and maximum of a set of samples, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    /// How many samples.
    pub count: usize,
    /// Their mean.
    pub mean: f64,
    /// The median.
    pub p50: f64,
    /// The 90th percentile.
    pub p90: f64,
    /// The 99th percentile.
    pub p99: f64,
    /// The largest.
    pub max: f64,
}

impl Summary {
    /// Summarises samples given in milliseconds (nearest-rank percentiles).
    pub fn of_millis(samples: &[f64]) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let rank = |p: f64| {
            let index = (p / 100.0 * sorted.len() as f64).ceil() as usize;
            sorted[index.clamp(1, sorted.len()) - 1]
        };
        Self {
            count: sorted.len(),
            mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
            p50: rank(50.0),
            p90: rank(90.0),
            p99: rank(99.0),
            max: sorted[sorted.len() - 1],
        }
    }

    /// Summarises durations.
    pub fn of_durations(samples: &[Duration]) -> Self {
        let millis: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        Self::of_millis(&millis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        let summary = Summary::of_millis(&samples);
        assert_eq!(summary.count, 100);
        assert_eq!(summary.p50, 50.0);
        assert_eq!(summary.p90, 90.0);
        assert_eq!(summary.p99, 99.0);
        assert_eq!(summary.max, 100.0);
        assert_eq!(summary.mean, 50.5);
    }

    #[test]
    fn one_sample_is_every_percentile() {
        let summary = Summary::of_millis(&[7.0]);
        assert_eq!((summary.p50, summary.p99, summary.max), (7.0, 7.0, 7.0));
    }
}
