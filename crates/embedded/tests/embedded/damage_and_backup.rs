//! A store file damaged on disk is refused with a message naming it and the way back (a backup),
//! and a backup taken while the store is written to is a consistent store of its own.

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use tgq_core::clock::{Clock, SystemClock};
use tgq_core::ids::{BotId, GroupKey, RecordKey, UpdateId};
use tgq_core::ports::{AtomicIngest, DeadLetter, DeadLetters, OutgoingMessage, RecordReader};
use tgq_core::record::UpdateRecord;
use tgq_embedded::{EmbeddedStore, StoreError, StoreOptions, FILE_NAME};

fn key(update_id: i64) -> RecordKey {
    RecordKey::new(BotId::new("demo").unwrap(), UpdateId(update_id))
}

/// Stores `count` updates (each its record and queue message in one commit) and one dead letter.
async fn fill(store: &EmbeddedStore, first: i64, count: i64) {
    let now = SystemClock.now();
    for update_id in first..first + count {
        let group = GroupKey::new((update_id % 7).to_string());
        let body = Bytes::from(format!(
            r#"{{"update_id":{update_id},"message":{{"message_id":1,"date":0,"chat":{{"id":{},"type":"private"}},"text":"{}"}}}}"#,
            update_id % 7,
            "x".repeat(300)
        ));
        let record = UpdateRecord::received(
            key(update_id),
            group.clone(),
            body.clone(),
            now,
            tgq_core::defaults::RECORD_TTL,
        );
        let message = OutgoingMessage::for_update(&key(update_id), &group, body);
        store.insert_queued(&record, now, &message).await.unwrap();
    }
    store
        .dead_letter(&DeadLetter {
            bot_id: BotId::new("demo").unwrap(),
            update_id: None,
            group: None,
            body: Bytes::from_static(b"not an update"),
            reason: tgq_core::dead::DeadReason::Poison,
            error_class: tgq_core::dead::FailureClass::Poison,
            error: "not JSON".into(),
            attempts: 0,
        })
        .await
        .unwrap();
}

/// A store file with some content, closed cleanly; returns its size.
async fn written_store(dir: &Path) -> u64 {
    let store = EmbeddedStore::open(dir, StoreOptions::default()).unwrap();
    fill(&store, 1, 200).await;
    drop(store);
    std::fs::metadata(dir.join(FILE_NAME)).unwrap().len()
}

fn overwrite(path: &Path, at: u64, bytes: &[u8]) {
    let mut file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.seek(SeekFrom::Start(at)).unwrap();
    file.write_all(bytes).unwrap();
    file.sync_all().unwrap();
}

fn assert_refused_as_damaged(dir: &Path, damage: &str) {
    let path = dir.join(FILE_NAME);
    match EmbeddedStore::open(dir, StoreOptions::default()) {
        Err(error @ StoreError::Damaged { .. }) => {
            let text = error.to_string();
            assert!(
                text.contains(&path.display().to_string()),
                "{damage}: {text}"
            );
            assert!(text.contains("restore a backup"), "{damage}: {text}");
            assert!(text.contains("tgq backup"), "{damage}: {text}");
            // Found by the integrity check, not by a read that panicked on it.
            assert!(!text.contains("panicked"), "{damage}: {text}");
        }
        Err(other) => panic!("{damage}: expected Damaged, got {other:?} ({other})"),
        Ok(_) => panic!("{damage}: a damaged store was opened"),
    }
}

#[tokio::test]
async fn a_store_whose_pages_were_overwritten_is_refused_with_the_file_and_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let size = written_store(dir.path()).await;
    // Garbage over every page past the header: whichever pages hold the committed trees, their
    // checksums no longer match.
    let mut at = 4096;
    while at + 64 < size {
        overwrite(&dir.path().join(FILE_NAME), at + 100, &[0xA5; 64]);
        at += 4096;
    }
    assert_refused_as_damaged(dir.path(), "overwritten pages");
}

#[tokio::test]
async fn a_truncated_store_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let size = written_store(dir.path()).await;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join(FILE_NAME))
        .unwrap();
    file.set_len(size / 3).unwrap();
    drop(file);
    assert_refused_as_damaged(dir.path(), "truncated to a third");
}

