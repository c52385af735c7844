//! Broadcast jobs in DynamoDB (docs/design/broadcast-runs.md): items of the records' table keyed
//! `broadcast#{id}` (the job), `broadcast#{id}#r#{index}` (each recipient),
//! `broadcast#origin#{origin}` (the job a handler's start made) and `broadcast#seq` (the last id
//! given). A job's counts are numbers its recipients' settles add to, in the same transaction as
//! the recipient's own write. Settles of one job meet on its item: a transaction cancelled by
//! another one on it is run again, and one job's sends are bounded by the item's write rate.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{
    AttributeValue, DeleteRequest, KeysAndAttributes, Put, PutRequest, ReturnValue,
    TransactWriteItem, Update, WriteRequest,
};
use futures::StreamExt;
use tgq_core::broadcast::chain::StepClaim;
use tgq_core::broadcast::{
    Audience, BroadcastId, BroadcastJob, BroadcastSpec, BroadcastStore, Change, Changed, Counts,
    Created, Indexes, JobState, Outcome, Recipient, RecipientState, Retried, StateFilter, EVERY,
    KEEP_ENDED,
};
use tgq_core::ids::{BotId, StateKey};
use tgq_core::record::Timestamp;
use tgq_core::PortError;

use crate::error::{port_error, update_condition_failed};
use crate::item::{expiry_secs, number, string};

mod create;
mod items;
mod table;

use items::*;

/// Every broadcast of a stack, in its records' table. It only stores: core's
/// [`QueuedBroadcasts`](tgq_core::broadcast::QueuedBroadcasts) over it queues the jobs' steps on
/// the stack's broadcasts queue.
#[derive(Clone)]
pub struct DynamoBroadcasts {
    client: aws_sdk_dynamodb::Client,
    table: String,
}

impl DynamoBroadcasts {
    /// The broadcasts in `table`.
    pub fn new(client: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }
}

#[async_trait]
impl BroadcastStore for DynamoBroadcasts {
    async fn create(
        &self,
        spec: &BroadcastSpec,
        chats: &[i64],
        now: Timestamp,
    ) -> Result<Created, PortError> {
        self.create_job(spec, chats, now).await
    }

    async fn create_expanding(
        &self,
        spec: &BroadcastSpec,
        audience: &Audience,
        now: Timestamp,
    ) -> Result<Created, PortError> {
        match self.new_id(spec, now).await? {
            Ok(id) => self.write_expanding(id, spec, audience, now).await,
            Err(existing) => Ok(existing),
        }
    }

    async fn expand(&self, id: &BroadcastId, limit: u64) -> Result<bool, PortError> {
        let Some(item) = self.get(job_pk(id.0)).await? else {
            return Ok(true);
        };
        if !matches!(item.get(EXPANDING), Some(AttributeValue::Bool(true))) {
            return Ok(true);
        }
        match item.contains_key(LISTED) {
            true => self.expand_listed(id.0, &item, limit).await,
            false => self.expand_states(id.0, &item, limit).await,
        }
    }

    async fn drop_unsent(&self, id: &BroadcastId, span: &Indexes) -> Result<u64, PortError> {
        let Some(item) = self.get(job_pk(id.0)).await? else {
            return Ok(0);
        };
        let job = job_of(id.0, &item)?;
        if job.state != JobState::Cancelled {
            return Ok(0);
        }
        if span.start == 0 {
            self.drop_audience(id.0, &item).await?;
        }
        let mut unsent = Vec::new();
        self.for_each_page(id.0, (span, job.counts.total), |page| {
            unsent.extend(page.into_iter().filter(|r| {
                matches!(
                    r.state,
                    RecipientState::Pending | RecipientState::Retrying { .. }
                )
            }));
            true
        })
        .await?;
        let deletes = unsent
            .iter()
            .map(|recipient| {
                let delete = DeleteRequest::builder()
                    .set_key(Some(key_of(recipient_pk(id.0, recipient.index))))
                    .build()
                    .map_err(|e| PortError::rejected(BATCH_WRITE, e))?;
                Ok(WriteRequest::builder().delete_request(delete).build())
            })
            .collect::<Result<Vec<_>, PortError>>()?;
        for batch in deletes.chunks(BATCH_WRITE_ITEMS) {
            self.batch_write(batch.to_vec()).await?;
        }
        Ok(unsent.len() as u64)
    }

    async fn jobs(&self) -> Result<Vec<BroadcastJob>, PortError> {
        let last = self
            .get(SEQ_PK.into())
            .await?
            .and_then(|item| read_num(&item, "last"))
            .unwrap_or(0);
        let keys = (1..=last).map(job_pk).collect();
        let mut jobs = Vec::new();
        for item in self.batch_get(keys).await? {
            jobs.push(job_of(id_of_job(&item)?, &item)?);
        }
        jobs.sort_by(|a, b| b.id.cmp(&a.id));
        Ok(jobs)
    }

