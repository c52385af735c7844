//! The to-do bot through tgq's test kit: what a user sees, a crash in the middle of an update, a
//! call Telegram refuses.

use tgq_example_todo::{handlers, Todo};
use tgq_test::{Call, Failure, Outcome, TestBot};

const CHAT: i64 = 42;

#[tokio::test]
async fn items_are_added_listed_with_a_button_each_and_marked_done_by_a_press() {
    let mut bot = TestBot::new(handlers()).await;
    assert_eq!(
        bot.text(CHAT, "/add milk").await.texts(),
        ["Added. 1 on the list."]
    );
    bot.text(CHAT, "/add eggs").await;

    let list = bot.text(CHAT, "/list").await;
    assert_eq!(list.texts(), ["To do:"]);
    assert_eq!(list.buttons(), [["⬜ milk"], ["⬜ eggs"]]);

    let pressed = bot.press(CHAT, "⬜ eggs").await;
    assert!(pressed.is_done(), "{:?}", pressed.outcome);
    let answer = &pressed.calls("answerCallbackQuery")[0];
    assert_eq!(answer.params["text"], "Done!");
    let edit = &pressed.calls("editMessageText")[0];
    assert_eq!(
        edit.message_id, list.sent[0].message_id,
        "the list itself is edited"
    );
    assert_eq!(pressed.buttons(), [["⬜ milk"], ["✅ eggs"]]);

    let todo: Todo = bot.state(CHAT).unwrap();
    let marks: Vec<(&str, bool)> = todo.0.iter().map(|(t, d, _)| (t.as_str(), *d)).collect();
    assert_eq!(marks, [("milk", false), ("eggs", true)]);

    assert_eq!(bot.text(CHAT, "/clear").await.texts(), ["Cleared."]);
    assert!(bot.state::<Todo>(CHAT).unwrap().0.is_empty());
    assert_eq!(
        bot.text(7, "/list").await.buttons(),
        Vec::<Vec<&str>>::new(),
        "another chat's list is its own"
    );
}

#[tokio::test]
async fn an_add_that_crashed_after_its_step_keeps_the_steps_time_and_adds_the_item_once() {
    let mut bot = TestBot::new(handlers()).await;
    bot.set_state(CHAT, &Todo(vec![("bread".into(), true, 1)]));

    let crashed = bot.crash_after(1).text(CHAT, "/add milk").await;
    assert_eq!(crashed.outcome, Outcome::Crashed);
    assert!(crashed.sent.is_empty(), "it died before its reply");
    assert_eq!(
        bot.state::<Todo>(CHAT).unwrap().0.len(),
        1,
        "nothing written"
    );

    let again = bot.again().await;
    assert_eq!(again.texts(), ["Added. 2 on the list."]);
    let todo: Todo = bot.state(CHAT).unwrap();
    assert_eq!(todo.0.len(), 2);
    assert!(todo.0[1].2 > 1, "the step's time: {:?}", todo.0[1]);
}

#[tokio::test]
async fn a_reply_telegram_refused_is_sent_when_the_update_runs_again_and_the_item_is_added_once() {
    let mut bot = TestBot::new(handlers()).await;
    bot.fail(
        Call::method("sendMessage").chat(CHAT),
        Failure::api(502, "Bad Gateway"),
    );
    let failed = bot.text(CHAT, "/add milk").await;
    assert!(
        matches!(failed.outcome, Outcome::Retrying(_)),
        "{:?}",
        failed.outcome
    );
    assert!(failed.sent.is_empty());

    assert_eq!(bot.again().await.texts(), ["Added. 1 on the list."]);
    assert_eq!(bot.state::<Todo>(CHAT).unwrap().0.len(), 1);
}
