//! Per-chat state through the worker on in-memory adapters: loaded with the claim, written only by
//! the `DONE` settle, so a retried update never applies its change twice; a state another writer
//! changed is never overwritten; a state of another format is refused.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use teloxide_core::payloads::SendMessage;
use teloxide_core::types::{Update, UpdateKind};
use tgq_core::dead::DeadReason;
use tgq_core::ids::{BotId, GroupKey, StateKey};
use tgq_core::state::{ChatState, StoredState};
use tgq_core::worker::{BatchReport, RecordOutcome};
use tgq_core::{Context, ErrorClass, Handler, HandlerError};
use tgq_memory::{Fault, Harness, RecordingBotApi};

/// The bot's state: how many messages the chat sent.
#[derive(Serialize, Deserialize, Default, Debug, PartialEq)]
struct Tally {
    count: u32,
}

impl ChatState for Tally {
    const FORMAT: &'static str = "tally/v1";
}

/// Counts each chat's messages in its state and replies with the count.
#[derive(Default)]
struct TallyBot {
    /// Updates whose next run fails transiently after it replied.
    fail_once: Mutex<HashSet<i64>>,
    /// Called once, in the next run, after it read the state: another writer.
    meddle: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

#[async_trait]
impl Handler for TallyBot {
    async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        let UpdateKind::Message(message) = &update.kind else {
            return Ok(());
        };
        let mut tally = ctx.state::<Tally>()?.unwrap_or_default();
        tally.count += 1;
        ctx.set_state(&tally)?;
        if let Some(meddle) = self.meddle.lock().take() {
            meddle();
        }
        let reply = SendMessage::new(message.chat.id, format!("count {}", tally.count));
        ctx.send(reply).await?;
        if self.fail_once.lock().remove(&i64::from(update.id.0)) {
            return Err(HandlerError::transient("backend down"));
        }
        Ok(())
    }
}

fn bot_id() -> BotId {
    BotId::new("demo").unwrap()
}

fn rig() -> (Arc<TallyBot>, Harness) {
    let bot = Arc::new(TallyBot::default());
    let harness = Harness::new(bot_id(), bot.clone(), Arc::new(RecordingBotApi::new()));
    (bot, harness)
}

fn text(update_id: i64, chat: i64) -> Value {
    json!({
        "update_id": update_id,
        "message": {
            "message_id": update_id, "date": 1_700_000_000, "text": "hi",
            "chat": {"id": chat, "type": "private", "first_name": "Ada"},
            "from": {"id": chat, "is_bot": false, "first_name": "Ada"},
        }
    })
}

fn state_of(chat: i64) -> StateKey {
    StateKey::new(bot_id(), GroupKey::new(chat.to_string()))
}

fn tally(harness: &Harness, chat: i64) -> Option<(u32, u64)> {
    let stored = harness.store.state(&state_of(chat))?;
    assert_eq!(stored.format, "tally/v1");
    let tally: Tally = serde_json::from_str(&stored.json).unwrap();
    Some((tally.count, stored.version))
}

fn outcomes(report: &BatchReport) -> Vec<&RecordOutcome> {
    report.outcomes.iter().map(|(_, o)| o).collect()
}

#[tokio::test]
async fn a_retried_update_applies_its_state_change_once_and_each_chat_has_its_own() {
    let (bot, harness) = rig();
    bot.fail_once.lock().insert(2);
    let report = harness
        .run(&[text(1, 10), text(2, 10), text(3, 10), text(4, 20)])
        .await;
    assert!(matches!(outcomes(&report)[1], RecordOutcome::Retrying(..)));
    assert_eq!(*outcomes(&report)[2], RecordOutcome::SkippedBehindFailure);
    assert_eq!(
        tally(&harness, 10),
        Some((1, 1)),
        "the failed run wrote nothing"
    );

    let report = harness.run(&[text(2, 10), text(3, 10)]).await;
    assert!(report.failed_message_ids().is_empty(), "{report:?}");
    // Delivered again after they finished: acknowledged without running.
    let report = harness.run(&[text(1, 10), text(2, 10), text(3, 10)]).await;
    assert!(outcomes(&report)
        .iter()
        .all(|o| **o == RecordOutcome::AlreadyFinal));

    assert_eq!(tally(&harness, 10), Some((3, 3)), "one change per update");
    assert_eq!(tally(&harness, 20), Some((1, 1)));
    // Update 2's reply was sent by its failed run and replayed by the retry, not sent again.
    assert_eq!(
        harness.api.sent_texts(),
        ["count 1", "count 2", "count 1", "count 3"]
    );
}

#[tokio::test]
async fn a_state_change_is_written_only_by_the_done_settle_so_a_failed_settle_loses_it() {
    let (_bot, harness) = rig();
    harness
        .store
        .outage
        .fail_only("store settle", Fault::Unavailable);
    let report = harness.run(&[text(1, 10)]).await;
    assert!(matches!(
        outcomes(&report)[0],
        RecordOutcome::StoreUnavailable(_)
    ));
    assert_eq!(tally(&harness, 10), None);

    harness.store.outage.set(false);
    // The crashed run's lease ends; the message comes back.
    harness.clock.advance(Duration::from_secs(61));
    let report = harness.run(&[text(1, 10)]).await;
    assert!(matches!(outcomes(&report)[0], RecordOutcome::Done(_)));
    assert_eq!(tally(&harness, 10), Some((1, 1)), "applied once, not twice");
}

#[tokio::test]
async fn a_state_another_writer_changed_after_the_claim_is_not_overwritten_and_the_update_runs_again_on_it(
) {
    let (bot, harness) = rig();
    let store = harness.store.clone();
    let theirs = StoredState {
        format: "tally/v1".into(),
        json: r#"{"count":40}"#.into(),
        version: 7,
        time: None,
    };
    let written = theirs.clone();
    *bot.meddle.lock() = Some(Box::new(move || store.put_state(state_of(10), written)));
    let report = harness.run(&[text(1, 10)]).await;
    assert!(
        matches!(
            outcomes(&report)[0],
            RecordOutcome::Retrying(_, ErrorClass::Transient)
        ),
        "{report:?}"
    );
    assert_eq!(harness.store.state(&state_of(10)), Some(theirs));

    let report = harness.run(&[text(1, 10)]).await;
    assert!(matches!(outcomes(&report)[0], RecordOutcome::Done(_)));
    assert_eq!(tally(&harness, 10), Some((41, 8)));
}

#[tokio::test]
async fn a_state_stored_under_another_format_is_refused_naming_both_and_left_as_it_is() {
    let (_bot, harness) = rig();
    let old = StoredState {
        format: "tally/v0".into(),
        json: r#"{"n":5}"#.into(),
        version: 2,
        time: None,
    };
    harness.store.put_state(state_of(10), old.clone());
    let report = harness.run(&[text(1, 10)]).await;
    assert_eq!(
        *outcomes(&report)[0],
        RecordOutcome::DeadLettered(DeadReason::Permanent)
    );
    let letter = &harness.dead.letters()[0];
    assert!(
        letter.error.contains("\"tally/v0\"") && letter.error.contains("\"tally/v1\""),
        "{}",
        letter.error
    );
    assert_eq!(harness.store.state(&state_of(10)), Some(old));
    assert!(harness.api.calls().is_empty());
}
