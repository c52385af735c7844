//! The operations commands: `tgq status` and `tgq dlq` (a deployment on AWS, see `target`, or local
//! mode's store, directly or through the running instance, see `client`), `tgq outbox` and
//! `tgq backup` (local mode) and `tgq webhook` (the bot's webhook at Telegram).

#[cfg(feature = "aws")]
mod application;
#[cfg(feature = "aws")]
mod aws_status;
pub mod bots;
pub mod broadcast;
mod client;
pub mod deploy;
pub mod dlq;
pub mod payments;
pub mod render;
pub mod setup;
pub mod target;
pub mod timers;
pub mod webhook;

use std::path::PathBuf;

use clap::Args;
use tgq_core::clock::{Clock as _, SystemClock};

pub use client::loopback;

use crate::config::DEFAULT_DATA_DIR;
use crate::views::{self, StatusView};
use tgq_embedded::EmbeddedStore;

/// How many entries the list commands show when `--limit` is not given.
pub const DEFAULT_LIMIT: usize = 50;

/// Asks `question` on the terminal, `[y/N]`; refuses with `unasked` when there is no terminal to
/// ask on, and with `declined` for any answer but yes. For what cannot be undone.
pub(crate) fn confirm(question: &str, unasked: String, declined: &str) -> anyhow::Result<()> {
    use std::io::{BufRead as _, IsTerminal as _, Write as _};

    if !std::io::stdin().is_terminal() {
        anyhow::bail!(unasked);
    }
    eprint!("{question} [y/N] ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| anyhow::anyhow!("reading the answer: {e}"))?;
    match answer.trim() {
        "y" | "Y" | "yes" => Ok(()),
        _ => anyhow::bail!("{declined}"),
    }
}

/// `--limit N`: at least one entry (a limit of 0 would show nothing and look like an empty list).
pub fn limit(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("the limit must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{text:?} is not a whole number of at least 1")),
    }
}

/// Which local store to read.
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// The data directory of `tgq local`.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
}

/// `tgq status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    target: target::TargetArgs,
    /// Show a running `tgq poll` instead (its health address, e.g. 127.0.0.1:8090): leader or
    /// standby, the lease's token and remaining time, the offset.
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "stack")]
    poller: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// `tgq outbox`.
#[derive(Debug, Args)]
pub struct OutboxArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Show at most this many entries, oldest first.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_LIMIT, value_parser = limit)]
    limit: usize,
    /// Keep printing new entries as the bot sends them, until Ctrl-C (with --json, one JSON object
    /// per line).
    #[arg(long, short)]
    follow: bool,
}

/// `tgq backup`.
#[derive(Debug, Args)]
pub struct BackupArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The backup file to write, outside the data directory, private to you (it holds every
    /// message). `tgq restore FILE` puts it back.
    #[arg(long, value_name = "FILE")]
    to: PathBuf,
    /// Replace FILE if it exists (never the live store, nor a file in the data directory).
    #[arg(long)]
    force: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// `tgq restore`.
#[derive(Debug, Args)]
pub struct RestoreArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The backup to put in place as <data-dir>/tgq.redb (made by `tgq backup`).
    #[arg(value_name = "FILE")]
    from: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// `tgq restore`: checks the backup, then puts it in place of the store, keeping the store it
/// replaces beside it under a timestamped name. Refused while `tgq local` runs on the directory.
pub async fn restore(args: RestoreArgs) -> anyhow::Result<()> {
    let data_dir = args.store.data_dir.clone();
    let now = i64::try_from(SystemClock.now().0).unwrap_or(i64::MAX);
    let stamp = chrono::DateTime::from_timestamp_millis(now)
        .map(|at| at.format("%Y%m%dT%H%M%S%.3fZ").to_string())
        .unwrap_or_else(|| now.to_string());
    let keep_as = data_dir.join(format!("{}.replaced-{stamp}", tgq_embedded::FILE_NAME));
    let from = args.from.clone();
    let restored = tokio::task::spawn_blocking(move || {
        tgq_embedded::EmbeddedStore::restore(&data_dir, &from, &keep_as)
    })
    .await??;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&restored)?);
        return Ok(());
    }
    outln!(
        "restored {} to {}",
        args.from.display(),
        restored.store.display()
    );
    match &restored.kept {
        Some(kept) => outln!("the store it replaced is kept at {}", kept.display()),
        None => outln!("there was no store to replace"),
    }
    Ok(())
}

