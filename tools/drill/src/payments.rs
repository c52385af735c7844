//! Scenario 21, `payments`, on either target (`run_local/payments.rs` and
//! `run_emulator/payments.rs` say how each crashes and reads its ledger): users pay the echo bot
//! in Stars, and the fake Bot API is Telegram's payments (it charges a user only for an `ok`
//! answered within 10 s of the query, and lists its charges in `getStarTransactions`). The drill
//! posts to the webhook what Telegram would: each user's `pre_checkout_query`, then the
//! `successful_payment` of the charge the fake made, twice at once. Meanwhile Telegram answers the
//! whole bot 429 three times, a few users' chats hold a message Telegram keeps failing, and the
//! worker is killed three times while a credited payment's reply is on the wire. Once everything
//! is answered and the update records have expired, every payment is posted again, as a replay.
//!
//! Counted at the fake: each pre-checkout answered once inside Telegram's 10 s (latency from the
//! webhook's 200 to the answer's arrival), each charge credited once (the balance every reply
//! states), each replay answered "already credited", the ledger agreeing with Telegram.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::{json, Value};
use tgq_core::defaults::DEDUP_WINDOW;
use tgq_fake_telegram::{
    Charge, FakeTelegram, Fault, RecordedCall, Scope, Times, PRE_CHECKOUT_DEADLINE,
};
use tokio::task::JoinSet;

use crate::poster::{Posted, Poster};
use crate::scenario::Scenario;
use crate::scenarios::first_id;
use crate::tally::{echo_update_id, Check, Row};
use crate::SECRET;

/// The users who pay, each in their private chat (the chat's id is the user's).
const USERS: usize = 40;
const FIRST_USER: i64 = 2_100_000_001;
/// Every fourth user pays a second time for the same invoice: two charges, two credits.
const TWICE_EVERY: usize = 4;
/// The echo bot's invoice payload, the one pre-checkout it answers itself.
const PAYLOAD: &str = "echo";
/// Users start this far apart.
const STAGGER: Duration = Duration::from_millis(400);
/// Users whose chat holds a message Telegram fails [`HOLD_FAILURES`] times before it pays.
const HELD: [usize; 5] = [1, 5, 9, 13, 17];
const HOLD_FAILURES: u32 = 3;
/// Before these users' checkouts (6 s apart), Telegram answers the next [`STORM_CALLS`] calls of
/// the whole bot 429 `retry_after` [`STORM_RETRY_AFTER`]: as the bot waits out each before its next
/// call, each storm holds every call of the bot for 4 s.
const STORMS_BEFORE: [usize; 3] = [5, 20, 35];
const STORM_CALLS: u32 = 2;
const STORM_RETRY_AFTER: u32 = 2;
/// The worker is killed while the reply crediting these users' first payment is on the wire:
/// the fake takes the call and holds its answer for [`REPLY_HELD`].
const KILLED: [usize; 3] = [10, 22, 34];
const REPLY_HELD: Duration = Duration::from_secs(6);
/// The update records' time to live, longer than any update of the scenario waits in the queue.
/// The replay comes once it is over and the queue's deduplication window has passed too.
const RECORD_TTL: Duration = Duration::from_secs(120);
/// How long each wait may take before the run fails.
const PATIENCE: Duration = Duration::from_secs(180);

/// One payment as the drill posted it.
#[derive(Clone, Debug)]
struct Paid {
    user: i64,
    query: String,
    /// The `pre_checkout_query` update's id.
    checkout_update: i64,
    /// The charge the fake made, when it made one.
    charge: Option<String>,
    stars: u32,
    /// The `successful_payment` update: its id and body.
    update_id: i64,
    body: String,
}

/// What one user's flow shares with the others.
#[derive(Clone)]
struct Shared {
    fake: FakeTelegram,
    poster: Poster,
    ids: Arc<AtomicI64>,
}

impl Shared {
    fn next_id(&self) -> i64 {
        self.ids.fetch_add(1, Ordering::SeqCst)
    }
}

fn user(index: usize) -> i64 {
    FIRST_USER + index as i64
}

fn from(user: i64) -> Value {
    json!({"id": user, "is_bot": false, "first_name": "Payer"})
}

