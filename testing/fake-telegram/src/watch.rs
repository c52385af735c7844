//! What a drill counts at Telegram's end beyond the calls themselves: sends that came earlier than a
//! `retry_after` allowed, sends the rate limits refused, and calls whose answer never reached the
//! client (it gave up waiting: the call took effect, the caller cannot know).

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// A call arriving this soon after a 429 was answered was already on its way: no client could
/// have known, so it is not counted as sent too early.
pub const IN_FLIGHT_GRACE: Duration = Duration::from_millis(100);

/// The counts of [`FakeTelegram::violations`](crate::FakeTelegram::violations).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Violations {
    /// Sends that arrived while a `retry_after` answered earlier for their chat (or, for a global
    /// 429, for the whole bot) had not yet run out, past [`IN_FLIGHT_GRACE`].
    pub early_sends: u64,
    /// Sends refused because they went over Telegram's rate limits (the fake's `Limits`).
    pub over_limit: u64,
    /// `seq` of the calls that took effect but whose answer the client never read (it hung up
    /// first, e.g. its timeout ran out while a `Fault::Timeout` held the answer back).
    pub unanswered: BTreeSet<u64>,
}

/// Where a 429's `retry_after` applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FloodScope {
    /// One chat.
    Chat(i64),
    /// Every send of the bot.
    Bot,
}

/// The running tally and the waits Telegram asked for.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    counts: Violations,
    /// Per chat: (when the 429 was answered, when the wait ends).
    chat_waits: HashMap<i64, (Instant, Instant)>,
    bot_wait: Option<(Instant, Instant)>,
}

impl Watch {
    /// Counts a send to `chat` arriving at `at` if a wait asked for earlier had not run out.
    pub(crate) fn arrive(&mut self, chat: Option<i64>, at: Instant) {
        let chat_wait = chat.and_then(|chat| self.chat_waits.get(&chat).copied());
        let early = [chat_wait, self.bot_wait]
            .into_iter()
            .flatten()
            .any(|(asked, until)| at >= asked + IN_FLIGHT_GRACE && at < until);
        if early {
            self.counts.early_sends += 1;
        }
    }

    /// Notes a 429 answered at `at` asking to wait `retry_after` seconds in `scope`.
    pub(crate) fn asked_to_wait(&mut self, scope: FloodScope, retry_after: u64, at: Instant) {
        let until = at + Duration::from_secs(retry_after);
        let wait = match scope {
            FloodScope::Chat(chat) => self.chat_waits.entry(chat).or_insert((at, at)),
            FloodScope::Bot => self.bot_wait.get_or_insert((at, at)),
        };
        // A later, longer wait replaces the earlier one; a shorter one does not shorten it.
        if until > wait.1 {
            *wait = (at, until);
        }
    }

    /// Counts a send the rate limits refused.
    pub(crate) fn over_limit(&mut self) {
        self.counts.over_limit += 1;
    }

    /// Notes that the answer to call `seq` never reached its client.
    pub(crate) fn unanswered(&mut self, seq: u64) {
        self.counts.unanswered.insert(seq);
    }

    pub(crate) fn counts(&self) -> Violations {
        self.counts.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_inside_a_chat_wait_is_early_and_one_after_it_or_elsewhere_is_not() {
        let mut watch = Watch::default();
        let start = Instant::now();
        watch.asked_to_wait(FloodScope::Chat(5), 3, start);
        watch.arrive(Some(5), start + Duration::from_millis(50)); // in flight
        watch.arrive(Some(5), start + Duration::from_secs(1));
        watch.arrive(Some(6), start + Duration::from_secs(1));
        watch.arrive(Some(5), start + Duration::from_secs(3));
        assert_eq!(watch.counts().early_sends, 1);
    }

    #[test]
    fn a_bot_wide_wait_covers_every_chat() {
        let mut watch = Watch::default();
        let start = Instant::now();
        watch.asked_to_wait(FloodScope::Bot, 2, start);
        watch.arrive(Some(1), start + Duration::from_secs(1));
        watch.arrive(Some(2), start + Duration::from_secs(1));
        watch.arrive(None, start + Duration::from_secs(1));
        assert_eq!(watch.counts().early_sends, 3);
    }

    #[test]
    fn a_shorter_later_wait_does_not_shorten_a_longer_one() {
        let mut watch = Watch::default();
        let start = Instant::now();
        watch.asked_to_wait(FloodScope::Chat(1), 10, start);
        watch.asked_to_wait(FloodScope::Chat(1), 1, start + Duration::from_secs(1));
        watch.arrive(Some(1), start + Duration::from_secs(5));
        assert_eq!(watch.counts().early_sends, 1);
    }
}
