//! The kit itself: each of its faults does what it says, on a bot that replies twice and steps
//! once per text.

use tgq::prelude::*;
use tgq_test::{Call, Failure, Outcome, TestBot};

#[derive(Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
struct Seen(u32);

impl ChatState for Seen {
    const FORMAT: &'static str = "kit.seen/v1";
}

/// For each text: a step, `one: TEXT`, then `two: TEXT` with a button; counts the texts per chat.
struct Twice;

#[async_trait]
impl Handler for Twice {
    async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        let UpdateKind::Message(m) = &update.kind else {
            if let UpdateKind::CallbackQuery(query) = &update.kind {
                ctx.answer(query, query.data.clone().unwrap_or_default())
                    .await?;
            }
            return Ok(());
        };
        let text = m.text().unwrap_or_default();
        let runs: u32 = ctx.step("count", || async { Ok(1) }).await?;
        ctx.reply(m, format!("one: {text}")).await?;
        let button = Keyboard::new().button("again", &"pressed");
        ctx.reply_with(m, format!("two: {text}"), button).await?;
        let seen = ctx.state::<Seen>()?.unwrap_or_default();
        ctx.set_state(&Seen(seen.0 + runs))
    }
}

#[tokio::test]
async fn a_call_fails_by_method_chat_and_position_and_the_update_runs_again() {
    let mut bot = TestBot::handler(Twice);
    bot.fail(
        Call::method("sendMessage").chat(2).nth(2),
        Failure::api(502, "Bad Gateway"),
    );
    assert_eq!(
        bot.text(1, "a").await.texts(),
        ["one: a", "two: a"],
        "another chat"
    );
    let failed = bot.text(2, "b").await;
    assert!(matches!(failed.outcome, Outcome::Retrying(_)), "{failed:?}");
    assert_eq!(
        failed.texts(),
        ["one: b"],
        "the second send to chat 2 failed"
    );
    let again = bot.again().await;
    assert!(again.is_done());
    assert_eq!(
        again.texts(),
        ["two: b"],
        "the first send is not made again"
    );
    assert_eq!(bot.state::<Seen>(2), Some(Seen(1)));
}

#[tokio::test]
async fn a_refusal_retrying_cannot_fix_dead_letters_the_update() {
    let mut bot = TestBot::handler(Twice);
    bot.fail(
        Call::any(),
        Failure::api(400, "Bad Request: message text is empty"),
    );
    let ran = bot.text(1, "a").await;
    assert!(matches!(ran.outcome, Outcome::DeadLettered(_)), "{ran:?}");
    assert_eq!(bot.dead_letters(), 1);
    assert_eq!(bot.state::<Seen>(1), None);
}

#[tokio::test]
async fn a_run_crashed_after_each_action_finishes_on_the_next_with_each_reply_at_least_once() {
    // Actions: the step, `one`, `two`; then the run settles.
    for after in 0..=3 {
        let mut bot = TestBot::handler(Twice);
        let crashed = bot.crash_after(after).text(1, "a").await;
        assert_eq!(crashed.outcome, Outcome::Crashed, "after {after}");
        assert_eq!(bot.state::<Seen>(1), None, "a crashed run writes no state");
        let again = bot.again().await;
        assert!(again.is_done(), "after {after}: {again:?}");
        let all: Vec<String> = bot.sent().into_iter().filter_map(|s| s.text).collect();
        // The reply whose outcome the crash kept from being written is sent again.
        let expected: &[&str] = match after {
            0 | 1 => &["one: a", "two: a"],
            2 => &["one: a", "one: a", "two: a"],
            _ => &["one: a", "two: a", "two: a"],
        };
        assert_eq!(all, expected, "after {after}");
        assert_eq!(bot.state::<Seen>(1), Some(Seen(1)), "the step ran once");
    }
}

#[tokio::test]
async fn a_lost_answer_means_the_call_was_made_and_is_made_again() {
    let mut bot = TestBot::handler(Twice);
    bot.fail(Call::method("sendMessage").nth(1), Failure::LoseAnswer);
    let ran = bot.text(1, "a").await;
    assert!(matches!(ran.outcome, Outcome::Retrying(_)), "{ran:?}");
    assert_eq!(ran.texts(), ["one: a"]);
    assert_eq!(bot.again().await.texts(), ["one: a", "two: a"]);
}

