//! `tgq status`, `tgq outbox`, `tgq dlq list`, `tgq webhook …` and `--help`, as an operator runs them.

use crate::common;

use std::time::Duration;

use common::{message_update, run, run_into_closed_pipe, Local};
use serde_json::Value;
use tgq_core::echo::reply_text;
use tgq_fake_telegram::FakeTelegram;

const SECRET: &str = "ops-test-secret";

/// Posts `count` text updates to chat 555 and waits until they are processed.
async fn feed(local: &Local, count: i64) {
    let client = reqwest::Client::new();
    for id in 1..=count {
        let body = message_update(id, 555, &format!("note {id}")).to_string();
        let response = client
            .post(local.url("/webhook"))
            .header("x-telegram-bot-api-secret-token", SECRET)
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    let poison = client
        .post(local.url("/webhook"))
        .header("x-telegram-bot-api-secret-token", SECRET)
        .body("{\"update_id\": \"x\"}");
    assert_eq!(poison.send().await.unwrap().status(), 200);
    local
        .wait_settled(Duration::from_secs(20), |s| {
            s["counters"]["processed"] == count
        })
        .await;
}

fn json_of(args: &[&str]) -> Value {
    let (status, stdout, stderr) = run(&[], args);
    assert!(status.success(), "{args:?}: {stderr}");
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{args:?} printed no JSON ({e}): {stdout}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn status_and_outbox_read_the_running_instance_through_local_addr() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap();
    let mut local = Local::start(dir.path(), &[("TGQ_WEBHOOK_SECRET", SECRET)], &[]);
    local.wait_ready().await;
    feed(&local, 3).await;
    let written = std::fs::read_to_string(dir.path().join("local.addr")).unwrap();
    assert_eq!(written.trim(), local.admin_addr.to_string());

    let status = json_of(&["status", "--json", "--data-dir", data_dir]);
    assert_eq!(status["counters"]["processed"], 3, "{status}");
    assert_eq!(status["counters"]["poison"], 1, "{status}");
    assert_eq!(status["stats"]["dead"], 1, "{status}");
    assert_eq!(status["stats"]["outbox"], 3, "{status}");
    let outbox = json_of(&["outbox", "--json", "--data-dir", data_dir, "--limit", "2"]);
    let texts: Vec<&str> = outbox
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, [reply_text(1, "note 1"), reply_text(2, "note 2")]);

    let (ok, text, _) = run(&[], &["status", "--data-dir", data_dir]);
    assert!(ok.success());
    assert!(text.contains("from the running tgq local"), "{text}");
    let (ok, table, _) = run(&[], &["outbox", "--data-dir", data_dir]);
    assert!(ok.success());
    assert!(
        table.contains(&reply_text(3, "note 3")) && table.contains("555"),
        "{table}"
    );
    let (ok, letters, _) = run(&[], &["dlq", "list", "--data-dir", data_dir]);
    assert!(ok.success());
    assert!(letters.contains("poison"), "{letters}");
    assert!(local.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn status_and_outbox_open_the_store_directly_once_local_has_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap();
    let mut local = Local::start(dir.path(), &[("TGQ_WEBHOOK_SECRET", SECRET)], &[]);
    local.wait_ready().await;
    feed(&local, 2).await;
    let stopped = local.terminate().await;
    assert!(
        stopped.success(),
        "graceful shutdown exits 0: {:?}",
        local.output()
    );
    assert!(
        !dir.path().join("local.addr").exists(),
        "a clean exit removes local.addr"
    );

    let status = json_of(&["status", "--json", "--data-dir", data_dir]);
    assert_eq!(status["counters"]["processed"], 2, "{status}");
    assert_eq!(status["stats"]["pending"], 0, "{status}");
    let outbox = json_of(&["outbox", "--json", "--data-dir", data_dir]);
    assert_eq!(outbox.as_array().unwrap().len(), 2, "{outbox}");
    let letters = json_of(&["dlq", "list", "--json", "--data-dir", data_dir]);
    assert_eq!(letters[0]["reason"], "poison", "{letters}");
    let (ok, text, _) = run(&[], &["status", "--data-dir", data_dir]);
    assert!(ok.success() && text.contains("not running"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn one_shot_commands_piped_into_a_reader_that_left_end_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap();
    let mut local = Local::start(dir.path(), &[("TGQ_WEBHOOK_SECRET", SECRET)], &[]);
    local.wait_ready().await;
    feed(&local, 2).await;
    assert!(local.terminate().await.success());
    for args in [
        &["status", "--data-dir", data_dir][..],
        &["outbox", "--data-dir", data_dir],
        &["outbox", "--json", "--data-dir", data_dir],
        &["dlq", "list", "--data-dir", data_dir],
        &["--help"],
    ] {
        let (status, stderr) = run_into_closed_pipe(&[], args);
        assert!(status.success(), "{args:?}: exit {status}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn status_of_a_directory_without_a_store_says_to_run_local_first() {
    let dir = tempfile::tempdir().unwrap();
    let (status, _, stderr) = run(&[], &["status", "--data-dir", dir.path().to_str().unwrap()]);
    assert!(!status.success());
    assert!(stderr.contains("run `tgq local` first"), "{stderr}");
}

#[test]
fn every_subcommand_explains_itself_with_help() {
    for args in [
        &["--help"][..],
        &["local", "--help"],
        &["status", "--help"],
        &["outbox", "--help"],
        &["dlq", "--help"],
        &["dlq", "list", "--help"],
        &["dlq", "show", "--help"],
        &["dlq", "replay", "--help"],
        &["dlq", "purge", "--help"],
        &["dlq", "audit", "--help"],
        &["webhook", "--help"],
        &["webhook", "set", "--help"],
        &["webhook", "info", "--help"],
        &["webhook", "delete", "--help"],
    ] {
        let (status, stdout, _) = run(&[], args);
        assert!(status.success(), "{args:?}");
        assert!(stdout.contains("Usage: tgq"), "{args:?}: {stdout}");
    }
    let (_, local_help, _) = run(&[], &["local", "--help"]);
    for flag in [
        "--addr",
        "--data-dir",
        "--poll",
        "--demo",
        "--exit",
        "TGQ_WEBHOOK_SECRET",
    ] {
        assert!(
            local_help.contains(flag),
            "`tgq local --help` mentions {flag}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn webhook_set_info_and_delete_go_to_the_bot_api_with_the_secret() {
    let fake = FakeTelegram::start().await.unwrap();
    let url = fake.url();
    let envs = [
        ("TELEGRAM_API_URL", url.as_str()),
        ("TELEGRAM_BOT_TOKEN", fake.token()),
        ("TGQ_WEBHOOK_SECRET", SECRET),
    ];
    let mut printed = String::new();
    let mut tgq = |args: &[&str]| {
        let (status, stdout, stderr) = run(&envs, args);
        printed.push_str(&stdout);
        printed.push_str(&stderr);
        assert!(status.success(), "{args:?}: {stderr}");
        stdout
    };
    let said = tgq(&["webhook", "set", "https://bot.example.com/webhook"]);
    assert!(said.contains("https://bot.example.com/webhook"), "{said}");
    let set = fake
        .calls()
        .into_iter()
        .find(|c| c.method == "setWebhook")
        .expect("setWebhook was called");
    assert_eq!(set.params["url"], "https://bot.example.com/webhook");
    assert_eq!(set.params["secret_token"], SECRET);

    let info = tgq(&["webhook", "info"]);
    assert!(info.contains("https://bot.example.com/webhook"), "{info}");
    let deleted = tgq(&["webhook", "delete"]);
    assert!(deleted.contains("deleted"), "{deleted}");
    let info: Value = serde_json::from_str(&tgq(&["webhook", "info", "--json"])).unwrap();
    assert!(info["url"].is_null() || info["url"] == "", "{info}");

    assert!(
        !printed.contains(SECRET) && !printed.contains(fake.token()),
        "{printed}"
    );
}

#[test]
fn webhook_commands_need_a_token() {
    let (status, _, stderr) = run(&[], &["webhook", "info"]);
    assert!(!status.success());
    assert!(stderr.contains("TELEGRAM_BOT_TOKEN"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_gauge_the_queue_and_status_names_the_update_that_holds_a_chat() {
    let dir = tempfile::tempdir().unwrap();
    let envs = [
        ("TGQ_WEBHOOK_SECRET", SECRET),
        ("TGQ_HANDLER", "echo"),
        ("TGQ_BACKOFF_BASE_MS", "200"),
    ];
    let mut local = Local::start(dir.path(), &envs, &[]);
    local.wait_ready().await;
    let client = reqwest::Client::new();
    // Chat 77's head fails on every run and backs off; the message behind it waits for it.
    for (id, text) in [(41, "/fail transient"), (42, "after the failing one")] {
        let response = client
            .post(local.url("/webhook"))
            .header("x-telegram-bot-api-secret-token", SECRET)
            .body(message_update(id, 77, text).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    let started = std::time::Instant::now();
    let status = loop {
        let status = local.status().await;
        if status["counters"]["retried"].as_u64() >= Some(2) {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{status}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let oldest = &status["oldest"];
    assert_eq!(oldest["update_id"], 41, "{status}");
    assert_eq!(oldest["group"], "77", "{status}");
    assert_eq!(oldest["bot_id"], "local", "{status}");
    assert!(oldest["attempts"].as_u64() >= Some(2), "{status}");
    let error = oldest["last_error"].as_str().unwrap_or_default();
    assert!(error.contains("asked to fail"), "{status}");

    let (code, stdout, stderr) = run(&[], &["status", "--data-dir", dir.path().to_str().unwrap()]);
    assert!(code.success(), "{stderr}");
    let line = stdout
        .lines()
        .find(|line| line.starts_with("oldest"))
        .unwrap_or_else(|| panic!("no oldest line in\n{stdout}"));
    assert!(line.contains("update 41 of bot local in chat 77"), "{line}");
    assert!(line.contains("last error: "), "{line}");
    assert!(
        line.contains("runs again in") || line.contains("running now") || line.contains("due now"),
        "{line}"
    );

    let text = reqwest::get(local.admin_url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let gauge = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{name} ")))
            .and_then(|value| value.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
    };
    let on_queue = gauge("tgq_queue_pending_messages") + gauge("tgq_queue_in_flight_messages");
    assert_eq!(on_queue, 2.0, "{text}");
    assert_eq!(gauge("tgq_dead_letters"), 0.0, "{text}");
    assert!(
        gauge("tgq_queue_oldest_message_age_seconds") > 0.0,
        "{text}"
    );
    assert!(
        text.contains("# TYPE tgq_queue_pending_messages gauge"),
        "{text}"
    );
    assert!(local.terminate().await.success());
}

/// The value of one sample line of the Prometheus text format, `name{labels} value`.
fn sample(text: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread")]
async fn local_mode_serves_the_same_counters_at_metrics_in_the_prometheus_text_format() {
    let dir = tempfile::tempdir().unwrap();
    let mut local = Local::start(dir.path(), &[("TGQ_WEBHOOK_SECRET", SECRET)], &[]);
    local.wait_ready().await;
    feed(&local, 3).await;
    let response = reqwest::get(local.admin_url("/metrics")).await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    let text = response.text().await.unwrap();
    let bot = r#"bot_id="local""#;
    for (name, expected) in [
        ("tgq_received_total", 3.0),
        ("tgq_enqueued_total", 3.0),
        ("tgq_poison_total", 1.0),
        ("tgq_processed_total", 3.0),
    ] {
        assert_eq!(sample(&text, name, bot), Some(expected), "{name} in {text}");
    }
    for histogram in [
        "tgq_handler_duration_seconds",
        "tgq_end_to_end_latency_seconds",
    ] {
        let count = format!("{histogram}_count");
        assert_eq!(sample(&text, &count, bot), Some(3.0), "{text}");
        assert!(text.contains(&format!("# TYPE {histogram} ")), "{text}");
    }
    // Durations are in seconds: three replies to one chat, paced at one a second, take seconds, not
    // the thousands they would count in milliseconds.
    let sum = sample(&text, "tgq_end_to_end_latency_seconds_sum", bot).unwrap();
    assert!(
        sum > 0.0 && sum < 30.0,
        "the latencies' sum is {sum} s: {text}"
    );
    // No CloudWatch name leaks into the Prometheus face.
    for cloudwatch in ["Received{", "BotId=", "LatencyMs"] {
        assert!(!text.contains(cloudwatch), "{cloudwatch} in {text}");
    }
    assert!(local.terminate().await.success());
}
