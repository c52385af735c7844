//! Medians, ratios and the targets, printed.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use tgq_fake_lambda::ColdStart;

use crate::subjects::{Function, Implementation};

/// Largest median exec → first poll for each tgq function.
pub const TARGET_TO_NEXT_MS: f64 = 15.0;
/// Largest median peak RSS for each tgq function.
pub const TARGET_PEAK_RSS_MIB: f64 = 20.0;
/// Smallest ratio of the Node.js equivalent's median time to first poll over tgq's.
pub const TARGET_NODE_RATIO: f64 = 15.0;

/// The measurements of one subject.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    pub to_first_poll: Vec<Duration>,
    pub to_answer: Vec<Duration>,
    pub peak_rss_kib: Vec<u64>,
    /// Warm invocations on real updates: hand-out → answer.
    pub warm: Vec<Duration>,
}

impl Samples {
    pub fn push(&mut self, cold: &ColdStart) {
        self.to_first_poll.push(cold.to_first_poll);
        self.to_answer.push(cold.to_answer);
        self.peak_rss_kib.push(cold.peak_rss_kib);
    }

    pub fn push_warm(&mut self, cold: &ColdStart) {
        self.warm.extend(cold.warm.iter().map(|warm| warm.took));
    }
}

/// A median with the range it came from.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: impl IntoIterator<Item = f64>) -> Spread {
        let mut sorted: Vec<f64> = values.into_iter().collect();
        if sorted.is_empty() {
            return Spread::default();
        }
        sorted.sort_by(f64::total_cmp);
        let middle = sorted.len() / 2;
        let median = if sorted.len().is_multiple_of(2) {
            (sorted[middle - 1] + sorted[middle]) / 2.0
        } else {
            sorted[middle]
        };
        Spread {
            median,
            min: sorted[0],
            max: sorted[sorted.len() - 1],
        }
    }
}

/// The summary of one subject: milliseconds and MiB.
#[derive(Clone, Copy, Debug, Default)]
pub struct Figures {
    pub to_next_ms: Spread,
    pub to_answer_ms: Spread,
    pub peak_rss_mib: Spread,
    /// A warm invocation on a real update, against fakes that answer at once: the function's own
    /// time (median and range of every warm invocation measured).
    pub warm_ms: Spread,
}

impl Figures {
    pub fn of(samples: &Samples) -> Figures {
        let millis = |values: &[Duration]| Spread::of(values.iter().map(|d| d.as_secs_f64() * 1e3));
        Figures {
            to_next_ms: millis(&samples.to_first_poll),
            to_answer_ms: millis(&samples.to_answer),
            peak_rss_mib: Spread::of(samples.peak_rss_kib.iter().map(|kib| *kib as f64 / 1024.0)),
            warm_ms: millis(&samples.warm),
        }
    }
}

/// Every subject's figures.
pub type Results = BTreeMap<(Function, Implementation), Figures>;

/// How a figure compares with its target.
fn verdict(met: bool) -> &'static str {
    if met {
        "MET"
    } else {
        "MISSED"
    }
}

fn spread(spread: Spread, decimals: usize) -> String {
    format!(
        "{:.decimals$} ({:.decimals$}–{:.decimals$})",
        spread.median, spread.min, spread.max
    )
}

