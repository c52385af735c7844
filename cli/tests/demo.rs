//! `tgq local --demo --exit`: the whole pipeline on the example updates, as a new user first sees it.

mod common;

use std::time::Duration;

use common::{update_fixture_count, Local};

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
    assert_eq!(count(&stdout, "received"), fixtures, "{stdout}");
    assert_eq!(count(&stdout, "processed"), fixtures, "{stdout}");
    assert!(count(&stdout, "duplicates") >= 1, "{stdout}");
    assert_eq!(count(&stdout, "poison"), 1, "{stdout}");
    assert_eq!(count(&stdout, "dead-lettered"), 0, "{stdout}");
    assert!(stdout.contains("You said: hello tgq"), "{stdout}");
    assert!(stdout.contains("Hello! I am a tgq example bot"), "{stdout}");

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
            !line.contains("You said"),
            "message text stays out of the logs: {line}"
        );
    }
}
