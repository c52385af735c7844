//! `tgq webhook set [<url>] [--stack NAME] | info | delete`: the bot's webhook at Telegram, through
//! teloxide-core's typed payloads. Needs TELEGRAM_BOT_TOKEN (or, with --stack, the stack's token
//! parameter) and honours TELEGRAM_API_URL.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use secrecy::{ExposeSecret as _, SecretString};
use teloxide_core::payloads::{
    DeleteWebhook, DeleteWebhookSetters as _, GetWebhookInfo, SetWebhook, SetWebhookSetters as _,
};
use teloxide_core::types::AllowedUpdate;
#[cfg(feature = "aws")]
use tgq_core::config::SecretSource;
use tgq_core::config::Vars;
use tgq_core::handler::EVERY_UPDATE_KIND;
use tgq_core::ids::BotId;
use tgq_core::telegram::{ApiCall, BotApi, CallError, TelegramError};
use tgq_core::BotConfig;
use tgq_telegram::HttpBotApi;

#[cfg(feature = "aws")]
use super::target::Deployment;
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
    /// The public HTTPS URL Telegram should POST updates to (port 443, 80, 88 or 8443); with
    /// --stack, the stack's WebhookUrl output when left out.
    #[arg(value_parser = webhook_url, required_unless_present = "stack")]
    url: Option<reqwest::Url>,
    /// A deployed stack: the URL, the webhook secret (its SSM parameter) and, without
    /// TELEGRAM_BOT_TOKEN, the bot token (its SSM parameter) come from its outputs.
    #[arg(long, value_name = "NAME", conflicts_with = "data_dir")]
    stack: Option<String>,
    /// The AWS region of the stack [default: AWS_REGION, or the profile's].
    #[arg(long, value_name = "REGION", requires = "stack")]
    region: Option<String>,
    /// Where the generated webhook secret is kept when TGQ_WEBHOOK_SECRET is unset (the same
    /// directory `tgq local` uses, so both agree on the secret).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// The update kinds Telegram should send, comma-separated (e.g. message,callback_query)
    /// [default: every kind the bot's handler declares it handles, including chat_member,
    /// message_reaction and message_reaction_count, which Telegram leaves out unless asked].
    #[arg(long, value_name = "KINDS", value_delimiter = ',', value_parser = update_kind)]
    allowed_updates: Option<Vec<AllowedUpdate>>,
    /// How many connections Telegram may open to the webhook at once (1-100; Telegram's default
    /// is 40).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=100))]
    max_connections: Option<u8>,
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
    if let WebhookCommand::Set(args) = command {
        return set(args, &vars).await;
    }
    let Some(token) = config::bot_token(&vars)? else {
        bail!(
            "`tgq webhook` talks to Telegram for the bot: set TELEGRAM_BOT_TOKEN (from @BotFather)"
        );
    };
    let api = HttpBotApi::new(&vars.telegram_api_url()?, token, TIMEOUT)?;
    match command {
        WebhookCommand::Set(_) => unreachable!("handled above"),
        WebhookCommand::Info(args) => {
            let info = tgq_telegram::call(&api, &GetWebhookInfo::new())
                .await
                .map_err(explain)?;
            if args.json {
                outln!("{}", serde_json::to_string_pretty(&info)?);
                return Ok(());
            }
            print_info(&info);
        }
        WebhookCommand::Delete(args) => {
            let payload = DeleteWebhook::new().drop_pending_updates(args.drop_pending_updates);
            tgq_telegram::call(&api, &payload).await.map_err(explain)?;
            outln!("Webhook deleted: updates now wait for getUpdates (`tgq local --poll`).");
        }
    }
    Ok(())
}

/// What `setWebhook` is called with, every part checked before Telegram is asked.
struct Setting {
    url: reqwest::Url,
    secret: SecretString,
    secret_from: String,
    token: SecretString,
    api_url: String,
    allowed_updates: Vec<AllowedUpdate>,
}

