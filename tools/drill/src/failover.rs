//! `tgq-drill failover` (docs/RELIABILITY.md): three `tgq poll` processes on the emulator share
//! one lease while the fake Bot API produces steady traffic. Round after round the leader is killed
//! (SIGKILL, then restarted as a new poller) or paused (SIGSTOP, SIGCONT once its lease has passed
//! and another leads). Counted from the outside: how long each takeover took, updates lost (pushed
//! to Telegram, never queued), duplicate side effects (an update queued twice), writes the resumed
//! old leaders had refused (their renewals and checkpoints), and getUpdates calls that overlapped in
//! time (the fake counts them).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use rand::{Rng as _, SeedableRng as _};
use serde::Serialize;
use serde_json::{json, Value};
use tgq_e2e::emulator::{drain, sdk_config, Stack};
use tgq_fake_telegram::{FakeConfig, FakeTelegram};
use tokio::process::{Child, Command};

use crate::local::signal;

/// The bot id the drilled pollers serve.
const BOT_ID: &str = "failover";
/// Chats the traffic spreads over.
const CHATS: i64 = 5;
/// How often the traffic pushes one update.
const TRAFFIC_EVERY: Duration = Duration::from_millis(200);
/// How long the cluster is left to settle between rounds, at least; a seeded share of one renewal
/// interval is added so that the faults land at every point of the leader's renewal cycle.
const SETTLE: Duration = Duration::from_secs(2);

/// What the failover drill is told.
#[derive(Clone, Debug)]
pub struct FailoverOptions {
    /// The `tgq` binary.
    pub exe: PathBuf,
    /// Rounds of SIGKILL, then as many of SIGSTOP/SIGCONT.
    pub rounds: usize,
    /// The pollers' lease TTL.
    pub ttl: Duration,
    /// Their renewal interval.
    pub renew_every: Duration,
    /// Their cooldown after losing the lease.
    pub cooldown: Duration,
    /// Logs of the pollers.
    pub work: PathBuf,
    /// Whether to say what happens on stderr.
    pub progress: bool,
    /// Seeds when in the renewal cycle each fault lands.
    pub seed: u64,
}

/// One round's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct RoundFigures {
    /// `kill` or `pause`.
    pub fault: &'static str,
    /// From the fault to another poller leading, in seconds.
    pub takeover_secs: f64,
}

/// The drill's figures.
#[derive(Clone, Debug, Serialize)]
pub struct FailoverReport {
    /// Each round.
    pub rounds: Vec<RoundFigures>,
    /// Takeover time over every round: min, median, max (seconds).
    pub takeover_min_secs: f64,
    /// The median.
    pub takeover_median_secs: f64,
    /// The max.
    pub takeover_max_secs: f64,
    /// Updates pushed to the fake Bot API.
    pub pushed: usize,
    /// Pushed updates that never reached the updates queue.
    pub lost: usize,
    /// Updates queued more than once.
    pub duplicates: usize,
    /// Writes of resumed old leaders refused by the lease (renewals and checkpoints).
    pub fenced_writes_refused: u64,
    /// Of those, offset checkpoints.
    pub fenced_checkpoints_refused: u64,
    /// Resumed or cut-off leaders that stopped by their own clock, their lease over before a
    /// renewal got through, without writing at all.
    pub stopped_by_own_clock: u64,
    /// getUpdates calls that overlapped another in time.
    pub overlapping_polls: u64,
    /// Takeovers the pollers logged as flapping.
    pub flapping_alerts: u64,
}

impl FailoverReport {
    /// The targets: takeover ≤ 20 s (or TTL + 5 s for shorter leases), nothing lost or twice, no
    /// overlapping polls. Returns what was missed.
    pub fn missed(&self, takeover_limit: Duration) -> Vec<String> {
        let mut missed = Vec::new();
        if self.takeover_max_secs > takeover_limit.as_secs_f64() {
            missed.push(format!(
                "takeover ≤ {} s: the slowest took {:.1} s",
                takeover_limit.as_secs(),
                self.takeover_max_secs
            ));
        }
        for (figure, value) in [
            ("lost", self.lost as u64),
            ("duplicates", self.duplicates as u64),
            ("overlapping polls", self.overlapping_polls),
        ] {
            if value > 0 {
                missed.push(format!("0 {figure}: {value}"));
            }
        }
        missed
    }

