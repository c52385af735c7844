//! Reading updates one by one, for `tgq local`'s console: the newest records with where each
//! stands on the queue, one record whole with what its runs did, and the chats with what holds
//! them. Snapshot reads on the calling thread, never through the writer.

use std::collections::BTreeMap;

use redb::{ReadTransaction, ReadableTable};
use serde::Serialize;
use tgq_core::envelope::Envelope;
use tgq_core::fifo::MessageState;
use tgq_core::ids::{BotId, RecordKey, UpdateId};
use tgq_core::record::{ActionRecord, Status, Timestamp, UpdateRecord};

use crate::journal::JournalEntry;
use crate::schema::{
    decode_record, decode_state, unframe, OUTBOX, QUEUE, RECORDS, RECORD_EXPIRY, STATES,
};
use crate::{EmbeddedStore, OutboxEntry, PendingTimer, StoreError};

/// How many of the newest records, and of the newest outbox entries, a conversation looks
/// through for its chat's: a quiet chat in a busy store shows what these hold of it.
pub const CONVERSATION_SCAN: usize = 10_000;

/// One update as the console's feed shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UpdateView {
    /// Its bot.
    pub bot_id: String,
    /// Telegram's update id.
    pub update_id: i64,
    /// Its kind (`message`, `callback_query`, …).
    pub kind: String,
    /// Its ordering group (the chat, `user:…`, …).
    pub group: String,
    /// What it says, cut to 80 characters: a message's text or caption, a button's data.
    pub says: Option<String>,
    /// `RECEIVED`, `QUEUED`, `PROCESSING`, `RETRYING`, `DONE` or `DEAD`.
    pub status: &'static str,
    /// Handler runs so far.
    pub attempts: u32,
    /// When the webhook stored it, in milliseconds since the epoch.
    pub received_at: u64,
    /// When its first run started.
    pub first_attempt_at: Option<u64>,
    /// The last failed run's error, without message text.
    pub last_error: Option<String>,
    /// Its message on the queue, while it has one.
    pub queued: Option<QueuedView>,
    /// Why it was given up on, once it is `DEAD`.
    pub burial: Option<BurialView>,
}

/// An update's message on the queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct QueuedView {
    /// Deliveries so far.
    pub receives: u32,
    /// A run holds it now.
    pub running: bool,
    /// When it is delivered again, while it is hidden for a backoff (milliseconds since the
    /// epoch); `None` when it is running or can be delivered at once.
    pub runs_again_at: Option<u64>,
}

/// Why an update is dead.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BurialView {
    /// `permanent_error`, `attempts_exhausted`, …
    pub reason: &'static str,
    /// The class of the last failure.
    pub class: &'static str,
    /// The last failure's description.
    pub error: String,
}

/// One update whole.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct UpdateDetail {
    /// What the feed shows of it.
    #[serde(flatten)]
    pub update: UpdateView,
    /// The update exactly as received: its JSON, or the text of a body that is not JSON.
    pub payload: serde_json::Value,
    /// Every call and step its runs recorded, in order.
    pub actions: Vec<ActionView>,
    /// The chat's state now (its JSON text); `None` when the chat has none.
    pub state_now: Option<String>,
    /// The chat's pending timers and flow timeouts.
    pub timers: Vec<PendingTimer>,
    /// The outbox entries its runs made (offline), oldest first.
    pub sent: Vec<OutboxEntry>,
    /// What the store did to it while this process has held the store (in memory).
    pub journal: Vec<JournalEntry>,
}

/// One recorded call or step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ActionView {
    /// Its place in the run.
    pub seq: u32,
    /// The action as recorded: method, delivery and outcome (`pending` is "uncertain" once its
    /// run is over).
    #[serde(flatten)]
    pub action: ActionRecord,
}

/// A chat (an ordering group) as the console shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChatView {
    /// Its bot.
    pub bot_id: String,
    /// The group (`42`, `user:7`, …).
    pub group: String,
    /// Its state's JSON text, when it has one.
    pub state: Option<String>,
    /// How many times its state was written.
    pub state_version: u64,
    /// Its updates on the queue in order: the first is the head that holds the rest.
    pub pending: Vec<PendingView>,
}

/// An update waiting on the queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PendingView {
    /// Its update id, when the body names one.
    pub update_id: Option<i64>,
    /// Its record's status, when the record is there.
    pub status: Option<&'static str>,
    /// Handler runs spent.
    pub attempts: u32,
    /// The last failed run's error.
    pub last_error: Option<String>,
    /// Where it stands on the queue.
    pub queued: QueuedView,
}

