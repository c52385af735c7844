//! `tgq-drill`: breaks the pipeline on purpose, the way real deployments break, and counts from the
//! outside — what Telegram (the fake Bot API) received, what the webhook answered, what the
//! dead-letter queue holds — whether tgq kept its promise: nothing lost, nothing twice, each chat
//! in order. One table row per scenario and target; the figures go into docs/RELIABILITY.md.
//!
//! Targets: local mode (the real `tgq local` process) and the emulator (the real function
//! binaries under `cargo lambda watch`, moto, the drill's own SQS event source, a fault-injecting
//! proxy between the functions and moto). A scenario that reads the same on both is written once
//! (`scenarios.rs`, against its `Pipeline` trait); `run_local.rs` and `run_emulator/` start each
//! target's pipeline and hold the faults only one target has. The fuzz target over the webhook request lives in
//! `src/bin/fuzz_webhook.rs` with its generator in [`fuzz`].

use std::path::PathBuf;

use clap::Parser;

mod broadcast_faults;
pub mod disk;
pub mod failover;
pub mod fuzz;
pub mod local;
mod payments;
pub mod plan;
pub mod poster;
pub mod progress;
pub mod report;
mod run_emulator;
mod run_local;
pub mod scenario;
mod scenarios;
pub mod tally;
mod two_bots;

pub use scenario::{Scenario, Target, SCENARIOS};
pub use tally::{Check, Row};

/// The webhook secret every drilled pipeline is given.
pub const SECRET: &str = "tgq-drill-secret";

/// Breaks a tgq pipeline on purpose, the way deployments break, and counts from the outside what
/// happened: nothing lost, nothing twice, each chat in order (docs/RELIABILITY.md).
#[derive(Debug, Parser)]
#[command(
    name = "tgq-drill",
    version,
    after_help = "\
Scenarios (number or name; all that apply to the target when none is given):
   1 triple-delivery    2 worker-killed     3 store-unreachable   4 misconfigured (emulator)
   5 throttled (emu.)   6 failing-head      7 flood-wait          8 telegram-5xx
   9 permanent-errors  10 poison           11 crash-after-send   12 stale-worker
  13 kill-loop (local) 14 recovery-drain   15 disk-full (local)  16 damaged-store (local)
  17 two-bots         18 one-budget (emulator) 19 broadcast (emulator)
  20 broadcast-faults
`tgq-drill failover` runs three `tgq poll` processes on the emulator instead (docs/RELIABILITY.md).
The emulator target needs AWS_ENDPOINT_URL (moto) and cargo-lambda, as scripts/test provides.
Exit status 1 when a scenario missed a required figure."
)]
pub struct DrillArgs {
    /// Scenarios to run, by number or name.
    #[arg(value_name = "SCENARIO")]
    pub scenarios: Vec<String>,
    /// Where to run them.
    #[arg(long, value_enum, default_value = "local")]
    pub target: Target,
    /// Updates per scenario.
    #[arg(long, default_value_t = 300)]
    pub updates: usize,
    /// Seed of the traffic's interleaving.
    #[arg(long, default_value_t = 16)]
    pub seed: u64,
    /// `broadcast`: the job's recipients.
    #[arg(long, default_value_t = 10000)]
    pub recipients: u64,
    /// `failover`: rounds of SIGKILL, then as many of SIGSTOP/SIGCONT.
    #[arg(long, default_value_t = 10)]
    pub rounds: usize,
    /// `failover`: the pollers' lease TTL.
    #[arg(long, default_value_t = 15, value_name = "SECS")]
    pub lease_ttl_secs: u64,
    /// `failover`: the pollers' renewal interval.
    #[arg(long, default_value_t = 5, value_name = "SECS")]
    pub lease_renew_secs: u64,
    /// `failover`: how long a poller that lost the lease waits before contending again.
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    pub lease_cooldown_secs: u64,
    /// Print the table as JSON.
    #[arg(long)]
    pub json: bool,
    /// Where to keep data directories and logs (default: a new directory under the system's temp).
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// The `tgq` binary to drill (default: the `tgq` next to this binary, which cargo builds with
    /// the same profile).
    #[arg(long, value_name = "PATH")]
    pub tgq: Option<PathBuf>,
    /// On the emulator, the binary to run as both functions, each told which by `TGQ_FUNCTION`: a
    /// bot crate's, built with its `lambda` feature (default: the workspace's `webhook` and
    /// `worker`).
    #[arg(long, value_name = "PATH")]
    pub functions: Option<PathBuf>,
}

