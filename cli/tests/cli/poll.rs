//! `tgq local --poll` against the fake Bot API.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use common::{message_update, replies_per_chat, run, stored_records, unknown_outcomes, Local};
use tgq_core::echo::reply_text;
use tgq_fake_telegram::FakeTelegram;

const CHATS: [i64; 3] = [101, 202, 303];
const PER_CHAT: i64 = 6;

/// Starts `tgq local --poll` on the data directory `dir`, polling `fake`.
fn start_polling(fake: &FakeTelegram, dir: &Path) -> Local {
    let url = fake.url();
    let envs = [
        ("TELEGRAM_API_URL", url.as_str()),
        ("TELEGRAM_BOT_TOKEN", fake.token()),
    ];
    Local::start(dir, &envs, &["--poll"])
}

#[tokio::test(flavor = "multi_thread")]
async fn polled_updates_are_processed_and_replied_to_in_order_per_chat() {
    let fake = FakeTelegram::start().await.unwrap();
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
    let mut local = start_polling(&fake, dir.path());
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
    // Two more polls come and go (each held up to the fake's 1 s cap); nothing is handled twice.
    let polls = get_updates_calls(&fake);
    while get_updates_calls(&fake) < polls + 2 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "tgq stopped polling: {:?}",
            local.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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

fn get_updates_calls(fake: &FakeTelegram) -> usize {
    fake.calls()
        .iter()
        .filter(|call| call.method == "getUpdates")
        .count()
}

/// When the store file was last written.
fn store_written_at(dir: &Path) -> SystemTime {
    std::fs::metadata(dir.join(tgq_embedded::FILE_NAME))
        .and_then(|meta| meta.modified())
        .expect("the store file's modification time")
}

const RESTART_CHATS: [i64; 5] = [401, 402, 403, 404, 405];
/// Updates per chat in the batch that is stored, processed and confirmed before the kill.
const CONFIRMED_PER_CHAT: i64 = 4;
/// Updates per chat in the batch that getUpdates hands out just before the kill: 100 in all,
/// getUpdates' largest batch, and one fsync'd store write each, so the kill lands early in it.
const INTERRUPTED_PER_CHAT: i64 = 20;

/// Queues `per_chat` updates for each chat, chats interleaved, numbered from `first`; returns
/// (update id, chat, the reply the echo bot gives) for each.
fn push_batch(fake: &FakeTelegram, first: i64, per_chat: i64) -> Vec<(i64, i64, String)> {
    let mut pushed = Vec::new();
    let mut updates = Vec::new();
    let mut update_id = first;
    for n in 0..per_chat {
        for chat in RESTART_CHATS {
            let text = format!("u{update_id} to {chat} #{n}");
            updates.push(message_update(update_id, chat, &text));
            pushed.push((update_id, chat, reply_text(update_id, &text)));
            update_id += 1;
        }
    }
    // All at once, so that one getUpdates answer carries the whole batch.
    fake.push_updates(updates);
    pushed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_fetched_but_not_yet_stored_when_the_process_dies_is_fetched_again_and_handled_once(
) {
    let fake = FakeTelegram::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut first = start_polling(&fake, dir.path());
    first.wait_ready().await;

    // Batch one: stored, processed, confirmed by the next poll's offset.
    let confirmed = push_batch(&fake, 20_001, CONFIRMED_PER_CHAT);
    first
        .wait_settled(Duration::from_secs(60), |s| {
            s["counters"]["processed"] == confirmed.len() && fake.pending_updates() == 0
        })
        .await;

    // Batch two: SIGKILL once getUpdates has handed it out and tgq has begun writing it — the
    // store file changes — and before its offset could confirm it.
    let quiet = store_written_at(dir.path());
    let interrupted = push_batch(&fake, 30_001, INTERRUPTED_PER_CHAT);
    let store_dir = dir.path().to_owned();
    let wrote = tokio::task::spawn_blocking(move || {
        let limit = Instant::now() + Duration::from_secs(30);
        while store_written_at(&store_dir) == quiet {
            if Instant::now() > limit {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        true
    });
    assert!(wrote.await.unwrap(), "tgq never wrote the second batch");
    first.kill();
    let handed_out = fake.handed_out();
    assert!(
        interrupted.iter().all(|(id, _, _)| handed_out.contains(id)),
        "getUpdates had handed out the whole second batch before the kill"
    );
    let all: Vec<(i64, i64, String)> = confirmed.iter().chain(&interrupted).cloned().collect();
    let left = stored_records(dir.path(), "local", all.iter().map(|(id, _, _)| *id)).await;
    // An offset confirms every update below it: those must have been durable already.
    let confirmed_early = interrupted.len() - fake.pending_updates();
    let lost: Vec<i64> = interrupted[..confirmed_early]
        .iter()
        .map(|(id, _, _)| *id)
        .filter(|id| !left.contains_key(id))
        .collect();
    assert!(
        lost.is_empty(),
        "getUpdates' offset confirmed updates tgq had not stored: {lost:?}"
    );
    assert_eq!(
        confirmed_early, 0,
        "the kill came only after tgq had stored and confirmed the whole second batch"
    );
    let stored_of_batch = interrupted
        .iter()
        .filter(|(id, _, _)| left.contains_key(id))
        .count();
    let unknown = unknown_outcomes(&left);

    // The restarted process polls without an offset: Telegram hands the batch out again.
    let mut second = start_polling(&fake, dir.path());
    second.wait_ready().await;
    let status = second
        .wait_settled(Duration::from_secs(180), |s| {
            s["counters"]["received"] == all.len() && fake.pending_updates() == 0
        })
        .await;
    assert!(second.terminate().await.success());
    eprintln!(
        "{stored_of_batch} of the {} updates of the interrupted batch were stored before the \
         kill; {} sends left with an unknown outcome; counters {}",
        interrupted.len(),
        unknown.len(),
        status["counters"]
    );

    // Nothing lost: every update of the interrupted batch was handed out again after the
    // restart, and none of the confirmed batch was.
    let handed_out = fake.handed_out();
    let times = |id: i64| handed_out.iter().filter(|seen| **seen == id).count();
    for (id, _, _) in &confirmed {
        assert_eq!(times(*id), 1, "confirmed update {id} was handed out again");
    }
    for (id, _, _) in &interrupted {
        assert_eq!(
            times(*id),
            2,
            "update {id} was not handed out again after the restart"
        );
    }
    // Nothing twice: each update stored once (the re-fetched ones already stored are
    // duplicates) and answered once, in order per chat.
    assert_eq!(status["counters"]["received"], all.len(), "{status}");
    assert_eq!(
        status["counters"]["duplicates"], stored_of_batch,
        "{status}"
    );
    let replies = replies_per_chat(&fake);
    let mut problems = Vec::new();
    for (id, chat, reply) in &all {
        let count = replies[chat].iter().filter(|text| *text == reply).count();
        let uncertain = unknown.contains(&(*id, "sendMessage".to_owned()));
        match count {
            1 => {}
            2 if uncertain => {}
            _ => problems.push(format!("update {id} was answered {count} times")),
        }
    }
    for chat in RESTART_CHATS {
        let mut seen = replies[&chat].clone();
        seen.dedup();
        let wanted: Vec<String> = all
            .iter()
            .filter(|(_, c, _)| *c == chat)
            .map(|(_, _, reply)| reply.clone())
            .collect();
        if seen != wanted {
            problems.push(format!(
                "chat {chat}: replies out of update order: {seen:?}"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[tokio::test(flavor = "multi_thread")]
async fn polling_stops_with_a_clear_message_while_a_webhook_is_set() {
    let fake = FakeTelegram::start().await.unwrap();
    fake.set_webhook_url(Some("https://bot.example.com/webhook".into()));
    let dir = tempfile::tempdir().unwrap();
    let mut local = start_polling(&fake, dir.path());
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

#[tokio::test(flavor = "multi_thread")]
async fn a_pre_checkout_query_its_bot_never_answers_is_refused_by_tgq_within_ten_seconds() {
    // The echo bot knows nothing of payments: it never answers the query a user's Pay sends.
    let fake = FakeTelegram::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut local = start_polling(&fake, dir.path());
    local.wait_ready().await;
    let started = Instant::now();
    let query = fake.checkout(42, "egg-1", 25);
    let answered = loop {
        let answers: Vec<_> = fake
            .calls()
            .into_iter()
            .filter(|call| call.method == "answerPreCheckoutQuery")
            .collect();
        if !answers.is_empty() {
            break answers;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no answer within Telegram's 10 s: {:?}",
            local.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(answered.len(), 1, "{answered:?}");
    assert_eq!(answered[0].params["pre_checkout_query_id"], query.as_str());
    assert_eq!(answered[0].params["ok"], false);
    assert_eq!(answered[0].status, 200, "answered in time");
    assert!(answered[0].params["error_message"]
        .as_str()
        .is_some_and(|words| words.contains("Nothing was charged")));
    assert!(fake.charges().is_empty());
    let status = local
        .wait_settled(Duration::from_secs(10), |s| s["counters"]["processed"] == 1)
        .await;
    assert_eq!(status["counters"]["dead_lettered"], 0, "{status}");
    assert!(local.terminate().await.success());
}