#[tokio::test]
async fn a_file_that_is_not_a_store_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(FILE_NAME), vec![0x42; 3 * 4096]).unwrap();
    assert_refused_as_damaged(dir.path(), "not a database");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_while_updates_arrive_is_a_consistent_store_that_opens_in_place_of_the_original(
) {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path(), StoreOptions::default()).unwrap();
    fill(&store, 1, 100).await;
    // Writes go on while the backup is taken.
    let writing = {
        let store = store.clone();
        tokio::spawn(async move { fill(&store, 1_000, 300).await })
    };
    let backups = tempfile::tempdir().unwrap();
    let to = backups.path().join("copy.redb");
    let backup = {
        let (store, to) = (store.clone(), to.clone());
        tokio::task::spawn_blocking(move || store.backup_to(&to, false))
            .await
            .unwrap()
            .unwrap()
    };
    writing.await.unwrap();
    assert!(backup.entries > 100, "{backup:?}");
    assert_eq!(backup.bytes, std::fs::metadata(&to).unwrap().len());
    // Written beside it under a fresh name and renamed in: nothing else is left.
    assert_eq!(std::fs::read_dir(backups.path()).unwrap().count(), 1);

    // Restored into a data directory of its own, the copy is a store: every update stored before
    // the backup is there with its queue message, and the later ones are either wholly in it or
    // not at all (one snapshot).
    let restored_dir = tempfile::tempdir().unwrap();
    std::fs::copy(&to, restored_dir.path().join(FILE_NAME)).unwrap();
    let restored = EmbeddedStore::open(restored_dir.path(), StoreOptions::default()).unwrap();
    let now = SystemClock.now();
    for update_id in 1..=100 {
        assert!(
            restored.get(&key(update_id), now).await.unwrap().is_some(),
            "update {update_id} is missing from the backup"
        );
    }
    let stats = restored.stats(now).unwrap();
    let records = stats.records;
    assert_eq!(
        stats.pending, records,
        "each stored update has its queue message in the copy: {stats:?}"
    );
    assert!(stats.dead >= 1, "{stats:?}");
    let counters = restored.counters().unwrap();
    assert_eq!(counters.received, records, "{counters:?}");
    drop(restored);
    drop(store);
}

#[tokio::test]
async fn a_backup_replaces_an_older_file_and_never_leaves_a_partial_one() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<EmbeddedStore> =
        EmbeddedStore::open(dir.path(), StoreOptions::default()).unwrap();
    fill(&store, 1, 10).await;
    let backups = tempfile::tempdir().unwrap();
    let to = backups.path().join("copy.redb");
    std::fs::write(&to, b"an older backup").unwrap();
    let backup = store.backup_to(&to, true).unwrap();
    assert!(backup.entries >= 10);
    // Written beside it under a fresh name and renamed in: nothing else is left.
    assert_eq!(std::fs::read_dir(backups.path()).unwrap().count(), 1);
    let restored_dir = tempfile::tempdir().unwrap();
    std::fs::copy(&to, restored_dir.path().join(FILE_NAME)).unwrap();
    let restored = EmbeddedStore::open(restored_dir.path(), StoreOptions::default()).unwrap();
    assert_eq!(restored.stats(SystemClock.now()).unwrap().records, 10);
}

/// The names of the tables in a store file.
fn tables_of(path: &Path) -> Vec<String> {
    let db = redb::Database::open(path).unwrap();
    let read = redb::ReadableDatabase::begin_read(&db).unwrap();
    let mut names: Vec<String> = read
        .list_tables()
        .unwrap()
        .map(|t| redb::TableHandle::name(&t).to_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_backup_holds_every_table_of_the_store_and_the_poller_lease_with_its_checkpoint() {
    use tgq_core::leadership::{Acquired, HolderId, PollerLease};
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path(), StoreOptions::default()).unwrap();
    fill(&store, 1, 3).await;
    let lease = store.poller_lease(&BotId::new("demo").unwrap());
    let holder = HolderId::new("backed-up").unwrap();
    let ttl = std::time::Duration::from_secs(15);
    let Acquired::Won(won) = lease
        .acquire(&holder, SystemClock.now(), ttl)
        .await
        .unwrap()
    else {
        panic!("a fresh lease is won");
    };
    lease.checkpoint(&won.term, 42).await.unwrap();
    let backups = tempfile::tempdir().unwrap();
    let to = backups.path().join("copy.redb");
    store.backup_to(&to, false).unwrap();
    drop(lease);
    drop(store);
    assert_eq!(tables_of(&to), tables_of(&dir.path().join(FILE_NAME)));

    let restored_dir = tempfile::tempdir().unwrap();
    std::fs::copy(&to, restored_dir.path().join(FILE_NAME)).unwrap();
    let restored = EmbeddedStore::open(restored_dir.path(), StoreOptions::default()).unwrap();
    let stored = restored
        .poller_lease(&BotId::new("demo").unwrap())
        .read()
        .await
        .unwrap()
        .expect("the lease is in the backup");
    assert_eq!((stored.token, stored.offset), (won.term.token, Some(42)));
}
