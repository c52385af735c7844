//! The built-in echo bot answers each update with a reply naming it, and fails on request.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tgq_core::clock::{Clock, ManualClock};
use tgq_core::dead::DeadReason;
use tgq_core::echo::{reply_text, EchoBot};
use tgq_core::ids::MessageGroupId;
use tgq_core::pacer::{Pacer, RateLimits};
use tgq_core::ports::{QueueRecord, ReceiptHandle};
use tgq_core::record::Timestamp;
use tgq_core::worker::{RecordOutcome, Worker, WorkerPorts, WorkerSettings};
use tgq_memory::{MemoryDeadLetters, MemoryStore, RecordingBotApi, RecordingVisibility};

fn message(update_id: i64, chat: i64, text: &str) -> QueueRecord {
    let body = serde_json::json!({
        "update_id": update_id,
        "message": {
            "message_id": update_id, "date": 1_700_000_000, "text": text,
            "chat": {"id": chat, "type": "private", "first_name": "Ada"},
            "from": {"id": chat, "is_bot": false, "first_name": "Ada"},
        }
    });
    QueueRecord {
        message_id: format!("m-{update_id}"),
        receipt: ReceiptHandle(format!("r-{update_id}")),
        body: Bytes::from(body.to_string()),
        group_id: MessageGroupId::from_raw(format!("demo:{chat}")),
        receive_count: 1,
        first_received_at: None,
    }
}

#[tokio::test]
async fn the_echo_bot_names_the_update_in_its_reply_and_fails_when_asked() {
    let api = Arc::new(RecordingBotApi::new());
    let clock = ManualClock::at(Timestamp(1_800_000_000_000));
    let worker = Worker::new(
        WorkerSettings::default(),
        WorkerPorts {
            ledger: Arc::new(MemoryStore::new()),
            visibility: Arc::new(RecordingVisibility::new()),
            dead: Arc::new(MemoryDeadLetters::new()),
            api: api.clone(),
            pacer: Arc::new(Pacer::new(RateLimits::UNLIMITED)),
            clock: Arc::new(clock.clone()),
        },
        Arc::new(EchoBot),
    );
    let batch = [
        message(10, 5, "hello"),
        message(11, 6, "/fail permanent"),
        message(12, 7, "/fail transient"),
        message(13, 8, "/once hi"),
    ];
    let report = worker
        .process_batch(&batch, clock.now().plus(Duration::from_secs(60)))
        .await;

    assert_eq!(
        api.sent_texts(),
        [reply_text(10, "hello"), reply_text(13, "/once hi")]
    );
    assert_eq!(reply_text(10, "hello"), "echo 10: hello");
    let outcomes: Vec<_> = report.outcomes.iter().map(|(_, o)| o.clone()).collect();
    assert!(matches!(outcomes[0], RecordOutcome::Done(_)));
    assert_eq!(
        outcomes[1],
        RecordOutcome::DeadLettered(DeadReason::Permanent)
    );
    assert!(matches!(outcomes[2], RecordOutcome::Retrying(..)));
    assert!(matches!(outcomes[3], RecordOutcome::Done(_)));
}
