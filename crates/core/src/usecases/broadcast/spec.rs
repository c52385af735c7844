//! What a job sends and to whom it may go: the spec, its lane, the checks that refuse a bad one, a recipients file, a state filter.

use super::*;

/// Which of Telegram's limits a broadcast is sent under.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lane {
    /// The bot's own budget, less the reserve for its replies.
    #[default]
    Standard,
    /// Telegram's paid broadcasts (`allow_paid_broadcast`): up to 1,000 messages a second apart
    /// from the bot's budget, at [`PAID_STARS_PER_MESSAGE`] Stars each, from the bot's balance.
    Paid,
}

/// What a broadcast sends and how fast.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BroadcastSpec {
    /// The bot that sends it.
    pub bot: BotId,
    /// The Bot API method, e.g. `sendMessage`: one that sends a message.
    pub method: String,
    /// The method's parameters, without `chat_id` (each recipient's is added).
    pub params: Value,
    /// Which limits it is sent under.
    pub lane: Lane,
    /// The share of the bot's rate left to its replies, in percent (standard lane).
    pub reserve_percent: u8,
    /// The paid lane's rate, messages a second.
    pub paid_rate: u32,
    /// Who started it: `cli`, or the update and key of the handler that did (which also makes a
    /// retried run's start find the job it started before).
    pub origin: String,
}

/// Why a spec or an audience cannot be broadcast; each names what was wrong.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The method sends no message.
    #[error("{0} sends no message: a broadcast sends one with sendMessage, sendPhoto, copyMessage or another send method")]
    NotASend(String),
    /// The parameters are not a JSON object.
    #[error("the message's parameters must be a JSON object")]
    NotAnObject,
    /// The parameters name a chat.
    #[error("the message's parameters name a chat_id: a broadcast adds each recipient's")]
    NamesAChat,
    /// The reserve is not a share.
    #[error("the reserve for replies is {0} %: it must be between 0 and 90")]
    Reserve(u8),
    /// The paid rate is out of Telegram's range.
    #[error("the paid lane's rate is {0} messages a second: it must be between 1 and 1000")]
    PaidRate(u32),
    /// Nobody to send to.
    #[error("the audience is empty: there is nobody to send to")]
    EmptyAudience,
    /// A handler's list of chats is longer than one write of its job holds.
    #[error("the list holds {0} chats; a handler's broadcast lists at most {MAX_LISTED} (a state audience, or `tgq broadcast start --recipients FILE`, takes any number)")]
    TooManyListed(usize),
    /// A line of a recipients file is not a chat id.
    #[error("line {line} of the recipients is not a chat id: {text:?}")]
    BadLine {
        /// The line's number, from 1.
        line: usize,
        /// The line as it was (cut to 40 characters).
        text: String,
    },
}

impl BroadcastSpec {
    /// `method` with `params` from `bot` in the standard lane, leaving the bot's replies the
    /// default reserve; `origin` says who started it.
    pub fn standard(bot: BotId, method: &str, params: Value, origin: &str) -> Self {
        Self {
            bot,
            method: method.to_owned(),
            params,
            lane: Lane::Standard,
            reserve_percent: DEFAULT_RESERVE_PERCENT,
            paid_rate: DEFAULT_PAID_RATE,
            origin: origin.to_owned(),
        }
    }

    /// Checks what can be checked before anything is sent.
    pub fn check(&self) -> Result<(), SpecError> {
        if !sends_a_message(&self.method) || self.method.starts_with("editMessage") {
            return Err(SpecError::NotASend(self.method.clone()));
        }
        let Some(params) = self.params.as_object() else {
            return Err(SpecError::NotAnObject);
        };
        if params.contains_key("chat_id") {
            return Err(SpecError::NamesAChat);
        }
        if self.reserve_percent > 90 {
            return Err(SpecError::Reserve(self.reserve_percent));
        }
        if !(1..=1000).contains(&self.paid_rate) {
            return Err(SpecError::PaidRate(self.paid_rate));
        }
        Ok(())
    }

    /// The job's own rate, messages a second, for a bot allowed `bot_rate` (`None`: no limit).
    pub(crate) fn lane_rate(&self, bot_rate: Option<u32>) -> Option<u32> {
        match self.lane {
            Lane::Paid => Some(self.paid_rate),
            Lane::Standard => bot_rate.map(|rate| {
                let share = u64::from(rate) * u64::from(100 - self.reserve_percent.min(90)) / 100;
                u32::try_from(share).unwrap_or(u32::MAX).max(1)
            }),
        }
    }

