//! The polling use case (docs/design/local.md, docs/design/fleet.md §1): long polling with
//! getUpdates for bots that cannot take a webhook, by one leader among any number of pollers.
//!
//! Each poller contends for the [`PollerLease`]; only the holder calls getUpdates. Every polled
//! update goes through the same [`Webhook::ingest`] as a webhook request, byte for byte as
//! Telegram sent it, and the next offset — which tells Telegram to forget a batch — is checkpointed
//! with the term's fencing token and sent only once every update of the batch is durable. A poll is
//! never asked to wait past the lease's end, a failed renewal stops polling at once, and a leader
//! that was overtaken (a paused process, a partition) finds its checkpoint refused.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::Value;
use teloxide_core::payloads::{GetUpdates, GetUpdatesSetters as _};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::budget::SendBudget;
use crate::clock::Clock;
use crate::error::{error_chain, ErrorClass};
use crate::ingest::Webhook;
use crate::leadership::{
    Acquired, HolderId, LeaseError, PollerLease, Term, COOLDOWN, LEASE_TTL, POLL_GUARD, RENEW_EVERY,
};
use crate::metrics;
use crate::record::Timestamp;
use crate::telegram::{ApiCall, BotApi, CallError, TelegramError};

mod status;

use status::{Counts, Shared, View};
pub use status::{PollerCounters, PollerHandle, PollerStatus, Role};

/// The longest a getUpdates call asks Telegram to wait for an update.
pub const POLL_TIMEOUT: Duration = Duration::from_secs(25);
/// The longest pause between failed polls.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A renewal not answered within this is late: polling stops until it answers.
const RENEWAL_LATE: Duration = Duration::from_secs(1);
/// How long a poller waits before trying the store again after it could not reach it.
const RETRY_STORE: Duration = Duration::from_secs(1);
/// Standbys wake up to this much after the lease they saw ends, so they do not all ask at once.
const STANDBY_JITTER_MS: u64 = 250;

/// What polling says when Telegram refuses getUpdates because a webhook is set.
pub(crate) const WEBHOOK_IS_SET: &str =
    "Telegram refuses getUpdates while a webhook is set for this bot. \
     Run `tgq webhook delete` to remove it, then start polling again \
     (or keep the webhook and serve it without polling).";

/// The lease's timing; [`LeaseTiming::default`] holds TTL 15 s, renewal every 5 s, a 2 s guard
/// and a 30 s cooldown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseTiming {
    /// How long an acquisition or renewal lasts.
    pub ttl: Duration,
    /// How often the leader renews.
    pub renew_every: Duration,
    /// How long before the lease's end a poll must be over at Telegram.
    pub guard: Duration,
    /// How long a poller that lost the lease waits before contending again.
    pub cooldown: Duration,
}

impl Default for LeaseTiming {
    fn default() -> Self {
        Self {
            ttl: LEASE_TTL,
            renew_every: RENEW_EVERY,
            guard: POLL_GUARD,
            cooldown: COOLDOWN,
        }
    }
}

impl LeaseTiming {
    /// Refuses timings under which a leader could not poll for at least a second between two
    /// renewals, or would renew less often than its lease lasts.
    pub fn check(&self) -> Result<(), String> {
        if self.renew_every < Duration::from_secs(1) {
            return Err("the renewal interval must be at least 1 s".into());
        }
        let needed = self.renew_every + self.guard + Duration::from_secs(2);
        if self.ttl < needed {
            return Err(format!(
                "the lease TTL ({} s) must be at least the renewal interval plus {} s",
                self.ttl.as_secs(),
                (self.guard + Duration::from_secs(2)).as_secs()
            ));
        }
        Ok(())
    }
}

/// The poller's settings.
#[derive(Clone, Debug)]
pub struct PollerSettings {
    /// This process's id among the contenders.
    pub holder: HolderId,
    /// The lease's timing.
    pub timing: LeaseTiming,
    /// The longest a getUpdates call asks Telegram to wait.
    pub poll_timeout: Duration,
}

