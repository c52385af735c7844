//! Counting from the outside: what Telegram (the fake Bot API) received, what the webhook answered,
//! and what the dead-letter queue holds, per planned update — and the figures of one table row.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use serde::Serialize;
use tgq_core::context::MADE_AGAIN_AFTER_UNKNOWN_OUTCOME;
use tgq_fake_telegram::{RecordedCall, Violations};

use crate::plan::{Expect, Plan};
use crate::poster::Posted;

/// A dead letter as the drill reads it from either target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Letter {
    /// The bot it was addressed to, when the letter says.
    pub bot: Option<String>,
    /// The update id, when the body had one.
    pub update_id: Option<i64>,
    /// Why it is dead (`poison`, `permanent_error`, `attempt_budget_spent`, `max_receive_count`…).
    pub reason: String,
    /// Handler runs spent on it, as the letter says.
    pub attempts: u32,
    /// The body as received.
    pub body: String,
}

/// What the target itself reports beyond the outside counts, when it reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Reported {
    /// Late writes of stale runs refused (fencing).
    pub fenced: Option<u64>,
    /// At-most-once sends tgq counted as uncertain.
    pub uncertain: Option<u64>,
    /// The at-least-once sends tgq says it repeated after an unknown outcome.
    pub resent: Resent,
    /// At-least-once actions tgq counted as made again after an unknown outcome (local mode's
    /// counter; on the emulator, the worker's log lines).
    pub resent_count: Option<u64>,
}

/// The at-least-once sends tgq says it repeated after an unknown outcome (its log:
/// [`MADE_AGAIN_AFTER_UNKNOWN_OUTCOME`]): a crash or timeout between the send and the record of its
/// result, which the fake cannot see when its answer was written before the crash.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Resent {
    /// The updates whose own send was repeated.
    pub updates: BTreeSet<i64>,
    /// Per message group (a private chat's id), how many sends of its timers were repeated. A
    /// fired timer runs as a record of its own, whose id (negative) the drill does not know: each
    /// report excuses one repeated timer reply in its chat.
    pub timers: BTreeMap<String, u64>,
}

impl Reported {
    /// The log lines that say an action is made again after an unknown outcome.
    fn made_again(log: &str) -> impl Iterator<Item = &str> {
        log.lines()
            .filter(|line| line.contains(MADE_AGAIN_AFTER_UNKNOWN_OUTCOME))
    }

    /// How many such lines `log` has: one per action made again.
    pub fn resent_lines(log: &str) -> u64 {
        Self::made_again(log).count() as u64
    }

    /// The calls tgq counts as having an unknown outcome: at-most-once ones marked uncertain (not
    /// sent again) plus at-least-once ones made again.
    pub fn unknown_outcomes(&self) -> Option<u64> {
        match (self.uncertain, self.resent_count) {
            (None, None) => None,
            (uncertain, resent) => Some(uncertain.unwrap_or(0) + resent.unwrap_or(0)),
        }
    }

    /// tgq's "making it again" log lines, JSON (`"update_id":N`, `"group":"G"`) or text
    /// (`update_id=N`, `group="G"`): an update's id, or a timer's (negative) with its group.
    pub fn resent_in_log(log: &str) -> Resent {
        let mut resent = Resent::default();
        for line in Self::made_again(log) {
            let Some(id) = value_after(line, &["\"update_id\":", "update_id="]) else {
                continue;
            };
            let Ok(id) = id.parse::<i64>() else {
                continue;
            };
            if id >= 0 {
                resent.updates.insert(id);
            } else if let Some(group) = value_after(line, &["\"group\":\"", "group=\""]) {
                *resent.timers.entry(group.to_owned()).or_default() += 1;
            }
        }
        resent
    }
}

/// The value after the first of `keys` found in `line`: a number (with its sign) or, after a key
/// ending in a quote, the text up to the next quote.
fn value_after<'l>(line: &'l str, keys: &[&str]) -> Option<&'l str> {
    keys.iter().find_map(|key| {
        let rest = &line[line.find(key)? + key.len()..];
        let end = match key.ends_with('"') {
            true => rest.find('"')?,
            false => rest
                .char_indices()
                .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
                .map_or(rest.len(), |(i, _)| i),
        };
        Some(&rest[..end])
    })
}

