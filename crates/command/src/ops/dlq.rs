//! `tgq dlq list | show | replay | purge | audit`: the dead letters of a deployment on AWS or of
//! local mode's store, through the operator's use cases (`tgq_core::operate`). Locally, while
//! `tgq local` runs, the running instance does the work through its admin routes.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::bail;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use tgq_core::audit::AuditReader;
use tgq_core::clock::{Clock as _, SystemClock};
use tgq_core::operate::{Operator, OperatorPorts, OperatorSettings, Selection, Tally};
use tgq_embedded::EmbeddedStore;

use super::client::{self, Local};
use super::render;
use super::target::{audit_ttl, local_principal, Target, TargetArgs};
use super::DEFAULT_LIMIT;
use crate::views::{ActRequest, AuditView, LetterView, ReportView};

/// `tgq dlq …`.
#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// List dead letters, oldest first, leaving them in place (a FIFO queue shows at most the
    /// first ten letters of each chat).
    List(ListArgs),
    /// Show one letter whole, with the update's body.
    Show(ShowArgs),
    /// Put letters' updates back on the updates queue: each record restarted with a fresh budget,
    /// each letter deleted once its update is sent, each replay audited.
    Replay(ReplayArgs),
    /// Delete letters for good, each deletion audited (asks first unless --yes).
    Purge(PurgeArgs),
    /// The audit trail: replays, purges, and redrives started in the SQS console, newest first.
    Audit(AuditArgs),
}

/// `tgq dlq list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Show at most this many letters, oldest first.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_LIMIT, value_parser = super::limit)]
    limit: usize,
}

/// `tgq dlq show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// The letter's id, as `tgq dlq list` shows it.
    id: String,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Which letters `replay` and `purge` act on.
#[derive(Debug, Args)]
pub struct Letters {
    /// The letters' ids, as `tgq dlq list` shows them.
    #[arg(
        value_name = "ID",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    ids: Vec<String>,
    /// Every letter in the queue.
    #[arg(long)]
    all: bool,
}

impl Letters {
    fn selection(&self) -> Selection {
        match self.all {
            true => Selection::All,
            false => Selection::Ids(self.ids.iter().cloned().collect()),
        }
    }

    fn is_bulk(&self) -> bool {
        self.all || self.ids.len() > 1
    }
}

/// `tgq dlq replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    letters: Letters,
    /// Check each letter against its record as a replay would, and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Replay letters whose record is gone too (it expired, or was deleted): their recorded sends
    /// and steps went with it, so the update may send again what it sent before it died.
    #[arg(long)]
    force: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// `tgq dlq purge`.
#[derive(Debug, Args)]
pub struct PurgeArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    letters: Letters,
    /// Do not ask for confirmation.
    #[arg(long)]
    yes: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// `tgq dlq audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Show at most this many entries, newest first.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_LIMIT, value_parser = super::limit)]
    limit: usize,
}

/// Where the operator's use cases run: here, on the target's ports, or in the running
/// `tgq local` that holds the store.
enum Desk {
    Here {
        operator: Operator,
        audit: Arc<dyn AuditReader>,
        /// A store this command opened, closed at the end.
        opened: Option<Arc<EmbeddedStore>>,
    },
    Running(SocketAddr),
}

impl Desk {
    /// The desk for `target`, acting as `principal` (the caller's IAM identity on AWS).
    async fn open(target: &TargetArgs, acts: bool) -> anyhow::Result<Desk> {
        match target.resolve().await? {
            #[cfg(feature = "aws")]
            Target::Aws(deployment) => {
                let principal = match acts {
                    true => deployment.principal().await?,
                    false => String::new(),
                };
                let store = deployment.store();
                let operator = Operator::new(
                    OperatorSettings {
                        principal,
                        audit_ttl: audit_ttl()?,
                    },
                    OperatorPorts {
                        dead: deployment.dlq(),
                        records: store.clone(),
                        reset: store.clone(),
                        queue: deployment.queue(),
                        audit: store.clone(),
                        clock: Arc::new(SystemClock),
                    },
                );
                Ok(Desk::Here {
                    operator,
                    audit: store,
                    opened: None,
                })
            }
            Target::Local(dir) => match client::open(&dir, access(acts)).await? {
                Local::Store(store) => Ok(Desk::Here {
                    operator: local_operator(&store, local_principal())?,
                    audit: store.clone(),
                    opened: Some(store),
                }),
                Local::Running(addr) => Ok(Desk::Running(addr)),
            },
        }
    }

