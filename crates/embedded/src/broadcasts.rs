//! Broadcast jobs in the embedded store (docs/design/broadcast-runs.md): a job, its recipients one
//! row each, and two indexes the runner takes work from — the recipients waiting for another try,
//! by when they are due, and those whose send began. Every change is one commit through the writer;
//! a recipient's intent and its outcome are two.

use async_trait::async_trait;
use redb::{ReadTransaction, ReadableTable};
use serde::{Deserialize, Serialize};
use tgq_core::broadcast::chain::StepClaim;
use tgq_core::broadcast::{
    BroadcastId, BroadcastJob, BroadcastSpec, BroadcastStore, Change, Changed, Created, Indexes,
    Outcome, Recipient, RecipientState, Retried, StateFilter, KEEP_ENDED,
};
use tgq_core::error::PortError;
use tgq_core::ids::{BotId, StateKey};
use tgq_core::record::Timestamp;

use crate::error::StoreError;
use crate::ports::read;
use crate::schema::{
    decode_state, seq, BROADCASTS, BROADCAST_BEGUN, BROADCAST_ORIGINS, BROADCAST_RECIPIENTS,
    BROADCAST_RETRIES, META, STATES,
};
use crate::writer::{OpError, Tx};
use crate::EmbeddedStore;

/// A job as [`BROADCASTS`] keeps it.
#[derive(Serialize, Deserialize)]
struct StoredJob {
    job: BroadcastJob,
    /// No recipient before it is pending: `next` looks for fresh ones from here.
    cursor: u64,
    /// The latest step of its chain claimed, and the message that holds it (a job run as a
    /// chain of queue messages; `tgq local` runs its jobs in the process and claims none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    chain: Option<(u64, String)>,
}

fn json<T: Serialize>(value: &T) -> Result<Vec<u8>, OpError> {
    serde_json::to_vec(value).map_err(|e| OpError::Fatal(e.to_string()))
}

fn parse<T: for<'de> Deserialize<'de>>(what: &str, bytes: &[u8]) -> Result<T, OpError> {
    serde_json::from_slice(bytes).map_err(|e| OpError::Rejected(format!("{what}: {e}")))
}

