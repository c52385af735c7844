//! The figures of one run, the goals they are checked against, and the two ways of printing them
//! (aligned text, or Markdown for docs/PERFORMANCE.md).

use std::fmt::Write as _;
use std::time::Duration;

use crate::stats::Summary;
use crate::system::{FsyncFigures, Machine, Memory, FSYNC_RECORD_BYTES};

/// The goals of the issue.
pub mod goal {
    /// At 64 clients, ingest must reach this multiple of the raw fsync rate (group commit)…
    pub const INGEST_OVER_FSYNC: f64 = 4.0;
    /// …or this share of the no-op HTTP server's rate, whichever is lower: on a disk whose fsync
    /// is fast, HTTP and not the disk sets the limit.
    pub const INGEST_OVER_NOOP: f64 = 0.6;
    /// The worker must drain a backlog (one offline reply per update) at least this fast.
    pub const DRAIN_PER_SECOND: f64 = 10_000.0;
    /// The p99 end-to-end latency allowed at the fixed rate, in milliseconds.
    pub const P99_MS: f64 = 50.0;
    /// The client count the ingest goal is checked at.
    pub const INGEST_CLIENTS: usize = 64;
    /// The share of one core an idle `tgq local` may use.
    pub const IDLE_CORES: f64 = 0.005;
}

/// Ingest throughput at one concurrency.
#[derive(Clone, Debug)]
pub struct IngestFigures {
    /// Concurrent clients.
    pub clients: usize,
    /// Updates acknowledged with 200.
    pub accepted: u64,
    /// How long the clients sent.
    pub elapsed: Duration,
    /// Request latency (send → 200).
    pub latency: Summary,
    /// Store operations per commit (fsync) during the phase, worker operations included.
    pub ops_per_commit: f64,
    /// Commits per second during the phase.
    pub commits_per_second: f64,
    /// CPU used by tgq during the phase, in cores.
    pub tgq_cores: f64,
    /// CPU used by the bench (the clients) during the phase, in cores.
    pub bench_cores: f64,
    /// Updates stored but not yet handled when the clients stopped (the worker shares the writer).
    pub backlog: u64,
    /// How long the worker then took to handle them.
    pub drained_in: Duration,
}

impl IngestFigures {
    /// Acknowledged updates per second.
    pub fn per_second(&self) -> f64 {
        self.accepted as f64 / self.elapsed.as_secs_f64()
    }
}

/// The no-op HTTP/1.1 server under the ingest phase's clients.
#[derive(Clone, Debug)]
pub struct NoopFigures {
    /// Concurrent clients.
    pub clients: usize,
    /// Requests answered with 200.
    pub answered: u64,
    /// How long the clients sent.
    pub elapsed: Duration,
    /// Request latency (send → 200).
    pub latency: Summary,
    /// CPU used by the server, in cores.
    pub server_cores: f64,
    /// CPU used by the bench, in cores.
    pub bench_cores: f64,
}

impl NoopFigures {
    /// Answered requests per second.
    pub fn per_second(&self) -> f64 {
        self.answered as f64 / self.elapsed.as_secs_f64()
    }
}

/// A backlog drained by the worker alone.
#[derive(Clone, Debug)]
pub struct DrainFigures {
    /// Chats the backlog is spread over.
    pub chats: u64,
    /// Updates not yet handled when the drain was first looked at.
    pub backlog: u64,
    /// Updates handled from then to the empty queue.
    pub drained: u64,
    /// From the first look to the empty queue.
    pub elapsed: Duration,
    /// Commits meanwhile.
    pub commits: u64,
    /// Operations those commits carried.
    pub operations: u64,
    /// CPU used by tgq, in cores.
    pub tgq_cores: f64,
}

impl DrainFigures {
    /// Updates handled per second.
    pub fn per_second(&self) -> f64 {
        self.drained as f64 / self.elapsed.as_secs_f64()
    }

    /// One line of the figures (`--drain-only`).
    pub fn summary(&self) -> String {
        format!(
            "drained {} of a backlog of {} over {} chats in {:.2} s: {:.0} updates/s, {:.2} commits and {:.2} operations per update, tgq CPU {:.0}%",
            self.drained,
            self.backlog,
            self.chats,
            self.elapsed.as_secs_f64(),
            self.per_second(),
            self.commits as f64 / self.drained.max(1) as f64,
            self.operations as f64 / self.drained.max(1) as f64,
            self.tgq_cores * 100.0
        )
    }
}

