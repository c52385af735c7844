//! Sliding-window flood control for sending methods.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::config::Limits;
use crate::envelope::ApiError;

const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);

/// Admits or refuses sends against the per-chat, global and per-group windows.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    limits: Limits,
    global: Window,
    paid: Window,
    per_chat: HashMap<i64, Window>,
    per_group: HashMap<i64, Window>,
}

impl RateLimiter {
    pub(crate) fn new(limits: Limits) -> Self {
        Self {
            limits,
            global: Window::new(SECOND, limits.global_per_sec),
            paid: Window::new(SECOND, limits.paid_per_sec),
            per_chat: HashMap::new(),
            per_group: HashMap::new(),
        }
    }

    /// Counts a send to `chat` at `now`, or refuses it with 429 and the seconds until every window
    /// it hit has room again. A refused send is not counted. A paid broadcast counts against the
    /// paid lane's window instead of the bot-wide one.
    pub(crate) fn admit(&mut self, chat: i64, paid: bool, now: Instant) -> Result<(), ApiError> {
        let limits = self.limits;
        let chat_window = self
            .per_chat
            .entry(chat)
            .or_insert_with(|| Window::new(SECOND, limits.per_chat_per_sec));
        // Negative ids are groups, supergroups and channels, which Telegram limits per minute.
        let group_window = (chat < 0).then(|| {
            self.per_group
                .entry(chat)
                .or_insert_with(|| Window::new(MINUTE, limits.per_group_per_min))
        });

        let overall = if paid {
            &mut self.paid
        } else {
            &mut self.global
        };
        let wait = [
            overall.wait(now),
            chat_window.wait(now),
            group_window.as_ref().and_then(|window| window.wait(now)),
        ]
        .into_iter()
        .flatten()
        .max();
        if let Some(wait) = wait {
            return Err(ApiError::too_many_requests(whole_seconds(wait)));
        }

        overall.hit(now);
        chat_window.hit(now);
        if let Some(window) = group_window {
            window.hit(now);
        }
        Ok(())
    }
}

/// Telegram's `retry_after` is whole seconds and never zero.
fn whole_seconds(wait: Duration) -> u64 {
    let rounded_up = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    rounded_up.max(1)
}

/// The instants of the sends inside the last `span`.
#[derive(Debug)]
struct Window {
    span: Duration,
    limit: u32,
    hits: VecDeque<Instant>,
}

impl Window {
    fn new(span: Duration, limit: u32) -> Self {
        Self {
            span,
            limit,
            hits: VecDeque::new(),
        }
    }

    /// How long until one more send fits, or `None` when it fits now.
    fn wait(&self, now: Instant) -> Option<Duration> {
        let live = self
            .hits
            .iter()
            .filter(|hit| now.duration_since(**hit) < self.span);
        let oldest = live.clone().next();
        if live.count() < self.limit as usize {
            return None;
        }
        // Only admitted sends are counted, so the window never holds more than its limit and the
        // oldest send leaving it makes room for one more.
        Some(oldest.map_or(self.span, |hit| {
            (*hit + self.span).saturating_duration_since(now)
        }))
    }

    fn hit(&mut self, now: Instant) {
        while let Some(oldest) = self.hits.front() {
            if now.duration_since(*oldest) < self.span {
                break;
            }
            self.hits.pop_front();
        }
        self.hits.push_back(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(per_chat: u32, global: u32, per_group: u32) -> Limits {
        Limits {
            per_chat_per_sec: per_chat,
            global_per_sec: global,
            per_group_per_min: per_group,
            paid_per_sec: 1000,
        }
    }

    #[test]
    fn a_chat_gets_room_again_a_second_after_its_last_send() {
        let mut limiter = RateLimiter::new(limits(1, 30, 20));
        let start = Instant::now();

        assert!(limiter.admit(5, false, start).is_ok());
        assert_eq!(
            limiter.admit(5, false, start + Duration::from_millis(300)),
            Err(ApiError::too_many_requests(1))
        );
        assert!(limiter.admit(5, false, start + SECOND).is_ok());
    }

    #[test]
    fn other_chats_are_not_held_back_by_a_full_chat() {
        let mut limiter = RateLimiter::new(limits(1, 30, 20));
        let now = Instant::now();

        assert!(limiter.admit(5, false, now).is_ok());
        assert!(limiter.admit(6, false, now).is_ok());
    }

    #[test]
    fn a_full_group_minute_asks_to_wait_for_the_rest_of_the_minute() {
        let mut limiter = RateLimiter::new(limits(100, 100, 2));
        let start = Instant::now();

        assert!(limiter.admit(-9, false, start).is_ok());
        assert!(limiter
            .admit(-9, false, start + Duration::from_secs(10))
            .is_ok());
        assert_eq!(
            limiter.admit(-9, false, start + Duration::from_secs(20)),
            Err(ApiError::too_many_requests(40))
        );
    }

    #[test]
    fn a_zero_limit_refuses_everything() {
        let mut limiter = RateLimiter::new(limits(0, 30, 20));

        assert_eq!(
            limiter.admit(5, false, Instant::now()),
            Err(ApiError::too_many_requests(1))
        );
    }

    #[test]
    fn paid_broadcasts_count_in_their_own_window_not_the_bot_s() {
        let mut limiter = RateLimiter::new(Limits {
            paid_per_sec: 3,
            ..limits(1, 2, 20)
        });
        let now = Instant::now();
        for chat in 1..=3 {
            assert!(limiter.admit(chat, true, now).is_ok(), "paid send {chat}");
        }
        assert!(
            limiter.admit(4, true, now).is_err(),
            "the paid lane's fourth in a second"
        );
        for chat in 10..=11 {
            assert!(
                limiter.admit(chat, false, now).is_ok(),
                "the bot's own sends are not held"
            );
        }
        assert!(limiter.admit(12, false, now).is_err());
    }
}
