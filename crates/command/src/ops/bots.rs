//! `tgq bots add|list|remove`: the bots one stack (or one `tgq local`) hosts, kept in the registry
//! (docs/design/fleet.md §2) — SSM parameters under the stack's `BotsParameterPrefix` output with
//! `--stack`, `<data-dir>/bots.json` without. Every argument is checked, and the token tried with
//! getMe, before anything is written; `add` generates the bot's webhook secret and sets its webhook,
//! and takes the bot out again if Telegram refuses the webhook.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use rand::distr::{Alphanumeric, SampleString as _};
use secrecy::{ExposeSecret as _, SecretString};
use serde::Serialize;
use teloxide_core::payloads::{
    DeleteWebhook, DeleteWebhookSetters as _, GetMe, GetWebhookInfo, SetWebhook,
    SetWebhookSetters as _,
};
use teloxide_core::types::AllowedUpdate;
#[cfg(feature = "aws")]
use tgq_aws::SsmRegistry;
use tgq_core::clock::{Clock as _, SystemClock};
use tgq_core::config::HandlerChoice;
use tgq_core::config::Vars;
use tgq_core::ids::BotId;
#[cfg(feature = "aws")]
use tgq_core::ports::DeadLetterReader as _;
use tgq_core::registry::BotEntry;
#[cfg(feature = "aws")]
use tgq_core::registry::Layout;
use tgq_core::telegram::TelegramError;
use tgq_embedded::BotsFile;
use tgq_telegram::HttpBotApi;

use super::client::Local;
#[cfg(feature = "aws")]
use super::target::Deployment;
use super::webhook::{check_token, handler_update_kinds, update_kind, webhook_url};
use crate::config::DEFAULT_DATA_DIR;
use crate::views::{LetterView, StatusView};

/// How long one call to Telegram may take.
const TIMEOUT: Duration = Duration::from_secs(30);
/// How many dead letters `list` reads to count them per bot.
const LETTERS_COUNTED: usize = 1000;

/// `tgq bots …`.
#[derive(Debug, Subcommand)]
pub enum BotsCommand {
    /// Register a bot: check its token with getMe, write it to the registry with a fresh webhook
    /// secret, and point its webhook at the stack (TELEGRAM_BOT_TOKEN holds the token).
    Add(AddArgs),
    /// Show every registered bot with its webhook as Telegram sees it, and the queue figures.
    List(ListArgs),
    /// Delete a bot's webhook and take it out of the registry; its records stay until their TTL.
    Remove(RemoveArgs),
}

/// Where the registry is: a stack's SSM parameters, or a local data directory.
#[derive(Debug, Args)]
pub struct RegistryArgs {
    /// A deployed stack: its BotsParameterPrefix, BotWebhookUrlPrefix and TelegramApiUrl outputs.
    #[arg(long, value_name = "NAME", conflicts_with = "data_dir")]
    stack: Option<String>,
    /// The AWS region of the stack [default: AWS_REGION, or the profile's].
    #[arg(long, value_name = "REGION", requires = "stack")]
    region: Option<String>,
    /// The data directory of `tgq local`, whose bots.json is the registry.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
}

/// `tgq bots add`.
#[derive(Debug, Args)]
pub struct AddArgs {
    /// The bot's id: its webhook path (/webhook/ID) and part of its records' keys; 1-64 of A-Z,
    /// a-z, 0-9, '_' and '-'.
    #[arg(value_parser = bot_id)]
    id: BotId,
    #[command(flatten)]
    registry: RegistryArgs,
    /// The handler that runs the bot's updates, by its name in bot/'s handler registry
    /// [default: the bot's own, the one TGQ_HANDLER=bot runs].
    #[arg(long, value_name = "NAME")]
    handler: Option<String>,
    /// The update kinds Telegram should send, comma-separated [default: the handler's].
    #[arg(long, value_name = "KINDS", value_delimiter = ',', value_parser = update_kind)]
    allowed_updates: Option<Vec<AllowedUpdate>>,
    /// The bot's public webhook URL [default with --stack: the stack's BotWebhookUrlPrefix
    /// output followed by the id]. Locally: the HTTPS URL in front of tgq local's /webhook/ID.
    #[arg(long, value_name = "URL", value_parser = webhook_url)]
    webhook_url: Option<reqwest::Url>,
    /// Locally only: register the bot without a token; its sends go to the offline outbox and no
    /// webhook is set.
    #[arg(long, conflicts_with_all = ["stack", "webhook_url"])]
    offline: bool,
    /// How many connections Telegram may open to the bot's webhook at once (1-100).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=100))]
    max_connections: Option<u8>,
    /// Drop the updates Telegram is holding for the bot.
    #[arg(long)]
    drop_pending_updates: bool,
}