/// One required figure and whether the run met it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    /// What is required, in words.
    pub required: String,
    /// Whether the run met it.
    pub met: bool,
    /// What the run showed.
    pub observed: String,
}

impl Check {
    /// A check of `observed` against `required`.
    pub fn new(required: impl Into<String>, met: bool, observed: impl Into<String>) -> Check {
        Check {
            required: required.into(),
            met,
            observed: observed.into(),
        }
    }
}

/// One row of the drill's table.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// Scenario number.
    pub scenario: u8,
    /// Its short name.
    pub name: String,
    /// `local` or `emulator`.
    pub target: String,
    /// Updates posted (distinct).
    pub sent: u64,
    /// Updates answered 2xx.
    pub acknowledged: u64,
    /// Updates whose effect reached Telegram exactly once.
    pub processed_once: u64,
    /// Updates whose effect reached Telegram more than once, not explained by a call whose
    /// answer was lost (at-most-once updates: any second time).
    pub processed_twice: u64,
    /// Acknowledged updates with neither their effect nor a dead letter.
    pub lost: u64,
    /// Replies that came after a reply to a later update of the same chat.
    pub order_violations: u64,
    /// Dead letters the scenario expects (poison, permanent errors, spent budgets).
    pub dead_expected: u64,
    /// Dead letters it does not.
    pub dead_unexpected: u64,
    /// Sends whose outcome the sender could not know (the call took effect, its answer never
    /// came back): re-sent at least once, or left alone at most once.
    pub uncertain_sends: u64,
    /// Sends earlier than a `retry_after` allowed, plus sends over Telegram's rate limits.
    pub telegram_limit_violations: u64,
    /// Late writes of stale runs refused, as tgq reports them (`None`: it reports no such count).
    pub fenced_writes: Option<u64>,
    /// From the end of the fault (or of sending) until everything settled.
    pub drain_secs: f64,
    /// Every required figure and whether it was met.
    pub checks: Vec<Check>,
    /// What the scenario waits for while it fails, if known.
    pub waits_for: Option<String>,
}

impl Row {
    /// The row of a scenario with nothing counted, only `checks`.
    pub fn uncounted(scenario: u8, name: &str, target: &str, checks: Vec<Check>) -> Row {
        Row {
            scenario,
            name: name.to_owned(),
            target: target.to_owned(),
            sent: 0,
            acknowledged: 0,
            processed_once: 0,
            processed_twice: 0,
            lost: 0,
            order_violations: 0,
            dead_expected: 0,
            dead_unexpected: 0,
            uncertain_sends: 0,
            telegram_limit_violations: 0,
            fenced_writes: None,
            drain_secs: 0.0,
            checks,
            waits_for: None,
        }
    }

    /// Whether every required figure was met.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|check| check.met)
    }
}

/// The outside counts of one run.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Updates posted.
    pub sent: u64,
    /// Updates acknowledged.
    pub acknowledged: u64,
    /// Effect exactly once.
    pub once: u64,
    /// Effect more than once, unexplained.
    pub twice: u64,
    /// Acknowledged, no effect, no letter.
    pub lost: u64,
    /// Which updates were lost.
    pub lost_ids: Vec<i64>,
    /// Which were processed twice.
    pub twice_ids: Vec<i64>,
    /// Replies out of their chat's order.
    pub order_violations: u64,
    /// Expected dead letters found.
    pub dead_expected: u64,
    /// Dead letters not expected, by reason.
    pub dead_unexpected: BTreeMap<String, u64>,
    /// Expected dead letters missing.
    pub dead_missing: u64,
    /// Expected dead letters whose letter says more than one handler run.
    pub dead_after_retries: u64,
    /// Expected dead letters the queue's redrive moved (`max_receive_count`) before tgq gave up on
    /// them: dead for the wrong reason, untried or tried too few times.
    pub dead_by_redrive: u64,
    /// Distinct poison bodies found in the dead letters.
    pub poison_lettered: u64,
    /// Uncertain sends.
    pub uncertain: u64,
    /// Limit violations at the fake.
    pub limit_violations: u64,
    /// Updates whose reply was delivered although the plan expects none (dead, gone).
    pub unexpected_effects: u64,
    /// Repeats explained by tgq's own report of a send repeated after an unknown outcome.
    pub resent_by_tgq: u64,
    /// Timers planned, and those whose reply reached their chat exactly once (their losses and
    /// repeats are in `lost` and `twice`, with their update's id).
    pub timers: u64,
    pub timers_once: u64,
}

