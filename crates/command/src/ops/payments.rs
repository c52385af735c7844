//! `tgq payments list | show | refund`: the payments ledger (docs/design/payments.md §2, §3), in
//! local mode's store (while `tgq local` runs, the running instance answers through its admin
//! routes) or in a stack's table.

use std::path::Path;
use std::sync::Arc;

use anyhow::bail;
use async_trait::async_trait;
use clap::{Args, Subcommand};
use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use tgq_core::audit::{AuditEntry, AuditLog};
use tgq_core::bots::{BotDirectory, Lookup};
use tgq_core::clock::SystemClock;
use tgq_core::config::Vars;
use tgq_core::defaults;
use tgq_core::ids::BotId;
use tgq_core::payment::{Charge, ChargeWrite, LedgerEntry};
use tgq_core::ports::ChargeBook;
use tgq_core::reconcile::{reconcile as compare, star_transactions, Reconciliation};
use tgq_core::record::Timestamp;
use tgq_core::refund::{refund_charge, RefundError, RefundPorts, RefundRequest};
use tgq_core::telegram::BotApi;
use tgq_core::PortError;
use tgq_embedded::{BotsFile, EmbeddedStore};
use tgq_telegram::HttpBotApi;

use super::client::{self, Local};
use super::target::{audit_ttl, local_principal, Target, TargetArgs};
use super::DEFAULT_LIMIT;
use crate::config::local_bot_id;

/// `tgq payments …`.
#[derive(Debug, Subcommand)]
pub enum PaymentsCommand {
    /// List the charges the bots were paid, the newest first.
    List(ListArgs),
    /// Show one charge by its Telegram charge id.
    Show(ShowArgs),
    /// Give a charge's Stars back to its payer (refundStarPayment), once, and mark it refunded in
    /// the ledger; audited (`tgq dlq audit`).
    Refund(RefundArgs),
    /// Compare a bot's ledger with Telegram's list of its Star transactions (getStarTransactions):
    /// what each side has that the other lacks. Changes nothing; exits 3 when they differ, 1 when
    /// it could not compare.
    Reconcile(ReconcileArgs),
}

/// `tgq payments list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Only this bot's charges.
    #[arg(long, value_name = "ID")]
    bot: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Show at most this many charges, the newest first.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_LIMIT, value_parser = super::limit)]
    limit: usize,
}

/// The one charge `tgq payments show` and `refund` act on.
#[derive(Debug, Args)]
pub struct ChargeArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// The charge's `telegram_payment_charge_id`.
    charge: String,
    /// Only this bot's charge (for a charge id several bots' ledgers hold).
    #[arg(long, value_name = "ID")]
    bot: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// `tgq payments show`.
pub type ShowArgs = ChargeArgs;

/// `tgq payments refund`.
#[derive(Debug, Args)]
pub struct RefundArgs {
    #[command(flatten)]
    of: ChargeArgs,
    /// Refund without being asked on the terminal.
    #[arg(long)]
    yes: bool,
}

/// `tgq payments reconcile`.
#[derive(Debug, Args)]
pub struct ReconcileArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// The bot [default: the environment's (TGQ_BOT_ID, else `local`), or the stack's own].
    #[arg(long, value_name = "ID")]
    bot: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs one `tgq payments` subcommand.