/// `tgq bots list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    registry: RegistryArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// `tgq bots remove`.
#[derive(Debug, Args)]
pub struct RemoveArgs {
    /// The bot's id.
    #[arg(value_parser = bot_id)]
    id: BotId,
    #[command(flatten)]
    registry: RegistryArgs,
    /// Drop the updates Telegram is holding for the bot when its webhook is deleted.
    #[arg(long)]
    drop_pending_updates: bool,
}

/// A bot id from the command line, refused with the rule when it breaks it.
fn bot_id(text: &str) -> Result<BotId, String> {
    BotId::new(text).map_err(|e| e.to_string())
}

/// Runs one `tgq bots` subcommand.
pub async fn run(command: BotsCommand) -> anyhow::Result<()> {
    match command {
        BotsCommand::Add(args) => add(args).await,
        BotsCommand::List(args) => list(args).await,
        BotsCommand::Remove(args) => remove(args).await,
    }
}

/// The registry a command works on, and what it needs besides.
enum Registry {
    #[cfg(feature = "aws")]
    Aws {
        ssm: SsmRegistry,
        deployment: Box<Deployment>,
        webhook_url_prefix: Option<String>,
    },
    Local {
        file: BotsFile,
        data_dir: PathBuf,
    },
}

impl Registry {
    async fn open(args: &RegistryArgs) -> anyhow::Result<Registry> {
        let Some(stack) = &args.stack else {
            let data_dir = args
                .data_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
            return Ok(Registry::Local {
                file: BotsFile::in_dir(&data_dir),
                data_dir,
            });
        };
        Registry::on_stack(stack, args.region.clone()).await
    }

    /// The registry of a deployed stack: the SSM parameters under its BotsParameterPrefix output.
    #[cfg(feature = "aws")]
    async fn on_stack(stack: &str, region: Option<String>) -> anyhow::Result<Registry> {
        let deployment = Deployment::of_stack(stack, region).await?;
        let Some(prefix) = deployment.bots_parameter_prefix.clone() else {
            bail!(
                "the stack {stack} has no BotsParameterPrefix output: deploy it with this \
                 version of template.yaml to host several bots"
            );
        };
        let layout = Layout::new(&prefix).with_context(|| {
            format!("the stack {stack}'s BotsParameterPrefix output is not an SSM path")
        })?;
        Ok(Registry::Aws {
            ssm: SsmRegistry::new(aws_sdk_ssm::Client::new(&deployment.sdk), layout),
            webhook_url_prefix: deployment.bot_webhook_url_prefix.clone(),
            deployment: Box::new(deployment),
        })
    }

    /// Without the `aws` feature, a stack's registry is out of reach.
    #[cfg(not(feature = "aws"))]
    async fn on_stack(_: &str, _: Option<String>) -> anyhow::Result<Registry> {
        Err(crate::without_aws("--stack"))
    }