impl EmbeddedStore {
    /// The newest `limit` updates (by the time they were received), newest first, at `now`.
    /// Blocking: reads on the calling thread.
    pub fn recent_updates(
        &self,
        limit: usize,
        now: Timestamp,
    ) -> Result<Vec<UpdateView>, StoreError> {
        let read = self.db.get()?.begin_read()?;
        let queued = queued_by_record(&read, now)?;
        let records = read.open_table(RECORDS)?;
        let mut views = Vec::new();
        // The expiry index is in receive order: every record expires one TTL after it came.
        for entry in read
            .open_table(RECORD_EXPIRY)?
            .range::<(u64, &str)>(..)?
            .rev()
        {
            if views.len() == limit {
                break;
            }
            let (key, _) = entry?;
            let (_, pk) = key.value();
            let Some(value) = records.get(pk)? else {
                continue;
            };
            let record = decode_record(value.value())
                .map_err(StoreError::corrupt(format!("record {pk}")))?;
            if record.is_expired(now) {
                continue;
            }
            let queued = queued.get(pk).cloned();
            views.push(view_of(&record, queued));
        }
        Ok(views)
    }

    /// One update whole, or `None` when the store has no such record. Blocking.
    pub fn update_detail(
        &self,
        bot_id: &BotId,
        update_id: i64,
        now: Timestamp,
    ) -> Result<Option<UpdateDetail>, StoreError> {
        let key = RecordKey::new(bot_id.clone(), UpdateId(update_id));
        let pk = key.pk();
        let read = self.db.get()?.begin_read()?;
        let record = match read.open_table(RECORDS)?.get(pk.as_str())? {
            Some(value) => {
                decode_record(value.value()).map_err(StoreError::corrupt(format!("record {pk}")))?
            }
            None => return Ok(None),
        };
        let queued = queued_by_record(&read, now)?.remove(pk.as_str());
        let state_key = tgq_core::ids::StateKey::new(bot_id.clone(), record.group.clone()).pk();
        let state_now = match read.open_table(STATES)?.get(state_key.as_str())? {
            Some(value) => Some(
                decode_state(value.value())
                    .map_err(StoreError::corrupt(format!("state {state_key}")))?
                    .json,
            ),
            None => None,
        };
        let payload = match serde_json::from_slice(&record.payload) {
            Ok(json) => json,
            Err(_) => {
                serde_json::Value::from(String::from_utf8_lossy(&record.payload).into_owned())
            }
        };
        let timers = self
            .pending_timers(usize::MAX)?
            .into_iter()
            .filter(|t| t.bot_id == bot_id.as_str() && t.chat == record.group.as_str())
            .collect();
        let sent = sent_by(&read, bot_id.as_str(), update_id, record.received_at)?;
        let actions = record
            .actions
            .iter()
            .map(|(seq, action)| ActionView {
                seq: *seq,
                action: action.clone(),
            })
            .collect();
        Ok(Some(UpdateDetail {
            update: view_of(&record, queued),
            payload,
            actions,
            state_now,
            timers,
            sent,
            journal: self.journal_of(&pk),
        }))
    }

    /// The highest update id stored for `bot_id`, expired records included. Blocking.
    pub fn highest_update_id(&self, bot_id: &BotId) -> Result<Option<i64>, StoreError> {
        let read = self.db.get()?.begin_read()?;
        let records = read.open_table(RECORDS)?;
        // Keys are `{bot_id}#{update_id:020}`: a bot's records are one range, in update id order
        // (ids are never negative).
        let start = format!("{bot_id}#");
        let end = format!("{bot_id}$");
        let last = records
            .range::<&str>(start.as_str()..end.as_str())?
            .next_back();
        match last {
            Some(entry) => {
                let (_, value) = entry?;
                let record = decode_record(value.value())
                    .map_err(StoreError::corrupt(format!("a record of {bot_id}")))?;
                Ok(Some(record.key.update_id.0))
            }
            None => Ok(None),
        }
    }