/// `tgq webhook set`: checks every argument, sets the webhook, and confirms it with
/// getWebhookInfo.
async fn set(args: SetArgs, vars: &Vars) -> anyhow::Result<()> {
    let setting = match &args.stack {
        Some(stack) => from_stack(&args, stack, vars).await?,
        None => from_environment(&args, vars).await?,
    };
    let api = HttpBotApi::new(&setting.api_url, setting.token.clone(), TIMEOUT)?;
    let mut payload = SetWebhook::new(setting.url.clone())
        .secret_token(setting.secret.expose_secret())
        .allowed_updates(setting.allowed_updates.clone())
        .drop_pending_updates(args.drop_pending_updates);
    if let Some(max) = args.max_connections {
        payload = payload.max_connections(max);
    }
    tgq_telegram::call(&api, &payload).await.map_err(explain)?;
    let info = tgq_telegram::call(&api, &GetWebhookInfo::new())
        .await
        .map_err(explain)
        .context("the webhook was set, but getWebhookInfo could not confirm it")?;
    if info.url.as_ref().map(reqwest::Url::as_str) != Some(setting.url.as_str()) {
        bail!(
            "Telegram accepted setWebhook but getWebhookInfo reports {:?}, not {}",
            info.url.as_ref().map(reqwest::Url::as_str),
            setting.url
        );
    }
    outln!("Webhook set: Telegram now POSTs updates to {}", setting.url);
    outln!(
        "with the secret from {} in the X-Telegram-Bot-Api-Secret-Token header.",
        setting.secret_from
    );
    print_info(&info);
    Ok(())
}

/// `tgq webhook set --stack NAME` as `tgq deploy` ends: the stack's URL, secret and token, the
/// handlers' update kinds, confirmed with getWebhookInfo.
#[cfg(feature = "aws")]
pub(crate) async fn set_for_stack(stack: &str, region: Option<String>) -> anyhow::Result<()> {
    let args = SetArgs {
        url: None,
        stack: Some(stack.to_owned()),
        region,
        data_dir: None,
        allowed_updates: None,
        max_connections: None,
        drop_pending_updates: false,
    };
    set(args, &Vars::from_env()).await
}

/// The setting from the environment and the local data directory (`tgq local` behind a proxy).
async fn from_environment(args: &SetArgs, vars: &Vars) -> anyhow::Result<Setting> {
    let Some(url) = args.url.clone() else {
        bail!("give the webhook URL, or --stack NAME to read it from a deployed stack");
    };
    let Some(token) = config::bot_token(vars)? else {
        bail!(
            "`tgq webhook` talks to Telegram for the bot: set TELEGRAM_BOT_TOKEN (from @BotFather)"
        );
    };
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
    let (secret, origin) = config::webhook_secret(vars, &data_dir)?;
    let secret_from = match origin {
        SecretOrigin::Environment => "TGQ_WEBHOOK_SECRET".to_owned(),
        SecretOrigin::File { path, .. } => path.display().to_string(),
    };
    Ok(Setting {
        url,
        secret,
        secret_from,
        token,
        api_url: vars.telegram_api_url()?,
        allowed_updates: allowed_updates(args, vars).await?,
    })
}

/// The setting from a deployed stack: its WebhookUrl output, its secret parameter, and its token
/// parameter unless TELEGRAM_BOT_TOKEN is set.
#[cfg(feature = "aws")]
async fn from_stack(args: &SetArgs, stack: &str, vars: &Vars) -> anyhow::Result<Setting> {
    let deployment = Deployment::of_stack(stack, args.region.clone()).await?;
    let url = match (&args.url, &deployment.webhook_url) {
        (Some(url), _) => url.clone(),
        (None, Some(url)) => webhook_url(url).map_err(|e| {
            anyhow::anyhow!("the stack's WebhookUrl output {url} is not a webhook URL: {e}")
        })?,
        (None, None) => bail!("the stack {stack} has no WebhookUrl output: give the URL"),
    };
    let ssm = aws_sdk_ssm::Client::new(&deployment.sdk);
    let Some(secret_parameter) = deployment.secret_parameter.clone() else {
        bail!("the stack {stack} has no WebhookSecretParameterName output");
    };
    let secret =
        tgq_aws::resolve_secret(&ssm, SecretSource::Parameter(secret_parameter.clone())).await?;
    config::check_secret(secret.expose_secret(), &secret_parameter)?;
    let token = match (vars.bot_token(), &deployment.token_parameter) {
        (Some(SecretSource::Value(token)), _) => token,
        (_, Some(name)) => {
            tgq_aws::resolve_secret(&ssm, SecretSource::Parameter(name.clone())).await?
        }
        _ => bail!(
            "no bot token: set TELEGRAM_BOT_TOKEN, or deploy a stack with a BotTokenParameterName \
             output"
        ),
    };
    check_token(token.expose_secret())?;
    let api_url = deployment.api_url(vars)?;
    Ok(Setting {
        url,
        secret,
        secret_from: format!("the SSM parameter {secret_parameter}"),
        token,
        api_url,
        allowed_updates: allowed_updates(args, vars).await?,
    })
}

