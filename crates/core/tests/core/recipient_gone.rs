//! Recipients who left are not failures: a user who blocked the bot or deleted their account, or a
//! private chat that is gone, settles the update `DONE` as `recipient_gone` — acknowledged, not
//! dead-lettered — unless `TGQ_DEAD_LETTER_GONE_RECIPIENTS` asks for dead letters.

use std::sync::Arc;

use serde_json::{json, Value};
use tgq_core::dead::DeadReason;
use tgq_core::echo::EchoBot;
use tgq_core::ids::{BotId, RecordKey, UpdateId};
use tgq_core::record::{ActionState, Status};
use tgq_core::telegram::{Gone, TelegramError};
use tgq_core::worker::{GoneRecipients, RecordOutcome, WorkerSettings};
use tgq_memory::{Harness, RecordingBotApi};

fn harness(gone_recipients: GoneRecipients) -> Harness {
    let settings = WorkerSettings {
        gone_recipients,
        ..WorkerSettings::default()
    };
    Harness::with_settings(
        BotId::new("demo").unwrap(),
        Arc::new(EchoBot),
        Arc::new(RecordingBotApi::new()),
        settings,
    )
}

fn text(update_id: i64, chat: i64) -> Value {
    let chat = if chat > 0 {
        json!({"id": chat, "type": "private", "first_name": "Ada"})
    } else {
        json!({"id": chat, "type": "supergroup", "title": "Team"})
    };
    json!({
        "update_id": update_id,
        "message": {
            "message_id": update_id, "date": 1_700_000_000, "text": "hi", "chat": chat,
            "from": {"id": 7, "is_bot": false, "first_name": "Ada"},
        }
    })
}

fn refusal(code: u16, description: &str) -> TelegramError {
    TelegramError::Api {
        code,
        description: description.into(),
    }
}

fn blocked() -> TelegramError {
    refusal(403, "Forbidden: bot was blocked by the user")
}

fn key(update_id: i64) -> RecordKey {
    RecordKey::new(BotId::new("demo").unwrap(), UpdateId(update_id))
}

#[tokio::test]
async fn a_user_who_blocked_the_bot_settles_the_update_done_as_recipient_gone_by_default() {
    let h = harness(GoneRecipients::default());
    h.api.fail_next([blocked()]);
    let report = h.run(&[text(1, 10), text(2, 10)]).await;
    assert_eq!(
        report.outcomes[0].1,
        RecordOutcome::RecipientGone(Gone::BlockedTheBot)
    );
    assert!(
        matches!(report.outcomes[1].1, RecordOutcome::Done(_)),
        "the chat goes on: {report:?}"
    );
    assert!(report.failed_message_ids().is_empty(), "acknowledged");
    assert!(h.dead.letters().is_empty(), "nobody is paged");
    let record = h.store.record(&key(1)).unwrap();
    assert_eq!(record.status, Status::Done);
    assert!(
        record.last_error.as_deref().unwrap().contains("blocked"),
        "{record:?}"
    );
    assert!(matches!(
        record.actions[&1].state,
        ActionState::Failed { code: 403, .. }
    ));
}

#[tokio::test]
async fn a_deleted_account_and_a_missing_private_chat_are_gone_but_a_missing_group_is_a_dead_letter(
) {
    let h = harness(GoneRecipients::Settle);
    h.api.fail_next([
        refusal(403, "Forbidden: user is deactivated"),
        refusal(400, "Bad Request: chat not found"),
        refusal(400, "Bad Request: chat not found"),
    ]);
    let report = h.run(&[text(1, 10), text(2, 11), text(3, -100_200)]).await;
    let outcomes: Vec<&RecordOutcome> = report.outcomes.iter().map(|(_, o)| o).collect();
    assert_eq!(
        outcomes,
        [
            &RecordOutcome::RecipientGone(Gone::Deactivated),
            &RecordOutcome::RecipientGone(Gone::PrivateChatNotFound),
            &RecordOutcome::DeadLettered(DeadReason::Permanent),
        ]
    );
    assert_eq!(h.dead.letters().len(), 1);
}

#[tokio::test]
async fn with_dead_letters_asked_for_a_user_who_blocked_the_bot_is_dead_lettered() {
    let h = harness(GoneRecipients::DeadLetter);
    h.api.fail_next([blocked()]);
    let report = h.run(&[text(1, 10)]).await;
    assert_eq!(
        report.outcomes[0].1,
        RecordOutcome::DeadLettered(DeadReason::Permanent)
    );
    let letters = h.dead.letters();
    assert_eq!(letters.len(), 1);
    assert!(
        letters[0].error.contains("bot was blocked by the user"),
        "{}",
        letters[0].error
    );
    assert_eq!(h.store.record(&key(1)).unwrap().status, Status::Dead);
}