    async fn open_jobs(&self) -> Result<Vec<BroadcastJob>, PortError> {
        let mark = self.open_mark().await?;
        let mut read = BTreeMap::new();
        for item in self
            .batch_get((mark.first..=mark.last).map(job_pk).collect())
            .await?
        {
            let id = id_of_job(&item)?;
            read.insert(id, job_of(id, &item)?);
        }
        // The mark moves on past the jobs that ended, and stops at one not written yet: a start
        // under way, between taking its id and writing its job.
        let mut first = mark.first;
        while read.get(&first).is_some_and(|job| job.state.is_final()) {
            first += 1;
        }
        if first > mark.first {
            self.move_mark(&mark, first).await?;
        }
        let mut open: Vec<BroadcastJob> = read
            .into_values()
            .filter(|job| !job.state.is_final())
            .collect();
        open.reverse();
        Ok(open)
    }

    async fn job(&self, id: &BroadcastId) -> Result<Option<BroadcastJob>, PortError> {
        match self.get(job_pk(id.0)).await? {
            Some(item) => Ok(Some(job_of(id.0, &item)?)),
            None => Ok(None),
        }
    }

    async fn change(
        &self,
        id: &BroadcastId,
        change: Change,
        now: Timestamp,
    ) -> Result<Changed, PortError> {
        self.change_job(id, change, now).await
    }

