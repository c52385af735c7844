//! The polling use case on in-memory adapters, on tokio's paused clock: several pollers share one
//! lease, only its holder calls getUpdates, a leader cut off from the lease stops polling before
//! its lease could end, a leader that was overtaken has its checkpoint refused, a new leader
//! resumes from the checkpoint, and a shutdown releases the lease only once the batch in flight is
//! durable.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use secrecy::SecretString;
use serde_json::{json, Value};
use tgq_core::budget::SendBudget;
use tgq_core::clock::Clock;
use tgq_core::ids::{BotId, RecordKey, UpdateId};
use tgq_core::ingest::{Ingest, Webhook, WebhookPorts, WebhookSettings};
use tgq_core::leadership::{Acquired, HolderId, LeaseError, LeaseState, PollerLease, Term};
use tgq_core::pacer::{Pacer, RateLimits};
use tgq_core::poller::{LeaseTiming, Poller, PollerPorts, PollerSettings, Role};
use tgq_core::ports::{OutgoingMessage, UpdateQueue};
use tgq_core::record::Timestamp;
use tgq_core::telegram::{ApiCall, BotApi, CallError, TelegramError};
use tgq_core::PortError;
use tgq_memory::{MemoryDeadLetters, MemoryPollerLease, MemoryQueue, MemoryStore};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

/// The wall clock of these tests: tokio's paused clock, read as a timestamp.
struct TokioClock {
    start: Instant,
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        Timestamp(1_000_000_000).plus(self.start.elapsed())
    }
}

/// One getUpdates call as the fake Bot API saw it.
#[derive(Clone, Debug)]
struct Poll {
    poller: usize,
    offset: Option<i64>,
    started: Instant,
    /// When it was answered or abandoned; `None` while in flight.
    ended: Option<Instant>,
}

/// getUpdates as Telegram answers it: an offset confirms every update below it; a call returns the
/// unconfirmed updates at once, or waits up to its timeout for one.
#[derive(Default)]
struct Telegram {
    pending: Mutex<Vec<i64>>,
    arrived: Notify,
    polls: Mutex<Vec<Poll>>,
    /// The next getUpdates is answered 429 with this `retry_after`.
    flood: Mutex<Option<Duration>>,
}

impl Telegram {
    fn send(&self, ids: impl IntoIterator<Item = i64>) {
        self.pending.lock().extend(ids);
        self.arrived.notify_waiters();
    }

    fn polls(&self) -> Vec<Poll> {
        self.polls.lock().clone()
    }

    /// Polls by two pollers whose times overlap.
    fn overlapping(&self) -> usize {
        let polls = self.polls();
        let end = |p: &Poll| p.ended.unwrap_or_else(Instant::now);
        let mut overlaps = 0;
        for (i, a) in polls.iter().enumerate() {
            for b in &polls[i + 1..] {
                if a.poller != b.poller && a.started < end(b) && b.started < end(a) {
                    overlaps += 1;
                }
            }
        }
        overlaps
    }

    async fn get_updates(&self, poller: usize, params: &Value) -> Value {
        let offset = params.get("offset").and_then(Value::as_i64);
        let timeout = params.get("timeout").and_then(Value::as_u64).unwrap_or(0);
        let index = {
            let mut polls = self.polls.lock();
            polls.push(Poll {
                poller,
                offset,
                started: Instant::now(),
                ended: None,
            });
            polls.len() - 1
        };
        // Marks the poll ended when it is answered or when the poller abandons it.
        struct Ended<'a>(&'a Telegram, usize);
        impl Drop for Ended<'_> {
            fn drop(&mut self) {
                self.0.polls.lock()[self.1].ended = Some(Instant::now());
            }
        }
        let _ended = Ended(self, index);
        let deadline = Instant::now() + Duration::from_secs(timeout);
        loop {
            let arrived = self.arrived.notified();
            let batch: Vec<i64> = {
                let mut pending = self.pending.lock();
                if let Some(offset) = offset {
                    pending.retain(|id| *id >= offset);
                }
                pending.iter().copied().take(100).collect()
            };
            if !batch.is_empty() || Instant::now() >= deadline {
                return Value::Array(batch.into_iter().map(update).collect());
            }
            tokio::select! {
                () = arrived => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }
}

