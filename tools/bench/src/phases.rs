//! The measured phases, each against a running `tgq local`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tgq_embedded::{EmbeddedStore, StoreOptions};
use tokio::time::Instant;

use crate::load::{self, Sent, Target, Updates};
use crate::report::{
    DrainFigures, EndToEndFigures, Footprint, IngestFigures, NoopFigures, RetentionFigures, Sample,
};
use crate::server::{Server, Status};
use crate::stats::Summary;
use crate::system;

/// How long each phase runs.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The raw fsync probe.
    pub fsync: Duration,
    /// Each ingest level.
    pub ingest: Duration,
    /// The concurrency levels of the ingest phase.
    pub clients: Vec<usize>,
    /// Chats the updates are spread over.
    pub chats: u64,
    /// The end-to-end phase's rate.
    pub e2e_rate: f64,
    /// The end-to-end phase's length.
    pub e2e: Duration,
    /// The retention phase's rate.
    pub retention_rate: f64,
    /// The retention phase's length.
    pub retention: Duration,
    /// How often the retention phase samples the store.
    pub sample_every: Duration,
    /// `TGQ_RECORD_TTL_SECS` of the retention phase.
    pub ttl: Duration,
    /// `TGQ_PURGE_INTERVAL_SECS` of the retention phase.
    pub purge_every: Duration,
    /// Senders sharing the open-loop load.
    pub open_loop_clients: usize,
    /// How long the queue may take to drain after a phase.
    pub settle: Duration,
    /// Updates in the backlog of the drain phase.
    pub drain_updates: u64,
    /// How long tgq's CPU time is measured while it has nothing to do.
    pub idle: Duration,
}

impl Plan {
    /// The measurement.
    pub fn full() -> Self {
        Self {
            fsync: Duration::from_secs(3),
            ingest: Duration::from_secs(5),
            clients: vec![1, 16, 64],
            chats: 1000,
            e2e_rate: 500.0,
            e2e: Duration::from_secs(20),
            retention_rate: 300.0,
            retention: Duration::from_secs(90),
            sample_every: Duration::from_secs(10),
            ttl: Duration::from_secs(10),
            purge_every: Duration::from_secs(5),
            open_loop_clients: 32,
            settle: Duration::from_secs(180),
            drain_updates: 100_000,
            idle: Duration::from_secs(20),
        }
    }

    /// Every phase shortened: a smoke test of the bench itself.
    pub fn quick() -> Self {
        Self {
            fsync: Duration::from_millis(500),
            ingest: Duration::from_secs(1),
            e2e: Duration::from_secs(3),
            retention: Duration::from_secs(20),
            sample_every: Duration::from_secs(4),
            drain_updates: 20_000,
            idle: Duration::from_secs(3),
            ..Self::full()
        }
    }
}

fn target(server: &Server) -> Target {
    Target {
        url: server.webhook_url(),
        secret: server.secret().to_owned(),
    }
}

/// Operations per commit between two statuses.
fn ops_per_commit(before: &Status, after: &Status) -> f64 {
    let commits = after.commits.saturating_sub(before.commits);
    let operations = after.operations.saturating_sub(before.operations);
    if commits == 0 {
        return 0.0;
    }
    operations as f64 / commits as f64
}

/// CPU time used by the bench itself so far.
fn own_cpu() -> Duration {
    system::cpu_time_of("self").unwrap_or_default()
}

/// Durable ingest at one concurrency, then waits for the worker to drain what was queued so the next
/// phase starts from an idle pipeline.
pub async fn ingest(
    server: &Server,
    updates: &Arc<Updates>,
    clients: usize,
    plan: &Plan,
) -> anyhow::Result<IngestFigures> {
    let before = server.status().await?;
    let (tgq_cpu, bench_cpu) = (server.cpu_time(), own_cpu());
    let run = load::closed_loop(&target(server), updates, clients, plan.ingest).await?;
    let after = server.status().await?;
    let seconds = run.elapsed.as_secs_f64();
    let tgq_cores = server.cpu_time().saturating_sub(tgq_cpu).as_secs_f64() / seconds;
    let bench_cores = own_cpu().saturating_sub(bench_cpu).as_secs_f64() / seconds;
    let draining = Instant::now();
    server
        .wait_for("queue drained", plan.settle, Status::is_settled)
        .await?;
    Ok(IngestFigures {
        clients,
        accepted: run.accepted,
        elapsed: run.elapsed,
        latency: Summary::of_durations(&run.latencies),
        ops_per_commit: ops_per_commit(&before, &after),
        commits_per_second: after.commits.saturating_sub(before.commits) as f64 / seconds,
        tgq_cores,
        bench_cores,
        backlog: after.received.saturating_sub(after.processed),
        drained_in: draining.elapsed(),
    })
}