    async fn next(
        &self,
        id: &BroadcastId,
        span: &Indexes,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Recipient>, PortError> {
        let Some(job) = self.job(id).await? else {
            return Ok(Vec::new());
        };
        let (mut due, mut fresh) = (Vec::new(), Vec::new());
        self.for_each_page(id.0, (span, job.counts.total), |page| {
            for recipient in page {
                match recipient.state {
                    RecipientState::Retrying { due: at } if at <= now.0 => due.push(recipient),
                    RecipientState::Pending => fresh.push(recipient),
                    _ => {}
                }
            }
            due.len() + fresh.len() < limit
        })
        .await?;
        due.extend(fresh);
        due.truncate(limit);
        Ok(due)
    }

    async fn next_retry(
        &self,
        id: &BroadcastId,
        span: &Indexes,
    ) -> Result<Option<Timestamp>, PortError> {
        let Some(job) = self.job(id).await? else {
            return Ok(None);
        };
        if job.counts.retrying == 0 {
            return Ok(None);
        }
        let mut earliest: Option<u64> = None;
        self.for_each_page(id.0, (span, job.counts.total), |page| {
            for recipient in page {
                if let RecipientState::Retrying { due } = recipient.state {
                    earliest = Some(earliest.map_or(due, |e| e.min(due)));
                }
            }
            true
        })
        .await?;
        Ok(earliest.map(Timestamp))
    }

    async fn begin(&self, id: &BroadcastId, index: u64) -> Result<(), PortError> {
        let sending = RecipientState::Sending;
        let pending = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key_of(recipient_pk(id.0, index))))
            .update_expression("SET #state = :state, #tag = :to")
            .condition_expression("#tag = :from")
            .expression_attribute_names("#state", STATE)
            .expression_attribute_names("#tag", TAG)
            .expression_attribute_values(":state", json(&sending))
            .expression_attribute_values(":to", string(tag(&sending)))
            .expression_attribute_values(":from", string("pending"))
            .send()
            .await;
        match pending {
            Ok(_) => return Ok(()),
            Err(err) if update_condition_failed(&err).is_some() => {}
            Err(err) => return Err(port_error(UPDATE, err)),
        }
        // Waiting for another try: one fewer retrying on the job, in the same transaction.
        let job = Update::builder()
            .table_name(&self.table)
            .set_key(Some(key_of(job_pk(id.0))))
            .update_expression("ADD retrying :less")
            .expression_attribute_values(":less", number(-1))
            .build()
            .map_err(|e| PortError::rejected(TRANSACT, e))?;
        if self
            .move_recipient(id.0, index, "retrying", (&sending, 0), (job, None))
            .await?
        {
            return Ok(());
        }
        Err(PortError::rejected(
            UPDATE,
            Malformed(
                recipient_pk(id.0, index),
                "state: not waiting to be sent to",
            ),
        ))
    }

    async fn settle(
        &self,
        id: &BroadcastId,
        index: u64,
        outcome: Outcome,
        now: Timestamp,
    ) -> Result<(), PortError> {
        let state = outcome.state(now);
        let attempts = u32::from(outcome.spends_attempt());
        let job = self.count_update(id.0, &outcome, now)?;
        // Only a begun send settles: a settle repeated after it was recorded changes nothing.
        let kept = state.is_settled().then(|| now.plus(KEEP_ENDED));
        self.move_recipient(id.0, index, "sending", (&state, attempts), (job, kept))
            .await?;
        Ok(())
    }

    async fn abandon_begun(
        &self,
        id: &BroadcastId,
        span: &Indexes,
        now: Timestamp,
    ) -> Result<u64, PortError> {
        let Some(job) = self.job(id).await? else {
            return Ok(0);
        };
        let mut begun = Vec::new();
        self.for_each_page(id.0, (span, job.counts.total), |page| {
            begun.extend(
                page.into_iter()
                    .filter(|r| r.state == RecipientState::Sending),
            );
            true
        })
        .await?;
        let (mut abandoned, outcome) = (0, Outcome::abandoned());
        let state = outcome.state(now);
        for recipient in begun {
            let update = self.count_update(id.0, &outcome, now)?;
            if self
                .move_recipient(
                    id.0,
                    recipient.index,
                    "sending",
                    (&state, 0),
                    (update, Some(now.plus(KEEP_ENDED))),
                )
                .await?
            {
                abandoned += 1;
            }
        }
        Ok(abandoned)
    }

    async fn undelivered(
        &self,
        id: &BroadcastId,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Recipient>, PortError> {
        let Some(job) = self.job(id).await? else {
            return Ok(Vec::new());
        };
        let mut found = Vec::new();
        if job.counts.failed + job.counts.uncertain == 0 {
            return Ok(found);
        }
        let span = after.map_or(0, |after| after.saturating_add(1))..u64::MAX;
        self.for_each_page(id.0, (&span, job.counts.total), |page| {
            found.extend(page.into_iter().filter(|r| r.state.is_undelivered()));
            found.len() < limit
        })
        .await?;
        found.truncate(limit);
        Ok(found)
    }

    async fn retry(
        &self,
        id: &BroadcastId,
        uncertain: bool,
        now: Timestamp,
    ) -> Result<Retried, PortError> {
        let Some(job) = self.job(id).await? else {
            return Ok(Retried::NotFound);
        };
        if !job.takes_retry() {
            return Ok(Retried::Refused { job });
        }
        let mut again = Vec::new();
        self.for_each_page(id.0, (&EVERY, job.counts.total), |page| {
            again.extend(page.into_iter().filter(|r| r.state.is_retried(uncertain)));
            true
        })
        .await?;
        let mut recipients = 0;
        for recipient in &again {
            if self.put_back(id.0, recipient, now).await? {
                recipients += 1;
            }
        }
        if recipients == 0 {
            return Ok(Retried::Nothing { job });
        }
        // A job that was done runs again: its state, with the mark of the jobs not ended moved
        // back to it (or its version moved on, so that a look that read the job as done cannot
        // move the mark past it), then its first step on a stack.
        let mut job = job;
        while job.state == JobState::Done {
            let mark = self.open_mark().await?;
            let ran_again = Update::builder()
                .table_name(&self.table)
                .set_key(Some(key_of(job_pk(id.0))))
                .update_expression("SET #state = :running REMOVE ended_at, expires_at")
                .condition_expression("#state = :done")
                .expression_attribute_names("#state", STATE)
                .expression_attribute_values(":running", json(&JobState::Running))
                .expression_attribute_values(":done", json(&JobState::Done))
                .build()
                .map_err(|e| PortError::rejected(TRANSACT, e))?;
            let moved = self.mark_update(&mark, mark.first.min(id.0))?;
            let done = self
                .transact(vec![
                    TransactWriteItem::builder().update(ran_again).build(),
                    TransactWriteItem::builder().update(moved).build(),
                ])
                .await?;
            if done {
                break;
            }
            // Another retry ran it again first, or the mark moved: read both again.
            job = self.job(id).await?.ok_or_else(|| {
                PortError::rejected(UPDATE, Malformed(job_pk(id.0), "the job went away"))
            })?;
        }
        let job = self.job(id).await?.ok_or_else(|| {
            PortError::rejected(UPDATE, Malformed(job_pk(id.0), "the job went away"))
        })?;
        Ok(Retried::Retried { recipients, job })
    }

    async fn claim_step(
        &self,
        id: &BroadcastId,
        step: u64,
        holder: &str,
    ) -> Result<StepClaim, PortError> {
        // StepClaim::decide, as one conditional write.
        let claimed = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key_of(job_pk(id.0))))
            .update_expression("SET #step = :step, #holder = :holder")
            .condition_expression(
                "attribute_exists(pk) AND (attribute_not_exists(#step) OR #step < :step \
                 OR (#step = :step AND #holder = :holder))",
            )
            .expression_attribute_names("#step", CHAIN_STEP)
            .expression_attribute_names("#holder", CHAIN_HOLDER)
            .expression_attribute_values(":step", number(step))
            .expression_attribute_values(":holder", string(holder))
            .send()
            .await;
        match claimed {
            Ok(_) => Ok(StepClaim::Granted),
            Err(err) if update_condition_failed(&err).is_some() => {
                Ok(match self.get(job_pk(id.0)).await? {
                    Some(_) => StepClaim::Taken,
                    None => StepClaim::NotFound,
                })
            }
            Err(err) => Err(port_error(UPDATE, err)),
        }
    }

    async fn claimed_step(&self, id: &BroadcastId) -> Result<u64, PortError> {
        self.claimed(id.0).await
    }

    async fn chats_matching(
        &self,
        bot: &BotId,
        filter: &StateFilter,
    ) -> Result<Vec<i64>, PortError> {
        let mut chats = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let (page, next) = self.matching_page(bot, filter, start, i32::MAX).await?;
            chats.extend(page);
            match next {
                Some(at) => start = Some(key_of(at)),
                None => break,
            }
        }
        chats.sort_unstable();
        chats.dedup();
        Ok(chats)
    }
}
