//! `tgq local --poll` against the fake Bot API.

mod common;

use std::time::{Duration, Instant};

use common::{message_update, run, Local};
use tgq_core::echo::reply_text;
use tgq_fake_telegram::FakeTelegram;

const CHATS: [i64; 3] = [101, 202, 303];
const PER_CHAT: i64 = 6;

#[tokio::test(flavor = "multi_thread")]
async fn polled_updates_are_processed_and_replied_to_in_order_per_chat() {
    let fake = FakeTelegram::start().await.unwrap();
    let url = fake.url();
    let envs = [
        ("TELEGRAM_API_URL", url.as_str()),
        ("TELEGRAM_BOT_TOKEN", fake.token()),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut update_id = 9_000;
    let mut wanted: std::collections::BTreeMap<i64, Vec<String>> = Default::default();
    for n in 1..=PER_CHAT {
        for chat in CHATS {
            update_id += 1;
            let text = format!("chat {chat} #{n}");
            fake.push_update(message_update(update_id, chat, &text));
            wanted
                .entry(chat)
                .or_default()
                .push(reply_text(update_id, &text));
        }
    }
    let mut local = Local::start(dir.path(), &envs, &["--poll"]);
    local.wait_ready().await;

    let expected = CHATS.len() * PER_CHAT as usize;
    let started = Instant::now();
    while sends(&fake) < expected {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "only {} replies: {:?}",
            sends(&fake),
            local.output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    local.wait_settled(Duration::from_secs(10), |_| true).await;
    // More polls come and go; nothing is handled twice.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(sends(&fake), expected);

    for chat in CHATS {
        let texts: Vec<String> = fake
            .delivered_to(chat)
            .iter()
            .filter(|call| call.method == "sendMessage")
            .map(|call| call.params["text"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(texts, wanted[&chat]);
    }
    let status = local.status().await;
    assert_eq!(status["counters"]["received"], expected, "{status}");
    assert_eq!(
        status["counters"]["duplicates"], 0,
        "offsets confirm each batch once: {status}"
    );
    assert!(local.terminate().await.success());
    let (stdout, stderr) = local.output();
    assert!(!stdout.contains(fake.token()) && !stderr.contains(fake.token()));
}

fn sends(fake: &FakeTelegram) -> usize {
    fake.delivered()
        .iter()
        .filter(|call| call.method == "sendMessage")
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn polling_stops_with_a_clear_message_while_a_webhook_is_set() {
    let fake = FakeTelegram::start().await.unwrap();
    fake.set_webhook_url(Some("https://bot.example.com/webhook".into()));
    let url = fake.url();
    let envs = [
        ("TELEGRAM_API_URL", url.as_str()),
        ("TELEGRAM_BOT_TOKEN", fake.token()),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut local = Local::start(dir.path(), &envs, &["--poll"]);
    let status = local.wait_exit(Duration::from_secs(30)).await;
    let (_, stderr) = local.output();
    assert!(!status.success());
    assert!(stderr.contains("tgq webhook delete"), "{stderr}");
    assert!(!dir.path().join("local.addr").exists());
}

#[test]
fn polling_without_a_token_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let (status, _, stderr) = run(
        &[],
        &[
            "local",
            "--poll",
            "--data-dir",
            dir.path().to_str().unwrap(),
        ],
    );
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--poll needs TELEGRAM_BOT_TOKEN"),
        "{stderr}"
    );
}