    /// Every complete bot, and the incomplete ones named (with why).
    async fn read(&self) -> anyhow::Result<(Vec<BotEntry>, Vec<(String, &'static str)>)> {
        match self {
            #[cfg(feature = "aws")]
            Registry::Aws { ssm, .. } => {
                let parsed = ssm.read().await.with_context(|| {
                    format!("cannot read the bots under {}", ssm.layout().prefix())
                })?;
                Ok((parsed.bots, parsed.incomplete))
            }
            Registry::Local { file, .. } => Ok((file.read()?, Vec::new())),
        }
    }

    /// Whether anything of `id` is registered, complete or not.
    async fn has(&self, id: &BotId) -> anyhow::Result<bool> {
        match self {
            #[cfg(feature = "aws")]
            Registry::Aws { ssm, .. } => Ok(ssm.exists(id).await?),
            Registry::Local { file, .. } => Ok(file.read()?.iter().any(|bot| &bot.id == id)),
        }
    }

    async fn put(&self, entry: &BotEntry) -> anyhow::Result<()> {
        match self {
            #[cfg(feature = "aws")]
            Registry::Aws { ssm, .. } => Ok(ssm.put(entry).await?),
            Registry::Local { file, data_dir } => {
                std::fs::create_dir_all(data_dir).with_context(|| {
                    format!("cannot create the data directory {}", data_dir.display())
                })?;
                let mut bots = file.read()?;
                bots.push(entry.clone());
                Ok(file.write(&bots)?)
            }
        }
    }

    async fn remove(&self, id: &BotId) -> anyhow::Result<()> {
        match self {
            #[cfg(feature = "aws")]
            Registry::Aws { ssm, .. } => Ok(ssm.remove(id).await?),
            Registry::Local { file, .. } => {
                let mut bots = file.read()?;
                bots.retain(|bot| &bot.id != id);
                Ok(file.write(&bots)?)
            }
        }
    }

    /// Where the registry is, in words.
    fn describe(&self) -> String {
        match self {
            #[cfg(feature = "aws")]
            Registry::Aws { ssm, .. } => {
                format!("the SSM parameters under {}", ssm.layout().prefix())
            }
            Registry::Local { file, .. } => file.path().display().to_string(),
        }
    }

    /// The Bot API base URL: TELEGRAM_API_URL, else the stack's TelegramApiUrl output, else
    /// Telegram's.
    fn api_url(&self, vars: &Vars) -> anyhow::Result<String> {
        match self {
            #[cfg(feature = "aws")]
            Registry::Aws { deployment, .. } => deployment.api_url(vars),
            Registry::Local { .. } => Ok(vars.telegram_api_url()?),
        }
    }
}

/// `tgq bots add`.
async fn add(args: AddArgs) -> anyhow::Result<()> {
    let vars = Vars::from_env();
    let id = args.id.clone();
    let handlers = crate::handlers()?;
    let handler = match &args.handler {
        Some(name) => name.clone(),
        None => handlers.name_of(HandlerChoice::Bot).to_owned(),
    };
    if !handlers.contains(&handler) {
        bail!(
            "there is no handler {:?} in the bot's handler registry; the handlers are {}",
            handler,
            handlers.names().join(", ")
        );
    }
    let token = match (crate::config::bot_token(&vars)?, args.offline) {
        (Some(_), true) => bail!(
            "--offline registers a bot without a token: unset TELEGRAM_BOT_TOKEN, or leave \
             --offline out"
        ),
        (Some(token), false) => {
            check_token(token.expose_secret())?;
            Some(token)
        }
        (None, true) => None,
        (None, false) => bail!(
            "set TELEGRAM_BOT_TOKEN to the token of the bot {id} (from @BotFather); locally, \
             --offline registers a bot without one"
        ),
    };
    let registry = Registry::open(&args.registry).await?;
    if matches!(registry, Registry::Local { .. }) {
        // `tgq local` serves its environment's bot on /webhook under this id, and would pass a
        // registered bot of the same id over without a word.
        let own = vars.get("TGQ_BOT_ID");
        if id.as_str() == own.unwrap_or(crate::config::LOCAL_BOT_ID) {
            bail!(
                "{id} is the id of the bot `tgq local` runs from its environment (TGQ_BOT_ID, \
                 default `local`, on /webhook): give the added bot another id"
            );
        }
    }
    if registry.has(&id).await? {
        bail!(
            "a bot {id} is already registered in {}: `tgq bots remove {id}` first to replace it",
            registry.describe()
        );
    }
    let (bots, _) = registry.read().await?;
    if let Some(token) = &token {
        let user_id = token_user_id(token);
        if let Some(other) = bots
            .iter()
            .find(|bot| bot.token.as_ref().map(token_user_id).as_ref() == Some(&user_id))
        {
            bail!(
                "this token's bot (user id {user_id}) is already registered as {}",
                other.id
            );
        }
    }
    let url = match (&registry, &args.webhook_url, args.offline) {
        (_, Some(url), _) => Some(url.clone()),
        (_, None, true) => None,
        #[cfg(feature = "aws")]
        (
            Registry::Aws {
                webhook_url_prefix: Some(prefix),
                ..
            },
            None,
            false,
        ) => {
            let url = format!("{prefix}{id}");
            Some(webhook_url(&url).map_err(|e| {
                anyhow::anyhow!(
                    "the stack's BotWebhookUrlPrefix gives {url}, which is not a webhook URL: {e}"
                )
            })?)
        }
        #[cfg(feature = "aws")]
        (Registry::Aws { .. }, None, false) => {
            bail!("the stack has no BotWebhookUrlPrefix output: give --webhook-url")
        }
        (Registry::Local { .. }, None, false) => bail!(
            "give --webhook-url: the public HTTPS URL that reaches tgq local's /webhook/{id} \
             (or --offline for a bot without a token)"
        ),
    };
    let api_url = registry.api_url(&vars)?;
    let api = match &token {
        Some(token) => {
            let api = HttpBotApi::new(&api_url, token.clone(), TIMEOUT)?;
            let me = tgq_telegram::call(&api, &GetMe::new())
                .await
                .map_err(|e| explain(e, &id))
                .with_context(|| format!("Telegram did not accept the token of the bot {id}"))?;
            outln!(
                "Token checked: the bot {id} is @{}.",
                me.user.username.as_deref().unwrap_or("(no username)")
            );
            Some(api)
        }
        None => None,
    };
    // Telegram's secret_token allows 1–256 of A–Z, a–z, 0–9, '_' and '-'.
    let secret = SecretString::from(Alphanumeric.sample_string(&mut rand::rng(), 48));
    let entry = BotEntry {
        id: id.clone(),
        token,
        secret: Some(secret.clone()),
        handler: handler.clone(),
        allowed_updates: args.allowed_updates.clone().unwrap_or_default(),
    };
    registry.put(&entry).await.inspect_err(|_| {
        errln!("note: writing the bot {id} stopped half way; `tgq bots remove {id}` clears what was written");
    })?;
    if let (Some(api), Some(url)) = (api, url.as_ref()) {
        let kinds = match &args.allowed_updates {
            Some(kinds) => kinds.clone(),
            None => handler_update_kinds(&handler, id.clone(), &vars).await?,
        };
        let mut payload = SetWebhook::new(url.clone())
            .secret_token(secret.expose_secret())
            .allowed_updates(kinds)
            .drop_pending_updates(args.drop_pending_updates);
        if let Some(max) = args.max_connections {
            payload = payload.max_connections(max);
        }
        if let Err(error) = tgq_telegram::call(&api, &payload).await {
            // Taken out again, so that running the same command once the cause is fixed works.
            registry.remove(&id).await?;
            return Err(explain(error, &id)).context(format!(
                "Telegram refused the webhook {url}; the bot {id} was taken out of the registry again"
            ));
        }
    }
    outln!(
        "Bot {id} added to {} with handler {}.",
        registry.describe(),
        handler
    );
    match url {
        Some(url) => outln!("Telegram now POSTs its updates to {url} with its own secret."),
        None => outln!("It has no token: its sends go to the offline outbox (`tgq outbox`)."),
    }
    outln!(
        "Running functions pick it up within {} s, without a redeploy.",
        tgq_core::defaults::REGISTRY_REFRESH.as_secs()
    );
    Ok(())
}

/// A bot in `tgq bots list`.
#[derive(Debug, Serialize)]
struct BotView {
    id: String,
    handler: String,
    /// The token's bot user id (the digits before `:`, not secret); `None` offline.
    telegram_user_id: Option<String>,
    allowed_updates: Vec<AllowedUpdate>,
    webhook_url: Option<String>,
    pending_update_count: Option<u32>,
    last_error_message: Option<String>,
    /// Why Telegram could not be asked, when it could not.
    webhook_error: Option<String>,
    /// Dead letters addressed to the bot (of the first thousand on the queue).
    dead_letters: usize,
}

/// The queue every bot shares.
#[derive(Debug, Serialize)]
struct SharedQueue {
    visible: u64,
    in_flight: u64,
    dead_letters: u64,
}

#[derive(Debug, Serialize)]
struct ListView {
    registry: String,
    bots: Vec<BotView>,
    incomplete: Vec<IncompleteView>,
    queue: Option<SharedQueue>,
    queue_error: Option<String>,
}

#[derive(Debug, Serialize)]
struct IncompleteView {
    id: String,
    why: &'static str,
}

/// `tgq bots list`.
async fn list(args: ListArgs) -> anyhow::Result<()> {
    let vars = Vars::from_env();
    let registry = Registry::open(&args.registry).await?;
    let (bots, incomplete) = registry.read().await?;
    let api_url = registry.api_url(&vars)?;
    let (queue, letters) = match queue_figures(&registry).await {
        Ok((queue, letters)) => (Ok(queue), letters),
        Err(error) => (Err(error), BTreeMap::new()),
    };
    let mut views = Vec::new();
    for bot in &bots {
        let mut view = BotView {
            id: bot.id.to_string(),
            handler: bot.handler.clone(),
            telegram_user_id: bot.token.as_ref().map(token_user_id),
            allowed_updates: bot.allowed_updates.clone(),
            webhook_url: None,
            pending_update_count: None,
            last_error_message: None,
            webhook_error: None,
            dead_letters: letters.get(bot.id.as_str()).copied().unwrap_or(0),
        };
        if let Some(token) = &bot.token {
            let api = HttpBotApi::new(&api_url, token.clone(), TIMEOUT)?;
            match tgq_telegram::call(&api, &GetWebhookInfo::new()).await {
                Ok(info) => {
                    view.webhook_url = info.url.map(String::from);
                    view.pending_update_count = Some(info.pending_update_count);
                    view.last_error_message = info.last_error_message;
                }
                Err(error) => view.webhook_error = Some(error.to_string()),
            }
        }
        views.push(view);
    }
    let (queue, queue_error) = match queue {
        Ok(queue) => (Some(queue), None),
        Err(error) => (None, Some(format!("{error:#}"))),
    };
    let view = ListView {
        registry: registry.describe(),
        bots: views,
        incomplete: incomplete
            .into_iter()
            .map(|(id, why)| IncompleteView { id, why })
            .collect(),
        queue,
        queue_error,
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&view)?);
    } else {
        render_list(&view);
    }
    Ok(())
}