    /// The figures as a small table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!(
            "rounds                 {} ({} kill, {} pause)\n",
            self.rounds.len(),
            self.rounds.iter().filter(|r| r.fault == "kill").count(),
            self.rounds.iter().filter(|r| r.fault == "pause").count()
        ));
        out.push_str(&format!(
            "takeover (s)           min {:.1}  median {:.1}  max {:.1}\n",
            self.takeover_min_secs, self.takeover_median_secs, self.takeover_max_secs
        ));
        for fault in ["kill", "pause"] {
            let times: Vec<String> = self
                .rounds
                .iter()
                .filter(|r| r.fault == fault)
                .map(|r| format!("{:.1}", r.takeover_secs))
                .collect();
            out.push_str(&format!(
                "  {fault:<5} rounds (s)     {}\n",
                times.join(" ")
            ));
        }
        out.push_str(&format!("updates pushed         {}\n", self.pushed));
        out.push_str(&format!("lost                   {}\n", self.lost));
        out.push_str(&format!("duplicates             {}\n", self.duplicates));
        out.push_str(&format!(
            "fenced writes refused  {} ({} checkpoints)\n",
            self.fenced_writes_refused, self.fenced_checkpoints_refused
        ));
        out.push_str(&format!(
            "stopped by own clock   {}\n",
            self.stopped_by_own_clock
        ));
        out.push_str(&format!(
            "overlapping polls      {}\n",
            self.overlapping_polls
        ));
        out.push_str(&format!(
            "flapping alerts        {}\n",
            self.flapping_alerts
        ));
        out
    }
}

/// One `tgq poll` process.
struct Member {
    id: String,
    child: Child,
    health: String,
}

impl Member {
    fn pid(&self) -> anyhow::Result<u32> {
        self.child.id().context("the poller has exited")
    }
}

/// Everything the pollers are started with.
struct Cluster<'a> {
    options: &'a FailoverOptions,
    stack: Stack,
    fake: FakeTelegram,
    http: reqwest::Client,
    started: usize,
}

