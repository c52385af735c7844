//! The drill's table: one row per scenario and target, and every missed requirement below it.

use std::fmt::Write as _;

use crate::tally::Row;

/// The table as text.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<3} {:<18} {:<8} {:>5} {:>5} {:>5} {:>5} {:>4} {:>5} {:>9} {:>5} {:>5} {:>5} {:>6} {:>7}  result",
        "#", "scenario", "target", "sent", "ack", "once", "twice", "lost", "order", "dead e/u", "uncrt", "limit", "fence", "drain", ""
    );
    for row in rows {
        let fenced = row
            .fenced_writes
            .map_or("n/a".to_owned(), |n| n.to_string());
        let result = if row.passed() { "PASS" } else { "FAIL" };
        let _ = writeln!(
            out,
            "{:<3} {:<18} {:<8} {:>5} {:>5} {:>5} {:>5} {:>4} {:>5} {:>9} {:>5} {:>5} {:>5} {:>6.1}s {:>1} {result}",
            row.scenario,
            row.name,
            row.target,
            row.sent,
            row.acknowledged,
            row.processed_once,
            row.processed_twice,
            row.lost,
            row.order_violations,
            format!("{}/{}", row.dead_expected, row.dead_unexpected),
            row.uncertain_sends,
            row.telegram_limit_violations,
            fenced,
            row.drain_secs,
            "",
        );
    }
    let failed: Vec<&Row> = rows.iter().filter(|r| !r.passed()).collect();
    if !failed.is_empty() {
        let _ = writeln!(out, "\nmissed:");
        for row in failed {
            for check in row.checks.iter().filter(|c| !c.met) {
                let _ = writeln!(
                    out,
                    "  #{} {} ({}): {} — {}",
                    row.scenario, row.name, row.target, check.required, check.observed
                );
            }
            if let Some(waits) = &row.waits_for {
                let _ = writeln!(out, "    waits for {waits}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tally::Check;

    #[test]
    fn a_failed_row_lists_what_it_missed_and_what_it_waits_for() {
        let row = Row {
            sent: 10,
            acknowledged: 10,
            processed_once: 10,
            telegram_limit_violations: 4,
            drain_secs: 1.5,
            waits_for: Some("a store that fences late writes".into()),
            ..Row::uncounted(
                7,
                "flood-wait",
                "local",
                vec![Check::new("0 Telegram limit violations", false, "4")],
            )
        };
        let text = table(&[row]);
        assert!(text.contains("FAIL"), "{text}");
        assert!(text.contains("0 Telegram limit violations — 4"), "{text}");
        assert!(
            text.contains("waits for a store that fences late writes"),
            "{text}"
        );
    }
}