/// The shared queue's figures and the dead letters per bot id.
async fn queue_figures(
    registry: &Registry,
) -> anyhow::Result<(SharedQueue, BTreeMap<String, usize>)> {
    match registry {
        #[cfg(feature = "aws")]
        Registry::Aws { deployment, .. } => {
            let (visible, in_flight) = deployment.queue().depth_by_state().await?;
            let (dead_visible, dead_in_flight) = deployment.dlq().depth_by_state().await?;
            let letters = deployment.dlq().peek(LETTERS_COUNTED).await?;
            Ok((
                SharedQueue {
                    visible,
                    in_flight,
                    dead_letters: dead_visible + dead_in_flight,
                },
                count_by_bot(letters.iter().map(|letter| letter.bot_id.to_string())),
            ))
        }
        Registry::Local { data_dir, .. } => {
            let (status, letters): (StatusView, Vec<LetterView>) =
                match super::client::open(data_dir, super::client::Access::Read).await? {
                    Local::Store(store) => {
                        let read = async {
                            let status = StatusView::read(&store, SystemClock.now())?;
                            let operator = super::dlq::local_operator(&store, String::new())?;
                            let letters =
                                super::dlq::list_letters(&operator, LETTERS_COUNTED).await?;
                            anyhow::Ok((status, letters))
                        }
                        .await;
                        super::client::close(store).await;
                        read?
                    }
                    Local::Running(addr) => (
                        super::client::get(addr, "/admin/status").await?,
                        super::client::get(addr, &format!("/admin/dlq?limit={LETTERS_COUNTED}"))
                            .await?,
                    ),
                };
            Ok((
                SharedQueue {
                    visible: status.stats.pending,
                    in_flight: status.stats.in_flight,
                    dead_letters: status.stats.dead,
                },
                count_by_bot(letters.into_iter().map(|letter| letter.bot_id)),
            ))
        }
    }
}