    async fn close(self) {
        if let Desk::Here {
            opened: Some(store),
            operator,
            audit,
        } = self
        {
            drop((operator, audit));
            client::close(store).await;
        }
    }
}

/// Listing, showing and the audit only read the store; replays and purges change it.
fn access(acts: bool) -> client::Access {
    match acts {
        true => client::Access::Write,
        false => client::Access::Read,
    }
}

/// The operator's use cases on local mode's store, acting as `principal`.
pub fn local_operator(store: &Arc<EmbeddedStore>, principal: String) -> anyhow::Result<Operator> {
    Ok(Operator::new(
        OperatorSettings {
            principal,
            audit_ttl: audit_ttl()?,
        },
        OperatorPorts {
            dead: store.clone(),
            records: store.clone(),
            reset: store.clone(),
            queue: store.clone(),
            audit: store.clone(),
            clock: Arc::new(SystemClock),
        },
    ))
}

/// Runs one `tgq dlq` subcommand.
pub async fn run(command: DlqCommand) -> anyhow::Result<()> {
    match command {
        DlqCommand::List(args) => list(args).await,
        DlqCommand::Show(args) => show(args).await,
        DlqCommand::Replay(args) => replay(args).await,
        DlqCommand::Purge(args) => purge(args).await,
        DlqCommand::Audit(args) => audit(args).await,
    }
}

async fn list(args: ListArgs) -> anyhow::Result<()> {
    let desk = Desk::open(&args.target, false).await?;
    let letters: anyhow::Result<Vec<LetterView>> = match &desk {
        Desk::Here { operator, .. } => list_letters(operator, args.limit).await,
        Desk::Running(addr) => {
            client::get(*addr, &format!("/admin/dlq?limit={}", args.limit)).await
        }
    };
    desk.close().await;
    let letters = letters?;
    match args.json {
        true => outln!("{}", serde_json::to_string_pretty(&letters)?),
        false => render::dead_letters(&letters),
    }
    Ok(())
}

/// Up to `limit` letters as `tgq dlq list` shows them.
pub async fn list_letters(operator: &Operator, limit: usize) -> anyhow::Result<Vec<LetterView>> {
    let now = SystemClock.now();
    let listed = operator.list(limit).await?;
    Ok(listed
        .iter()
        .map(|letter| LetterView::of(letter, now, false))
        .collect())
}

/// The letter `id` as `tgq dlq show` shows it.
pub async fn show_letter(operator: &Operator, id: &str) -> anyhow::Result<Option<LetterView>> {
    let shown = operator.show(id).await?;
    Ok(shown.map(|letter| LetterView::of(&letter, SystemClock.now(), true)))
}

async fn show(args: ShowArgs) -> anyhow::Result<()> {
    let desk = Desk::open(&args.target, false).await?;
    let shown: anyhow::Result<Option<LetterView>> = match &desk {
        Desk::Here { operator, .. } => show_letter(operator, &args.id).await,
        Desk::Running(addr) => {
            client::get(*addr, &format!("/admin/dlq/letter?id={}", args.id)).await
        }
    };
    desk.close().await;
    let Some(letter) = shown? else {
        bail!(
            "there is no letter {} in the dead-letter queue (a FIFO queue shows only the first ten \
             letters of each chat: `tgq dlq list` names the ones it shows)",
            args.id
        );
    };
    match args.json {
        true => outln!("{}", serde_json::to_string_pretty(&letter)?),
        false => render::letter(&letter),
    }
    Ok(())
}

/// A progress bar on stderr for a bulk action (hidden when stderr is not a terminal).
fn progress_bar(bulk: bool, json: bool, length: u64) -> ProgressBar {
    if !bulk || json {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(length);
    if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} letters  {msg}") {
        bar.set_style(style);
    }
    bar
}