/// The ports the poller uses.
#[derive(Clone)]
pub struct PollerPorts {
    /// getUpdates. Its calls must be allowed to take longer than the poll timeout.
    pub api: Arc<dyn BotApi>,
    /// The lease shared by every poller of the bot.
    pub lease: Arc<dyn PollerLease>,
    /// Tells the time stored in the lease.
    pub clock: Arc<dyn Clock>,
    /// The bot's send budget: a 429 Telegram answers getUpdates with binds the token, so its wait
    /// is shared with every process sending for the bot (docs/design/pacing.md).
    pub budget: Arc<dyn SendBudget>,
}

/// Why polling stopped for good.
#[derive(Debug, thiserror::Error)]
pub enum PollError {
    /// A webhook is set: Telegram refuses getUpdates.
    #[error("{WEBHOOK_IS_SET}")]
    WebhookActive,
    /// Telegram does not know the token.
    #[error("Telegram answered {code} to getUpdates: the bot token is not valid (check TELEGRAM_BOT_TOKEN and TELEGRAM_API_URL)")]
    BadToken {
        /// 401 or 404.
        code: u16,
    },
    /// Another answer retrying cannot help.
    #[error("getUpdates failed: {0}")]
    Permanent(#[source] TelegramError),
}

/// A term this poller polls under, with the local instants that bound it.
#[derive(Clone, Debug)]
struct ActiveTerm {
    term: Term,
    /// The checkpoint the term started from.
    resume_from: Option<i64>,
    /// When the lease ends by this process's monotonic clock (the renewal's send time plus TTL).
    expires: Instant,
    /// When to renew next.
    renew_at: Instant,
}

impl ActiveTerm {
    /// How long a poll started now may be held at Telegram: until the lease's end less the guard,
    /// by the monotonic clock (a paused process) and by the wall clock (a suspended machine, whose
    /// monotonic clock stood still) alike.
    fn poll_window(&self, guard: Duration, wall_now: Timestamp) -> Duration {
        let by_monotonic = self.expires.saturating_duration_since(Instant::now());
        let by_wall = self.term.until.since(wall_now);
        by_monotonic.min(by_wall).saturating_sub(guard)
    }
}

/// What one attempt to acquire the lease came to.
enum Contended {
    /// The lease is ours.
    Won(ActiveTerm),
    /// Another poller holds it, with this token.
    Held(u64),
    /// The store did not answer.
    Unreachable,
}

/// The polling use case.
pub struct Poller {
    settings: PollerSettings,
    ports: PollerPorts,
    webhook: Webhook,
    shared: Arc<Shared>,
}

impl Poller {
    /// A poller that ingests through `webhook`.
    pub fn new(settings: PollerSettings, ports: PollerPorts, webhook: Webhook) -> Self {
        let shared = Arc::new(Shared {
            holder: settings.holder.clone(),
            view: Mutex::new(View {
                role: Role::Starting,
                leader: None,
                token: None,
                lease_until: None,
                offset: None,
                store_reachable: false,
            }),
            counts: Counts::default(),
        });
        Self {
            settings,
            ports,
            webhook,
            shared,
        }
    }

    /// A handle to read the poller's status while it runs.
    pub fn handle(&self) -> PollerHandle {
        PollerHandle(self.shared.clone())
    }

    /// Contends for the lease and polls while it holds it, until `shutdown` turns `true`. Then a
    /// poll in flight is abandoned (nothing it fetched is confirmed), a batch being stored is
    /// finished and checkpointed, and only then is the lease released. Returns an error only when
    /// polling cannot work (a webhook is set, the token is refused).
    pub async fn run(&self, shutdown: watch::Receiver<bool>) -> Result<(), PollError> {
        info!(holder = %self.settings.holder, "contending for the poller lease");
        let (terms, terms_seen) = watch::channel::<Option<ActiveTerm>>(None);
        let (polling_over, polling_over_seen) = watch::channel(false);
        let keeping = self.keep_lease(&terms, polling_over_seen);
        let polling = async {
            let outcome = self.poll(terms_seen, shutdown).await;
            polling_over.send_replace(true);
            outcome
        };
        let ((), outcome) = tokio::join!(keeping, polling);
        self.set_role(Role::Stopped);
        outcome
    }

