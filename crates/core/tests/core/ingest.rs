//! The webhook use case on in-memory adapters: every status, dedup, healing, and poison.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use secrecy::SecretString;
use tgq_core::clock::SystemClock;
use tgq_core::dead::DeadReason;
use tgq_core::ids::{BotId, RecordKey, UpdateId};
use tgq_core::ingest::{
    Answer, Ingest, Ingested, Refused, RequestHead, Webhook, WebhookPorts, WebhookSettings,
};
use tgq_core::record::Status;
use tgq_core::PortError;
use tgq_memory::{Fault, MemoryDeadLetters, MemoryQueue, MemoryStore};

const SECRET: &[u8] = b"tgq-example-secret";
const MESSAGE: &str = include_str!("../../../../events/updates/message.json");

struct Rig {
    webhook: Webhook,
    store: Arc<MemoryStore>,
    queue: Arc<MemoryQueue>,
    dead: Arc<MemoryDeadLetters>,
}

fn rig() -> Rig {
    rig_with_limit(1024)
}

fn rig_with_limit(max_body_bytes: usize) -> Rig {
    let store = Arc::new(MemoryStore::new());
    let queue = Arc::new(MemoryQueue::new(Arc::new(SystemClock)));
    let dead = Arc::new(MemoryDeadLetters::new());
    let settings = WebhookSettings {
        bot_id: BotId::new("demo").unwrap(),
        secret: SecretString::from("tgq-example-secret".to_owned()),
        max_body_bytes,
        record_ttl: Duration::from_secs(3600),
        ack_callbacks: false,
    };
    let ports = WebhookPorts {
        ingest: Ingest::PutThenSend {
            store: store.clone(),
            queue: queue.clone(),
        },
        dead: dead.clone(),
        clock: Arc::new(SystemClock),
    };
    Rig {
        webhook: Webhook::new(settings, ports),
        store,
        queue,
        dead,
    }
}

/// What a front end does with one request: admit its head, then ingest its body.
async fn request(
    webhook: &Webhook,
    method: &str,
    secret: Option<&[u8]>,
    body: &str,
) -> Result<Ingested, Refused> {
    let head = RequestHead {
        method,
        secret,
        declared_length: Some(body.len()),
    };
    webhook.admit(&head)?;
    webhook.ingest(Bytes::from(body.to_owned())).await
}

impl Rig {
    async fn post(&self, body: &str) -> Result<Ingested, Refused> {
        request(&self.webhook, "POST", Some(SECRET), body).await
    }

    fn nothing_written(&self) -> bool {
        self.store.is_empty() && self.queue.depth() == 0 && self.dead.letters().is_empty()
    }
}

fn message_key() -> RecordKey {
    let update_id = serde_json::from_str::<serde_json::Value>(MESSAGE).unwrap()["update_id"]
        .as_i64()
        .unwrap();
    RecordKey::new(BotId::new("demo").unwrap(), UpdateId(update_id))
}

#[tokio::test]
async fn a_valid_update_is_stored_queued_and_answered_200() {
    let rig = rig();
    assert_eq!(rig.post(MESSAGE).await.unwrap(), Ingested::Queued);
    assert_eq!(rig.queue.bodies(), [Bytes::from(MESSAGE)]);
    let record = rig.store.record(&message_key()).unwrap();
    assert_eq!(
        (record.status, record.payload),
        (Status::Received, Bytes::from(MESSAGE))
    );
}

#[tokio::test]
async fn a_duplicate_of_an_update_a_worker_has_taken_is_acknowledged_without_a_second_enqueue() {
    let rig = rig();
    rig.post(MESSAGE).await.unwrap();
    for status in [
        Status::Processing,
        Status::Retrying,
        Status::Done,
        Status::Dead,
    ] {
        rig.store.set_status(&message_key(), status);
        assert_eq!(
            rig.post(MESSAGE).await.unwrap(),
            Ingested::Duplicate(status)
        );
    }
    assert_eq!((rig.queue.sends(), rig.queue.depth()), (1, 1));
}

#[tokio::test]
async fn a_queue_failure_answers_5xx_and_the_retry_heals_the_received_record() {
    let rig = rig();
    rig.queue.outage.set(true);
    let refused = rig.post(MESSAGE).await.unwrap_err();
    assert_eq!(refused.status(), 503);
    assert_eq!(
        rig.store.record(&message_key()).unwrap().status,
        Status::Received
    );
    rig.queue.outage.set(false);
    // Telegram retries: the record is still RECEIVED, so the update is sent again.
    assert_eq!(rig.post(MESSAGE).await.unwrap(), Ingested::Requeued);
    assert_eq!(rig.queue.depth(), 1);
}