    /// The parameters of the call to one recipient.
    pub(super) fn params_for(&self, chat: i64) -> Value {
        let mut params = self.params.clone();
        params["chat_id"] = chat.into();
        if self.lane == Lane::Paid {
            params["allow_paid_broadcast"] = true.into();
        }
        params
    }
}

/// Reads a recipients file: one chat id a line; blank lines and lines starting with `#` are
/// skipped, and a chat listed twice is sent to once. Refused, naming the first bad line, before
/// anything is stored; an empty list is refused too.
pub fn parse_recipients(text: &str) -> Result<Vec<i64>, SpecError> {
    let mut seen = HashSet::new();
    let mut chats = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let chat = trimmed
            .parse::<i64>()
            .ok()
            .filter(|chat| *chat != 0)
            .ok_or_else(|| SpecError::BadLine {
                line: index + 1,
                text: trimmed.chars().take(40).collect(),
            })?;
        if seen.insert(chat) {
            chats.push(chat);
        }
    }
    if chats.is_empty() {
        return Err(SpecError::EmptyAudience);
    }
    Ok(chats)
}

/// Which chats' states an audience takes: those of one format, and optionally with one value at a
/// JSON pointer (`/subscribed` = `true`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StateFilter {
    /// The state's format tag (`ChatState::FORMAT`); any when `None`.
    pub format: Option<String>,
    /// A JSON pointer into the state and the value it must hold.
    pub equals: Option<(String, Value)>,
}

impl StateFilter {
    /// Whether a chat's state, of `format` and holding `json`, is in the audience.
    pub fn matches(&self, format: &str, json: &Value) -> bool {
        if self.format.as_deref().is_some_and(|f| f != format) {
            return false;
        }
        match &self.equals {
            Some((pointer, value)) => json.pointer(pointer) == Some(value),
            None => true,
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn spec() -> BroadcastSpec {
        BroadcastSpec::standard(
            BotId::new("b").unwrap(),
            "sendMessage",
            json!({"text": "hi"}),
            "cli",
        )
    }

    #[test]
    fn a_recipients_file_with_a_bad_line_is_refused_naming_it() {
        assert_eq!(
            parse_recipients("# subscribers\n42\n\n-100123\n42\n7\n"),
            Ok(vec![42, -100123, 7])
        );
        assert_eq!(
            parse_recipients("42\n@channel\n7"),
            Err(SpecError::BadLine {
                line: 2,
                text: "@channel".into()
            })
        );
        assert_eq!(
            parse_recipients("1\n0\n"),
            Err(SpecError::BadLine {
                line: 2,
                text: "0".into()
            })
        );
        assert_eq!(
            parse_recipients("# nobody\n\n"),
            Err(SpecError::EmptyAudience)
        );
    }

    #[test]
    fn a_spec_that_sends_nothing_or_names_a_chat_is_refused() {
        assert_eq!(spec().check(), Ok(()));
        let mut s = spec();
        s.method = "getChat".into();
        assert_eq!(s.check(), Err(SpecError::NotASend("getChat".into())));
        let mut s = spec();
        s.method = "editMessageText".into();
        assert!(s.check().is_err());
        let mut s = spec();
        s.params = json!({"chat_id": 1, "text": "x"});
        assert_eq!(s.check(), Err(SpecError::NamesAChat));
        let mut s = spec();
        s.reserve_percent = 95;
        assert_eq!(s.check(), Err(SpecError::Reserve(95)));
        let mut s = spec();
        s.paid_rate = 1001;
        assert_eq!(s.check(), Err(SpecError::PaidRate(1001)));
    }

    #[test]
    fn the_standard_lane_leaves_the_reserve_and_the_paid_lane_has_its_own_rate() {
        assert_eq!(spec().lane_rate(Some(30)), Some(24));
        assert_eq!(spec().lane_rate(None), None);
        let mut s = spec();
        s.lane = Lane::Paid;
        s.paid_rate = 500;
        assert_eq!(s.lane_rate(Some(30)), Some(500));
        assert_eq!(s.params_for(9)["allow_paid_broadcast"], json!(true));
        assert_eq!(spec().params_for(9), json!({"text": "hi", "chat_id": 9}));
    }

    #[test]
    fn a_state_filter_takes_the_format_and_the_value_at_its_pointer() {
        let filter = StateFilter {
            format: Some("subs/v1".into()),
            equals: Some(("/on".into(), json!(true))),
        };
        assert!(filter.matches("subs/v1", &json!({"on": true})));
        assert!(!filter.matches("subs/v1", &json!({"on": false})));
        assert!(!filter.matches("cart/v1", &json!({"on": true})));
        assert!(StateFilter::default().matches("any", &json!(null)));
    }
}
