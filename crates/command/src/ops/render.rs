//! How the operations commands print their views as text.

use std::time::Duration;

use tgq_embedded::{OldestPending, OutboxEntry};

use super::client::Source;
use crate::views::{AuditView, LetterView, ReportView, StatusView};

/// `tgq backup` as text.
pub fn backup(backup: &tgq_embedded::Backup, source: Source) {
    println!(
        "backup         {} ({} entries, {} bytes)",
        backup.path.display(),
        backup.entries,
        backup.bytes
    );
    match source {
        Source::Running(addr) => {
            println!("(taken by the running tgq local at {addr}, in one read transaction)")
        }
        Source::Store => println!("(read from the store file; tgq local is not running)"),
    }
    println!("restore: stop tgq local, then copy it to <data-dir>/tgq.redb");
}

/// `tgq status` as text.
pub fn status(view: &StatusView, source: Source) {
    let stats = &view.stats;
    let oldest = match stats.oldest_pending_age {
        Some(age) => format!(", oldest sent {} ago", human_duration(age)),
        None => String::new(),
    };
    outln!(
        "queue          {} pending, {} in flight{oldest}",
        stats.pending,
        stats.in_flight
    );
    if let Some(oldest) = &view.oldest {
        outln!("{}", oldest_line(oldest));
    }
    outln!("dead letters   {}", stats.dead);
    outln!("outbox         {}", stats.outbox);
    outln!("records        {}", stats.records);
    outln!("counters (since the store was created)");
    let counters = &view.counters;
    for (label, count) in [
        ("received", counters.received),
        ("duplicates", counters.duplicates),
        ("poison", counters.poison),
        ("processed", counters.processed),
        ("retried", counters.retried),
        ("dead-lettered", counters.dead_lettered),
        ("recipient gone", counters.recipient_gone),
        (
            "re-sent after unknown outcome",
            counters.resent_after_unknown_outcome,
        ),
    ] {
        outln!("  {label:<30} {count}");
    }
    match source {
        Source::Running(addr) => outln!("(from the running tgq local at {addr})"),
        Source::Store => outln!("(read from the store; tgq local is not running)"),
    }
}

/// The line of `tgq status` that names the oldest message on the queue: the chat it holds back,
/// the update, its attempts and last error, and when it runs again.
fn oldest_line(oldest: &OldestPending) -> String {
    let update = match oldest.update_id {
        Some(id) => format!("update {id}"),
        None => String::from("an unreadable message"),
    };
    // A chat's group key is its id; users and unordered updates have a prefix of their own.
    let group = match oldest.group.parse::<i64>() {
        Ok(chat) => format!("chat {chat}"),
        Err(_) => oldest.group.clone(),
    };
    let mut line = format!(
        "oldest         {update} of bot {} in {group}",
        oldest.bot_id
    );
    if oldest.attempts > 0 {
        line += &format!(", {} attempts", oldest.attempts);
    }
    if let Some(error) = &oldest.last_error {
        line += &format!(", last error: {error}");
    }
    line += &match (oldest.running, oldest.runs_again_in) {
        (true, _) => String::from(", running now"),
        (false, Some(wait)) => format!(", runs again in {}", human_duration(wait)),
        (false, None) => String::from(", due now"),
    };
    line
}

/// `tgq outbox` as a table.
pub fn outbox(entries: &[OutboxEntry]) {
    if entries.is_empty() {
        outln!("The outbox is empty: the bot has not sent anything offline yet.");
        return;
    }
    outbox_header();
    for entry in entries {
        outbox_row(entry);
    }
}

/// The outbox table's header.
pub fn outbox_header() {
    outln!(
        "{:>6}  {:>15}  {:>11}  {:>3}  {:<20}  TEXT",
        "ID",
        "CHAT",
        "UPDATE",
        "SEQ",
        "METHOD"
    );
}

/// One row of the outbox table.
pub fn outbox_row(entry: &OutboxEntry) {
    outln!(
        "{:>6}  {:>15}  {:>11}  {:>3}  {:<20}  {}",
        entry.id,
        dash(entry.chat_id),
        dash(entry.update_id),
        dash(entry.seq),
        entry.method,
        one_line(entry.text.as_deref().unwrap_or(""), 80),
    );
}