impl Tx<'_> {
    /// Removes the jobs that ended more than [`KEEP_ENDED`] before `now`, each with its
    /// recipients, their indexes and its origin; how many. A job not ended is never removed,
    /// however old.
    pub(crate) fn purge_broadcasts(&mut self, now: Timestamp) -> Result<u64, OpError> {
        let mut old = Vec::new();
        for entry in self.table(BROADCASTS)?.range::<u64>(..)? {
            let (id, value) = entry?;
            let id = id.value();
            let stored: StoredJob = parse(&format!("broadcast {id}"), value.value())?;
            let job = stored.job;
            if job.state.is_final() && job.ended_at.is_some_and(|at| at.plus(KEEP_ENDED) <= now) {
                old.push((id, job.spec.origin));
            }
        }
        for (id, origin) in &old {
            self.table_mut(BROADCASTS)?.remove(*id)?;
            self.table_mut(BROADCAST_RECIPIENTS)?
                .retain_in((*id, 0)..(*id + 1, 0), |_, _| false)?;
            self.table_mut(BROADCAST_RETRIES)?
                .retain_in((*id, 0, 0)..(*id + 1, 0, 0), |_, _| false)?;
            self.table_mut(BROADCAST_BEGUN)?
                .retain_in((*id, 0)..(*id + 1, 0), |_, _| false)?;
            let mut origins = self.table_mut(BROADCAST_ORIGINS)?;
            if origins
                .get(origin.as_str())?
                .is_some_and(|v| v.value() == *id)
            {
                origins.remove(origin.as_str())?;
            }
        }
        Ok(old.len() as u64)
    }

    fn stored_job(&self, id: u64) -> Result<Option<StoredJob>, OpError> {
        let jobs = self.table(BROADCASTS)?;
        let value = jobs.get(id)?;
        value
            .map(|v| parse(&format!("broadcast {id}"), v.value()))
            .transpose()
    }

    fn put_job(&mut self, stored: &StoredJob) -> Result<(), OpError> {
        let bytes = json(stored)?;
        self.table_mut(BROADCASTS)?
            .insert(stored.job.id.0, bytes.as_slice())?;
        self.keep_first_open(&stored.job)
    }

    /// Keeps [`seq::BROADCAST_FIRST_OPEN`] before every job not ended, `job` as just written: a
    /// job that ended and runs again moves it back; the job at it ending moves it on to the next
    /// not ended (or past the last).
    fn keep_first_open(&mut self, job: &BroadcastJob) -> Result<(), OpError> {
        let id = job.id.0;
        let first = self
            .table(META)?
            .get(seq::BROADCAST_FIRST_OPEN)?
            .map_or(1, |v| v.value());
        let next = match job.state.is_final() {
            false if id < first => id,
            true if id == first => {
                let jobs = self.table(BROADCASTS)?;
                let mut next = id + 1;
                for entry in jobs.range(id + 1..)? {
                    let (later, value) = entry?;
                    let later = later.value();
                    let stored: StoredJob = parse(&format!("broadcast {later}"), value.value())?;
                    if !stored.job.state.is_final() {
                        next = later;
                        break;
                    }
                    next = later + 1;
                }
                next
            }
            _ => return Ok(()),
        };
        self.table_mut(META)?
            .insert(seq::BROADCAST_FIRST_OPEN, next)?;
        Ok(())
    }

    fn recipient(&self, id: u64, index: u64) -> Result<Option<Recipient>, OpError> {
        let table = self.table(BROADCAST_RECIPIENTS)?;
        let value = table.get((id, index))?;
        value
            .map(|v| parse(&format!("recipient {index} of broadcast {id}"), v.value()))
            .transpose()
    }

    fn put_recipient(&mut self, id: u64, recipient: &Recipient) -> Result<(), OpError> {
        let bytes = json(recipient)?;
        self.table_mut(BROADCAST_RECIPIENTS)?
            .insert((id, recipient.index), bytes.as_slice())?;
        Ok(())
    }

    fn create_broadcast(
        &mut self,
        spec: &BroadcastSpec,
        chats: &[i64],
        now: Timestamp,
    ) -> Result<Created, OpError> {
        let by_origin = spec.origin != "cli";
        if by_origin {
            let found = self
                .table(BROADCAST_ORIGINS)?
                .get(spec.origin.as_str())?
                .map(|v| v.value());
            if let Some(id) = found {
                if let Some(stored) = self.stored_job(id)? {
                    return Ok(Created::Existing { job: stored.job });
                }
            }
        }
        let id = self.next_in(seq::BROADCAST)?;
        let job = BroadcastJob::new(BroadcastId(id), spec.clone(), chats.len() as u64, now);
        for (index, chat) in chats.iter().enumerate() {
            let recipient = Recipient {
                index: index as u64,
                chat: *chat,
                attempts: 0,
                state: RecipientState::Pending,
            };
            self.put_recipient(id, &recipient)?;
        }
        if by_origin {
            self.table_mut(BROADCAST_ORIGINS)?
                .insert(spec.origin.as_str(), id)?;
        }
        self.put_job(&StoredJob {
            job: job.clone(),
            cursor: 0,
            chain: None,
        })?;
        Ok(Created::New { job })
    }

    fn change_broadcast(
        &mut self,
        id: u64,
        change: &Change,
        now: Timestamp,
    ) -> Result<Changed, OpError> {
        let Some(mut stored) = self.stored_job(id)? else {
            return Ok(Changed::NotFound);
        };
        if !stored.job.apply(change, now) {
            return Ok(Changed::Refused { job: stored.job });
        }
        self.put_job(&stored)?;
        Ok(Changed::Changed { job: stored.job })
    }

    fn claim_broadcast_step(
        &mut self,
        id: u64,
        step: u64,
        holder: &str,
    ) -> Result<StepClaim, OpError> {
        let Some(mut stored) = self.stored_job(id)? else {
            return Ok(StepClaim::NotFound);
        };
        let last = stored.chain.as_ref().map(|(last, by)| (*last, by.as_str()));
        let claim = StepClaim::decide(last, step, holder);
        if claim == StepClaim::Granted {
            stored.chain = Some((step, holder.to_owned()));
            self.put_job(&stored)?;
        }
        Ok(claim)
    }

    fn begin_broadcast_send(&mut self, id: u64, index: u64) -> Result<(), OpError> {
        let (Some(mut stored), Some(mut recipient)) =
            (self.stored_job(id)?, self.recipient(id, index)?)
        else {
            return Err(OpError::Rejected(format!(
                "broadcast {id} has no recipient {index}"
            )));
        };
        match recipient.state {
            RecipientState::Pending => {}
            RecipientState::Retrying { due } => {
                self.table_mut(BROADCAST_RETRIES)?
                    .remove((id, due, index))?;
            }
            // Begun or ended already: a second begin would be a second send.
            _ => {
                return Err(OpError::Rejected(format!(
                    "recipient {index} of broadcast {id} is not waiting to be sent to"
                )))
            }
        }
        stored.job.began(&recipient.state);
        recipient.state = RecipientState::Sending;
        self.put_recipient(id, &recipient)?;
        self.table_mut(BROADCAST_BEGUN)?.insert((id, index), ())?;
        // The cursor moves only over recipients no longer pending: sends begin in tasks of their
        // own, and one whose begin failed must still be found.
        if index == stored.cursor {
            stored.cursor = self.next_pending(id, index + 1)?;
        }
        self.put_job(&stored)
    }

    /// The first index at or after `from` whose recipient is pending, or the end of the list.
    fn next_pending(&self, id: u64, from: u64) -> Result<u64, OpError> {
        let table = self.table(BROADCAST_RECIPIENTS)?;
        for entry in table.range((id, from)..=(id, u64::MAX))? {
            let (key, value) = entry?;
            let index = key.value().1;
            let recipient: Recipient = parse(
                &format!("recipient {index} of broadcast {id}"),
                value.value(),
            )?;
            if recipient.state == RecipientState::Pending {
                return Ok(index);
            }
        }
        Ok(u64::MAX)
    }

    fn settle_broadcast_send(
        &mut self,
        id: u64,
        index: u64,
        outcome: &Outcome,
        now: Timestamp,
    ) -> Result<(), OpError> {
        let (Some(mut stored), Some(mut recipient)) =
            (self.stored_job(id)?, self.recipient(id, index)?)
        else {
            return Ok(());
        };
        // Only a begun send settles: a settle repeated after it was recorded changes nothing.
        if recipient.state != RecipientState::Sending {
            return Ok(());
        }
        recipient.attempts += u32::from(outcome.spends_attempt());
        recipient.state = outcome.state(now);
        if let RecipientState::Retrying { due } = recipient.state {
            self.table_mut(BROADCAST_RETRIES)?
                .insert((id, due, index), ())?;
        }
        self.table_mut(BROADCAST_BEGUN)?.remove((id, index))?;
        stored.job.count(outcome, now);
        self.put_recipient(id, &recipient)?;
        self.put_job(&stored)
    }

    fn retry_broadcast(
        &mut self,
        id: u64,
        uncertain: bool,
        now: Timestamp,
    ) -> Result<Retried, OpError> {
        let Some(mut stored) = self.stored_job(id)? else {
            return Ok(Retried::NotFound);
        };
        if !stored.job.takes_retry() {
            return Ok(Retried::Refused { job: stored.job });
        }
        let again: Vec<Recipient> = {
            let table = self.table(BROADCAST_RECIPIENTS)?;
            let mut again = Vec::new();
            for entry in table.range((id, 0)..=(id, u64::MAX))? {
                let (key, value) = entry?;
                let index = key.value().1;
                let recipient: Recipient = parse(
                    &format!("recipient {index} of broadcast {id}"),
                    value.value(),
                )?;
                if recipient.state.is_retried(uncertain) {
                    again.push(recipient);
                }
            }
            again
        };
        for mut recipient in again.iter().cloned() {
            stored.job.retried(&recipient.state);
            recipient.state = RecipientState::Retrying { due: now.0 };
            recipient.attempts = 0;
            self.put_recipient(id, &recipient)?;
            self.table_mut(BROADCAST_RETRIES)?
                .insert((id, now.0, recipient.index), ())?;
        }
        let recipients = again.len() as u64;
        if recipients == 0 {
            return Ok(Retried::Nothing { job: stored.job });
        }
        self.put_job(&stored)?;
        Ok(Retried::Retried {
            recipients,
            job: stored.job,
        })
    }

    fn abandon_begun_sends(
        &mut self,
        id: u64,
        span: &Indexes,
        now: Timestamp,
    ) -> Result<u64, OpError> {
        let Some(mut stored) = self.stored_job(id)? else {
            return Ok(0);
        };
        let begun: Vec<u64> = {
            let table = self.table(BROADCAST_BEGUN)?;
            let mut begun = Vec::new();
            if !span.is_empty() {
                for entry in table.range((id, span.start)..=(id, span.end - 1))? {
                    begun.push(entry?.0.value().1);
                }
            }
            begun
        };
        let outcome = Outcome::abandoned();
        for index in &begun {
            if let Some(mut recipient) = self.recipient(id, *index)? {
                recipient.state = outcome.state(now);
                self.put_recipient(id, &recipient)?;
                stored.job.count(&outcome, now);
            }
            self.table_mut(BROADCAST_BEGUN)?.remove((id, *index))?;
        }
        if !begun.is_empty() {
            self.put_job(&stored)?;
        }
        Ok(begun.len() as u64)
    }
}