/// How many times an effect reached Telegram, as the tally judges it.
enum Effect {
    /// Not at all.
    None,
    /// Once; `uncertain` calls before it took effect with their answers lost, or one that tgq
    /// reported as made again after an unknown outcome (`resent`).
    Once { uncertain: u64, resent: bool },
    /// More than once, unexplained.
    Twice,
}

impl Effect {
    /// Judges the deliveries `delivered` (their seqs, in arrival order): repeats after calls the
    /// fake never answered are uncertain, not twice; so is a second one tgq reported as made
    /// again (`resent`), unless the effect is at most once.
    fn of(delivered: &[u64], violations: &Violations, at_most_once: bool, resent: bool) -> Effect {
        let unanswered_before_last = delivered
            .iter()
            .take(delivered.len().saturating_sub(1))
            .all(|seq| violations.unanswered.contains(seq));
        match delivered.len() {
            0 => Effect::None,
            1 => Effect::Once {
                uncertain: u64::from(violations.unanswered.contains(&delivered[0])),
                resent: false,
            },
            n if !at_most_once && unanswered_before_last => Effect::Once {
                uncertain: n as u64 - 1,
                resent: false,
            },
            2 if !at_most_once && resent => Effect::Once {
                uncertain: 1,
                resent: true,
            },
            _ => Effect::Twice,
        }
    }
}

