//! The whole pipeline end to end: the real `webhook` and `worker` binaries under `cargo lambda watch`,
//! moto (through `AWS_ENDPOINT_URL`), the fake Bot API, and the harness playing Telegram and the SQS
//! event source mapping.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::Value;
use tgq_core::echo::reply_text;
use tgq_e2e::emulator::{self, item_count, read_all, record_status, Stack};
use tgq_e2e::esm::EventSourceMapping;
use tgq_e2e::functions::{Functions, WEBHOOK, WORKER};
use tgq_e2e::telegram::{text_update, Telegram};
use tgq_fake_telegram::{FakeConfig, FakeTelegram, Fault, Limits, Scope, Times};

const BOT_ID: &str = "demo";
/// The secret the `events/webhook` fixtures carry.
const SECRET: &str = "tgq-example-secret";

const CHATS: i64 = 20;
const UPDATES_PER_CHAT: i64 = 10;
const FIRST_UPDATE_ID: i64 = 700_000_000;
/// How far behind its first delivery a duplicate is sent again (a Telegram retry whose 200 was lost).
const DUPLICATE_LAG: usize = 15;
/// How long the queue may take to drain once the functions answer.
const DRAIN_LIMIT: Duration = Duration::from_secs(240);

/// The functions' configuration: this test's table and queues, quick backoff for the retries, and
/// the built-in echo bot, whose replies name their update whatever the bot in `bot/` says.
fn function_vars(stack: &Stack, telegram: Option<&FakeTelegram>) -> BTreeMap<String, String> {
    let mut vars = BTreeMap::from([
        ("TGQ_BOT_ID", BOT_ID.to_owned()),
        ("TGQ_WEBHOOK_SECRET", SECRET.to_owned()),
        ("TGQ_TABLE", stack.table.clone()),
        ("TGQ_QUEUE_URL", stack.queue_url.clone()),
        ("TGQ_DLQ_URL", stack.dlq_url.clone()),
        ("TGQ_BACKOFF_BASE_MS", "200".to_owned()),
        ("TGQ_BACKOFF_CAP_MS", "1000".to_owned()),
        ("TGQ_HANDLER", "echo".to_owned()),
    ]);
    if let Some(telegram) = telegram {
        vars.insert("TELEGRAM_BOT_TOKEN", telegram.token().to_owned());
        vars.insert("TELEGRAM_API_URL", telegram.url());
    }
    vars.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// One planned update.
#[derive(Clone, Debug)]
struct Planned {
    update_id: i64,
    chat: i64,
    /// Its position among its chat's updates.
    k: i64,
    /// The JSON body exactly as posted.
    body: String,
}

impl Planned {
    fn reply(&self) -> String {
        reply_text(self.update_id, &format!("c{}-n{}", self.chat, self.k))
    }
}

/// 200 text messages, 10 per chat, chats interleaved, update ids increasing.
fn plan() -> Vec<Planned> {
    let mut planned = Vec::new();
    for k in 0..UPDATES_PER_CHAT {
        for chat in 1..=CHATS {
            let update_id = FIRST_UPDATE_ID + k * CHATS + chat;
            let text = format!("c{chat}-n{k}");
            planned.push(Planned {
                update_id,
                chat,
                k,
                body: text_update(update_id, chat, 1000 + k, &text).to_string(),
            });
        }
    }
    planned
}

/// The posting order: every update in update order, and every tenth one (20 of 200) once more,
/// [`DUPLICATE_LAG`] updates later.
fn schedule(count: usize) -> Vec<usize> {
    let mut order = Vec::new();
    for i in 0..count + DUPLICATE_LAG {
        if i < count {
            order.push(i);
        }
        if let Some(earlier) = i.checked_sub(DUPLICATE_LAG) {
            if earlier % 10 == 3 {
                order.push(earlier);
            }
        }
    }
    order
}

/// Faults for the first calls to some chats: transient ones the worker must retry through, and a
/// permanent one that dead-letters exactly the first update of each chat in [`BLOCKED`].
fn inject_faults(telegram: &FakeTelegram) {
    telegram.inject(Fault::ServerError(500), Scope::Chat(3), Times::N(2));
    telegram.inject(Fault::ServerError(502), Scope::Chat(6), Times::Once);
    telegram.inject(Fault::RetryAfter(1), Scope::Chat(6), Times::Once);
    telegram.inject(Fault::RetryAfter(1), Scope::Chat(10), Times::N(2));
    telegram.inject(Fault::ServerError(503), Scope::Chat(13), Times::N(3));
    telegram.inject(Fault::RetryAfter(1), Scope::Chat(16), Times::Once);
    // Blocked at once; blocked on the retry after a 5xx; blocked at once.
    telegram.inject(Fault::Blocked, Scope::Chat(5), Times::Once);
    telegram.inject(Fault::ServerError(500), Scope::Chat(12), Times::Once);
    telegram.inject(Fault::Blocked, Scope::Chat(12), Times::Once);
    telegram.inject(Fault::Blocked, Scope::Chat(18), Times::Once);
}
/// Chats whose first update meets `Fault::Blocked`.
const BLOCKED: [i64; 3] = [5, 12, 18];
/// The 5xx answers injected above.
const INJECTED_5XX: usize = 2 + 1 + 3 + 1;
/// The 429 answers injected above (the rate limits add their own).
const INJECTED_429: usize = 1 + 2 + 1;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_updates_over_twenty_chats_are_processed_once_in_order_despite_faults() {
    let started = Instant::now();
    let config = emulator::sdk_config().await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let dynamo = aws_sdk_dynamodb::Client::new(&config);
    let stack = Stack::create(&config, "pipeline").await.unwrap();
    let fake = FakeTelegram::start_with(FakeConfig {
        limits: Some(Limits::default()),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    inject_faults(&fake);
    let functions = Functions::start(&[WEBHOOK, WORKER], &function_vars(&stack, Some(&fake))).await;
    let ready = started.elapsed();

    let planned = plan();
    let telegram = Telegram::new(functions.function_url(WEBHOOK), SECRET);
    let posting = {
        let planned = planned.clone();
        tokio::spawn(async move {
            let mut refusals = Vec::new();
            for index in schedule(planned.len()) {
                let refused = telegram.deliver(&planned[index].body).await?;
                if !refused.is_empty() {
                    refusals.push((planned[index].update_id, refused));
                }
            }
            anyhow::Ok(refusals)
        })
    };
    let mut mapping = EventSourceMapping::new(sqs.clone(), stack.clone(), &functions);
    let drained = mapping
        .run_until_drained(|| posting.is_finished(), DRAIN_LIMIT)
        .await;
    let refusals = posting
        .await
        .unwrap()
        .expect("Telegram delivered every update");
    if let Err(err) = drained {
        panic!(
            "{err:#}\nreceive history of every group:\n{}\nlogs: {}",
            history_of_all(&mapping),
            functions.logs().display()
        );
    }
    let processed = started.elapsed();

    let dead: BTreeSet<i64> = planned
        .iter()
        .filter(|p| BLOCKED.contains(&p.chat) && p.k == 0)
        .map(|p| p.update_id)
        .collect();

    // Every update that was not dead-lettered got exactly one reply, in its chat's update order.
    for chat in 1..=CHATS {
        let replies: Vec<String> = fake
            .delivered_to(chat)
            .iter()
            .filter(|call| call.method == "sendMessage")
            .map(|call| call.params["text"].as_str().unwrap_or_default().to_owned())
            .collect();
        let expected: Vec<String> = planned
            .iter()
            .filter(|p| p.chat == chat && !dead.contains(&p.update_id))
            .map(Planned::reply)
            .collect();
        assert_eq!(
            replies,
            expected,
            "chat {chat}: replies as delivered vs one per update in update order; receive \
             history: {}",
            mapping.log().history(&format!("{BOT_ID}:{chat}"))
        );
    }

    // The dead-letter queue holds exactly the blocked updates, each as received, with its reason.
    let letters = read_all(&sqs, &stack.dlq_url, 60).await.unwrap();
    let lettered: BTreeMap<i64, &emulator::ReadMessage> = letters
        .iter()
        .map(|l| (l.attributes["update_id"].parse().unwrap(), l))
        .collect();
    assert_eq!(letters.len(), dead.len(), "dead letters: {letters:#?}");
    assert_eq!(lettered.keys().copied().collect::<BTreeSet<_>>(), dead);
    for planned in planned.iter().filter(|p| dead.contains(&p.update_id)) {
        let letter = lettered[&planned.update_id];
        assert_eq!(letter.attributes["reason"], "permanent_error");
        assert_eq!(letter.attributes["error_class"], "permanent");
        assert_eq!(letter.group_id, format!("{BOT_ID}:{}", planned.chat));
        assert_eq!(
            letter.body, planned.body,
            "a letter carries the update as received"
        );
    }

    // DynamoDB agrees: DONE for every update, DEAD for the dead-lettered ones.
    for planned in &planned {
        let status = record_status(&dynamo, &stack.table, BOT_ID, planned.update_id)
            .await
            .unwrap();
        let expected = if dead.contains(&planned.update_id) {
            "DEAD"
        } else {
            "DONE"
        };
        assert_eq!(
            status.as_deref(),
            Some(expected),
            "record of update {} (c{}-n{})",
            planned.update_id,
            planned.chat,
            planned.k
        );
    }
    assert_eq!(
        item_count(&dynamo, &stack.table).await.unwrap(),
        planned.len(),
        "one record per update; duplicates add none"
    );

    // The faults were met: every injected 5xx and block answered once, the 429s at least.
    let calls = fake.calls();
    let answered = |wanted: fn(u16) -> bool| calls.iter().filter(|c| wanted(c.status)).count();
    assert_eq!(answered(|s| s >= 500), INJECTED_5XX);
    assert_eq!(answered(|s| s == 403), BLOCKED.len());
    let too_many = answered(|s| s == 429);
    assert!(too_many >= INJECTED_429, "429s answered: {too_many}");

    // RUST_LOG unset: the worker logs at info, one `processed` line per handled update at least.
    let worker_log =
        std::fs::read_to_string(functions.logs().join(format!("{WORKER}.log"))).unwrap();
    let processed_lines = worker_log
        .lines()
        .filter(|line| line.contains(r#""level":"INFO""#) && line.contains("processed"))
        .count();
    assert!(
        processed_lines >= planned.len() - dead.len(),
        "{processed_lines} info lines saying `processed` in {}",
        functions.logs().display()
    );

    let stats = mapping.stats();
    eprintln!(
        "pipeline: {} posts ({} refused first), functions ready after {ready:.1?}, queue drained \
         {:.1?} later; {} batches, {} records handed to the worker, {} reported failed, {} deleted, \
         highest receive count {}; Bot API calls {} ({too_many} answered 429)",
        schedule(planned.len()).len(),
        refusals.len(),
        processed - ready,
        stats.batches,
        stats.records,
        stats.reported_failures,
        stats.deleted,
        stats.max_receive_count,
        calls.len(),
    );
    assert!(refusals.is_empty(), "the webhook refused: {refusals:?}");
}

fn history_of_all(mapping: &EventSourceMapping<'_>) -> String {
    (1..=CHATS)
        .map(|chat| {
            let group = format!("{BOT_ID}:{chat}");
            format!("  {group}: {}", mapping.log().history(&group))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A Function URL request fixture from `events/webhook/`, posted as Telegram would: its body with
/// its headers.
async fn post_fixture(http: &reqwest::Client, url: &str, fixture: &str) -> (u16, String) {
    let event: Value = serde_json::from_str(fixture).unwrap();
    let mut request = http
        .post(url)
        .body(event["body"].as_str().unwrap().to_owned());
    for (name, value) in event["headers"].as_object().unwrap() {
        // The client sets these for the connection it actually makes.
        if name != "host" && name != "content-length" {
            request = request.header(name, value.as_str().unwrap());
        }
    }
    let answer = request.send().await.unwrap();
    let status = answer.status().as_u16();
    (status, answer.text().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_function_url_answers_each_event_fixture() {
    let config = emulator::sdk_config().await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let dynamo = aws_sdk_dynamodb::Client::new(&config);
    let stack = Stack::create(&config, "fixtures").await.unwrap();
    let functions = Functions::start(&[WEBHOOK], &function_vars(&stack, None)).await;
    let url = functions.function_url(WEBHOOK);
    let http = reqwest::Client::new();

    let fixtures = [
        (
            "message.json",
            include_str!("../../../events/webhook/message.json"),
            200,
        ),
        (
            "wrong_secret.json",
            include_str!("../../../events/webhook/wrong_secret.json"),
            401,
        ),
        (
            "oversized.json",
            include_str!("../../../events/webhook/oversized.json"),
            413,
        ),
        (
            "poison.json",
            include_str!("../../../events/webhook/poison.json"),
            200,
        ),
    ];
    for (name, fixture, expected) in fixtures {
        let (status, body) = post_fixture(&http, &url, fixture).await;
        assert_eq!(status, expected, "{name}: answered {body}");
    }

    // The message is stored and queued; the refused requests wrote nothing.
    let message: Value = serde_json::from_str(fixtures[0].1).unwrap();
    assert_eq!(
        record_status(&dynamo, &stack.table, BOT_ID, 500_000_001)
            .await
            .unwrap()
            .as_deref(),
        Some("QUEUED")
    );
    assert_eq!(item_count(&dynamo, &stack.table).await.unwrap(), 1);
    let queued = read_all(&sqs, &stack.queue_url, 60).await.unwrap();
    assert_eq!(queued.len(), 1, "{queued:#?}");
    assert_eq!(queued[0].body, message["body"].as_str().unwrap());
    assert_eq!(queued[0].group_id, "demo:111111111");

    // The poison body went to the dead-letter queue, byte for byte, with its reason.
    let letters = read_all(&sqs, &stack.dlq_url, 60).await.unwrap();
    assert_eq!(letters.len(), 1, "{letters:#?}");
    assert_eq!(letters[0].body, r#"{"update_id":"x"}"#);
    assert_eq!(letters[0].attributes["reason"], "poison");
    assert_eq!(letters[0].group_id, "demo:poison");
}
