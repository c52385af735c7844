//! What `tgq local`'s console reads of the store: an update from its receipt to done, with the
//! journal's timeline and the state its run replaced and wrote.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tgq_core::clock::{Clock as _, ManualClock};
use tgq_core::ids::{BotId, GroupKey, RecordKey, UpdateId};
use tgq_core::ports::{AtomicIngest, OutgoingMessage, QueueConsumer};
use tgq_core::record::{Timestamp, UpdateRecord};
use tgq_core::worker::RecordOutcome;
use tgq_embedded::{EmbeddedStore, StoreOptions};

const START: Timestamp = Timestamp(1_700_000_000_000);
const DAY: Duration = Duration::from_secs(86_400);

fn update(id: i64, text: &str) -> Bytes {
    Bytes::from(format!(
        r#"{{"update_id":{id},"message":{{"message_id":{id},"date":0,"chat":{{"id":42,"type":"private","first_name":"A"}},"text":"{text}"}}}}"#
    ))
}

#[tokio::test]
async fn the_console_follows_an_update_from_its_receipt_to_done_with_the_state_its_run_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(START);
    let options = StoreOptions {
        ttl: DAY,
        clock: Arc::new(clock.clone()),
        ..StoreOptions::default()
    };
    let store = EmbeddedStore::open(dir.path(), options).unwrap();
    let bot = BotId::new("demo").unwrap();
    let group = GroupKey::new("42");
    let commits = store.commits_watch();
    for (id, text) in [(7, "/remember tea"), (8, "hello")] {
        let key = RecordKey::new(bot.clone(), UpdateId(id));
        let body = update(id, text);
        let record = UpdateRecord::received(key.clone(), group.clone(), body.clone(), START, DAY);
        let message = OutgoingMessage::for_update(&key, &group, body);
        store.insert_queued(&record, START, &message).await.unwrap();
    }
    assert!(commits.has_changed().unwrap(), "a commit is announced");

    let feed = store.recent_updates(10, START).unwrap();
    let seen: Vec<_> = feed.iter().map(|u| (u.update_id, u.status)).collect();
    assert_eq!(seen, [(8, "QUEUED"), (7, "QUEUED")], "newest first");
    let chats = store.chats(START).unwrap();
    let waiting: Vec<_> = chats[0].pending.iter().map(|p| p.update_id).collect();
    assert_eq!(
        (chats[0].group.as_str(), waiting),
        ("42", vec![Some(7), Some(8)])
    );
    assert_eq!(store.highest_update_id(&bot).unwrap(), Some(8));
    assert_eq!(
        store
            .highest_update_id(&BotId::new("other").unwrap())
            .unwrap(),
        None
    );

    clock.advance(Duration::from_millis(40));
    let batch = store
        .receive(1, Duration::from_secs(60), Duration::ZERO)
        .await
        .unwrap();
    let running = store.recent_updates(10, clock.now()).unwrap();
    assert_eq!(running[1].queued.as_ref().map(|q| q.running), Some(true));
    let worker = crate::worker::offline_echo_worker(&store, &clock);
    let report = worker
        .process_batch(&batch, clock.now().plus(Duration::from_secs(60)))
        .await;
    assert!(
        matches!(report.outcomes[0].1, RecordOutcome::Done(_)),
        "{report:?}"
    );

    let detail = store.update_detail(&bot, 7, clock.now()).unwrap().unwrap();
    assert_eq!(detail.update.status, "DONE");
    assert_eq!(detail.update.kind, "message");
    let timeline: Vec<_> = detail.journal.iter().map(|e| (e.status, e.at)).collect();
    assert_eq!(
        timeline,
        [
            ("QUEUED", START),
            ("PROCESSING", START.plus(Duration::from_millis(40))),
            ("DONE", START.plus(Duration::from_millis(40))),
        ]
    );
    let change = detail.journal[2]
        .state
        .as_ref()
        .expect("the state the run wrote");
    assert_eq!(change.before, None);
    assert_eq!(change.after, r#"{"said":"/remember tea"}"#);
    assert_eq!(
        detail.state_now.as_deref(),
        Some(r#"{"said":"/remember tea"}"#)
    );
    assert_eq!(detail.actions.len(), 1);
    assert_eq!(detail.sent.len(), 1, "the outbox entry its run made");
    assert_eq!(detail.payload["message"]["text"], "/remember tea");

    let talk = store.conversation(&bot, "42", 10, clock.now()).unwrap();
    assert_eq!(talk.updates.len(), 2);
    assert_eq!(talk.sent.len(), 1);
    assert!(store
        .update_detail(&bot, 99, clock.now())
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn a_poller_renewing_its_lease_wakes_no_watcher_of_the_store() {
    use tgq_core::leadership::{Acquired, HolderId, PollerLease as _};

    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path(), StoreOptions::default()).unwrap();
    let lease = store.poller_lease(&BotId::new("demo").unwrap());
    let holder = HolderId::new("poller-a").unwrap();
    let ttl = Duration::from_secs(15);
    let Acquired::Won(won) = lease.acquire(&holder, START, ttl).await.unwrap() else {
        panic!("a free lease is won");
    };
    let mut commits = store.commits_watch();
    commits.borrow_and_update();
    let mut term = won.term;
    for n in 1..=3 {
        let now = START.plus(Duration::from_secs(5 * n));
        term = lease.renew(&term, now, ttl).await.unwrap();
    }
    lease.checkpoint(&term, 1234).await.unwrap();
    assert!(
        !commits.has_changed().unwrap(),
        "the lease's renewals and checkpoint are committed, but change nothing a watcher shows"
    );
}