impl Tally {
    /// Counts `plan` against what was posted, what the fake received and the dead letters.
    pub fn count(
        plan: &Plan,
        posted: &Posted,
        calls: &[RecordedCall],
        violations: &Violations,
        letters: &[Letter],
        resent: &Resent,
    ) -> Tally {
        let mut tally = Tally {
            sent: plan.updates.len() as u64,
            acknowledged: posted.acknowledged.len() as u64,
            limit_violations: violations.early_sends + violations.over_limit,
            ..Tally::default()
        };
        let replies = replies_by(calls, echo_update_id);
        let timers = replies_by(calls, timer_update_id);
        let mut timer_reports = resent.timers.clone();
        let lettered: HashMap<i64, &Letter> = letters
            .iter()
            .filter_map(|l| l.update_id.map(|id| (id, l)))
            .collect();
        for planned in &plan.updates {
            let id = planned.update_id;
            let delivered = replies.get(&id).map_or(&[][..], Vec::as_slice);
            let letter = lettered.get(&id);
            let acknowledged = posted.acknowledged.contains_key(&id);
            match planned.expect {
                Expect::Reply | Expect::ReplyAtMostOnce => {
                    let at_most_once = planned.expect == Expect::ReplyAtMostOnce;
                    let resent = resent.updates.contains(&id);
                    match Effect::of(delivered, violations, at_most_once, resent) {
                        Effect::None if letter.is_none() && acknowledged => tally.count_lost(id),
                        Effect::None => {}
                        Effect::Once { uncertain, resent } => {
                            tally.once += 1;
                            tally.uncertain += uncertain;
                            tally.resent_by_tgq += u64::from(resent);
                        }
                        Effect::Twice => tally.count_twice(id),
                    }
                }
                Expect::Dead => {
                    if !delivered.is_empty() {
                        tally.unexpected_effects += 1;
                    }
                    match letter {
                        Some(letter) => {
                            tally.dead_expected += 1;
                            if letter.attempts > 1 && letter.reason == "permanent_error" {
                                tally.dead_after_retries += 1;
                            }
                            if letter.reason == "max_receive_count" {
                                tally.dead_by_redrive += 1;
                            }
                        }
                        None if acknowledged => tally.dead_missing += 1,
                        None => {}
                    }
                }
                Expect::Gone => {
                    if !delivered.is_empty() {
                        tally.unexpected_effects += 1;
                    }
                }
            }
            // A timer is scheduled by its update's run: one acknowledged and never dead-lettered
            // owes its chat the timer's reply too. A timer's send is made at least once.
            if planned.timer && planned.expect == Expect::Reply {
                tally.timers += 1;
                let fired = timers.get(&id).map_or(&[][..], Vec::as_slice);
                let reports = timer_reports.entry(planned.chat.to_string()).or_default();
                match Effect::of(fired, violations, false, *reports > 0) {
                    Effect::None if letter.is_none() && acknowledged => tally.count_lost(id),
                    Effect::None => {}
                    Effect::Once { uncertain, resent } => {
                        tally.timers_once += 1;
                        tally.uncertain += uncertain;
                        if resent {
                            *reports -= 1;
                            tally.resent_by_tgq += 1;
                        }
                    }
                    Effect::Twice => tally.count_twice(id),
                }
            }
            if let Some(letter) = letter {
                if !matches!(planned.expect, Expect::Dead) {
                    *tally
                        .dead_unexpected
                        .entry(letter.reason.clone())
                        .or_default() += 1;
                }
            }
        }
        let poison: BTreeSet<&str> = plan.poison.iter().map(String::as_str).collect();
        let lettered_poison: BTreeSet<&str> = letters
            .iter()
            .filter(|l| l.update_id.is_none() || l.reason == "poison")
            .map(|l| l.body.as_str())
            .collect();
        tally.poison_lettered = poison.intersection(&lettered_poison).count() as u64;
        for letter in letters.iter().filter(|l| l.update_id.is_none()) {
            if !poison.contains(letter.body.as_str()) {
                *tally
                    .dead_unexpected
                    .entry(letter.reason.clone())
                    .or_default() += 1;
            }
        }
        tally.dead_expected += tally.poison_lettered;
        tally.order_violations = order_violations(plan, calls);
        tally
    }

    /// Counts update `id` as acknowledged with neither its effect nor a dead letter.
    fn count_lost(&mut self, id: i64) {
        self.lost += 1;
        self.lost_ids.push(id);
    }

    /// Counts update `id` as having reached Telegram more than once, unexplained.
    fn count_twice(&mut self, id: i64) {
        self.twice += 1;
        self.twice_ids.push(id);
    }

    /// Dead letters the scenario did not expect.
    pub fn unexpected_dead(&self) -> u64 {
        self.dead_unexpected.values().sum()
    }

    /// The checks every scenario requires: nothing lost, nothing twice, each chat in order.
    pub fn base_checks(&self) -> Vec<Check> {
        let ids = |ids: &[i64]| {
            let shown: Vec<String> = ids.iter().take(8).map(ToString::to_string).collect();
            match ids.len() {
                0 => String::new(),
                n if n > 8 => format!(" (e.g. {} …)", shown.join(", ")),
                _ => format!(" ({})", shown.join(", ")),
            }
        };
        vec![
            Check::new(
                "0 lost",
                self.lost == 0 && self.dead_missing == 0,
                format!(
                    "{} lost{}, {} expected dead letters missing",
                    self.lost,
                    ids(&self.lost_ids),
                    self.dead_missing
                ),
            ),
            Check::new(
                "0 processed twice",
                self.twice == 0,
                format!(
                    "{} twice{}; {} repeats after an unknown outcome tgq reported, counted uncertain",
                    self.twice,
                    ids(&self.twice_ids),
                    self.resent_by_tgq
                ),
            ),
            Check::new(
                "0 out of order",
                self.order_violations == 0,
                format!("{} order violations", self.order_violations),
            ),
        ]
    }

