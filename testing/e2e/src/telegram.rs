//! The harness playing Telegram's side of a webhook: it POSTs each update to the function URL with
//! the secret header, and resends an update that was not answered 2xx, as Telegram does.

use std::time::Duration;

use anyhow::bail;
use serde_json::{json, Value};
use tgq_core::ingest::SECRET_HEADER;

/// How many times one update is posted before the harness gives up (Telegram keeps trying for hours;
/// a test has no such patience).
const MAX_POSTS: u32 = 30;
/// The first pause before a resend; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// Telegram, posting updates to a webhook.
#[derive(Clone, Debug)]
pub struct Telegram {
    http: reqwest::Client,
    webhook_url: String,
    secret: String,
}

impl Telegram {
    /// Telegram with the `secret_token` given to `setWebhook`, posting to `webhook_url`.
    pub fn new(webhook_url: String, secret: impl Into<String>) -> Telegram {
        Telegram {
            http: reqwest::Client::builder()
                // Telegram gives a webhook 60 s before it counts the delivery as failed.
                .timeout(Duration::from_secs(60))
                .build()
                .expect("a reqwest client with a timeout"),
            webhook_url,
            secret: secret.into(),
        }
    }

    /// Posts `body` until the webhook answers 2xx, and returns the statuses it answered before that
    /// (0 for a failed connection); an error after [`MAX_POSTS`] refusals.
    pub async fn deliver(&self, body: &str) -> anyhow::Result<Vec<u16>> {
        let mut refused = Vec::new();
        let mut pause = FIRST_PAUSE;
        for _ in 0..MAX_POSTS {
            let answer = self
                .http
                .post(&self.webhook_url)
                .header(SECRET_HEADER, &self.secret)
                .header("content-type", "application/json")
                .body(body.to_owned())
                .send()
                .await;
            match answer {
                Ok(answer) if answer.status().is_success() => return Ok(refused),
                Ok(answer) => refused.push(answer.status().as_u16()),
                // A connection that failed or timed out counts as a refusal, as it does for Telegram.
                Err(_) => refused.push(0),
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_PAUSE);
        }
        bail!("the webhook refused an update {MAX_POSTS} times: {refused:?}")
    }
}

/// A text message from the user `chat` in their private chat with the bot, as Telegram sends it.
pub fn text_update(update_id: i64, chat: i64, message_id: i64, text: &str) -> Value {
    let user = json!({ "id": chat, "is_bot": false, "first_name": format!("User {chat}") });
    json!({
        "update_id": update_id,
        "message": {
            "message_id": message_id,
            "from": user,
            "chat": { "id": chat, "first_name": format!("User {chat}"), "type": "private" },
            "date": 1_767_607_200 + update_id % 100_000,
            "text": text,
        }
    })
}