impl Cluster<'_> {
    async fn start_member(&mut self) -> anyhow::Result<Member> {
        let id = format!("poller-{}", self.started);
        self.started += 1;
        let port = free_port()?;
        let health = format!("127.0.0.1:{port}");
        let log = self.options.work.join(format!("{id}.log"));
        let file = std::fs::File::create(&log)?;
        let o = self.options;
        let child = Command::new(&o.exe)
            .args(["poll", "--id", &id, "--health-addr", &health])
            .args(["--table", &self.stack.table])
            .args(["--queue-url", &self.stack.queue_url])
            .args(["--dlq-url", &self.stack.dlq_url])
            .args(["--lease-ttl-secs", &o.ttl.as_secs().to_string()])
            .args(["--lease-renew-secs", &o.renew_every.as_secs().to_string()])
            .args(["--lease-cooldown-secs", &o.cooldown.as_secs().to_string()])
            .env("TGQ_BOT_ID", BOT_ID)
            .env("TELEGRAM_BOT_TOKEN", self.fake.token())
            .env("TELEGRAM_API_URL", self.fake.url())
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} poll", o.exe.display()))?;
        Ok(Member { id, child, health })
    }

    /// A poller's `/status`, `None` when it does not answer.
    async fn status(&self, member: &Member) -> Option<Value> {
        let url = format!("http://{}/status", member.health);
        let answer = self
            .http
            .get(url)
            .timeout(Duration::from_millis(500))
            .send()
            .await
            .ok()?;
        answer.json().await.ok()
    }

    /// The member that says it leads, among those not in `except`.
    async fn leader(&self, members: &[Member], except: Option<&str>) -> Option<usize> {
        for (index, member) in members.iter().enumerate() {
            if Some(member.id.as_str()) == except {
                continue;
            }
            let role = self.status(member).await;
            if role.as_ref().and_then(|s| s["role"].as_str()) == Some("leader") {
                return Some(index);
            }
        }
        None
    }

    /// Waits until a member other than `old` leads; returns it and how long it took from `since`.
    async fn wait_takeover(
        &self,
        members: &[Member],
        old: &str,
        since: Instant,
    ) -> anyhow::Result<(usize, Duration)> {
        let limit = self.options.ttl * 4 + Duration::from_secs(10);
        loop {
            if let Some(new) = self.leader(members, Some(old)).await {
                return Ok((new, since.elapsed()));
            }
            if since.elapsed() > limit {
                bail!("no poller took over from {old} within {limit:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn free_port() -> anyhow::Result<u16> {
    let socket = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(socket.local_addr()?.port())
}

fn update(id: i64) -> Value {
    json!({
        "update_id": id,
        "message": {
            "message_id": id,
            "date": 0,
            "chat": {"id": 1 + id % CHATS, "type": "private"},
            "from": {"id": 1 + id % CHATS, "is_bot": false, "first_name": "drill"},
            "text": format!("update {id}")
        }
    })
}

/// Runs the drill and returns its figures.
pub async fn run(options: &FailoverOptions) -> anyhow::Result<FailoverReport> {
    std::fs::create_dir_all(&options.work)?;
    let sdk = sdk_config().await;
    let stack = Stack::create(&sdk, "failover").await?;
    let fake = FakeTelegram::start_with(FakeConfig {
        // As long as a real long poll may be held: the pollers bound it by their lease.
        long_poll_cap: Duration::from_secs(25),
        ..FakeConfig::default()
    })
    .await?;
    let mut cluster = Cluster {
        options,
        stack: stack.clone(),
        fake: fake.clone(),
        http: reqwest::Client::new(),
        started: 0,
    };
    let mut members = Vec::new();
    for _ in 0..3 {
        members.push(cluster.start_member().await?);
    }

    let next_id = Arc::new(AtomicI64::new(1));
    let traffic_on = Arc::new(AtomicBool::new(true));
    let traffic = {
        let (fake, next_id, on) = (fake.clone(), next_id.clone(), traffic_on.clone());
        tokio::spawn(async move {
            while on.load(Ordering::SeqCst) {
                fake.push_update(update(next_id.fetch_add(1, Ordering::SeqCst)));
                tokio::time::sleep(TRAFFIC_EVERY).await;
            }
        })
    };

    let outcome = rounds(&mut cluster, &mut members).await;
    traffic_on.store(false, Ordering::SeqCst);
    traffic.await?;
    let rounds = match outcome {
        Ok(rounds) => rounds,
        Err(error) => {
            return Err(error.context(format!(
                "the pollers' logs are in {}",
                options.work.display()
            )))
        }
    };
    let pushed = usize::try_from(next_id.load(Ordering::SeqCst) - 1)?;
    // Every pushed update confirmed: the leader's offset passed the last one.
    let drained = Instant::now();
    while fake.pending_updates() > 0 {
        if drained.elapsed() > options.ttl * 4 + Duration::from_secs(30) {
            bail!(
                "{} updates were never confirmed by a poller (logs in {})",
                fake.pending_updates(),
                options.work.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A clean stop of each poller, then what their logs say.
    for member in &mut members {
        if let Ok(pid) = member.pid() {
            signal(pid, libc::SIGTERM)?;
        }
    }
    for member in &mut members {
        let _ = tokio::time::timeout(Duration::from_secs(30), member.child.wait()).await;
    }
    let logged = LogCounts::read(&options.work)?;

    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let mut queued: BTreeMap<i64, usize> = BTreeMap::new();
    for message in drain(&sqs, &stack.queue_url).await? {
        let body: Value = serde_json::from_str(&message.body).unwrap_or(Value::Null);
        if let Some(id) = body["update_id"].as_i64() {
            *queued.entry(id).or_default() += 1;
        }
    }
    let expected: BTreeSet<i64> = (1..=i64::try_from(pushed)?).collect();
    let lost = expected
        .iter()
        .filter(|id| !queued.contains_key(id))
        .count();
    let duplicates = queued.values().filter(|n| **n > 1).count();
    let mut times: Vec<f64> = rounds.iter().map(|r| r.takeover_secs).collect();
    times.sort_by(f64::total_cmp);
    let median = times.get(times.len() / 2).copied().unwrap_or(0.0);
    Ok(FailoverReport {
        takeover_min_secs: times.first().copied().unwrap_or(0.0),
        takeover_median_secs: median,
        takeover_max_secs: times.last().copied().unwrap_or(0.0),
        rounds,
        pushed,
        lost,
        duplicates,
        fenced_writes_refused: logged.renewals_refused + logged.checkpoints_refused,
        fenced_checkpoints_refused: logged.checkpoints_refused,
        stopped_by_own_clock: logged.lapsed,
        overlapping_polls: fake.overlapping_polls(),
        flapping_alerts: logged.flapping,
    })
}

/// What the pollers' logs say about refused writes and flapping: every poller, also the killed
/// ones, counted the same way.
struct LogCounts {
    /// Renewals refused because a newer leader held the lease.
    renewals_refused: u64,
    /// Offset checkpoints refused for the same reason.
    checkpoints_refused: u64,
    /// Takeovers logged as flapping.
    flapping: u64,
    /// Leaders that found their lease over by their own clock.
    lapsed: u64,
}

impl LogCounts {
    fn read(work: &Path) -> anyhow::Result<Self> {
        let mut counts = LogCounts {
            renewals_refused: 0,
            checkpoints_refused: 0,
            flapping: 0,
            lapsed: 0,
        };
        for entry in std::fs::read_dir(work)? {
            let path = entry?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("log") {
                continue;
            }
            let text = std::fs::read_to_string(&path)?;
            let count = |needle: &str| text.lines().filter(|l| l.contains(needle)).count() as u64;
            counts.renewals_refused +=
                count("lost the poller lease: another poller holds a newer token");
            counts.checkpoints_refused += count("checkpoint refused: a newer leader holds");
            counts.flapping += count("poller_flapping");
            counts.lapsed += count("the poller lease lapsed before a renewal got through");
        }
        Ok(counts)
    }
}

async fn rounds(
    cluster: &mut Cluster<'_>,
    members: &mut [Member],
) -> anyhow::Result<Vec<RoundFigures>> {
    let options = cluster.options;
    let say = |text: String| {
        if options.progress {
            eprintln!("failover: {text}");
        }
    };
    let first = Instant::now();
    let mut leader = loop {
        if let Some(leader) = cluster.leader(members, None).await {
            break leader;
        }
        if first.elapsed() > Duration::from_secs(60) {
            bail!("no poller became leader within a minute");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    say(format!("{} leads", members[leader].id));
    let mut figures = Vec::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(options.seed);
    for round in 0..options.rounds * 2 {
        let share = options.renew_every.mul_f64(rng.random_range(0.0..1.0));
        tokio::time::sleep(SETTLE + share).await;
        let kill = round < options.rounds;
        let old = members[leader].id.clone();
        let pid = members[leader].pid()?;
        let since = Instant::now();
        if kill {
            signal(pid, libc::SIGKILL)?;
            members[leader].child.wait().await?;
        } else {
            signal(pid, libc::SIGSTOP)?;
        }
        let (new, took) = cluster.wait_takeover(members, &old, since).await?;
        say(format!(
            "round {}: {} {} → {} leads after {:.1} s",
            round + 1,
            if kill { "killed" } else { "paused" },
            old,
            members[new].id,
            took.as_secs_f64()
        ));
        figures.push(RoundFigures {
            fault: if kill { "kill" } else { "pause" },
            takeover_secs: took.as_secs_f64(),
        });
        if kill {
            // The killed poller's place is taken by a new process, as a supervisor restarts it.
            let replacement = cluster.start_member().await?;
            members[leader] = replacement;
            leader = new;
        } else {
            // Resumed once its lease has passed: its renewal, or its checkpoint, must be refused.
            let lease_end = since + options.ttl + Duration::from_secs(1);
            tokio::time::sleep_until(lease_end.into()).await;
            signal(pid, libc::SIGCONT)?;
            leader = new;
        }
    }
    Ok(figures)
}
