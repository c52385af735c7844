//! SQS's receive count is a crash-loop net, not a budget that runs out while nothing runs
//! (docs/design/worker.md §1): a chat whose first five updates each fail until their attempt budget
//! is spent, followed by five good updates. Every receive of a failing head returns the good ones
//! behind it too, unrun; with the template's `MaxReceiveCount` none of them may reach the
//! dead-letter queue untried. The same scenario on the in-memory queue, the embedded store and moto.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tgq_aws::{DynamoStore, SqsQueue};
use tgq_core::bots::OneBot;
use tgq_core::clock::{Clock, ManualClock, SystemClock};
use tgq_core::dead::DeadReason;
use tgq_core::echo::{reply_text, EchoBot};
use tgq_core::ids::{BotId, GroupKey, RecordKey, UpdateId};
use tgq_core::policy::RetryPolicy;
use tgq_core::ports::{
    DeadLetter, DeadLetterReader, OutgoingMessage, QueueConsumer, UpdateQueue, Visibility,
};
use tgq_core::record::Timestamp;
use tgq_core::worker::{Worker, WorkerPorts, WorkerSettings};
use tgq_e2e::emulator::{self, Stack};
use tgq_e2e::template;
use tgq_embedded::{EmbeddedStore, StoreOptions};
use tgq_memory::{MemoryDeadLetters, MemoryQueue, MemoryStore, RecordingBotApi};

const CHAT: i64 = 4711;
const FAILING: i64 = 5;
const GOOD: i64 = 5;
/// The default budget: five heads spend forty runs, more than a redrive limit of thirty allows.
const MAX_ATTEMPTS: u32 = 8;

fn bot() -> BotId {
    BotId::new("redrive").unwrap()
}

/// The chat's updates in order: the failing heads, then the good ones.
fn messages(first_id: i64) -> Vec<OutgoingMessage> {
    (0..FAILING + GOOD)
        .map(|n| {
            let id = first_id + n;
            let text = if n < FAILING {
                "/fail transient"
            } else {
                "good"
            };
            let body = serde_json::json!({"update_id": id, "message": {"message_id": id,
                "date": 1_700_000_000, "text": text,
                "chat": {"id": CHAT, "type": "private", "first_name": "A"}}});
            OutgoingMessage::for_update(
                &RecordKey::new(bot(), UpdateId(id)),
                &GroupKey::new(CHAT.to_string()),
                Bytes::from(body.to_string()),
            )
        })
        .collect()
}

/// What the scenario needs from a stack: the queue, the dead letters and a way to let time pass.
struct Scenario {
    queue: Arc<dyn QueueConsumer>,
    send: Arc<dyn UpdateQueue>,
    letters: Arc<dyn DeadLetterReader>,
    worker: Worker,
    api: Arc<RecordingBotApi>,
    clock: Arc<dyn Clock>,
    /// Lets the backoff of the failed heads pass (moves a manual clock, or sleeps).
    wait: Box<dyn Fn(Duration) -> futures_lite::BoxedWait + Send + Sync>,
    first_id: i64,
}

mod futures_lite {
    /// A boxed future that lets time pass.
    pub type BoxedWait = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;
}

fn worker<S>(
    store: Arc<S>,
    visibility: Arc<dyn Visibility>,
    dead: Arc<dyn tgq_core::ports::DeadLetters>,
    api: Arc<RecordingBotApi>,
    clock: Arc<dyn Clock>,
    backoff: Duration,
) -> Worker
where
    S: tgq_core::ports::UpdateLedger
        + tgq_core::ports::UpdateReset
        + tgq_core::audit::AuditLog
        + 'static,
{
    let settings = WorkerSettings {
        retry: RetryPolicy {
            max_attempts: MAX_ATTEMPTS,
            base: backoff,
            cap: backoff,
            ..RetryPolicy::default()
        },
        max_receive_count: template::max_receive_count(),
        ..WorkerSettings::default()
    };
    let ports = WorkerPorts {
        clock,
        ..WorkerPorts::around(store, visibility, dead)
    };
    Worker::new(
        settings,
        ports,
        Arc::new(OneBot::new(api, Arc::new(EchoBot))),
    )
}

