//! What the fake answers deserializes into teloxide-core's Bot API types, so a real client
//! accepts it.

use crate::support;

use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use support::call;
use teloxide_core::payloads::{AnswerInlineQuery, SetMyCommands};
use teloxide_core::types::{
    BotCommand, ChatFullInfo, ChatId, InlineQueryId, InlineQueryResult, InlineQueryResultArticle,
    InputMessageContent, InputMessageContentText, Me, Message, MessageId, MessageOrigin,
    WebhookInfo,
};
use tgq_fake_telegram::FakeTelegram;

async fn result_as<T: DeserializeOwned>(telegram: &FakeTelegram, method: &str, params: Value) -> T {
    let (status, body) = call(telegram, method, params).await;
    assert_eq!(status, 200, "{method} answered {body}");
    serde_json::from_value(body["result"].clone())
        .unwrap_or_else(|error| panic!("{method} result does not deserialize: {error}\n{body}"))
}

#[tokio::test]
async fn sent_message_deserializes_into_a_teloxide_message() {
    let telegram = FakeTelegram::start().await.unwrap();
    let keyboard = json!({ "inline_keyboard": [[{ "text": "Yes", "callback_data": "yes" }]] });

    let message: Message = result_as(
        &telegram,
        "sendMessage",
        json!({ "chat_id": 42, "text": "Proceed?", "reply_markup": keyboard }),
    )
    .await;

    assert_eq!(message.id, MessageId(1));
    assert_eq!(message.chat.id, ChatId(42));
    assert!(message.chat.is_private());
    assert_eq!(message.text(), Some("Proceed?"));
    assert_eq!(message.from.as_ref().map(|user| user.is_bot), Some(true));
    let markup = message
        .reply_markup()
        .expect("the inline keyboard is echoed");
    assert_eq!(markup.inline_keyboard[0][0].text, "Yes");
}

#[tokio::test]
async fn group_and_channel_messages_deserialize_with_their_chat_kinds() {
    let telegram = FakeTelegram::start().await.unwrap();

    let group: Message = result_as(
        &telegram,
        "sendMessage",
        json!({ "chat_id": -1_009, "text": "g" }),
    )
    .await;
    let channel: Message = result_as(
        &telegram,
        "sendMessage",
        json!({ "chat_id": "@news", "text": "c" }),
    )
    .await;

    assert!(group.chat.is_supergroup());
    assert!(channel.chat.is_channel());
    assert_eq!(
        channel.sender_chat.map(|chat| chat.id),
        Some(channel.chat.id)
    );
}

#[tokio::test]
async fn photo_and_document_messages_deserialize_with_their_media() {
    let telegram = FakeTelegram::start().await.unwrap();

    let photo: Message = result_as(
        &telegram,
        "sendPhoto",
        json!({ "chat_id": 1, "photo": "https://example.com/cat.jpg", "caption": "cat" }),
    )
    .await;
    let document: Message = result_as(
        &telegram,
        "sendDocument",
        json!({ "chat_id": 1, "document": "https://example.com/report.pdf" }),
    )
    .await;

    assert_eq!(photo.photo().map(<[_]>::len), Some(3));
    assert_eq!(photo.caption(), Some("cat"));
    assert!(document.document().is_some());
}

/// A fake Bot API holding one message, "original", sent to chat 1 as message 1.
async fn with_one_message() -> FakeTelegram {
    let telegram = FakeTelegram::start().await.unwrap();
    call(
        &telegram,
        "sendMessage",
        json!({ "chat_id": 1, "text": "original" }),
    )
    .await;
    telegram
}

#[tokio::test]
async fn forwarded_and_edited_messages_deserialize() {
    let telegram = with_one_message().await;

    let forwarded: Message = result_as(
        &telegram,
        "forwardMessage",
        json!({ "chat_id": 2, "from_chat_id": 1, "message_id": 1 }),
    )
    .await;
    let edited: Message = result_as(
        &telegram,
        "editMessageText",
        json!({ "chat_id": 1, "message_id": 1, "text": "changed" }),
    )
    .await;

    assert_eq!(forwarded.text(), Some("original"));
    assert!(matches!(
        forwarded.forward_origin(),
        Some(MessageOrigin::User { .. })
    ));
    assert_eq!(edited.text(), Some("changed"));
    assert!(edited.edit_date().is_some());
}

#[tokio::test]
async fn copy_message_result_deserializes_into_a_message_id() {
    let telegram = with_one_message().await;

    let copied: MessageId = result_as(
        &telegram,
        "copyMessage",
        json!({ "chat_id": 1, "from_chat_id": 1, "message_id": 1 }),
    )
    .await;

    assert_eq!(copied, MessageId(2));
}

#[tokio::test]
async fn get_me_deserializes_into_teloxide_me() {
    let telegram = FakeTelegram::start().await.unwrap();

    let me: Me = result_as(&telegram, "getMe", json!({})).await;

    assert_eq!(me.user.id.0, 123_456);
    assert!(me.user.is_bot);
    assert!(!me.username().is_empty());
}

#[tokio::test]
async fn webhook_info_deserializes_into_teloxide_webhook_info() {
    let telegram = FakeTelegram::start().await.unwrap();
    telegram.push_update(json!({ "update_id": 1 }));

    let without: WebhookInfo = result_as(&telegram, "getWebhookInfo", json!({})).await;
    telegram.set_webhook_url(Some("https://example.com/hook".to_owned()));
    let with: WebhookInfo = result_as(&telegram, "getWebhookInfo", json!({})).await;

    assert_eq!(without.url, None);
    assert_eq!(without.pending_update_count, 1);
    assert_eq!(
        with.url.map(String::from),
        Some("https://example.com/hook".to_owned())
    );
}

#[tokio::test]
async fn get_chat_deserializes_into_a_teloxide_chat_full_info() {
    let telegram = FakeTelegram::start().await.unwrap();

    let private: ChatFullInfo = result_as(&telegram, "getChat", json!({ "chat_id": 42 })).await;
    let group: ChatFullInfo = result_as(&telegram, "getChat", json!({ "chat_id": -1_009 })).await;
    let channel: ChatFullInfo =
        result_as(&telegram, "getChat", json!({ "chat_id": "@news" })).await;

    assert_eq!(private.id, ChatId(42));
    assert!(private.is_private());
    assert!(group.is_supergroup());
    assert!(channel.is_channel());
}

#[tokio::test]
async fn teloxide_inline_answers_and_command_lists_are_accepted() {
    let telegram = FakeTelegram::start().await.unwrap();
    let article = InlineQueryResultArticle::new(
        "shout",
        "Shout HELLO",
        InputMessageContent::Text(InputMessageContentText::new("HELLO")),
    );
    let answer = AnswerInlineQuery::new(
        InlineQueryId("4382139112311411203".to_owned()),
        [InlineQueryResult::Article(article)],
    );
    let commands = SetMyCommands::new([BotCommand::new("roll", "Rolls a die.")]);

    let answered: bool = result_as(
        &telegram,
        "answerInlineQuery",
        serde_json::to_value(&answer).unwrap(),
    )
    .await;
    let set: bool = result_as(
        &telegram,
        "setMyCommands",
        serde_json::to_value(&commands).unwrap(),
    )
    .await;

    assert!(answered && set);
}