/// Runs a replay or purge on the desk: here with a progress bar, or in the running instance.
async fn act(
    desk: &Desk,
    letters: &Letters,
    json: bool,
    request: ActRequest,
    route: &str,
) -> anyhow::Result<ReportView> {
    let dry_run = request.dry_run;
    match desk {
        Desk::Here { operator, .. } => {
            let length = match letters.all {
                true => operator.depth().await.unwrap_or(0),
                false => letters.ids.len() as u64,
            };
            let bar = progress_bar(letters.is_bulk(), json, length);
            let shown = bar.clone();
            let progress = move |tally: Tally| {
                shown.set_position(tally.acted + tally.skipped);
                if tally.skipped > 0 {
                    shown.set_message(format!("{} could not be done", tally.skipped));
                }
            };
            let report = match route {
                REPLAY => {
                    operator
                        .replay(&letters.selection(), request.replay(), &progress)
                        .await
                }
                _ => operator.purge(&letters.selection(), &progress).await,
            };
            bar.finish_and_clear();
            Ok(ReportView::of(&report, dry_run))
        }
        Desk::Running(addr) => client::post(*addr, route, &request).await,
    }
}

/// The admin route of a running instance that replays.
pub const REPLAY: &str = "/admin/dlq/replay";
/// The admin route of a running instance that purges.
pub const PURGE: &str = "/admin/dlq/purge";

async fn replay(args: ReplayArgs) -> anyhow::Result<()> {
    let desk = Desk::open(&args.target, !args.dry_run).await?;
    let request = ActRequest {
        ids: args.letters.ids.clone(),
        all: args.letters.all,
        dry_run: args.dry_run,
        force: args.force,
        principal: local_principal(),
    };
    let report = act(&desk, &args.letters, args.json, request, REPLAY).await;
    desk.close().await;
    finish(&report?, args.json, "replay", "replayed")
}

async fn purge(args: PurgeArgs) -> anyhow::Result<()> {
    if !args.yes {
        confirm(&args.letters)?;
    }
    let desk = Desk::open(&args.target, true).await?;
    let request = ActRequest {
        ids: args.letters.ids.clone(),
        all: args.letters.all,
        dry_run: false,
        force: false,
        principal: local_principal(),
    };
    let report = act(&desk, &args.letters, args.json, request, PURGE).await;
    desk.close().await;
    finish(&report?, args.json, "purge", "purged")
}

/// Asks on the terminal before a purge; refuses without a terminal to ask on.
fn confirm(letters: &Letters) -> anyhow::Result<()> {
    let what = match letters.all {
        true => "every letter in the dead-letter queue".to_owned(),
        false => format!("{} letter(s)", letters.ids.len()),
    };
    super::confirm(
        &format!("Delete {what} for good? The updates cannot be replayed afterwards."),
        format!("purging deletes {what} for good: pass --yes to purge without being asked"),
        "nothing was purged",
    )
}

/// Prints a report; fails (exit 1) when something could not be done.
fn finish(report: &ReportView, json: bool, verb: &str, done: &str) -> anyhow::Result<()> {
    match json {
        true => outln!("{}", serde_json::to_string_pretty(report)?),
        false => render::report(report, done),
    }
    if let Some(stopped) = &report.stopped {
        bail!("the {verb} stopped early: {stopped}");
    }
    if !report.skipped.is_empty() {
        bail!(
            "{} letter(s) could not be {done}; see the table above",
            report.skipped.len()
        );
    }
    Ok(())
}

async fn audit(args: AuditArgs) -> anyhow::Result<()> {
    let desk = Desk::open(&args.target, false).await?;
    let entries: anyhow::Result<Vec<AuditView>> = match &desk {
        Desk::Here { audit, .. } => audit_entries(audit.as_ref(), args.limit).await,
        Desk::Running(addr) => {
            client::get(*addr, &format!("/admin/audit?limit={}", args.limit)).await
        }
    };
    desk.close().await;
    let entries = entries?;
    match args.json {
        true => outln!("{}", serde_json::to_string_pretty(&entries)?),
        false => render::audit(&entries),
    }
    Ok(())
}

/// Up to `limit` audit entries, newest first, as `tgq dlq audit` shows them.
pub async fn audit_entries(
    audit: &dyn AuditReader,
    limit: usize,
) -> anyhow::Result<Vec<AuditView>> {
    let entries = audit.recent(limit, SystemClock.now()).await?;
    Ok(entries.iter().map(AuditView::from).collect())
}