#[tokio::test]
async fn a_duplicate_still_received_is_sent_again_and_the_queue_drops_the_true_repeat() {
    let rig = rig();
    rig.post(MESSAGE).await.unwrap();
    // As if the first request died after its send, before marking the record QUEUED.
    rig.store.set_status(&message_key(), Status::Received);
    assert_eq!(rig.post(MESSAGE).await.unwrap(), Ingested::Requeued);
    assert_eq!(rig.queue.sends(), 2, "the webhook sends again");
    assert_eq!(
        rig.queue.depth(),
        1,
        "the dedup id keeps the resend from becoming a second message"
    );
}

#[tokio::test]
async fn a_store_failure_answers_5xx_and_enqueues_nothing() {
    let rig = rig();
    rig.store.outage.set(true);
    assert_eq!(rig.post(MESSAGE).await.unwrap_err().status(), 503);
    assert_eq!(rig.queue.depth(), 0);
}

#[tokio::test]
async fn a_wrong_or_missing_secret_is_401_and_writes_nothing() {
    let rig = rig();
    for secret in [
        Some(&b"tgq-example-secreT"[..]),
        Some(&b"tgq-example-secret-"[..]),
        Some(&b""[..]),
        None,
    ] {
        let refused = request(&rig.webhook, "POST", secret, MESSAGE)
            .await
            .unwrap_err();
        assert_eq!(refused.status(), 401);
    }
    assert!(rig.nothing_written());
}

