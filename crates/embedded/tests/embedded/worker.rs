//! The worker on the embedded store with the offline outbox, as `tgq local` runs it without a
//! token: what one update costs the writer.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tgq_core::bots::OneBot;
use tgq_core::clock::ManualClock;
use tgq_core::echo::{reply_text, EchoBot};
use tgq_core::ids::{BotId, GroupKey, RecordKey, UpdateId};
use tgq_core::ports::{AtomicIngest, OutgoingMessage, QueueConsumer};
use tgq_core::record::{ActionState, Timestamp, UpdateRecord};
use tgq_core::worker::{RecordOutcome, Worker, WorkerPorts, WorkerSettings};
use tgq_embedded::{EmbeddedStore, OfflineBotApi, StoreOptions};

const START: Timestamp = Timestamp(1_700_000_000_000);
const DAY: Duration = Duration::from_secs(86_400);

/// The worker as `tgq local` runs it without a token: the echo bot, its sends to the outbox.
pub(crate) fn offline_echo_worker(store: &Arc<EmbeddedStore>, clock: &ManualClock) -> Worker {
    Worker::new(
        WorkerSettings::default(),
        WorkerPorts {
            clock: Arc::new(clock.clone()),
            ..WorkerPorts::around(store.clone(), store.clone(), store.clone())
        },
        Arc::new(OneBot::new(
            Arc::new(OfflineBotApi::new(store.clone())),
            Arc::new(EchoBot),
        )),
    )
}

#[tokio::test]
async fn an_offline_reply_costs_the_worker_three_writes_claim_send_and_settle() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let options = StoreOptions {
        ttl: DAY,
        max_receive_count: 30,
        clock: Arc::new(clock.clone()),
        ..StoreOptions::default()
    };
    let store = EmbeddedStore::open(dir.path(), options).unwrap();
    let key = RecordKey::new(BotId::new("demo").unwrap(), UpdateId(7));
    let group = GroupKey::new("42");
    let body = Bytes::from_static(
        br#"{"update_id":7,"message":{"message_id":1,"date":0,"chat":{"id":42,"type":"private","first_name":"A"},"text":"hi"}}"#,
    );
    let record = UpdateRecord::received(key.clone(), group.clone(), body.clone(), START, DAY);
    let message = OutgoingMessage::for_update(&key, &group, body);
    store.insert_queued(&record, START, &message).await.unwrap();
    let batch = store
        .receive(10, Duration::from_secs(60), Duration::ZERO)
        .await
        .unwrap();
    let worker = offline_echo_worker(&store, &clock);

    let before = store.ops_committed();
    let report = worker
        .process_batch(&batch, START.plus(Duration::from_secs(60)))
        .await;

    assert!(
        matches!(report.outcomes[0].1, RecordOutcome::Done(_)),
        "{report:?}"
    );
    assert_eq!(
        store.ops_committed() - before,
        3,
        "claim, the outbox append with the action's intent and outcome, settle: no separate intent"
    );
    let outbox = store.outbox(10).unwrap();
    assert_eq!(
        outbox[0].text.as_deref(),
        Some(reply_text(7, "hi").as_str())
    );
    let stored = tgq_core::ports::RecordReader::get(&*store, &key, START)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(
        stored.actions[&1].state,
        ActionState::Succeeded(_)
    ));
}