fn update(id: i64) -> Value {
    json!({
        "update_id": id,
        "message": {"message_id": id, "date": 0, "chat": {"id": 7, "type": "private"}, "text": "hi"}
    })
}

/// One poller's way to the fake Bot API.
struct PollerApi {
    telegram: Arc<Telegram>,
    poller: usize,
}

#[async_trait]
impl BotApi for PollerApi {
    async fn call(&self, call: &ApiCall<'_>) -> Result<Value, CallError> {
        assert_eq!(call.method, "getUpdates");
        if let Some(wait) = self.telegram.flood.lock().take() {
            return Err(CallError::Telegram(TelegramError::RetryAfter(wait)));
        }
        Ok(self.telegram.get_updates(self.poller, call.params).await)
    }
}

/// One poller's way to the shared lease, which can be cut (every call fails as unreachable).
struct Link {
    lease: Arc<MemoryPollerLease>,
    cut: AtomicBool,
    /// Renewals never answer while set (a store that hangs).
    hang: AtomicBool,
}

impl Link {
    fn check(&self) -> Result<(), PortError> {
        if self.cut.load(Ordering::SeqCst) {
            return Err(PortError::unavailable("lease", "the link is cut"));
        }
        Ok(())
    }
}

#[async_trait]
impl PollerLease for Link {
    async fn acquire(
        &self,
        holder: &HolderId,
        now: Timestamp,
        ttl: Duration,
    ) -> Result<Acquired, LeaseError> {
        self.check()?;
        self.lease.acquire(holder, now, ttl).await
    }
    async fn renew(&self, term: &Term, now: Timestamp, ttl: Duration) -> Result<Term, LeaseError> {
        self.check()?;
        if self.hang.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        self.lease.renew(term, now, ttl).await
    }
    async fn checkpoint(&self, term: &Term, offset: i64) -> Result<(), LeaseError> {
        self.check()?;
        self.lease.checkpoint(term, offset).await
    }
    async fn release(&self, term: &Term, now: Timestamp) -> Result<(), LeaseError> {
        self.check()?;
        self.lease.release(term, now).await
    }
    async fn read(&self) -> Result<Option<LeaseState>, PortError> {
        self.check()?;
        self.lease.read().await
    }
}

/// One poller's way to the shared queue, which can be held (sends wait until it is let go).
struct Gate {
    queue: Arc<MemoryQueue>,
    held: AtomicBool,
    waiting: AtomicBool,
    let_go: Notify,
}

#[async_trait]
impl UpdateQueue for Gate {
    async fn enqueue(&self, message: &OutgoingMessage) -> Result<(), PortError> {
        if self.held.load(Ordering::SeqCst) {
            let let_go = self.let_go.notified();
            self.waiting.store(true, Ordering::SeqCst);
            let_go.await;
        }
        self.queue.enqueue(message).await
    }
}

struct Member {
    poller: Arc<Poller>,
    link: Arc<Link>,
    gate: Arc<Gate>,
    stop: watch::Sender<bool>,
    run: tokio::task::JoinHandle<()>,
}

struct Rig {
    telegram: Arc<Telegram>,
    lease: Arc<MemoryPollerLease>,
    store: Arc<MemoryStore>,
    queue: Arc<MemoryQueue>,
    clock: Arc<TokioClock>,
    /// The bot's send budget, as local mode's worker loops share it.
    budget: Arc<Pacer>,
    members: Vec<Member>,
}

const TIMING: LeaseTiming = LeaseTiming {
    ttl: Duration::from_secs(15),
    renew_every: Duration::from_secs(5),
    guard: Duration::from_secs(2),
    cooldown: Duration::from_secs(30),
};

fn bot() -> BotId {
    BotId::new("demo").unwrap()
}

