//! A stack's pending timers as `tgq timers list | cancel --stack` reads and changes them
//! (docs/design/time.md): the `time` attribute of each chat's state item.

use tgq_core::ids::StateKey;
use tgq_core::timer::ChatTime;
use tgq_core::PortError;

use crate::dynamo::DynamoStore;
use crate::error::port_error;
use crate::item::{self, number, string};

const SCAN: &str = "DynamoDB Scan";
const UPDATE: &str = "DynamoDB UpdateItem";

/// How often a cancel reads the state again after a run changed it in between.
const CANCEL_ROUNDS: usize = 5;

/// One pending timer of a stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackTimer {
    /// Whose.
    pub bot_id: String,
    /// The chat's group.
    pub chat: String,
    /// Its key.
    pub key: String,
    /// When it is due, in milliseconds since the epoch.
    pub due: u64,
    /// Its update id.
    pub id: i64,
}

impl DynamoStore {
    /// Every chat's pending timers, earliest due first, at most `limit`. A Scan of the whole table
    /// filtered to the state items with timers.
    pub async fn pending_timers(&self, limit: usize) -> Result<Vec<StackTimer>, PortError> {
        let mut timers = Vec::new();
        for (pk, found) in self.scan_having(item::TIME).await? {
            let Some((bot_id, chat)) = StateKey::split_pk(&pk) else {
                continue;
            };
            let state = found.state().map_err(|e| PortError::rejected(SCAN, e))?;
            let time = ChatTime::decode(state.time.as_deref());
            for (key, pending) in time.timers {
                timers.push(StackTimer {
                    bot_id: bot_id.to_owned(),
                    chat: chat.to_owned(),
                    key,
                    due: pending.due,
                    id: pending.id,
                });
            }
        }
        timers.sort_by(|a, b| (a.due, &a.bot_id, &a.chat).cmp(&(b.due, &b.bot_id, &b.chat)));
        timers.truncate(limit);
        Ok(timers)
    }

    /// Removes the chat's pending timer `timer` and moves the state's version on, in one write
    /// conditional on the version read: a run that read the old version is refused at its settle
    /// and runs again without the timer. Returns the cancelled timer's id, or `None` when the chat
    /// has no pending timer of that key.
    pub async fn cancel_timer(
        &self,
        key: &StateKey,
        timer: &str,
    ) -> Result<Option<i64>, PortError> {
        for _ in 0..CANCEL_ROUNDS {
            let Some(state) = self.state_of(key).await? else {
                return Ok(None);
            };
            let mut time = ChatTime::decode(state.time.as_deref());
            let Some(pending) = time.timers.remove(timer) else {
                return Ok(None);
            };
            let update = self
                .client()
                .update_item()
                .table_name(self.table())
                .set_key(Some(item::state_key(key)))
                .condition_expression("#version = :read")
                .expression_attribute_names("#version", item::VERSION)
                .expression_attribute_names("#time", item::TIME)
                .expression_attribute_values(":read", number(state.version))
                .expression_attribute_values(":next", number(state.version + 1));
            let update = match time.encode() {
                Some(encoded) => update
                    .update_expression("SET #version = :next, #time = :time")
                    .expression_attribute_values(":time", string(encoded)),
                None => update.update_expression("SET #version = :next REMOVE #time"),
            };
            match update.send().await {
                Ok(_) => return Ok(Some(pending.id)),
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
                {
                    continue;
                }
                Err(e) => return Err(port_error(UPDATE, e)),
            }
        }
        Err(PortError::unavailable(
            UPDATE,
            "the chat's state kept changing while the timer was being cancelled; try again",
        ))
    }
}