/// The figures as a table (Markdown when `markdown`), then the ratios and the targets.
pub fn render(results: &Results, runs: usize, markdown: bool) -> String {
    let mut out = String::new();
    let header = [
        "function",
        "implementation",
        "exec → /next, ms",
        "exec → first answer, ms",
        "peak RSS, MiB",
        "/next vs tgq",
        "warm invocation, ms",
        "warm vs tgq",
    ];
    let mut rows = Vec::new();
    for ((function, implementation), figures) in results {
        let tgq = results.get(&(*function, Implementation::Tgq));
        let ratio = |of: fn(&Figures) -> f64| {
            tgq.map_or("–".to_owned(), |tgq| {
                format!("{:.1} ×", of(figures) / of(tgq))
            })
        };
        rows.push([
            function.to_string(),
            implementation.to_string(),
            spread(figures.to_next_ms, 1),
            spread(figures.to_answer_ms, 1),
            spread(figures.peak_rss_mib, 1),
            ratio(|figures| figures.to_next_ms.median),
            spread(figures.warm_ms, 2),
            ratio(|figures| figures.warm_ms.median),
        ]);
    }
    let _ = writeln!(
        out,
        "Cold start on a fake Lambda Runtime API: median (min–max) of {runs} runs each; a warm \
         invocation (a real update against fakes that answer at once): median (min–max) of the \
         warm events of the unmeasured first start\n"
    );
    if markdown {
        let _ = writeln!(out, "| {} |", header.join(" | "));
        let _ = writeln!(out, "|{}", "---|".repeat(header.len()));
        for row in &rows {
            let _ = writeln!(out, "| {} |", row.join(" | "));
        }
    } else {
        let widths: Vec<usize> = (0..header.len())
            .map(|column| {
                rows.iter()
                    .map(|row| row[column].chars().count())
                    .chain([header[column].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: Vec<&str>| {
            cells
                .iter()
                .zip(&widths)
                .map(|(cell, width)| format!("{cell:<width$}"))
                .collect::<Vec<_>>()
                .join("  ")
        };
        let _ = writeln!(out, "{}", line(header.to_vec()));
        for row in &rows {
            let _ = writeln!(out, "{}", line(row.iter().map(String::as_str).collect()));
        }
    }

    let _ = writeln!(
        out,
        "\nTargets per function: tgq ≤ {TARGET_TO_NEXT_MS} ms to /next, ≤ {TARGET_PEAK_RSS_MIB} MiB peak RSS, \
         ≥ {TARGET_NODE_RATIO} × faster to /next than Node.js"
    );
    for function in Function::ALL {
        let Some(tgq) = results.get(&(function, Implementation::Tgq)) else {
            continue;
        };
        let next = tgq.to_next_ms.median;
        let rss = tgq.peak_rss_mib.median;
        let mut line = format!(
            "  {function}: /next {next:.1} ms {}, peak RSS {rss:.1} MiB {}",
            verdict(next <= TARGET_TO_NEXT_MS),
            verdict(rss <= TARGET_PEAK_RSS_MIB),
        );
        if let Some(node) = results.get(&(function, Implementation::Node)) {
            let ratio = node.to_next_ms.median / next;
            let _ = write!(
                line,
                ", Node.js / tgq {ratio:.1} × {}",
                verdict(ratio >= TARGET_NODE_RATIO)
            );
        }
        if let Some(python) = results.get(&(function, Implementation::Python)) {
            let _ = write!(
                line,
                ", Python / tgq {:.1} ×",
                python.to_next_ms.median / next
            );
        }
        let _ = writeln!(out, "{line}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        let spread = Spread::of([4.0, 1.0, 3.0, 2.0]);
        assert_eq!(spread.median, 2.5);
        assert_eq!((spread.min, spread.max), (1.0, 4.0));
        assert_eq!(Spread::of([5.0, 1.0, 3.0]).median, 3.0);
    }

    #[test]
    fn a_target_missed_is_reported_as_missed() {
        let mut results = Results::new();
        let figures = |next: f64, rss: f64| Figures {
            to_next_ms: Spread::of([next]),
            to_answer_ms: Spread::of([next]),
            peak_rss_mib: Spread::of([rss]),
            warm_ms: Spread::of([1.0]),
        };
        results.insert((Function::Webhook, Implementation::Tgq), figures(16.0, 8.0));
        results.insert(
            (Function::Webhook, Implementation::Node),
            figures(160.0, 70.0),
        );
        let text = render(&results, 1, false);
        assert!(text.contains("/next 16.0 ms MISSED"), "{text}");
        assert!(text.contains("peak RSS 8.0 MiB MET"), "{text}");
        assert!(text.contains("Node.js / tgq 10.0 × MISSED"), "{text}");
    }
}