/// What every scenario run needs.
#[derive(Clone, Debug)]
pub struct Options {
    /// The `tgq` binary (`tgq local`, `tgq backup`).
    pub exe: PathBuf,
    /// Updates per scenario.
    pub updates: usize,
    /// The traffic's seed.
    pub seed: u64,
    /// `broadcast`'s recipients.
    pub recipients: u64,
    /// Data directories and logs.
    pub work: PathBuf,
    /// The one binary the emulator runs as both functions, if not the workspace's two.
    pub functions: Option<PathBuf>,
    /// Whether to draw progress.
    pub progress: progress::Progress,
}

/// Runs the scenarios `args` names (or all that apply) and returns the rows.
pub async fn run(args: &DrillArgs, exe: PathBuf) -> anyhow::Result<Vec<Row>> {
    let selected: Vec<Scenario> = if args.scenarios.is_empty() {
        SCENARIOS
            .iter()
            .filter(|s| s.applies_to(args.target))
            .copied()
            .collect()
    } else {
        args.scenarios
            .iter()
            .map(|name| {
                scenario::find(name)
                    .ok_or_else(|| anyhow::anyhow!("no scenario is called {name:?} (see --help)"))
            })
            .collect::<anyhow::Result<_>>()?
    };
    if let Some(s) = selected.iter().find(|s| !s.applies_to(args.target)) {
        anyhow::bail!(
            "scenario {} ({}) does not apply to the {} target",
            s.number,
            s.name,
            args.target.as_str()
        );
    }
    let work = match &args.work_dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("tgq-drill-{}", std::process::id())),
    };
    std::fs::create_dir_all(&work)?;
    let options = Options {
        exe,
        updates: args.updates.max(10),
        seed: args.seed,
        recipients: args.recipients.max(1),
        work,
        functions: args.functions.clone(),
        progress: progress::Progress {
            enabled: !args.json,
        },
    };
    run_scenarios(&selected, args.target, &options).await
}

/// `tgq-drill failover`: the pollers' failover drill with the rounds and lease timing `args` give.
pub async fn run_failover(
    args: &DrillArgs,
    exe: PathBuf,
) -> anyhow::Result<failover::FailoverReport> {
    let work = match &args.work_dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("tgq-drill-failover-{}", std::process::id())),
    };
    let options = failover::FailoverOptions {
        exe,
        rounds: args.rounds.max(1),
        ttl: std::time::Duration::from_secs(args.lease_ttl_secs),
        renew_every: std::time::Duration::from_secs(args.lease_renew_secs),
        cooldown: std::time::Duration::from_secs(args.lease_cooldown_secs),
        work,
        progress: !args.json,
        seed: args.seed,
    };
    failover::run(&options).await
}

/// Runs `scenarios` on `target`, one after another; a scenario that could not run at all is a
/// failed row saying why.
pub async fn run_scenarios(
    scenarios: &[Scenario],
    target: Target,
    options: &Options,
) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let mut emulator = None;
    for scenario in scenarios {
        let outcome = match target {
            Target::Local => run_local::run(scenario, options).await,
            Target::Emulator => {
                if emulator.is_none() {
                    emulator = Some(run_emulator::Emulator::start(options).await?);
                }
                let emulator = emulator.as_ref().expect("started above");
                run_emulator::run(scenario, options, emulator).await
            }
        };
        let mut row = outcome.unwrap_or_else(|error| {
            let failed = Check::new("the scenario runs", false, format!("{error:#}"));
            Row::uncounted(
                scenario.number,
                scenario.name,
                target.as_str(),
                vec![failed],
            )
        });
        if !row.passed() {
            row.waits_for = scenario.waits_for.map(str::to_owned);
        }
        if options.progress.enabled {
            eprintln!(
                "{} #{} {}: {}",
                target.as_str(),
                scenario.number,
                scenario.name,
                if row.passed() { "pass" } else { "FAIL" }
            );
            for check in row.checks.iter().filter(|c| !c.met) {
                eprintln!("    missed: {} — {}", check.required, check.observed);
            }
        }
        rows.push(row);
    }
    Ok(rows)
}