pub async fn run(command: PaymentsCommand) -> anyhow::Result<()> {
    match command {
        PaymentsCommand::List(args) => {
            let entries = ledger(args.target, args.bot.as_deref(), args.limit).await?;
            list(&entries, args.json)
        }
        PaymentsCommand::Show(args) => {
            let entries = ledger(args.target, args.bot.as_deref(), usize::MAX).await?;
            let found: Vec<&LedgerEntry> = entries
                .iter()
                .filter(|entry| entry.charge.id == args.charge)
                .collect();
            if found.is_empty() {
                bail!(
                    "no charge {:?} in the payments ledger{}; `tgq payments list` shows those there are",
                    args.charge,
                    args.bot.map(|bot| format!(" of bot {bot}")).unwrap_or_default()
                );
            }
            if args.json {
                outln!("{}", serde_json::to_string_pretty(&found)?);
                return Ok(());
            }
            for entry in found {
                let charge = &entry.charge;
                outln!("charge     {}", charge.id);
                outln!("bot        {}", entry.bot_id);
                outln!("user       {}", charge.user);
                outln!("stars      {}", charge.stars);
                outln!("payload    {}", charge.payload);
                outln!("update     {}", charge.update_id);
                outln!("recorded   {}", when(charge.recorded_at));
                if let Some(at) = charge.refunded_at {
                    outln!("refunded   {}", when(at));
                }
                if let Some(subscription) = charge.subscription {
                    let until = u64::try_from(subscription.until).unwrap_or(0);
                    outln!(
                        "period     {} until {}",
                        match subscription.renewal {
                            true => "a subscription's renewal,",
                            false => "a subscription's first,",
                        },
                        when(Timestamp(until.saturating_mul(1000)))
                    );
                }
            }
            Ok(())
        }
        PaymentsCommand::Refund(args) => refund(args).await,
        PaymentsCommand::Reconcile(args) => reconcile(args).await,
    }
}

/// The ledger's charges, newest first, at most `limit`, of `bot` only when given.
async fn ledger(
    target: TargetArgs,
    bot: Option<&str>,
    limit: usize,
) -> anyhow::Result<Vec<LedgerEntry>> {
    // A bot filter reads the whole ledger, then keeps the bot's newest.
    let read = if bot.is_some() { usize::MAX } else { limit };
    let entries = match target.resolve().await? {
        Target::Local(dir) => {
            let route = format!("/admin/payments?limit={read}");
            let (entries, _) = client::read(&dir, &route, move |store: &EmbeddedStore| {
                Ok(store.charges(read)?)
            })
            .await?;
            entries
        }
        #[cfg(feature = "aws")]
        Target::Aws(deployment) => deployment.store().charges(read).await?,
    };
    Ok(entries
        .into_iter()
        .filter(|entry| bot.is_none_or(|bot| entry.bot_id == bot))
        .take(limit)
        .collect())
}

fn list(entries: &[LedgerEntry], json: bool) -> anyhow::Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(entries)?);
        return Ok(());
    }
    if entries.is_empty() {
        outln!("no charges in the payments ledger");
        return Ok(());
    }
    outln!(
        "{:<12} {:<28} {:>12} {:>7} {:<20} RECORDED",
        "BOT",
        "CHARGE",
        "USER",
        "STARS",
        "PAYLOAD"
    );
    for entry in entries {
        let charge = &entry.charge;
        outln!(
            "{:<12} {:<28} {:>12} {:>7} {:<20} {}",
            entry.bot_id,
            charge.id,
            charge.user,
            charge.stars,
            charge.payload,
            when(charge.recorded_at)
        );
    }
    Ok(())
}

/// A time as UTC.
fn when(at: Timestamp) -> String {
    super::render::utc(at.0)
}

/// What `tgq payments refund` asks of the running `tgq local` (`POST /admin/payments/refund`).
#[derive(Debug, Serialize, Deserialize)]
pub struct RefundBody {
    /// The charge's bot.
    pub bot: BotId,
    /// The charge id.
    pub charge: String,
    /// Who asked, for the audit trail.
    pub principal: String,
}

/// A refund done, as `tgq payments refund --json` prints it.
#[derive(Debug, Serialize, Deserialize)]
pub struct RefundView {
    /// The charge's bot.
    pub bot_id: String,
    /// The entry, marked refunded.
    pub charge: Charge,
    /// Whether Telegram had refunded it before (`CHARGE_ALREADY_REFUNDED`).
    pub refunded_before: bool,
}

