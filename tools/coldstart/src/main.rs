//! `tgq-coldstart`: the cold start and memory of tgq's packaged Lambda functions, side by side with a
//! Node.js equivalent (grammY's `webhookCallback`, AWS SDK v3 DynamoDB and SQS clients) and a Python
//! equivalent (boto3 DynamoDB and SQS clients, an aiogram Dispatcher), in one run.
//!
//! Each function is started as Lambda starts a runtime — a fresh process pointed at a Runtime API,
//! here a fake one on loopback — with the configuration `template.yaml` gives it and its secret
//! read from a fake SSM on loopback. The bench times exec → its first `GET …/invocation/next`
//! (configuration read, SDK clients built, secret fetched), exec → its answer to the first event,
//! and reads its peak RSS. The first, unmeasured start of each also takes [`WARM_EVENTS`] real
//! updates after its first event, against a fake AWS endpoint and a fake Bot API that answer at
//! once: each warm invocation's time is the function's own. Then it prints medians and ratios,
//! checks the targets, prices a million updates on each implementation (`cost`, from the warm
//! times) and draws a PNG.
//! Run it after `scripts/package`: `cargo run --release -p tgq-coldstart`. `docs/PERFORMANCE.md`
//! explains the figures.

mod chart;
mod cost;
mod equivalents;
mod report;
mod subjects;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::Parser;
use tgq_artifact::{template_functions, workspace_root, BOOTSTRAP};
use tgq_fake_lambda::{cold_start_then, ColdStart, FakeAws, Invocation};
use tgq_fake_telegram::FakeTelegram;

use crate::report::{Figures, Results, Samples};
use crate::subjects::{Fakes, Function, Programs, Subject};

/// Real updates each subject handles warm, after its first event, in its unmeasured first start.
const WARM_EVENTS: u64 = 100;