/// `tgq backup`: a consistent copy of the store, taken by the running `tgq local` inside one read
/// transaction while it serves, or from the file itself when nothing runs on it.
pub async fn backup(args: BackupArgs) -> anyhow::Result<()> {
    let to = std::path::absolute(&args.to)?;
    let data_dir = args.store.data_dir.clone();
    // A running instance writes only into its --backup-dir, under a name of this call's; the
    // backup is then moved where it was asked for, with this command's own checks and --force.
    let name = format!(
        "tgq-backup-{}-{}.redb",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
    );
    let route = format!("/admin/backup?name={name}");
    let (force, direct_to) = (args.force, to.clone());
    let (backup, source) = client::reach(&data_dir, reqwest::Method::POST, &route, move |store| {
        Ok(store.backup_to(&direct_to, force)?)
    })
    .await?;
    let backup = match source {
        client::Source::Store => backup,
        client::Source::Running(_) => {
            let placed = tokio::task::spawn_blocking(move || {
                let taken = backup.path.clone();
                EmbeddedStore::place_backup(&data_dir, backup, &to, force).inspect_err(|_| {
                    let _ = std::fs::remove_file(&taken);
                })
            });
            placed.await??
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&backup)?);
    } else {
        render::backup(&backup, source);
    }
    Ok(())
}

/// `tgq status`.
pub async fn status(args: StatusArgs) -> anyhow::Result<()> {
    if let Some(addr) = &args.poller {
        let view = crate::poll::fetch_status(addr).await?;
        if args.json {
            outln!("{}", serde_json::to_string_pretty(&view)?);
        } else {
            crate::poll::render(&view);
        }
        return Ok(());
    }
    #[cfg_attr(
        not(feature = "aws"),
        expect(
            clippy::infallible_destructuring_match,
            reason = "a stack needs the aws feature"
        )
    )]
    let data_dir = match args.target.resolve().await? {
        target::Target::Local(data_dir) => data_dir,
        #[cfg(feature = "aws")]
        target::Target::Aws(deployment) => {
            let view = aws_status::read(&deployment).await?;
            match args.json {
                true => outln!("{}", serde_json::to_string_pretty(&view)?),
                false => aws_status::render(&view),
            }
            return Ok(());
        }
    };
    let (view, source) = client::read(&data_dir, "/admin/status", |store| {
        StatusView::read(store, SystemClock.now())
    })
    .await?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&view)?);
    } else {
        render::status(&view, source);
    }
    Ok(())
}

/// `tgq outbox`.
pub async fn outbox(args: OutboxArgs) -> anyhow::Result<()> {
    if args.follow {
        return follow_outbox(args).await;
    }
    let entries = outbox_after(&args.store.data_dir, 0, args.limit).await?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&entries)?);
    } else {
        render::outbox(&entries);
    }
    Ok(())
}

/// How often `tgq outbox --follow` looks for new entries.
const FOLLOW_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// `tgq outbox --follow`: the last `limit` entries, then each new one as it is sent, until SIGINT
/// or SIGTERM. Reads the store directly or through the running `tgq local`, whichever holds it at
/// each look, so it keeps following across restarts of `tgq local`.
async fn follow_outbox(args: OutboxArgs) -> anyhow::Result<()> {
    let dir = &args.store.data_dir;
    let mut after = 0;
    let mut header = false;
    let mut stop = std::pin::pin!(crate::local::shutdown::signalled());
    loop {
        let entries = outbox_after(dir, after, args.limit).await?;
        for entry in &entries {
            if args.json {
                outln!("{}", serde_json::to_string(entry)?);
            } else {
                if !header {
                    render::outbox_header();
                    header = true;
                }
                render::outbox_row(entry);
            }
            after = entry.id;
        }
        // A full page may have more behind it: read on at once.
        if entries.len() == args.limit {
            continue;
        }
        tokio::select! {
            () = &mut stop => return Ok(()),
            () = tokio::time::sleep(FOLLOW_EVERY) => {}
        }
    }
}

async fn outbox_after(
    dir: &std::path::Path,
    after: u64,
    limit: usize,
) -> anyhow::Result<Vec<tgq_embedded::OutboxEntry>> {
    let route = format!("/admin/outbox?limit={limit}&after={after}");
    let (entries, _) =
        client::read(dir, &route, move |store| views::outbox(store, after, limit)).await?;
    Ok(entries)
}