    /// A row from these counts.
    pub fn row(
        &self,
        scenario: u8,
        name: &str,
        target: &str,
        reported: &Reported,
        drain: Duration,
        checks: Vec<Check>,
    ) -> Row {
        Row {
            scenario,
            name: name.to_owned(),
            target: target.to_owned(),
            sent: self.sent,
            acknowledged: self.acknowledged,
            processed_once: self.once,
            processed_twice: self.twice,
            lost: self.lost + self.dead_missing,
            order_violations: self.order_violations,
            dead_expected: self.dead_expected,
            dead_unexpected: self.unexpected_dead(),
            uncertain_sends: self.uncertain,
            telegram_limit_violations: self.limit_violations,
            fenced_writes: reported.fenced,
            drain_secs: drain.as_secs_f64(),
            checks,
            waits_for: None,
        }
    }
}

/// The update id an echo reply names: `echo {update_id}: …`.
pub fn echo_update_id(text: &str) -> Option<i64> {
    text.strip_prefix("echo ")?.split(':').next()?.parse().ok()
}

/// The sendMessage calls that reached Telegram, in arrival order.
fn delivered_messages(calls: &[RecordedCall]) -> impl Iterator<Item = &RecordedCall> {
    calls
        .iter()
        .filter(|c| c.is_delivered() && c.method == "sendMessage")
}

/// Delivered replies by the update id `update_id` reads from their text: the seq of each
/// delivery, in arrival order.
fn replies_by(
    calls: &[RecordedCall],
    update_id: fn(&str) -> Option<i64>,
) -> HashMap<i64, Vec<u64>> {
    let mut replies: HashMap<i64, Vec<u64>> = HashMap::new();
    for call in delivered_messages(calls) {
        if let Some(id) = call.params["text"].as_str().and_then(update_id) {
            replies.entry(id).or_default().push(call.seq);
        }
    }
    replies
}

/// The update id a timer's echo reply names: `echo timer {update_id}: …`.
fn timer_update_id(text: &str) -> Option<i64> {
    text.strip_prefix("echo timer ")?
        .split(':')
        .next()?
        .parse()
        .ok()
}

