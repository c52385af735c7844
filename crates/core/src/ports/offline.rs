//! What an offline Bot API answers (local mode's outbox without a token, a replayed action): the
//! `result` of a call it never made, built from the call's own parameters. No other module is used
//! here, so records, the outbox and the client all can.

use serde_json::{json, Value};

/// Methods that send or change a message: Telegram's flood limits count them, and an offline answer
/// to them is a message.
pub fn sends_a_message(method: &str) -> bool {
    method.starts_with("send") && method != "sendChatAction"
        || method.starts_with("forward")
        || method.starts_with("copy")
        || method.starts_with("editMessage")
}

/// The `result` Telegram would give for a call an offline outbox accepted: a sent message for the
/// methods that send one, `true` for the rest. `message_id` is the outbox's id for the message.
pub fn offline_result(method: &str, params: &Value, message_id: i64, unix_time: i64) -> Value {
    if sends_a_message(method) {
        offline_message(params, message_id, unix_time)
    } else {
        Value::Bool(true)
    }
}

/// A Message object for a call's parameters: its chat, its text and buttons, the given id.
pub fn offline_message(params: &Value, message_id: i64, unix_time: i64) -> Value {
    let chat_id = params.get("chat_id").and_then(chat_id_of).unwrap_or(0);
    let chat = if chat_id > 0 {
        json!({"id": chat_id, "type": "private", "first_name": "offline"})
    } else {
        json!({"id": chat_id, "type": "supergroup", "title": "offline"})
    };
    let mut message = json!({
        "message_id": params.get("message_id").and_then(Value::as_i64).unwrap_or(message_id),
        "date": unix_time,
        "chat": chat,
        "from": {"id": 1, "is_bot": true, "first_name": "tgq", "username": "tgq_offline_bot"},
    });
    for field in ["text", "caption", "reply_markup"] {
        if let Some(value) = params.get(field) {
            message[field] = value.clone();
        }
    }
    // What a file the call sent becomes, under an id of the outbox's: enough for a bot to read its
    // `file_id` back, as it would from Telegram.
    let id = message["message_id"].as_i64().unwrap_or(message_id);
    let file =
        json!({"file_id": format!("offline-file-{id}"), "file_unique_id": format!("offline-{id}")});
    let sized = |mut file: Value| {
        file["width"] = 1.into();
        file["height"] = 1.into();
        file
    };
    for field in [
        "photo",
        "document",
        "audio",
        "video",
        "voice",
        "animation",
        "sticker",
    ] {
        if params.get(field).is_none() {
            continue;
        }
        message[field] = match field {
            "photo" => json!([sized(file.clone())]),
            "video" | "animation" => {
                let mut video = sized(file.clone());
                video["duration"] = 0.into();
                video
            }
            "audio" | "voice" => {
                let mut audio = file.clone();
                audio["duration"] = 0.into();
                audio
            }
            "sticker" => {
                let mut sticker = sized(file.clone());
                sticker["type"] = "regular".into();
                sticker["is_animated"] = false.into();
                sticker["is_video"] = false.into();
                sticker
            }
            _ => file.clone(),
        };
    }
    message
}

/// A chat id given as a number or as a string of digits (`@username` has none).
pub fn chat_id_of(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}