/// What the end-to-end phase sent, read against the outbox once tgq has stopped.
pub struct EndToEndRun {
    sent: Vec<Sent>,
    ops_per_commit: f64,
    tgq_cores: f64,
}

/// Sends at the fixed rate over the chats, then waits until every reply is in the outbox (or the
/// settle time is over: missing replies are reported, not hidden).
pub async fn end_to_end(
    server: &Server,
    updates: &Arc<Updates>,
    plan: &Plan,
) -> anyhow::Result<EndToEndRun> {
    let before = server.status().await?;
    let (tgq_cpu, started) = (server.cpu_time(), Instant::now());
    let sent = load::open_loop(
        &target(server),
        updates,
        plan.e2e_rate,
        plan.e2e,
        plan.open_loop_clients,
    )
    .await?;
    let expected = before.outbox + sent.len() as u64;
    let settled = server
        .wait_for("every reply recorded", plan.settle, |status| {
            status.is_settled() && status.outbox >= expected
        })
        .await;
    if let Err(error) = &settled {
        eprintln!("warning: {error:#}");
    }
    let after = server.status().await?;
    Ok(EndToEndRun {
        ops_per_commit: ops_per_commit(&before, &after),
        tgq_cores: server.cpu_time().saturating_sub(tgq_cpu).as_secs_f64()
            / started.elapsed().as_secs_f64(),
        sent,
    })
}

/// tgq's memory and the store's size, read while it runs, and the CPU it uses once the queue is
/// empty and nothing arrives.
pub async fn footprint(server: &Server, plan: &Plan) -> anyhow::Result<Footprint> {
    let status = server.status().await?;
    server
        .wait_for("the queue to empty", plan.settle, Status::is_settled)
        .await?;
    // The last runs' settles and the retention task's first pass are not idleness.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (before, started) = (server.cpu_time(), Instant::now());
    tokio::time::sleep(plan.idle).await;
    let idle_cores = (server.cpu_time() - before).as_secs_f64() / started.elapsed().as_secs_f64();
    Ok(Footprint {
        memory: server.memory()?,
        data_bytes: system::dir_size(server.data_dir())?,
        records: status.records,
        outbox: status.outbox,
        idle_cores,
        idle_for: plan.idle,
    })
}

/// Matches each sent update with its reply in the outbox of the stopped store in `data_dir`: the
/// latency is the reply's `at` (tgq's clock, epoch ms) minus the moment the bench sent the update.
pub async fn replies(
    data_dir: &Path,
    run: EndToEndRun,
    plan: &Plan,
) -> anyhow::Result<EndToEndFigures> {
    let dir = data_dir.to_owned();
    let replied_at: HashMap<i64, u64> = tokio::task::spawn_blocking(move || {
        let store = EmbeddedStore::open(&dir, StoreOptions::default())?;
        let entries = store.outbox(usize::MAX)?;
        anyhow::Ok(
            entries
                .into_iter()
                .filter(|entry| entry.method == "sendMessage")
                .filter_map(|entry| Some((entry.update_id?, entry.at.0)))
                .collect(),
        )
    })
    .await??;
    let mut latencies = Vec::with_capacity(run.sent.len());
    for sent in &run.sent {
        let id = i64::try_from(sent.update_id).unwrap_or(i64::MAX);
        if let Some(at) = replied_at.get(&id) {
            latencies.push((*at as f64 - sent.sent_ms).max(0.0));
        }
    }
    let acknowledged: Vec<Duration> = run.sent.iter().map(|s| s.acknowledged_in).collect();
    Ok(EndToEndFigures {
        rate: plan.e2e_rate,
        duration: plan.e2e,
        chats: plan.chats,
        sent: run.sent.len(),
        replied: latencies.len(),
        latency: Summary::of_millis(&latencies),
        acknowledged: Summary::of_durations(&acknowledged),
        worst_send_lag_ms: run
            .sent
            .iter()
            .map(|s| s.lag.as_secs_f64() * 1e3)
            .fold(0.0, f64::max),
        ops_per_commit: run.ops_per_commit,
        tgq_cores: run.tgq_cores,
    })
}

