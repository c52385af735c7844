//! A broadcast a handler starts on a stack (`ctx.broadcast`) to 200,000 chats: the handler's
//! run writes the job and its list in one transaction and no recipient; the job's steps write
//! the recipients a chunk at a time, one of them killed halfway through its chunk, each
//! recipient once, in the list's order. Runs on moto server; prints how long each part took. A
//! test binary of its own, so that its 200,000 writes never slow the emulator under the timed
//! steps of the other AWS tests.

/// The AWS tests' setup; this binary uses only its broadcast store.
#[path = "../aws/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use serde_json::json;
use tgq_core::broadcast::{start_expanding, Audience, BroadcastSpec, RecipientState, CHUNK};
use tgq_core::clock::{Clock, SystemClock};
use tgq_core::ids::BotId;

const CHATS: i64 = 200_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_s_audience_of_200_000_is_written_by_its_steps_once_a_step_killed_included() {
    let store = common::broadcasts().await.store;
    let chats: Vec<i64> = (0..CHATS).map(|n| 1_000_000_000 + n * 7).collect();
    let bot = BotId::new("caster").expect("a valid bot id");
    let spec = BroadcastSpec::standard(
        bot,
        "sendMessage",
        json!({"text": "news"}),
        "update:caster:9:news",
    );
    let audience = Audience::Chats {
        chats: chats.clone(),
    };
    let started = Instant::now();
    let created = start_expanding(&*store, &spec, &audience, SystemClock.now())
        .await
        .expect("the job starts");
    eprintln!(
        "the handler's start of a broadcast to {CHATS} chats took {:?}",
        started.elapsed()
    );
    let id = created.job().id.clone();
    let job = store
        .job(&id)
        .await
        .expect("answers")
        .expect("the job is stored");
    assert!(job.expanding, "the audience is left to the job's steps");
    assert_eq!(job.counts.total, 0, "the handler's run wrote no recipient");

    // The steps' writes, a chunk each; the hundredth step dies halfway through its chunk.
    let started = Instant::now();
    let mut steps = 0;
    loop {
        steps += 1;
        assert!(
            steps <= CHATS as u64 / CHUNK + 2,
            "the audience is written within a step or two more than its chunks"
        );
        if steps == 100 {
            let cut =
                tokio::time::timeout(Duration::from_millis(50), store.expand(&id, CHUNK)).await;
            assert!(
                cut.is_err(),
                "the step was killed before it wrote its chunk"
            );
            let halfway = store.job(&id).await.expect("answers").expect("stored");
            assert_eq!(
                halfway.counts.total,
                99 * CHUNK,
                "the killed step moved nothing on"
            );
            continue;
        }
        if store.expand(&id, CHUNK).await.expect("the store answers") {
            break;
        }
    }
    eprintln!(
        "{steps} steps wrote {CHATS} recipients in {:?}",
        started.elapsed()
    );
    let job = store.job(&id).await.expect("answers").expect("stored");
    assert!(!job.expanding);
    assert_eq!(job.counts.total, CHATS as u64);
    let recipients = store
        .next(
            &id,
            &(0..CHATS as u64),
            SystemClock.now(),
            CHATS as usize + 1,
        )
        .await
        .expect("the store answers");
    assert_eq!(recipients.len(), CHATS as usize, "each recipient once");
    for (index, recipient) in recipients.iter().enumerate() {
        assert_eq!(
            (
                recipient.index,
                recipient.chat,
                &recipient.state,
                recipient.attempts
            ),
            (index as u64, chats[index], &RecipientState::Pending, 0),
            "recipient {index}"
        );
    }
}
