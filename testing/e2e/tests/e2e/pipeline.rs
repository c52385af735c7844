//! The whole pipeline end to end: the real `webhook` and `worker` binaries under `cargo lambda watch`,
//! moto (through `AWS_ENDPOINT_URL`), the fake Bot API, and the harness playing Telegram and the SQS
//! event source mapping — with one poller (users who blocked the bot dead-lettered), with two
//! pollers and two worker instances (users who blocked the bot settled as `recipient_gone`, the
//! default), and with a worker killed in the middle of a batch.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::Value;
use tgq_aws::DynamoStore;
use tgq_core::clock::{Clock as _, SystemClock};
use tgq_core::echo::reply_text;
use tgq_core::ids::{BotId, RecordKey, UpdateId};
use tgq_core::ports::RecordReader as _;
use tgq_e2e::emulator::{self, drain, item_count, record_status, ReadMessage, Stack};
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
    let mut vars = stack.function_vars(BOT_ID, SECRET, telegram);
    vars.insert("TGQ_BACKOFF_BASE_MS".into(), "200".into());
    vars.insert("TGQ_BACKOFF_CAP_MS".into(), "1000".into());
    vars
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

/// Faults for the first calls to some chats, transient ones the worker must retry through and
/// blocks that meet exactly the first update of each chat in [`BLOCKED_ONCE`]; and a user who has
/// blocked the bot for good, so every update of [`BLOCKED_FOR_GOOD`] meets a block (dead-lettered,
/// the dead-letter queue then holding ten letters in that one message group, or settled as
/// `recipient_gone`).
fn inject_faults(telegram: &FakeTelegram) {
    telegram.inject(Fault::ServerError(500), Scope::Chat(3), Times::N(2));
    telegram.inject(Fault::ServerError(502), Scope::Chat(6), Times::Once);
    telegram.inject(Fault::RetryAfter(1), Scope::Chat(6), Times::Once);
    telegram.inject(Fault::RetryAfter(1), Scope::Chat(10), Times::N(2));
    telegram.inject(Fault::ServerError(503), Scope::Chat(13), Times::N(3));
    telegram.inject(Fault::RetryAfter(1), Scope::Chat(16), Times::Once);
    telegram.inject(Fault::Blocked, Scope::Chat(BLOCKED_FOR_GOOD), Times::Always);
    // Blocked on the retry after a 5xx; blocked at once.
    telegram.inject(Fault::ServerError(500), Scope::Chat(12), Times::Once);
    telegram.inject(Fault::Blocked, Scope::Chat(12), Times::Once);
    telegram.inject(Fault::Blocked, Scope::Chat(18), Times::Once);
}
/// The chat whose user blocked the bot before the test began.
const BLOCKED_FOR_GOOD: i64 = 5;
/// Chats whose first update meets `Fault::Blocked`.
const BLOCKED_ONCE: [i64; 2] = [12, 18];
/// The 5xx answers injected above.
const INJECTED_5XX: usize = 2 + 1 + 3 + 1;
/// The 429 answers injected above (the rate limits add their own).
const INJECTED_429: usize = 1 + 2 + 1;

/// The updates whose reply meets a block: every one of the chat that blocked the bot, the first of
/// each chat blocked once.
fn blocked_updates(planned: &[Planned]) -> BTreeSet<i64> {
    planned
        .iter()
        .filter(|p| p.chat == BLOCKED_FOR_GOOD || (BLOCKED_ONCE.contains(&p.chat) && p.k == 0))
        .map(|p| p.update_id)
        .collect()
}

