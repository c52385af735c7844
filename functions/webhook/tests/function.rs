//! The webhook function fed with the Function URL and HTTP API events in `events/webhook/`.

use std::sync::Arc;
use std::time::Duration;

use secrecy::SecretString;
use tgq_aws::webhook::{handle, AllowedSources, WebhookConfig};
use tgq_core::clock::SystemClock;
use tgq_core::config::Vars;
use tgq_core::ids::{BotId, RecordKey, UpdateId};
use tgq_core::ingest::{Ingest, WebhookPorts, Webhooks};
use tgq_core::registry::{BotEntry, Registry};
use tgq_memory::{MemoryBots, MemoryDeadLetters, MemoryQueue, MemoryStore};

struct Rig {
    webhook: Webhooks,
    store: Arc<MemoryStore>,
    queue: Arc<MemoryQueue>,
    dead: Arc<MemoryDeadLetters>,
}

fn rig() -> Rig {
    rig_with(
        &[
            ("TGQ_BOT_ID", "demo"),
            ("TGQ_WEBHOOK_SECRET", "tgq-example-secret"),
        ],
        None,
    )
}

/// The webhook configured from `vars` (besides the stack's resources), the registry read from
/// `bots` when there is one.
fn rig_with(vars: &[(&str, &str)], bots: Option<Arc<MemoryBots>>) -> Rig {
    let mut all = vec![
        ("TGQ_TABLE", "t"),
        ("TGQ_QUEUE_URL", "q"),
        ("TGQ_DLQ_URL", "d"),
    ];
    all.extend_from_slice(vars);
    if bots.is_some() {
        all.push(("TGQ_BOTS_PARAMETER_PREFIX", "/tgq/test/bots/"));
    }
    let config = WebhookConfig::from_vars(&Vars::from_pairs(all)).unwrap();
    let registry = bots.map(|bots| Arc::new(Registry::new(bots, config.registry_refresh)));
    let env_secret = config
        .env_bot
        .as_ref()
        .map(|_| SecretString::from("tgq-example-secret".to_owned()));
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
    let webhook = config.webhooks(ports, env_secret, registry);
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

/// The secret of the registry bot `shop` in `events/webhook/registry_bot.json`.
const SHOP_SECRET: &str = "shop-example-secret";

fn bot(id: &str, secret: &str) -> BotEntry {
    BotEntry {
        id: BotId::new(id).unwrap(),
        token: Some(SecretString::from(format!("{id}:TOKEN"))),
        secret: Some(SecretString::from(secret.to_owned())),
        handler: "echo".to_owned(),
        allowed_updates: Vec::new(),
    }
}

/// The environment's bot `demo` and a registry holding `bots`, read again after `refresh_secs`.
fn fleet_rig(bots: Vec<BotEntry>, refresh_secs: &str) -> (Rig, Arc<MemoryBots>) {
    let registry = Arc::new(MemoryBots::new(bots));
    let rig = rig_with(
        &[
            ("TGQ_BOT_ID", "demo"),
            ("TGQ_WEBHOOK_SECRET", "tgq-example-secret"),
            ("TGQ_REGISTRY_REFRESH_SECS", refresh_secs),
        ],
        Some(registry.clone()),
    );
    (rig, registry)
}

/// `event` sent to `path` with the secret `secret`.
fn to_path(event: &str, path: &str, secret: &str) -> String {
    let mut event: serde_json::Value = serde_json::from_str(event).unwrap();
    event["rawPath"] = path.into();
    event["requestContext"]["http"]["path"] = path.into();
    event["headers"]["x-telegram-bot-api-secret-token"] = secret.into();
    event.to_string()
}

fn key(bot: &str) -> RecordKey {
    RecordKey::new(BotId::new(bot).unwrap(), UpdateId(500000001))
}

#[tokio::test]
async fn a_registry_bot_s_update_is_stored_and_queued_under_its_own_id() {
    let (rig, _) = fleet_rig(vec![bot("shop", SHOP_SECRET)], "30");
    assert_eq!(invoke(&rig, event!("registry_bot.json")).await, 200);
    let record = rig.store.record(&key("shop")).expect("stored under shop");
    assert_eq!(record.group.as_str(), "111111111");
    assert!(
        rig.store.record(&key("demo")).is_none(),
        "not under the environment's bot"
    );
    assert_eq!(rig.queue.depth(), 1);
    // The same bot through the HTTP API's route POST /webhook/{bot_id}: a duplicate of it.
    assert_eq!(
        invoke(&rig, event!("http_api/registry_bot.json")).await,
        200
    );
    assert_eq!(rig.store.len(), 1);
}

#[tokio::test]
async fn the_environment_s_bot_keeps_every_path_but_a_registry_bot_s() {
    let (rig, _) = fleet_rig(vec![bot("shop", SHOP_SECRET)], "30");
    // The Function URL's root (what `tgq webhook set --stack` registers) and the HTTP API's /webhook.
    assert_eq!(invoke(&rig, event!("message.json")).await, 200);
    assert!(rig.store.record(&key("demo")).is_some());
    assert_eq!(invoke(&rig, event!("http_api/message.json")).await, 200);
    // /webhook/demo names the environment's bot too, with its own secret.
    let demo = to_path(
        event!("message.json"),
        "/webhook/demo",
        "tgq-example-secret",
    );
    assert_eq!(invoke(&rig, &demo).await, 200);
    assert_eq!(rig.store.len(), 1, "one update, three deliveries");
}

#[tokio::test]
async fn an_unknown_bot_id_is_404_and_nothing_is_written() {
    let (rig, _) = fleet_rig(vec![bot("shop", SHOP_SECRET)], "30");
    for path in ["/webhook/nobody", "/webhook/not%20an%20id", "/webhook/a/b"] {
        let event = to_path(event!("message.json"), path, SHOP_SECRET);
        assert_eq!(invoke(&rig, &event).await, 404, "{path}");
    }
    assert!(rig.store.is_empty());
    assert_eq!(rig.queue.sends(), 0);
    assert!(rig.dead.letters().is_empty());
}

#[tokio::test]
async fn a_secret_valid_for_another_bot_is_401_and_nothing_is_written() {
    let (rig, _) = fleet_rig(
        vec![bot("shop", SHOP_SECRET), bot("news", "news-secret")],
        "30",
    );
    // The environment's bot's secret on shop's path, news's secret on shop's path, shop's secret
    // on the environment's bot's path.
    let refused = [
        to_path(
            event!("message.json"),
            "/webhook/shop",
            "tgq-example-secret",
        ),
        to_path(event!("message.json"), "/webhook/shop", "news-secret"),
        to_path(event!("message.json"), "/", SHOP_SECRET),
    ];
    for event in refused {
        assert_eq!(invoke(&rig, &event).await, 401);
    }
    assert!(rig.store.is_empty());
    assert_eq!(rig.queue.sends(), 0);
}

#[tokio::test]
async fn without_an_environment_bot_every_path_but_a_registry_bot_s_is_404() {
    let registry = Arc::new(MemoryBots::new([bot("shop", SHOP_SECRET)]));
    let rig = rig_with(&[], Some(registry));
    assert_eq!(invoke(&rig, event!("message.json")).await, 404);
    assert_eq!(invoke(&rig, event!("http_api/message.json")).await, 404);
    assert!(rig.store.is_empty());
    assert_eq!(invoke(&rig, event!("registry_bot.json")).await, 200);
    assert!(rig.store.record(&key("shop")).is_some());
}

#[test]
fn a_webhook_needs_a_bot_of_its_own_or_a_registry() {
    let err = WebhookConfig::from_vars(&Vars::from_pairs([
        ("TGQ_TABLE", "t"),
        ("TGQ_QUEUE_URL", "q"),
        ("TGQ_DLQ_URL", "d"),
    ]))
    .unwrap_err();
    assert!(
        err.to_string().starts_with("TGQ_BOT_ID is not set"),
        "{err}"
    );
    assert!(
        err.to_string().contains("TGQ_BOTS_PARAMETER_PREFIX"),
        "{err}"
    );
}

#[tokio::test]
async fn a_registry_never_read_is_503_so_telegram_retries_never_404() {
    let (rig, registry) = fleet_rig(vec![bot("shop", SHOP_SECRET)], "30");
    registry.outage.set(true);
    assert_eq!(invoke(&rig, event!("registry_bot.json")).await, 503);
    assert!(rig.store.is_empty());
    assert_eq!(rig.queue.sends(), 0);
    // The environment's bot needs no registry.
    assert_eq!(invoke(&rig, event!("message.json")).await, 200);
    registry.outage.set(false);
    assert_eq!(invoke(&rig, event!("registry_bot.json")).await, 200);
    // Once read, a failing registry keeps serving what it read.
    registry.outage.set(true);
    let repeat = to_path(
        event!("duplicate_message.json"),
        "/webhook/shop",
        SHOP_SECRET,
    );
    assert_eq!(invoke(&rig, &repeat).await, 200);
}

#[tokio::test]
async fn a_bot_just_added_is_found_within_seconds_and_unknown_ids_read_the_registry_seldom() {
    let (rig, registry) = fleet_rig(Vec::new(), "30");
    // A flood of unknown ids: one read, then nothing more within the miss interval.
    for n in 0..50 {
        let event = to_path(event!("message.json"), &format!("/webhook/x{n}"), "s");
        assert_eq!(invoke(&rig, &event).await, 404);
    }
    assert_eq!(registry.reads(), 1);
    registry.put(bot("shop", SHOP_SECRET));
    // Long before the 30 s refresh, an id the last read did not know reads the registry again.
    tokio::time::sleep(tgq_core::defaults::REGISTRY_MISS_REREAD + Duration::from_millis(100)).await;
    assert_eq!(invoke(&rig, event!("registry_bot.json")).await, 200);
    assert_eq!(registry.reads(), 2);
}

#[tokio::test]
async fn a_changed_secret_and_a_removed_bot_are_picked_up_within_the_refresh_interval() {
    let (rig, registry) = fleet_rig(vec![bot("shop", "old-secret")], "1");
    assert_eq!(invoke(&rig, event!("registry_bot.json")).await, 401);
    registry.put(bot("shop", SHOP_SECRET));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(invoke(&rig, event!("registry_bot.json")).await, 200);
    let old = to_path(event!("message.json"), "/webhook/shop", "old-secret");
    assert_eq!(invoke(&rig, &old).await, 401);
    registry.remove(&BotId::new("shop").unwrap());
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let repeat = to_path(
        event!("duplicate_message.json"),
        "/webhook/shop",
        SHOP_SECRET,
    );
    assert_eq!(invoke(&rig, &repeat).await, 404);
}