async fn refund(RefundArgs { of: args, yes }: RefundArgs) -> anyhow::Result<()> {
    let entries = ledger(args.target.clone(), args.bot.as_deref(), usize::MAX).await?;
    let found: Vec<&LedgerEntry> = entries
        .iter()
        .filter(|entry| entry.charge.id == args.charge)
        .collect();
    let entry =
        match found.as_slice() {
            [] => bail!(
            "no charge {:?} in the payments ledger{}; nothing was refunded (`tgq payments list` \
             shows the charges there are)",
            args.charge,
            args.bot.map(|bot| format!(" of bot {bot}")).unwrap_or_default()
        ),
            [one] => *one,
            several => bail!(
                "the charge {:?} is in the ledgers of bots {}: pass --bot; nothing was refunded",
                args.charge,
                several
                    .iter()
                    .map(|entry| entry.bot_id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
    if let Some(at) = entry.charge.refunded_at {
        bail!(
            "the charge {:?} was refunded at {}, as the ledger shows; nothing was asked of Telegram",
            entry.charge.id,
            when(at)
        );
    }
    if !yes {
        confirm(entry)?;
    }
    let bot = BotId::new(entry.bot_id.clone())?;
    let view = match args.target.resolve().await? {
        Target::Local(dir) => match client::open(&dir, client::Access::Write).await? {
            Local::Store(store) => {
                // Not held while Telegram is asked: see `StoreAt`.
                client::close(store).await;
                let at = Arc::new(StoreAt(dir.clone()));
                let ports = RefundPorts {
                    book: at.clone(),
                    audit: at,
                    telegram: local_telegram(&dir, &bot)?,
                    clock: Arc::new(SystemClock),
                };
                refunded(&ports, &bot, &args.charge, local_principal()).await?
            }
            Local::Running(addr) => {
                let body = RefundBody {
                    bot: bot.clone(),
                    charge: args.charge.clone(),
                    principal: local_principal(),
                };
                client::post(addr, "/admin/payments/refund", &body).await?
            }
        },
        #[cfg(feature = "aws")]
        Target::Aws(deployment) => {
            let telegram = stack_telegram(&deployment, &bot).await?;
            let principal = deployment.principal().await?;
            let store = deployment.store();
            let ports = RefundPorts {
                book: store.clone(),
                audit: store,
                telegram,
                clock: Arc::new(SystemClock),
            };
            refunded(&ports, &bot, &args.charge, principal).await?
        }
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&view)?);
        return Ok(());
    }
    let charge = &view.charge;
    match view.refunded_before {
        false => outln!(
            "Refunded charge {} of bot {}: {} Stars back to user {}.",
            charge.id,
            view.bot_id,
            charge.stars,
            charge.user
        ),
        true => outln!(
            "Telegram had refunded charge {} of bot {} before (CHARGE_ALREADY_REFUNDED); the ledger \
             now marks it refunded.",
            charge.id,
            view.bot_id
        ),
    }
    Ok(())
}

/// Asks on the terminal before a refund; refuses without a terminal to ask on.
fn confirm(entry: &LedgerEntry) -> anyhow::Result<()> {
    let charge = &entry.charge;
    let what = format!(
        "charge {} of bot {}: {} Stars back to user {}",
        charge.id, entry.bot_id, charge.stars, charge.user
    );
    super::confirm(
        &format!("Refund {what}? This cannot be undone."),
        format!("a refund cannot be undone ({what}): pass --yes to refund without being asked"),
        "nothing was refunded",
    )
}

/// What `tgq payments reconcile --json` prints.
#[derive(Debug, Serialize)]
struct ReconcileView<'a> {
    bot_id: &'a str,
    #[serde(flatten)]
    report: &'a Reconciliation,
}