    fn set_role(&self, role: Role) {
        self.shared.view.lock().role = role;
    }

    fn reached_store(&self, reached: bool) {
        self.shared.view.lock().store_reachable = reached;
    }

    /// Acquires, renews and finally releases the lease; publishes the term polling may use.
    /// Stops once polling is over, releasing what it holds.
    async fn keep_lease(
        &self,
        terms: &watch::Sender<Option<ActiveTerm>>,
        mut polling_over: watch::Receiver<bool>,
    ) {
        let timing = self.settings.timing;
        let mut held: Option<ActiveTerm> = None;
        let mut cooling_until: Option<Instant> = None;
        // The token of a term that ended without a release: a holder of a newer one overtook it.
        let mut lost: Option<u64> = None;
        while !*polling_over.borrow() {
            let wake = match held.take() {
                Some(term) if Instant::now() < term.renew_at => {
                    let at = term.renew_at;
                    held = Some(term);
                    at
                }
                Some(term) => {
                    let token = term.term.token;
                    let (kept, overtaken, wake) = self.renew(term, terms).await;
                    if kept.is_none() {
                        lost = Some(token);
                    }
                    if overtaken {
                        cooling_until = Some(Instant::now() + timing.cooldown);
                    }
                    held = kept;
                    wake
                }
                None => match cooling_until.filter(|until| Instant::now() < *until) {
                    Some(until) => {
                        self.set_role(Role::CoolingDown);
                        self.look().await;
                        (Instant::now() + timing.renew_every).min(until)
                    }
                    None => {
                        let (outcome, wake) = self.contend(terms).await;
                        match outcome {
                            Contended::Won(term) => {
                                lost = None;
                                held = Some(term);
                            }
                            // A term of ours lapsed and a newer one holds the lease now: it was
                            // overtaken, and this poller sits the cooldown out before contending.
                            Contended::Held(token) if lost.is_some_and(|ours| token > ours) => {
                                lost = None;
                                info!(cooldown_secs = timing.cooldown.as_secs(), "a newer leader overtook this poller's lapsed lease; cooling down before contending again");
                                cooling_until = Some(Instant::now() + timing.cooldown);
                            }
                            Contended::Held(_) | Contended::Unreachable => {}
                        }
                        wake
                    }
                },
            };
            tokio::select! {
                () = tokio::time::sleep_until(wake) => {}
                _ = polling_over.wait_for(|over| *over) => {}
            }
        }
        terms.send_replace(None);
        if let Some(term) = held {
            let now = self.ports.clock.now();
            match self.ports.lease.release(&term.term, now).await {
                Ok(()) => info!(token = term.term.token, "released the poller lease"),
                Err(error) => {
                    warn!(token = term.term.token, error = %error_chain(&error), "could not release the poller lease; it lapses by itself")
                }
            }
        }
    }

