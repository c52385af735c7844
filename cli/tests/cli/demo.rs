//! `tgq local --demo --exit`: the whole pipeline on the example updates, as a new user first sees it.
//!
//! The demo is the author's first look at their own bot, so it runs the bot in `bot/` by default.
//! What that bot answers is the author's business: the test of that run asserts only what the
//! pipeline owns (every update stored, settled and summarised, the summary listing exactly the calls
//! the outbox kept, each chat's in update order), so that any bot that builds keeps it green. The
//! replies themselves are asserted on the built-in echo bot, whose every reply names its update.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::{
    readable_fixture_count, run, run_into_closed_pipe, tgq, update_fixture_count, Local,
    UNREADABLE_FIXTURES,
};
use serde_json::Value;
use tgq_core::echo::reply_text;

/// The number on the summary line that starts with `label`.
fn count(summary: &str, label: &str) -> u64 {
    summary
        .lines()
        .find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some(label)).then(|| words.next()?.parse().ok())?
        })
        .unwrap_or_else(|| panic!("no `{label}` line in the summary:\n{summary}"))
}

/// The replies the echo bot gives to the example updates: `echo U: T` for a text message or channel
/// post (or an edit of either), `echo U: callback D` for a button press on a message.
fn echo_replies() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../events/updates");
    let mut replies = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap() == "expected_groups.json" {
            continue;
        }
        let update: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let id = update["update_id"].as_i64().unwrap();
        for kind in [
            "message",
            "edited_message",
            "channel_post",
            "edited_channel_post",
        ] {
            if let Some(text) = update[kind]["text"].as_str() {
                replies.push(reply_text(id, text));
            }
        }
        let query = &update["callback_query"];
        if let (Some(data), false) = (query["data"].as_str(), query["message"].is_null()) {
            replies.push(reply_text(id, &format!("callback {data}")));
        }
    }
    replies
}