async fn reconcile(args: ReconcileArgs) -> anyhow::Result<()> {
    let target = args.target.clone().resolve().await?;
    let bot = match (&args.bot, &target) {
        (Some(bot), _) => BotId::new(bot.clone())?,
        (None, Target::Local(_)) => local_bot_id(&Vars::from_env())?,
        #[cfg(feature = "aws")]
        (None, Target::Aws(deployment)) => match &deployment.bot_id {
            Some(bot) => BotId::new(bot.clone())?,
            None => bail!("the stack has no BotId output: pass --bot"),
        },
    };
    let telegram = match &target {
        Target::Local(dir) => local_telegram(dir, &bot)?,
        #[cfg(feature = "aws")]
        Target::Aws(deployment) => stack_telegram(deployment, &bot).await?,
    };
    let entries = ledger(args.target, Some(bot.as_str()), usize::MAX).await?;
    let charges: Vec<Charge> = entries.into_iter().map(|entry| entry.charge).collect();
    let transactions = star_transactions(telegram.as_ref())
        .await
        .map_err(|error| {
            anyhow::anyhow!(
            "could not read the Star transactions of bot {bot} from Telegram: {error}; nothing was \
             compared, nothing changed"
        )
        })?;
    let report = compare(&charges, &transactions);
    match args.json {
        true => outln!(
            "{}",
            serde_json::to_string_pretty(&ReconcileView {
                bot_id: bot.as_str(),
                report: &report,
            })?
        ),
        false => render_reconciliation(&bot, &report),
    }
    match report.differences() {
        0 => Ok(()),
        n => Err(Differences { bot, n }.into()),
    }
}

/// What `tgq payments reconcile` ends with when the ledger and Telegram differ: exit code
/// [`Differences::EXIT_CODE`], told apart from a failure to compare (1).
#[derive(Debug, thiserror::Error)]
#[error("the ledger of bot {bot} and Telegram differ in {n} charge(s)")]
pub struct Differences {
    bot: BotId,
    n: usize,
}

impl Differences {
    /// The exit code.
    pub const EXIT_CODE: u8 = 3;
}

fn render_reconciliation(bot: &BotId, report: &Reconciliation) {
    outln!(
        "bot {bot}: Telegram lists {} payment(s), the ledger holds {} charge(s); {} alike.",
        report.at_telegram,
        report.in_ledger,
        report.matched
    );
    if report.other_transactions > 0 {
        outln!(
            "{} other transaction(s) at Telegram (withdrawals, ads, gifts) are not compared.",
            report.other_transactions
        );
    }
    if report.differences() == 0 {
        outln!("The ledger and Telegram agree.");
        return;
    }
    if !report.only_at_telegram.is_empty() {
        outln!();
        outln!(
            "At Telegram, not in the ledger ({}):",
            report.only_at_telegram.len()
        );
        outln!(
            "  {:<28} {:>12} {:>7} {:<24} PAYLOAD",
            "CHARGE",
            "USER",
            "STARS",
            "PAID"
        );
        for paid in &report.only_at_telegram {
            outln!(
                "  {:<28} {:>12} {:>7} {:<24} {}",
                paid.id,
                paid.user,
                paid.stars,
                when(Timestamp(
                    u64::try_from(paid.date).unwrap_or(0).saturating_mul(1000)
                )),
                paid.payload.as_deref().unwrap_or("")
            );
        }
    }
    if !report.only_in_ledger.is_empty() {
        outln!();
        outln!(
            "In the ledger, not at Telegram ({}):",
            report.only_in_ledger.len()
        );
        outln!(
            "  {:<28} {:>12} {:>7} {:<24} PAYLOAD",
            "CHARGE",
            "USER",
            "STARS",
            "RECORDED"
        );
        for charge in &report.only_in_ledger {
            outln!(
                "  {:<28} {:>12} {:>7} {:<24} {}",
                charge.id,
                charge.user,
                charge.stars,
                when(charge.recorded_at),
                charge.payload
            );
        }
    }
    for (title, ids) in [
        (
            "Refunded at Telegram, not marked in the ledger",
            &report.refunded_only_at_telegram,
        ),
        (
            "Marked refunded in the ledger, no refund at Telegram",
            &report.refunded_only_in_ledger,
        ),
    ] {
        if !ids.is_empty() {
            outln!();
            outln!("{title} ({}):", ids.len());
            for id in ids {
                outln!("  {id}");
            }
        }
    }
    if !report.stars_differ.is_empty() {
        outln!();
        outln!("Stars differ ({}):", report.stars_differ.len());
        for differ in &report.stars_differ {
            outln!(
                "  {}: the ledger {}, Telegram {}",
                differ.id,
                differ.ledger,
                differ.telegram
            );
        }
    }
}