fn message(update_id: i64, user: i64, field: &str, value: Value) -> String {
    json!({
        "update_id": update_id,
        "message": {
            "message_id": update_id, "date": 1_700_000_000,
            "chat": {"id": user, "type": "private", "first_name": "Payer"},
            "from": from(user),
            field: value,
        }
    })
    .to_string()
}

/// The charges the fake made for `user`, in order.
fn charges_of(fake: &FakeTelegram, user: i64) -> Vec<String> {
    fake.charges()
        .into_iter()
        .filter(|charge| charge.user == user)
        .map(|charge| charge.id)
        .collect()
}

/// User `index` pays once, or twice, after `delay`: checkout, the fake's charge, the payment
/// posted twice.
async fn pay(shared: Shared, index: usize, delay: Duration) -> Vec<Paid> {
    let user = user(index);
    tokio::time::sleep(delay).await;
    if HELD.contains(&index) {
        let fault = Fault::ServerError(500);
        shared
            .fake
            .inject(fault, Scope::Chat(user), Times::N(HOLD_FAILURES));
        let id = shared.next_id();
        let body = message(id, user, "text", json!(format!("held {index}")));
        shared.poster.post(id, &body, 1).await;
    }
    let times = if index.is_multiple_of(TWICE_EVERY) {
        2
    } else {
        1
    };
    let mut paid = Vec::new();
    for n in 0..times {
        if n == 0 && STORMS_BEFORE.contains(&index) {
            let storm = Fault::RetryAfter(STORM_RETRY_AFTER);
            shared
                .fake
                .inject(storm, Scope::Global, Times::N(STORM_CALLS));
        }
        let stars = 1 + (index % 5) as u32 + n as u32;
        let query = shared.fake.checkout(user, PAYLOAD, stars);
        let checkout_update = shared.next_id();
        let update = json!({
            "update_id": checkout_update,
            "pre_checkout_query": {
                "id": query, "from": from(user), "currency": "XTR",
                "total_amount": stars, "invoice_payload": PAYLOAD,
            }
        });
        shared
            .poster
            .post(checkout_update, &update.to_string(), 1)
            .await;
        // Telegram charges the user once the bot's `ok` arrives inside the 10 s.
        let asked = Instant::now();
        let charge = loop {
            if let Some(charge) = charges_of(&shared.fake, user).get(n) {
                break Some(charge.clone());
            }
            if asked.elapsed() > PRE_CHECKOUT_DEADLINE + Duration::from_secs(2) {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let update_id = shared.next_id();
        let body = charge.as_ref().map_or_else(String::new, |charge| {
            let payment = json!({
                "currency": "XTR", "total_amount": stars, "invoice_payload": PAYLOAD,
                "telegram_payment_charge_id": charge, "provider_payment_charge_id": "",
            });
            message(update_id, user, "successful_payment", payment)
        });
        if charge.is_some() {
            if n == 0 && KILLED.contains(&index) {
                let hold = Fault::Timeout(REPLY_HELD);
                shared.fake.inject(hold, Scope::Chat(user), Times::Once);
            }
            // Delivered twice at once, as a webhook retry racing the first delivery.
            shared.poster.post(update_id, &body, 2).await;
        }
        paid.push(Paid {
            user,
            query,
            checkout_update,
            charge,
            stars,
            update_id,
            body,
        });
    }
    paid
}

/// A credit's reply: `echo U: credited X S, balance B` or `echo U: already credited X, balance B`.
#[derive(Debug, PartialEq, Eq)]
struct Said {
    update_id: i64,
    charge: String,
    new: bool,
    balance: u64,
}

fn said(call: &RecordedCall) -> Option<Said> {
    if call.method != "sendMessage" || !call.is_delivered() {
        return None;
    }
    let text = call.params["text"].as_str()?;
    let (head, rest) = text.strip_prefix("echo ")?.split_once(": ")?;
    let (what, balance) = rest.rsplit_once(", balance ")?;
    let (new, charge) = match what.strip_prefix("already credited ") {
        Some(charge) => (false, charge.to_owned()),
        None => (
            true,
            what.strip_prefix("credited ")?
                .split(' ')
                .next()?
                .to_owned(),
        ),
    };
    Some(Said {
        update_id: head.parse().ok()?,
        charge,
        new,
        balance: balance.parse().ok()?,
    })
}

/// Waits until `done`, for at most [`PATIENCE`].
async fn until(what: &str, mut done: impl AsyncFnMut() -> bool) -> anyhow::Result<()> {
    let started = Instant::now();
    while !done().await {
        if started.elapsed() > PATIENCE {
            bail!("not within {PATIENCE:?}: {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// The `q`-quantile of `sorted`, in milliseconds.
fn quantile(sorted: &[Duration], q: f64) -> u128 {
    let Some(last) = sorted.len().checked_sub(1) else {
        return 0;
    };
    sorted[((last as f64) * q).ceil() as usize].as_millis()
}

/// A target the scenario runs on: where Telegram posts, how its worker dies, and what it holds.
pub(crate) trait PaymentsTarget {
    /// `local` or `emulator`.
    const TARGET: &'static str;
    /// Whether the worker may be killed while other users pay. `tgq local` starts again in a
    /// second; a Lambda container's batch comes back only after its visibility timeout, past
    /// Telegram's 10 s, so on the emulator the kills come once the other users are done.
    const KILLS_AMID_TRAFFIC: bool;

    /// The webhook's URL.
    fn webhook_url(&self) -> String;

    /// Kills the worker (every process running updates) and starts it again.
    async fn crash(&mut self) -> anyhow::Result<()>;

    /// Whether nothing is queued or in flight.
    async fn drained(&self) -> bool;

    /// The ledger's entries, as `tgq payments list --json` prints them.
    async fn ledger(&self) -> anyhow::Result<Vec<Value>>;

    /// `tgq payments reconcile` against `fake`: its exit code (0 agreeing, 3 differing) and report.
    async fn reconcile(&self, fake: &FakeTelegram) -> anyhow::Result<(i32, String)>;

    /// How many dead letters it holds. The traffic is over: the emulator stops its event source
    /// mapping first.
    async fn dead_letters(&mut self) -> anyhow::Result<usize>;

    /// Stops it.
    async fn stop(self);
}

/// The update records' time to live, as both targets are given it.
pub(crate) fn record_ttl_env() -> (&'static str, String) {
    ("TGQ_RECORD_TTL_SECS", RECORD_TTL.as_secs().to_string())
}

async fn drained(target: &impl PaymentsTarget) -> anyhow::Result<()> {
    until("the queue drained", async || target.drained().await).await
}

/// Runs the scenario on `target`, paying at `fake`.
pub(crate) async fn run<T: PaymentsTarget>(
    s: &Scenario,
    mut target: T,
    fake: FakeTelegram,
) -> anyhow::Result<Row> {
    let poster = Poster::new(target.webhook_url(), SECRET, Duration::from_secs(300));
    let shared = Shared {
        fake: fake.clone(),
        poster: poster.clone(),
        ids: Arc::new(AtomicI64::new(first_id(s) + 1)),
    };
    let started = Instant::now();
    let mut users = JoinSet::new();
    for index in (0..USERS).filter(|i| T::KILLS_AMID_TRAFFIC || !KILLED.contains(i)) {
        users.spawn(pay(shared.clone(), index, STAGGER * index as u32));
    }
    let mut paid = Vec::new();
    if !T::KILLS_AMID_TRAFFIC {
        while let Some(flow) = users.join_next().await {
            paid.extend(flow?);
        }
    }

    // Each kill lands once the credit's reply reached the fake, while its answer is held back.
    // Where the kills wait for the other users, each of these users starts paying only once the
    // queue has drained after the kill before: until the killed invocations' messages come back
    // and are processed, the mapping's invocations wait on the dead containers, and a
    // pre-checkout queued meanwhile would outlive its 10 s.
    let mut kills = Vec::new();
    for index in KILLED {
        if !T::KILLS_AMID_TRAFFIC {
            drained(&target).await?;
            users.spawn(pay(shared.clone(), index, Duration::ZERO));
        }
        let chat = user(index);
        let reply = || {
            fake.delivered_to(chat).into_iter().find(|call| {
                call.params["text"]
                    .as_str()
                    .is_some_and(|t| t.contains(" credited "))
            })
        };
        until("a credit's reply on the wire", async || reply().is_some()).await?;
        let after = reply().map_or(Duration::MAX, |call| call.at.elapsed());
        target.crash().await?;
        kills.push((chat, after));
    }
    while let Some(flow) = users.join_next().await {
        paid.extend(flow?);
    }
    paid.sort_by_key(|p| p.update_id);
    drained(&target).await?;
    let drain = started.elapsed();

    // The replay: every payment again, once its update's record and the queue's memory of its
    // deduplication id are gone.
    let last = poster.posted().acknowledged.values().max().copied();
    let forgotten = RECORD_TTL.max(DEDUP_WINDOW) + Duration::from_secs(10);
    let wait_until = last.unwrap_or_else(Instant::now) + forgotten;
    tokio::time::sleep_until(wait_until.into()).await;
    let before_replay = fake.calls().last().map_or(0, |c| c.seq);
    let replayer = Poster::new(target.webhook_url(), SECRET, PATIENCE);
    let mut replays = JoinSet::new();
    for p in paid.iter().filter(|p| p.charge.is_some()) {
        let (poster, id, body) = (replayer.clone(), p.update_id, p.body.clone());
        replays.spawn(async move { poster.post(id, &body, 1).await });
    }
    while replays.join_next().await.is_some() {}
    drained(&target).await?;

    let seen = Observed {
        ledger: target.ledger().await.map_err(|e| format!("{e:#}")),
        reconciled: target.reconcile(&fake).await?,
        letters: target.dead_letters().await?,
        calls: fake.calls(),
        charges: fake.charges(),
        posted: poster.posted(),
        replayed: replayer.posted(),
        before_replay,
        kills,
        paid,
    };
    let violations = fake.violations();
    target.stop().await;
    fake.clone().shutdown().await;

    let credits = seen.credits();
    let over = violations.early_sends + violations.over_limit;
    let checks = vec![
        seen.pre_checkouts(),
        credits.check(&seen),
        seen.replays(&credits),
        seen.ledger(),
        seen.held(),
        seen.kills(),
        Check::new(
            "0 sends over the limits or inside a wait",
            over == 0,
            format!(
                "{} inside a wait, {} over the limits",
                violations.early_sends, violations.over_limit
            ),
        ),
    ];
    let mut row = Row::uncounted(s.number, s.name, T::TARGET, checks);
    let posts = [&seen.posted, &seen.replayed];
    let acknowledged: usize = posts.iter().map(|p| p.acknowledged.len()).sum();
    let given_up: usize = posts.iter().map(|p| p.given_up.len()).sum();
    row.sent = (acknowledged + given_up) as u64;
    row.acknowledged = acknowledged as u64;
    // A charge counts once when no reply says it was credited twice; a credit's reply sent again
    // after a kill (its answer never came back) is an uncertain send, with the same balance.
    row.processed_once = credits
        .times
        .keys()
        .filter(|c| !credits.wrong.contains_key(*c))
        .count() as u64;
    row.processed_twice = credits.wrong.len() as u64;
    row.uncertain_sends = credits.times.values().filter(|n| **n > 1).count() as u64;
    row.dead_unexpected = seen.letters as u64;
    row.telegram_limit_violations = over;
    row.drain_secs = drain.as_secs_f64();
    Ok(row)
}

/// What the scenario saw, counted once the target stopped.
struct Observed {
    paid: Vec<Paid>,
    calls: Vec<RecordedCall>,
    /// The charges the fake made.
    charges: Vec<Charge>,
    posted: Posted,
    replayed: Posted,
    /// The fake's last call before the replay.
    before_replay: u64,
    /// The ledger's entries, or why they could not be read.
    ledger: Result<Vec<Value>, String>,
    /// `tgq payments reconcile --json`: its exit code and output.
    reconciled: (i32, String),
    letters: usize,
    /// Each kill's chat, and how long after its credit's reply reached the fake it landed.
    kills: Vec<(i64, Duration)>,
}

/// The credits' replies, read against one credit per charge.
struct Credits {
    /// How many `credited` replies each charge got.
    times: BTreeMap<String, u32>,
    /// The replies whose balance one credit per charge cannot explain, by charge.
    wrong: BTreeMap<String, Vec<Said>>,
    /// Each user's balance once every charge is credited.
    totals: BTreeMap<i64, u64>,
    /// The updates whose replay was answered "already credited".
    replayed: BTreeSet<i64>,
}

impl Observed {
    /// Each pre-checkout: one answer Telegram took, inside 10 s of the webhook's 200.
    fn pre_checkouts(&self) -> Check {
        let mut latencies = Vec::new();
        let mut unanswered = Vec::new();
        let mut refusals = Vec::new();
        for p in &self.paid {
            let about = |c: &&RecordedCall| c.params["pre_checkout_query_id"] == p.query.as_str();
            let taken: Vec<&RecordedCall> = self
                .calls
                .iter()
                .filter(about)
                .filter(|c| c.method == "answerPreCheckoutQuery" && c.is_delivered())
                .collect();
            let acked = self.posted.acknowledged.get(&p.checkout_update);
            match (taken.as_slice(), acked) {
                ([answer], Some(acked)) => {
                    latencies.push(answer.at.saturating_duration_since(*acked));
                    if answer.params["ok"] == false {
                        refusals.push(p.query.clone());
                    }
                }
                _ => {
                    let tried: Vec<String> = self
                        .calls
                        .iter()
                        .filter(about)
                        .map(|c| {
                            let after = acked.map(|a| c.at.saturating_duration_since(*a));
                            format!("{} ok={} after {after:?}", c.status, c.params["ok"])
                        })
                        .collect();
                    unanswered.push(format!("{}: {tried:?}", p.query));
                }
            }
        }
        latencies.sort();
        let refused = self
            .calls
            .iter()
            .filter(|c| c.method == "answerPreCheckoutQuery" && c.status == 429)
            .count();
        let within = latencies.iter().all(|l| *l < PRE_CHECKOUT_DEADLINE);
        Check::new(
            "every pre-checkout answered ok once by the bot, inside 10 s of the webhook's 200",
            unanswered.is_empty() && refusals.is_empty() && within && !self.paid.is_empty(),
            format!(
                "{} of {} answered (unanswered: {unanswered:?}), {} of them tgq's refusal {refusals:?}; from the 200 to the answer p50 {} ms, p99 {} ms, max {} ms; {refused} answers refused 429 and sent again",
                latencies.len(),
                self.paid.len(),
                refusals.len(),
                quantile(&latencies, 0.5),
                quantile(&latencies, 0.99),
                quantile(&latencies, 1.0),
            ),
        )
    }

    /// Reads every credit's reply: a `credited` reply before the replay must state the balance of
    /// the user's charges up to its own, an `already credited` one in the replay the whole.
    fn credits(&self) -> Credits {
        let mut upto: BTreeMap<&str, u64> = BTreeMap::new();
        let mut totals: BTreeMap<i64, u64> = BTreeMap::new();
        let mut owner: BTreeMap<&str, i64> = BTreeMap::new();
        for p in &self.paid {
            let total = totals.entry(p.user).or_default();
            *total += u64::from(p.stars);
            if let Some(charge) = &p.charge {
                upto.insert(charge, *total);
                owner.insert(charge, p.user);
            }
        }
        let mut credits = Credits {
            times: BTreeMap::new(),
            wrong: BTreeMap::new(),
            totals: BTreeMap::new(),
            replayed: BTreeSet::new(),
        };
        for call in &self.calls {
            let Some(reply) = said(call) else {
                continue;
            };
            let in_replay = call.seq > self.before_replay;
            let right = match (reply.new, in_replay) {
                (true, false) => upto.get(reply.charge.as_str()).copied(),
                (false, true) => owner.get(reply.charge.as_str()).map(|u| totals[u]),
                _ => None,
            };
            if reply.new {
                *credits.times.entry(reply.charge.clone()).or_default() += 1;
            }
            if right != Some(reply.balance) {
                credits
                    .wrong
                    .entry(reply.charge.clone())
                    .or_default()
                    .push(reply);
            } else if in_replay {
                credits.replayed.insert(reply.update_id);
            }
        }
        credits.totals = totals;
        credits
    }

    /// The replay, once the records expired: each payment answered "already credited".
    fn replays(&self, credits: &Credits) -> Check {
        let replayable: Vec<i64> = self
            .paid
            .iter()
            .filter(|p| p.charge.is_some())
            .map(|p| p.update_id)
            .collect();
        let missed: Vec<&i64> = replayable
            .iter()
            .filter(|id| !credits.replayed.contains(id))
            .collect();
        Check::new(
            "each payment replayed after its record expired answered \"already credited\", credited nothing",
            missed.is_empty() && !replayable.is_empty(),
            format!(
                "{} of {} replays answered with the user's whole balance (not: {missed:?})",
                replayable.len() - missed.len(),
                replayable.len()
            ),
        )
    }

    /// The ledger: each charge the fake made, once, and `reconcile` agreeing with Telegram.
    fn ledger(&self) -> Check {
        let entries: &[Value] = self.ledger.as_deref().unwrap_or_default();
        let in_ledger: BTreeMap<String, (i64, u64)> = entries
            .iter()
            .filter_map(|e| {
                let id = e["id"].as_str()?.to_owned();
                Some((id, (e["user"].as_i64()?, e["stars"].as_u64()?)))
            })
            .collect();
        let made: BTreeMap<String, (i64, u64)> = self
            .charges
            .iter()
            .map(|c| (c.id.clone(), (c.user, u64::from(c.amount))))
            .collect();
        let (code, report) = &self.reconciled;
        Check::new(
            "the ledger holds each charge Telegram made once, and `tgq payments reconcile` agrees",
            in_ledger == made && entries.len() == made.len() && *code == 0,
            format!(
                "ledger {} entries ({} distinct; {:?}) for {} charges; reconcile exited {code}: {}",
                entries.len(),
                in_ledger.len(),
                self.ledger.as_ref().err(),
                made.len(),
                report.split_whitespace().collect::<Vec<_>>().join(" "),
            ),
        )
    }

    /// The held chats: their message answered once Telegram took it; nothing dead-lettered.
    fn held(&self) -> Check {
        // Counted by update: a reply sent again after a kill answers the same message.
        let answered = self
            .calls
            .iter()
            .filter(|c| c.method == "sendMessage" && c.is_delivered())
            .filter_map(|c| c.params["text"].as_str())
            .filter(|text| text.contains(": held "))
            .filter_map(echo_update_id)
            .collect::<BTreeSet<i64>>()
            .len();
        Check::new(
            "every message of a failing chat answered, 0 dead letters",
            answered == HELD.len() && self.letters == 0,
            format!(
                "{answered} of {} held messages answered; dead letters {}",
                HELD.len(),
                self.letters
            ),
        )
    }

    fn kills(&self) -> Check {
        let landed = self
            .kills
            .iter()
            .filter(|(_, after)| *after < REPLY_HELD)
            .count();
        Check::new(
            "3 SIGKILLs, each while a credited payment's reply was on the wire",
            landed == KILLED.len(),
            format!("kills after the reply reached the fake: {:?}", self.kills),
        )
    }
}

impl Credits {
    /// Each charge credited once: no reply at odds with it, none never credited, and as many
    /// charges as the fake made.
    fn check(&self, seen: &Observed) -> Check {
        let uncredited: Vec<&String> = seen
            .paid
            .iter()
            .filter_map(|p| p.charge.as_ref())
            .filter(|charge| !self.times.contains_key(*charge))
            .collect();
        let expected = seen.paid.iter().filter(|p| p.charge.is_some()).count();
        Check::new(
            "each charge credited once: every reply states the balance of the charges before it",
            self.wrong.is_empty() && uncredited.is_empty() && seen.charges.len() == expected,
            format!(
                "{} charges made for {} payments, {} credited, {} Stars in all; replies at odds with one credit per charge: {:?}; never credited: {uncredited:?}; credit replies sent again after a kill: {}",
                seen.charges.len(),
                seen.paid.len(),
                self.times.len(),
                self.totals.values().sum::<u64>(),
                self.wrong,
                self.times.values().filter(|n| **n > 1).count(),
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(text: &str) -> RecordedCall {
        RecordedCall {
            seq: 1,
            token: String::new(),
            method: "sendMessage".into(),
            chat_id: Some(1),
            params: json!({ "text": text }),
            status: 200,
            message_id: Some(1),
            at: Instant::now(),
        }
    }

    #[test]
    fn a_credit_s_reply_is_read_back_as_the_echo_bot_writes_it() {
        let new = tgq_core::echo::credit_text(7, "fake-charge-3", 2, true, 5);
        let again = tgq_core::echo::credit_text(8, "fake-charge-3", 2, false, 5);
        let read = |text: &str| said(&call(text));
        assert_eq!(
            read(&new),
            Some(Said {
                update_id: 7,
                charge: "fake-charge-3".into(),
                new: true,
                balance: 5
            })
        );
        assert_eq!(
            read(&again),
            Some(Said {
                update_id: 8,
                charge: "fake-charge-3".into(),
                new: false,
                balance: 5
            })
        );
        assert_eq!(read("echo 9: held 1"), None);
    }
}
