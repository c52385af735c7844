//! Telegram's side of the webhook: each update POSTed with the secret header until a 2xx answers it,
//! with a growing pause between tries, as Telegram does. Each chat's updates go one after another
//! (the next only once the previous one was acknowledged), many chats at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use tgq_core::ingest::SECRET_HEADER;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::plan::Plan;

/// Telegram's default `max_connections` for a webhook: requests in flight at once.
pub const CONNECTIONS: usize = 40;
/// Telegram waits this long for a webhook's answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);
/// The first pause before a retry; it doubles up to [`MAX_PAUSE`]. Telegram's own pauses are
/// longer (seconds, then up to a minute); the drill keeps the same shape and is quicker.
const FIRST_PAUSE: Duration = Duration::from_millis(250);
const MAX_PAUSE: Duration = Duration::from_secs(4);

/// What Telegram saw of the webhook.
#[derive(Clone, Debug, Default)]
pub struct Posted {
    /// Updates answered 2xx, by update id, with when the first 2xx came.
    pub acknowledged: BTreeMap<i64, Instant>,
    /// Every answer by HTTP status (0: no answer — refused connection or timeout).
    pub statuses: BTreeMap<u16, u64>,
    /// Poison bodies answered 2xx.
    pub poison_acknowledged: u64,
    /// Answers per status while a fault window was open (see [`Poster::mark`]).
    pub during_fault: BTreeMap<u16, u64>,
    /// Updates the poster gave up on (still refused when the scenario's patience ran out).
    pub given_up: Vec<i64>,
}

/// Posts updates to a webhook the way Telegram does.
#[derive(Clone)]
pub struct Poster {
    http: reqwest::Client,
    url: Arc<RwLock<String>>,
    secret: String,
    posted: Arc<Mutex<Posted>>,
    fault_open: Arc<std::sync::atomic::AtomicBool>,
    give_up_at: Instant,
}

impl Poster {
    /// A poster for the webhook at `url` with `secret`, giving up on every update not yet
    /// acknowledged once `patience` has passed (Telegram's is about 23 hours; a drill's, minutes).
    pub fn new(url: String, secret: &str, patience: Duration) -> Poster {
        Poster {
            http: reqwest::Client::builder()
                .timeout(ANSWER_TIMEOUT)
                .pool_max_idle_per_host(CONNECTIONS)
                .build()
                .expect("a reqwest client"),
            url: Arc::new(RwLock::new(url)),
            secret: secret.to_owned(),
            posted: Arc::default(),
            fault_open: Arc::default(),
            give_up_at: Instant::now() + patience,
        }
    }

    /// Points the poster at another URL (a restarted webhook on another port).
    pub fn retarget(&self, url: String) {
        *self.url.write().unwrap_or_else(PoisonError::into_inner) = url;
    }

    /// Opens or closes the fault window: answers meanwhile are also counted in `during_fault`.
    pub fn mark(&self, open: bool) {
        self.fault_open
            .store(open, std::sync::atomic::Ordering::SeqCst);
    }

    /// What was posted so far.
    pub fn posted(&self) -> Posted {
        self.posted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Posts every update of `plan` (each `copies` times at once) and its poison bodies, each chat
    /// in order, [`CONNECTIONS`] requests at most in flight. Returns when every update was
    /// acknowledged or given up on.
    pub async fn send(&self, plan: &Plan, copies: usize) {
        let gate = Arc::new(Semaphore::new(CONNECTIONS));
        let mut per_chat: HashMap<i64, Vec<(i64, String)>> = HashMap::new();
        for planned in &plan.updates {
            per_chat
                .entry(planned.chat)
                .or_default()
                .push((planned.update_id, planned.body()));
        }
        let mut chats = JoinSet::new();
        for (_, updates) in per_chat {
            let (poster, gate) = (self.clone(), gate.clone());
            chats.spawn(async move {
                for (update_id, body) in updates {
                    let mut copies_set = JoinSet::new();
                    for _ in 0..copies.max(1) {
                        let (poster, gate, body) = (poster.clone(), gate.clone(), body.clone());
                        copies_set.spawn(async move {
                            poster.deliver(Some(update_id), &body, &gate).await
                        });
                    }
                    while copies_set.join_next().await.is_some() {}
                }
            });
        }
        for body in plan.poison.clone() {
            let (poster, gate) = (self.clone(), gate.clone());
            chats.spawn(async move { poster.deliver(None, &body, &gate).await });
        }
        while chats.join_next().await.is_some() {}
    }

    /// Posts `plan`'s updates at a steady rate, one every `every` whatever the answers take (a
    /// chat's next update still waits for its previous one to be acknowledged, as Telegram's do),
    /// so that the time from acknowledgement to reply measures the pipeline, not a backlog.
    /// Returns when every update was acknowledged or given up on.
    pub async fn send_paced(&self, plan: &Plan, every: Duration) {
        let gate = Arc::new(Semaphore::new(CONNECTIONS));
        let mut previous: HashMap<i64, tokio::task::JoinHandle<()>> = HashMap::new();
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for planned in &plan.updates {
            ticks.tick().await;
            let before = previous.remove(&planned.chat);
            let (poster, gate, body, id) = (
                self.clone(),
                gate.clone(),
                planned.body(),
                planned.update_id,
            );
            let task = tokio::spawn(async move {
                if let Some(before) = before {
                    let _ = before.await;
                }
                poster.deliver(Some(id), &body, &gate).await;
            });
            previous.insert(planned.chat, task);
        }
        for (_, task) in previous {
            let _ = task.await;
        }
    }

    /// Posts one update the drill made up, `copies` times at once, each until a 2xx answers it or
    /// patience runs out: Telegram posting an update whose content the scenario decides.
    pub async fn post(&self, update_id: i64, body: &str, copies: usize) {
        let gate = Semaphore::new(CONNECTIONS);
        let posts = (0..copies.max(1)).map(|_| self.deliver(Some(update_id), body, &gate));
        futures::future::join_all(posts).await;
    }

    /// Posts one body until a 2xx answers it or patience runs out.
    async fn deliver(&self, update_id: Option<i64>, body: &str, gate: &Semaphore) {
        let mut pause = FIRST_PAUSE;
        loop {
            if Instant::now() > self.give_up_at {
                let mut posted = self.posted.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(id) = update_id {
                    posted.given_up.push(id);
                }
                return;
            }
            let status = {
                let _slot = gate.acquire().await.expect("the semaphore is never closed");
                let url = self
                    .url
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                let answer = self
                    .http
                    .post(url)
                    .header(SECRET_HEADER, &self.secret)
                    .header("content-type", "application/json")
                    .body(body.to_owned())
                    .send()
                    .await;
                answer.map_or(0, |a| a.status().as_u16())
            };
            let done = (200..300).contains(&status);
            {
                let mut posted = self.posted.lock().unwrap_or_else(PoisonError::into_inner);
                *posted.statuses.entry(status).or_default() += 1;
                if self.fault_open.load(std::sync::atomic::Ordering::SeqCst) {
                    *posted.during_fault.entry(status).or_default() += 1;
                }
                match (done, update_id) {
                    (true, Some(id)) => {
                        posted.acknowledged.entry(id).or_insert_with(Instant::now);
                    }
                    (true, None) => posted.poison_acknowledged += 1,
                    (false, _) => {}
                }
            }
            if done {
                return;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }
}
