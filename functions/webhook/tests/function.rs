//! The webhook function fed with the Function URL and HTTP API events in `events/webhook/`.

use std::sync::Arc;

use secrecy::SecretString;
use tgq_core::clock::SystemClock;
use tgq_core::config::Vars;
use tgq_core::ingest::{Ingest, Webhook, WebhookPorts};
use tgq_memory::{MemoryDeadLetters, MemoryQueue, MemoryStore};
use tgq_webhook::{handle, AllowedSources, WebhookConfig};

struct Rig {
    webhook: Webhook,
    store: Arc<MemoryStore>,
    queue: Arc<MemoryQueue>,
    dead: Arc<MemoryDeadLetters>,
}

fn rig() -> Rig {
    let vars = Vars::from_pairs([
        ("TGQ_BOT_ID", "demo"),
        ("TGQ_WEBHOOK_SECRET", "tgq-example-secret"),
        ("TGQ_TABLE", "t"),
        ("TGQ_QUEUE_URL", "q"),
        ("TGQ_DLQ_URL", "d"),
    ]);
    let config = WebhookConfig::from_vars(&vars).unwrap();
    let store = Arc::new(MemoryStore::new());
    let queue = Arc::new(MemoryQueue::new(Arc::new(SystemClock)));
    let dead = Arc::new(MemoryDeadLetters::new());
    let ports = WebhookPorts {
        ingest: Ingest::PutThenSend {
            store: store.clone(),
            queue: queue.clone(),
        },
        dead: dead.clone(),
        clock: Arc::new(SystemClock),
    };
    let webhook = Webhook::new(
        config.settings(SecretString::from("tgq-example-secret".to_owned())),
        ports,
    );
    Rig {
        webhook,
        store,
        queue,
        dead,
    }
}

async fn invoke(rig: &Rig, event: &str) -> u16 {
    let request =
        lambda_http::request::from_str(event).expect("the fixture is a lambda_http event");
    handle(&rig.webhook, &AllowedSources::default(), request)
        .await
        .unwrap()
        .status()
        .as_u16()
}

macro_rules! event {
    ($name:literal) => {
        include_str!(concat!("../../../events/webhook/", $name))
    };
}

#[tokio::test]
async fn each_update_kind_from_a_function_url_is_stored_and_queued() {
    let rig = rig();
    for event in [
        event!("message.json"),
        event!("edited_message.json"),
        event!("channel_post.json"),
        event!("callback_query.json"),
        event!("inline_query.json"),
        event!("my_chat_member.json"),
    ] {
        assert_eq!(invoke(&rig, event).await, 200);
    }
    assert_eq!(rig.queue.depth(), 6);
    assert_eq!(rig.store.len(), 6);
}

#[tokio::test]
async fn an_http_api_event_is_handled_like_a_function_url_event() {
    let rig = rig();
    assert_eq!(invoke(&rig, event!("http_api/message.json")).await, 200);
    assert_eq!(rig.queue.depth(), 1);
}

#[tokio::test]
async fn a_duplicate_delivery_is_answered_200_and_the_queue_keeps_one_message() {
    let rig = rig();
    assert_eq!(invoke(&rig, event!("message.json")).await, 200);
    // No worker has claimed it yet: the repeat is sent again, and the queue's dedup id drops it.
    assert_eq!(invoke(&rig, event!("duplicate_message.json")).await, 200);
    assert_eq!((rig.queue.sends(), rig.queue.depth()), (2, 1));
}

#[tokio::test]
async fn refusals_answer_their_status_and_write_nothing() {
    let rig = rig();
    assert_eq!(invoke(&rig, event!("wrong_secret.json")).await, 401);
    assert_eq!(invoke(&rig, event!("missing_secret.json")).await, 401);
    assert_eq!(invoke(&rig, event!("get_method.json")).await, 405);
    assert_eq!(invoke(&rig, event!("oversized.json")).await, 413);
    assert!(rig.store.is_empty());
    assert_eq!(rig.queue.sends(), 0);
    assert!(rig.dead.letters().is_empty());
}

#[tokio::test]
async fn a_poison_body_is_dead_lettered_and_answered_200() {
    let rig = rig();
    assert_eq!(invoke(&rig, event!("poison.json")).await, 200);
    assert_eq!(rig.dead.letters().len(), 1);
    assert!(rig.store.is_empty());
}

#[tokio::test]
async fn an_unavailable_queue_is_answered_503_so_telegram_retries() {
    let rig = rig();
    rig.queue.outage.set(true);
    assert_eq!(invoke(&rig, event!("message.json")).await, 503);
    rig.queue.outage.set(false);
    assert_eq!(invoke(&rig, event!("message.json")).await, 200);
    assert_eq!(rig.queue.depth(), 1);
}

#[test]
fn a_missing_variable_is_named_in_the_config_error() {
    let err = WebhookConfig::from_vars(&Vars::from_pairs([
        ("TGQ_BOT_ID", "demo"),
        ("TGQ_WEBHOOK_SECRET", "s"),
    ]))
    .unwrap_err();
    assert!(err.to_string().starts_with("TGQ_TABLE is not set"), "{err}");
}

/// The Function URL event `message.json` as if it came from `source`.
fn from_source(source: &str) -> lambda_http::Request {
    let event = event!("message.json").replace("149.154.167.220", source);
    lambda_http::request::from_str(&event).expect("the fixture is a lambda_http event")
}

#[tokio::test]
async fn with_allowed_source_ranges_any_other_source_is_answered_403_and_nothing_is_written() {
    let rig = rig();
    let vars = Vars::from_pairs([(
        "TGQ_ALLOWED_SOURCE_CIDRS",
        "149.154.160.0/20, 91.108.4.0/22",
    )]);
    let telegram = AllowedSources::from_vars(&vars).unwrap();
    let refused = handle(&rig.webhook, &telegram, from_source("203.0.113.7"))
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 403);
    assert!(
        rig.store.is_empty(),
        "nothing is written for a refused source"
    );
    let accepted = handle(&rig.webhook, &telegram, from_source("149.154.167.220"))
        .await
        .unwrap();
    assert_eq!(accepted.status().as_u16(), 200);
    let malformed = Vars::from_pairs([("TGQ_ALLOWED_SOURCE_CIDRS", "149.154.160.0/40")]);
    assert!(AllowedSources::from_vars(&malformed).is_err());
}
