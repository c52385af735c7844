//! The traffic of a scenario: Bot-API-shaped updates over many chats, each with what the echo bot
//! must make of it, and the poison bodies mixed in.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde_json::{json, Value};

/// What the pipeline must make of one update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// One reply (`echo {id}: {text}`), in its chat's order.
    Reply,
    /// One reply at most, sent at most once (`/once …`).
    ReplyAtMostOnce,
    /// Dead-lettered, and no reply.
    Dead,
    /// No reply and no dead letter: the recipient left (403), settled as `recipient_gone`.
    Gone,
}

/// One planned update.
#[derive(Clone, Debug)]
pub struct Planned {
    /// Its `update_id`.
    pub update_id: i64,
    /// The private chat (and user) it comes from.
    pub chat: i64,
    /// The message text.
    pub text: String,
    /// What must become of it.
    pub expect: Expect,
    /// Bytes of filler in the sender's `last_name`, which the echo bot never reads: a body that
    /// large makes every stored update take that much room.
    pub padding: usize,
    /// Whether the update schedules a timer (`/later MS …`) whose own reply (`echo timer U: …`)
    /// must reach its chat once, after the update's.
    pub timer: bool,
}

impl Planned {
    /// Update `update_id` from `chat` with `text`: no filler, no timer.
    pub fn new(update_id: i64, chat: i64, text: String, expect: Expect) -> Planned {
        Planned {
            update_id,
            chat,
            text,
            expect,
            padding: 0,
            timer: false,
        }
    }

    /// The update as Telegram posts it.
    pub fn body(&self) -> String {
        let mut update = message(self.update_id, self.chat, &self.text);
        if self.padding > 0 {
            update["message"]["from"]["last_name"] = Value::String("x".repeat(self.padding));
        }
        update.to_string()
    }
}

/// A text message from user `chat` in their private chat with the bot, as Telegram sends it.
pub fn message(update_id: i64, chat: i64, text: &str) -> Value {
    let user = json!({ "id": chat, "is_bot": false, "first_name": format!("User {chat}") });
    json!({
        "update_id": update_id,
        "message": {
            "message_id": update_id % 1_000_000,
            "from": user,
            "chat": { "id": chat, "first_name": format!("User {chat}"), "type": "private" },
            "date": 1_767_607_200 + update_id % 100_000,
            "text": text,
        }
    })
}

/// A scenario's traffic.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Updates in update-id order.
    pub updates: Vec<Planned>,
    /// Bodies that are not updates, posted among them; each must be answered 200 and
    /// dead-lettered.
    pub poison: Vec<String>,
}

impl Plan {
    /// `count` ordinary updates over `chats` chats, update ids from `first_id` in the order a
    /// seeded shuffle interleaves the chats (each chat's own updates stay in id order).
    pub fn ordinary(count: usize, chats: i64, first_id: i64, seed: u64) -> Plan {
        let chats = chats.max(1);
        let mut slots: Vec<i64> = (0..count).map(|i| 1 + (i as i64 % chats)).collect();
        slots.shuffle(&mut StdRng::seed_from_u64(seed));
        let mut per_chat = std::collections::HashMap::<i64, u32>::new();
        let updates = slots
            .into_iter()
            .enumerate()
            .map(|(i, chat)| {
                let n = per_chat.entry(chat).or_default();
                *n += 1;
                Planned::new(
                    first_id + i as i64,
                    chat,
                    format!("c{chat} m{n}"),
                    Expect::Reply,
                )
            })
            .collect();
        Plan::new(updates)
    }

    /// Traffic of `updates` alone, no poison bodies.
    pub fn new(updates: Vec<Planned>) -> Plan {
        Plan {
            updates,
            poison: Vec::new(),
        }
    }

    /// The same traffic with every `every`-th update (the first included) scheduling a timer
    /// `ms` milliseconds ahead: replies and timers through the same faults.
    pub fn with_timers(mut self, every: usize, ms: u64) -> Plan {
        for planned in self.updates.iter_mut().step_by(every.max(1)) {
            planned.text = format!("/later {ms} {}", planned.text);
            planned.timer = true;
        }
        self
    }