    /// One attempt to acquire the lease; returns what came of it, and when to act next.
    async fn contend(&self, terms: &watch::Sender<Option<ActiveTerm>>) -> (Contended, Instant) {
        let timing = self.settings.timing;
        let sent = Instant::now();
        let now = self.ports.clock.now();
        let holder = &self.settings.holder;
        match self.ports.lease.acquire(holder, now, timing.ttl).await {
            Ok(Acquired::Won(won)) => {
                self.reached_store(true);
                let counts = &self.shared.counts;
                Counts::bump(&counts.acquisitions);
                match &won.took_over {
                    Some(took) if took.flapping => {
                        Counts::bump(&counts.takeovers);
                        Counts::bump(&counts.flapping);
                        metrics::poller(&self.webhook.settings().bot_id, metrics::POLLER_TAKEOVERS);
                        metrics::poller(&self.webhook.settings().bot_id, metrics::POLLER_FLAPPING);
                        warn!(alert = "poller_flapping", token = won.term.token, from = %took.from, from_token = took.from_token, "took over the poller lease less than a minute after the previous takeover: leadership is flapping (check the pollers' way to the store and to Telegram)");
                    }
                    Some(took) => {
                        Counts::bump(&counts.takeovers);
                        metrics::poller(&self.webhook.settings().bot_id, metrics::POLLER_TAKEOVERS);
                        warn!(token = won.term.token, from = %took.from, from_token = took.from_token, offset = ?won.offset, "took over the poller lease: the previous leader's lease lapsed");
                    }
                    None => {
                        info!(token = won.term.token, offset = ?won.offset, "acquired the poller lease")
                    }
                }
                let term = ActiveTerm {
                    resume_from: won.offset,
                    term: won.term,
                    expires: sent + timing.ttl,
                    renew_at: sent + timing.renew_every,
                };
                self.lead(&term);
                terms.send_replace(Some(term.clone()));
                let wake = term.renew_at;
                (Contended::Won(term), wake)
            }
            Ok(Acquired::Held(holding)) => {
                self.reached_store(true);
                let changed = {
                    let mut view = self.shared.view.lock();
                    let changed =
                        view.leader.as_ref() != Some(&holding.holder) || view.role != Role::Standby;
                    view.role = Role::Standby;
                    view.leader = Some(holding.holder.clone());
                    view.token = Some(holding.token);
                    view.lease_until = Some(holding.until);
                    changed
                };
                if changed {
                    info!(leader = %holding.holder, token = holding.token, "standing by: another poller holds the lease");
                }
                let left = holding.until.since(self.ports.clock.now());
                let jitter = Duration::from_millis(rand::random_range(0..=STANDBY_JITTER_MS));
                let wake = Instant::now() + (left + jitter).min(timing.renew_every);
                (Contended::Held(holding.token), wake)
            }
            Err(error) => {
                self.reached_store(false);
                self.set_role(Role::Standby);
                warn!(error = %error_chain(&error), "cannot reach the poller lease; trying again");
                (Contended::Unreachable, Instant::now() + RETRY_STORE)
            }
        }
    }

    /// Reads the lease while cooling down, so that status and readiness stay current.
    async fn look(&self) {
        match self.ports.lease.read().await {
            Ok(state) => {
                let mut view = self.shared.view.lock();
                view.store_reachable = true;
                let held = state.and_then(|s| s.held_at(self.ports.clock.now()));
                view.leader = held.as_ref().map(|h| h.holder.clone());
                view.token = held.as_ref().map(|h| h.token);
                view.lease_until = held.map(|h| h.until);
            }
            Err(_) => self.reached_store(false),
        }
    }

    fn lead(&self, term: &ActiveTerm) {
        let mut view = self.shared.view.lock();
        view.role = Role::Leader;
        view.leader = Some(term.term.holder.clone());
        view.token = Some(term.term.token);
        view.lease_until = Some(term.term.until);
    }

