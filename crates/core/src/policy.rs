//! Retry policy: how long a failed update waits, and when it stops trying (docs/ARCHITECTURE.md §4).

use std::time::Duration;

use crate::defaults;
use crate::error::ErrorClass;

/// The attempt budget and the backoff curve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Handler runs allowed before the update is dead-lettered.
    pub max_attempts: u32,
    /// Delay after the first failure, before jitter.
    pub base: Duration,
    /// Largest delay before jitter.
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: defaults::MAX_ATTEMPTS,
            base: defaults::BACKOFF_BASE,
            cap: defaults::BACKOFF_CAP,
        }
    }
}

/// A jitter factor in `[0.5, 1.5)`, drawn once per failure so that retries of many chats spread out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Jitter(f64);

impl Jitter {
    /// The lowest factor.
    pub const MIN: Jitter = Jitter(0.5);
    /// No jitter at all.
    pub const NONE: Jitter = Jitter(1.0);

    /// A uniformly random factor.
    pub fn random() -> Self {
        Self(rand::random_range(0.5..1.5))
    }

    /// A given factor, clamped into `[0.5, 1.5]`.
    pub fn of(factor: f64) -> Self {
        Self(factor.clamp(0.5, 1.5))
    }
}

/// What to do with an update after a failed run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Leave it on the queue, invisible for this long.
    RetryAfter(Duration),
    /// Give up: mark it dead and move it to the dead-letter queue.
    Bury(BuryReason),
}

/// Why an update was given up on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuryReason {
    /// The failure was permanent.
    Permanent,
    /// Every attempt of the budget failed.
    BudgetSpent,
}

impl BuryReason {
    /// The reason as recorded on the dead letter.
    pub fn as_str(self) -> &'static str {
        match self {
            BuryReason::Permanent => "permanent_error",
            BuryReason::BudgetSpent => "attempt_budget_spent",
        }
    }
}

impl RetryPolicy {
    /// Decides what follows failure number `attempt` (1-based) of class `class`.
    pub fn verdict(&self, attempt: u32, class: ErrorClass, jitter: Jitter) -> Verdict {
        match class {
            ErrorClass::Permanent => Verdict::Bury(BuryReason::Permanent),
            _ if attempt >= self.max_attempts => Verdict::Bury(BuryReason::BudgetSpent),
            ErrorClass::RateLimited(wait) => {
                Verdict::RetryAfter(within_sqs_limit(wait + Duration::from_secs(1)))
            }
            ErrorClass::Transient => Verdict::RetryAfter(self.backoff(attempt, jitter)),
        }
    }

    /// `min(cap, base · 2^(attempt−1)) · jitter`, never above the SQS visibility ceiling.
    pub fn backoff(&self, attempt: u32, jitter: Jitter) -> Duration {
        let doublings = attempt.saturating_sub(1).min(31);
        let raw = self.base.saturating_mul(1u32 << doublings).min(self.cap);
        within_sqs_limit(raw.mul_f64(jitter.0))
    }
}

/// SQS refuses a visibility timeout above 12 hours.
fn within_sqs_limit(delay: Duration) -> Duration {
    delay.min(defaults::MAX_VISIBILITY)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

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
        let v =
            RetryPolicy::default().verdict(1, ErrorClass::RateLimited(7 * SEC), Jitter::random());
        assert_eq!(v, Verdict::RetryAfter(8 * SEC));
    }

    #[test]
    fn no_delay_exceeds_the_sqs_visibility_ceiling() {
        let policy = RetryPolicy {
            max_attempts: 100,
            base: 3600 * SEC,
            cap: 100 * 3600 * SEC,
        };
        assert_eq!(
            policy.backoff(10, Jitter::of(1.5)),
            defaults::MAX_VISIBILITY
        );
        let v = policy.verdict(1, ErrorClass::RateLimited(24 * 3600 * SEC), Jitter::NONE);
        assert_eq!(v, Verdict::RetryAfter(defaults::MAX_VISIBILITY));
    }

    #[test]
    fn permanent_errors_are_buried_on_the_first_attempt() {
        assert_eq!(
            RetryPolicy::default().verdict(1, ErrorClass::Permanent, Jitter::NONE),
            Verdict::Bury(BuryReason::Permanent)
        );
    }

    #[test]
    fn the_last_attempt_of_the_budget_is_buried_whatever_its_class() {
        let policy = RetryPolicy::default();
        assert!(matches!(
            policy.verdict(7, ErrorClass::Transient, Jitter::NONE),
            Verdict::RetryAfter(_)
        ));
        assert_eq!(
            policy.verdict(8, ErrorClass::Transient, Jitter::NONE),
            Verdict::Bury(BuryReason::BudgetSpent)
        );
        assert_eq!(
            policy.verdict(8, ErrorClass::RateLimited(SEC), Jitter::NONE),
            Verdict::Bury(BuryReason::BudgetSpent)
        );
    }
}
