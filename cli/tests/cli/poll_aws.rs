//! `tgq poll` on the emulator (moto, through AWS_ENDPOINT_URL) with the fake Bot API: a leader and a
//! standby, their health routes and `tgq status --poller`, a SIGTERM that hands the lease over at
//! once, a poller that cannot reach its store, and the short variant of `tgq-drill failover`.
//! Without AWS_ENDPOINT_URL these tests fail, naming the fix.

use crate::common;

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tgq_e2e::emulator::{drain, sdk_config, Stack};
use tgq_fake_telegram::{FakeConfig, FakeTelegram};

use common::{free_port, run, tgq};

/// One `tgq poll` process and its health address.
struct Poller {
    child: Child,
    health: String,
}

impl Drop for Poller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn aws_env() -> Vec<(String, String)> {
    [
        "AWS_ENDPOINT_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_REGION",
    ]
    .iter()
    .map(|name| {
        let value = std::env::var(name).unwrap_or_else(|_| {
            panic!("{name} is not set: these tests need moto (run scripts/test)")
        });
        ((*name).to_owned(), value)
    })
    .collect()
}

fn start(stack: &Stack, fake: &FakeTelegram, id: &str, endpoint: Option<&str>) -> Poller {
    let health = format!("127.0.0.1:{}", free_port());
    let mut env = aws_env();
    if let Some(endpoint) = endpoint {
        env.retain(|(name, _)| name != "AWS_ENDPOINT_URL");
        env.push(("AWS_ENDPOINT_URL".into(), endpoint.into()));
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    let child = tgq(&env)
        .args(["poll", "--id", id, "--health-addr", &health])
        .args(["--table", &stack.table, "--queue-url", &stack.queue_url])
        .args(["--dlq-url", &stack.dlq_url])
        .env("TGQ_BOT_ID", "pollers")
        .env("TELEGRAM_BOT_TOKEN", fake.token())
        .env("TELEGRAM_API_URL", fake.url())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("tgq poll starts");
    Poller { child, health }
}

async fn get(poller: &Poller, path: &str) -> Option<(u16, Value)> {
    let answer = reqwest::get(format!("http://{}{path}", poller.health))
        .await
        .ok()?;
    let status = answer.status().as_u16();
    Some((status, answer.json().await.ok()?))
}

async fn role(poller: &Poller) -> Option<String> {
    let (_, status) = get(poller, "/status").await?;
    status["role"].as_str().map(str::to_owned)
}

async fn wait_for(what: &str, limit: Duration, mut done: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !done().await {
        assert!(started.elapsed() < limit, "{what} within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn emulator() -> (aws_sdk_sqs::Client, Stack, FakeTelegram) {
    let sdk = sdk_config().await;
    let stack = Stack::create(&sdk, "poll")
        .await
        .expect("the stack on moto");
    let fake = FakeTelegram::start_with(FakeConfig {
        long_poll_cap: Duration::from_secs(25),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    (aws_sdk_sqs::Client::new(&sdk), stack, fake)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_pollers_one_leads_both_are_ready_and_a_sigterm_hands_the_lease_over_at_once() {
    let (sqs, stack, fake) = emulator().await;
    let first = start(&stack, &fake, "first", None);
    wait_for(
        "the first poller leads",
        Duration::from_secs(30),
        async || role(&first).await.as_deref() == Some("leader"),
    )
    .await;
    let second = start(&stack, &fake, "second", None);
    wait_for(
        "the second stands by",
        Duration::from_secs(30),
        async || role(&second).await.as_deref() == Some("standby"),
    )
    .await;
    for poller in [&first, &second] {
        assert_eq!(get(poller, "/healthz").await.map(|a| a.0), Some(200));
        assert_eq!(get(poller, "/readyz").await.map(|a| a.0), Some(200));
    }
    let (status, out, _) = run(&[], &["status", "--poller", &second.health]);
    assert!(status.success());
    assert!(out.contains("standby") && out.contains("first"), "{out}");
    assert!(out.contains("lease ends   in"), "{out}");

    fake.push_updates((1..=5).map(|id| {
        json!({"update_id": id, "message": {"message_id": id, "date": 0,
            "chat": {"id": id, "type": "private"}, "text": "hi"}})
    }));
    wait_for(
        "the batch is confirmed",
        Duration::from_secs(30),
        async || fake.pending_updates() == 0,
    )
    .await;
    let (_, leader) = get(&first, "/status").await.expect("the leader answers");
    assert_eq!(leader["offset"], json!(6));
    let metrics = reqwest::get(format!("http://{}/metrics", first.health))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"tgq_received_total{bot_id="pollers"} 5"#),
        "the ingest use case counts polled updates: {metrics}"
    );

    // SIGTERM: the leader releases; the standby leads at its next look, well before a TTL.
    let stopped = Instant::now();
    // SAFETY: kill(2) on the child this test started.
    assert_eq!(
        unsafe { libc::kill(first.child.id() as libc::pid_t, libc::SIGTERM) },
        0
    );
    wait_for(
        "the standby takes over",
        Duration::from_secs(10),
        async || role(&second).await.as_deref() == Some("leader"),
    )
    .await;
    assert!(stopped.elapsed() < Duration::from_secs(10));
    let (_, status) = get(&second, "/status").await.unwrap();
    assert_eq!(
        (status["token"].clone(), status["offset"].clone()),
        (json!(2), json!(6))
    );

    let queued = drain(&sqs, &stack.queue_url).await.unwrap();
    assert_eq!(queued.len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poller_that_cannot_reach_its_store_is_alive_but_not_ready_and_never_polls() {
    let (_, stack, fake) = emulator().await;
    let closed = format!("http://127.0.0.1:{}", free_port());
    let poller = start(&stack, &fake, "cut-off", Some(&closed));
    wait_for(
        "the poller serves /healthz",
        Duration::from_secs(30),
        async || get(&poller, "/healthz").await.map(|a| a.0) == Some(200),
    )
    .await;
    wait_for(
        "the poller has tried its store",
        Duration::from_secs(30),
        async || role(&poller).await.as_deref() == Some("standby"),
    )
    .await;
    let (code, reason) = get(&poller, "/readyz").await.unwrap();
    assert_eq!(code, 503, "{reason}");
    assert!(reason.to_string().contains("cannot be reached"), "{reason}");
    assert_eq!(
        fake.calls()
            .iter()
            .filter(|c| c.method == "getUpdates")
            .count(),
        0
    );
}

/// `tgq-drill failover` is a binary of its own (tools/drill); this runs what it runs, the drill's
/// library, against this package's `tgq poll`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_short_failover_drill_loses_nothing_queues_nothing_twice_and_never_polls_twice_at_once()
{
    use clap::Parser as _;
    let work = tempfile::tempdir().unwrap();
    // The pollers reach moto through the environment they inherit, as `tgq-drill` gives it them.
    let _ = aws_env();
    let args = tgq_drill::DrillArgs::parse_from([
        "tgq-drill",
        "failover",
        "--rounds",
        "1",
        "--lease-ttl-secs",
        "6",
        "--lease-renew-secs",
        "1",
        "--lease-cooldown-secs",
        "5",
        "--json",
        "--work-dir",
        work.path().to_str().unwrap(),
    ]);
    let outcome = tgq_drill::run_failover(&args, env!("CARGO_BIN_EXE_tgq").into())
        .await
        .expect("the failover drill runs");
    let missed = outcome.missed(std::time::Duration::from_secs(6 + 5));
    assert!(missed.is_empty(), "{missed:?}");
    let report = serde_json::to_value(&outcome).unwrap();
    assert_eq!(
        report["rounds"].as_array().map(Vec::len),
        Some(2),
        "{report}"
    );
    assert!(report["pushed"].as_u64().unwrap() > 20, "{report}");
    for figure in ["lost", "duplicates", "overlapping_polls"] {
        assert_eq!(report[figure], json!(0), "{figure}: {report}");
    }
    assert!(
        report["takeover_max_secs"].as_f64().unwrap() <= 11.0,
        "{report}"
    );
}