impl Scenario {
    /// Plays the SQS event source mapping until the chat is settled; then checks the promise.
    async fn run(self) {
        for message in messages(self.first_id) {
            self.send.enqueue(&message).await.unwrap();
        }
        let mut settled = 0;
        for _ in 0..400 {
            let batch = self
                .queue
                .receive(10, Duration::from_secs(60), Duration::from_secs(2))
                .await
                .unwrap();
            if !batch.is_empty() {
                let deadline = self.clock.now().plus(Duration::from_secs(60));
                let report = self.worker.process_batch(&batch, deadline).await;
                let failed = report.failed_message_ids();
                for record in batch.iter().filter(|r| !failed.contains(&r.message_id)) {
                    self.queue.delete(&record.receipt).await.unwrap();
                    settled += 1;
                }
            }
            if settled == FAILING + GOOD {
                break;
            }
            (self.wait)(Duration::from_secs(3)).await;
        }
        let letters: Vec<DeadLetter> = self.letters.peek(100).await.unwrap();
        let redriven: Vec<_> = letters
            .iter()
            .filter(|l| l.reason == DeadReason::Redriven)
            .map(|l| l.update_id)
            .collect();
        assert!(
            redriven.is_empty(),
            "SQS moved updates to the dead-letter queue without running them: {redriven:?}"
        );
        let good: Vec<String> = (FAILING..FAILING + GOOD)
            .map(|n| reply_text(self.first_id + n, "good"))
            .collect();
        assert_eq!(
            self.api.sent_texts(),
            good,
            "the good updates, each once, in order"
        );
        let buried: Vec<_> = letters
            .iter()
            .filter(|l| l.reason == DeadReason::BudgetSpent)
            .map(|l| l.update_id.map(|id| id.0))
            .collect();
        let heads: Vec<_> = (0..FAILING).map(|n| Some(self.first_id + n)).collect();
        assert_eq!(buried, heads, "each failing head spent its own budget");
    }
}

fn manual_wait(
    clock: ManualClock,
) -> Box<dyn Fn(Duration) -> futures_lite::BoxedWait + Send + Sync> {
    Box::new(move |_| {
        // The heads back off at most the cap times 1.5: move past it.
        clock.advance(Duration::from_secs(400));
        Box::pin(async {})
    })
}

#[tokio::test]
async fn good_updates_behind_failing_heads_are_processed_in_order_on_the_in_memory_queue() {
    let clock = ManualClock::at(Timestamp(1_800_000_000_000));
    let dlq = Arc::new(MemoryDeadLetters::new());
    let queue = Arc::new(MemoryQueue::with_redrive(
        Arc::new(clock.clone()),
        template::max_receive_count(),
        dlq.clone(),
    ));
    let api = Arc::new(RecordingBotApi::new());
    Scenario {
        worker: worker(
            Arc::new(MemoryStore::new()),
            queue.clone(),
            dlq.clone(),
            api.clone(),
            Arc::new(clock.clone()),
            Duration::from_secs(2),
        ),
        queue: queue.clone(),
        send: queue,
        letters: dlq,
        api,
        clock: Arc::new(clock.clone()),
        wait: manual_wait(clock),
        first_id: 1,
    }
    .run()
    .await;
}

#[tokio::test]
async fn good_updates_behind_failing_heads_are_processed_in_order_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(Timestamp(1_800_000_000_000));
    let store = EmbeddedStore::open(
        dir.path(),
        StoreOptions {
            max_receive_count: template::max_receive_count(),
            clock: Arc::new(clock.clone()),
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let api = Arc::new(RecordingBotApi::new());
    Scenario {
        worker: worker(
            store.clone(),
            store.clone(),
            store.clone(),
            api.clone(),
            Arc::new(clock.clone()),
            Duration::from_secs(2),
        ),
        queue: store.clone(),
        send: store.clone(),
        letters: store,
        api,
        clock: Arc::new(clock.clone()),
        wait: manual_wait(clock),
        first_id: 1,
    }
    .run()
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn good_updates_behind_failing_heads_are_processed_in_order_on_sqs_with_the_template_s_redrive(
) {
    let config = emulator::sdk_config().await;
    let stack = Stack::create(&config, "redrive").await.unwrap();
    let functions_config = tgq_aws::aws_config().await;
    let sqs = aws_sdk_sqs::Client::new(&functions_config);
    let queue = Arc::new(SqsQueue::new(sqs.clone(), &stack.queue_url));
    let dlq = Arc::new(SqsQueue::new(sqs, &stack.dlq_url));
    let store = Arc::new(DynamoStore::new(
        aws_sdk_dynamodb::Client::new(&functions_config),
        &stack.table,
    ));
    let api = Arc::new(RecordingBotApi::new());
    // Unique per run, and within teloxide's u32 update ids.
    let first_id = i64::try_from(SystemClock.now().0 / 10 % 2_000_000_000).unwrap();
    Scenario {
        // A one-second backoff (SQS counts visibility in whole seconds): forty retries take a minute.
        worker: worker(
            store,
            queue.clone(),
            dlq.clone(),
            api.clone(),
            Arc::new(SystemClock),
            Duration::from_secs(1),
        ),
        queue: queue.clone(),
        send: queue,
        letters: dlq,
        api,
        clock: Arc::new(SystemClock),
        wait: Box::new(|_| Box::pin(async {})),
        first_id,
    }
    .run()
    .await;
}
