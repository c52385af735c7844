//! Retry policy: how long a failed update waits, and when it stops trying
//! (docs/design/worker.md §1).

use std::time::Duration;

use crate::dead::DeadReason;
use crate::defaults;
use crate::error::ErrorClass;
use crate::record::Timestamp;

/// How much longer than Telegram's `retry_after` an update waits: the retry lands after the flood
/// wait has ended at Telegram, not on its last instant.
pub(crate) const FLOOD_WAIT_MARGIN: Duration = Duration::from_secs(1);

/// How long an update waits after Telegram asked the bot to wait `retry_after`.
pub(crate) fn after_flood_wait(retry_after: Duration) -> Duration {
    retry_after + FLOOD_WAIT_MARGIN
}

/// What becomes of an update whose handler met a recipient who is gone — blocked the bot,
/// deleted their account, a private chat not found (docs/design/worker.md §1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GoneRecipients {
    /// Settled `DONE` with the outcome `recipient_gone`, counted, acknowledged, not dead-lettered:
    /// a user who blocked the bot should not page anyone.
    #[default]
    Settle,
    /// Dead-lettered as a permanent failure, like any other 403 or 400
    /// (`TGQ_DEAD_LETTER_GONE_RECIPIENTS=true`).
    DeadLetter,
}

/// How long Telegram waits for the answer to a pre-checkout query: a later answer is refused and
/// the user is not charged.
pub const PRE_CHECKOUT_DEADLINE: Duration = Duration::from_secs(10);

/// How a pre-checkout query is answered in time whatever its handler does (docs/design/worker.md
/// §1): the handler has until `margin` before Telegram's deadline, counted from when the update was
/// received; a query it has not answered by then — it failed, it waited, it never answered — is
/// answered `ok: false` with `refusal`, which Telegram shows the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreCheckoutPolicy {
    /// What is kept of the 10 s for tgq's own answer to reach Telegram
    /// (`TGQ_PRE_CHECKOUT_MARGIN_MS`).
    pub margin: Duration,
    /// The words of tgq's own refusal (`TGQ_PRE_CHECKOUT_REFUSAL`).
    pub refusal: String,
}

impl PreCheckoutPolicy {
    /// When a query received at `received` must be answered by its handler.
    pub(crate) fn answer_by(&self, received: Timestamp) -> Timestamp {
        received.plus(PRE_CHECKOUT_DEADLINE).minus(self.margin)
    }

    /// Whether Telegram has given up on a query received at `received`: no answer can charge the
    /// user now.
    pub(crate) fn expired(received: Timestamp, now: Timestamp) -> bool {
        now.since(received) >= PRE_CHECKOUT_DEADLINE
    }
}

impl Default for PreCheckoutPolicy {
    fn default() -> Self {
        Self {
            margin: defaults::PRE_CHECKOUT_MARGIN,
            refusal: defaults::PRE_CHECKOUT_REFUSAL.to_owned(),
        }
    }
}

/// The attempt budget, the time budget and the backoff curve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Handler runs allowed before the update is dead-lettered (rate-limited runs not counted).
    pub max_attempts: u32,
    /// Delay after the first failure, before jitter.
    pub base: Duration,
    /// Largest delay before jitter.
    pub cap: Duration,
    /// How long after its first run an update Telegram still rate-limits is given up on.
    pub max_retry_age: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: defaults::MAX_ATTEMPTS,
            base: defaults::BACKOFF_BASE,
            cap: defaults::BACKOFF_CAP,
            max_retry_age: defaults::MAX_RETRY_AGE,
        }
    }
}

/// A jitter factor in `[0.5, 1.5)`, drawn once per failure so that retries of many chats spread out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Jitter(f64);

impl Jitter {
    /// The lowest factor.
    #[cfg(test)]
    pub(crate) const MIN: Jitter = Jitter(0.5);
    /// No jitter at all.
    pub const NONE: Jitter = Jitter(1.0);

    /// A uniformly random factor.
    pub(crate) fn random() -> Self {
        Self(rand::random_range(0.5..1.5))
    }
}

/// A failed run, as the policy weighs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FailedRun {
    /// How the failure is treated.
    pub class: ErrorClass,
    /// Runs that count against the budget, this one included.
    pub attempts_spent: u32,
    /// How long ago the first run started.
    pub age: Duration,
}

/// What to do with an update after a failed run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Leave it on the queue, invisible for this long.
    RetryAfter(Duration),
    /// Give up: mark it dead and move it to the dead-letter queue.
    Bury(DeadReason),
}