fn read_job(read: &ReadTransaction, id: u64) -> Result<Option<StoredJob>, StoreError> {
    let jobs = read.open_table(BROADCASTS)?;
    let Some(value) = jobs.get(id)? else {
        return Ok(None);
    };
    serde_json::from_slice(value.value())
        .map(Some)
        .map_err(|e| StoreError::corrupt(format!("broadcast {id}"))(e.into()))
}

fn read_recipient(bytes: &[u8], id: u64) -> Result<Recipient, StoreError> {
    serde_json::from_slice(bytes)
        .map_err(|e| StoreError::corrupt(format!("a recipient of broadcast {id}"))(e.into()))
}

#[async_trait]
impl BroadcastStore for EmbeddedStore {
    async fn create(
        &self,
        spec: &BroadcastSpec,
        chats: &[i64],
        now: Timestamp,
    ) -> Result<Created, PortError> {
        let (spec, chats) = (spec.clone(), chats.to_vec());
        self.writer
            .run("broadcast create", move |tx| {
                tx.create_broadcast(&spec, &chats, now)
            })
            .await
    }

    async fn jobs(&self) -> Result<Vec<BroadcastJob>, PortError> {
        read(&self.db, "broadcast jobs", |db| {
            let read = db.begin_read()?;
            let jobs = read.open_table(BROADCASTS)?;
            let mut all = Vec::new();
            for entry in jobs.iter()?.rev() {
                let (id, value) = entry?;
                let stored: StoredJob = serde_json::from_slice(value.value()).map_err(|e| {
                    StoreError::corrupt(format!("broadcast {}", id.value()))(e.into())
                })?;
                all.push(stored.job);
            }
            Ok(all)
        })
        .await
    }