    /// The newest `limit` updates of one chat with their bodies, and the newest `limit` outbox
    /// entries addressed to it, each oldest first: the conversation the console draws. Blocking.
    pub fn conversation(
        &self,
        bot_id: &BotId,
        group: &str,
        limit: usize,
        now: Timestamp,
    ) -> Result<Conversation, StoreError> {
        let read = self.db.get()?.begin_read()?;
        let queued = queued_by_record(&read, now)?;
        let records = read.open_table(RECORDS)?;
        let mut updates = Vec::new();
        for entry in read
            .open_table(RECORD_EXPIRY)?
            .range::<(u64, &str)>(..)?
            .rev()
        {
            if updates.len() == limit {
                break;
            }
            let (key, _) = entry?;
            let (_, pk) = key.value();
            if !pk.starts_with(bot_id.as_str()) {
                continue;
            }
            let Some(value) = records.get(pk)? else {
                continue;
            };
            let record = decode_record(value.value())
                .map_err(StoreError::corrupt(format!("record {pk}")))?;
            if record.key.bot_id != *bot_id
                || record.group.as_str() != group
                || record.is_expired(now)
            {
                continue;
            }
            let payload =
                serde_json::from_slice(&record.payload).unwrap_or(serde_json::Value::Null);
            updates.push(SaidView {
                update: view_of(&record, queued.get(pk).cloned()),
                payload,
            });
        }
        updates.reverse();
        let chat_id: Option<i64> = group.parse().ok();
        let mut sent = Vec::new();
        if chat_id.is_some() {
            for entry in read
                .open_table(OUTBOX)?
                .iter()?
                .rev()
                .take(CONVERSATION_SCAN)
            {
                if sent.len() == limit {
                    break;
                }
                let entry = outbox_entry(entry?)?;
                if entry.chat_id == chat_id
                    && entry.bot_id.as_deref().is_none_or(|b| b == bot_id.as_str())
                {
                    sent.push(entry);
                }
            }
        }
        sent.reverse();
        Ok(Conversation { updates, sent })
    }

    /// Every chat that has a state or updates on the queue, the busiest queue first. Blocking.
    pub fn chats(&self, now: Timestamp) -> Result<Vec<ChatView>, StoreError> {
        let read = self.db.get()?.begin_read()?;
        let mut chats: BTreeMap<(String, String), ChatView> = BTreeMap::new();
        for entry in read.open_table(STATES)?.iter()? {
            let (key, value) = entry?;
            let Some((bot_id, group)) = tgq_core::ids::StateKey::split_pk(key.value()) else {
                continue;
            };
            let state = decode_state(value.value())
                .map_err(StoreError::corrupt(format!("state {}", key.value())))?;
            let view = chat_in(&mut chats, bot_id, group);
            view.state = Some(state.json);
            view.state_version = state.version;
        }
        let records = read.open_table(RECORDS)?;
        for (message, update_id) in queue_messages(&read)? {
            let Ok((bot, group)) = message.group.split() else {
                continue;
            };
            let record = match update_id {
                Some(id) => {
                    let pk = RecordKey::new(bot.clone(), id).pk();
                    match records.get(pk.as_str())? {
                        Some(value) => Some(
                            decode_record(value.value())
                                .map_err(StoreError::corrupt(format!("record {pk}")))?,
                        ),
                        None => None,
                    }
                }
                None => None,
            };
            chat_in(&mut chats, bot.as_str(), group.as_str())
                .pending
                .push(PendingView {
                    update_id: update_id.map(|id| id.0),
                    status: record.as_ref().map(|r| r.status.as_str()),
                    attempts: record.as_ref().map_or(0, |r| r.attempts),
                    last_error: record.and_then(|r| r.last_error),
                    queued: queued_view(&message, now),
                });
        }
        let mut chats: Vec<ChatView> = chats.into_values().collect();
        chats.sort_by_key(|chat| std::cmp::Reverse(chat.pending.len()));
        Ok(chats)
    }
}

/// A chat's recent updates and what the bot sent it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Conversation {
    /// Its updates, oldest first, with their bodies.
    pub updates: Vec<SaidView>,
    /// The outbox entries addressed to it, oldest first.
    pub sent: Vec<OutboxEntry>,
}

/// An update with its body.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SaidView {
    /// What the feed shows of it.
    #[serde(flatten)]
    pub update: UpdateView,
    /// Its JSON (`null` for a body that is not JSON).
    pub payload: serde_json::Value,
}

/// The view of a chat in `chats`, made empty when it is not there yet.
fn chat_in<'c>(
    chats: &'c mut BTreeMap<(String, String), ChatView>,
    bot_id: &str,
    group: &str,
) -> &'c mut ChatView {
    chats
        .entry((bot_id.to_owned(), group.to_owned()))
        .or_insert_with(|| ChatView {
            bot_id: bot_id.to_owned(),
            group: group.to_owned(),
            state: None,
            state_version: 0,
            pending: Vec::new(),
        })
}