/// Without the `aws` feature, a stack's webhook is out of reach.
#[cfg(not(feature = "aws"))]
async fn from_stack(_: &SetArgs, _: &str, _: &Vars) -> anyhow::Result<Setting> {
    Err(crate::without_aws("--stack"))
}

/// `--allowed-updates`, or every kind the bot's handler declares.
async fn allowed_updates(args: &SetArgs, vars: &Vars) -> anyhow::Result<Vec<AllowedUpdate>> {
    if let Some(kinds) = &args.allowed_updates {
        return Ok(kinds.clone());
    }
    let bot_id = match vars.get("TGQ_BOT_ID") {
        Some(_) => vars.bot_id()?,
        None => BotId::new(config::LOCAL_BOT_ID)?,
    };
    let handlers = crate::handlers()?;
    handler_update_kinds(handlers.name_of(vars.handler()?), bot_id, vars).await
}

/// Every kind of update the handler `name` of bot/'s registry declares, asked of it built for
/// `bot_id` with a Bot API that makes no call.
pub(crate) async fn handler_update_kinds(
    name: &str,
    bot_id: BotId,
    vars: &Vars,
) -> anyhow::Result<Vec<AllowedUpdate>> {
    let config = BotConfig {
        bot_id,
        vars: vars.clone(),
        api: Arc::new(NoCalls),
    };
    let handler = crate::handlers()?
        .build(name, config)
        .await
        .map_err(|error| anyhow::anyhow!(error))
        .with_context(|| {
            format!(
                "the handler {name:?} could not be built to ask which updates it handles; name \
                 them with --allowed-updates"
            )
        })?;
    Ok(handler.update_kinds())
}

/// The Bot API the bot is built with to ask for its update kinds: it is not running, so it makes
/// no call.
struct NoCalls;

#[async_trait::async_trait]
impl BotApi for NoCalls {
    async fn call(&self, call: &ApiCall<'_>) -> Result<serde_json::Value, CallError> {
        Err(TelegramError::Network(format!(
            "{} was not sent: `tgq webhook set` only asks the bot which updates it handles",
            call.method
        ))
        .into())
    }
}

/// A bot token's shape, `123456789:AA…`: checked before it is sent anywhere.
pub(crate) fn check_token(token: &str) -> anyhow::Result<()> {
    let valid = token.split_once(':').is_some_and(|(id, key)| {
        !id.is_empty()
            && id.bytes().all(|b| b.is_ascii_digit())
            && !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    });
    if !valid {
        bail!("the bot token does not look like one from @BotFather (digits, ':', then letters)");
    }
    Ok(())
}

/// One `--allowed-updates` kind, as the Bot API spells it.
pub(crate) fn update_kind(text: &str) -> Result<AllowedUpdate, String> {
    serde_json::from_value(serde_json::Value::String(text.trim().to_owned())).map_err(|_| {
        let known: Vec<String> = EVERY_UPDATE_KIND
            .iter()
            .filter_map(|kind| serde_json::to_value(kind).ok())
            .filter_map(|value| value.as_str().map(str::to_owned))
            .collect();
        format!(
            "{text:?} is not an update kind; the kinds are {}",
            known.join(", ")
        )
    })
}

/// getWebhookInfo as text.
fn print_info(info: &teloxide_core::types::WebhookInfo) {
    match &info.url {
        Some(url) => outln!("url                   {url}"),
        None => {
            outln!("url                   none: updates wait for getUpdates (`tgq local --poll`)")
        }
    }
    outln!("pending updates       {}", info.pending_update_count);
    if let Some(max) = info.max_connections {
        outln!("max connections       {max}");
    }
    if let Some(kinds) = &info.allowed_updates {
        let names: Vec<String> = kinds
            .iter()
            .filter_map(|kind| serde_json::to_value(kind).ok())
            .filter_map(|value| value.as_str().map(str::to_owned))
            .collect();
        outln!("allowed updates       {}", names.join(", "));
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

/// A URL Telegram accepts for a webhook: HTTPS, on one of its ports. Checked when the command line
/// is read, so a URL Telegram would refuse never reaches it.
pub(crate) fn webhook_url(text: &str) -> Result<reqwest::Url, String> {
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
