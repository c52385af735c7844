//! What the AWS adapters do beyond the conformance suite: the DynamoDB item layout, re-creating an
//! expired record, long polls, paging the dead-letter queue, and SSM secrets. Runs on moto server.

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_ssm::types::ParameterType;
use bytes::Bytes;
use secrecy::{ExposeSecret, SecretString};
use tgq_aws::resolve_secret;
use tgq_core::clock::{Clock, SystemClock};
use tgq_core::config::SecretSource;
use tgq_core::dead::{DeadReason, FailureClass};
use tgq_core::ids::{BotId, GroupKey, RecordKey, UpdateId};
use tgq_core::ports::{
    Claim, ClaimRequest, Claimed, DeadLetter, DeadLetterReader, DeadLetters, Lease, QueueConsumer,
    RecordReader, UpdateLedger, UpdateStore,
};
use tgq_core::record::{
    ActionRecord, ActionResult, ActionState, Delivery, Status, Timestamp, UpdateRecord,
};
use tgq_core::PortError;

use common::emulator;

const DAY: Duration = Duration::from_secs(86_400);

fn bot() -> BotId {
    BotId::new("aws").expect("valid id")
}

fn fresh_key() -> RecordKey {
    static NEXT: AtomicI64 = AtomicI64::new(0);
    let base = i64::try_from(SystemClock.now().0).unwrap_or(0) * 1000;
    RecordKey::new(bot(), UpdateId(base + NEXT.fetch_add(1, Ordering::SeqCst)))
}

fn claim_request(key: &RecordKey, payload: &'static str, now: Timestamp) -> ClaimRequest {
    ClaimRequest {
        key: key.clone(),
        group: GroupKey::new("1"),
        payload: Bytes::from_static(payload.as_bytes()),
        now,
        lease_until: now.plus(Duration::from_secs(30)),
        expires_at: now.plus(DAY),
    }
}

#[tokio::test]
async fn the_ttl_attribute_holds_epoch_seconds_and_the_payload_raw_bytes() {
    let e = emulator().await;
    let now = SystemClock.now();
    let record = UpdateRecord::received(
        fresh_key(),
        GroupKey::new("1"),
        Bytes::from_static(b"{\"update_id\": 1}"),
        now,
        DAY,
    );
    e.store.insert(&record, now).await.unwrap();
    let item = e
        .dynamodb
        .get_item()
        .table_name(&e.table)
        .key("pk", AttributeValue::S(record.key.pk()))
        .send()
        .await
        .unwrap()
        .item
        .expect("stored");
    assert_eq!(
        item["expires_at"],
        AttributeValue::N(now.plus(DAY).as_secs().to_string())
    );
    assert_eq!(
        item["payload"].as_b().unwrap().as_ref(),
        b"{\"update_id\": 1}"
    );
    assert_eq!(item["status"], AttributeValue::S("RECEIVED".into()));
}

#[tokio::test]
async fn an_expired_record_is_claimed_afresh_without_its_old_runs_or_actions() {
    let e = emulator().await;
    let now = SystemClock.now();
    let key = fresh_key();
    let mut old = UpdateRecord::received(
        key.clone(),
        GroupKey::new("1"),
        Bytes::from_static(b"old"),
        Timestamp(now.0 - 9 * DAY.as_millis() as u64),
        DAY,
    );
    old.status = Status::Retrying;
    old.attempts = 4;
    old.actions = BTreeMap::from([(
        1,
        ActionRecord {
            method: "sendMessage".into(),
            delivery: Delivery::AtLeastOnce,
            state: ActionState::Succeeded(ActionResult::True),
        },
    )]);
    e.store.insert(&old, now).await.unwrap();

    let claim = e
        .store
        .claim(&claim_request(&key, "new", now))
        .await
        .unwrap();
    assert_eq!(
        claim,
        Claim::Run(Claimed {
            lease: Lease {
                key: key.clone(),
                token: 1
            },
            actions: BTreeMap::new(),
            throttled: 0,
            first_attempt_at: now,
            resumed: false,
            received_at: now,
            state: None,
        })
    );
    let stored = e.store.get(&key, now).await.unwrap().expect("re-created");
    assert_eq!(
        (
            stored.status,
            stored.attempts,
            stored.payload,
            stored.actions.len(),
            stored.expires_at
        ),
        (
            Status::Processing,
            1,
            Bytes::from_static(b"new"),
            0,
            Timestamp(now.plus(DAY).as_secs() * 1000)
        )
    );
}

