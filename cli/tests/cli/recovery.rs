//! A restart after a crash resumes at once (docs/design/local.md): `tgq local` holds its store's
//! lock, so at start no run of an earlier process can be alive, and what such runs still held — the
//! messages they received, the leases they took — is released instead of waiting out a visibility
//! timeout.

use crate::common;

use std::time::{Duration, Instant};

use common::{free_port, message_update, post_text, Local};
use tempfile::TempDir;
use tgq_fake_telegram::FakeTelegram;

const SECRET: &str = "recovery-secret";
const CHATS: i64 = 30;

/// Where a `tgq local` whose bot sends to a fake Bot API runs, and runs again after each kill: one
/// data directory, one port.
struct Restarts<'f> {
    fake: &'f FakeTelegram,
    api_url: String,
    dir: TempDir,
    port: u16,
}

impl<'f> Restarts<'f> {
    fn new(fake: &'f FakeTelegram) -> Self {
        Restarts {
            fake,
            api_url: fake.url(),
            dir: tempfile::tempdir().unwrap(),
            port: free_port(),
        }
    }

    /// Starts `tgq local` there, ready.
    async fn start(&self) -> Local {
        let envs = common::sending_to(self.fake, &self.api_url, SECRET);
        let mut local = Local::start_on(self.port, self.dir.path(), &envs, &[]);
        local.wait_ready().await;
        local
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_sigkill_mid_batch_the_restarted_process_replies_within_two_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let envs = [("TGQ_WEBHOOK_SECRET", SECRET), ("TGQ_HANDLER", "echo")];
    let port = free_port();
    let mut local = Local::start_on(port, dir.path(), &envs, &[]);
    local.wait_ready().await;
    let client = reqwest::Client::new();
    // Each handler run takes a while, so every worker loop holds a batch when the kill comes.
    for chat in 1..=CHATS {
        let update = message_update(chat, chat, "/slow 1500");
        let status = client
            .post(local.url("/webhook"))
            .header("x-telegram-bot-api-secret-token", SECRET)
            .json(&update)
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 200);
    }
    let started = Instant::now();
    loop {
        let status = local.status().await;
        if status["stats"]["in_flight"].as_u64().unwrap_or(0) > 0 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    local.kill();

    let mut local = Local::start_on(port, dir.path(), &envs, &[]);
    local.wait_ready().await;
    let ready = Instant::now();
    let before = local.status().await["stats"]["outbox"].as_u64().unwrap();
    let first_reply = loop {
        let status = local.status().await;
        if status["stats"]["outbox"].as_u64().unwrap() > before {
            break ready.elapsed();
        }
        assert!(
            ready.elapsed() < Duration::from_secs(30),
            "no reply 30 s after the restart: {status}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // The handler itself takes 1.5 s of that.
    assert!(
        first_reply < Duration::from_secs(2) + Duration::from_millis(1500),
        "the first reply after the restart came {first_reply:?} after it was ready"
    );
    let (_, stderr) = local.output();
    assert!(
        stderr.contains("released what the previous run of tgq local still held"),
        "{stderr}"
    );
    // What the killed process held is not left to its 70 s visibility timeout: the whole backlog
    // (thirty 1.5 s runs on four loops) drains in well under that.
    local
        .wait_settled(Duration::from_secs(40), |s| {
            s["counters"]["processed"].as_u64() == Some(CHATS as u64)
        })
        .await;
    local.terminate().await;
}

/// Telegram's `retry_after` binds the bot, not the process that heard it: a restart inside the
/// announced wait sends nothing before it ends — neither the refused update nor another chat's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_wait_heard_before_a_sigkill_holds_the_bot_after_the_restart() {
    use tgq_fake_telegram::{Fault, Scope, Times};
    const WAIT_SECS: u32 = 6;
    let fake = FakeTelegram::start().await.unwrap();
    let instance = Restarts::new(&fake);
    let client = reqwest::Client::new();
    let post = async |local: &Local, update_id: i64, chat: i64| {
        let status = client
            .post(local.url("/webhook"))
            .header("x-telegram-bot-api-secret-token", SECRET)
            .json(&message_update(update_id, chat, "hello"))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 200);
    };

    fake.inject(Fault::RetryAfter(WAIT_SECS), Scope::Global, Times::Once);
    let mut first = instance.start().await;
    post(&first, 1, 501).await;
    let started = Instant::now();
    while fake.calls().iter().all(|call| call.method != "sendMessage") {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no send reached the fake"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let refused_at = Instant::now();
    // Heard means tgq acted on the answer: it keeps the wait in the data directory. (A SIGKILL
    // between Telegram's answer and that write loses the wait; the next send hears it again.)
    let kept = instance.dir.path().join("flood-waits.json");
    while !kept.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the 429 was not acted on"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    first.kill();

    let mut second = instance.start().await;
    post(&second, 2, 502).await;
    let started = Instant::now();
    while fake.delivered().len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "delivered {:?}",
            fake.delivered()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        refused_at.elapsed() >= Duration::from_secs(u64::from(WAIT_SECS) - 1),
        "both replies went out {:?} after the 429 that asked for {WAIT_SECS} s",
        refused_at.elapsed()
    );
    assert_eq!(fake.violations().early_sends, 0, "{:?}", fake.violations());
    second.terminate().await;
}

/// Telegram's one-message-a-second per chat binds the bot too: a chat sent to just before a
/// SIGKILL is not sent to again within that second by the restarted process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_sent_to_just_before_a_sigkill_waits_out_its_second_after_the_restart() {
    use tgq_fake_telegram::{FakeConfig, Limits};
    const CHAT: i64 = 601;
    let fake = FakeTelegram::start_with(FakeConfig {
        limits: Some(Limits::default()),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let instance = Restarts::new(&fake);
    let sends = || {
        fake.calls()
            .into_iter()
            .filter(|call| call.method == "sendMessage")
            .collect::<Vec<_>>()
    };

    let mut first = instance.start().await;
    post_text(&first, SECRET, 1, CHAT, "hello").await;
    let started = Instant::now();
    while sends().is_empty() {
        assert!(started.elapsed() < Duration::from_secs(10), "no send");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    first.kill();

    let mut second = instance.start().await;
    post_text(&second, SECRET, 2, CHAT, "hello").await;
    while sends().len() < 2 {
        assert!(started.elapsed() < Duration::from_secs(20), "{:?}", sends());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let sent = sends();
    assert!(
        sent.iter().all(|call| call.status == 200),
        "Telegram refused a send over the chat's limit: {:?}",
        sent.iter().map(|call| call.status).collect::<Vec<_>>()
    );
    assert!(
        sent[1].at - sent[0].at >= Duration::from_millis(990),
        "the second send came {:?} after the first, across the restart",
        sent[1].at - sent[0].at
    );
    second.terminate().await;
}
