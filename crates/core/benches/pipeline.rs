//! Benchmarks of the two use cases on in-memory adapters: `ingest` of one update, and `process_batch`
//! of ten records with a bot that does nothing. Targets: ≤ 50 µs per update, ≤ 20 µs per record.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use secrecy::SecretString;
use teloxide_core::types::Update;
use tgq_core::bots::OneBot;
use tgq_core::clock::{Clock, SystemClock};
use tgq_core::ids::{BotId, MessageGroupId};
use tgq_core::ingest::{Ingest, Webhook, WebhookPorts, WebhookSettings};
use tgq_core::policy::RetryPolicy;
use tgq_core::ports::{QueueRecord, ReceiptHandle};
use tgq_core::worker::{GoneRecipients, Worker, WorkerSettings};
use tgq_core::{Context, Handler, HandlerError};
use tgq_memory::{MemoryDeadLetters, MemoryQueue, MemoryStore, RecordingBotApi};

static NEXT_ID: AtomicI64 = AtomicI64::new(1);

fn body(update_id: i64, chat: i64) -> Bytes {
    Bytes::from(format!(
        r#"{{"update_id":{update_id},"message":{{"message_id":{update_id},"date":1700000000,"chat":{{"id":{chat},"type":"private","first_name":"Ada"}},"from":{{"id":{chat},"is_bot":false,"first_name":"Ada"}},"text":"hello there"}}}}"#
    ))
}

struct NoOpBot;

#[async_trait]
impl Handler for NoOpBot {
    async fn handle(&self, _update: Update, _ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        Ok(())
    }
}

fn ingest(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ports = WebhookPorts {
        ingest: Ingest::PutThenSend {
            store: Arc::new(MemoryStore::new()),
            queue: Arc::new(MemoryQueue::new(Arc::new(SystemClock))),
        },
        dead: Arc::new(MemoryDeadLetters::new()),
        clock: Arc::new(SystemClock),
    };
    let settings = WebhookSettings {
        bot_id: BotId::new("bench").unwrap(),
        secret: SecretString::from("s".to_owned()),
        max_body_bytes: 1 << 20,
        record_ttl: Duration::from_secs(3600),
        ack_callbacks: false,
    };
    let webhook = Webhook::new(settings, ports);
    let mut group = c.benchmark_group("ingest");
    group.throughput(Throughput::Elements(1));
    // One runtime entry per sample, not per iteration: criterion's per-iteration `block_on` would
    // measure the runtime's park/unpark instead of the use case.
    group.bench_function("one_update", |b| {
        b.iter_custom(|iterations| {
            let bodies: Vec<Bytes> = (0..iterations)
                .map(|_| body(NEXT_ID.fetch_add(1, Ordering::Relaxed), 42))
                .collect();
            runtime.block_on(async {
                let started = Instant::now();
                for body in bodies {
                    webhook.ingest(body).await.unwrap();
                }
                started.elapsed()
            })
        })
    });
    group.finish();
}

fn process_batch(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = Arc::new(MemoryStore::new());
    let ports = tgq_memory::worker_ports(
        &store,
        Arc::new(MemoryDeadLetters::new()),
        Arc::new(SystemClock),
    );
    let settings = WorkerSettings {
        retry: RetryPolicy::default(),
        deadline_margin: Duration::from_secs(5),
        record_ttl: Duration::from_secs(3600),
        max_receive_count: 1000,
        gone_recipients: GoneRecipients::Settle,
        store_patience: Duration::ZERO,
        ack_callbacks: false,
        max_inline_wait: tgq_core::defaults::MAX_INLINE_WAIT,
        shared_inline_wait: tgq_core::defaults::SHARED_INLINE_WAIT,
        pre_checkout: Default::default(),
    };
    let bots = OneBot::new(Arc::new(RecordingBotApi::new()), Arc::new(NoOpBot));
    let worker = Worker::new(settings, ports, Arc::new(bots));
    let batch = || -> Vec<QueueRecord> {
        (0..10)
            .map(|i| {
                let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
                QueueRecord {
                    message_id: format!("m{id}"),
                    receipt: ReceiptHandle(format!("r{id}")),
                    body: body(id, i % 3),
                    group_id: MessageGroupId::from_raw(format!("bench:{}", i % 3)),
                    receive_count: 1,
                    dead_letter: None,
                }
            })
            .collect()
    };
    let mut group = c.benchmark_group("process_batch");
    group.throughput(Throughput::Elements(10));
    group.bench_function("ten_records_noop_bot", |b| {
        b.iter_custom(|iterations| {
            let batches: Vec<Vec<QueueRecord>> = (0..iterations).map(|_| batch()).collect();
            runtime.block_on(async {
                let deadline = SystemClock.now().plus(Duration::from_secs(3600));
                let started = Instant::now();
                for records in &batches {
                    let report = worker.process_batch(records, deadline).await;
                    assert!(report.failed_message_ids().is_empty());
                }
                started.elapsed()
            })
        })
    });
    group.finish();
}

criterion_group!(benches, ingest, process_batch);
criterion_main!(benches);
