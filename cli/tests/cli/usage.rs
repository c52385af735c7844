//! Mistakes on the command line are refused before anything happens: nothing is created on disk and
//! nothing is sent to Telegram, with clap's usage exit code (2) for what the command line itself
//! gets wrong.

use crate::common;

use std::net::TcpListener;

use common::run;
use tgq_fake_telegram::FakeTelegram;

#[test]
fn a_nonsense_listen_address_is_a_usage_error_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("fresh");
    for addr in ["nonsense", "127.0.0.1", "127.0.0.1:99999", "localhost:http"] {
        let (status, stdout, stderr) = run(
            &[],
            &[
                "local",
                "--addr",
                addr,
                "--data-dir",
                data_dir.to_str().unwrap(),
            ],
        );
        assert_eq!(status.code(), Some(2), "{addr}: {stdout}{stderr}");
        assert!(
            stderr.contains("--addr") && stderr.contains("HOST:PORT"),
            "{addr}: {stderr}"
        );
        assert!(!data_dir.exists(), "{addr}: the data directory was created");
    }
}

#[test]
fn an_address_in_use_stops_local_before_the_data_directory_exists() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("fresh");
    let (status, _, stderr) = run(
        &[],
        &[
            "local",
            "--addr",
            &addr,
            "--data-dir",
            data_dir.to_str().unwrap(),
        ],
    );
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot listen on"), "{stderr}");
    assert!(!data_dir.exists(), "the data directory was created");
}

#[tokio::test(flavor = "multi_thread")]
async fn webhook_set_refuses_a_url_telegram_would_refuse_without_calling_it() {
    let fake = FakeTelegram::start().await.unwrap();
    let url = fake.url();
    let envs = [
        ("TELEGRAM_API_URL", url.as_str()),
        ("TELEGRAM_BOT_TOKEN", fake.token()),
        ("TGQ_WEBHOOK_SECRET", "usage-secret"),
    ];
    for (webhook, said) in [
        ("http://bot.example.com/webhook", "HTTPS only"),
        (
            "https://bot.example.com:8080/webhook",
            "443, 80, 88 and 8443",
        ),
        ("bot.example.com/webhook", "not a URL"),
    ] {
        let (status, _, stderr) = run(&envs, &["webhook", "set", webhook]);
        assert_eq!(status.code(), Some(2), "{webhook}: {stderr}");
        assert!(stderr.contains(said), "{webhook}: {stderr}");
    }
    assert!(fake.calls().is_empty(), "{:?}", fake.calls());
}

#[test]
fn a_zero_limit_is_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap();
    for args in [
        vec!["outbox", "--limit", "0"],
        vec!["dlq", "list", "--limit", "0"],
        vec!["dlq", "audit", "--limit", "0"],
    ] {
        let mut all = args.clone();
        all.extend(["--data-dir", data_dir]);
        let (status, stdout, stderr) = run(&[], &all);
        assert_eq!(status.code(), Some(2), "{args:?}: {stdout}{stderr}");
        assert!(stderr.contains("at least 1"), "{args:?}: {stderr}");
    }
}

#[test]
fn zero_runtime_threads_is_a_clear_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("fresh");
    let (status, stdout, stderr) = run(
        &[("TOKIO_WORKER_THREADS", "0")],
        &["local", "--data-dir", data_dir.to_str().unwrap()],
    );
    assert!(!status.success(), "{stdout}{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains("TOKIO_WORKER_THREADS"), "{stderr}");
    assert!(!data_dir.exists(), "the data directory was created");
}

#[test]
fn the_environment_bot_cannot_be_added_as_a_registered_bot() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap();
    for (envs, id) in [(vec![], "local"), (vec![("TGQ_BOT_ID", "main")], "main")] {
        let (status, stdout, stderr) = run(
            &envs,
            &["bots", "add", id, "--offline", "--data-dir", data_dir],
        );
        assert!(!status.success(), "{id}: {stdout}{stderr}");
        assert!(stderr.contains("environment"), "{id}: {stderr}");
        assert!(!dir.path().join("bots.json").exists());
    }
}
