//! A job's own pace: the even schedule its sends are taken at, and the gate near the wire.

use super::*;

/// A job's own pace: at most its rate in any second (and a little slack), evenly spaced.
pub(super) struct LanePacer {
    rate: Option<u32>,
    /// The next slot of the even schedule.
    next: Option<tokio::time::Instant>,
    /// When the last `rate` sends may leave at the earliest: what the one-second window counts.
    sent: std::collections::VecDeque<tokio::time::Instant>,
}

impl Lane {
    pub(super) fn pacer(rate: Option<u32>) -> LanePacer {
        LanePacer {
            rate,
            next: None,
            sent: std::collections::VecDeque::new(),
        }
    }
}

impl LanePacer {
    /// Takes the next slot: how long from `now` until the send may leave. The even schedule, not
    /// the moment the caller woke, sets the next slot, and slots a late wake-up missed are caught
    /// up on, up to [`CATCH_UP`] back: timers tick in milliseconds, and a lane of 1,000 a second
    /// would otherwise lose a third of its slots. The window counts when sends leave, so what is
    /// caught up never puts more than the rate in a second.
    pub(super) fn take(&mut self, now: tokio::time::Instant) -> Duration {
        let Some(rate) = self.rate else {
            return Duration::ZERO;
        };
        let spacing = Duration::from_secs(1) / rate.max(1);
        let earliest = now.checked_sub(CATCH_UP).unwrap_or(now);
        let mut slot = self.next.map_or(now, |next| next.max(earliest));
        if self.sent.len() >= rate as usize {
            if let Some(oldest) = self.sent.front() {
                slot = slot.max(*oldest + Duration::from_secs(1) + LANE_SLACK);
            }
        }
        let leaves = slot.max(now);
        self.next = Some(slot + spacing);
        self.sent.push_back(leaves);
        while self.sent.len() > rate as usize {
            self.sent.pop_front();
        }
        leaves - now
    }
}

/// The lane's own check near the wire: the moments the last `rate` sends passed it, so that no
/// more than the rate pass in any second and its slack however the stores' writes bunched them.
/// The paid lane passes it before the send's intent, and once more just before the call when the
/// intent's write made it late. The standard lane passes it before booking, so that a wait here
/// never makes a call leave after the slot the bot's budget counts it at.
pub(super) struct LaneGate {
    rate: Option<u32>,
    left: parking_lot::Mutex<std::collections::VecDeque<tokio::time::Instant>>,
}

impl LaneGate {
    pub(super) fn new(rate: Option<u32>) -> Self {
        Self {
            rate,
            left: parking_lot::Mutex::new(std::collections::VecDeque::new()),
        }
    }

    /// Returns when a call may leave, and counts it as leaving then: that moment.
    pub(super) async fn pass(&self) -> tokio::time::Instant {
        let Some(rate) = self.rate else {
            return tokio::time::Instant::now();
        };
        loop {
            let wait = {
                let now = tokio::time::Instant::now();
                let mut left = self.left.lock();
                let free_at = match left.front() {
                    Some(oldest) if left.len() >= rate as usize => {
                        *oldest + Duration::from_secs(1) + LANE_SLACK
                    }
                    _ => now,
                };
                if free_at <= now {
                    left.push_back(now);
                    while left.len() > rate as usize {
                        left.pop_front();
                    }
                    return now;
                }
                free_at - now
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// For a call counted as leaving at `passed` that is only leaving now: when it is later than
    /// the window's slack (its intent's write was held up), it is counted again from now, waiting
    /// for room as [`LaneGate::pass`] does, so that calls a slow store held back together do not
    /// leave in one second with the calls counted after them.
    pub(super) async fn pass_again_if_late(&self, passed: tokio::time::Instant) {
        if self.rate.is_none() || passed.elapsed() <= LANE_SLACK {
            return;
        }
        {
            let mut left = self.left.lock();
            if let Some(at) = left.iter().position(|at| *at == passed) {
                left.remove(at);
            }
        }
        self.pass().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lane_keeps_its_rate_in_any_second() {
        let mut lane = Lane::pacer(Some(10));
        let start = tokio::time::Instant::now();
        let mut at = start;
        let mut times = Vec::new();
        for i in 0..35 {
            at += lane.take(at);
            times.push(at);
            // A sleep that ends a little late does not move the next slot.
            if i % 3 == 0 {
                at += Duration::from_millis(7);
            }
        }
        for (i, t) in times.iter().enumerate() {
            let in_window = times[i..]
                .iter()
                .take_while(|u| **u < *t + Duration::from_secs(1))
                .count();
            assert!(
                in_window <= 10,
                "{in_window} sends in the second from send {i}"
            );
        }
        let took = *times.last().unwrap() - start;
        assert!(
            took >= Duration::from_millis(3_400) && took < Duration::from_millis(3_700),
            "{took:?}"
        );
        assert_eq!(Lane::pacer(None).take(start), Duration::ZERO);
    }

    #[test]
    fn a_fast_lane_woken_late_catches_up_without_a_second_over_its_rate() {
        let mut lane = Lane::pacer(Some(1000));
        let start = tokio::time::Instant::now();
        let mut now = start;
        let mut leaves = Vec::new();
        for i in 0..3000 {
            let wait = lane.take(now);
            let leave = now + wait;
            leaves.push(leave);
            // A timer that ticks in milliseconds: every wait ends up to a millisecond late; and
            // now and then the process stalls for 15 ms (a busy core, a slow commit).
            now = leave
                + match (i % 250 == 0, wait.is_zero()) {
                    (true, _) => Duration::from_millis(15),
                    (false, true) => Duration::from_micros(50),
                    (false, false) => Duration::from_micros(900),
                };
        }
        let mut first = 0;
        for (last, at) in leaves.iter().enumerate() {
            while *at - leaves[first] >= Duration::from_secs(1) {
                first += 1;
            }
            assert!(
                last - first < 1000,
                "{} sends in one second",
                last - first + 1
            );
        }
        let took = *leaves.last().unwrap() - start;
        assert!(
            took < Duration::from_millis(3_150),
            "3,000 at 1,000/s took {took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_gate_lets_no_more_than_the_rate_leave_in_a_second_however_they_come() {
        let gate = Arc::new(LaneGate::new(Some(50)));
        let start = tokio::time::Instant::now();
        // Two hundred calls whose intents were all written at once.
        let mut calls = JoinSet::new();
        for _ in 0..200 {
            let gate = gate.clone();
            calls.spawn(async move {
                gate.pass().await;
                tokio::time::Instant::now()
            });
        }
        let mut left: Vec<tokio::time::Instant> = calls.join_all().await;
        left.sort();
        let mut first = 0;
        for (last, at) in left.iter().enumerate() {
            while *at - left[first] >= Duration::from_secs(1) {
                first += 1;
            }
            assert!(
                last - first < 50,
                "{} calls in one second",
                last - first + 1
            );
        }
        assert!(*left.last().unwrap() - start < Duration::from_millis(4_200));
    }
}