/// End-to-end latency at a fixed rate.
#[derive(Clone, Debug)]
pub struct EndToEndFigures {
    /// Updates per second sent.
    pub rate: f64,
    /// How long they were sent.
    pub duration: Duration,
    /// Chats they were spread over.
    pub chats: u64,
    /// Updates sent (all acknowledged with 200).
    pub sent: usize,
    /// Updates whose reply reached the outbox.
    pub replied: usize,
    /// Sent → reply recorded in the outbox.
    pub latency: Summary,
    /// Sent → webhook's 200.
    pub acknowledged: Summary,
    /// The latest any send was against its schedule, in milliseconds.
    pub worst_send_lag_ms: f64,
    /// Store operations per commit during the phase.
    pub ops_per_commit: f64,
    /// CPU used by tgq during the phase, in cores.
    pub tgq_cores: f64,
}

/// tgq's memory and disk after the ingest and latency phases.
#[derive(Clone, Debug)]
pub struct Footprint {
    /// tgq's resident memory.
    pub memory: Memory,
    /// The data directory's size.
    pub data_bytes: u64,
    /// Update records stored.
    pub records: u64,
    /// Outbox entries stored.
    pub outbox: u64,
    /// CPU used while nothing arrived and the queue was empty, in cores.
    pub idle_cores: f64,
    /// How long that was measured.
    pub idle_for: Duration,
}

/// One look at the store during the retention run.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// Since the load started.
    pub at: Duration,
    /// Update records stored.
    pub records: u64,
    /// Outbox entries stored.
    pub outbox: u64,
    /// The data directory's size.
    pub bytes: u64,
}

/// A long run with a short TTL.
#[derive(Clone, Debug)]
pub struct RetentionFigures {
    /// Updates per second sent.
    pub rate: f64,
    /// How long they were sent.
    pub duration: Duration,
    /// `TGQ_RECORD_TTL_SECS`.
    pub ttl: Duration,
    /// `TGQ_PURGE_INTERVAL_SECS`.
    pub purge_every: Duration,
    /// What the store held over time.
    pub samples: Vec<Sample>,
    /// Updates sent in all.
    pub sent: u64,
}

impl RetentionFigures {
    /// The most records a store that purges on time can hold: everything of the last TTL and
    /// purge interval, with a quarter more for processing lag.
    pub fn record_bound(&self) -> u64 {
        (self.rate * (self.ttl + self.purge_every).as_secs_f64() * 1.25) as u64
    }

    /// The first and second half of the samples; by the second, every record of the first half
    /// has expired.
    fn halves(&self) -> (&[Sample], &[Sample]) {
        self.samples.split_at(self.samples.len() / 2)
    }

    /// The most records held in the second half.
    pub fn late_records(&self) -> u64 {
        self.halves().1.iter().map(|s| s.records).max().unwrap_or(0)
    }

    /// The largest data directory of the first half and of the second.
    pub fn peak_bytes(&self) -> (u64, u64) {
        let peak = |samples: &[Sample]| samples.iter().map(|s| s.bytes).max().unwrap_or(0);
        let (early, late) = self.halves();
        (peak(early), peak(late))
    }

    /// The record count stays under the bound, and the data directory never grows past the size it
    /// reached in the first half: freed pages are reused.
    pub fn bounded(&self) -> bool {
        let (early, late) = self.peak_bytes();
        self.samples.len() >= 2 && self.late_records() <= self.record_bound() && late <= early
    }
}

/// A goal and whether the run met it.
#[derive(Clone, Debug)]
pub struct Verdict {
    /// The goal.
    pub goal: String,
    /// What was measured.
    pub measured: String,
    /// Met.
    pub pass: bool,
}

