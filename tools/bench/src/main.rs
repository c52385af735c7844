//! `tgq-bench`: measures `tgq local` on this machine, in one run — the raw rate of small durable
//! appends on the data directory's disk, durable webhook ingest throughput at several concurrencies,
//! end-to-end latency (received → reply recorded in the outbox) at a fixed rate, tgq's memory, and
//! that retention keeps disk use bounded — then checks the goals and prints the figures.
//!
//! It runs the real `tgq` binary (offline, on fresh data directories) and loads it over loopback
//! HTTP, so what it measures is what a user runs. `docs/PERFORMANCE.md` explains the figures.

mod broadcast;
mod load;
mod phases;
mod report;
mod server;
mod stats;
mod system;
mod timers;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::Parser;

use crate::load::Updates;
use crate::phases::Plan;
use crate::report::Report;
use crate::server::Server;

/// Measures `tgq local`: raw fsync rate, durable ingest throughput, end-to-end latency, memory and
/// bounded disk use. Run it with `cargo run --release -p tgq-bench`.
#[derive(Debug, Parser)]
#[command(name = "tgq-bench")]
struct Args {
    /// A directory on the disk to measure. The bench makes a fresh temporary directory inside it for
    /// its stores and removes it afterwards (it is kept when the bench fails). Default: the
    /// workspace's target/tgq-bench.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Shorten every phase: a smoke test of the bench, not a measurement.
    #[arg(long)]
    quick: bool,
    /// Print the report as Markdown tables.
    #[arg(long)]
    markdown: bool,
    /// Run the retention phase this many seconds instead of 90 (e.g. 360 to pass the queue's
    /// 5-minute dedup window, whose ids are kept whatever the TTL).
    #[arg(long, value_name = "SECS")]
    retention_secs: Option<u64>,
    /// The tgq binary to measure. Default: build it (`cargo build --release -p tgq-cli`) and use
    /// the `tgq` next to this binary.
    #[arg(long, value_name = "PATH")]
    tgq: Option<PathBuf>,
    /// Run only the drain phase (a backlog handled by the worker alone) and print its figures.
    #[arg(long)]
    drain_only: bool,
    /// Run only the timers phase: this many chats each schedule a timer, all due within one
    /// minute; prints how late they fired and whether each fired exactly once.
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "10000")]
    timers_only: Option<u64>,
    /// Run only the broadcast phase: `tgq local` sends one message to this many recipients
    /// through a fake Bot API enforcing Telegram's limits, while users write to the bot; prints
    /// the job's rate against its budget, whether each recipient got it exactly once, and the
    /// latency of the bot's replies meanwhile.
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "100000")]
    broadcast_only: Option<u64>,
    /// With --broadcast-only: send in Telegram's paid lane (allow_paid_broadcast).
    #[arg(long, requires = "broadcast_only")]
    paid: bool,
    /// With --broadcast-only: the bot's rate, which the fake enforces.
    #[arg(long, value_name = "PER_SECOND", default_value_t = 30)]
    bot_rate: u32,
    /// With --broadcast-only --paid: the paid lane's rate, which the fake enforces.
    #[arg(long, value_name = "PER_SECOND", default_value_t = 1000)]
    paid_rate: u32,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    // Before the build below, which loads the machine itself.
    let load_at_start = system::load_average();
    if cfg!(debug_assertions) {
        eprintln!("warning: a debug build measures nothing useful; use `cargo run --release -p tgq-bench`");
    }
    let mut plan = if args.quick {
        Plan::quick()
    } else {
        Plan::full()
    };
    if let Some(secs) = args.retention_secs {
        plan.retention = Duration::from_secs(secs);
        // About a dozen samples, however long the run.
        plan.sample_every = plan.sample_every.max(plan.retention / 12);
    }
    let tgq = match args.tgq {
        Some(path) => path,
        None => build_tgq()?,
    };
    let parent = args
        .data_dir
        .unwrap_or_else(|| workspace().join("target").join("tgq-bench"));
    std::fs::create_dir_all(&parent)
        .with_context(|| format!("cannot create {}", parent.display()))?;
    let run_dir = tempfile::Builder::new()
        .prefix("run-")
        .tempdir_in(&parent)
        .with_context(|| format!("cannot create a directory in {}", parent.display()))?;
    let lane = broadcast::Lane {
        paid: args.paid,
        bot_rate: args.bot_rate,
        paid_rate: args.paid_rate,
    };
    let measured = match (args.timers_only, args.drain_only) {
        _ if args.broadcast_only.is_some() => {
            let recipients = args.broadcast_only.unwrap_or_default();
            broadcast::broadcast(&tgq, run_dir.path(), recipients, lane)
                .await
                .and_then(|figures| figures.check().map(|()| figures.summary()))
        }
        (Some(timers), _) => timers::timers(&tgq, run_dir.path(), timers)
            .await
            .and_then(|figures| figures.check().map(|()| figures.summary())),
        (None, true) => phases::drain(&tgq, run_dir.path(), &plan)
            .await
            .map(|drain| drain.summary()),
        (None, false) => measure(&tgq, run_dir.path(), &plan, args.quick, load_at_start)
            .await
            .map(|report| match args.markdown {
                true => report.markdown(),
                false => report.text(),
            }),
    };
    match measured {
        Ok(text) => {
            println!("{}", text.trim_end());
            Ok(())
        }
        Err(error) => {
            let kept = run_dir.keep();
            eprintln!(
                "the stores and tgq's logs are kept in {} for inspection",
                kept.display()
            );
            Err(error)
        }
    }
}

