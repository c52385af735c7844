//! A worker on in-memory adapters, for tests of a handler: a batch of updates in, what the handler
//! sent and how each update ended out. The bot in `bot/` and the echo bot are tested through it.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tgq_core::bots::OneBot;
use tgq_core::budget::SendBudget;
use tgq_core::clock::{Clock, ManualClock};
use tgq_core::envelope::Envelope;
use tgq_core::handler::Handler;
use tgq_core::ids::{BotId, MessageGroupId};
use tgq_core::ports::{QueueRecord, ReceiptHandle};
use tgq_core::record::Timestamp;
use tgq_core::worker::{BatchReport, Worker, WorkerPorts, WorkerSettings};

use crate::{MemoryDeadLetters, MemoryStore, RecordingBotApi, RecordingVisibility};

/// A worker running one handler on in-memory adapters, with a clock that moves only when told.
pub struct Harness {
    worker: Worker,
    bot_id: BotId,
    /// What the handler sent.
    pub api: Arc<RecordingBotApi>,
    /// The update records.
    pub store: Arc<MemoryStore>,
    /// The dead letters.
    pub dead: Arc<MemoryDeadLetters>,
    /// The visibility changes the worker asked of the queue.
    pub visibility: Arc<RecordingVisibility>,
    /// The worker's clock.
    pub clock: ManualClock,
}

impl Harness {
    /// A worker for `handler` of `bot_id`, sending to `api` (the one the handler was built with),
    /// with the default settings but no patience with the store: a store the test takes down
    /// stays down for the run, so the test sees what happens when a write is given up.
    pub fn new(bot_id: BotId, handler: Arc<dyn Handler>, api: Arc<RecordingBotApi>) -> Self {
        let settings = WorkerSettings {
            store_patience: std::time::Duration::ZERO,
            ..WorkerSettings::default()
        };
        Self::with_settings(bot_id, handler, api, settings)
    }

    /// As [`Harness::new`], with these worker settings.
    pub fn with_settings(
        bot_id: BotId,
        handler: Arc<dyn Handler>,
        api: Arc<RecordingBotApi>,
        settings: WorkerSettings,
    ) -> Self {
        Self::built(bot_id, api, settings, None, |_, _| handler)
    }

    /// A worker for the handler `handler` makes from the harness's store and clock (one that
    /// looks at its own records, or moves the time on), with these settings, and paced by
    /// `budget` when given (unlimited otherwise).
    pub fn built(
        bot_id: BotId,
        api: Arc<RecordingBotApi>,
        settings: WorkerSettings,
        budget: Option<Arc<dyn SendBudget>>,
        handler: impl FnOnce(&Arc<MemoryStore>, &ManualClock) -> Arc<dyn Handler>,
    ) -> Self {
        let store = Arc::new(MemoryStore::new());
        let dead = Arc::new(MemoryDeadLetters::new());
        let visibility = Arc::new(RecordingVisibility::new());
        let clock = ManualClock::at(Timestamp(1_800_000_000_000));
        let mut ports = worker_ports(&store, dead.clone(), Arc::new(clock.clone()));
        ports.visibility = visibility.clone();
        if let Some(budget) = budget {
            ports.budget = budget;
        }
        let handler = handler(&store, &clock);
        let worker = Worker::new(settings, ports, Arc::new(OneBot::new(api.clone(), handler)));
        Self {
            worker,
            bot_id,
            api,
            store,
            dead,
            visibility,
            clock,
        }
    }

    /// Runs `updates` (Bot API JSON) through the worker as one batch, each in its group.
    pub async fn run(&self, updates: &[Value]) -> BatchReport {
        let batch: Vec<QueueRecord> = updates.iter().map(|u| self.queue_record(u)).collect();
        self.process(&batch).await
    }

    /// Runs `batch`, the messages as the queue delivered them, through the worker, with a minute
    /// of the invocation left.
    pub async fn process(&self, batch: &[QueueRecord]) -> BatchReport {
        let deadline = self.clock.now().plus(Duration::from_secs(60));
        self.process_until(batch, deadline).await
    }

    /// [`Harness::process`] with the invocation ending at `deadline`.
    pub async fn process_until(&self, batch: &[QueueRecord], deadline: Timestamp) -> BatchReport {
        self.worker.process_batch(batch, deadline).await
    }

    /// An update as the queue would deliver it.
    pub fn queue_record(&self, update: &Value) -> QueueRecord {
        let body = Bytes::from(update.to_string());
        let group = match Envelope::parse(&body) {
            Ok(envelope) => MessageGroupId::new(&self.bot_id, &envelope.group),
            Err(_) => MessageGroupId::from_raw(format!("{}:poison", self.bot_id)),
        };
        let id = &update["update_id"];
        QueueRecord {
            message_id: format!("m-{id}"),
            receipt: ReceiptHandle(format!("r-{id}")),
            body,
            group_id: group,
            receive_count: 1,
            dead_letter: None,
        }
    }
}

/// The worker's ports on `store` and `dead`, telling time by `clock`: visibility changes recorded,
/// Telegram's pacing unlimited (a test or bench asks for limits itself).
pub fn worker_ports(
    store: &Arc<MemoryStore>,
    dead: Arc<MemoryDeadLetters>,
    clock: Arc<dyn Clock>,
) -> WorkerPorts {
    WorkerPorts {
        clock,
        timers: Some(Arc::new(crate::MemoryTimers::new())),
        broadcasts: Some(Arc::new(crate::MemoryBroadcasts::over(store.clone()))),
        ..WorkerPorts::around(store.clone(), Arc::new(RecordingVisibility::new()), dead)
    }
}
