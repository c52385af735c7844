//! Inline keyboards whose buttons carry typed data: `Keyboard::new().button("Done", &Press::Done(3))`
//! writes `Press::Done(3)` into the button's `callback_data`, and a router built with
//! [`Router::keyboard_buttons`](crate::Router::keyboard_buttons) reads it back as the same value.
//!
//! The data is the value's compact JSON (`{"Done":3}`); Telegram takes 1 to
//! [`MAX_BUTTON_DATA_BYTES`] bytes of it. A value that does not fit, or does not serialize, is kept
//! as the keyboard's [`KeyboardError`], so that a reply carrying the keyboard is refused with what
//! was wrong before Telegram refuses it with `BUTTON_DATA_INVALID`.

use serde::de::DeserializeOwned;
use serde::Serialize;
use teloxide_core::types::{InlineKeyboardButton, InlineKeyboardMarkup, ReplyMarkup};

/// The most bytes of `callback_data` Telegram takes.
pub const MAX_BUTTON_DATA_BYTES: usize = 64;

/// Rows of inline buttons, built left to right and top to bottom.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Keyboard {
    rows: Vec<Vec<InlineKeyboardButton>>,
    error: Option<KeyboardError>,
}

/// A button whose data Telegram would refuse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyboardError {
    /// Its data is longer than Telegram takes.
    #[error(
        "the data of button {text:?} is {bytes} bytes as JSON ({data}); Telegram takes at most 64"
    )]
    TooLong {
        /// The button's label.
        text: String,
        /// What the value serialized to.
        data: String,
        /// Its length.
        bytes: usize,
    },
    /// Its data did not serialize.
    #[error("the data of button {text:?} does not serialize: {reason}")]
    Unserializable {
        /// The button's label.
        text: String,
        /// Why.
        reason: String,
    },
}

impl Keyboard {
    /// An empty keyboard.
    pub fn new() -> Self {
        Self::default()
    }

    /// One button per row, top to bottom: a list to pick from.
    pub fn column<T: Serialize>(buttons: impl IntoIterator<Item = (impl Into<String>, T)>) -> Self {
        buttons
            .into_iter()
            .fold(Keyboard::new(), |keyboard, (text, data)| {
                keyboard.row().button(text, &data)
            })
    }

    /// A button labelled `text` at the end of the last row; pressing it routes as
    /// `Route::Button(data, query)`.
    pub fn button(mut self, text: impl Into<String>, data: &impl Serialize) -> Self {
        let text = text.into();
        let data = match serde_json::to_string(data) {
            Ok(data) if data.len() <= MAX_BUTTON_DATA_BYTES => data,
            Ok(data) => {
                self.error.get_or_insert(KeyboardError::TooLong {
                    text: text.clone(),
                    bytes: data.len(),
                    data,
                });
                String::new()
            }
            Err(e) => {
                self.error.get_or_insert(KeyboardError::Unserializable {
                    text: text.clone(),
                    reason: e.to_string(),
                });
                String::new()
            }
        };
        self.push(InlineKeyboardButton::callback(text, data))
    }

    /// A button that opens `url`.
    pub fn url(self, text: impl Into<String>, url: url::Url) -> Self {
        self.push(InlineKeyboardButton::url(text, url))
    }

    /// Any button teloxide-core can describe (a web app, a login, a switch to inline mode, a pay
    /// button), at the end of the last row.
    pub fn push(mut self, button: InlineKeyboardButton) -> Self {
        match self.rows.last_mut() {
            Some(row) => row.push(button),
            None => self.rows.push(vec![button]),
        }
        self
    }

    /// Starts a new row: the next button goes under the others.
    pub fn row(mut self) -> Self {
        if self.rows.last().is_some_and(|row| !row.is_empty()) {
            self.rows.push(Vec::new());
        }
        self
    }

    /// Whether it has no button.
    pub fn is_empty(&self) -> bool {
        self.rows.iter().all(Vec::is_empty)
    }

    /// The markup Telegram takes, or why Telegram would refuse it.
    pub fn markup(self) -> Result<InlineKeyboardMarkup, KeyboardError> {
        match self.error {
            Some(error) => Err(error),
            None => Ok(InlineKeyboardMarkup::new(
                self.rows.into_iter().filter(|row| !row.is_empty()),
            )),
        }
    }
}

impl From<Keyboard> for ReplyMarkup {
    /// The keyboard as it is, even with a button Telegram would refuse (use [`Keyboard::markup`]
    /// to check first).
    fn from(keyboard: Keyboard) -> Self {
        ReplyMarkup::InlineKeyboard(InlineKeyboardMarkup::new(
            keyboard.rows.into_iter().filter(|row| !row.is_empty()),
        ))
    }
}

/// The value a [`Keyboard`] wrote into a button's data.
pub(crate) fn decode<B: DeserializeOwned>(data: &str) -> Option<B> {
    serde_json::from_str(data).ok()
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Press {
        Done(usize),
        Clear,
    }

    fn data(markup: &InlineKeyboardMarkup) -> Vec<Vec<String>> {
        use teloxide_core::types::InlineKeyboardButtonKind::CallbackData;
        markup
            .inline_keyboard
            .iter()
            .map(|row| {
                row.iter()
                    .map(|b| match &b.kind {
                        CallbackData(data) => data.clone(),
                        other => format!("{other:?}"),
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn buttons_carry_their_value_as_compact_json_row_by_row() {
        let markup = Keyboard::new()
            .button("milk", &Press::Done(0))
            .button("eggs", &Press::Done(1))
            .row()
            .button("Clear", &Press::Clear)
            .markup()
            .unwrap();
        assert_eq!(
            data(&markup),
            [vec![r#"{"Done":0}"#, r#"{"Done":1}"#], vec![r#""Clear""#]]
        );
        assert_eq!(decode::<Press>(r#"{"Done":1}"#), Some(Press::Done(1)));
        assert_eq!(decode::<Press>("pressed:1"), None);
    }

    #[test]
    fn data_longer_than_telegram_takes_is_named_with_its_button() {
        let long = "x".repeat(70);
        let error = Keyboard::new()
            .button("ok", &Press::Clear)
            .button("too long", &long)
            .markup()
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "the data of button \"too long\" is 72 bytes as JSON (\"{long}\"); Telegram takes at most 64"
            )
        );
    }

    #[test]
    fn a_column_has_a_row_per_button() {
        let markup = Keyboard::column([("a", Press::Done(0)), ("b", Press::Done(1))])
            .markup()
            .unwrap();
        assert_eq!(
            data(&markup),
            [vec![r#"{"Done":0}"#], vec![r#"{"Done":1}"#]]
        );
    }

    #[test]
    fn a_new_row_is_started_only_after_a_button() {
        let markup = Keyboard::new()
            .row()
            .button("a", &1)
            .row()
            .row()
            .button("b", &2)
            .markup()
            .unwrap();
        assert_eq!(data(&markup), [vec!["1"], vec!["2"]]);
        assert!(Keyboard::new().row().is_empty());
    }
}
