use std::time::{Duration, Instant};
use bytes::Bytes;
use tgq_core::clock::{Clock, SystemClock};
use tgq_core::ids::{BotId, GroupKey, RecordKey, UpdateId};
use tgq_core::ports::UpdateStore;
use tgq_core::record::UpdateRecord;
use tgq_embedded::{EmbeddedStore, StoreOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path(), StoreOptions::default()).unwrap();
    for conc in [1usize, 4, 16, 64] {
        let t = Instant::now();
        let c0 = store.commits();
        let n = 400;
        let tasks: Vec<_> = (0..conc).map(|lane| { let store = store.clone(); tokio::spawn(async move {
            for i in (lane..n).step_by(conc) {
                let now = SystemClock.now();
                let id = (conc * 100000 + i) as i64;
                let r = UpdateRecord::received(RecordKey::new(BotId::new("b").unwrap(), UpdateId(id)), GroupKey::new("1"), Bytes::from_static(b"{}"), now, Duration::from_secs(60));
                store.insert(&r, now).await.unwrap();
            }
        })}).collect();
        for t in tasks { t.await.unwrap(); }
        let e = t.elapsed();
        println!("conc {conc}: {n} inserts in {e:?} = {:.0}/s, {} commits, {:.2} ms/commit", n as f64 / e.as_secs_f64(), store.commits()-c0, e.as_secs_f64()*1000.0/(store.commits()-c0) as f64);
    }
}
