//! Timers in the embedded store: kept until due, then queued in their chat once, across restarts.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tgq_core::clock::{Clock, ManualClock};
use tgq_core::ids::{BotId, GroupKey, RecordKey, StateKey, UpdateId};
use tgq_core::ports::{
    Claim, ClaimRequest, OutgoingMessage, QueueConsumer, Settlement, TimerScheduler, UpdateLedger,
    UpdateQueue,
};
use tgq_core::record::Timestamp;
use tgq_core::state::StateWrite;
use tgq_core::timer::{timer_id, ChatTime, Pending, TimerMessage};
use tgq_embedded::{Cancelled, EmbeddedStore, StoreOptions};

const START: Timestamp = Timestamp(1_700_000_000_000);
const MINUTE: Duration = Duration::from_secs(60);

fn open(dir: &std::path::Path, clock: &ManualClock) -> Arc<EmbeddedStore> {
    let options = StoreOptions {
        ttl: Duration::from_secs(86_400),
        max_receive_count: 30,
        clock: Arc::new(clock.clone()),
        ..StoreOptions::default()
    };
    EmbeddedStore::open(dir, options).expect("open the store")
}

fn bot() -> BotId {
    BotId::new("demo").unwrap()
}

fn timer(chat: i64, key: &str, due: Timestamp) -> TimerMessage {
    let group = GroupKey::new(chat.to_string());
    TimerMessage {
        bot_id: bot(),
        update_id: timer_id(&bot(), &group, key, UpdateId(1)),
        group,
        chat_id: chat,
        key: key.into(),
        due,
        payload: serde_json::json!({"n": chat}),
    }
}

async fn receive(store: &EmbeddedStore) -> Vec<tgq_core::ports::QueueRecord> {
    store.receive(10, MINUTE, Duration::ZERO).await.unwrap()
}

#[tokio::test]
async fn a_timer_is_kept_until_due_then_queued_in_its_chat_once_though_handed_over_twice() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let store = open(dir.path(), &clock);
    let due = START.plus(MINUTE);
    let remind = timer(42, "remind", due);
    store
        .schedule(std::slice::from_ref(&remind), START)
        .await
        .unwrap();
    store
        .schedule(std::slice::from_ref(&remind), START)
        .await
        .unwrap();
    assert_eq!(store.next_timer_due().unwrap(), Some(due));
    assert_eq!(store.fire_due_timers(START, 100).await.unwrap(), 0);

    assert_eq!(store.fire_due_timers(due, 100).await.unwrap(), 1);
    let delivered = receive(&store).await;
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].body, remind.body());
    assert_eq!(delivered[0].group_id.as_str(), "demo:42");
    assert_eq!(
        store.fire_due_timers(due.plus(MINUTE), 100).await.unwrap(),
        0
    );
    assert_eq!(store.next_timer_due().unwrap(), None);
}

#[tokio::test]
async fn a_timer_due_while_the_store_was_closed_is_queued_at_the_next_open_and_backed_up() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let store = open(dir.path(), &clock);
    store
        .schedule(&[timer(7, "later", START.plus(MINUTE))], START)
        .await
        .unwrap();
    let copy = tempfile::tempdir().unwrap();
    store
        .backup_to(&copy.path().join("copy.redb"), false)
        .unwrap();
    drop(store);

    clock.advance(MINUTE * 60);
    let store = open(dir.path(), &clock);
    assert_eq!(store.fire_due_timers(clock.now(), 100).await.unwrap(), 1);
    assert_eq!(receive(&store).await.len(), 1);

    let restored = tempfile::tempdir().unwrap();
    EmbeddedStore::restore(
        restored.path(),
        &copy.path().join("copy.redb"),
        &restored.path().join("old.redb"),
    )
    .unwrap();
    let from_backup = open(restored.path(), &clock);
    assert_eq!(
        from_backup.next_timer_due().unwrap(),
        Some(START.plus(MINUTE)),
        "the backup holds the timer"
    );
}

#[tokio::test]
async fn a_due_timer_waits_behind_its_chat_s_message_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let store = open(dir.path(), &clock);
    let key = RecordKey::new(bot(), UpdateId(5));
    let body = Bytes::from_static(br#"{"update_id":5,"message":{"chat":{"id":42}}}"#);
    store
        .enqueue(&OutgoingMessage::for_update(
            &key,
            &GroupKey::new("42"),
            body,
        ))
        .await
        .unwrap();
    assert_eq!(
        receive(&store).await.len(),
        1,
        "the chat's update is in flight"
    );
    store
        .schedule(&[timer(42, "k", START), timer(43, "k", START)], START)
        .await
        .unwrap();
    assert_eq!(store.fire_due_timers(START, 100).await.unwrap(), 2);
    let next = receive(&store).await;
    let groups: Vec<&str> = next.iter().map(|m| m.group_id.as_str()).collect();
    assert_eq!(groups, ["demo:43"], "chat 42's timer waits for its update");
}

#[tokio::test]
async fn a_pending_timer_is_listed_and_a_cancel_removes_it_and_moves_the_state_s_version() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let store = open(dir.path(), &clock);
    let group = GroupKey::new("42");
    let key = RecordKey::new(bot(), UpdateId(9));
    let claim = ClaimRequest {
        key: key.clone(),
        group: group.clone(),
        payload: Bytes::from_static(br#"{"update_id":9,"message":{"chat":{"id":42}}}"#),
        now: START,
        lease_until: START.plus(MINUTE),
        expires_at: START.plus(MINUTE * 60),
    };
    let Claim::Run(claimed) = store.claim(&claim).await.unwrap() else {
        panic!("the claim runs");
    };
    let mut time = ChatTime::default();
    time.timers.insert(
        "remind".into(),
        Pending {
            id: -3,
            due: START.plus(MINUTE).0,
        },
    );
    let done = Settlement::Done {
        state: Some(StateWrite {
            key: StateKey::new(bot(), group.clone()),
            format: "t/v1".into(),
            json: "{}".into(),
            read_version: 0,
            time: time.encode(),
        }),
        charges: Vec::new(),
    };
    store.settle(&claimed.lease, &done, &[]).await.unwrap();

    let pending = store.pending_timers(10).unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (pending[0].chat.as_str(), pending[0].key.as_str()),
        ("42", "remind")
    );
    assert_eq!(
        store.cancel_timer(&bot(), &group, "remind").await.unwrap(),
        Cancelled::Cancelled
    );
    assert!(store.pending_timers(10).unwrap().is_empty());
    assert_eq!(
        store.cancel_timer(&bot(), &group, "remind").await.unwrap(),
        Cancelled::NotPending
    );
    let state = store
        .claim(&ClaimRequest {
            key: RecordKey::new(bot(), UpdateId(10)),
            ..claim
        })
        .await
        .unwrap();
    let Claim::Run(next) = state else {
        panic!("the claim runs");
    };
    let state = next.state.unwrap();
    assert_eq!(
        (state.version, state.json.as_str()),
        (2, "{}"),
        "the bot's value is kept"
    );
    assert_eq!(state.time, None);
}