/// What the worker does with an update whose user blocked the bot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Blocked {
    /// `TGQ_DEAD_LETTER_GONE_RECIPIENTS=true`: a dead letter.
    DeadLettered,
    /// The default: `DONE` as `recipient_gone`, no letter.
    Settled,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_updates_over_twenty_chats_are_processed_once_in_order_despite_faults() {
    let (mapping_stats, _) = run_the_pipeline("pipeline", 1, Blocked::DeadLettered).await;
    assert_eq!(mapping_stats.most_concurrent_invocations, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_pollers_and_two_worker_instances_still_process_each_update_once_in_chat_order() {
    let (mapping_stats, logs) = run_the_pipeline("pollers", 2, Blocked::Settled).await;
    assert_eq!(
        mapping_stats.most_concurrent_invocations, 2,
        "the two pollers had invocations running at the same time: {mapping_stats:?}"
    );
    for log in ["worker.log", "worker-2.log"] {
        let text = std::fs::read_to_string(logs.join(log)).unwrap_or_default();
        let processed = text.matches(r#""message":"processed""#).count();
        assert!(
            processed > 0,
            "the instance logging to {log} processed nothing"
        );
    }
}

/// Posts the 200 updates (with duplicates) through the webhook function while `pollers` event
/// source pollers feed as many worker instances, and checks everything the pipeline promises.
/// Returns what the pollers did and where the functions' logs are.
async fn run_the_pipeline(
    purpose: &str,
    pollers: usize,
    blocked_updates_are: Blocked,
) -> (tgq_e2e::esm::MappingStats, std::path::PathBuf) {
    let started = Instant::now();
    let config = emulator::sdk_config().await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let dynamo = aws_sdk_dynamodb::Client::new(&config);
    let stack = Stack::create(&config, purpose).await.unwrap();
    let fake = FakeTelegram::start_with(FakeConfig {
        limits: Some(Limits::default()),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    inject_faults(&fake);
    let mut vars = function_vars(&stack, Some(&fake));
    if blocked_updates_are == Blocked::DeadLettered {
        vars.insert("TGQ_DEAD_LETTER_GONE_RECIPIENTS".into(), "true".into());
    }
    let functions = Functions::start(&[WEBHOOK, WORKER], &vars).await;
    for _ in 1..pollers {
        functions.start_instance(WORKER).await.unwrap();
    }
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
    let mapping =
        EventSourceMapping::new(sqs.clone(), stack.clone(), &functions).with_concurrency(pollers);
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
    let blocked = blocked_updates(&planned);
    let dead = match blocked_updates_are {
        Blocked::DeadLettered => blocked.clone(),
        Blocked::Settled => BTreeSet::new(),
    };

    // Every update that met no block got exactly one reply, in its chat's update order.
    for chat in 1..=CHATS {
        let replies = replies_to(&fake, chat);
        let expected: Vec<String> = planned
            .iter()
            .filter(|p| p.chat == chat && !blocked.contains(&p.update_id))
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

    // The dead-letter queue, read to the end, holds exactly the blocked updates when they are
    // dead-lettered (none otherwise), each as received, with its reason, and each chat's letters
    // in update order.
    let letters = drain(&sqs, &stack.dlq_url).await.unwrap();
    let lettered: BTreeMap<i64, &ReadMessage> = letters
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
    let blocked_group = format!("{BOT_ID}:{BLOCKED_FOR_GOOD}");
    let letter_order: Vec<i64> = letters
        .iter()
        .filter(|l| l.group_id == blocked_group)
        .map(|l| l.attributes["update_id"].parse().unwrap())
        .collect();
    let update_order: Vec<i64> = planned
        .iter()
        .filter(|p| p.chat == BLOCKED_FOR_GOOD && dead.contains(&p.update_id))
        .map(|p| p.update_id)
        .collect();
    assert_eq!(
        letter_order, update_order,
        "the letters of one chat, in the order the queue handed them out"
    );

    // DynamoDB agrees: DONE for every update (the blocked ones too, unless dead-lettered), DEAD
    // for the dead-lettered ones.
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
    assert_eq!(answered(|s| s == 403), blocked.len());
    let too_many = answered(|s| s == 429);
    assert!(too_many >= INJECTED_429, "429s answered: {too_many}");

    // RUST_LOG unset: the workers log at info, one `processed` line per handled update at least,
    // over every worker instance's log.
    let mut processed_lines = 0;
    for entry in std::fs::read_dir(functions.logs()).unwrap() {
        let path = entry.unwrap().path();
        let is_worker_log = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(WORKER) && n.ends_with(".log"));
        if is_worker_log {
            processed_lines += std::fs::read_to_string(&path)
                .unwrap()
                .lines()
                .filter(|line| line.contains(r#""level":"INFO""#) && line.contains("processed"))
                .count();
        }
    }
    assert!(
        processed_lines >= planned.len() - blocked.len(),
        "{processed_lines} info lines saying `processed` in {}",
        functions.logs().display()
    );

    let stats = mapping.stats();
    eprintln!(
        "{purpose}: {} posts ({} refused first), {pollers} poller(s), functions ready after \
         {ready:.1?}, queue drained {:.1?} later; {} batches, {} records handed to the worker, {} \
         reported failed, {} deleted, highest receive count {}, at most {} invocations at once; \
         Bot API calls {} ({too_many} answered 429); {} dead letters read",
        schedule(planned.len()).len(),
        refusals.len(),
        processed - ready,
        stats.batches,
        stats.records,
        stats.reported_failures,
        stats.deleted,
        stats.max_receive_count,
        stats.most_concurrent_invocations,
        calls.len(),
        letters.len(),
    );
    assert!(refusals.is_empty(), "the webhook refused: {refusals:?}");
    (stats, functions.logs().to_owned())
}

/// The texts of the messages the fake Bot API accepted for `chat`, in arrival order.
fn replies_to(fake: &FakeTelegram, chat: i64) -> Vec<String> {
    fake.delivered_to(chat)
        .iter()
        .filter(|call| call.method == "sendMessage")
        .map(|call| call.params["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn history_of_all(mapping: &EventSourceMapping<'_>) -> String {
    let log = mapping.log();
    (1..=CHATS)
        .map(|chat| {
            let group = format!("{BOT_ID}:{chat}");
            format!("  {group}: {}", log.history(&group))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Chats of the crash test, one update each in the batch whose worker dies.
const CRASH_CHATS: i64 = 10;
/// Updates per chat in the crash test.
const CRASH_PER_CHAT: i64 = 3;
/// The chat whose reply the dying worker is sending when it is killed.
const STUCK_CHAT: i64 = 3;
/// How long the crash test's batches stay hidden: short, so the dead invocation's batch comes back
/// soon. The run takes longer all the same: the update the worker was running is leased to the
/// dead invocation until its deadline (the worker's timeout, 60 s, after it started).
const CRASH_VISIBILITY: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_mid_batch_leaves_the_batch_to_its_visibility_timeout_and_the_redelivery_finishes_it(
) {
    let config = emulator::sdk_config().await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let dynamo = aws_sdk_dynamodb::Client::new(&config);
    let stack = Stack::create(&config, "crash").await.unwrap();
    let fake = FakeTelegram::start().await.unwrap();
    // The Bot API takes the stuck chat's first reply and holds its answer: the worker is in the
    // middle of that send when it dies.
    fake.inject(
        Fault::Timeout(Duration::from_secs(30)),
        Scope::Chat(STUCK_CHAT),
        Times::Once,
    );
    let functions = Functions::start(&[WEBHOOK, WORKER], &function_vars(&stack, Some(&fake))).await;
    let telegram = Telegram::new(functions.function_url(WEBHOOK), SECRET);
    let planned: Vec<Planned> = (0..CRASH_PER_CHAT)
        .flat_map(|k| (1..=CRASH_CHATS).map(move |chat| (k, chat)))
        .map(|(k, chat)| {
            let update_id = FIRST_UPDATE_ID + k * CRASH_CHATS + chat;
            let text = format!("c{chat}-n{k}");
            Planned {
                update_id,
                chat,
                k,
                body: text_update(update_id, chat, 1000 + k, &text).to_string(),
            }
        })
        .collect();

    // The batch that dies holds one update per chat: each message group has one message in it.
    for first in planned.iter().filter(|p| p.k == 0) {
        let refused = telegram.deliver(&first.body).await.unwrap();
        assert!(refused.is_empty(), "the webhook refused: {refused:?}");
    }
    let mapping = EventSourceMapping::new(sqs.clone(), stack.clone(), &functions)
        .with_visibility(CRASH_VISIBILITY);
    let kill = async {
        let limit = Instant::now() + Duration::from_secs(60);
        while fake.delivered_to(STUCK_CHAT).is_empty() {
            assert!(
                Instant::now() < limit,
                "the worker never sent the stuck reply"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(functions.kill_instances(WORKER).unwrap(), 1);
    };
    let handed = mapping.poll_and_crash(kill).await.unwrap();
    assert_eq!(
        handed, CRASH_CHATS as usize,
        "the dying invocation held the first update of every chat"
    );

    // What the dead invocation left: the reply it was sending has an intent and no result.
    let ledger = DynamoStore::new(dynamo.clone(), stack.table.clone());
    let mut unknown = BTreeSet::new();
    for first in planned.iter().filter(|p| p.k == 0) {
        let key = RecordKey::new(BotId::new(BOT_ID).unwrap(), UpdateId(first.update_id));
        let record = ledger.get(&key, SystemClock.now()).await.unwrap();
        let uncertain = record.is_some_and(|r| {
            r.actions
                .values()
                .any(|a| a.state == tgq_core::record::ActionState::Pending)
        });
        if uncertain {
            unknown.insert(first.update_id);
        }
    }
    let stuck = planned
        .iter()
        .find(|p| p.chat == STUCK_CHAT && p.k == 0)
        .unwrap();
    assert_eq!(
        unknown,
        BTreeSet::from([stuck.update_id]),
        "only the send in progress has an unknown outcome"
    );

    // Lambda starts a new sandbox; Telegram goes on with the rest of each chat.
    functions.start_instance(WORKER).await.unwrap();
    for rest in planned.iter().filter(|p| p.k > 0) {
        let refused = telegram.deliver(&rest.body).await.unwrap();
        assert!(refused.is_empty(), "the webhook refused: {refused:?}");
    }
    if let Err(err) = mapping.run_until_drained(|| true, DRAIN_LIMIT).await {
        panic!(
            "{err:#}\nreceive history: {:?}\nlogs: {}",
            mapping.log().outstanding(),
            functions.logs().display()
        );
    }

    let stats = mapping.stats();
    assert_eq!(stats.crashed_invocations, 1);
    assert!(
        stats.max_receive_count >= 2,
        "the dead invocation's batch was received again once its visibility ended: {stats:?}"
    );
    // Each update answered once, in chat order; the send the worker died in is the one repeat, as
    // an at-least-once send with an unknown outcome is.
    for chat in 1..=CRASH_CHATS {
        let replies = replies_to(&fake, chat);
        let mut expected: Vec<String> = planned
            .iter()
            .filter(|p| p.chat == chat)
            .map(Planned::reply)
            .collect();
        if chat == STUCK_CHAT {
            expected.insert(0, stuck.reply());
        }
        assert_eq!(
            replies,
            expected,
            "chat {chat}: replies as delivered; receive history: {}",
            mapping.log().history(&format!("{BOT_ID}:{chat}"))
        );
    }
    for planned in &planned {
        let status = record_status(&dynamo, &stack.table, BOT_ID, planned.update_id)
            .await
            .unwrap();
        assert_eq!(
            status.as_deref(),
            Some("DONE"),
            "update {}",
            planned.update_id
        );
    }
    assert!(drain(&sqs, &stack.dlq_url).await.unwrap().is_empty());
    eprintln!(
        "crash: {} batches, {} records handed to the worker, highest receive count {}",
        stats.batches, stats.records, stats.max_receive_count
    );
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
            include_str!("../../../../events/webhook/message.json"),
            200,
        ),
        (
            "wrong_secret.json",
            include_str!("../../../../events/webhook/wrong_secret.json"),
            401,
        ),
        (
            "oversized.json",
            include_str!("../../../../events/webhook/oversized.json"),
            413,
        ),
        (
            "poison.json",
            include_str!("../../../../events/webhook/poison.json"),
            200,
        ),
    ];
    for (name, fixture, expected) in fixtures {
        let (status, body) = post_fixture(&http, &url, fixture).await;
        assert_eq!(status, expected, "{name}: answered {body}");
    }

    // The message is stored (RECEIVED until a worker claims it) and queued once; the refused
    // requests wrote nothing.
    let message: Value = serde_json::from_str(fixtures[0].1).unwrap();
    assert_eq!(
        record_status(&dynamo, &stack.table, BOT_ID, 500_000_001)
            .await
            .unwrap()
            .as_deref(),
        Some("RECEIVED")
    );
    assert_eq!(item_count(&dynamo, &stack.table).await.unwrap(), 1);
    let queued = drain(&sqs, &stack.queue_url).await.unwrap();
    assert_eq!(queued.len(), 1, "{queued:#?}");
    assert_eq!(queued[0].body, message["body"].as_str().unwrap());
    assert_eq!(queued[0].group_id, "demo:111111111");

    // The poison body went to the dead-letter queue, byte for byte, with its reason.
    let letters = drain(&sqs, &stack.dlq_url).await.unwrap();
    assert_eq!(letters.len(), 1, "{letters:#?}");
    assert_eq!(letters[0].body, r#"{"update_id":"x"}"#);
    assert_eq!(letters[0].attributes["reason"], "poison");
    assert_eq!(letters[0].group_id, "demo:poison");
}