/// Everything one run measured.
#[derive(Clone, Debug)]
pub struct Report {
    /// Where and when.
    pub machine: Machine,
    /// Whether phases were shortened (`--quick`).
    pub quick: bool,
    /// The disk's raw durable append rate.
    pub fsync: FsyncFigures,
    /// Ingest throughput by concurrency.
    pub ingest: Vec<IngestFigures>,
    /// The no-op HTTP server at the goal's concurrency.
    pub noop: NoopFigures,
    /// A backlog drained by the worker alone.
    pub drain: DrainFigures,
    /// Latency at the fixed rate.
    pub end_to_end: EndToEndFigures,
    /// Memory and disk after those phases.
    pub footprint: Footprint,
    /// Bounded disk use under retention.
    pub retention: RetentionFigures,
}

impl Report {
    /// Checks the goals.
    pub fn verdicts(&self) -> Vec<Verdict> {
        let fsync = self.fsync.per_second();
        let ingest = self
            .ingest
            .iter()
            .find(|figures| figures.clients == goal::INGEST_CLIENTS)
            .map_or(0.0, IngestFigures::per_second);
        let noop = self.noop.per_second();
        let floor = (goal::INGEST_OVER_FSYNC * fsync).min(goal::INGEST_OVER_NOOP * noop);
        let e2e = &self.end_to_end;
        let retention = &self.retention;
        let drain = self.drain.per_second();
        vec![
            Verdict {
                goal: format!(
                    "ingest at {} clients ≥ min({}× raw fsync {:.0}/s, {}× no-op HTTP {:.0}/s) = {floor:.0}/s",
                    goal::INGEST_CLIENTS,
                    goal::INGEST_OVER_FSYNC,
                    fsync,
                    goal::INGEST_OVER_NOOP,
                    noop,
                ),
                measured: format!(
                    "{ingest:.0}/s = {:.1}× raw fsync, {:.2}× no-op HTTP",
                    ingest / fsync,
                    ingest / noop
                ),
                pass: ingest >= floor,
            },
            Verdict {
                goal: format!(
                    "drain a backlog over {} chats (one offline reply each) ≥ {:.0} updates/s",
                    self.drain.chats,
                    goal::DRAIN_PER_SECOND
                ),
                measured: format!("{drain:.0}/s"),
                pass: drain >= goal::DRAIN_PER_SECOND,
            },
            Verdict {
                goal: format!(
                    "p99 end-to-end ≤ {} ms at {:.0} updates/s, every reply recorded",
                    goal::P99_MS,
                    e2e.rate
                ),
                measured: format!(
                    "p99 {:.1} ms, {} of {} replies",
                    e2e.latency.p99, e2e.replied, e2e.sent
                ),
                pass: e2e.latency.p99 <= goal::P99_MS && e2e.replied == e2e.sent,
            },
            Verdict {
                goal: format!(
                    "idle (empty queue, nothing arriving) ≤ {:.1}% of one core",
                    goal::IDLE_CORES * 100.0
                ),
                measured: format!(
                    "{:.2}% over {:.0} s",
                    self.footprint.idle_cores * 100.0,
                    self.footprint.idle_for.as_secs_f64()
                ),
                pass: self.footprint.idle_cores <= goal::IDLE_CORES,
            },
            Verdict {
                goal: format!(
                    "retention: records plateau (≤ {} in the 2nd half) and the data directory stops growing (2nd-half peak ≤ 1st-half peak)",
                    retention.record_bound()
                ),
                measured: format!(
                    "records ≤ {}; peak {} then {}",
                    retention.late_records(),
                    bytes(retention.peak_bytes().0),
                    bytes(retention.peak_bytes().1)
                ),
                pass: retention.bounded(),
            },
        ]
    }