/// A long run with a short TTL on its own `tgq local`: the store is sampled every
/// `plan.sample_every` while updates arrive at a steady rate.
pub async fn retention(
    tgq: &Path,
    run_dir: &Path,
    plan: &Plan,
) -> anyhow::Result<RetentionFigures> {
    let data_dir = run_dir.join("retention");
    let env = [
        ("TGQ_RECORD_TTL_SECS", plan.ttl.as_secs().to_string()),
        (
            "TGQ_PURGE_INTERVAL_SECS",
            plan.purge_every.as_secs().to_string(),
        ),
    ];
    let server = Server::start(tgq, &data_dir, &run_dir.join("retention.log"), &env).await?;
    let (updates, target) = (Arc::new(Updates::new(plan.chats)), target(&server));
    let load = load::open_loop(
        &target,
        &updates,
        plan.retention_rate,
        plan.retention,
        plan.open_loop_clients,
    );
    let sampling = async {
        let start = Instant::now();
        let mut samples = Vec::new();
        let mut ticks = tokio::time::interval_at(start + plan.sample_every, plan.sample_every);
        while start.elapsed() + plan.sample_every / 2 < plan.retention {
            ticks.tick().await;
            let status = server.status().await?;
            samples.push(Sample {
                at: start.elapsed(),
                records: status.records,
                outbox: status.outbox,
                bytes: system::dir_size(&data_dir)?,
            });
        }
        anyhow::Ok(samples)
    };
    let (sent, samples) = tokio::join!(load, sampling);
    let (sent, samples) = (sent?, samples?);
    server.stop().await?;
    Ok(RetentionFigures {
        rate: plan.retention_rate,
        duration: plan.retention,
        ttl: plan.ttl,
        purge_every: plan.purge_every,
        samples,
        sent: sent.len() as u64,
    })
}

/// The no-op HTTP/1.1 server (`tgq noop-http`: `tgq local`'s runtime, allocator and router, storing
/// nothing) under the same closed-loop clients as the ingest phase: what HTTP alone allows here.
pub async fn noop(
    tgq: &Path,
    run_dir: &Path,
    clients: usize,
    plan: &Plan,
) -> anyhow::Result<NoopFigures> {
    let server = Server::start_noop(tgq, &run_dir.join("noop"), &run_dir.join("noop.log")).await?;
    let (server_cpu, bench_cpu) = (server.cpu_time(), own_cpu());
    let updates = Arc::new(Updates::new(plan.chats));
    let run = load::closed_loop(&target(&server), &updates, clients, plan.ingest).await;
    let seconds = plan.ingest.as_secs_f64();
    let server_cores = server.cpu_time().saturating_sub(server_cpu).as_secs_f64() / seconds;
    let bench_cores = own_cpu().saturating_sub(bench_cpu).as_secs_f64() / seconds;
    server.kill().await?;
    let run = run?;
    Ok(NoopFigures {
        clients,
        answered: run.accepted,
        elapsed: run.elapsed,
        latency: Summary::of_durations(&run.latencies),
        server_cores,
        bench_cores,
    })
}

/// A backlog of `plan.drain_updates` updates over `plan.chats` chats, drained by the worker alone:
/// the updates are posted to one `tgq local`, which is stopped (its in-flight batches finish) and
/// started again on the same store, and the drain is timed from the first status of the new
/// process to an empty queue — no ingest competes with the worker meanwhile.
pub async fn drain(tgq: &Path, run_dir: &Path, plan: &Plan) -> anyhow::Result<DrainFigures> {
    let data_dir = run_dir.join("drain");
    let log = run_dir.join("drain.log");
    let server = Server::start(tgq, &data_dir, &log, &[]).await?;
    let updates = Arc::new(Updates::new(plan.chats));
    load::post_count(&target(&server), &updates, 64, plan.drain_updates).await?;
    server.stop().await?;
    let server = Server::start(tgq, &data_dir, &run_dir.join("drain-2.log"), &[]).await?;
    let (cpu, started) = (server.cpu_time(), Instant::now());
    let first = server.status().await?;
    let deadline = started + plan.settle;
    let last = loop {
        let status = server.status().await?;
        if status.is_settled() {
            break status;
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "the backlog did not drain within {:?}: {status:?}",
                plan.settle
            );
        }
        // Often, so that the poll's granularity is a small part of the drain.
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let elapsed = started.elapsed();
    let tgq_cores = server.cpu_time().saturating_sub(cpu).as_secs_f64() / elapsed.as_secs_f64();
    server.stop().await?;
    Ok(DrainFigures {
        chats: plan.chats,
        backlog: last.received.saturating_sub(first.processed),
        drained: last.processed.saturating_sub(first.processed),
        elapsed,
        commits: last.commits.saturating_sub(first.commits),
        operations: last.operations.saturating_sub(first.operations),
        tgq_cores,
    })
}