    /// Renews a held term. A refusal ends the term at once; a failure, or an answer later than
    /// [`RENEWAL_LATE`], stops polling at once, and the renewal is retried until the term's end,
    /// after which the lease counts as lost. Returns the term still held, if any, whether a newer
    /// leader overtook it (then this poller cools down before contending again), and when to act
    /// next.
    async fn renew(
        &self,
        mut term: ActiveTerm,
        terms: &watch::Sender<Option<ActiveTerm>>,
    ) -> (Option<ActiveTerm>, bool, Instant) {
        let timing = self.settings.timing;
        let sent = Instant::now();
        let now = self.ports.clock.now();
        let presented = term.term.clone();
        let renewal = self.ports.lease.renew(&presented, now, timing.ttl);
        tokio::pin!(renewal);
        let counts = &self.shared.counts;
        let late_at = (sent + RENEWAL_LATE).min(term.expires);
        let answer = match tokio::time::timeout_at(late_at, &mut renewal).await {
            Ok(answer) => Ok(answer),
            Err(_) => {
                // A late renewal stops polling at once; its answer is awaited until the lease's end.
                terms.send_replace(None);
                self.set_role(Role::Suspended);
                warn!(
                    token = term.term.token,
                    "renewing the poller lease is late; stopped polling until it answers"
                );
                tokio::time::timeout_at(term.expires, &mut renewal).await
            }
        };
        let error = match answer {
            Ok(Ok(renewed)) => {
                self.reached_store(true);
                let resumed = self.shared.view.lock().role == Role::Suspended;
                term.term = renewed;
                term.expires = sent + timing.ttl;
                term.renew_at = sent + timing.renew_every;
                self.lead(&term);
                if resumed {
                    info!(
                        token = term.term.token,
                        "renewed the poller lease; polling again"
                    );
                }
                terms.send_replace(Some(term.clone()));
                let wake = term.renew_at;
                return (Some(term), false, wake);
            }
            Ok(Err(LeaseError::Lost { token, current })) => {
                self.reached_store(true);
                terms.send_replace(None);
                Counts::bump(&counts.leadership_lost);
                self.set_role(Role::CoolingDown);
                warn!(token, current = ?current, cooldown_secs = timing.cooldown.as_secs(), "lost the poller lease: another poller holds a newer token; stopped polling");
                return (None, true, Instant::now());
            }
            Ok(Err(LeaseError::Store(error))) => error_chain(&error),
            Err(_) => "no answer before the lease's end".to_owned(),
        };
        // Polling stops at once: the lease may lapse before a renewal gets through.
        terms.send_replace(None);
        self.reached_store(false);
        Counts::bump(&counts.renewals_failed);
        metrics::poller(
            &self.webhook.settings().bot_id,
            metrics::POLLER_RENEWALS_FAILED,
        );
        if Instant::now() >= term.expires {
            Counts::bump(&counts.leadership_lost);
            self.set_role(Role::Standby);
            warn!(token = term.term.token, error = %error, "the poller lease lapsed before a renewal got through; stopped polling");
            // This poller's way to the store failed it: it waits one renewal interval before
            // contending, so that a standby (which wakes at the lease's end) leads if it can; once
            // another holds the lease, this poller cools down (see `keep_lease`).
            return (None, false, Instant::now() + timing.renew_every);
        }
        self.set_role(Role::Suspended);
        warn!(token = term.term.token, error = %error, "renewing the poller lease failed; stopped polling until a renewal succeeds");
        let retry = (Instant::now() + RETRY_STORE).min(term.expires);
        term.renew_at = retry;
        (Some(term), false, retry)
    }