    /// The report as tables.
    fn sections(&self) -> Vec<Section> {
        let m = &self.machine;
        let mut sections = vec![Section::one_row(
            "Machine",
            vec![
                ("date", m.date.clone()),
                ("CPUs", m.cpus.to_string()),
                ("model", m.cpu_model.clone()),
                ("disk", m.disk.clone()),
                (
                    "load before / after",
                    format!("{} / {}", m.load_before, m.load_after),
                ),
            ],
        )];
        let f = &self.fsync;
        sections.push(Section::one_row(
            format!(
                "Raw fsync: {FSYNC_RECORD_BYTES}-byte append + fdatasync in the data directory"
            ),
            vec![
                ("appends", f.appends.to_string()),
                ("seconds", format!("{:.1}", f.elapsed.as_secs_f64())),
                ("appends/s", format!("{:.0}", f.per_second())),
                ("mean ms", format!("{:.3}", f.latency.mean)),
                ("p99 ms", format!("{:.3}", f.latency.p99)),
            ],
        ));
        sections.push(Section {
            title: "Durable ingest: closed-loop clients POSTing distinct updates (200 = fsynced)"
                .into(),
            headers: vec![
                "clients",
                "accepted",
                "accepted/s",
                "× fsync rate",
                "p50 ms",
                "p99 ms",
                "ops/commit",
                "commits/s",
                "tgq CPU",
                "bench CPU",
                "backlog",
                "drained in s",
            ],
            rows: self
                .ingest
                .iter()
                .map(|i| {
                    vec![
                        i.clients.to_string(),
                        i.accepted.to_string(),
                        format!("{:.0}", i.per_second()),
                        format!("{:.1}", i.per_second() / f.per_second()),
                        format!("{:.2}", i.latency.p50),
                        format!("{:.2}", i.latency.p99),
                        format!("{:.1}", i.ops_per_commit),
                        format!("{:.0}", i.commits_per_second),
                        format!("{:.0}%", i.tgq_cores * 100.0),
                        format!("{:.0}%", i.bench_cores * 100.0),
                        i.backlog.to_string(),
                        format!("{:.1}", i.drained_in.as_secs_f64()),
                    ]
                })
                .collect(),
        });
        let n = &self.noop;
        let over_noop = self
            .ingest
            .iter()
            .find(|i| i.clients == n.clients)
            .map_or("-".into(), |i| {
                format!("{:.2}", i.per_second() / n.per_second())
            });
        sections.push(Section::one_row(
            "No-op HTTP/1.1 server (`tgq noop-http`: same runtime, allocator and router, stores nothing), same clients",
            vec![
                ("clients", n.clients.to_string()),
                ("answered", n.answered.to_string()),
                ("answered/s", format!("{:.0}", n.per_second())),
                ("p50 ms", format!("{:.2}", n.latency.p50)),
                ("p99 ms", format!("{:.2}", n.latency.p99)),
                ("server CPU", format!("{:.0}%", n.server_cores * 100.0)),
                ("bench CPU", format!("{:.0}%", n.bench_cores * 100.0)),
                ("tgq ingest / no-op", over_noop),
            ],
        ));
        let d = &self.drain;
        sections.push(Section::one_row(
            format!(
                "Drain: a backlog over {} chats handled by the worker alone (restarted, no ingest), one offline reply each",
                d.chats
            ),
            vec![
                ("backlog", d.backlog.to_string()),
                ("drained", d.drained.to_string()),
                ("seconds", format!("{:.2}", d.elapsed.as_secs_f64())),
                ("updates/s", format!("{:.0}", d.per_second())),
                (
                    "commits/update",
                    format!("{:.2}", d.commits as f64 / d.drained.max(1) as f64),
                ),
                (
                    "ops/update",
                    format!("{:.2}", d.operations as f64 / d.drained.max(1) as f64),
                ),
                (
                    "ops/commit",
                    format!("{:.1}", d.operations as f64 / d.commits.max(1) as f64),
                ),
                ("tgq CPU", format!("{:.0}%", d.tgq_cores * 100.0)),
            ],
        ));
        let e = &self.end_to_end;
        sections.push(Section::one_row(
            format!(
                "End to end: {:.0} updates/s open loop for {:.0} s over {} chats (sent → reply in the outbox)",
                e.rate,
                e.duration.as_secs_f64(),
                e.chats
            ),
            vec![
                ("sent", e.sent.to_string()),
                ("replied", e.replied.to_string()),
                ("p50 ms", format!("{:.1}", e.latency.p50)),
                ("p90 ms", format!("{:.1}", e.latency.p90)),
                ("p99 ms", format!("{:.1}", e.latency.p99)),
                ("max ms", format!("{:.1}", e.latency.max)),
                ("200 p99 ms", format!("{:.1}", e.acknowledged.p99)),
                ("worst send lag ms", format!("{:.1}", e.worst_send_lag_ms)),
                ("ops/commit", format!("{:.1}", e.ops_per_commit)),
                ("tgq CPU", format!("{:.0}%", e.tgq_cores * 100.0)),
            ],
        ));
        let fp = &self.footprint;
        sections.push(Section::one_row(
            "Footprint of tgq local after the ingest and end-to-end phases",
            vec![
                ("VmHWM", bytes(fp.memory.peak_kib * 1024)),
                ("VmRSS", bytes(fp.memory.now_kib * 1024)),
                ("data directory", bytes(fp.data_bytes)),
                ("records", fp.records.to_string()),
                ("outbox", fp.outbox.to_string()),
                ("idle CPU", format!("{:.2}%", fp.idle_cores * 100.0)),
            ],
        ));
        let r = &self.retention;
        sections.push(Section {
            title: format!(
                "Retention: {:.0} updates/s for {:.0} s, TGQ_RECORD_TTL_SECS={}, TGQ_PURGE_INTERVAL_SECS={} ({} sent)",
                r.rate,
                r.duration.as_secs_f64(),
                r.ttl.as_secs(),
                r.purge_every.as_secs(),
                r.sent
            ),
            headers: vec!["at s", "records", "outbox", "data directory"],
            rows: r
                .samples
                .iter()
                .map(|s| {
                    vec![
                        format!("{:.0}", s.at.as_secs_f64()),
                        s.records.to_string(),
                        s.outbox.to_string(),
                        bytes(s.bytes),
                    ]
                })
                .collect(),
        });
        sections.push(Section {
            title: "Goals".into(),
            headers: vec!["goal", "measured", "result"],
            rows: self
                .verdicts()
                .into_iter()
                .map(|v| {
                    let result = if v.pass { "PASS" } else { "MISS" };
                    vec![v.goal, v.measured, result.into()]
                })
                .collect(),
        });
        sections
    }