/// Runs every phase in `run_dir`.
async fn measure(
    tgq: &Path,
    run_dir: &Path,
    plan: &Plan,
    quick: bool,
    load_at_start: String,
) -> anyhow::Result<Report> {
    let mut machine = system::Machine::describe(run_dir, load_at_start);
    eprintln!(
        "tgq-bench: {} on {} × {}, data in {} on {}, load {}",
        tgq.display(),
        machine.cpus,
        machine.cpu_model,
        machine.data_dir,
        machine.disk,
        machine.load_before
    );

    eprintln!("raw fsync: {:?} of 512-byte appends…", plan.fsync);
    let (dir, probe_for) = (run_dir.to_owned(), plan.fsync);
    let fsync = tokio::task::spawn_blocking(move || system::fsync_probe(&dir, probe_for)).await??;

    let pipeline_dir = run_dir.join("pipeline");
    let server = Server::start(tgq, &pipeline_dir, &run_dir.join("pipeline.log"), &[]).await?;
    eprintln!(
        "tgq local running (pid {}) at {}",
        server.pid(),
        server.webhook_url()
    );
    let updates = Arc::new(Updates::new(plan.chats));
    let mut ingest = Vec::new();
    for &clients in &plan.clients {
        eprintln!("ingest: {clients} clients for {:?}…", plan.ingest);
        ingest.push(phases::ingest(&server, &updates, clients, plan).await?);
    }
    eprintln!(
        "end to end: {} updates/s for {:?} over {} chats…",
        plan.e2e_rate, plan.e2e, plan.chats
    );
    let e2e = phases::end_to_end(&server, &updates, plan).await?;
    eprintln!("idle: tgq's CPU for {:?} with nothing to do…", plan.idle);
    let footprint = phases::footprint(&server, plan).await?;
    server.stop().await?;
    let end_to_end = phases::replies(&pipeline_dir, e2e, plan).await?;

    eprintln!(
        "no-op HTTP server: {} clients for {:?}…",
        report::goal::INGEST_CLIENTS,
        plan.ingest
    );
    let noop = phases::noop(tgq, run_dir, report::goal::INGEST_CLIENTS, plan).await?;
    eprintln!(
        "drain: a backlog of {} updates over {} chats…",
        plan.drain_updates, plan.chats
    );
    let drain = phases::drain(tgq, run_dir, plan).await?;

    eprintln!(
        "retention: {} updates/s for {:?}, TTL {:?}, purge every {:?}…",
        plan.retention_rate, plan.retention, plan.ttl, plan.purge_every
    );
    let retention = phases::retention(tgq, run_dir, plan).await?;
    machine.load_after = system::load_average();
    Ok(Report {
        machine,
        quick,
        fsync,
        ingest,
        noop,
        drain,
        end_to_end,
        footprint,
        retention,
    })
}

/// The workspace root (this package is `tools/bench`).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Builds `tgq` with the same profile as this binary and returns its path: cargo puts it next to
/// `tgq-bench`.
fn build_tgq() -> anyhow::Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = std::process::Command::new(cargo);
    command
        .args(["build", "-p", "tgq-cli", "--bin", "tgq", "--manifest-path"])
        .arg(workspace().join("Cargo.toml"));
    if !cfg!(debug_assertions) {
        command.arg("--release");
    }
    eprintln!("building tgq: {command:?}");
    let status = command.status().context("cannot run cargo")?;
    if !status.success() {
        bail!("building tgq failed ({status})");
    }
    let tgq = std::env::current_exe()?.with_file_name("tgq");
    if !tgq.is_file() {
        bail!(
            "{} is missing after the build: pass --tgq PATH",
            tgq.display()
        );
    }
    Ok(tgq)
}