impl Rig {
    fn new() -> Self {
        let clock = Arc::new(TokioClock {
            start: Instant::now(),
        });
        Self {
            telegram: Arc::new(Telegram::default()),
            lease: Arc::new(MemoryPollerLease::new()),
            store: Arc::new(MemoryStore::new()),
            queue: Arc::new(MemoryQueue::new(clock.clone())),
            clock,
            budget: Arc::new(Pacer::new(RateLimits::default())),
            members: Vec::new(),
        }
    }

    /// Starts one more poller.
    fn start(&mut self) {
        let index = self.members.len();
        let link = Arc::new(Link {
            lease: self.lease.clone(),
            cut: AtomicBool::new(false),
            hang: AtomicBool::new(false),
        });
        let gate = Arc::new(Gate {
            queue: self.queue.clone(),
            held: AtomicBool::new(false),
            waiting: AtomicBool::new(false),
            let_go: Notify::new(),
        });
        let webhook = Webhook::new(
            WebhookSettings {
                bot_id: bot(),
                secret: SecretString::from("unused-by-polling".to_owned()),
                max_body_bytes: 1 << 20,
                record_ttl: Duration::from_secs(3600),
                ack_callbacks: false,
            },
            WebhookPorts {
                ingest: Ingest::PutThenSend {
                    store: self.store.clone(),
                    queue: gate.clone(),
                },
                dead: Arc::new(MemoryDeadLetters::new()),
                clock: self.clock.clone(),
            },
        );
        let poller = Arc::new(Poller::new(
            PollerSettings {
                holder: HolderId::new(format!("poller-{index}")).unwrap(),
                timing: TIMING,
                poll_timeout: Duration::from_secs(25),
            },
            PollerPorts {
                api: Arc::new(PollerApi {
                    telegram: self.telegram.clone(),
                    poller: index,
                }),
                lease: link.clone(),
                clock: self.clock.clone(),
                budget: self.budget.clone(),
            },
            webhook,
        ));
        let (stop, stopped) = watch::channel(false);
        let run = {
            let poller = poller.clone();
            tokio::spawn(async move { poller.run(stopped).await.expect("polling works") })
        };
        self.members.push(Member {
            poller,
            link,
            gate,
            stop,
            run,
        });
    }

    fn role(&self, member: usize) -> Role {
        self.members[member].poller.handle().status().role
    }

    fn leader(&self) -> Option<usize> {
        (0..self.members.len()).find(|m| self.role(*m) == Role::Leader)
    }

    fn queued(&self, id: i64) -> bool {
        self.store
            .record(&RecordKey::new(bot(), UpdateId(id)))
            .is_some()
    }

    async fn lease_state(&self) -> LeaseState {
        self.lease
            .read()
            .await
            .unwrap()
            .expect("the lease is stored")
    }
}

async fn pass(time: Duration) {
    tokio::time::sleep(time).await;
}

#[tokio::test(start_paused = true)]
async fn of_three_pollers_only_the_leader_calls_get_updates_and_every_update_is_stored() {
    let mut rig = Rig::new();
    for _ in 0..3 {
        rig.start();
    }
    for round in 0..6 {
        rig.telegram.send(round * 10..round * 10 + 10);
        pass(Duration::from_secs(20)).await;
    }
    let leader = rig.leader().expect("one poller leads");
    let others: Vec<Role> = (0..3)
        .filter(|m| *m != leader)
        .map(|m| rig.role(m))
        .collect();
    assert_eq!(others, [Role::Standby, Role::Standby]);
    let polls = rig.telegram.polls();
    assert!(polls.len() > 6, "{polls:?}");
    assert!(polls.iter().all(|p| p.poller == leader), "{polls:?}");
    assert!((0..60).all(|id| rig.queued(id)));
    assert_eq!(rig.queue.sends(), 60, "each update sent once");
    assert_eq!(rig.telegram.overlapping(), 0);
    assert_eq!(rig.lease_state().await.offset, Some(60));
}

