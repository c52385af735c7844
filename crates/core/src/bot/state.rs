//! Per-chat state (docs/design/worker.md §2): a value of the bot's own serde type per update group,
//! loaded with the claim and written in the same conditional write that settles the update `DONE`.
//! A run that does not finish writes nothing, and a finished update never runs again, so a change
//! is applied exactly once; the queue runs one update of a group at a time, so every
//! read-modify-write is serial, and a version number catches any writer that slipped in anyway.
//!
//! The stored value carries its format tag ([`ChatState::FORMAT`]): a handler reading it as another
//! type is refused with both names instead of misreading it.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::PortError;
use crate::ids::StateKey;

/// The most a group's state may take as JSON. DynamoDB bills a write by the item's whole size, and
/// the state is written with every update of the chat that changes it: keep ids and counters here,
/// not documents.
pub const MAX_STATE_BYTES: usize = 64 * 1024;

/// A type a bot keeps per chat (per user for updates without a chat: the update's group).
///
/// ```
/// #[derive(serde::Serialize, serde::Deserialize, Default)]
/// struct Cart { items: Vec<String> }
///
/// impl tgq_core::state::ChatState for Cart {
///     const FORMAT: &'static str = "cart/v1";
/// }
/// ```
pub trait ChatState: Serialize + DeserializeOwned {
    /// Names the type and the version of its layout, stored with every value. Change it whenever old
    /// values would no longer read as the type (a renamed or retyped field): a value stored under
    /// another tag is refused with both tags named ([`StateError::WrongFormat`]), and the handler
    /// can read it with the old type and convert it (see [`crate::Context::state_format`]).
    const FORMAT: &'static str;
}

/// A group's state as the store keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredState {
    /// The format tag it was written with.
    pub format: String,
    /// The value, as JSON.
    pub json: String,
    /// How many times it was written: 1 after the first write.
    pub version: u64,
    /// tgq's part: the chat's pending timers and its flow, as [`crate::timer::ChatTime`] JSON;
    /// `None` when it has neither.
    pub time: Option<String>,
}

impl StoredState {
    /// The format tag tgq writes when only its own part changed and the bot never set a value.
    pub const NO_VALUE: &'static str = "";

    /// Whether the bot ever set a value (and not only tgq's part was written).
    pub fn has_value(&self) -> bool {
        self.format != Self::NO_VALUE
    }
}

/// A run's new state for its group, written with the `DONE` settle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateWrite {
    /// Whose state.
    pub key: StateKey,
    /// The format tag of the new value.
    pub format: String,
    /// The new value, as JSON, at most [`MAX_STATE_BYTES`].
    pub json: String,
    /// The version the run read (0 when nothing was stored): the write is refused when the stored
    /// version is another, because then someone else wrote the state after this run read it.
    pub read_version: u64,
    /// tgq's new part ([`StoredState::time`]).
    pub time: Option<String>,
}

impl StateWrite {
    /// The state after this write, if `stored` is what the run read; [`PortError::Conflict`]
    /// otherwise. The rule every store applies, in one place (DynamoDB states it as a condition).
    pub(crate) fn apply(&self, stored: Option<&StoredState>) -> Result<StoredState, PortError> {
        let found = stored.map_or(0, |s| s.version);
        if found != self.read_version {
            return Err(PortError::Conflict {
                what: "state write",
                found,
                read: self.read_version,
            });
        }
        Ok(StoredState {
            format: self.format.clone(),
            json: self.json.clone(),
            version: self.read_version + 1,
            time: self.time.clone(),
        })
    }
}

/// Why a chat's state cannot be read or written: a mistake in the bot or a changed type, never
/// worth a retry.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The stored value was written under another format tag.
    #[error("the chat's state is stored as {stored:?}, but the handler reads it as {expected:?}: read it with the type of {stored:?} and convert it, or change the type back")]
    WrongFormat {
        /// The stored tag.
        stored: String,
        /// The tag of the type the handler asked for.
        expected: &'static str,
    },
    /// The stored value has the right tag but does not decode as the type.
    #[error("the chat's state ({format:?}) does not decode as its type; change FORMAT whenever old values would no longer read")]
    Undecodable {
        /// The tag.
        format: String,
        /// serde's account of it (names fields, never values).
        #[source]
        source: serde_json::Error,
    },
    /// The new value does not serialize as JSON.
    #[error("the chat's new state ({format:?}) does not serialize")]
    Unserializable {
        /// The tag.
        format: &'static str,
        /// serde's account of it.
        #[source]
        source: serde_json::Error,
    },
    /// The new value is over [`MAX_STATE_BYTES`].
    #[error("the chat's new state ({format:?}) takes {size} bytes as JSON, over the {MAX_STATE_BYTES} byte limit")]
    TooLarge {
        /// The tag.
        format: &'static str,
        /// Its size as JSON.
        size: usize,
    },
}

