//! Timers in the embedded store (docs/design/time.md): the worker hands over what a finished
//! run scheduled, the store keeps each until it is due, and `tgq local`'s timer loop moves the
//! due ones onto the queue in the commit that removes them, so a timer is never both kept and
//! queued, nor neither. One due while the process was down is moved at the next start.

use async_trait::async_trait;
use bytes::Bytes;
use redb::ReadableTable;
use serde::{Deserialize, Serialize};

use tgq_core::error::PortError;
use tgq_core::ids::{BotId, GroupKey, MessageGroupId, StateKey};
use tgq_core::ports::{OutgoingMessage, TimerScheduler};
use tgq_core::record::Timestamp;
use tgq_core::timer::{ChatTime, TimerMessage};

use crate::schema::{decode_state, encode_state, frame, unframe, STATES, TIMERS, TIMER_IDS};
use crate::writer::{OpError, Tx};
use crate::{EmbeddedStore, StoreError};

/// What the [`TIMERS`] table keeps beside a timer's body.
#[derive(Serialize, Deserialize)]
struct StoredTimer {
    /// The queue message group it is delivered to, `{bot_id}:{group key}`.
    group_id: String,
}

/// A chat's pending timer, as `tgq timers list` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingTimer {
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

/// What [`EmbeddedStore::cancel_timer`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancelled {
    /// The timer was pending and is cancelled: when it comes due it is acknowledged without
    /// running.
    Cancelled,
    /// The chat has no pending timer of that key.
    NotPending,
}

impl Tx<'_> {
    fn schedule_timers(&mut self, timers: &[TimerMessage]) -> Result<(), OpError> {
        for timer in timers {
            let id = timer.dedup_id();
            let mut ids = self.table_mut(TIMER_IDS)?;
            // Handed over again by a retried run: kept once, at the time first given.
            if ids.get(id.as_str())?.is_some() {
                continue;
            }
            ids.insert(id.as_str(), timer.due.0)?;
            drop(ids);
            let meta = StoredTimer {
                group_id: MessageGroupId::new(&timer.bot_id, &timer.group).to_string(),
            };
            let value = frame(&meta, &timer.body())?;
            self.table_mut(TIMERS)?
                .insert((timer.due.0, id.as_str()), value.as_slice())?;
        }
        Ok(())
    }

    fn fire_due_timers(&mut self, now: Timestamp, max: usize) -> Result<u64, OpError> {
        let due: Vec<(u64, String, Vec<u8>)> = {
            let timers = self.table(TIMERS)?;
            let mut due = Vec::new();
            for entry in timers.range::<(u64, &str)>(..)?.take(max) {
                let (key, value) = entry?;
                let (at, id) = key.value();
                if at > now.0 {
                    break;
                }
                due.push((at, id.to_owned(), value.value().to_vec()));
            }
            due
        };
        for (at, id, value) in &due {
            let (meta, body) = unframe::<StoredTimer>(value)?;
            self.table_mut(TIMERS)?.remove((*at, id.as_str()))?;
            self.table_mut(TIMER_IDS)?.remove(id.as_str())?;
            self.enqueue(&OutgoingMessage {
                group_id: MessageGroupId::from_raw(meta.group_id),
                dedup_id: id.clone(),
                body: Bytes::copy_from_slice(body),
            })?;
        }
        Ok(due.len() as u64)
    }

    fn cancel_timer(&mut self, key: &StateKey, timer: &str) -> Result<Cancelled, OpError> {
        let stored = {
            let states = self.table(STATES)?;
            let value = states.get(key.pk().as_str())?;
            match value {
                Some(value) => decode_state(value.value())?,
                None => return Ok(Cancelled::NotPending),
            }
        };
        let mut time = ChatTime::decode(stored.time.as_deref());
        if time.timers.remove(timer).is_none() {
            return Ok(Cancelled::NotPending);
        }
        // A new version: a run that read the old one is refused at its settle and runs again on
        // this one, so it cannot write the timer back.
        let state = tgq_core::state::StoredState {
            version: stored.version + 1,
            time: time.encode(),
            ..stored
        };
        self.table_mut(STATES)?
            .insert(key.pk().as_str(), encode_state(&state)?.as_slice())?;
        Ok(Cancelled::Cancelled)
    }
}

#[async_trait]
impl TimerScheduler for EmbeddedStore {
    async fn schedule(&self, timers: &[TimerMessage], _now: Timestamp) -> Result<(), PortError> {
        let timers = timers.to_vec();
        self.writer
            .run("schedule timers", move |tx| tx.schedule_timers(&timers))
            .await?;
        self.timers_changed.notify_one();
        Ok(())
    }
}

impl EmbeddedStore {
    /// Moves up to `max` timers due at `now` onto the queue, earliest first, in one commit that
    /// also removes them; how many it moved.
    pub async fn fire_due_timers(&self, now: Timestamp, max: usize) -> Result<u64, PortError> {
        self.writer
            .run("fire timers", move |tx| tx.fire_due_timers(now, max))
            .await
    }

    /// When the earliest kept timer is due, if any is kept. Blocking: reads on the calling thread.
    pub fn next_timer_due(&self) -> Result<Option<Timestamp>, StoreError> {
        let read = self.db.get()?.begin_read()?;
        let timers = read.open_table(TIMERS)?;
        let first = timers.first()?;
        Ok(first.map(|(key, _)| Timestamp(key.value().0)))
    }

    /// Completes when a timer was handed over since the last call: the timer loop then looks at
    /// the earliest due time again.
    pub async fn timer_scheduled(&self) {
        self.timers_changed.notified().await;
    }

    /// The pending timers of every chat, earliest first, at most `limit`, as the chats' states
    /// name them. Blocking: reads on the calling thread.
    pub fn pending_timers(&self, limit: usize) -> Result<Vec<PendingTimer>, StoreError> {
        let read = self.db.get()?.begin_read()?;
        let mut pending = Vec::new();
        for entry in read.open_table(STATES)?.iter()? {
            let (key, value) = entry?;
            let pk = key.value();
            let state =
                decode_state(value.value()).map_err(StoreError::corrupt(format!("state {pk}")))?;
            let Some((bot_id, chat)) = StateKey::split_pk(pk) else {
                continue;
            };
            for (timer, at) in ChatTime::decode(state.time.as_deref()).timers {
                pending.push(PendingTimer {
                    bot_id: bot_id.to_owned(),
                    chat: chat.to_owned(),
                    key: timer,
                    due: at.due,
                    id: at.id,
                });
            }
        }
        pending.sort_by(|a, b| (a.due, &a.chat, &a.key).cmp(&(b.due, &b.chat, &b.key)));
        pending.truncate(limit);
        Ok(pending)
    }

    /// Cancels chat `chat`'s pending timer `key` of bot `bot_id`.
    pub async fn cancel_timer(
        &self,
        bot_id: &BotId,
        chat: &GroupKey,
        key: &str,
    ) -> Result<Cancelled, PortError> {
        let state_key = StateKey::new(bot_id.clone(), chat.clone());
        let key = key.to_owned();
        self.writer
            .run("cancel timer", move |tx| tx.cancel_timer(&state_key, &key))
            .await
    }
}
