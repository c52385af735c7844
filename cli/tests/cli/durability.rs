//! An update answered 200 is durable: it survives SIGKILL of `tgq local` and is processed exactly
//! once, in order per chat.
//!
//! After the restart only the updates that were never acknowledged are posted again, as Telegram
//! re-sends only what it got no 200 for: an acknowledged update the killed process lost is never
//! answered, and the test says so. A reply that reached the fake Bot API twice is allowed only where
//! the store, as the killed process left it, holds that very send as an unknown outcome (its intent
//! recorded, no result): an at-least-once send is repeated then, by design.

use crate::common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{
    free_port, message_update, replies_per_chat, stored_records, unknown_outcomes, Local,
};
use tgq_core::echo::reply_text;
use tgq_core::record::Status;
use tgq_fake_telegram::{FakeTelegram, Fault, Scope, Times};

const SECRET: &str = "durability-secret";
const BOT_ID: &str = "durable";
const CHATS: i64 = 30;
const PER_CHAT: i64 = 10;
const CLIENTS: i64 = 6;
/// SIGKILL once this many updates were acknowledged: in the middle of the posting.
const KILL_AFTER_ACKS: usize = 120;
/// Before the kill, the fake Bot API takes this long to answer each send (and has delivered it at
/// once): the worker loops are mostly in the middle of a send when the kill comes, which leaves
/// sends with an unknown outcome behind.
const SLOW_ANSWER: Duration = Duration::from_millis(150);
/// How long the restarted process may take to answer everything. Messages the killed process held
/// come back when their visibility timeout ends (70 s today), so this is well above that.
const SETTLE_LIMIT: Duration = Duration::from_secs(180);

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

/// Posts, in order, the updates of `updates` whose chats belong to `client`, until one is not
/// answered 200 (the server is gone); returns the acknowledged update ids.
async fn post_share(
    url: String,
    client: i64,
    updates: Arc<Vec<Sent>>,
    acks: Arc<AtomicUsize>,
) -> Vec<i64> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut acked = Vec::new();
    for sent in updates.iter().filter(|s| s.chat % CLIENTS == client) {
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
            // Telegram keeps this update and everything after it in the chat for later.
            _ => break,
        }
    }
    acked
}

/// Posts `updates` from [`CLIENTS`] concurrent clients, each owning some chats.
fn post_all(
    url: &str,
    updates: &Arc<Vec<Sent>>,
    acks: &Arc<AtomicUsize>,
) -> Vec<tokio::task::JoinHandle<Vec<i64>>> {
    (0..CLIENTS)
        .map(|client| {
            tokio::spawn(post_share(
                url.to_owned(),
                client,
                updates.clone(),
                acks.clone(),
            ))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_updates_survive_sigkill_and_are_processed_exactly_once() {
    let fake = FakeTelegram::start().await.unwrap();
    let api_url = fake.url();
    let mut envs = common::sending_to(&fake, &api_url, SECRET).to_vec();
    envs.push(("TGQ_BOT_ID", BOT_ID));
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let all = Arc::new(updates());
    let ids = || all.iter().map(|s| s.update_id);

    // Round one: post from several clients and SIGKILL the process in the middle of it.
    fake.inject(Fault::Timeout(SLOW_ANSWER), Scope::Global, Times::Always);
    let mut first = Local::start_on(port, dir.path(), &envs, &[]);
    first.wait_ready().await;
    let acks = Arc::new(AtomicUsize::new(0));
    let clients = post_all(&first.url("/webhook"), &all, &acks);
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

    // What the killed process left, read before anything else opens its store.
    let left = stored_records(dir.path(), BOT_ID, ids()).await;
    let lost: Vec<i64> = acknowledged
        .iter()
        .copied()
        .filter(|id| !left.contains_key(id))
        .collect();
    assert!(
        lost.is_empty(),
        "acknowledged with 200, yet not in the store after SIGKILL: {lost:?}"
    );
    let unknown = unknown_outcomes(&left);
    fake.clear_faults();

    // Round two: restart on the same data directory; Telegram re-sends only what got no 200.
    let unacknowledged: Arc<Vec<Sent>> = Arc::new(
        all.iter()
            .filter(|s| !acknowledged.contains(&s.update_id))
            .cloned()
            .collect(),
    );
    let mut second = Local::start_on(port, dir.path(), &envs, &[]);
    second.wait_ready().await;
    let acks = Arc::new(AtomicUsize::new(0));
    for client in post_all(&second.url("/webhook"), &unacknowledged, &acks) {
        client.await.unwrap();
    }
    assert_eq!(
        acks.load(Ordering::SeqCst),
        unacknowledged.len(),
        "every update re-sent after the restart is accepted"
    );
    // Once the queue is empty, everything stored was handled: a message is deleted only after.
    let status = second.wait_settled(SETTLE_LIMIT, |_| true).await;
    let (_, second_log) = second.output();
    assert!(second.terminate().await.success());

    // Exactly once, by content: each update's reply, counted in its chat; a second copy only where
    // the killed process left that send with an unknown outcome.
    let replies = replies_per_chat(&fake);
    let mut problems = Vec::new();
    let mut repeated = 0;
    for sent in all.iter() {
        let times = replies[&sent.chat]
            .iter()
            .filter(|text| **text == sent.reply)
            .count();
        let was = if acknowledged.contains(&sent.update_id) {
            "acknowledged before the kill"
        } else {
            "posted again after the restart"
        };
        let uncertain = unknown.contains(&(sent.update_id, "sendMessage".to_owned()));
        match times {
            1 => {}
            0 => problems.push(format!("update {} ({was}) was never answered", sent.update_id)),
            2 if uncertain => repeated += 1,
            _ if uncertain => problems.push(format!(
                "update {} ({was}) was answered {times} times; its unknown outcome allows one repeat",
                sent.update_id
            )),
            _ => problems.push(format!(
                "update {} ({was}) was answered {times} times, yet the store recorded no unknown \
                 outcome for its reply",
                sent.update_id
            )),
        }
    }
    let expected: BTreeSet<&String> = all.iter().map(|s| &s.reply).collect();
    let strays: Vec<&String> = replies
        .values()
        .flatten()
        .filter(|text| !expected.contains(text))
        .collect();
    if !strays.is_empty() {
        problems.push(format!("replies to no update: {strays:?}"));
    }
    // In order per chat: the replies as they arrived, a repeat next to its original.
    for (chat, texts) in &replies {
        let mut seen = texts.clone();
        seen.dedup();
        let wanted: Vec<String> = all
            .iter()
            .filter(|s| s.chat == *chat)
            .map(|s| s.reply.clone())
            .collect();
        if seen != wanted {
            problems.push(format!(
                "chat {chat}: replies {texts:?}, wanted one each in update order: {wanted:?}"
            ));
        }
    }
    assert_eq!(replies.len(), CHATS as usize);
    eprintln!(
        "{} of {} updates acknowledged before SIGKILL; {} sends left with an unknown outcome, {repeated} \
         of them repeated; counters: {}",
        acknowledged.len(),
        all.len(),
        unknown.len(),
        status["counters"]
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    // The store agrees: every update is DONE, none lost or left behind.
    let finished = stored_records(dir.path(), BOT_ID, ids()).await;
    let not_done: Vec<(i64, Status)> = ids()
        .filter_map(|id| match finished.get(&id) {
            Some(record) if record.status == Status::Done => None,
            Some(record) => Some((id, record.status)),
            None => Some((id, Status::Received)),
        })
        .collect();
    assert!(
        not_done.is_empty(),
        "not DONE (missing shown as RECEIVED): {not_done:?}"
    );

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