    /// Polls while a term allows it, until shutdown.
    async fn poll(
        &self,
        mut terms: watch::Receiver<Option<ActiveTerm>>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<(), PollError> {
        let guard = self.settings.timing.guard;
        let mut offset: Option<i64> = None;
        let mut offset_token: Option<u64> = None;
        // A term whose checkpoint was refused: never polled under again.
        let mut overtaken: Option<u64> = None;
        let mut failures: u32 = 0;
        loop {
            if *shutdown.borrow() {
                return Ok(());
            }
            let current = terms
                .borrow_and_update()
                .clone()
                .filter(|t| Some(t.term.token) != overtaken);
            let Some(term) = current else {
                tokio::select! {
                    changed = terms.changed() => if changed.is_err() { return Ok(()) },
                    _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
                }
                continue;
            };
            let token = term.term.token;
            if offset_token != Some(token) {
                offset = term.resume_from;
                offset_token = Some(token);
                self.shared.view.lock().offset = offset;
                info!(token, offset = ?offset, "polling getUpdates as the leader");
            }
            let window = term.poll_window(guard, self.ports.clock.now());
            let timeout = window.min(self.settings.poll_timeout).as_secs();
            if timeout == 0 {
                // Too little of the term is left for a poll to end inside it: wait for a renewal.
                tokio::select! {
                    changed = terms.changed() => if changed.is_err() { return Ok(()) },
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                    _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
                }
                continue;
            }
            let stop_at = term.expires.checked_sub(guard).unwrap_or(term.expires);
            let answer = tokio::select! {
                biased;
                // Nothing is lost by abandoning a poll: the offset of unconfirmed updates is not sent.
                _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
                _ = terms.wait_for(|t| t.as_ref().map(|t| t.term.token) != Some(token)) => {
                    info!(token, "stopped polling: the lease is no longer held");
                    continue;
                }
                () = tokio::time::sleep_until(stop_at) => {
                    warn!(token, "stopped a poll at the lease's end: no renewal came in time");
                    continue;
                }
                answer = self.get_updates(offset, timeout) => answer,
            };
            Counts::bump(&self.shared.counts.polls);
            let pause = match answer {
                Ok(Value::Array(updates)) => {
                    // The batch is finished whatever happens meanwhile — a shutdown, a lost lease —
                    // so that nothing is half confirmed: each update becomes durable or is polled
                    // again.
                    match ingest_batch(&self.webhook, &updates).await {
                        Ok(next) => {
                            failures = 0;
                            let count = updates.len() as u64;
                            self.shared
                                .counts
                                .updates
                                .fetch_add(count, Ordering::Relaxed);
                            if let Some(next) = next {
                                if !self.checkpoint(&term.term, next).await {
                                    overtaken = Some(token);
                                }
                                offset = Some(next);
                                self.shared.view.lock().offset = offset;
                            }
                            continue;
                        }
                        Err(error) => {
                            // The offset stays: Telegram sends the batch again, and the updates
                            // already stored are acknowledged as duplicates.
                            warn!(error = %error, "an update of the batch could not be made durable; polling the batch again");
                            backoff(failures)
                        }
                    }
                }
                Ok(_) => {
                    warn!("getUpdates answered something other than a list of updates");
                    backoff(failures)
                }
                Err(error) => {
                    if let ErrorClass::RateLimited(wait) = error.class() {
                        let bot = &self.webhook.settings().bot_id;
                        if let Err(e) = self.ports.budget.pause(bot, wait).await {
                            warn!(error = %error_chain(&e), "the flood wait could not be shared with the bot's senders");
                        }
                    }
                    self.failed_poll(error, failures)?
                }
            };
            failures = failures.saturating_add(1);
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
            }
        }
    }

    /// Stores the checkpoint; `false` when a newer leader holds the lease.
    async fn checkpoint(&self, term: &Term, offset: i64) -> bool {
        match self.ports.lease.checkpoint(term, offset).await {
            Ok(()) => true,
            Err(LeaseError::Lost { token, current }) => {
                Counts::bump(&self.shared.counts.checkpoints_refused);
                metrics::poller(
                    &self.webhook.settings().bot_id,
                    metrics::POLLER_CHECKPOINTS_REFUSED,
                );
                warn!(token, current = ?current, offset, "checkpoint refused: a newer leader holds the poller lease; this poller stops polling");
                false
            }
            Err(LeaseError::Store(error)) => {
                // The batch is durable; the next poll tells Telegram. A successor resumes from an
                // older checkpoint at worst, and Telegram answers it from where it really is.
                warn!(offset, error = %error_chain(&error), "could not store the offset checkpoint");
                true
            }
        }
    }

    /// What a failed getUpdates means: a pause before the next, or the end of polling.
    fn failed_poll(&self, error: TelegramError, failures: u32) -> Result<Duration, PollError> {
        match error {
            TelegramError::Api {
                code: 409,
                description,
            } => match Conflict::of(&description) {
                Conflict::WebhookActive => Err(PollError::WebhookActive),
                Conflict::OtherPoller => {
                    // Something outside this lease polls the bot: Telegram ends one of the two
                    // polls. This one backs off and keeps serving; the conflict is named.
                    warn!(conflict = %description, "another getUpdates poller is running for this bot outside tgq's lease; backing off");
                    Ok(backoff(failures))
                }
            },
            TelegramError::Api {
                code: code @ (401 | 404),
                ..
            } => Err(PollError::BadToken { code }),
            error => match error.class() {
                ErrorClass::RateLimited(wait) => Ok(wait),
                ErrorClass::Transient => {
                    warn!(error = %error, "getUpdates failed; retrying");
                    Ok(backoff(failures))
                }
                ErrorClass::Permanent => Err(PollError::Permanent(error)),
            },
        }
    }

