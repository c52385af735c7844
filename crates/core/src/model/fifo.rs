//! SQS FIFO's delivery rules, for the queues that implement them in process (the in-memory queue and
//! local mode's embedded queue): message groups (a group with a message in flight delivers nothing
//! else, and a hidden message holds back the rest of its group), visibility, receive counts, the
//! deduplication window, and redrive after too many receives.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::defaults::DEDUP_WINDOW;
use crate::ids::MessageGroupId;
use crate::record::Timestamp;

/// One message's delivery state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageState {
    /// `{bot_id}:{group key}`.
    pub group: MessageGroupId,
    /// When it was sent.
    pub sent_at: Timestamp,
    /// Before this instant it is hidden (in flight, or backing off); a message never received is
    /// visible at once.
    pub visible_at: Timestamp,
    /// Deliveries so far.
    pub receive_count: u32,
    /// When it was first delivered.
    #[serde(default)]
    pub first_received_at: Option<Timestamp>,
    /// The handle of its latest delivery; `None` until it is first received.
    pub receipt: Option<String>,
    /// Hidden because a receiver holds it (the visibility of its receive), rather than because the
    /// receiver showed it again later on purpose (a backoff).
    #[serde(default)]
    pub held: bool,
}

impl MessageState {
    /// A message just sent to `group`.
    pub fn sent(group: MessageGroupId, now: Timestamp) -> Self {
        Self {
            group,
            sent_at: now,
            visible_at: now,
            receive_count: 0,
            first_received_at: None,
            receipt: None,
            held: false,
        }
    }

    /// Whether a receiver holds it now: delivered and its visibility timeout not yet over.
    pub fn in_flight(&self, now: Timestamp) -> bool {
        self.receipt.is_some() && self.visible_at > now
    }

    /// Delivers it once more under `receipt`, hidden for `visibility`.
    pub fn deliver(&mut self, now: Timestamp, visibility: Duration, receipt: String) {
        self.receive_count += 1;
        self.visible_at = now.plus(visibility);
        self.first_received_at.get_or_insert(now);
        self.receipt = Some(receipt);
        self.held = true;
    }

    /// Its receiver shows it again after `after` (a backoff, or at once).
    pub fn show_after(&mut self, now: Timestamp, after: Duration) {
        self.visible_at = now.plus(after);
        self.held = false;
    }

    /// Makes it visible at once if a receiver still holds it: that receiver is known to be gone (the
    /// process that held the store's lock restarted). A backoff a receiver chose is kept. Returns
    /// whether it was released.
    pub fn release(&mut self, now: Timestamp) -> bool {
        if !(self.held && self.in_flight(now)) {
            return false;
        }
        self.visible_at = now;
        self.held = false;
        true
    }
}

/// What one receive will do, by message sequence (send order).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Messages to deliver, in send order.
    pub deliver: Vec<u64>,
    /// Messages received `max_receive_count` times: to the dead-letter queue instead.
    pub redrive: Vec<u64>,
}

/// Plans a receive of up to `max` messages over `messages` in send order: a group with a message
/// in flight (`in_flight`) is skipped, a hidden message holds back the rest of its group, a message
/// received `max_receive_count` times is redriven, and the rest are delivered, several of one group
/// in order if they come up.
pub fn plan<'a>(
    messages: impl IntoIterator<Item = (u64, &'a MessageState)>,
    in_flight: impl IntoIterator<Item = &'a MessageState>,
    now: Timestamp,
    max: usize,
    max_receive_count: u32,
) -> Plan {
    let mut blocked: HashSet<&MessageGroupId> = in_flight
        .into_iter()
        .filter(|m| m.in_flight(now))
        .map(|m| &m.group)
        .collect();
    let mut plan = Plan::default();
    for (seq, message) in messages {
        if plan.deliver.len() >= max {
            break;
        }
        if blocked.contains(&message.group) {
            continue;
        }
        if message.visible_at > now {
            blocked.insert(&message.group);
            continue;
        }
        if message.receive_count >= max_receive_count {
            plan.redrive.push(seq);
            continue;
        }
        plan.deliver.push(seq);
    }
    plan
}

/// What a redriven letter says happened to it.
pub fn redrive_error(max_receive_count: u32) -> String {
    format!("received {max_receive_count} times without being deleted")
}