/// The feed's view of a record.
fn view_of(record: &UpdateRecord, queued: Option<QueuedView>) -> UpdateView {
    let kind = Envelope::parse_queued(&record.payload)
        .map_or_else(|_| String::from("unknown"), |envelope| envelope.kind);
    UpdateView {
        bot_id: record.key.bot_id.as_str().to_owned(),
        update_id: record.key.update_id.0,
        says: says(&record.payload, &kind),
        kind,
        group: record.group.as_str().to_owned(),
        status: record.status.as_str(),
        attempts: record.attempts,
        received_at: record.received_at.0,
        first_attempt_at: record.first_attempt_at.map(|t| t.0),
        last_error: record.last_error.clone(),
        queued: queued.filter(|_| !matches!(record.status, Status::Done | Status::Dead)),
        burial: record.burial.as_ref().map(|burial| BurialView {
            reason: burial.reason.as_str(),
            class: burial.class.as_str(),
            error: burial.error.clone(),
        }),
    }
}

/// What an update says, for the feed: the text or caption of its message, or its button's data.
fn says(payload: &[u8], kind: &str) -> Option<String> {
    const MOST: usize = 80;
    let update: serde_json::Value = serde_json::from_slice(payload).ok()?;
    let part = &update[kind];
    let text = part["text"]
        .as_str()
        .or_else(|| part["caption"].as_str())
        .or_else(|| part["data"].as_str())
        .or_else(|| part["query"].as_str())?;
    Some(match text.char_indices().nth(MOST) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    })
}

fn queued_view(message: &MessageState, now: Timestamp) -> QueuedView {
    let hidden = message.visible_at > now;
    QueuedView {
        receives: message.receive_count,
        running: hidden && message.held,
        runs_again_at: (hidden && !message.held).then_some(message.visible_at.0),
    }
}

/// Every queue message in send order, with the update id its body names.
fn queue_messages(
    read: &ReadTransaction,
) -> Result<Vec<(MessageState, Option<UpdateId>)>, StoreError> {
    let mut messages = Vec::new();
    for entry in read.open_table(QUEUE)?.range::<u64>(..)? {
        let (seq, value) = entry?;
        let (message, body) = unframe::<MessageState>(value.value()).map_err(
            StoreError::corrupt(format!("queue message {}", seq.value())),
        )?;
        let update_id = Envelope::parse_queued(body).ok().map(|e| e.update_id);
        messages.push((message, update_id));
    }
    Ok(messages)
}

/// Where each record's message stands on the queue, by record key.
fn queued_by_record(
    read: &ReadTransaction,
    now: Timestamp,
) -> Result<BTreeMap<String, QueuedView>, StoreError> {
    let mut by_record = BTreeMap::new();
    for (message, update_id) in queue_messages(read)? {
        let (Ok((bot, _)), Some(update_id)) = (message.group.split(), update_id) else {
            continue;
        };
        let pk = RecordKey::new(bot, update_id).pk();
        by_record.insert(pk.to_string(), queued_view(&message, now));
    }
    Ok(by_record)
}

/// The outbox entries of one update, oldest first: read from the newest back to the update's
/// receipt, as none before it can be its run's.
fn sent_by(
    read: &ReadTransaction,
    bot_id: &str,
    update_id: i64,
    received_at: Timestamp,
) -> Result<Vec<OutboxEntry>, StoreError> {
    let mut sent = Vec::new();
    for entry in read.open_table(OUTBOX)?.iter()?.rev() {
        let entry = outbox_entry(entry?)?;
        if entry.at < received_at {
            break;
        }
        if entry.update_id == Some(update_id) && entry.bot_id.as_deref().is_none_or(|b| b == bot_id)
        {
            sent.push(entry);
        }
    }
    sent.reverse();
    Ok(sent)
}

/// An outbox entry read back.
pub(crate) fn outbox_entry(
    (id, value): (redb::AccessGuard<'_, u64>, redb::AccessGuard<'_, &[u8]>),
) -> Result<OutboxEntry, StoreError> {
    let stored = crate::schema::decode_outbox_entry(value.value())
        .map_err(StoreError::corrupt(format!("outbox entry {}", id.value())))?;
    Ok(OutboxEntry {
        id: id.value(),
        bot_id: stored.bot_id,
        chat_id: stored.chat_id,
        update_id: stored.update_id,
        seq: stored.seq,
        method: stored.method,
        text: stored.text,
        params: stored.params,
        at: Timestamp(stored.at),
    })
}