/// Cold start and memory of the packaged tgq functions against Node.js and Python equivalents.
/// Run `scripts/package` first.
#[derive(Debug, Parser)]
#[command(name = "tgq-coldstart")]
struct Args {
    /// Measured cold starts per function and implementation (after one unmeasured warm-up start).
    #[arg(long, default_value_t = 10)]
    runs: usize,
    /// Measure tgq alone (no Node.js or Python installs): for comparing builds.
    #[arg(long)]
    tgq_only: bool,
    /// The webhook's bootstrap. Default: .aws-sam/build/WebhookFunction/bootstrap.
    #[arg(long, value_name = "PATH")]
    webhook: Option<PathBuf>,
    /// The worker's bootstrap. Default: .aws-sam/build/WorkerFunction/bootstrap.
    #[arg(long, value_name = "PATH")]
    worker: Option<PathBuf>,
    /// Where the equivalents are installed (git-ignored). Default: target/coldstart.
    #[arg(long, value_name = "DIR")]
    scratch: Option<PathBuf>,
    /// Where the chart goes. Default: docs/coldstart.png.
    #[arg(long, value_name = "PATH")]
    chart: Option<PathBuf>,
    /// Print the table as Markdown.
    #[arg(long)]
    markdown: bool,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// The packaged bootstrap of each function, by the Cargo binary it was built from.
fn packaged_bootstraps(root: &Path) -> anyhow::Result<BTreeMap<String, PathBuf>> {
    let mut bootstraps = BTreeMap::new();
    for function in template_functions()? {
        let path = function.build_dir(root).join(BOOTSTRAP);
        bootstraps.insert(function.binary, path);
    }
    Ok(bootstraps)
}

async fn run(args: Args) -> anyhow::Result<()> {
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let root = workspace_root().canonicalize()?;
    let scratch = args
        .scratch
        .unwrap_or_else(|| root.join("target/coldstart"));
    let chart = args
        .chart
        .unwrap_or_else(|| root.join("docs/coldstart.png"));
    let logs = scratch.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;

    let packaged = packaged_bootstraps(&root)?;
    let mut tgq = BTreeMap::new();
    for (function, given) in [
        (Function::Webhook, args.webhook),
        (Function::Worker, args.worker),
    ] {
        let path = match given {
            Some(path) => path,
            None => packaged
                .get(function.name())
                .cloned()
                .with_context(|| format!("template.yaml has no {function} function"))?,
        };
        if !path.is_file() {
            bail!("{} is missing: run scripts/package first", path.display());
        }
        tgq.insert(function, path.canonicalize()?);
    }
    let programs = Programs {
        tgq: Box::new(move |function| tgq[&function].clone()),
        node: if args.tgq_only {
            None
        } else {
            Some(equivalents::node(&scratch)?)
        },
        python: if args.tgq_only {
            None
        } else {
            Some(equivalents::python(&scratch)?)
        },
    };
    for (name, program) in [("node", &programs.node), ("python", &programs.python)] {
        if let Some((_, program)) = program {
            eprintln!("{name}: {}", equivalents::version(program));
        }
    }

    let telegram = FakeTelegram::start().await?;
    let aws = FakeAws::start(BTreeMap::from([
        (
            subjects::WEBHOOK_SECRET_PARAM.to_owned(),
            subjects::WEBHOOK_SECRET.to_owned(),
        ),
        (
            subjects::BOT_TOKEN_PARAM.to_owned(),
            telegram.token().to_owned(),
        ),
    ]))
    .await?;
    let fakes = Fakes {
        aws: &aws.endpoint(),
        telegram: &telegram.url(),
    };
    let subjects = subjects::subjects(&programs, &fakes, &logs);

    let mut samples: BTreeMap<_, Samples> = BTreeMap::new();
    // One unmeasured start each, so every program is in the page cache, as a warm host's is; it
    // takes the warm events too.
    for subject in &subjects {
        let (sent, called) = (telegram.delivered().len(), aws.calls());
        let warm = measure(subject, WARM_EVENTS).await?;
        let replies = telegram.delivered().len() - sent;
        let what = format!("{} {}", subject.implementation, subject.function);
        if subject.function == Function::Worker && replies as u64 != WARM_EVENTS {
            bail!("{what} sent {replies} replies for {WARM_EVENTS} updates, not one each");
        }
        // Its secret at start, then the same requests per update as tgq's function: an
        // equivalent that skipped its work would look fast.
        let calls = aws.calls() - called;
        let expected = 1 + subject.function.aws_calls_per_update() * WARM_EVENTS as usize;
        if calls != expected {
            bail!("{what} made {calls} AWS requests for {WARM_EVENTS} updates, not {expected}");
        }
        samples
            .entry((subject.function, subject.implementation))
            .or_default()
            .push_warm(&warm);
    }
    // Rounds interleave the subjects, so a slow moment of the machine is spread over all of them.
    for round in 1..=args.runs {
        eprintln!("round {round}/{}", args.runs);
        for subject in &subjects {
            let cold = measure(subject, 0).await?;
            samples
                .entry((subject.function, subject.implementation))
                .or_default()
                .push(&cold);
        }
    }
    let results: Results = samples
        .iter()
        .map(|(key, samples)| (*key, Figures::of(samples)))
        .collect();
    println!("{}", report::render(&results, args.runs, args.markdown));
    println!("{}", cost::render(&results));
    println!(
        "the fake AWS endpoint answered {} calls, the fake Bot API {}",
        aws.calls(),
        telegram.calls().len()
    );
    chart::draw(&results, args.runs, &chart)?;
    println!("chart: {}", chart.display());
    Ok(())
}

/// One cold start of `subject`, then `warm` real updates; every answer must be the expected one.
async fn measure(subject: &Subject, warm: u64) -> anyhow::Result<ColdStart> {
    let what = format!("{} {}", subject.implementation, subject.function);
    let log = subject
        .launch
        .log
        .as_ref()
        .map_or("(none)".to_owned(), |log| log.display().to_string());
    let updates = (2..2 + warm)
        .map(|n| Invocation::numbered(subject.function.warm_event(), n))
        .collect();
    let cold = cold_start_then(
        &subject.launch,
        Invocation::new(subject.function.event()),
        updates,
    )
    .await
    .with_context(|| format!("{what} (log: {log})"))?;
    let answer = cold.answer.json();
    if !subject.function.accepts(&answer) {
        bail!(
            "{what} answered {:?} {answer}, not {} (log: {log})",
            cold.answer.kind,
            subject.function.expected()
        );
    }
    for answer in cold.warm.iter().map(|warm| warm.answer.json()) {
        if !subject.function.accepts_warm(&answer) {
            bail!("{what} answered an update with {answer} (log: {log})");
        }
    }
    Ok(cold)
}
