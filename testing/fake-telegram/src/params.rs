//! A call's parameters, read the lenient way the Bot API reads them.

use serde_json::{Map, Value};

/// The merged query-string and body parameters of one call.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Params(Map<String, Value>);

/// The `chat_id` (or `from_chat_id`) of a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ChatParam {
    Missing,
    Id(i64),
    /// A public chat addressed as `@username`, without the `@`.
    Username(String),
    /// Present but neither a number nor `@username`.
    Invalid,
}

impl ChatParam {
    /// The numeric chat id, when the call named one.
    pub(crate) fn id(&self) -> Option<i64> {
        match self {
            Self::Id(id) => Some(*id),
            _ => None,
        }
    }
}

impl Params {
    pub(crate) fn new(map: Map<String, Value>) -> Self {
        Self(map)
    }

    /// The parameters of a JSON body: an object's fields, none for anything else.
    #[cfg(test)]
    pub(crate) fn of(value: Value) -> Self {
        match value {
            Value::Object(map) => Self(map),
            _ => Self::default(),
        }
    }

    /// Builds parameters from `key=value` pairs, reading values that hold JSON objects or arrays
    /// (such as `reply_markup`) as JSON, like Telegram does.
    pub(crate) fn from_pairs(pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        let map = pairs
            .into_iter()
            .map(|(key, value)| (key, form_value(value)))
            .collect();
        Self(map)
    }

    /// The fields of one item of a list parameter (a media group's `media`), as parameters.
    pub(crate) fn item(item: &Value) -> Self {
        Self(item.as_object().cloned().unwrap_or_default())
    }

    /// Sets one parameter.
    pub(crate) fn insert(&mut self, key: String, value: Value) {
        self.0.insert(key, value);
    }

    /// Adds `other`'s parameters, its values winning over ones already present.
    pub(crate) fn merge(&mut self, other: Params) {
        self.0.extend(other.0);
    }

    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key)
    }

    /// An integer given as a JSON number or as a string holding one.
    pub(crate) fn int(&self, key: &str) -> Option<i64> {
        match self.0.get(key)? {
            Value::Number(number) => number.as_i64(),
            Value::String(text) => text.trim().parse().ok(),
            _ => None,
        }
    }

    pub(crate) fn str(&self, key: &str) -> Option<&str> {
        self.0.get(key)?.as_str()
    }

    /// A boolean given as JSON `true` or as the string `"true"`.
    pub(crate) fn flag(&self, key: &str) -> bool {
        match self.0.get(key) {
            Some(Value::Bool(flag)) => *flag,
            Some(Value::String(text)) => text.eq_ignore_ascii_case("true"),
            _ => false,
        }
    }

    pub(crate) fn chat(&self) -> ChatParam {
        self.chat_at("chat_id")
    }

    /// Reads a chat given as a number, a string holding a number, or `"@username"`.
    pub(crate) fn chat_at(&self, key: &str) -> ChatParam {
        match self.0.get(key) {
            None | Some(Value::Null) => ChatParam::Missing,
            Some(Value::Number(number)) => {
                number.as_i64().map_or(ChatParam::Invalid, ChatParam::Id)
            }
            Some(Value::String(text)) => chat_from_text(text.trim()),
            Some(_) => ChatParam::Invalid,
        }
    }

    pub(crate) fn into_value(self) -> Value {
        Value::Object(self.0)
    }
}

fn chat_from_text(text: &str) -> ChatParam {
    if text.is_empty() {
        return ChatParam::Missing;
    }
    if let Some(username) = text.strip_prefix('@') {
        return ChatParam::Username(username.to_owned());
    }
    text.parse().map_or(ChatParam::Invalid, ChatParam::Id)
}

fn form_value(value: String) -> Value {
    if value.starts_with('{') || value.starts_with('[') {
        return serde_json::from_str(&value).unwrap_or(Value::String(value));
    }
    Value::String(value)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn chat_ids_are_read_from_numbers_strings_and_usernames() {
        assert_eq!(
            Params::of(json!({"chat_id": -100})).chat(),
            ChatParam::Id(-100)
        );
        assert_eq!(
            Params::of(json!({"chat_id": "42"})).chat(),
            ChatParam::Id(42)
        );
        assert_eq!(
            Params::of(json!({"chat_id": "@news"})).chat(),
            ChatParam::Username("news".to_owned())
        );
        assert_eq!(
            Params::of(json!({"chat_id": "news"})).chat(),
            ChatParam::Invalid
        );
        assert_eq!(
            Params::of(json!({"chat_id": ""})).chat(),
            ChatParam::Missing
        );
        assert_eq!(Params::of(json!({})).chat(), ChatParam::Missing);
    }

    #[test]
    fn form_values_holding_json_are_read_as_json() {
        let params = Params::from_pairs([
            (
                "reply_markup".to_owned(),
                r#"{"inline_keyboard":[]}"#.to_owned(),
            ),
            ("text".to_owned(), "{not json".to_owned()),
        ]);

        assert_eq!(
            params.get("reply_markup"),
            Some(&json!({"inline_keyboard": []}))
        );
        assert_eq!(params.str("text"), Some("{not json"));
    }
}
