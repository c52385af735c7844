//! A misconfigured stack answers 503, never "poison" (docs/design/webhook.md): the webhook pointed
//! at a table that does not exist refuses with 503 and buries nothing, so Telegram keeps the update;
//! once the table exists, the same request is stored, queued and processed. On moto.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use secrecy::SecretString;
use tgq_aws::DynamoStore;
use tgq_core::bots::OneBot;
use tgq_core::clock::{Clock, SystemClock};
use tgq_core::echo::{reply_text, EchoBot};
use tgq_core::ids::BotId;
use tgq_core::ingest::{
    Answer, Ingest, Ingested, RequestHead, Webhook, WebhookPorts, WebhookSettings,
};
use tgq_core::ports::{DeadLetterReader, QueueConsumer};
use tgq_core::worker::{RecordOutcome, Worker, WorkerPorts, WorkerSettings};
use tgq_core::PortError;
use tgq_memory::RecordingBotApi;

const SECRET: &str = "misconfigured-secret";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_table_answers_503_buries_nothing_and_the_retry_goes_through_once_it_exists() {
    let e = common::emulator().await;
    let table = format!("{}-created-later", e.table);
    let store = Arc::new(DynamoStore::new(e.dynamodb.clone(), &table));
    let webhook = Webhook::new(
        WebhookSettings {
            bot_id: BotId::new("misconf").unwrap(),
            secret: SecretString::from(SECRET.to_owned()),
            max_body_bytes: 1 << 20,
            record_ttl: Duration::from_secs(3600),
            ack_callbacks: false,
        },
        WebhookPorts {
            ingest: Ingest::PutThenSend {
                store: store.clone(),
                queue: e.queue.clone(),
            },
            dead: e.dlq.clone(),
            clock: Arc::new(SystemClock),
        },
    );
    let update_id = i64::try_from(SystemClock.now().0 / 10 % 2_000_000_000).unwrap();
    let body = serde_json::json!({"update_id": update_id, "message": {"message_id": 1,
        "date": 1_700_000_000, "text": "hello",
        "chat": {"id": 77, "type": "private", "first_name": "A"}}})
    .to_string();
    let post = || async {
        let head = RequestHead {
            method: "POST",
            secret: Some(SECRET.as_bytes()),
            declared_length: Some(body.len()),
        };
        webhook.admit(&head).unwrap();
        webhook.ingest(Bytes::from(body.clone())).await
    };

    let refused = post().await;
    assert!(
        matches!(
            refused,
            Err(tgq_core::ingest::Refused::Unavailable(
                PortError::Misconfigured { .. }
            ))
        ),
        "{refused:?}"
    );
    assert_eq!(Answer::of(&refused).status, 503);
    assert!(
        e.dlq.peek(10).await.unwrap().is_empty(),
        "a misconfiguration buried the update"
    );

    common::create_table_named(&e.dynamodb, &table).await;
    assert_eq!(post().await.unwrap(), Ingested::Queued);

    let api = Arc::new(RecordingBotApi::new());
    let worker = Worker::new(
        WorkerSettings::default(),
        WorkerPorts::around(store, e.queue.clone(), e.dlq.clone()),
        Arc::new(OneBot::new(api.clone(), Arc::new(EchoBot))),
    );
    let batch = e
        .queue
        .receive(10, Duration::from_secs(60), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(batch.len(), 1);
    let report = worker
        .process_batch(&batch, SystemClock.now().plus(Duration::from_secs(60)))
        .await;
    assert!(
        matches!(report.outcomes[0].1, RecordOutcome::Done(_)),
        "{report:?}"
    );
    assert_eq!(api.sent_texts(), [reply_text(update_id, "hello")]);
}