impl RetryPolicy {
    /// Decides what follows a failed run.
    pub(crate) fn verdict(&self, run: FailedRun, jitter: Jitter) -> Verdict {
        match run.class {
            ErrorClass::Permanent => Verdict::Bury(DeadReason::Permanent),
            // Telegram's pacing is not the bot's failure: only time limits it.
            ErrorClass::RateLimited(_) if run.age >= self.max_retry_age => {
                Verdict::Bury(DeadReason::ThrottledTooLong)
            }
            ErrorClass::RateLimited(wait) => Verdict::RetryAfter(after_flood_wait(wait)),
            ErrorClass::Transient if run.attempts_spent >= self.max_attempts => {
                Verdict::Bury(DeadReason::BudgetSpent)
            }
            ErrorClass::Transient => Verdict::RetryAfter(self.backoff(run.attempts_spent, jitter)),
        }
    }

    /// `min(cap, base · 2^(attempt−1)) · jitter`.
    pub fn backoff(&self, attempt: u32, jitter: Jitter) -> Duration {
        let doublings = attempt.saturating_sub(1).min(31);
        let raw = self.base.saturating_mul(1u32 << doublings).min(self.cap);
        raw.mul_f64(jitter.0)
    }
}

/// A visibility delay SQS accepts. SQS keeps a message in flight for at most 12 hours counted from
/// each receive (every receive starts the count again; the message's first receive does not matter),
/// so the delay asked for now may be at most 12 hours less the time since the batch was received.
/// The worker does not learn that instant, but an invocation lasts at most
/// [`defaults::MAX_INVOCATION`], so that is what is kept off the ceiling.
pub(crate) fn within_visibility_ceiling(delay: Duration) -> Duration {
    delay.min(defaults::MAX_VISIBILITY.saturating_sub(defaults::MAX_INVOCATION))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    fn run(class: ErrorClass, attempts_spent: u32) -> FailedRun {
        FailedRun {
            class,
            attempts_spent,
            age: Duration::ZERO,
        }
    }

    #[test]
    fn backoff_doubles_from_the_base_until_the_cap() {
        let policy = RetryPolicy::default();
        let steps: Vec<u64> = (1..=9)
            .map(|n| policy.backoff(n, Jitter::NONE).as_secs())
            .collect();
        assert_eq!(steps, [2, 4, 8, 16, 32, 64, 128, 256, 300]);
        assert_eq!(policy.backoff(1000, Jitter::NONE), policy.cap);
    }

    #[test]
    fn jitter_keeps_every_delay_within_half_and_one_and_a_half_times_the_step() {
        let policy = RetryPolicy::default();
        for attempt in 1..=8 {
            let step = policy.backoff(attempt, Jitter::NONE);
            for _ in 0..200 {
                let d = policy.backoff(attempt, Jitter::random());
                assert!(
                    d >= step.mul_f64(0.5) && d <= step.mul_f64(1.5),
                    "attempt {attempt}: {d:?} vs {step:?}"
                );
            }
        }
        assert_eq!(policy.backoff(3, Jitter::MIN), 4 * SEC);
    }

    #[test]
    fn retry_after_is_honoured_exactly_plus_one_second() {
        let v = RetryPolicy::default()
            .verdict(run(ErrorClass::RateLimited(7 * SEC), 1), Jitter::random());
        assert_eq!(v, Verdict::RetryAfter(8 * SEC));
    }

    #[test]
    fn the_visibility_ceiling_counts_from_this_receive_less_the_longest_invocation() {
        let day = 24 * 3600 * SEC;
        let ceiling = 12 * 3600 * SEC - 15 * 60 * SEC;
        assert_eq!(within_visibility_ceiling(day), ceiling);
        assert_eq!(within_visibility_ceiling(ceiling + SEC), ceiling);
        assert_eq!(within_visibility_ceiling(5 * SEC), 5 * SEC);
        assert_eq!(within_visibility_ceiling(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn permanent_errors_are_buried_on_the_first_attempt() {
        assert_eq!(
            RetryPolicy::default().verdict(run(ErrorClass::Permanent, 1), Jitter::NONE),
            Verdict::Bury(DeadReason::Permanent)
        );
    }

    #[test]
    fn the_last_attempt_of_the_budget_is_buried_but_rate_limits_spend_none() {
        let policy = RetryPolicy::default();
        assert!(matches!(
            policy.verdict(run(ErrorClass::Transient, 7), Jitter::NONE),
            Verdict::RetryAfter(_)
        ));
        assert_eq!(
            policy.verdict(run(ErrorClass::Transient, 8), Jitter::NONE),
            Verdict::Bury(DeadReason::BudgetSpent)
        );
        assert_eq!(
            policy.verdict(run(ErrorClass::RateLimited(SEC), 8), Jitter::NONE),
            Verdict::RetryAfter(2 * SEC)
        );
    }

    #[test]
    fn an_update_still_rate_limited_after_the_time_budget_is_buried() {
        let policy = RetryPolicy::default();
        let old = FailedRun {
            class: ErrorClass::RateLimited(SEC),
            attempts_spent: 1,
            age: policy.max_retry_age,
        };
        assert_eq!(
            policy.verdict(old, Jitter::NONE),
            Verdict::Bury(DeadReason::ThrottledTooLong)
        );
    }
}