fn count_by_bot(bots: impl Iterator<Item = String>) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for bot in bots {
        *counts.entry(bot).or_default() += 1;
    }
    counts
}

fn render_list(view: &ListView) {
    outln!("Bots in {}:", view.registry);
    if view.bots.is_empty() {
        outln!("  none yet: `tgq bots add ID` registers one");
    }
    for bot in &view.bots {
        outln!();
        outln!("{}", bot.id);
        outln!("  handler           {}", bot.handler);
        match &bot.telegram_user_id {
            Some(user) => outln!("  telegram user id  {user}"),
            None => outln!("  telegram user id  none: offline, sends go to the outbox"),
        }
        if !bot.allowed_updates.is_empty() {
            let names: Vec<String> = bot
                .allowed_updates
                .iter()
                .filter_map(|kind| serde_json::to_value(kind).ok())
                .filter_map(|value| value.as_str().map(str::to_owned))
                .collect();
            outln!("  allowed updates   {}", names.join(", "));
        }
        if let Some(error) = &bot.webhook_error {
            outln!("  webhook           unknown: getWebhookInfo failed: {error}");
        } else if bot.telegram_user_id.is_some() {
            outln!(
                "  webhook           {}",
                bot.webhook_url.as_deref().unwrap_or("none")
            );
            if let Some(pending) = bot.pending_update_count {
                outln!("  pending updates   {pending} (held by Telegram)");
            }
            if let Some(message) = &bot.last_error_message {
                outln!("  last error        {message}");
            }
        }
        outln!("  dead letters      {}", bot.dead_letters);
    }
    for incomplete in &view.incomplete {
        outln!();
        outln!(
            "{} (incomplete, served by nothing: {})",
            incomplete.id,
            incomplete.why
        );
    }
    outln!();
    match (&view.queue, &view.queue_error) {
        (Some(queue), _) => outln!(
            "Queue, shared by every bot: {} visible, {} in flight; {} dead letters.",
            queue.visible,
            queue.in_flight,
            queue.dead_letters
        ),
        (None, Some(error)) => outln!("Queue figures unavailable: {error}"),
        (None, None) => {}
    }
}