/// Local mode's store while `tgq local` is stopped, opened for each read or write of a refund and
/// closed after it. Held across the call to Telegram (up to its timeout), it would keep `tgq
/// local` from starting meanwhile, and a command killed then would leave the file to be repaired
/// before anything could read it.
struct StoreAt(std::path::PathBuf);

impl StoreAt {
    const WHAT: &'static str = "store";

    async fn open(&self) -> Result<Arc<EmbeddedStore>, PortError> {
        match client::open(&self.0, client::Access::Write).await {
            Ok(Local::Store(store)) => Ok(store),
            Ok(Local::Running(addr)) => Err(PortError::unavailable(
                Self::WHAT,
                format!("tgq local started meanwhile and holds the store ({addr})"),
            )),
            Err(error) => Err(PortError::unavailable(Self::WHAT, format!("{error:#}"))),
        }
    }
}

#[async_trait]
impl ChargeBook for StoreAt {
    async fn entry(&self, bot: &BotId, id: &str) -> Result<Option<Charge>, PortError> {
        let store = self.open().await?;
        let entry = store.entry(bot, id).await;
        client::close(store).await;
        entry
    }

    async fn write_charge(&self, bot: &BotId, write: &ChargeWrite) -> Result<(), PortError> {
        let store = self.open().await?;
        let written = store.write_charge(bot, write).await;
        client::close(store).await;
        written
    }
}

#[async_trait]
impl AuditLog for StoreAt {
    async fn append(&self, entry: &AuditEntry) -> Result<(), PortError> {
        let store = self.open().await?;
        let appended = store.append(entry).await;
        client::close(store).await;
        appended
    }
}

/// The refund on the running `tgq local`'s store, with `telegram` as the bot's Bot API: what its
/// admin route runs.
pub async fn refund_here(
    store: &Arc<EmbeddedStore>,
    telegram: Arc<dyn BotApi>,
    bot: &BotId,
    charge: &str,
    principal: String,
) -> anyhow::Result<RefundView> {
    let ports = RefundPorts {
        book: store.clone(),
        audit: store.clone(),
        telegram,
        clock: Arc::new(SystemClock),
    };
    refunded(&ports, bot, charge, principal).await
}

async fn refunded(
    ports: &RefundPorts,
    bot: &BotId,
    charge: &str,
    principal: String,
) -> anyhow::Result<RefundView> {
    let request = RefundRequest {
        bot: bot.clone(),
        charge: charge.to_owned(),
        principal,
        audit_ttl: audit_ttl()?,
    };
    let done = refund_charge(ports, &request).await.map_err(explain)?;
    Ok(RefundView {
        bot_id: bot.to_string(),
        charge: done.charge,
        refunded_before: done.before,
    })
}

/// A refusal in the command's words: the ledger's refund time as UTC.
fn explain(error: RefundError) -> anyhow::Error {
    match error {
        RefundError::AlreadyRefunded { charge, at } => anyhow::anyhow!(
            "the charge {charge:?} was refunded at {}, as the ledger shows; nothing was asked of \
             Telegram",
            when(at)
        ),
        other => other.into(),
    }
}

/// The Bot API of `bot` through the running instance's bots: refused for a bot it does not
/// serve or one without a token (its sends go to the offline outbox, never to Telegram).
pub async fn served_telegram(
    bots: &dyn BotDirectory,
    bot: &BotId,
) -> anyhow::Result<Arc<dyn BotApi>> {
    match bots.lookup(bot).await {
        Lookup::Found(runtime) if runtime.api.records_outcomes() => Err(offline(bot)),
        Lookup::Found(runtime) => Ok(runtime.api.clone()),
        Lookup::Refused(_, why) => bail!("{why}; nothing was refunded"),
        Lookup::Unavailable(error) => {
            bail!("bot {bot} cannot reach Telegram now: {error}; nothing was refunded")
        }
    }
}