    async fn open_jobs(&self) -> Result<Vec<BroadcastJob>, PortError> {
        read(&self.db, "broadcast open jobs", |db| {
            let read = db.begin_read()?;
            let first = match read.open_table(META) {
                Ok(meta) => meta
                    .get(seq::BROADCAST_FIRST_OPEN)?
                    .map_or(1, |v| v.value()),
                Err(redb::TableError::TableDoesNotExist(_)) => 1,
                Err(error) => return Err(error.into()),
            };
            let jobs = read.open_table(BROADCASTS)?;
            let mut open = Vec::new();
            for entry in jobs.range(first..)?.rev() {
                let (id, value) = entry?;
                let stored: StoredJob = serde_json::from_slice(value.value()).map_err(|e| {
                    StoreError::corrupt(format!("broadcast {}", id.value()))(e.into())
                })?;
                if !stored.job.state.is_final() {
                    open.push(stored.job);
                }
            }
            Ok(open)
        })
        .await
    }

    async fn job(&self, id: &BroadcastId) -> Result<Option<BroadcastJob>, PortError> {
        let id = id.0;
        read(&self.db, "broadcast job", move |db| {
            Ok(read_job(&db.begin_read()?, id)?.map(|stored| stored.job))
        })
        .await
    }

    async fn change(
        &self,
        id: &BroadcastId,
        change: Change,
        now: Timestamp,
    ) -> Result<Changed, PortError> {
        let id = id.0;
        self.writer
            .run("broadcast change", move |tx| {
                tx.change_broadcast(id, &change, now)
            })
            .await
    }

