//! A lane's patience with Telegram's outages (docs/design/broadcasts.md, "Outcomes"): while its
//! sends meet a Telegram that cannot be reached or answers 5xx, the lane waits longer and longer
//! between them, and goes on at its pace once Telegram answers again, so an outage writes no
//! recipient off and does not hammer an edge that is down.

use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::{OUTAGE_FIRST_WAIT as FIRST_WAIT, OUTAGE_LONGEST_WAIT as LONGEST_WAIT};

/// How long the lane holds for an outage.
#[derive(Debug, Default)]
pub(super) struct Outage(Mutex<Held>);

#[derive(Debug, Default)]
struct Held {
    /// Failures in a row, each met after the lane's last wait ended.
    failures: u32,
    /// When the lane may send again.
    until: Option<Instant>,
}

impl Outage {
    /// A send met an outage at `now`: the lane waits from now, twice as long as the last time.
    /// Failures of sends already under way when the wait began lengthen nothing.
    pub(super) fn failed(&self, now: Instant) {
        let mut held = self.0.lock();
        if held.until.is_some_and(|until| until > now) {
            return;
        }
        held.failures += 1;
        let doubled = FIRST_WAIT.saturating_mul(1 << (held.failures - 1).min(16));
        held.until = Some(now + doubled.min(LONGEST_WAIT));
    }

    /// Telegram answered a send (taken or refused, but not an outage): the lane goes on at once.
    pub(super) fn answered(&self) {
        *self.0.lock() = Held::default();
    }

    /// How long from `now` the lane still waits.
    pub(super) fn wait(&self, now: Instant) -> Duration {
        self.0
            .lock()
            .until
            .map_or(Duration::ZERO, |until| until.saturating_duration_since(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_while_the_outage_lasts_and_end_when_telegram_answers() {
        let outage = Outage::default();
        let start = Instant::now();
        assert_eq!(outage.wait(start), Duration::ZERO);
        outage.failed(start);
        assert_eq!(outage.wait(start), FIRST_WAIT);
        // Sends under way when it began fail too: the wait does not grow for them.
        outage.failed(start + Duration::from_millis(10));
        assert_eq!(outage.wait(start), FIRST_WAIT);
        let later = start + FIRST_WAIT;
        outage.failed(later);
        assert_eq!(outage.wait(later), FIRST_WAIT * 2);
        let mut at = later;
        for _ in 0..20 {
            at += outage.wait(at);
            outage.failed(at);
        }
        assert_eq!(outage.wait(at), LONGEST_WAIT);
        outage.answered();
        assert_eq!(outage.wait(at), Duration::ZERO);
    }
}