#[tokio::test]
async fn a_press_finds_the_newest_message_with_the_label_and_state_is_read_and_set_by_chat() {
    let mut bot = TestBot::handler(Twice);
    bot.set_state(5, &Seen(10));
    bot.text(5, "a").await;
    let sent = bot.sent_to(5);
    let pressed = bot.press(5, "again").await;
    let answer = &pressed.calls("answerCallbackQuery")[0];
    assert_eq!(
        answer.params["text"], "\"pressed\"",
        "the data the keyboard wrote"
    );
    assert_eq!(sent[1].buttons, [["again"]]);
    assert_eq!(bot.state::<Seen>(5), Some(Seen(11)));
    let missing = tokio::spawn(async move { bot.press(5, "nope").await }).await;
    let panic = missing.unwrap_err().into_panic();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(
        message.contains(r#"no message to chat 5 has a button "nope"; its buttons: ["again"]"#),
        "{message}"
    );
}

/// Sends a photo from bytes, then a text about it.
struct Photographer;

#[async_trait]
impl Handler for Photographer {
    async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        let UpdateKind::Message(m) = &update.kind else {
            return Ok(());
        };
        let photo = Upload::bytes("cat.jpg", &b"a cat, honestly"[..])?;
        let payload = SendPhoto::new(m.chat.id, photo.input_file()).caption("a cat");
        let sent = ctx.send_with_files(payload, &[photo]).await?;
        let file_id = &sent.photo().expect("a photo")[0].file.id;
        ctx.reply(m, format!("sent as {file_id}")).await
    }
}

#[tokio::test]
async fn an_upload_whose_answer_was_recorded_is_not_uploaded_again_on_the_retry() {
    let mut bot = TestBot::handler(Photographer);
    bot.fail(
        Call::method("sendMessage"),
        Failure::api(502, "Bad Gateway"),
    );
    let failed = bot.text(1, "a").await;
    assert!(matches!(failed.outcome, Outcome::Retrying(_)), "{failed:?}");
    let upload = &failed.calls("sendPhoto")[0].uploads[0];
    assert_eq!(upload["file_name"], "cat.jpg");
    assert_eq!(upload["size"], 15);
    let again = bot.again().await;
    assert!(again.is_done(), "{again:?}");
    assert!(
        again.calls("sendPhoto").is_empty(),
        "uploaded once: {again:?}"
    );
    assert_eq!(
        bot.sent()
            .iter()
            .filter(|s| s.method == "sendPhoto")
            .count(),
        1
    );
}

/// Downloads the document it is sent and says how large it is.
struct Measurer;

#[async_trait]
impl Handler for Measurer {
    async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        let UpdateKind::Message(m) = &update.kind else {
            return Ok(());
        };
        let Some(document) = m.document() else {
            return Ok(());
        };
        let bytes = ctx.download(&document.file.id).await?;
        ctx.reply(m, format!("{} bytes", bytes.len())).await
    }
}

fn document(file_id: &str) -> serde_json::Value {
    serde_json::json!({"message": {
        "message_id": 1, "date": 0, "chat": {"id": 1, "type": "private", "first_name": "A"},
        "document": {"file_id": file_id, "file_unique_id": file_id},
    }})
}

#[tokio::test]
async fn a_file_a_user_sent_is_downloaded_and_one_over_twenty_megabytes_is_refused() {
    let mut bot = TestBot::handler(Measurer);
    bot.put_file("small", vec![7u8; 1234]);
    assert_eq!(bot.update(document("small")).await.texts(), ["1234 bytes"]);

    bot.put_file("large", vec![0u8; 20_000_001]);
    let refused = bot.update(document("large")).await;
    match &refused.outcome {
        Outcome::DeadLettered(_) => {}
        other => panic!("a file over the limit fails for good: {other:?}"),
    }
    assert!(refused.sent.is_empty());
}

#[path = "kit/time.rs"]
mod time;

#[path = "kit/pay.rs"]
mod pay;
