//! How one recipient's failed send ends (docs/design/broadcasts.md, "Outcomes"): by what Telegram's
//! answer is about — the transport, the chat, or the message and the bot — decided here alone.

use crate::policy::{Jitter, RetryPolicy};
use crate::record::Timestamp;
use crate::telegram::TelegramError;

use super::{BroadcastJob, Outcome, MAX_ATTEMPTS};

/// What a refusal is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum About {
    /// This chat: the recipient ends, the others go on.
    Chat,
    /// The chat, which is gone for good (a deactivated group).
    ChatGone,
    /// The message or the bot: every other recipient would meet it too, so the job pauses.
    Message,
    /// Nothing the words say.
    Unknown,
}

/// Words of Telegram's that put a refusal on one chat: the bot cannot write there, the id names
/// nothing it can reach, the topic is closed. Matched lowercase.
const ABOUT_THE_CHAT: [&str; 14] = [
    "chat not found",
    "peer_id_invalid",
    "rights",
    "chat_write_forbidden",
    "chat_restricted",
    "not a member",
    "bot was kicked",
    "topic_closed",
    "topic closed",
    "topic_deleted",
    "thread not found",
    "user_is_bot",
    "bots can't send messages to bots",
    "have no rights",
];

/// Words that say the chat is gone for good.
const CHAT_GONE: [&str; 3] = [
    "group chat was deactivated",
    "chat was deleted",
    "channel_private",
];

/// Words of Telegram's that put a refusal on the message itself (its text, markup or file) or on
/// the bot (its token, its Stars): no recipient would take it. Matched lowercase.
const ABOUT_THE_MESSAGE: [&str; 22] = [
    "message text is empty",
    "text must be non-empty",
    "can't parse entities",
    "message is too long",
    "caption is too long",
    "wrong file identifier",
    "wrong remote file identifier",
    "failed to get http url content",
    "wrong http url",
    "invalid file http url",
    "wrong type of the web page content",
    "unsupported url protocol",
    "file must be non-empty",
    "button_data_invalid",
    "button_url_invalid",
    "can't parse inline keyboard button",
    "reply markup is too long",
    "photo_invalid_dimensions",
    "media_empty",
    "not enough stars",
    "balance_too_low",
    "payment_required",
];

fn about(error: &TelegramError) -> About {
    let TelegramError::Api { code, description } = error else {
        return About::Unknown;
    };
    // The token is refused (revoked, or another bot's), or the method is unknown to it.
    if matches!(code, 401 | 404) {
        return About::Message;
    }
    let said = description.to_ascii_lowercase();
    let says = |words: &[&str]| words.iter().any(|w| said.contains(w));
    if says(&CHAT_GONE) {
        About::ChatGone
    } else if says(&ABOUT_THE_CHAT) {
        About::Chat
    } else if says(&ABOUT_THE_MESSAGE) {
        About::Message
    } else {
        About::Unknown
    }
}