    async fn next(
        &self,
        id: &BroadcastId,
        span: &Indexes,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Recipient>, PortError> {
        let (id, span) = (id.0, span.clone());
        if span.is_empty() {
            return Ok(Vec::new());
        }
        read(&self.db, "broadcast next", move |db| {
            let read = db.begin_read()?;
            let Some(stored) = read_job(&read, id)? else {
                return Ok(Vec::new());
            };
            let recipients = read.open_table(BROADCAST_RECIPIENTS)?;
            let mut taken = Vec::new();
            for entry in read
                .open_table(BROADCAST_RETRIES)?
                .range((id, 0, 0)..=(id, now.0, u64::MAX))?
            {
                if taken.len() >= limit {
                    break;
                }
                let (_, _, index) = entry?.0.value();
                if !span.contains(&index) {
                    continue;
                }
                if let Some(value) = recipients.get((id, index))? {
                    taken.push(read_recipient(value.value(), id)?);
                }
            }
            let from = stored.cursor.max(span.start).min(span.end - 1);
            for entry in recipients.range((id, from)..=(id, span.end - 1))? {
                if taken.len() >= limit {
                    break;
                }
                let recipient = read_recipient(entry?.1.value(), id)?;
                if recipient.state == RecipientState::Pending {
                    taken.push(recipient);
                }
            }
            Ok(taken)
        })
        .await
    }

    async fn next_retry(
        &self,
        id: &BroadcastId,
        span: &Indexes,
    ) -> Result<Option<Timestamp>, PortError> {
        let (id, span) = (id.0, span.clone());
        read(&self.db, "broadcast next retry", move |db| {
            let read = db.begin_read()?;
            let retries = read.open_table(BROADCAST_RETRIES)?;
            // Earliest due first: the first of the span is the earliest.
            for entry in retries.range((id, 0, 0)..=(id, u64::MAX, u64::MAX))? {
                let (_, due, index) = entry?.0.value();
                if span.contains(&index) {
                    return Ok(Some(Timestamp(due)));
                }
            }
            Ok(None)
        })
        .await
    }

    async fn begin(&self, id: &BroadcastId, index: u64) -> Result<(), PortError> {
        let id = id.0;
        self.writer
            .run("broadcast begin", move |tx| {
                tx.begin_broadcast_send(id, index)
            })
            .await
    }

    async fn settle(
        &self,
        id: &BroadcastId,
        index: u64,
        outcome: Outcome,
        now: Timestamp,
    ) -> Result<(), PortError> {
        let id = id.0;
        self.writer
            .run("broadcast settle", move |tx| {
                tx.settle_broadcast_send(id, index, &outcome, now)
            })
            .await
    }

    async fn abandon_begun(
        &self,
        id: &BroadcastId,
        span: &Indexes,
        now: Timestamp,
    ) -> Result<u64, PortError> {
        let (id, span) = (id.0, span.clone());
        self.writer
            .run("broadcast abandon", move |tx| {
                tx.abandon_begun_sends(id, &span, now)
            })
            .await
    }

    async fn retry(
        &self,
        id: &BroadcastId,
        uncertain: bool,
        now: Timestamp,
    ) -> Result<Retried, PortError> {
        let id = id.0;
        self.writer
            .run("broadcast retry", move |tx| {
                tx.retry_broadcast(id, uncertain, now)
            })
            .await
    }

    async fn undelivered(
        &self,
        id: &BroadcastId,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Recipient>, PortError> {
        let (id, from) = (id.0, after.map_or(0, |after| after.saturating_add(1)));
        read(&self.db, "broadcast undelivered", move |db| {
            let read = db.begin_read()?;
            // Nothing undelivered (the usual case) reads no recipient.
            let counted = read_job(&read, id)?.map(|s| s.job.counts);
            if counted.is_none_or(|c| c.failed + c.uncertain == 0) {
                return Ok(Vec::new());
            }
            let recipients = read.open_table(BROADCAST_RECIPIENTS)?;
            let mut found = Vec::new();
            for entry in recipients.range((id, from)..=(id, u64::MAX))? {
                if found.len() >= limit {
                    break;
                }
                let recipient = read_recipient(entry?.1.value(), id)?;
                if recipient.state.is_undelivered() {
                    found.push(recipient);
                }
            }
            Ok(found)
        })
        .await
    }

    async fn claim_step(
        &self,
        id: &BroadcastId,
        step: u64,
        holder: &str,
    ) -> Result<StepClaim, PortError> {
        let (id, holder) = (id.0, holder.to_owned());
        self.writer
            .run("broadcast claim_step", move |tx| {
                tx.claim_broadcast_step(id, step, &holder)
            })
            .await
    }

    async fn claimed_step(&self, id: &BroadcastId) -> Result<u64, PortError> {
        let id = id.0;
        read(&self.db, "broadcast claimed_step", move |db| {
            let stored = read_job(&db.begin_read()?, id)?;
            Ok(stored.and_then(|s| s.chain).map_or(0, |(step, _)| step))
        })
        .await
    }

    async fn chats_matching(
        &self,
        bot: &BotId,
        filter: &StateFilter,
    ) -> Result<Vec<i64>, PortError> {
        let (bot, filter) = (bot.clone(), filter.clone());
        read(&self.db, "broadcast audience", move |db| {
            let read = db.begin_read()?;
            let mut chats = Vec::new();
            for entry in read.open_table(STATES)?.iter()? {
                let (key, value) = entry?;
                let pk = key.value();
                let Some((bot_id, group)) = StateKey::split_pk(pk) else {
                    continue;
                };
                let Ok(chat) = group.parse::<i64>() else {
                    continue;
                };
                if bot_id != bot.as_str() {
                    continue;
                }
                let state = decode_state(value.value())
                    .map_err(StoreError::corrupt(format!("state {pk}")))?;
                let json = serde_json::from_str(&state.json).unwrap_or(serde_json::Value::Null);
                if filter.matches(&state.format, &json) {
                    chats.push(chat);
                }
            }
            chats.sort_unstable();
            Ok(chats)
        })
        .await
    }
}