    /// The same traffic with `bytes` of filler in every update's body.
    pub fn padded(mut self, bytes: usize) -> Plan {
        for planned in &mut self.updates {
            planned.padding = bytes;
        }
        self
    }

    /// The update with this id.
    pub fn get(&self, update_id: i64) -> Option<&Planned> {
        self.updates
            .binary_search_by_key(&update_id, |p| p.update_id)
            .ok()
            .map(|i| &self.updates[i])
    }

    /// Every chat, in ascending order.
    pub fn chats(&self) -> Vec<i64> {
        let mut chats: Vec<i64> = self.updates.iter().map(|p| p.chat).collect();
        chats.sort_unstable();
        chats.dedup();
        chats
    }

    /// Rewrites the updates of `chat` with `f`.
    pub fn edit_chat(&mut self, chat: i64, mut f: impl FnMut(usize, &mut Planned)) {
        for (k, planned) in self
            .updates
            .iter_mut()
            .filter(|p| p.chat == chat)
            .enumerate()
        {
            f(k, planned);
        }
    }
}

/// `count` distinct bodies a webhook must treat as poison: not JSON, JSON that is not an update,
/// an update id of the wrong type, a message without a chat.
pub fn poison_bodies(count: usize) -> Vec<String> {
    (0..count)
        .map(|i| match i % 4 {
            0 => format!("not json {i}"),
            1 => format!(r#"{{"update_id":"x{i}"}}"#),
            2 => format!(r#"[{i}, {{"update_id": 1}}]"#),
            _ => format!(
                r#"{{"update_id":{},"message":{{"text":"no chat {i}"}}}}"#,
                -1 - i as i64
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_traffic_keeps_each_chats_updates_in_id_order_and_is_the_same_for_a_seed() {
        let plan = Plan::ordinary(100, 7, 1000, 42);
        assert_eq!(plan.updates.len(), 100);
        assert_eq!(plan.chats().len(), 7);
        for chat in plan.chats() {
            let texts: Vec<&str> = plan
                .updates
                .iter()
                .filter(|p| p.chat == chat)
                .map(|p| p.text.as_str())
                .collect();
            assert_eq!(texts[0], format!("c{chat} m1"));
        }
        let again = Plan::ordinary(100, 7, 1000, 42);
        let chats = |p: &Plan| p.updates.iter().map(|u| u.chat).collect::<Vec<_>>();
        assert_eq!(chats(&plan), chats(&again));
        assert_ne!(chats(&plan), chats(&Plan::ordinary(100, 7, 1000, 43)));
    }

    #[test]
    fn timers_go_to_every_nth_update_and_say_when_in_their_text() {
        let plan = Plan::ordinary(10, 3, 1, 1).with_timers(4, 250);
        let timed: Vec<i64> = plan
            .updates
            .iter()
            .filter(|p| p.timer)
            .map(|p| p.update_id)
            .collect();
        assert_eq!(timed, [1, 5, 9]);
        assert!(plan.updates[0].text.starts_with("/later 250 c"));
        assert!(!plan.updates[1].text.starts_with("/later"));
    }

    #[test]
    fn a_padded_update_is_that_much_larger_and_still_an_update_of_its_chat() {
        let plan = Plan::ordinary(3, 1, 7, 1);
        let plain = plan.updates[0].body();
        let padded = plan.padded(10_000).updates[0].body();
        let field = ",\"last_name\":\"\"".len();
        assert_eq!(padded.len(), plain.len() + 10_000 + field);
        let envelope = tgq_core::envelope::Envelope::parse(padded.as_bytes()).unwrap();
        assert_eq!(envelope.update_id.0, 7);
        assert_eq!(
            envelope.group,
            tgq_core::envelope::Envelope::parse(plain.as_bytes())
                .unwrap()
                .group
        );
    }

    #[test]
    fn poison_bodies_are_distinct_and_none_is_an_update() {
        let bodies = poison_bodies(8);
        let distinct: std::collections::BTreeSet<_> = bodies.iter().collect();
        assert_eq!(distinct.len(), 8);
        for body in &bodies {
            assert!(
                tgq_core::envelope::Envelope::parse(body.as_bytes()).is_err(),
                "{body}"
            );
        }
    }
}