fn offline(bot: &BotId) -> anyhow::Error {
    anyhow::anyhow!(
        "bot {bot} has no token here: its sends go to the offline outbox, and a refund needs \
         Telegram; nothing was refunded"
    )
}

/// The Bot API of `bot` as `tgq local` in `data_dir` reaches it: its `bots.json` entry's token,
/// or for the environment's bot (TGQ_BOT_ID, else `local`) TELEGRAM_BOT_TOKEN; TELEGRAM_API_URL.
fn local_telegram(data_dir: &Path, bot: &BotId) -> anyhow::Result<Arc<dyn BotApi>> {
    let vars = Vars::from_env();
    let listed = BotsFile::in_dir(data_dir).read()?;
    let token = match listed.into_iter().find(|entry| &entry.id == bot) {
        Some(entry) => entry.token.ok_or_else(|| offline(bot))?,
        None => {
            let env_bot = local_bot_id(&vars)?;
            if &env_bot != bot {
                bail!(
                    "bot {bot} is neither in {} nor the environment's bot ({env_bot}): its token \
                     is not known here; nothing was refunded",
                    BotsFile::in_dir(data_dir).path().display(),
                );
            }
            crate::config::bot_token(&vars)?.ok_or_else(|| {
                anyhow::anyhow!(
                    "set TELEGRAM_BOT_TOKEN to the token of bot {bot}, as `tgq local` is given \
                     it; nothing was refunded"
                )
            })?
        }
    };
    http_api(&vars.telegram_api_url()?, token)
}

fn http_api(url: &str, token: SecretString) -> anyhow::Result<Arc<dyn BotApi>> {
    Ok(Arc::new(HttpBotApi::new(
        url,
        token,
        defaults::TELEGRAM_TIMEOUT,
    )?))
}

/// The Bot API of `bot` as the stack reaches it: its entry in the stack's bot registry, or for
/// the stack's own bot TELEGRAM_BOT_TOKEN, else the stack's token parameter; TELEGRAM_API_URL,
/// else the stack's TelegramApiUrl output.
#[cfg(feature = "aws")]
async fn stack_telegram(
    deployment: &super::target::Deployment,
    bot: &BotId,
) -> anyhow::Result<Arc<dyn BotApi>> {
    use anyhow::Context as _;
    use tgq_core::config::SecretSource;

    let vars = Vars::from_env();
    let ssm = aws_sdk_ssm::Client::new(&deployment.sdk);
    let mut token = None;
    if let Some(prefix) = &deployment.bots_parameter_prefix {
        let layout = tgq_core::registry::Layout::new(prefix).with_context(|| {
            format!("the stack's BotsParameterPrefix {prefix} is not an SSM path")
        })?;
        let parsed = tgq_aws::SsmRegistry::new(ssm.clone(), layout)
            .read()
            .await?;
        token = parsed
            .bots
            .into_iter()
            .find(|entry| &entry.id == bot)
            .and_then(|entry| entry.token);
    }
    if token.is_none() && deployment.bot_id.as_deref() == Some(bot.as_str()) {
        token = match (vars.bot_token(), &deployment.token_parameter) {
            (Some(SecretSource::Value(token)), _) => Some(token),
            (_, Some(name)) => {
                Some(tgq_aws::resolve_secret(&ssm, SecretSource::Parameter(name.clone())).await?)
            }
            _ => None,
        };
    }
    let Some(token) = token else {
        bail!(
            "the token of bot {bot} is not known: it is neither the stack's bot nor in its bot \
             registry (set TELEGRAM_BOT_TOKEN for the stack's bot); nothing was refunded"
        );
    };
    http_api(&deployment.api_url(&vars)?, token)
}