/// The deduplication window: ids sent within [`DEDUP_WINDOW`] are dropped as repeats. Ids leave in
/// send order; the send time decides, not presence, so a store may forget late.
#[derive(Clone, Debug, Default)]
pub struct DedupWindow {
    sent: HashMap<String, Timestamp>,
    order: VecDeque<(Timestamp, String)>,
}

impl DedupWindow {
    /// Whether `id` was sent within the window before `now`.
    pub fn is_repeat(&self, id: &str, now: Timestamp) -> bool {
        self.sent
            .get(id)
            .is_some_and(|sent| now.since(*sent) < DEDUP_WINDOW)
    }

    /// When `id` was last remembered as sent, whether in the window or not (yet) forgotten.
    pub fn sent_at(&self, id: &str) -> Option<Timestamp> {
        self.sent.get(id).copied()
    }

    /// Remembers `id` as sent at `now`.
    pub fn remember(&mut self, id: &str, now: Timestamp) {
        self.sent.insert(id.to_owned(), now);
        self.order.push_back((now, id.to_owned()));
    }

    /// Forgets the ids sent a window or longer before `now`, and returns them with their send times
    /// (a store removes them from its table too).
    pub fn forget_old(&mut self, now: Timestamp) -> Vec<(Timestamp, String)> {
        let mut forgotten = Vec::new();
        while let Some((sent, _)) = self.order.front() {
            if now.since(*sent) < DEDUP_WINDOW {
                break;
            }
            let Some((sent, id)) = self.order.pop_front() else {
                break;
            };
            // A re-sent id has a newer entry further back; only its latest send time counts.
            if self.sent.get(&id) == Some(&sent) {
                self.sent.remove(&id);
            }
            forgotten.push((sent, id));
        }
        forgotten
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = Timestamp(1_000_000);
    const SEC: Duration = Duration::from_secs(1);

    fn group(name: &str) -> MessageGroupId {
        MessageGroupId::from_raw(format!("b:{name}"))
    }

    #[test]
    fn a_hidden_message_holds_back_its_group_and_in_flight_groups_deliver_nothing() {
        let mut a1 = MessageState::sent(group("a"), T0);
        a1.deliver(T0, 30 * SEC, "r".into());
        let a2 = MessageState::sent(group("a"), T0);
        let b1 = MessageState::sent(group("b"), T0);
        let mut c1 = MessageState::sent(group("c"), T0);
        c1.visible_at = T0.plus(5 * SEC);
        let c2 = MessageState::sent(group("c"), T0);
        let messages = [(1, &a1), (2, &a2), (3, &b1), (4, &c1), (5, &c2)];
        let plan = plan(messages, [&a1], T0, 10, 10);
        assert_eq!(plan.deliver, vec![3]);
    }

    #[test]
    fn a_restart_releases_held_messages_but_keeps_chosen_backoffs() {
        let mut held = MessageState::sent(group("a"), T0);
        held.deliver(T0, 70 * SEC, "r1".into());
        let mut backing_off = MessageState::sent(group("b"), T0);
        backing_off.deliver(T0, 70 * SEC, "r2".into());
        backing_off.show_after(T0, 30 * SEC);
        let later = T0.plus(SEC);
        assert!(held.release(later));
        assert!(!held.in_flight(later));
        assert!(!backing_off.release(later));
        assert!(backing_off.in_flight(later));
    }

    #[test]
    fn a_message_received_too_often_is_redriven_instead() {
        let mut m = MessageState::sent(group("a"), T0);
        m.receive_count = 3;
        let plan = plan([(1, &m)], [], T0, 10, 3);
        assert_eq!((plan.deliver, plan.redrive), (vec![], vec![1]));
    }

    #[test]
    fn the_dedup_window_counts_from_the_latest_send() {
        let mut window = DedupWindow::default();
        window.remember("x", T0);
        assert!(window.is_repeat("x", T0.plus(299 * SEC)));
        assert!(!window.is_repeat("x", T0.plus(300 * SEC)));
        window.remember("x", T0.plus(300 * SEC));
        assert_eq!(window.forget_old(T0.plus(301 * SEC)).len(), 1);
        assert!(
            window.is_repeat("x", T0.plus(301 * SEC)),
            "the newer send still counts"
        );
    }
}
