//! The operations commands: `tgq status` and `tgq dlq` (a deployment on AWS, see `target`, or local
//! mode's store, directly or through the running instance, see `client`), `tgq outbox` (local mode)
//! and `tgq webhook` (the bot's webhook at Telegram).

mod aws_status;
mod client;
pub mod dlq;
pub mod render;
pub mod target;
pub mod webhook;

use std::path::PathBuf;

use clap::Args;
use tgq_core::clock::{Clock as _, SystemClock};

pub use client::loopback;

use crate::config::DEFAULT_DATA_DIR;
use crate::views::{self, StatusView};

/// How many entries the list commands show when `--limit` is not given.
pub const DEFAULT_LIMIT: usize = 50;

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
    #[arg(long, value_name = "N", default_value_t = DEFAULT_LIMIT)]
    limit: usize,
}

/// `tgq status`.
pub async fn status(args: StatusArgs) -> anyhow::Result<()> {
    let data_dir = match args.target.resolve().await? {
        target::Target::Local(data_dir) => data_dir,
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
    let limit = args.limit;
    let route = format!("/admin/outbox?limit={limit}");
    let (entries, _) = client::read(&args.store.data_dir, &route, move |store| {
        views::outbox(store, limit)
    })
    .await?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&entries)?);
    } else {
        render::outbox(&entries);
    }
    Ok(())
}
