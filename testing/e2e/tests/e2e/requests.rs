//! What an update costs in AWS requests, counted where AWS would bill them: the real `webhook` and
//! `worker` binaries under `cargo lambda watch`, their `AWS_ENDPOINT_URL` pointed at a counting proxy
//! in front of moto, each update a text message the echo bot answers with one reply. First every
//! update is posted (the webhook's requests), then the queue is drained (the worker's).
//! docs/PERFORMANCE.md's cost model is built from these counts, the send budget's requests told
//! apart by the items they name; the asserts keep them from creeping back.

use std::collections::BTreeMap;
use std::time::Duration;

use tgq_core::echo::reply_text;
use tgq_e2e::emulator::{self, Stack};
use tgq_e2e::esm::EventSourceMapping;
use tgq_e2e::functions::{Functions, WEBHOOK, WORKER};
use tgq_e2e::proxy::{Proxy, Requests};
use tgq_e2e::telegram::{text_update, Telegram};
use tgq_fake_telegram::{FakeConfig, FakeTelegram};

const BOT_ID: &str = "cost";
const SECRET: &str = "tgq-example-secret";
const CHATS: i64 = 10;
const UPDATES_PER_CHAT: i64 = 3;
const UPDATES: u64 = (CHATS * UPDATES_PER_CHAT) as u64;
const FIRST_UPDATE_ID: i64 = 810_000_000;

/// DynamoDB writes of its record one update may cost, webhook and worker together: the put, the
/// claim, the reply's intent and the settle (the reply's result goes with the settle).
const MAX_WRITES_PER_UPDATE: u64 = 4;
/// What a reply's booking in the bot's send budget costs at least (docs/design/pacing.md): a
/// conditional write of the bot's item and one of the chat's. The bot's item is read again before
/// the call only when the write that returned it is older than `budget::RECHECK_AFTER` by then.
const BOOKING_WRITES: u64 = 2;
/// What the bookings may cost at most, as a multiple of that least, and the most reads a reply, as
/// the same multiple of one. A write another worker won first, a slot woken too late for (two
/// writes again) and the reads of a long wait for the slot cost more, and more often the more the
/// store's answer times vary: with the whole suite on two cores moto's do. A booking that loops
/// would cost far more.
const BOOKING_CEILING: u64 = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_update_with_one_reply_costs_four_record_writes_a_booked_send_and_one_sqs_send() {
    let config = emulator::sdk_config().await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let stack = Stack::create(&config, "requests").await.unwrap();
    let fake = FakeTelegram::start_with(FakeConfig::default())
        .await
        .unwrap();
    let proxy = Proxy::start(&emulator::endpoint()).await.unwrap();
    let mut vars = stack.function_vars(BOT_ID, SECRET, Some(&fake));
    vars.insert("AWS_ENDPOINT_URL".into(), proxy.url());
    let functions = Functions::start(&[WEBHOOK, WORKER], &vars).await;

    // The webhook: every update posted once, as Telegram does when each answer is a 200.
    let telegram = Telegram::new(functions.function_url(WEBHOOK), SECRET);
    let mut expected = BTreeMap::new();
    for k in 0..UPDATES_PER_CHAT {
        for chat in 1..=CHATS {
            let update_id = FIRST_UPDATE_ID + k * CHATS + chat;
            let text = format!("c{chat}-n{k}");
            let body = text_update(update_id, chat, k + 1, &text).to_string();
            let refused = telegram.deliver(&body).await.unwrap();
            assert!(
                refused.is_empty(),
                "update {update_id} refused: {refused:?}"
            );
            expected
                .entry(chat)
                .or_insert_with(Vec::new)
                .push(reply_text(update_id, &text));
        }
    }
    let webhook = proxy.take_requests();

    // The worker: the queue drained by the harness's event source mapping (its own receives and
    // deletes go to moto directly: they are the mapping's, counted from its stats below).
    let mapping = EventSourceMapping::new(sqs, stack.clone(), &functions);
    mapping
        .run_until_drained(|| true, Duration::from_secs(120))
        .await
        .unwrap();
    let worker = proxy.take_requests();
    let booking = proxy.take_budget_requests();
    let stats = mapping.stats();

    for (chat, replies) in &expected {
        let sent: Vec<String> = fake
            .delivered_to(*chat)
            .iter()
            .filter(|call| call.method == "sendMessage")
            .map(|call| call.params["text"].as_str().unwrap_or_default().to_owned())
            .collect();
        assert_eq!(
            &sent, replies,
            "chat {chat}: one reply per update, in order"
        );
    }

    eprintln!(
        "per update ({UPDATES} updates, {} batches): webhook {} | worker {} (of which the send budget {})",
        stats.batches,
        per_update(&webhook),
        per_update(&worker),
        per_update(&booking)
    );
    assert_eq!(
        webhook.dynamo_writes(),
        UPDATES,
        "the webhook writes each update once: {webhook:?}"
    );
    assert_eq!(webhook.dynamo_reads(), 0, "{webhook:?}");
    assert_eq!(
        webhook.sqs("SendMessage"),
        UPDATES,
        "the webhook queues each update once: {webhook:?}"
    );
    assert_eq!(
        webhook.sqs_total(),
        UPDATES,
        "no other SQS request: {webhook:?}"
    );
    assert_eq!(
        worker.sqs_total(),
        0,
        "a worker that succeeds leaves deletes to the mapping: {worker:?}"
    );
    let writes = webhook.dynamo_writes() + worker.dynamo_writes() - booking.dynamo_writes();
    assert!(
        writes <= MAX_WRITES_PER_UPDATE * UPDATES,
        "{writes} DynamoDB writes of records for {UPDATES} updates, more than \
         {MAX_WRITES_PER_UPDATE} each: webhook {webhook:?}, worker {worker:?}, of which the send \
         budget {booking:?}"
    );
    assert!(
        worker.dynamo_reads() - booking.dynamo_reads() <= UPDATES,
        "at most one read of records per update (the chat's state): {worker:?}, of which the \
         send budget {booking:?}"
    );
    // One reply per update, each booked.
    let (booked_writes, booked_reads) = (booking.dynamo_writes(), booking.dynamo_reads());
    assert!(
        (BOOKING_WRITES * UPDATES..=BOOKING_CEILING * BOOKING_WRITES * UPDATES)
            .contains(&booked_writes)
            && booked_reads <= BOOKING_CEILING * UPDATES,
        "{booked_writes} writes and {booked_reads} reads booked {UPDATES} replies: {booking:?}"
    );
}

/// `operation n/update` for every operation seen.
fn per_update(requests: &Requests) -> String {
    requests
        .0
        .iter()
        .map(|(target, n)| {
            let operation = target.rsplit('.').next().unwrap_or(target);
            format!("{operation} {:.2}", *n as f64 / UPDATES as f64)
        })
        .collect::<Vec<_>>()
        .join(", ")
}