#[tokio::test(flavor = "multi_thread")]
async fn demo_processes_every_event_and_prints_the_replies() {
    let dir = tempfile::tempdir().unwrap();
    let mut local = Local::start(dir.path(), &[], &["--demo", "--exit"]);
    let status = local.wait_exit(Duration::from_secs(90)).await;
    let (stdout, stderr) = local.output();
    assert!(
        status.success(),
        "exit {status}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );

    let fixtures = update_fixture_count() as u64;
    let unreadable = UNREADABLE_FIXTURES.len() as u64;
    assert_eq!(count(&stdout, "received"), fixtures, "{stdout}");
    assert_eq!(
        count(&stdout, "processed"),
        fixtures - unreadable,
        "{stdout}"
    );
    assert!(count(&stdout, "duplicates") >= 1, "{stdout}");
    assert_eq!(count(&stdout, "poison"), 1, "{stdout}");
    assert_eq!(count(&stdout, "dead-lettered"), unreadable, "{stdout}");
    let replies = echo_replies();
    assert!(
        replies.len() >= 5,
        "the fixtures have text to echo: {replies:?}"
    );
    for reply in &replies {
        assert!(stdout.contains(reply.as_str()), "{reply}\n{stdout}");
    }
    assert_eq!(
        reply_lines(&stdout)
            .filter(|line| line.contains("sendMessage"))
            .count(),
        replies.len(),
        "one reply per text and per button press, none twice: {stdout}"
    );

    // The generated secret is kept for the next run, and printed nowhere.
    let secret = std::fs::read_to_string(dir.path().join("webhook-secret")).unwrap();
    assert!(!secret.trim().is_empty());
    assert!(!stdout.contains(secret.trim()) && !stderr.contains(secret.trim()));
    assert!(
        stdout.contains("webhook-secret"),
        "the banner says where the secret is: {stdout}"
    );
    // A clean exit removes the address file.
    assert!(!dir.path().join("local.addr").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_demo_on_the_same_data_dir_recognises_every_update_as_a_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = Local::start(dir.path(), &[], &["--demo", "--exit"]);
    assert!(
        first.wait_exit(Duration::from_secs(90)).await.success(),
        "{:?}",
        first.output()
    );
    let mut local = Local::start(dir.path(), &[], &["--demo", "--exit"]);
    assert!(local.wait_exit(Duration::from_secs(90)).await.success());
    let (stdout, _) = local.output();
    assert_eq!(count(&stdout, "received"), 0, "{stdout}");
    assert_eq!(count(&stdout, "processed"), 0, "{stdout}");
    assert_eq!(
        count(&stdout, "duplicates"),
        update_fixture_count() as u64 + 1,
        "{stdout}"
    );
    assert!(
        stdout.contains("already handled by an earlier demo"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn logs_are_json_lines_on_stderr_with_tgq_log_format_json() {
    let dir = tempfile::tempdir().unwrap();
    let mut local = Local::start(
        dir.path(),
        &[("TGQ_LOG_FORMAT", "json"), ("RUST_LOG", "info")],
        &["--demo", "--exit"],
    );
    assert!(local.wait_exit(Duration::from_secs(90)).await.success());
    let (_, stderr) = local.output();
    let replies = echo_replies();
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect();
    assert!(lines.len() > 10, "the pipeline logs at info: {stderr}");
    for line in lines {
        let event: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            event["level"].is_string() && event["fields"].is_object(),
            "{line}"
        );
        assert!(
            !line.contains("hello tgq") && !replies.iter().any(|r| line.contains(r.as_str())),
            "message text stays out of the logs: {line}"
        );
    }
}

/// The ordering group of each example update (events/updates/expected_groups.json), by update id.
fn group_of_each_update() -> BTreeMap<i64, String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../events/updates");
    let table: BTreeMap<String, String> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected_groups.json")).unwrap())
            .unwrap();
    table
        .into_iter()
        .map(|(file, group)| {
            let update: Value =
                serde_json::from_str(&std::fs::read_to_string(dir.join(file)).unwrap()).unwrap();
            (update["update_id"].as_i64().unwrap(), group)
        })
        .collect()
}

/// The summary's reply lines (`  chat 42  sendMessage  text`).
fn reply_lines(stdout: &str) -> impl Iterator<Item = &str> {
    stdout.lines().filter(|line| line.starts_with("  chat "))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_demo_runs_the_authors_bot_and_summarises_whatever_it_does() {
    let dir = tempfile::tempdir().unwrap();
    // One attempt: a bot that fails (or panics) is dead-lettered at once instead of backing off
    // past the demo's patience; the counts below hold either way.
    let envs = [("TGQ_HANDLER", "bot"), ("TGQ_MAX_ATTEMPTS", "1")];
    let mut local = Local::start(dir.path(), &envs, &["--demo", "--exit"]);
    let status = local.wait_exit(Duration::from_secs(90)).await;
    let (stdout, stderr) = local.output();
    assert!(
        status.success(),
        "exit {status}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains("bot        example (the first handler of the bot's registry)"),
        "{stdout}"
    );
    let fixtures = update_fixture_count() as u64;
    assert_eq!(count(&stdout, "received"), fixtures, "{stdout}");
    assert!(count(&stdout, "duplicates") >= 1, "{stdout}");
    assert_eq!(count(&stdout, "poison"), 1, "{stdout}");
    assert_eq!(
        count(&stdout, "processed") + count(&stdout, "dead-lettered"),
        fixtures,
        "every update settled: {stdout}"
    );

    // The summary lists exactly what the outbox kept, and each chat's (each group's) calls follow
    // its updates' order.
    let (listed, outbox, _) = run(
        &[],
        &[
            "outbox",
            "--json",
            "--data-dir",
            dir.path().to_str().unwrap(),
        ],
    );
    assert!(listed.success());
    let outbox: Vec<Value> = serde_json::from_str(&outbox).unwrap();
    assert_eq!(reply_lines(&stdout).count(), outbox.len(), "{stdout}");
    let groups = group_of_each_update();
    let mut by_group: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for entry in &outbox {
        let update = entry["update_id"]
            .as_i64()
            .expect("every call names its update");
        by_group
            .entry(groups[&update].as_str())
            .or_default()
            .push(update);
    }
    for (group, updates) in by_group {
        assert!(
            updates.is_sorted(),
            "group {group}: calls out of update order: {updates:?}"
        );
    }
}

#[test]
fn the_demo_piped_into_a_reader_that_left_finishes_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap();
    let args = [
        "local",
        "--demo",
        "--exit",
        "--addr",
        "127.0.0.1:0",
        "--data-dir",
        data_dir,
    ];
    let (status, stderr) = run_into_closed_pipe(&[], &args);
    assert!(status.success(), "exit {status}: {stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.to_lowercase().contains("broken pipe"),
        "{stderr}"
    );
    // The demo still ran to its end: every update is in the store.
    let (_, printed, _) = run(&[], &["status", "--json", "--data-dir", data_dir]);
    let status: Value = serde_json::from_str(&printed).unwrap();
    assert_eq!(
        status["counters"]["processed"],
        readable_fixture_count() as u64,
        "{status}"
    );
}

#[test]
fn each_demo_without_data_dir_starts_fresh_and_leaves_nothing_behind() {
    let cwd = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let fixtures = update_fixture_count() as u64;
    for run in 1..=2 {
        let output = tgq(&[("TMPDIR", tmp.path().to_str().unwrap())])
            .args(["local", "--demo", "--exit", "--addr", "127.0.0.1:0"])
            .current_dir(cwd.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "run {run}: {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        // The edited bot would answer every update again: nothing is a duplicate of the last run.
        assert_eq!(count(&stdout, "received"), fixtures, "run {run}: {stdout}");
        let processed = readable_fixture_count() as u64;
        assert_eq!(
            count(&stdout, "processed"),
            processed,
            "run {run}: {stdout}"
        );
        assert!(stdout.contains("fresh for this demo"), "{stdout}");
        assert!(stdout.contains("--data-dir DIR to keep"), "{stdout}");
    }
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "left in the temporary directory: {left:?}");
    assert!(
        !cwd.path().join(".tgq").exists(),
        "the demo used the default data directory"
    );
}