/// `tgq dlq list` as a table.
pub fn dead_letters(letters: &[LetterView]) {
    if letters.is_empty() {
        outln!("No dead letters.");
        return;
    }
    outln!(
        "{:<38}  {:>11}  {:<16}  {:<28}  {:<12}  {:>8}  {:>10}  ERROR",
        "ID",
        "UPDATE",
        "GROUP",
        "REASON",
        "CLASS",
        "ATTEMPTS",
        "AGE"
    );
    for letter in letters {
        outln!(
            "{:<38}  {:>11}  {:<16}  {:<28}  {:<12}  {:>8}  {:>10}  {}",
            letter.id,
            dash(letter.update_id),
            letter.group.as_deref().unwrap_or("-"),
            one_line(&letter.reason_text, 28),
            letter.error_class,
            letter.attempts,
            letter.age_ms.map_or_else(
                || "-".to_owned(),
                |ms| human_duration(Duration::from_millis(ms))
            ),
            one_line(&letter.error, 80),
        );
    }
}

/// `tgq dlq show` as text: every field, then the update's body.
pub fn letter(letter: &LetterView) {
    outln!("id             {}", letter.id);
    outln!("bot            {}", letter.bot_id);
    outln!("update         {}", dash(letter.update_id));
    outln!("group          {}", letter.group.as_deref().unwrap_or("-"));
    outln!("reason         {} ({})", letter.reason_text, letter.reason);
    outln!("error class    {}", letter.error_class);
    outln!("error          {}", letter.error);
    outln!("attempts       {}", letter.attempts);
    if let Some(at) = letter.sent_at {
        let age = letter
            .age_ms
            .map(|ms| format!(" ({} ago)", human_duration(Duration::from_millis(ms))))
            .unwrap_or_default();
        outln!("dead-lettered  {}{age}", utc(at));
    }
    outln!("body");
    outln!("{}", letter.body.as_deref().unwrap_or(""));
}

/// What a replay or purge did, then a table of what it could not do and why.
pub fn report(report: &ReportView, done: &str) {
    let verb = if report.dry_run {
        format!("would be {done} (dry run: nothing was changed)")
    } else {
        done.to_owned()
    };
    outln!("{} letter(s) {verb}.", report.acted.len());
    for acted in &report.acted {
        outln!(
            "  {}  update {}: {}",
            acted.id,
            dash(acted.update_id),
            acted.detail
        );
    }
    if report.skipped.is_empty() {
        return;
    }
    outln!();
    outln!("Could not be {done}:");
    outln!("{:<38}  {:>11}  WHY", "ID", "UPDATE");
    for skipped in &report.skipped {
        outln!(
            "{:<38}  {:>11}  {}",
            skipped.id,
            dash(skipped.update_id),
            skipped.detail
        );
    }
}

/// `tgq dlq audit` as a table.
pub fn audit(entries: &[AuditView]) {
    if entries.is_empty() {
        outln!("No audit entries.");
        return;
    }
    outln!(
        "{:<24}  {:<8}  {:>11}  {:<40}  OUTCOME",
        "AT (UTC)",
        "ACTION",
        "UPDATE",
        "PRINCIPAL"
    );
    for entry in entries {
        outln!(
            "{:<24}  {:<8}  {:>11}  {:<40}  {}",
            utc(entry.at),
            entry.action,
            dash(entry.update_id),
            one_line(&entry.principal, 40),
            one_line(&entry.outcome, 100),
        );
    }
}

/// An epoch time in milliseconds as `2026-12-01 03:04:05 UTC`.
pub fn utc(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map_or_else(
            || ms.to_string(),
            |at| at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        )
}

/// A table cell, `-` when absent.
fn dash(value: Option<impl ToString>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// Text on one line, cut at `max` characters.
pub fn one_line(text: &str, max: usize) -> String {
    let joined = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" / ");
    match joined.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &joined[..cut]),
        None => joined,
    }
}

/// `850 ms`, `4.2 s`, `3 min 5 s`, `2 h 10 min`.
pub fn human_duration(d: Duration) -> String {
    let secs = d.as_secs();
    match secs {
        0 => format!("{} ms", d.as_millis()),
        1..=59 => format!("{:.1} s", d.as_secs_f64()),
        60..=3599 => format!("{} min {} s", secs / 60, secs % 60),
        _ => format!("{} h {} min", secs / 3600, secs % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_cells_stay_on_one_line() {
        assert_eq!(
            one_line("/start – a\n/help – b", 80),
            "/start – a / /help – b"
        );
        assert_eq!(one_line("abcdef", 3), "abc…");
        assert_eq!(human_duration(Duration::from_millis(4200)), "4.2 s");
        assert_eq!(human_duration(Duration::from_secs(185)), "3 min 5 s");
    }
}
