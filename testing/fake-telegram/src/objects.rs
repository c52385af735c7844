//! Bot API objects in the shapes Telegram sends them: User, Message, ChatFullInfo, WebhookInfo,
//! and the content fields of the messages the bot sends.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use crate::chats::Target;
use crate::envelope::ApiError;
use crate::params::Params;

/// The bot's `first_name`, as `getMe` reports it.
pub(crate) const BOT_FIRST_NAME: &str = "Test Bot";
/// The bot's `username`, as `getMe` reports it.
pub(crate) const BOT_USERNAME: &str = "test_bot";

/// The message content of one call: `text`, `photo`, `caption`, … as they appear in a Message.
pub(crate) type Content = Map<String, Value>;

pub(crate) fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
        })
}

/// The bot as a User, as it appears in a message's `from`.
pub(crate) fn bot_user(bot_id: i64) -> Value {
    json!({
        "id": bot_id,
        "is_bot": true,
        "first_name": BOT_FIRST_NAME,
        "username": BOT_USERNAME,
    })
}

/// A user (not a bot), as updates and messages show them.
pub(crate) fn user(id: i64) -> Value {
    json!({ "id": id, "is_bot": false, "first_name": format!("User {id}") })
}

/// The answer to `getMe`: the bot's User plus the capability flags only `getMe` returns.
pub(crate) fn me(bot_id: i64) -> Value {
    let mut me = bot_user(bot_id);
    for (flag, value) in [
        ("can_join_groups", true),
        ("can_read_all_group_messages", false),
        ("supports_inline_queries", false),
        ("can_connect_to_business", false),
        ("has_main_web_app", false),
    ] {
        me[flag] = value.into();
    }
    me
}

/// The answer to `getWebhookInfo`; Telegram reports "no webhook" as an empty url.
pub(crate) fn webhook_info(url: Option<&str>, pending_update_count: usize) -> Value {
    json!({
        "url": url.unwrap_or(""),
        "has_custom_certificate": false,
        "pending_update_count": pending_update_count,
    })
}

/// The answer to `getChat`: the chat as messages show it, with the fields Telegram always adds to
/// a ChatFullInfo.
pub(crate) fn chat_full_info(chat: &Target) -> Value {
    let mut info = chat.json();
    info["accent_color_id"] = 0.into();
    info["max_reaction_count"] = 11.into();
    info["accepted_gift_types"] = json!({
        "unlimited_gifts": true,
        "limited_gifts": true,
        "unique_gifts": true,
        "premium_subscription": true,
    });
    info
}

/// A Message the bot sent to `chat`. Channel posts carry the channel as `sender_chat`, other
/// messages the bot as `from`. Only inline keyboards are echoed, as Telegram does.
pub(crate) fn message(
    bot_id: i64,
    chat: &Target,
    message_id: i64,
    content: &Content,
    reply_markup: Option<&Value>,
) -> Value {
    let mut message = json!({
        "message_id": message_id,
        "date": unix_now(),
        "chat": chat.json(),
    });
    if chat.is_channel() {
        message["sender_chat"] = chat.json();
    } else {
        message["from"] = bot_user(bot_id);
    }
    if let Some(fields) = message.as_object_mut() {
        fields.extend(content.clone());
        if let Some(markup) = reply_markup.filter(|markup| markup.get("inline_keyboard").is_some())
        {
            fields.insert("reply_markup".to_owned(), markup.clone());
        }
    }
    message
}

/// `sendMessage` / `editMessageText` content: the text and the entities the client gave.
pub(crate) fn text_content(params: &Params) -> Result<Content, ApiError> {
    let text = params
        .str("text")
        .filter(|text| !text.trim().is_empty())
        .ok_or_else(|| ApiError::bad_request("message text is empty"))?;
    let mut content = Content::new();
    content.insert("text".to_owned(), text.into());
    copy_fields(params, &mut content, &["entities", "link_preview_options"]);
    Ok(content)
}

