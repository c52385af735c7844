//! `events/corpus/` on a stack: real Update JSON from other Telegram libraries' tests, posted to the
//! real webhook binary and run by the real worker binary on the emulator. Every sample is stored
//! and queued, and ends `DONE` or dead-lettered `unreadable` in the group the manifest says; a
//! sample the parser panics on fails no batch, so the records beside it settle as usual.

use std::time::Duration;

use tgq_aws::DynamoStore;
use tgq_core::clock::{Clock as _, SystemClock};
use tgq_core::dead::DeadReason;
use tgq_core::ids::{BotId, RecordKey, UpdateId};
use tgq_core::ports::RecordReader as _;
use tgq_core::record::Status;
use tgq_e2e::corpus::{samples, Sample};
use tgq_e2e::emulator::{self, drain, Stack};
use tgq_e2e::esm::EventSourceMapping;
use tgq_e2e::functions::{Functions, WEBHOOK, WORKER};
use tgq_e2e::telegram::Telegram;
use tgq_fake_telegram::FakeTelegram;

const BOT_ID: &str = "demo";
const SECRET: &str = "corpus-secret";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_update_of_the_corpus_is_run_or_dead_lettered_unreadable_by_the_real_worker() {
    // Telegram numbers a bot's updates in the order it sends them; the mapping holds each
    // group to that order.
    let mut samples = samples();
    samples.sort_by_key(Sample::update_id);
    let config = emulator::sdk_config().await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let dynamo = aws_sdk_dynamodb::Client::new(&config);
    let stack = Stack::create(&config, "corpus").await.unwrap();
    let fake = FakeTelegram::start().await.unwrap();
    let vars = stack.function_vars(BOT_ID, SECRET, Some(&fake));
    let functions = Functions::start(&[WEBHOOK, WORKER], &vars).await;
    let telegram = Telegram::new(functions.function_url(WEBHOOK), SECRET);
    for sample in &samples {
        let refused = telegram.deliver(&sample.body).await.unwrap();
        assert!(refused.is_empty(), "{}: refused {refused:?}", sample.file);
    }
    let mapping = EventSourceMapping::new(sqs.clone(), stack.clone(), &functions);
    // A batch the worker failed whole would come back for ever: draining is the proof it never did.
    mapping
        .run_until_drained(|| true, Duration::from_secs(240))
        .await
        .unwrap_or_else(|e| panic!("{e:#}; logs: {}", functions.logs().display()));

    let store = DynamoStore::new(dynamo.clone(), stack.table.clone());
    let bot = BotId::new(BOT_ID).unwrap();
    let (mut unreadable, mut wrong) = (Vec::new(), Vec::new());
    for sample in &samples {
        let (file, group) = (&sample.file, &sample.group);
        let key = RecordKey::new(bot.clone(), UpdateId(sample.update_id()));
        let Some(record) = store.get(&key, SystemClock.now()).await.unwrap() else {
            wrong.push(format!("{file}: no record"));
            continue;
        };
        let reason = record.burial.as_ref().map(|burial| burial.reason);
        match (record.status, reason) {
            (Status::Done, _) => {}
            (Status::Dead, Some(DeadReason::Unreadable)) => unreadable.push(file.clone()),
            (status, reason) => wrong.push(format!("{file}: {status:?} {reason:?}")),
        }
        if record.group.as_str() != group {
            wrong.push(format!("{file}: group {}, manifest {group}", record.group));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert!(
        unreadable.iter().any(|file| file.contains("reaction")),
        "the reactions naming nobody, which the parser panics on: {unreadable:?}"
    );
    let letters = drain(&sqs, &stack.dlq_url).await.unwrap();
    let unreadable_letters = letters
        .iter()
        .filter(|letter| letter.attributes["reason"] == "unreadable")
        .count();
    assert_eq!(unreadable_letters, unreadable.len(), "{letters:#?}");
    assert_eq!(letters.len(), unreadable.len(), "{letters:#?}");
}
