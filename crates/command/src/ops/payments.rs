//! `tgq payments list | show`: the payments ledger (docs/design/payments.md §2), in local mode's
//! store (while `tgq local` runs, the running instance answers through its admin routes) or in a
//! stack's table.

use anyhow::bail;
use clap::{Args, Subcommand};
use tgq_core::payment::LedgerEntry;
use tgq_core::record::Timestamp;
use tgq_embedded::EmbeddedStore;

use super::client;
use super::target::{Target, TargetArgs};
use super::DEFAULT_LIMIT;

/// `tgq payments …`.
#[derive(Debug, Subcommand)]
pub enum PaymentsCommand {
    /// List the charges the bots were paid, the newest first.
    List(ListArgs),
    /// Show one charge by its Telegram charge id.
    Show(ShowArgs),
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

/// `tgq payments show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// The charge's `telegram_payment_charge_id`.
    charge: String,
    /// Only this bot's charge.
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
            }
            Ok(())
        }
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