#[tokio::test(start_paused = true)]
async fn a_leader_cut_off_from_the_lease_stops_polling_before_its_lease_could_end_and_another_takes_over(
) {
    let mut rig = Rig::new();
    rig.start();
    pass(Duration::from_secs(1)).await;
    rig.start();
    pass(Duration::from_secs(3)).await;
    assert_eq!((rig.role(0), rig.role(1)), (Role::Leader, Role::Standby));
    let term_end = rig.lease_state().await.until;
    // Cut just before the first renewal: the lease ends 15 s after the last good renewal (or the
    // acquisition), and no poll of poller 0 may be alive at Telegram after that end less nothing.
    rig.members[0].link.cut.store(true, Ordering::SeqCst);
    let cut_at = rig.clock.now();
    pass(Duration::from_secs(2)).await;
    assert_eq!(
        rig.role(0),
        Role::Suspended,
        "a failed renewal suspends polling"
    );
    pass(Duration::from_secs(40)).await;
    assert_eq!(rig.role(1), Role::Leader);
    let ended_by = |poller: usize| {
        rig.telegram
            .polls()
            .iter()
            .filter(|p| p.poller == poller)
            .map(|p| p.ended.expect("ended"))
            .max()
    };
    let last_end = ended_by(0).expect("poller 0 polled");
    let last_end = Timestamp(1_000_000_000).plus(last_end - rig.clock.start);
    assert!(
        last_end.0 <= cut_at.0 + 5_000 + 100,
        "poller 0 polled until {last_end:?}, cut at {cut_at:?}: it must stop at the first failed renewal"
    );
    assert!(last_end < term_end, "{last_end:?} >= {term_end:?}");
    assert_eq!(rig.telegram.overlapping(), 0);
    rig.telegram.send([1, 2, 3]);
    pass(Duration::from_secs(1)).await;
    assert!([1, 2, 3].iter().all(|id| rig.queued(*id)));
}