#[tokio::test]
async fn a_method_other_than_post_is_405_and_writes_nothing() {
    let rig = rig();
    let refused = request(&rig.webhook, "GET", Some(SECRET), MESSAGE)
        .await
        .unwrap_err();
    assert_eq!(refused.status(), 405);
    assert!(rig.nothing_written());
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_and_writes_nothing() {
    let rig = rig();
    let body = format!(
        r#"{{"update_id":1,"message":{{"chat":{{"id":1}},"text":"{}"}}}}"#,
        "x".repeat(2000)
    );
    let refused = rig.post(&body).await.unwrap_err();
    assert_eq!(refused.status(), 413);
    assert!(rig.nothing_written());
}

#[tokio::test]
async fn poison_reaches_the_dead_letter_queue_with_its_raw_bytes_and_is_answered_200() {
    let rig = rig();
    for (body, reason) in [
        (
            include_str!("../../../../events/poison/not_json.txt"),
            "not JSON",
        ),
        (
            include_str!("../../../../events/poison/no_update_id.json"),
            "update_id is missing",
        ),
        (
            include_str!("../../../../events/poison/string_update_id.json"),
            "update_id is not an integer",
        ),
        (
            include_str!("../../../../events/poison/array.json"),
            "not a JSON object",
        ),
    ] {
        let outcome = rig.post(body).await.unwrap();
        assert!(matches!(outcome, Ingested::Poison(_)), "{outcome:?}");
        let letter = rig.dead.letters().pop().unwrap();
        assert_eq!(letter.body, Bytes::from(body.to_owned()));
        assert!(
            letter.error.contains(reason),
            "{} should mention {reason}",
            letter.error
        );
        assert_eq!(letter.reason, DeadReason::Poison);
    }
    assert!(rig.store.is_empty() && rig.queue.depth() == 0);
}

#[tokio::test]
async fn poison_is_answered_5xx_when_the_dead_letter_queue_is_down_so_telegram_retries() {
    let rig = rig();
    rig.dead.outage.set(true);
    let refused = rig.post("[1]").await.unwrap_err();
    assert_eq!(refused.status(), 503);
    assert!(rig.store.is_empty() && rig.queue.depth() == 0);
}

/// A store that holds the queue too, as local mode's embedded store does.
struct OneWrite {
    store: Arc<MemoryStore>,
    queue: Arc<MemoryQueue>,
    writes: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl tgq_core::ports::AtomicIngest for OneWrite {
    async fn insert_queued(
        &self,
        record: &tgq_core::record::UpdateRecord,
        now: tgq_core::record::Timestamp,
        message: &tgq_core::ports::OutgoingMessage,
    ) -> Result<tgq_core::ports::Inserted, tgq_core::PortError> {
        use tgq_core::ports::{Inserted, UpdateQueue, UpdateStore};
        self.writes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut queued = record.clone();
        queued.status = tgq_core::record::Status::Queued;
        let inserted = self.store.insert(&queued, now).await?;
        if inserted == Inserted::New {
            self.queue.enqueue(message).await?;
        }
        Ok(inserted)
    }
}

#[tokio::test]
async fn a_store_holding_the_queue_takes_a_new_update_in_one_write_and_a_repeat_in_none() {
    let rig = rig();
    let atomic = Arc::new(OneWrite {
        store: rig.store.clone(),
        queue: rig.queue.clone(),
        writes: Default::default(),
    });
    let webhook = Webhook::new(
        rig.webhook.settings().clone(),
        WebhookPorts {
            ingest: Ingest::Atomic(atomic.clone()),
            dead: rig.dead.clone(),
            clock: Arc::new(SystemClock),
        },
    );
    let post = || request(&webhook, "POST", Some(SECRET), MESSAGE);
    assert_eq!(post().await.unwrap(), Ingested::Queued);
    assert_eq!(post().await.unwrap(), Ingested::Duplicate(Status::Queued));
    assert_eq!(atomic.writes.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(rig.queue.sends(), 1, "the repeat is not sent again");
    assert_eq!(
        rig.store.record(&message_key()).unwrap().status,
        Status::Queued
    );
}

#[tokio::test]
async fn a_misconfigured_stack_answers_503_and_buries_nothing_until_it_is_fixed() {
    let rig = rig();
    for (store, queue) in [(true, false), (false, true)] {
        if store {
            rig.store.outage.fail(Fault::Misconfigured);
        }
        if queue {
            rig.queue.outage.fail(Fault::Misconfigured);
        }
        let refused = rig.post(MESSAGE).await.unwrap_err();
        assert!(
            matches!(
                refused,
                Refused::Unavailable(PortError::Misconfigured { .. })
            ),
            "{refused:?}"
        );
        assert_eq!(refused.status(), 503);
        assert!(
            rig.dead.letters().is_empty(),
            "a misconfiguration buried the update"
        );
        rig.store.outage.set(false);
        rig.queue.outage.set(false);
    }
    // The operator fixes the stack; Telegram's next retry goes through.
    assert_eq!(rig.post(MESSAGE).await.unwrap(), Ingested::Requeued);
    assert_eq!(rig.queue.depth(), 1);
    assert!(rig.dead.letters().is_empty());
}

#[tokio::test]
async fn an_update_too_large_for_the_store_is_dead_lettered_and_answered_200() {
    let rig = rig_with_limit(1024 * 1024);
    let body = format!(
        r#"{{"update_id":5,"message":{{"chat":{{"id":1}},"text":"{}"}}}}"#,
        "x".repeat(tgq_core::defaults::MAX_ITEM_BYTES)
    );
    assert_eq!(rig.post(&body).await.unwrap(), Ingested::TooLarge);
    let letters = rig.dead.letters();
    assert_eq!(letters.len(), 1);
    assert_eq!(
        (
            letters[0].reason,
            letters[0].update_id,
            letters[0].body.len()
        ),
        (DeadReason::TooLarge, Some(UpdateId(5)), body.len())
    );
    assert!(rig.store.is_empty() && rig.queue.depth() == 0);
}

#[tokio::test]
async fn a_new_update_costs_one_store_write_and_one_send_and_nothing_after_the_send() {
    let rig = rig();
    assert_eq!(rig.post(MESSAGE).await.unwrap(), Ingested::Queued);
    assert_eq!(
        rig.store.record(&message_key()).unwrap().status,
        Status::Received,
        "the record stays as the put left it until the worker claims it"
    );
    assert_eq!((rig.queue.sends(), rig.queue.depth()), (1, 1));
}

#[tokio::test]
async fn a_repeat_while_the_update_waits_in_the_queue_is_sent_again_and_the_queue_keeps_one() {
    let rig = rig();
    assert_eq!(rig.post(MESSAGE).await.unwrap(), Ingested::Queued);
    // The first request may have died between its put and its send: a repeat of an update that
    // no worker has claimed yet sends it again, and the queue's dedup id keeps one message.
    assert_eq!(rig.post(MESSAGE).await.unwrap(), Ingested::Requeued);
    assert_eq!((rig.queue.sends(), rig.queue.depth()), (2, 1));
}

#[tokio::test]
async fn every_outcome_is_answered_in_the_same_json_shape() {
    let queued = Answer::of(&Ok(Ingested::Queued));
    assert_eq!(
        (queued.status, queued.body.as_str()),
        (200, r#"{"ok":true,"result":"queued"}"#)
    );
    let unavailable = Answer::of(&Err(Refused::Unavailable(PortError::misconfigured(
        "DynamoDB PutItem",
        "AccessDeniedException",
    ))));
    assert_eq!(unavailable.status, 503);
    let body: serde_json::Value = serde_json::from_str(&unavailable.body).unwrap();
    assert_eq!(body["ok"], false);
    assert!(
        body["result"].as_str().unwrap().contains("misconfigured"),
        "{body}"
    );
}