    /// Aligned text tables.
    pub fn text(&self) -> String {
        let mut out = String::new();
        if self.quick {
            out.push_str("(--quick: shortened phases, a smoke test; the figures mean little)\n\n");
        }
        for section in self.sections() {
            let widths: Vec<usize> = (0..section.headers.len())
                .map(|column| {
                    section
                        .rows
                        .iter()
                        .map(|row| row[column].chars().count())
                        .chain([section.headers[column].chars().count()])
                        .max()
                        .unwrap_or(0)
                })
                .collect();
            let line = |cells: Vec<&str>| {
                let padded: Vec<String> = cells
                    .iter()
                    .zip(&widths)
                    .map(|(cell, width)| format!("{cell:<width$}"))
                    .collect();
                padded.join("  ").trim_end().to_owned()
            };
            let _ = writeln!(out, "{}", section.title);
            let _ = writeln!(out, "  {}", line(section.headers.clone()));
            for row in &section.rows {
                let _ = writeln!(out, "  {}", line(row.iter().map(String::as_str).collect()));
            }
            out.push('\n');
        }
        out
    }

    /// Markdown tables.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        if self.quick {
            out.push_str(
                "_`--quick`: shortened phases, a smoke test; the figures mean little._\n\n",
            );
        }
        for section in self.sections() {
            let _ = writeln!(out, "**{}**\n", section.title);
            let _ = writeln!(out, "| {} |", section.headers.join(" | "));
            let _ = writeln!(
                out,
                "|{}",
                section.headers.iter().map(|_| "---|").collect::<String>()
            );
            for row in &section.rows {
                let _ = writeln!(out, "| {} |", row.join(" | "));
            }
            out.push('\n');
        }
        out
    }
}

/// One table of the report.
struct Section {
    title: String,
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Section {
    /// A table of one row, given column by column: each header with its cell.
    fn one_row(title: impl Into<String>, columns: Vec<(&'static str, String)>) -> Section {
        let (headers, row) = columns.into_iter().unzip();
        Section {
            title: title.into(),
            headers,
            rows: vec![row],
        }
    }
}

/// A byte count in MiB (or KiB when small).
fn bytes(count: u64) -> String {
    if count < 1024 * 1024 {
        format!("{:.1} KiB", count as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", count as f64 / (1024.0 * 1024.0))
    }
}