    /// One getUpdates call that Telegram holds for at most `timeout_secs`.
    async fn get_updates(
        &self,
        offset: Option<i64>,
        timeout_secs: u64,
    ) -> Result<Value, TelegramError> {
        let timeout = u32::try_from(timeout_secs).unwrap_or(u32::MAX);
        let mut payload = GetUpdates::new().timeout(timeout);
        if let Some(offset) = offset.and_then(|o| i32::try_from(o).ok()) {
            payload = payload.offset(offset);
        }
        let params = serde_json::to_value(&payload)
            .map_err(|e| TelegramError::Network(format!("getUpdates parameters: {e}")))?;
        let call = ApiCall::plain("getUpdates", &params);
        self.ports.api.call(&call).await.map_err(|e| match e {
            CallError::Telegram(e) => e,
            CallError::Store(e) => TelegramError::Network(error_chain(&e)),
        })
    }
}

/// What a 409 from getUpdates means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Conflict {
    /// "Conflict: can't use getUpdates method while webhook is active": polling cannot work.
    WebhookActive,
    /// "Conflict: terminated by other getUpdates request": a second poller; it may go away.
    OtherPoller,
}

impl Conflict {
    fn of(description: &str) -> Self {
        if description.to_ascii_lowercase().contains("webhook") {
            Conflict::WebhookActive
        } else {
            Conflict::OtherPoller
        }
    }
}

/// Stores and enqueues every update of a batch, in order; returns the offset that confirms them.
async fn ingest_batch(webhook: &Webhook, updates: &[Value]) -> Result<Option<i64>, String> {
    let mut last: Option<i64> = None;
    for update in updates {
        // The bytes stored are the update as Telegram sent it (re-serialized from its JSON value).
        let body = serde_json::to_vec(update).map_err(|e| e.to_string())?;
        webhook
            .ingest(Bytes::from(body))
            .await
            .map_err(|refused| error_chain(&refused))?;
        if let Some(id) = update.get("update_id").and_then(Value::as_i64) {
            last = Some(last.map_or(id, |seen| seen.max(id)));
        }
    }
    Ok(last.map(|id| id + 1))
}

/// 1 s, 2 s, 4 s, … up to [`MAX_BACKOFF`].
fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.min(5)).min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_409_is_told_apart_by_its_description() {
        assert_eq!(
            Conflict::of("Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first"),
            Conflict::WebhookActive
        );
        assert_eq!(
            Conflict::of("Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"),
            Conflict::OtherPoller
        );
    }

    #[test]
    fn failed_polls_back_off_exponentially_up_to_thirty_seconds() {
        assert_eq!(backoff(0), Duration::from_secs(1));
        assert_eq!(backoff(3), Duration::from_secs(8));
        assert_eq!(backoff(40), MAX_BACKOFF);
    }

    #[test]
    fn the_default_timing_leaves_polls_of_several_seconds_and_short_ttls_are_refused() {
        assert_eq!(LeaseTiming::default().check(), Ok(()));
        let short = LeaseTiming {
            ttl: Duration::from_secs(6),
            ..LeaseTiming::default()
        };
        assert!(short.check().is_err());
    }

    #[test]
    fn a_poll_never_outlasts_the_lease_by_either_clock() {
        let now = Timestamp(10_000_000);
        let term = ActiveTerm {
            term: Term {
                holder: HolderId::new("a").unwrap(),
                token: 1,
                until: now.plus(Duration::from_secs(15)),
            },
            resume_from: None,
            expires: Instant::now() + Duration::from_secs(15),
            renew_at: Instant::now() + Duration::from_secs(5),
        };
        let guard = Duration::from_secs(2);
        assert!(term.poll_window(guard, now) <= Duration::from_secs(13));
        // The machine slept for 14 s: the monotonic clock did not move, the wall clock did.
        let woke = now.plus(Duration::from_secs(14));
        assert_eq!(term.poll_window(guard, woke), Duration::ZERO);
    }
}