#[tokio::test]
async fn a_claim_on_a_stored_record_keeps_its_payload_and_expiry() {
    let e = emulator().await;
    let now = SystemClock.now();
    let record = UpdateRecord::received(
        fresh_key(),
        GroupKey::new("1"),
        Bytes::from_static(b"as received"),
        now,
        2 * DAY,
    );
    e.store.insert(&record, now).await.unwrap();
    e.store
        .claim(&claim_request(&record.key, "from the queue", now))
        .await
        .unwrap();
    let stored = e.store.get(&record.key, now).await.unwrap().unwrap();
    assert_eq!(
        (stored.payload, stored.expires_at, stored.received_at),
        (
            record.payload,
            Timestamp(record.expires_at.as_secs() * 1000),
            now
        )
    );
}

#[tokio::test]
async fn a_run_writing_to_a_record_it_holds_no_lease_on_is_fenced() {
    let e = emulator().await;
    let lease = Lease {
        key: fresh_key(),
        token: 1,
    };
    let err = e
        .store
        .settle(&lease, &tgq_core::ports::Settlement::DONE, &[])
        .await
        .unwrap_err();
    assert!(matches!(err, PortError::Fenced { .. }), "{err:?}");
}

#[tokio::test]
async fn a_long_poll_may_wait_longer_than_one_attempt_is_allowed() {
    let e = emulator().await;
    let started = Instant::now();
    let got = e
        .queue
        .receive(10, Duration::from_secs(30), Duration::from_secs(3))
        .await
        .expect("a 3 s long poll must not time out");
    assert!(got.is_empty());
    assert!(
        started.elapsed() >= Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
}

fn letter(n: i64, body: &[u8]) -> DeadLetter {
    DeadLetter {
        bot_id: bot(),
        update_id: Some(UpdateId(n)),
        group: Some(GroupKey::new(format!("chat-{n}"))),
        body: Bytes::copy_from_slice(body),
        reason: DeadReason::BudgetSpent,
        error_class: FailureClass::Transient,
        error: "Telegram answered 502".into(),
        attempts: 8,
    }
}

#[tokio::test]
async fn peek_pages_past_ten_letters_oldest_first_and_leaves_them_on_the_queue() {
    let e = emulator().await;
    let sent: Vec<DeadLetter> = (1..=12)
        .map(|n| letter(n, format!(r#"{{"update_id":{n}}}"#).as_bytes()))
        .collect();
    for l in &sent {
        e.dlq.dead_letter(l).await.unwrap();
    }
    assert_eq!(e.dlq.peek(12).await.unwrap(), sent);
    assert_eq!(
        e.dlq.peek(12).await.unwrap(),
        sent,
        "a second peek sees the same letters"
    );
    assert_eq!(e.dlq.peek(3).await.unwrap(), sent[..3]);
}

#[tokio::test]
async fn a_poison_body_that_is_not_text_is_dead_lettered_and_read_back_exactly() {
    let e = emulator().await;
    let poison = DeadLetter {
        update_id: None,
        group: None,
        reason: DeadReason::Poison,
        error_class: FailureClass::Poison,
        attempts: 0,
        ..letter(0, b"\xff\xfe\x00 not an update")
    };
    e.dlq.dead_letter(&poison).await.unwrap();
    let received = e
        .sqs
        .receive_message()
        .queue_url(&e.dlq_url)
        .message_attribute_names("All")
        .visibility_timeout(0)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    let encoding = received[0]
        .message_attributes
        .as_ref()
        .and_then(|a| a.get("body_encoding"))
        .and_then(|v| v.string_value());
    assert_eq!(encoding, Some("base64"));
    assert_eq!(e.dlq.peek(10).await.unwrap(), vec![poison]);
}

#[tokio::test]
async fn a_secure_string_parameter_is_read_decrypted() {
    let e = emulator().await;
    let name = format!("/tgq/test/{}", fresh_key().update_id);
    e.ssm
        .put_parameter()
        .name(&name)
        .value("123:token")
        .r#type(ParameterType::SecureString)
        .send()
        .await
        .unwrap();
    let secret = resolve_secret(&e.ssm, SecretSource::Parameter(name))
        .await
        .unwrap();
    assert_eq!(secret.expose_secret(), "123:token");

    let given = resolve_secret(&e.ssm, SecretSource::Value(SecretString::from("direct")))
        .await
        .unwrap();
    assert_eq!(given.expose_secret(), "direct");
}

#[tokio::test]
async fn a_missing_parameter_is_named_as_a_misconfiguration() {
    let e = emulator().await;
    let err = resolve_secret(&e.ssm, SecretSource::Parameter("/tgq/absent".into()))
        .await
        .unwrap_err();
    assert_eq!(err.name, "/tgq/absent");
    assert!(
        matches!(err.source, PortError::Misconfigured { .. }),
        "{:?}",
        err.source
    );
}

/// A registry prefix no other test run uses.
fn fresh_registry(e: &common::Emulator) -> tgq_aws::SsmRegistry {
    let prefix = format!("/tgq/test-{}/bots/", fresh_key().update_id);
    tgq_aws::SsmRegistry::new(
        e.ssm.clone(),
        tgq_core::registry::Layout::new(&prefix).expect("a valid prefix"),
    )
}

fn registry_entry(id: &str, token: Option<&str>) -> tgq_core::registry::BotEntry {
    tgq_core::registry::BotEntry {
        id: BotId::new(id).expect("valid id"),
        token: token.map(|t| SecretString::from(t.to_owned())),
        secret: Some(SecretString::from(format!("secret-of-{id}"))),
        handler: "echo".to_owned(),
        allowed_updates: vec![teloxide_core::types::AllowedUpdate::CallbackQuery],
    }
}

#[tokio::test]
async fn bots_put_in_the_ssm_registry_are_read_back_decrypted_and_removed_whole() {
    use tgq_core::registry::{BotSource as _, Field};
    let e = emulator().await;
    let registry = fresh_registry(&e);
    registry
        .put(&registry_entry("shop", Some("1:abc")))
        .await
        .unwrap();
    registry
        .put(&registry_entry("news", Some("2:def")))
        .await
        .unwrap();
    let token = e
        .ssm
        .get_parameter()
        .name(
            registry
                .layout()
                .parameter(&BotId::new("shop").unwrap(), Field::Token),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        token.parameter.and_then(|p| p.r#type),
        Some(ParameterType::SecureString),
        "the token is a SecureString"
    );

    let bots = registry.load().await.unwrap();
    let ids: Vec<&str> = bots.iter().map(|bot| bot.id.as_str()).collect();
    assert_eq!(ids, ["news", "shop"]);
    let shop = &bots[1];
    assert_eq!(shop.token.as_ref().unwrap().expose_secret(), "1:abc");
    assert_eq!(
        shop.secret.as_ref().unwrap().expose_secret(),
        "secret-of-shop"
    );
    assert_eq!(shop.handler, "echo");
    assert_eq!(
        shop.allowed_updates,
        vec![teloxide_core::types::AllowedUpdate::CallbackQuery]
    );

    assert!(
        registry
            .put(&registry_entry("shop", Some("9:zzz")))
            .await
            .is_err(),
        "a bot is never overwritten"
    );
    let shop_id = BotId::new("shop").unwrap();
    assert!(registry.exists(&shop_id).await.unwrap());
    registry.remove(&shop_id).await.unwrap();
    assert!(!registry.exists(&shop_id).await.unwrap());
    registry
        .remove(&shop_id)
        .await
        .expect("removing twice is no error");
    let left: Vec<String> = registry
        .load()
        .await
        .unwrap()
        .iter()
        .map(|bot| bot.id.to_string())
        .collect();
    assert_eq!(left, ["news"]);
}

#[tokio::test]
async fn more_bots_than_one_page_of_parameters_are_all_read() {
    use tgq_core::registry::BotSource as _;
    let e = emulator().await;
    let registry = fresh_registry(&e);
    // Three or four parameters per bot: twelve bots are several of SSM's pages of ten.
    for n in 0..12 {
        registry
            .put(&registry_entry(&format!("bot{n:02}"), Some("1:a")))
            .await
            .unwrap();
    }
    assert_eq!(registry.load().await.unwrap().len(), 12);
}

#[tokio::test]
async fn the_webhook_s_reading_of_the_registry_has_every_bot_but_never_a_token() {
    use tgq_core::registry::BotSource as _;
    let e = emulator().await;
    let registry = fresh_registry(&e);
    // Enough bots for several pages of names and several GetParameters calls of ten.
    for n in 0..18 {
        registry
            .put(&registry_entry(
                &format!("bot{n:02}"),
                Some("1:secret-token"),
            ))
            .await
            .unwrap();
    }
    let webhook = tgq_aws::SsmRegistry::without_tokens(e.ssm.clone(), registry.layout().clone());
    let bots = webhook.load().await.unwrap();
    assert_eq!(bots.len(), 18);
    for bot in &bots {
        assert!(bot.token.is_none(), "{} came with its token", bot.id);
        assert_eq!(
            bot.secret.as_ref().unwrap().expose_secret(),
            format!("secret-of-{}", bot.id)
        );
        assert_eq!(bot.handler, "echo");
        assert_eq!(
            bot.allowed_updates,
            vec![teloxide_core::types::AllowedUpdate::CallbackQuery]
        );
    }
    assert!(
        registry.load().await.unwrap()[0].token.is_some(),
        "`tgq bots`' reading has the tokens"
    );
}

#[tokio::test]
async fn the_worker_s_reading_of_the_registry_has_every_bot_s_token_but_never_a_secret() {
    use tgq_core::registry::BotSource as _;
    let e = emulator().await;
    let registry = fresh_registry(&e);
    for n in 0..12 {
        registry
            .put(&registry_entry(
                &format!("bot{n:02}"),
                Some("1:secret-token"),
            ))
            .await
            .unwrap();
    }
    let worker = tgq_aws::SsmRegistry::without_secrets(e.ssm.clone(), registry.layout().clone());
    let bots = worker.load().await.unwrap();
    assert_eq!(bots.len(), 12, "a bot needs no secret to be run");
    for bot in &bots {
        assert!(
            bot.secret.is_none(),
            "{} came with its webhook secret",
            bot.id
        );
        assert_eq!(
            bot.token.as_ref().unwrap().expose_secret(),
            "1:secret-token"
        );
        assert_eq!(bot.handler, "echo");
    }
}

/// A broadcast's items carry `expires_at` for the table's TTL: a recipient `KEEP_ENDED` after it
/// got its outcome (never while it can still be sent to), the job `KEEP_ENDED` after it ended,
/// a handler's start marker `KEEP_ENDED` after it was made. A retry takes the expiry off what it
/// puts back and off the job it runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcast_s_items_expire_a_stated_time_after_their_outcome_or_end() {
    use tgq_core::broadcast::{
        BroadcastId, BroadcastSpec, BroadcastStore, Change, Outcome, Retried, KEEP_ENDED,
    };
    let e = emulator().await;
    let store = tgq_aws::DynamoBroadcasts::new(e.dynamodb.clone(), e.table.clone());
    let now = SystemClock.now();
    let origin = format!("update:aws:{}:ttl", now.0);
    let spec = BroadcastSpec::standard(
        bot(),
        "sendMessage",
        serde_json::json!({"text": "news"}),
        &origin,
    );
    let id: BroadcastId = store
        .create(&spec, &[1, 2, 3], now)
        .await
        .unwrap()
        .job()
        .id
        .clone();
    let expires = |pk: String| {
        let (dynamodb, table) = (e.dynamodb.clone(), e.table.clone());
        async move {
            let item = dynamodb
                .get_item()
                .table_name(table)
                .key("pk", AttributeValue::S(pk.clone()))
                .consistent_read(true)
                .send()
                .await
                .unwrap()
                .item
                .unwrap_or_else(|| panic!("{pk} is stored"));
            item.get("expires_at")
                .map(|v| v.as_n().unwrap().parse::<u64>().unwrap())
        }
    };
    let recipient = |index: u64| format!("broadcast#{}#r#{index:010}", id.0);
    let job = format!("broadcast#{}", id.0);
    let kept = now.plus(KEEP_ENDED).as_secs();

    store.begin(&id, 0).await.unwrap();
    let sent = Outcome::Sent {
        message_id: 7,
        migrated_to: None,
    };
    store.settle(&id, 0, sent, now).await.unwrap();
    store.begin(&id, 1).await.unwrap();
    let failed = Outcome::Failed {
        error: "chat not found".into(),
    };
    store.settle(&id, 1, failed, now).await.unwrap();
    assert_eq!(expires(recipient(0)).await, Some(kept), "sent");
    assert_eq!(expires(recipient(1)).await, Some(kept), "failed");
    assert_eq!(
        expires(recipient(2)).await,
        None,
        "pending: never while it can be sent"
    );
    assert_eq!(expires(job.clone()).await, None, "running");
    assert_eq!(
        expires(format!("broadcast#origin#{origin}")).await,
        Some(kept),
        "the start's marker"
    );

    let ended = now.plus(Duration::from_secs(60));
    store.change(&id, Change::Finish, ended).await.unwrap();
    assert_eq!(
        expires(job.clone()).await,
        Some(ended.plus(KEEP_ENDED).as_secs())
    );
    let retried = store.retry(&id, false, ended).await.unwrap();
    assert!(
        matches!(retried, Retried::Retried { recipients: 1, .. }),
        "{retried:?}"
    );
    assert_eq!(expires(job).await, None, "running again");
    assert_eq!(expires(recipient(1)).await, None, "back on the list");
    assert_eq!(expires(recipient(0)).await, Some(kept), "still sent");
}

/// A cancelled job keeps nothing it will never send: its chain of steps deletes the recipients
/// that were never sent to, and the audience a handler listed that was not written yet; the
/// recipients with an outcome stay until they expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_broadcast_s_steps_delete_what_it_will_never_send() {
    use std::sync::Arc;
    use tgq_core::broadcast::chain::{ChainNext, ChainStep, NoSends};
    use tgq_core::broadcast::{
        start_expanding, Audience, BroadcastId, BroadcastRunner, BroadcastSpec, BroadcastStore,
        Change, JobState, Outcome,
    };
    use tgq_core::pacer::{Pacer, RateLimits};
    let e = emulator().await;
    let store = Arc::new(tgq_aws::DynamoBroadcasts::new(
        e.dynamodb.clone(),
        e.table.clone(),
    ));
    let now = SystemClock.now();
    let spec = |origin: String| {
        BroadcastSpec::standard(
            bot(),
            "sendMessage",
            serde_json::json!({"text": "x"}),
            &origin,
        )
    };
    let stored = |pk: String| {
        let (dynamodb, table) = (e.dynamodb.clone(), e.table.clone());
        async move {
            dynamodb
                .get_item()
                .table_name(table)
                .key("pk", AttributeValue::S(pk))
                .consistent_read(true)
                .send()
                .await
                .unwrap()
                .item
                .is_some()
        }
    };
    let runner = BroadcastRunner {
        store: store.clone(),
        budget: Arc::new(Pacer::new(RateLimits::UNLIMITED)),
        bot_rate: None,
        clock: Arc::new(SystemClock),
        retry: tgq_core::policy::RetryPolicy::default(),
    };
    let run_cancelled = |id: BroadcastId| {
        let runner = &runner;
        async move {
            let mut step = ChainStep::start(&id);
            for n in 0..20 {
                let until = SystemClock.now().plus(Duration::from_secs(10));
                let api: Arc<dyn tgq_core::telegram::BotApi> = Arc::new(NoSends);
                match runner
                    .run_step(&step, &format!("m{n}"), 4, api, until)
                    .await
                    .unwrap()
                {
                    ChainNext::End(state) => return state,
                    ChainNext::Queue(next) => step = next,
                    other => panic!("{other:?}"),
                }
            }
            panic!("the cancelled job's chain ends");
        }
    };

    let id = store
        .create(&spec("cli".into()), &(1..=10).collect::<Vec<_>>(), now)
        .await
        .unwrap()
        .job()
        .id
        .clone();
    store.begin(&id, 0).await.unwrap();
    let sent = Outcome::Sent {
        message_id: 1,
        migrated_to: None,
    };
    store.settle(&id, 0, sent, now).await.unwrap();
    store.change(&id, Change::Pause, now).await.unwrap();
    store.change(&id, Change::Cancel, now).await.unwrap();
    assert_eq!(run_cancelled(id.clone()).await, JobState::Cancelled);
    let recipient = |index: u64| format!("broadcast#{}#r#{index:010}", id.0);
    assert!(
        stored(recipient(0)).await,
        "the sent one stays until it expires"
    );
    for index in 1..10 {
        assert!(
            !stored(recipient(index)).await,
            "recipient {index} never sent to"
        );
    }

    let listed = Audience::Chats {
        chats: (1..=50_000).collect(),
    };
    let origin = format!("update:aws:{}:cancelled", now.0);
    let created = start_expanding(&*store, &spec(origin), &listed, now)
        .await
        .unwrap();
    let id = created.job().id.clone();
    assert!(stored(format!("broadcast#{}#a#1", id.0)).await, "two parts");
    store.change(&id, Change::Cancel, now).await.unwrap();
    assert_eq!(run_cancelled(id.clone()).await, JobState::Cancelled);
    for part in 0..2 {
        assert!(
            !stored(format!("broadcast#{}#a#{part}", id.0)).await,
            "part {part}"
        );
    }
    let job = store.job(&id).await.unwrap().unwrap();
    assert!(!job.expanding, "its audience is never written");
}