/// `tgq bots remove`.
async fn remove(args: RemoveArgs) -> anyhow::Result<()> {
    let vars = Vars::from_env();
    let id = args.id;
    let registry = Registry::open(&args.registry).await?;
    if !registry.has(&id).await? {
        let (bots, _) = registry.read().await?;
        let names: Vec<String> = bots.iter().map(|bot| bot.id.to_string()).collect();
        bail!(
            "there is no bot {id} in {} (registered: {})",
            registry.describe(),
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        );
    }
    let (bots, _) = registry.read().await?;
    let token = bots
        .iter()
        .find(|bot| bot.id == id)
        .and_then(|bot| bot.token.clone());
    if let Some(token) = token {
        let api = HttpBotApi::new(&registry.api_url(&vars)?, token, TIMEOUT)?;
        let payload = DeleteWebhook::new().drop_pending_updates(args.drop_pending_updates);
        match tgq_telegram::call(&api, &payload).await {
            Ok(_) => outln!("Webhook of the bot {id} deleted at Telegram."),
            // A revoked token delivers nothing any more: there is no webhook left to delete.
            Err(TelegramError::Api { code: 401, .. }) => {
                errln!("note: Telegram no longer accepts the token of the bot {id} (401): no webhook to delete");
            }
            Err(error) => {
                return Err(explain(error, &id)).context(format!(
                    "cannot delete the webhook of the bot {id}; nothing was removed"
                ))
            }
        }
    }
    registry.remove(&id).await?;
    outln!(
        "Bot {id} removed from {}. Its records stay until their TTL; its dead letters stay on \
         the dead-letter queue (`tgq dlq list`).",
        registry.describe()
    );
    Ok(())
}

/// The bot's user id: the digits before the token's `:` (not secret; getMe returns it too).
fn token_user_id(token: &SecretString) -> String {
    token
        .expose_secret()
        .split_once(':')
        .map(|(user, _)| user.to_owned())
        .unwrap_or_default()
}

/// Telegram's error, naming the bot, with a hint where the cause is usually the token.
fn explain(error: TelegramError, id: &BotId) -> anyhow::Error {
    match error {
        TelegramError::Api {
            code: 401 | 404, ..
        } => anyhow::anyhow!(
            "{error} (the token of the bot {id} is wrong or revoked, or TELEGRAM_API_URL is wrong)"
        ),
        other => anyhow::anyhow!(other),
    }
}