/// How a call's failure ends a recipient's send, `(chat, attempts)` being the recipient's, as the
/// job stands at `now`:
/// - a flood wait holds it ([`Outcome::Held`]); an outage of Telegram's — a request that never
///   left, a 5xx — leaves it to be sent again with no attempt spent ([`Outcome::Unsent`]);
/// - a call that may have reached Telegram and was never answered is [`Outcome::Uncertain`];
/// - a refusal about the chat ends the recipient, gone or failed; one about the message or the
///   bot puts it back and pauses the job ([`Outcome::Halted`]), whenever it comes;
/// - a refusal nothing tells apart is the message's, by three of the first recipients
///   ([`Outcome::Refused`]) until one took the message, and the recipient's after.
pub fn outcome_of(
    error: &TelegramError,
    (chat, attempts): (i64, u32),
    job: &BroadcastJob,
    retry: &RetryPolicy,
    now: Timestamp,
) -> Outcome {
    let said = error.to_string();
    if let TelegramError::RetryAfter(wait) = error {
        return Outcome::Held {
            due: now.plus(*wait).0,
        };
    }
    if error.is_outage() {
        return Outcome::Unsent {
            due: now.0,
            error: said,
        };
    }
    if let Some(gone) = error.recipient_gone(Some(chat)) {
        return Outcome::Gone {
            reason: gone.as_str().to_owned(),
        };
    }
    if !error.is_definite() {
        return Outcome::Uncertain { why: said };
    }
    // Any other 403 means this chat cannot be written to: the bot was kicked from the group, the
    // user never started it, or it is no member of the channel. Trying again never helps.
    if let TelegramError::Api { code: 403, .. } = error {
        return Outcome::Gone { reason: said };
    }
    match about(error) {
        About::Message => return Outcome::Halted { error: said },
        About::ChatGone => return Outcome::Gone { reason: said },
        About::Chat => return Outcome::Failed { error: said },
        About::Unknown => {}
    }
    match error.class() {
        crate::ErrorClass::Permanent if job.counts.sent == 0 => Outcome::Refused { error: said },
        crate::ErrorClass::Permanent => Outcome::Failed { error: said },
        _ if attempts + 1 >= MAX_ATTEMPTS => Outcome::Failed { error: said },
        _ => Outcome::Retry {
            due: now.plus(retry.backoff(attempts + 1, Jitter::random())).0,
            error: said,
        },
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::broadcast::{BroadcastId, BroadcastSpec};
    use crate::ids::BotId;

    fn api(code: u16, d: &str) -> TelegramError {
        TelegramError::Api {
            code,
            description: d.into(),
        }
    }

    fn judged(error: &TelegramError, chat: i64, sent: u64) -> Outcome {
        let spec = BroadcastSpec::standard(
            BotId::new("b").unwrap(),
            "sendMessage",
            serde_json::json!({"text": "hi"}),
            "cli",
        );
        let mut job = BroadcastJob::new(BroadcastId(1), spec, 10, Timestamp(1_000));
        job.counts.sent = sent;
        outcome_of(
            error,
            (chat, 0),
            &job,
            &RetryPolicy::default(),
            Timestamp(1_000),
        )
    }

    #[test]
    fn an_outage_of_telegram_s_leaves_the_recipient_to_send_again_and_only_a_lost_answer_is_uncertain(
    ) {
        for outage in [
            TelegramError::NotSent("connection refused".into()),
            api(502, "Bad Gateway"),
            api(500, "Internal Server Error"),
            TelegramError::InvalidResponse { status: 503 },
        ] {
            for sent in [0, 5] {
                assert!(
                    matches!(judged(&outage, 5, sent), Outcome::Unsent { due: 1_000, .. }),
                    "{outage:?}"
                );
            }
        }
        for lost in [
            TelegramError::Timeout,
            TelegramError::Network("connection reset".into()),
            TelegramError::InvalidResponse { status: 504 },
        ] {
            // Uncertain, saying why.
            assert_eq!(
                judged(&lost, 5, 5),
                Outcome::Uncertain {
                    why: lost.to_string()
                },
                "{lost:?}"
            );
        }
        assert_eq!(
            judged(&TelegramError::RetryAfter(Duration::from_secs(3)), 5, 0),
            Outcome::Held { due: 4_000 }
        );
    }

    #[test]
    fn a_refusal_about_the_message_or_the_bot_halts_the_job_before_or_after_its_first_success() {
        for refusal in [
            api(401, "Unauthorized"),
            api(404, "Not Found"),
            api(400, "Bad Request: failed to get HTTP URL content"),
            api(400, "Bad Request: can't parse entities: unclosed tag"),
            api(400, "Bad Request: wrong file identifier/HTTP URL specified"),
        ] {
            for sent in [0, 5] {
                assert!(
                    matches!(judged(&refusal, 5, sent), Outcome::Halted { .. }),
                    "{refusal:?} with {sent} sent"
                );
            }
        }
    }

    #[test]
    fn a_refusal_about_the_chat_ends_that_recipient_before_or_after_the_first_success() {
        for (refusal, chat) in [
            (api(400, "Bad Request: PEER_ID_INVALID"), 5),
            (api(400, "Bad Request: chat not found"), -100),
            (api(400, "Bad Request: TOPIC_CLOSED"), -100),
            (
                api(
                    400,
                    "Bad Request: not enough rights to send text messages to the chat",
                ),
                -100,
            ),
        ] {
            for sent in [0, 5] {
                assert!(
                    matches!(judged(&refusal, chat, sent), Outcome::Failed { .. }),
                    "{refusal:?} with {sent} sent"
                );
            }
        }
        for (gone, chat) in [
            (api(403, "Forbidden: bot was blocked by the user"), 5),
            (api(403, "Forbidden: user is deactivated"), 5),
            (api(400, "Bad Request: chat not found"), 5),
            (
                api(403, "Forbidden: bot was kicked from the group chat"),
                -100,
            ),
            (api(400, "Bad Request: group chat was deactivated"), -100),
        ] {
            for sent in [0, 5] {
                assert!(
                    matches!(judged(&gone, chat, sent), Outcome::Gone { .. }),
                    "{gone:?} with {sent} sent"
                );
            }
        }
    }

    #[test]
    fn a_refusal_nothing_tells_apart_is_the_message_s_until_someone_took_it() {
        let odd = api(400, "Bad Request: something new");
        assert!(matches!(judged(&odd, 5, 0), Outcome::Refused { .. }));
        assert!(matches!(judged(&odd, 5, 1), Outcome::Failed { .. }));
    }
}
