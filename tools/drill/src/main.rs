//! `tgq-drill`: runs the drill's scenarios against a `tgq` binary's `tgq local` (or the emulator),
//! prints the table, and fails when a required figure was missed (docs/RELIABILITY.md). A tool of
//! the repository, apart from the `tgq` binary a deployment ships.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;
use tgq_drill::DrillArgs;

fn main() -> ExitCode {
    let args = DrillArgs::parse();
    init_logging();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(drill(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Warnings and errors to stderr (`RUST_LOG` for more): the table is the drill's story.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

async fn drill(args: DrillArgs) -> anyhow::Result<()> {
    let exe = tgq_binary(args.tgq.as_deref())?;
    if args.scenarios == ["failover"] {
        return failover(&args, exe).await;
    }
    let rows = tgq_drill::run(&args, exe).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print!("{}", tgq_drill::report::table(&rows));
    }
    let missed = rows.iter().filter(|row| !row.passed()).count();
    if missed > 0 {
        anyhow::bail!(
            "{missed} of {} scenario runs missed a required figure",
            rows.len()
        );
    }
    Ok(())
}

/// `tgq-drill failover`: prints the figures, and fails when a target was missed (takeover within
/// the TTL plus 5 s; nothing lost or twice; no overlapping polls).
async fn failover(args: &DrillArgs, exe: PathBuf) -> anyhow::Result<()> {
    let report = tgq_drill::run_failover(args, exe).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    let limit = std::time::Duration::from_secs(args.lease_ttl_secs + 5);
    let missed = report.missed(limit);
    if !missed.is_empty() {
        anyhow::bail!("the failover drill missed: {}", missed.join("; "));
    }
    Ok(())
}

/// The `tgq` binary to drill: `--tgq`, else the one cargo built next to this binary (same profile,
/// so `target/debug/tgq-drill` drills `target/debug/tgq`).
fn tgq_binary(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let path = match given {
        Some(path) => path.to_owned(),
        None => std::env::current_exe()
            .context("finding this binary")?
            .with_file_name("tgq"),
    };
    if !path.is_file() {
        anyhow::bail!(
            "no tgq binary at {}: build it (cargo build -p tgq-cli, with the same --release as \
             tgq-drill) or name one with --tgq",
            path.display()
        );
    }
    Ok(path)
}
