//! `tgq local --poll`: long polling with getUpdates instead of a webhook (docs/ARCHITECTURE.md
//! §6). Each update goes through the same use case as a webhook request, byte for byte as Telegram
//! sent it, and the next offset — which tells Telegram to forget the batch — is sent only once
//! every update of the batch is durable.

use std::time::Duration;

use anyhow::bail;
use bytes::Bytes;
use serde_json::Value;
use teloxide_core::payloads::{GetUpdates, GetUpdatesSetters as _};
use tgq_core::error::error_chain;
use tgq_core::ingest::Webhook;
use tgq_core::telegram::{ApiCall, BotApi, CallError, TelegramError};
use tgq_core::ErrorClass;
use tracing::{info, warn};

use super::shutdown::Shutdown;

/// How long one getUpdates call waits on Telegram's side for an update.
pub const POLL_TIMEOUT: Duration = Duration::from_secs(25);
/// The longest pause between failed polls.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What `tgq local --poll` says when Telegram refuses getUpdates because a webhook is set.
pub const WEBHOOK_IS_SET: &str =
    "Telegram refuses getUpdates while a webhook is set for this bot. \
     Run `tgq webhook delete` to remove it, then start `tgq local --poll` again \
     (or keep the webhook and run `tgq local` without --poll behind it).";

/// Polls until shutdown; returns an error only when polling cannot work (a webhook is set, the token
/// is refused). `api` must allow calls longer than [`POLL_TIMEOUT`].
pub async fn run(api: &dyn BotApi, webhook: &Webhook, shutdown: &Shutdown) -> anyhow::Result<()> {
    info!("long polling getUpdates");
    let mut offset: Option<i32> = None;
    let mut failures: u32 = 0;
    while !shutdown.is_triggered() {
        let mut payload = GetUpdates::new().timeout(u32::try_from(POLL_TIMEOUT.as_secs())?);
        if let Some(offset) = offset {
            payload = payload.offset(offset);
        }
        let params = serde_json::to_value(&payload)?;
        let call = ApiCall::plain("getUpdates", &params);
        let answer = tokio::select! {
            answer = api.call(&call) => answer.map_err(|e| match e {
                CallError::Telegram(e) => e,
                CallError::Store(e) => TelegramError::Network(error_chain(&e)),
            }),
            // Nothing is lost by abandoning a poll: the offset of unconfirmed updates is not sent.
            () = shutdown.wait() => break,
        };
        let pause = match answer {
            Ok(Value::Array(updates)) => match ingest_batch(webhook, &updates).await {
                Ok(next) => {
                    failures = 0;
                    offset = next.or(offset);
                    continue;
                }
                Err(error) => {
                    // The offset stays: Telegram sends the batch again, and the updates already
                    // stored are acknowledged as duplicates.
                    warn!(error = %format!("{error:#}"), "an update of the batch could not be made durable; polling the batch again");
                    backoff(failures)
                }
            },
            Ok(_) => {
                warn!("getUpdates answered something other than a list of updates");
                backoff(failures)
            }
            Err(TelegramError::Api {
                code: 409,
                description,
            }) => match Conflict::of(&description) {
                Conflict::WebhookActive => bail!(WEBHOOK_IS_SET),
                Conflict::OtherPoller => {
                    // Another process polls this bot: Telegram ends one of the two polls. This one
                    // backs off and keeps serving; the conflict is named so it can be found.
                    warn!(conflict = %description, "another getUpdates poller is running for this bot; backing off");
                    backoff(failures)
                }
            },
            Err(TelegramError::Api { code: code @ (401 | 404), .. }) => bail!(
                "Telegram answered {code} to getUpdates: the bot token is not valid (check TELEGRAM_BOT_TOKEN and TELEGRAM_API_URL)"
            ),
            Err(error) => match error.class() {
                ErrorClass::RateLimited(wait) => wait,
                ErrorClass::Transient => {
                    warn!(error = %error, "getUpdates failed; retrying");
                    backoff(failures)
                }
                ErrorClass::Permanent => bail!("getUpdates failed: {error}"),
            },
        };
        failures = failures.saturating_add(1);
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = shutdown.wait() => break,
        }
    }
    Ok(())
}

/// What a 409 from getUpdates means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Conflict {
    /// "Conflict: can't use getUpdates method while webhook is active": polling cannot work.
    WebhookActive,
    /// "Conflict: terminated by other getUpdates request": a second poller; it may go away.
    OtherPoller,
}

impl Conflict {
    fn of(description: &str) -> Self {
        if description.to_ascii_lowercase().contains("webhook") {
            Conflict::WebhookActive
        } else {
            Conflict::OtherPoller
        }
    }
}

/// Stores and enqueues every update of a batch, in order; returns the offset that confirms them.
async fn ingest_batch(webhook: &Webhook, updates: &[Value]) -> anyhow::Result<Option<i32>> {
    let mut last: Option<i64> = None;
    for update in updates {
        // The bytes stored are the update as Telegram sent it (re-serialized from its JSON value).
        let body = Bytes::from(serde_json::to_vec(update)?);
        webhook
            .ingest(body)
            .await
            .map_err(|refused| anyhow::anyhow!(error_chain(&refused)))?;
        if let Some(id) = update.get("update_id").and_then(Value::as_i64) {
            last = Some(last.map_or(id, |seen| seen.max(id)));
        }
    }
    match last {
        Some(id) => Ok(Some(i32::try_from(id + 1)?)),
        None => Ok(None),
    }
}

/// 1 s, 2 s, 4 s, … up to [`MAX_BACKOFF`].
fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.min(5)).min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_409_is_told_apart_by_its_description() {
        assert_eq!(
            Conflict::of("Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first"),
            Conflict::WebhookActive
        );
        assert_eq!(
            Conflict::of("Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"),
            Conflict::OtherPoller
        );
    }

    #[test]
    fn failed_polls_back_off_exponentially_up_to_thirty_seconds() {
        assert_eq!(backoff(0), Duration::from_secs(1));
        assert_eq!(backoff(3), Duration::from_secs(8));
        assert_eq!(backoff(40), MAX_BACKOFF);
    }
}