/// Reads a stored value as `T`, refusing another format.
pub(crate) fn decode<T: ChatState>(format: &str, json: &str) -> Result<T, StateError> {
    if format != T::FORMAT {
        return Err(StateError::WrongFormat {
            stored: format.to_owned(),
            expected: T::FORMAT,
        });
    }
    serde_json::from_str(json).map_err(|source| StateError::Undecodable {
        format: format.to_owned(),
        source,
    })
}

/// Serializes a new value, refusing one over the size limit.
pub(crate) fn encode<T: ChatState>(value: &T) -> Result<String, StateError> {
    let json = serde_json::to_string(value).map_err(|source| StateError::Unserializable {
        format: T::FORMAT,
        source,
    })?;
    if json.len() > MAX_STATE_BYTES {
        return Err(StateError::TooLarge {
            format: T::FORMAT,
            size: json.len(),
        });
    }
    Ok(json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{BotId, GroupKey};
    use serde::Deserialize;

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Counter {
        n: u32,
    }

    impl ChatState for Counter {
        const FORMAT: &'static str = "counter/v1";
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Renamed {
        count: u32,
    }

    impl ChatState for Renamed {
        const FORMAT: &'static str = "counter/v2";
    }

    #[derive(Serialize, Deserialize, Debug)]
    struct Blob {
        text: String,
    }

    impl ChatState for Blob {
        const FORMAT: &'static str = "blob/v1";
    }

    #[test]
    fn a_value_reads_back_only_as_the_format_it_was_written_with() {
        let json = encode(&Counter { n: 3 }).unwrap();
        assert_eq!(
            decode::<Counter>("counter/v1", &json).unwrap(),
            Counter { n: 3 }
        );
        let error = decode::<Renamed>("counter/v1", &json).unwrap_err();
        assert!(
            matches!(&error, StateError::WrongFormat { stored, expected } if stored == "counter/v1" && *expected == "counter/v2"),
            "{error:?}"
        );
        assert!(error.to_string().contains("\"counter/v1\""), "{error}");
    }

    #[test]
    fn a_value_that_no_longer_decodes_under_its_own_tag_is_refused_not_guessed() {
        let error = decode::<Counter>("counter/v1", r#"{"count": 3}"#).unwrap_err();
        assert!(matches!(error, StateError::Undecodable { .. }), "{error:?}");
    }

    #[test]
    fn a_value_over_the_size_limit_is_refused_with_its_size() {
        let big = Blob {
            text: "x".repeat(MAX_STATE_BYTES),
        };
        let error = encode(&big).unwrap_err();
        assert!(
            matches!(error, StateError::TooLarge { size, .. } if size > MAX_STATE_BYTES),
            "{error:?}"
        );
        let fits = Blob {
            text: "x".repeat(MAX_STATE_BYTES - 16),
        };
        assert!(encode(&fits).is_ok());
    }

    #[test]
    fn a_write_applies_only_to_the_version_it_read() {
        let write = StateWrite {
            key: StateKey::new(BotId::new("b").unwrap(), GroupKey::new("1")),
            format: "counter/v1".into(),
            json: "{}".into(),
            read_version: 0,
            time: None,
        };
        assert_eq!(write.apply(None).unwrap().version, 1);
        let stored = write.apply(None).unwrap();
        assert!(matches!(
            write.apply(Some(&stored)),
            Err(PortError::Conflict {
                found: 1,
                read: 0,
                ..
            })
        ));
        let next = StateWrite {
            read_version: 1,
            ..write
        };
        assert_eq!(next.apply(Some(&stored)).unwrap().version, 2);
    }
}