/// `sendPhoto` content: the sizes Telegram makes of the photo, under a fresh file id.
pub(crate) fn photo_content(params: &Params, file_id: &str) -> Result<Content, ApiError> {
    if params.get("photo").is_none() {
        return Err(ApiError::bad_request("there is no photo in the request"));
    }
    let sizes = [(90, 68), (320, 240), (800, 600)].map(|(width, height)| {
        json!({
            "file_id": format!("{file_id}-{width}"),
            "file_unique_id": format!("{file_id}-{width}-unique"),
            "width": width,
            "height": height,
        })
    });
    let mut content = Content::new();
    content.insert("photo".to_owned(), sizes.to_vec().into());
    copy_fields(params, &mut content, &["caption", "caption_entities"]);
    Ok(content)
}

/// `sendDocument` content under a fresh file id.
pub(crate) fn document_content(params: &Params, file_id: &str) -> Result<Content, ApiError> {
    if params.get("document").is_none() {
        return Err(ApiError::bad_request("there is no document in the request"));
    }
    let document = json!({
        "file_id": file_id,
        "file_unique_id": format!("{file_id}-unique"),
        "file_name": "document",
    });
    let mut content = Content::new();
    content.insert("document".to_owned(), document);
    copy_fields(params, &mut content, &["caption", "caption_entities"]);
    Ok(content)
}

/// The content of a `kind` of file (`photo`, `video`, `audio`, `document`) a call sent under its
/// `kind` field — or, for an item of a media group, under `media` — under a fresh file id.
pub(crate) fn media_content(
    params: &Params,
    kind: &str,
    file_id: &str,
) -> Result<Content, ApiError> {
    if params.get(kind).is_none() && params.get("media").is_none() {
        return Err(ApiError::bad_request(&format!(
            "there is no {kind} in the request"
        )));
    }
    let file = json!({"file_id": file_id, "file_unique_id": format!("{file_id}-unique")});
    let object = match kind {
        "photo" => json!([{
            "file_id": file_id, "file_unique_id": format!("{file_id}-unique"),
            "width": 800, "height": 600,
        }]),
        "video" => {
            let mut video = file;
            video["width"] = 640.into();
            video["height"] = 480.into();
            video["duration"] = 1.into();
            video
        }
        "audio" => {
            let mut audio = file;
            audio["duration"] = 1.into();
            audio
        }
        _ => file,
    };
    let mut content = Content::new();
    content.insert(kind.to_owned(), object);
    copy_fields(params, &mut content, &["caption", "caption_entities"]);
    Ok(content)
}

/// Content for a forwarded or copied message the fake never saw: it cannot know the original,
/// so it stands in a text naming it.
pub(crate) fn unknown_content(message_id: i64) -> Content {
    let mut content = Content::new();
    content.insert("text".to_owned(), format!("message {message_id}").into());
    content
}

/// The `forward_origin` of a message forwarded from `source`; `sent_by_bot` when the fake knows
/// the bot sent the original.
pub(crate) fn forward_origin(
    bot_id: i64,
    source: &Target,
    message_id: i64,
    sent_by_bot: bool,
) -> Value {
    let date = unix_now();
    if source.is_channel() {
        return json!({ "type": "channel", "date": date, "chat": source.json(), "message_id": message_id });
    }
    if sent_by_bot {
        return json!({ "type": "user", "date": date, "sender_user": bot_user(bot_id) });
    }
    if source.id > 0 {
        return json!({ "type": "user", "date": date, "sender_user": user(source.id) });
    }
    json!({ "type": "chat", "date": date, "sender_chat": source.json() })
}

fn copy_fields(params: &Params, content: &mut Content, keys: &[&str]) {
    for key in keys {
        if let Some(value) = params.get(key) {
            content.insert((*key).to_owned(), value.clone());
        }
    }
}