/// Per chat, replies whose update comes before one already answered in that chat (first
/// deliveries only: a re-send is counted as twice, not as out of order), and timers' replies that
/// came before their update's.
fn order_violations(plan: &Plan, calls: &[RecordedCall]) -> u64 {
    let mut seen: BTreeSet<i64> = BTreeSet::new();
    let mut latest: HashMap<i64, i64> = HashMap::new();
    let mut violations = 0;
    for call in delivered_messages(calls) {
        let text = call.params["text"].as_str().unwrap_or_default();
        if let Some(id) = timer_update_id(text) {
            violations += u64::from(plan.get(id).is_some() && !seen.contains(&id));
            continue;
        }
        let Some(id) = echo_update_id(text) else {
            continue;
        };
        let Some(planned) = plan.get(id) else {
            continue;
        };
        if !seen.insert(id) {
            continue;
        }
        let last = latest.entry(planned.chat).or_insert(i64::MIN);
        if id < *last {
            violations += 1;
        } else {
            *last = id;
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use serde_json::json;

    use super::*;
    use crate::plan::Planned;
    use Sent::{Echo, Timer};

    /// A reply the fake received, by the update it answers.
    #[derive(Clone, Copy)]
    enum Sent {
        /// The update's echo reply.
        Echo(i64),
        /// The reply of the update's timer.
        Timer(i64),
    }

    /// The fake's calls: `sent` in order, each delivered in its update's chat.
    fn calls(plan: &Plan, sent: &[Sent]) -> Vec<RecordedCall> {
        sent.iter()
            .zip(1..)
            .map(|(&sent, seq)| {
                let (id, text) = match sent {
                    Echo(id) => (id, format!("echo {id}: t")),
                    Timer(id) => (id, format!("echo timer {id}: t")),
                };
                let chat = plan.get(id).map_or(0, |p| p.chat);
                RecordedCall {
                    seq,
                    token: tgq_fake_telegram::DEFAULT_TOKEN.into(),
                    method: "sendMessage".into(),
                    chat_id: Some(chat),
                    params: json!({ "chat_id": chat, "text": text }),
                    status: 200,
                    message_id: Some(seq as i64),
                    at: Instant::now(),
                }
            })
            .collect()
    }

    /// One update in each of `chats`, ids from 1, each expecting its reply unless `expect` says
    /// otherwise (by id).
    fn plan(chats: &[i64], expect: &[(i64, Expect)]) -> Plan {
        let updates = (1..)
            .zip(chats)
            .map(|(update_id, &chat)| {
                let expect = expect
                    .iter()
                    .find(|(id, _)| *id == update_id)
                    .map_or(Expect::Reply, |&(_, expect)| expect);
                Planned::new(update_id, chat, "t".into(), expect)
            })
            .collect();
        Plan {
            poison: vec!["junk".into()],
            ..Plan::new(updates)
        }
    }

    /// [`plan`], every update scheduling a timer.
    fn timer_plan(chats: &[i64], expect: &[(i64, Expect)]) -> Plan {
        let mut plan = plan(chats, expect);
        plan.updates.iter_mut().for_each(|u| u.timer = true);
        plan
    }

    fn letter(update_id: Option<i64>, reason: &str, body: &str) -> Letter {
        Letter {
            bot: None,
            update_id,
            reason: reason.into(),
            attempts: 1,
            body: body.into(),
        }
    }

    /// Counts `plan`, every update acknowledged, against what the fake and the target saw.
    fn count(
        plan: &Plan,
        calls: &[RecordedCall],
        violations: &Violations,
        letters: &[Letter],
        resent: &Resent,
    ) -> Tally {
        let posted = Posted {
            acknowledged: plan
                .updates
                .iter()
                .map(|p| (p.update_id, Instant::now()))
                .collect(),
            ..Posted::default()
        };
        Tally::count(plan, &posted, calls, violations, letters, resent)
    }

    #[test]
    fn a_reply_missing_is_lost_a_repeat_is_twice_and_an_overtaking_reply_is_out_of_order() {
        let plan = plan(&[10, 10, 10, 20], &[]);
        let calls = calls(&plan, &[Echo(2), Echo(1), Echo(2), Echo(4)]);
        let tally = count(
            &plan,
            &calls,
            &Violations::default(),
            &[],
            &Resent::default(),
        );
        assert_eq!((tally.once, tally.twice, tally.lost), (2, 1, 1));
        assert_eq!(tally.lost_ids, vec![3]);
        assert_eq!(tally.order_violations, 1);
        assert!(!tally.base_checks().iter().all(|c| c.met));
    }

    #[test]
    fn a_timer_owes_its_chat_one_reply_after_its_update_s() {
        let plan = timer_plan(&[10, 11, 12, 13, 14], &[(5, Expect::Dead)]);
        let sent = [
            Echo(1),
            Timer(1),
            // Update 2's timer is never fired.
            Echo(2),
            // Update 3's fired twice.
            Echo(3),
            Timer(3),
            Timer(3),
            // Update 4's fired before its update's reply.
            Timer(4),
            Echo(4),
        ];
        let letters = vec![letter(Some(5), "permanent_error", "")];
        let tally = count(
            &plan,
            &calls(&plan, &sent),
            &Violations::default(),
            &letters,
            &Resent::default(),
        );
        // The dead letter's update scheduled nothing: it owes no timer.
        assert_eq!((tally.timers, tally.timers_once), (4, 2));
        assert_eq!((tally.lost_ids, tally.twice_ids), (vec![2], vec![3]));
        assert_eq!(tally.order_violations, 1);
    }

    #[test]
    fn a_repeat_after_an_unanswered_call_is_uncertain_but_at_most_once_it_is_twice() {
        let plan = plan(&[10, 11], &[(2, Expect::ReplyAtMostOnce)]);
        let calls = calls(&plan, &[Echo(1), Echo(1), Echo(2), Echo(2)]);
        let violations = Violations {
            unanswered: BTreeSet::from([1, 3]),
            ..Violations::default()
        };
        let tally = count(&plan, &calls, &violations, &[], &Resent::default());
        assert_eq!((tally.once, tally.twice, tally.uncertain), (1, 1, 1));
        assert_eq!(tally.twice_ids, vec![2]);
    }

    #[test]
    fn dead_letters_are_expected_only_where_the_plan_says_and_poison_is_matched_by_body() {
        let plan = plan(&[10, 10, 11], &[(1, Expect::Dead), (3, Expect::Gone)]);
        let letters = vec![
            letter(Some(1), "permanent_error", ""),
            letter(Some(3), "permanent_error", ""),
            letter(None, "poison", "junk"),
        ];
        let calls = calls(&plan, &[Echo(2)]);
        let tally = count(
            &plan,
            &calls,
            &Violations::default(),
            &letters,
            &Resent::default(),
        );
        assert_eq!(tally.dead_expected, 2, "update 1 and the poison body");
        assert_eq!(tally.unexpected_dead(), 1, "the recipient who left");
        assert_eq!(tally.poison_lettered, 1);
        assert_eq!(tally.lost, 0);
    }

    #[test]
    fn a_repeat_tgq_reports_as_resent_after_an_unknown_outcome_is_uncertain_not_twice() {
        let plan = plan(&[10, 11], &[]);
        let calls = calls(&plan, &[Echo(1), Echo(1), Echo(2), Echo(2)]);
        // As the worker writes them, in its JSON and its text format: the words are the constant
        // tgq logs, so a change of wording cannot make the drill count such repeats as twice.
        let log = format!(
            r#"{{"fields":{{"message":"{MADE_AGAIN_AFTER_UNKNOWN_OUTCOME}","seq":1}},"span":{{"update_id":1}}}}
WARN process_record{{update_id=7}}: tgq_core::context: {MADE_AGAIN_AFTER_UNKNOWN_OUTCOME} seq=1"#
        );
        let resent = Reported::resent_in_log(&log);
        assert_eq!(resent.updates, BTreeSet::from([1, 7]));
        let tally = count(&plan, &calls, &Violations::default(), &[], &resent);
        assert_eq!((tally.once, tally.twice, tally.uncertain), (1, 1, 1));
        assert_eq!(tally.twice_ids, vec![2]);
    }

    #[test]
    fn a_timer_s_repeat_tgq_reports_in_its_chat_is_uncertain_and_only_once_per_report() {
        let plan = timer_plan(&[10, 11], &[]);
        let calls = calls(
            &plan,
            &[Echo(1), Timer(1), Timer(1), Echo(2), Timer(2), Timer(2)],
        );
        // A timer's record has an id of its own, negative: the report names its chat's group.
        let log = format!(
            r#"WARN process_record{{message_id=m-1 bot_id="local" update_id=-2924444992089715498 group="10" attempt=2}}: tgq_core::usecases::worker::recording: {MADE_AGAIN_AFTER_UNKNOWN_OUTCOME} seq=1
{{"fields":{{"message":"{MADE_AGAIN_AFTER_UNKNOWN_OUTCOME}"}},"span":{{"update_id":-5,"group":"12"}}}}"#
        );
        let resent = Reported::resent_in_log(&log);
        assert_eq!(resent.updates, BTreeSet::new());
        assert_eq!(
            resent.timers,
            BTreeMap::from([("10".to_owned(), 1), ("12".to_owned(), 1)])
        );
        let tally = count(&plan, &calls, &Violations::default(), &[], &resent);
        assert_eq!(
            tally.timers_once, 1,
            "chat 10's repeated timer reply, reported"
        );
        assert_eq!(tally.twice_ids, vec![2], "chat 11's, not reported");
        assert_eq!(tally.resent_by_tgq, 1);
    }

    #[test]
    fn echo_replies_name_their_update() {
        assert_eq!(echo_update_id("echo 17: hi: there"), Some(17));
        assert_eq!(echo_update_id("You said: hi"), None);
    }
}
