//! The queue `getUpdates` serves from.

use std::collections::VecDeque;

use serde_json::Value;

/// Pushed updates not yet confirmed by a later `offset`.
#[derive(Debug)]
pub(crate) struct Updates {
    queue: VecDeque<Value>,
    next_id: i64,
    /// The `update_id` of every update a `getUpdates` answer carried, in answer order, repeats
    /// included.
    handed_out: Vec<i64>,
}

impl Default for Updates {
    fn default() -> Self {
        Self {
            queue: VecDeque::new(),
            next_id: 1,
            handed_out: Vec::new(),
        }
    }
}

impl Updates {
    /// Queues an update, giving it the next `update_id` when it has none.
    pub(crate) fn push(&mut self, mut update: Value) {
        match update_id(&update) {
            Some(id) => self.next_id = self.next_id.max(id.saturating_add(1)),
            None => {
                if let Some(fields) = update.as_object_mut() {
                    fields.insert("update_id".to_owned(), self.next_id.into());
                    self.next_id += 1;
                }
            }
        }
        self.queue.push_back(update);
    }

    /// Applies `getUpdates`' offset: a positive one confirms (drops) every update below it, a
    /// negative one keeps only that many of the newest updates.
    pub(crate) fn confirm(&mut self, offset: i64) {
        if offset > 0 {
            self.queue
                .retain(|update| update_id(update).is_some_and(|id| id >= offset));
        }
        if offset < 0 {
            let keep = usize::try_from(offset.unsigned_abs()).unwrap_or(usize::MAX);
            let excess = self.queue.len().saturating_sub(keep);
            self.queue.drain(..excess);
        }
    }

    /// The oldest `limit` updates, left in the queue until confirmed.
    pub(crate) fn peek(&self, limit: usize) -> Vec<Value> {
        self.queue.iter().take(limit).cloned().collect()
    }

    /// Notes the updates a `getUpdates` answer is about to carry.
    pub(crate) fn hand_out(&mut self, updates: &[Value]) {
        self.handed_out.extend(updates.iter().filter_map(update_id));
    }

    /// What [`Updates::hand_out`] noted so far.
    pub(crate) fn handed_out(&self) -> &[i64] {
        &self.handed_out
    }

    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }

    pub(crate) fn clear(&mut self) {
        self.queue.clear();
    }
}

fn update_id(update: &Value) -> Option<i64> {
    update.get("update_id")?.as_i64()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn updates_without_an_id_are_numbered_after_the_highest_seen() {
        let mut updates = Updates::default();
        updates.push(json!({"update_id": 10, "message": {}}));
        updates.push(json!({"message": {}}));

        assert_eq!(updates.peek(2)[1]["update_id"], 11);
    }

    #[test]
    fn a_negative_offset_keeps_only_the_newest_updates() {
        let mut updates = Updates::default();
        for id in 1..=5 {
            updates.push(json!({ "update_id": id }));
        }

        updates.confirm(-2);

        assert_eq!(
            updates.peek(10),
            vec![json!({"update_id": 4}), json!({"update_id": 5})]
        );
    }
}