#[tokio::test(start_paused = true)]
async fn an_overtaken_leader_s_checkpoint_is_refused_and_the_new_leader_resumes_from_the_last_good_one(
) {
    let mut rig = Rig::new();
    rig.start();
    pass(Duration::from_secs(1)).await;
    rig.start();
    rig.telegram.send(0..5);
    pass(Duration::from_secs(2)).await;
    assert_eq!(rig.lease_state().await.offset, Some(5));
    // Poller 0 is stuck storing its next batch and cut off from the lease: a paused process.
    rig.members[0].gate.held.store(true, Ordering::SeqCst);
    rig.telegram.send(5..8);
    pass(Duration::from_secs(1)).await;
    assert!(rig.members[0].gate.waiting.load(Ordering::SeqCst));
    rig.members[0].link.cut.store(true, Ordering::SeqCst);
    pass(Duration::from_secs(30)).await;
    assert_eq!(rig.role(1), Role::Leader);
    let first_poll_of_1 = rig
        .telegram
        .polls()
        .into_iter()
        .find(|p| p.poller == 1)
        .expect("poller 1 polled");
    assert_eq!(
        first_poll_of_1.offset,
        Some(5),
        "the new leader resumes from the checkpoint"
    );
    assert!((5..8).all(|id| rig.queued(id)));
    let successor = rig.lease_state().await;
    assert_eq!(successor.offset, Some(8));
    // Poller 0 comes back: its batch becomes durable (as duplicates), its checkpoint is refused.
    rig.members[0].link.cut.store(false, Ordering::SeqCst);
    rig.members[0].gate.held.store(false, Ordering::SeqCst);
    rig.members[0].gate.let_go.notify_waiters();
    pass(Duration::from_secs(1)).await;
    let counters = rig.members[0].poller.handle().status().counters;
    assert_eq!(counters.checkpoints_refused, 1, "{counters:?}");
    let after = rig.lease_state().await;
    assert_eq!(
        (after.offset, after.offset_token),
        (Some(8), successor.offset_token)
    );
    let polls_of_0 = rig
        .telegram
        .polls()
        .iter()
        .filter(|p| p.poller == 0)
        .count();
    pass(Duration::from_secs(60)).await;
    let polls_of_0_later = rig
        .telegram
        .polls()
        .iter()
        .filter(|p| p.poller == 0)
        .count();
    assert_eq!(
        polls_of_0, polls_of_0_later,
        "the overtaken poller polls no more"
    );
    // The update both stored was sent by both (the second send heals a first that might have
    // failed); the queue's dedup window keeps one message per update.
    assert_eq!(rig.queue.depth(), 8, "one message per update");
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_releases_the_lease_only_after_the_batch_in_flight_is_durable() {
    let mut rig = Rig::new();
    rig.start();
    rig.start();
    pass(Duration::from_secs(1)).await;
    let leader = rig.leader().expect("a leader");
    let standby = 1 - leader;
    rig.members[leader].gate.held.store(true, Ordering::SeqCst);
    rig.telegram.send(0..3);
    pass(Duration::from_secs(1)).await;
    rig.members[leader].stop.send_replace(true);
    pass(Duration::from_secs(1)).await;
    assert!(!rig.members[leader].run.is_finished());
    let state = rig.lease_state().await;
    assert_eq!(
        state.holder.map(|h| h.to_string()),
        Some(format!("poller-{leader}")),
        "the lease is held while the batch is stored"
    );
    rig.members[leader].gate.held.store(false, Ordering::SeqCst);
    rig.members[leader].gate.let_go.notify_waiters();
    pass(Duration::from_secs(1)).await;
    assert!(rig.members[leader].run.is_finished());
    assert!((0..3).all(|id| rig.queued(id)));
    let state = rig.lease_state().await;
    assert_eq!(
        state.offset,
        Some(3),
        "the batch is checkpointed before the release"
    );
    // The standby takes over at its next look, well before a TTL: the lease was released.
    pass(Duration::from_secs(6)).await;
    assert_eq!(rig.role(standby), Role::Leader);
    assert_eq!(rig.lease_state().await.takeovers, 0);
}

#[tokio::test(start_paused = true)]
async fn a_renewal_that_never_answers_stops_polling_before_the_lease_could_end() {
    let mut rig = Rig::new();
    rig.start();
    pass(Duration::from_secs(1)).await;
    rig.start();
    pass(Duration::from_secs(1)).await;
    let term_end = rig.lease_state().await.until;
    rig.members[0].link.hang.store(true, Ordering::SeqCst);
    // The renewal at 5 s hangs; the lease (acquired at 0 s) ends at 15 s.
    pass(Duration::from_secs(30)).await;
    assert_eq!(rig.role(1), Role::Leader, "the standby took over");
    assert_eq!(
        rig.role(0),
        Role::CoolingDown,
        "a poller whose lease lapsed under it cools down instead of taking it straight back"
    );
    let last_end = rig
        .telegram
        .polls()
        .iter()
        .filter(|p| p.poller == 0)
        .map(|p| p.ended.expect("ended"))
        .max()
        .expect("poller 0 polled");
    let last_end = Timestamp(1_000_000_000).plus(last_end - rig.clock.start);
    // The renewal is sent 5 s after the acquisition and late 1 s later: polling stops then, long
    // before the lease's end.
    let acquired_at = term_end.0 - TIMING.ttl.as_millis() as u64;
    let late_at = acquired_at + (TIMING.renew_every + Duration::from_secs(1)).as_millis() as u64;
    assert!(
        last_end.0 <= late_at + 100,
        "poller 0 polled until {last_end:?}; its renewal was late at {late_at} ms"
    );
    assert_eq!(rig.telegram.overlapping(), 0);
    assert!(
        rig.members[0]
            .poller
            .handle()
            .status()
            .counters
            .renewals_failed
            >= 1
    );
}

#[tokio::test(start_paused = true)]
async fn a_429_on_get_updates_holds_every_send_of_the_bot_for_its_wait() {
    let mut rig = Rig::new();
    *rig.telegram.flood.lock() = Some(Duration::from_secs(30));
    rig.start();
    pass(Duration::from_secs(1)).await;
    assert!(rig.telegram.flood.lock().is_none(), "the poller polled");
    let held = rig.budget.paused_for(&bot());
    assert!(held > Duration::from_secs(25), "{held:?}");
    // Polling goes on after the wait, and the updates sent meanwhile are stored.
    rig.telegram.send(0..5);
    pass(Duration::from_secs(40)).await;
    assert!((0..5).all(|id| rig.queued(id)));
}
