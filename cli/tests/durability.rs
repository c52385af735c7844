//! An update answered 200 is durable: it survives SIGKILL of `tgq local` and is processed exactly once
//! (apart from the sends the process reports as re-sent after an unknown outcome), in order per chat.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{free_port, message_update, Local};
use tgq_core::echo::reply_text;
use tgq_fake_telegram::FakeTelegram;

const SECRET: &str = "durability-secret";
const CHATS: i64 = 30;
const PER_CHAT: i64 = 10;
const CLIENTS: i64 = 6;
/// SIGKILL once this many updates were acknowledged: in the middle of the posting.
const KILL_AFTER_ACKS: usize = 120;

/// One test update: its id, chat and the reply the echo bot gives to it.
#[derive(Clone, Debug)]
struct Sent {
    update_id: i64,
    chat: i64,
    body: String,
    text: String,
    reply: String,
}

/// Every update, in update_id order; a chat's updates interleave with the others'.
fn updates() -> Vec<Sent> {
    let mut all = Vec::new();
    for n in 0..PER_CHAT {
        for c in 0..CHATS {
            let (update_id, chat) = (10_000 + n * CHATS + c, 7_000 + c);
            let text = format!("chat {chat} #{n}");
            all.push(Sent {
                update_id,
                chat,
                body: message_update(update_id, chat, &text).to_string(),
                reply: reply_text(update_id, &text),
                text,
            });
        }
    }
    all
}

/// Posts the updates of the chats that belong to `client`, each chat in update order, until one
/// fails (the server is gone); returns the acknowledged update ids.
async fn post_share(
    url: String,
    client: i64,
    all: Arc<Vec<Sent>>,
    acks: Arc<AtomicUsize>,
) -> Vec<i64> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut acked = Vec::new();
    for sent in all.iter().filter(|s| s.chat % CLIENTS == client) {
        let response = http
            .post(&url)
            .header("x-telegram-bot-api-secret-token", SECRET)
            .body(sent.body.clone())
            .send()
            .await;
        match response {
            Ok(response) if response.status() == 200 => {
                acked.push(sent.update_id);
                acks.fetch_add(1, Ordering::SeqCst);
            }
            // Telegram would retry this update later; so does the second round below.
            _ => break,
        }
    }
    acked
}

async fn post_all(
    url: &str,
    all: &Arc<Vec<Sent>>,
    acks: &Arc<AtomicUsize>,
) -> Vec<tokio::task::JoinHandle<Vec<i64>>> {
    (0..CLIENTS)
        .map(|client| {
            tokio::spawn(post_share(
                url.to_owned(),
                client,
                all.clone(),
                acks.clone(),
            ))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_updates_survive_sigkill_and_are_processed_exactly_once() {
    let fake = FakeTelegram::start().await.unwrap();
    let api_url = fake.url();
    let envs = [
        ("TELEGRAM_API_URL", api_url.as_str()),
        ("TELEGRAM_BOT_TOKEN", fake.token()),
        ("TGQ_WEBHOOK_SECRET", SECRET),
    ];
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let all = Arc::new(updates());

    // Round one: post from several clients and SIGKILL the process in the middle of it.
    let mut first = Local::start_on(port, dir.path(), &envs, &[]);
    first.wait_ready().await;
    let acks = Arc::new(AtomicUsize::new(0));
    let clients = post_all(&first.url("/webhook"), &all, &acks).await;
    while acks.load(Ordering::SeqCst) < KILL_AFTER_ACKS {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    first.kill();
    let mut acknowledged = BTreeSet::new();
    for client in clients {
        acknowledged.extend(client.await.unwrap());
    }
    assert!(acknowledged.len() >= KILL_AFTER_ACKS);
    assert!(
        acknowledged.len() < all.len(),
        "the kill came while updates were still being posted"
    );
    let (_, first_log) = first.output();
    drop(first);

    // Round two: restart on the same data directory; everything is posted again, as Telegram
    // retries what it got no answer to (the acknowledged ones are duplicates now).
    let mut second = Local::start_on(port, dir.path(), &envs, &[]);
    second.wait_ready().await;
    let acks = Arc::new(AtomicUsize::new(0));
    for client in post_all(&second.url("/webhook"), &all, &acks).await {
        client.await.unwrap();
    }
    assert_eq!(
        acks.load(Ordering::SeqCst),
        all.len(),
        "every update is accepted after the restart"
    );
    // Messages the killed process held come back when their visibility timeout (70 s) ends.
    let total = all.len();
    let status = second
        .wait_settled(Duration::from_secs(180), |_| {
            replies_by_text(&fake).len() == total
        })
        .await;

    let delivered = replies_by_text(&fake);
    let resent = status["counters"]["resent_after_unknown_outcome"]
        .as_u64()
        .expect("the count is reported");
    let mut extra = 0;
    for sent in all.iter() {
        let times = delivered.get(&sent.reply).map_or(0, Vec::len);
        assert!(times >= 1, "update {} was never answered", sent.update_id);
        extra += times - 1;
    }
    eprintln!(
        "{} of {} updates acknowledged before SIGKILL; {extra} duplicate replies; {resent} reported re-sends",
        acknowledged.len(),
        all.len()
    );
    assert!(
        extra as u64 <= resent,
        "{extra} duplicate replies, but only {resent} sends were reported as re-sent after an unknown outcome"
    );
    for update in &acknowledged {
        assert!(all
            .iter()
            .any(|s| s.update_id == *update && delivered.contains_key(&s.reply)));
    }

    // Per chat, each reply first arrives in update order.
    let mut order = BTreeMap::<i64, Vec<String>>::new();
    for call in fake
        .delivered()
        .iter()
        .filter(|c| c.method == "sendMessage")
    {
        let text = call.params["text"].as_str().unwrap().to_owned();
        let chat = order.entry(call.chat_id.unwrap()).or_default();
        if !chat.contains(&text) {
            chat.push(text);
        }
    }
    assert_eq!(order.len(), CHATS as usize);
    for (chat, seen) in &order {
        let wanted: Vec<String> = all
            .iter()
            .filter(|s| s.chat == *chat)
            .map(|s| s.reply.clone())
            .collect();
        assert_eq!(seen, &wanted, "chat {chat}: replies out of update order");
    }

    let (_, second_log) = second.output();
    assert!(second.terminate().await.success());
    for log in [first_log, second_log] {
        assert!(
            !log.contains(fake.token()) && !log.contains(SECRET),
            "secrets stay out of the logs"
        );
        let logged = all
            .iter()
            .find(|sent| log.contains(&sent.text) || log.contains(&sent.reply));
        assert!(
            logged.is_none(),
            "message text stays out of the logs: {logged:?}"
        );
    }
}

/// Every sendMessage the fake accepted, grouped by text: (text → arrival sequence numbers).
fn replies_by_text(fake: &FakeTelegram) -> BTreeMap<String, Vec<u64>> {
    let mut replies: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for call in fake
        .delivered()
        .iter()
        .filter(|c| c.method == "sendMessage")
    {
        let text = call.params["text"].as_str().unwrap_or_default().to_owned();
        replies.entry(text).or_default().push(call.seq);
    }
    replies
}
