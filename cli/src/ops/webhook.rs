//! `tgq webhook set <url> | info | delete`: the bot's webhook at Telegram, through teloxide-core's
//! typed payloads. Needs TELEGRAM_BOT_TOKEN (and honours TELEGRAM_API_URL).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use clap::{Args, Subcommand};
use secrecy::ExposeSecret as _;
use teloxide_core::payloads::{
    DeleteWebhook, DeleteWebhookSetters as _, GetWebhookInfo, SetWebhook, SetWebhookSetters as _,
};
use tgq_core::config::Vars;
use tgq_core::telegram::TelegramError;
use tgq_telegram::HttpBotApi;

use crate::config::{self, SecretOrigin, DEFAULT_DATA_DIR};

/// How long one call to Telegram may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// The only ports Telegram delivers webhooks to (Bot API, setWebhook).
const WEBHOOK_PORTS: [u16; 4] = [443, 80, 88, 8443];

/// `tgq webhook …`.
#[derive(Debug, Subcommand)]
pub enum WebhookCommand {
    /// Point Telegram at a webhook URL (e.g. `https://example.com/webhook`), with the webhook secret.
    Set(SetArgs),
    /// Show the webhook Telegram has, its pending update count and its last error.
    Info(InfoArgs),
    /// Remove the webhook, so updates wait for getUpdates (`tgq local --poll`).
    Delete(DeleteArgs),
}

/// `tgq webhook set`.
#[derive(Debug, Args)]
pub struct SetArgs {
    /// The public HTTPS URL Telegram should POST updates to (port 443, 80, 88 or 8443).
    #[arg(value_parser = webhook_url)]
    url: reqwest::Url,
    /// Where the generated webhook secret is kept when TGQ_WEBHOOK_SECRET is unset (the same
    /// directory `tgq local` uses, so both agree on the secret).
    #[arg(long, value_name = "DIR", default_value = DEFAULT_DATA_DIR)]
    data_dir: PathBuf,
    /// Drop the updates Telegram is holding for the bot.
    #[arg(long)]
    drop_pending_updates: bool,
}

/// `tgq webhook info`.
#[derive(Debug, Args)]
pub struct InfoArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// `tgq webhook delete`.
#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// Drop the updates Telegram is holding for the bot.
    #[arg(long)]
    drop_pending_updates: bool,
}

/// Runs one `tgq webhook` subcommand.
pub async fn run(command: WebhookCommand) -> anyhow::Result<()> {
    let vars = Vars::from_env();
    let Some(token) = config::bot_token(&vars)? else {
        bail!(
            "`tgq webhook` talks to Telegram for the bot: set TELEGRAM_BOT_TOKEN (from @BotFather)"
        );
    };
    let api = HttpBotApi::new(&vars.telegram_api_url()?, token, TIMEOUT)?;
    match command {
        WebhookCommand::Set(args) => {
            let url = args.url;
            let (secret, origin) = config::webhook_secret(&vars, &args.data_dir)?;
            let payload = SetWebhook::new(url.clone())
                .secret_token(secret.expose_secret())
                .drop_pending_updates(args.drop_pending_updates);
            tgq_telegram::call(&api, &payload).await.map_err(explain)?;
            let from = match origin {
                SecretOrigin::Environment => "TGQ_WEBHOOK_SECRET".to_owned(),
                SecretOrigin::File { path, .. } => path.display().to_string(),
            };
            outln!("Webhook set: Telegram now POSTs updates to {url}");
            outln!("with the secret from {from} in the X-Telegram-Bot-Api-Secret-Token header.");
        }
        WebhookCommand::Info(args) => {
            let info = tgq_telegram::call(&api, &GetWebhookInfo::new())
                .await
                .map_err(explain)?;
            if args.json {
                outln!("{}", serde_json::to_string_pretty(&info)?);
                return Ok(());
            }
            match &info.url {
                Some(url) => outln!("url                   {url}"),
                None => outln!(
                    "url                   none: updates wait for getUpdates (`tgq local --poll`)"
                ),
            }
            outln!("pending updates       {}", info.pending_update_count);
            if let Some(max) = info.max_connections {
                outln!("max connections       {max}");
            }
            if let Some(ip) = info.ip_address {
                outln!("ip address            {ip}");
            }
            if let Some(message) = &info.last_error_message {
                let when = info
                    .last_error_date
                    .map(|d| format!("(at {d})"))
                    .unwrap_or_default();
                outln!("last error            {message} {when}");
            }
        }
        WebhookCommand::Delete(args) => {
            let payload = DeleteWebhook::new().drop_pending_updates(args.drop_pending_updates);
            tgq_telegram::call(&api, &payload).await.map_err(explain)?;
            outln!("Webhook deleted: updates now wait for getUpdates (`tgq local --poll`).");
        }
    }
    Ok(())
}

/// A URL Telegram accepts for a webhook: HTTPS, on one of its ports. Checked when the command line
/// is read, so a URL Telegram would refuse never reaches it.
fn webhook_url(text: &str) -> Result<reqwest::Url, String> {
    let url: reqwest::Url = text
        .parse()
        .map_err(|e| format!("not a URL ({e}); expected e.g. https://bot.example.com/webhook"))?;
    if url.scheme() != "https" {
        return Err(format!(
            "Telegram delivers webhooks over HTTPS only; put tgq local behind an HTTPS endpoint \
             (a reverse proxy or tunnel) and give its https:// URL, or use `tgq local --poll` \
             (got a {}:// URL)",
            url.scheme()
        ));
    }
    match url.port_or_known_default() {
        Some(port) if WEBHOOK_PORTS.contains(&port) => Ok(url),
        port => Err(format!(
            "Telegram delivers webhooks only to ports 443, 80, 88 and 8443 (got {})",
            port.map_or_else(|| "none".to_owned(), |p| p.to_string())
        )),
    }
}

/// Telegram's error, with a hint where the cause is usually on our side.
fn explain(error: TelegramError) -> anyhow::Error {
    match error {
        TelegramError::Api {
            code: 401 | 404, ..
        } => {
            anyhow::anyhow!("{error} (check TELEGRAM_BOT_TOKEN and TELEGRAM_API_URL)")
        }
        other => anyhow::anyhow!(other),
    }
}

#[cfg(test)]
mod tests {
    use super::webhook_url;

    #[test]
    fn only_https_urls_on_telegrams_ports_are_webhook_urls() {
        for good in [
            "https://bot.example.com/webhook",
            "https://bot.example.com:8443/webhook",
            "https://203.0.113.7:88/tg",
        ] {
            assert!(webhook_url(good).is_ok(), "{good}");
        }
        let http = webhook_url("http://bot.example.com/webhook").unwrap_err();
        assert!(http.contains("HTTPS only"), "{http}");
        let port = webhook_url("https://bot.example.com:8080/webhook").unwrap_err();
        assert!(port.contains("8080"), "{port}");
        assert!(webhook_url("bot.example.com/webhook").is_err());
    }
}
