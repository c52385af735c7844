//! A stack's job store queues the step each change of a job calls for, once the store answered:
//! the first step of a job started (again for a start repeated), of one resumed while running or
//! retried into running, the sweep of one cancelled; each in the place after the latest its
//! chain claimed. A step that could not be queued leaves the job stored, and says how to queue it.

use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::json;
use tgq_core::broadcast::chain::{BroadcastQueue, ChainStep};
use tgq_core::broadcast::{
    BroadcastSpec, BroadcastStore, Change, Outcome, QueuedBroadcasts, Retried,
};
use tgq_core::clock::{Clock, SystemClock};
use tgq_core::ids::BotId;
use tgq_core::PortError;
use tgq_memory::MemoryBroadcasts;

/// A queue that keeps each step with its deduplication name, or refuses while `down`.
#[derive(Default)]
struct Steps {
    queued: Mutex<Vec<(ChainStep, String)>>,
    down: Mutex<bool>,
}

#[async_trait]
impl BroadcastQueue for Steps {
    async fn queue(&self, step: &ChainStep, dedup: &str) -> Result<(), PortError> {
        if *self.down.lock() {
            return Err(PortError::unavailable(
                "SQS SendMessage",
                "the queue is away",
            ));
        }
        self.queued.lock().push((step.clone(), dedup.to_owned()));
        Ok(())
    }
}

#[tokio::test]
async fn each_change_queues_the_step_it_calls_for_after_the_latest_claimed() {
    let memory = Arc::new(MemoryBroadcasts::new());
    let steps = Arc::new(Steps::default());
    let store = QueuedBroadcasts::new(memory.clone(), steps.clone());
    let spec = BroadcastSpec::standard(
        BotId::new("caster").unwrap(),
        "sendMessage",
        json!({"text": "news"}),
        "update:caster:1:news",
    );
    let now = SystemClock.now();
    let id = store
        .create(&spec, &[1, 2], now)
        .await
        .unwrap()
        .job()
        .id
        .clone();
    // A retried start finds the job, and queues its first step again: the queue keeps one.
    store.create(&spec, &[1, 2], now).await.unwrap();
    let first = ChainStep::start(&id);
    let start = format!("{id}-start");
    assert_eq!(
        *steps.queued.lock(),
        [(first.clone(), start.clone()), (first, start)]
    );

    // Its chain ran to step 3; a resume of the running job queues a step in the place after.
    memory.claim_step(&id, 3, "message 3").await.unwrap();
    store.change(&id, Change::Resume, now).await.unwrap();
    let (resumed, dedup) = steps.queued.lock().last().cloned().unwrap();
    assert_eq!((resumed.step, resumed.from), (4, 0));
    assert_eq!(dedup, format!("{id}-resume-{}", now.0));

    // Done, one recipient failed: a retry runs it again, queued.
    for (index, outcome) in [
        (
            0,
            Outcome::Sent {
                message_id: 1,
                migrated_to: None,
            },
        ),
        (
            1,
            Outcome::Failed {
                error: "chat not found".into(),
            },
        ),
    ] {
        store.begin(&id, index).await.unwrap();
        store.settle(&id, index, outcome, now).await.unwrap();
    }
    store.change(&id, Change::Finish, now).await.unwrap();
    let queued = steps.queued.lock().len();
    let retried = store.retry(&id, false, now).await.unwrap();
    assert!(
        matches!(retried, Retried::Retried { recipients: 1, .. }),
        "{retried:?}"
    );
    assert_eq!(steps.queued.lock().len(), queued + 1);
    assert_eq!(
        steps.queued.lock().last().unwrap().1,
        format!("{id}-retry-{}", now.0)
    );

    // Paused, nothing is queued; cancelled, the sweep is.
    store.change(&id, Change::Pause, now).await.unwrap();
    assert_eq!(steps.queued.lock().len(), queued + 1);
    store.change(&id, Change::Cancel, now).await.unwrap();
    assert_eq!(
        steps.queued.lock().last().unwrap().1,
        format!("{id}-cancel")
    );

    // The queue away: the job is stored and running, and the error says how to queue it.
    *steps.down.lock() = true;
    let other = BroadcastSpec::standard(
        BotId::new("caster").unwrap(),
        "sendMessage",
        json!({"text": "more"}),
        "cli",
    );
    let refused = store.create(&other, &[3], now).await.unwrap_err();
    let why = tgq_core::error::error_chain(&refused);
    assert!(why.contains("tgq broadcast resume 2 --stack"), "{why}");
    let kept = memory.jobs().await.unwrap();
    assert_eq!(kept.len(), 2, "the job is kept");
}
