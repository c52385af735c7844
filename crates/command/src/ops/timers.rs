//! `tgq timers list | cancel`: the chats' pending timers, in local mode's store (while `tgq local`
//! runs, the running instance answers through its admin routes) or in a stack's table.

use anyhow::bail;
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};
use tgq_core::clock::{Clock as _, SystemClock};
use tgq_core::ids::{BotId, GroupKey};
#[cfg(feature = "aws")]
use tgq_core::ids::{StateKey, UpdateId};
use tgq_embedded::{Cancelled, EmbeddedStore, PendingTimer};

use super::client::{self, Local};
#[cfg(feature = "aws")]
use super::target::Deployment;
use super::target::{Target, TargetArgs};
use super::DEFAULT_LIMIT;

/// `tgq timers …`.
#[derive(Debug, Subcommand)]
pub enum TimersCommand {
    /// List the chats' pending timers (and flow timeouts), the earliest due first.
    List(ListArgs),
    /// Cancel a chat's pending timer: when it comes due it is acknowledged without running.
    Cancel(CancelArgs),
}

/// `tgq timers list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Show at most this many timers, the earliest due first.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_LIMIT, value_parser = super::limit)]
    limit: usize,
}

/// `tgq timers cancel`.
#[derive(Debug, Args)]
pub struct CancelArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// The chat's id (its group, as `tgq timers list` shows it).
    chat: String,
    /// The timer's key.
    key: String,
    /// The bot whose chat it is [default: TGQ_BOT_ID, or `local`].
    #[arg(long, value_name = "ID")]
    bot: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// What `POST /admin/timers/cancel` takes.
#[derive(Debug, Serialize, Deserialize)]
pub struct CancelRequest {
    /// The bot.
    pub bot: String,
    /// The chat's group.
    pub chat: String,
    /// The timer's key.
    pub key: String,
}

/// What a cancel did, as `--json` prints it.
#[derive(Debug, Serialize, Deserialize)]
pub struct CancelView {
    /// Whether the timer was pending and is now cancelled.
    pub cancelled: bool,
}

/// Runs one `tgq timers` subcommand.
pub async fn run(command: TimersCommand) -> anyhow::Result<()> {
    match command {
        TimersCommand::List(args) => list(args).await,
        TimersCommand::Cancel(args) => cancel(args).await,
    }
}

async fn list(args: ListArgs) -> anyhow::Result<()> {
    let limit = args.limit;
    let timers: Vec<PendingTimer> = match args.target.resolve().await? {
        Target::Local(dir) => {
            let route = format!("/admin/timers?limit={limit}");
            let (timers, _) = client::read(&dir, &route, move |store: &EmbeddedStore| {
                Ok(store.pending_timers(limit)?)
            })
            .await?;
            timers
        }
        #[cfg(feature = "aws")]
        Target::Aws(deployment) => deployment
            .store()
            .pending_timers(limit)
            .await?
            .into_iter()
            .map(|t| PendingTimer {
                bot_id: t.bot_id,
                chat: t.chat,
                key: t.key,
                due: t.due,
                id: t.id,
            })
            .collect(),
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&timers)?);
        return Ok(());
    }
    if timers.is_empty() {
        outln!("no pending timers");
        return Ok(());
    }
    let now = SystemClock.now();
    outln!("{:<12} {:<16} {:<24} DUE", "BOT", "CHAT", "KEY");
    for timer in &timers {
        let due = match timer.due.checked_sub(now.0) {
            Some(ms) => format!("in {}", human(ms / 1000)),
            None => format!(
                "{} ago (queued, or waiting behind the chat)",
                human((now.0 - timer.due) / 1000)
            ),
        };
        outln!(
            "{:<12} {:<16} {:<24} {due}",
            timer.bot_id,
            timer.chat,
            timer.key
        );
    }
    Ok(())
}

fn human(secs: u64) -> String {
    match secs {
        s if s < 120 => format!("{s} s"),
        s if s < 7200 => format!("{} min", s / 60),
        s if s < 172_800 => format!("{} h", s / 3600),
        s => format!("{} days", s / 86_400),
    }
}

async fn cancel(args: CancelArgs) -> anyhow::Result<()> {
    let target = args.target.resolve().await?;
    let default_bot = match &target {
        #[cfg(feature = "aws")]
        Target::Aws(deployment) => deployment.bot_id.clone(),
        Target::Local(_) => None,
    };
    let bot = match args.bot {
        Some(bot) => bot,
        None => default_bot
            .or_else(|| std::env::var("TGQ_BOT_ID").ok())
            .unwrap_or_else(|| crate::config::LOCAL_BOT_ID.to_owned()),
    };
    let request = CancelRequest {
        bot,
        chat: args.chat,
        key: args.key,
    };
    let view: CancelView = match target {
        Target::Local(dir) => match client::open(&dir, client::Access::Write).await? {
            Local::Store(store) => {
                let cancelled = cancel_here(&store, &request).await;
                client::close(store).await;
                cancelled?
            }
            Local::Running(addr) => client::post(addr, "/admin/timers/cancel", &request).await?,
        },
        #[cfg(feature = "aws")]
        Target::Aws(deployment) => cancel_on_stack(&deployment, &request).await?,
    };
    match (args.json, view.cancelled) {
        (true, _) => outln!("{}", serde_json::to_string_pretty(&view)?),
        (false, true) => outln!(
            "cancelled timer {:?} of chat {} (bot {})",
            request.key,
            request.chat,
            request.bot
        ),
        (false, false) => bail!(
            "chat {} of bot {} has no pending timer {:?}; `tgq timers list` shows those there are",
            request.chat,
            request.bot,
            request.key
        ),
    }
    Ok(())
}

/// Cancels in a stack's table, then deletes the timer's schedule if it has one that has not
/// fired: without it the schedule fires and the timer is acknowledged without running, so a
/// failure to delete it is only said.
#[cfg(feature = "aws")]
async fn cancel_on_stack(
    deployment: &Deployment,
    request: &CancelRequest,
) -> anyhow::Result<CancelView> {
    let bot = BotId::new(request.bot.clone()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let key = StateKey::new(bot.clone(), GroupKey::new(request.chat.clone()));
    let Some(id) = deployment.store().cancel_timer(&key, &request.key).await? else {
        return Ok(CancelView { cancelled: false });
    };
    if let Some(group) = &deployment.schedule_group {
        let client = aws_sdk_scheduler::Client::new(&deployment.sdk);
        if let Err(error) = tgq_aws::delete_schedule(&client, group, &bot, UpdateId(id)).await {
            errln!(
                "the timer is cancelled; its schedule, if it has one, was not deleted ({}): it will \
                 fire and be acknowledged without running",
                tgq_core::error::error_chain(&error)
            );
        }
    }
    Ok(CancelView { cancelled: true })
}

/// Cancels on a store this process holds: the CLI's own, or the running instance's.
pub async fn cancel_here(
    store: &EmbeddedStore,
    request: &CancelRequest,
) -> anyhow::Result<CancelView> {
    let bot = BotId::new(request.bot.clone()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let done = store
        .cancel_timer(&bot, &GroupKey::new(request.chat.clone()), &request.key)
        .await?;
    Ok(CancelView {
        cancelled: done == Cancelled::Cancelled,
    })
}
