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

const GET: &str = "DynamoDB GetItem (broadcast)";
const PUT: &str = "DynamoDB PutItem (broadcast)";
const UPDATE: &str = "DynamoDB UpdateItem (broadcast)";
const BATCH_GET: &str = "DynamoDB BatchGetItem (broadcast)";
const BATCH_WRITE: &str = "DynamoDB BatchWriteItem (broadcast)";
const TRANSACT: &str = "DynamoDB TransactWriteItems (broadcast)";
const SCAN: &str = "DynamoDB Scan (broadcast audience)";
const DELETE: &str = "DynamoDB DeleteItem (broadcast audience)";

/// BatchGetItem's most keys a request.
const BATCH_GET_KEYS: usize = 100;
/// How many pages of a span's recipients are read at once.
const PAGES_AT_ONCE: usize = 4;
/// BatchWriteItem's most items a request.
const BATCH_WRITE_ITEMS: usize = 25;

// The attributes of a job item.
const KIND: &str = "kind";
const SPEC: &str = "spec";
const STATE: &str = "state";
const CREATED_AT: &str = "created_at";
const FIRST_SENT_AT: &str = "first_sent_at";
const LAST_SENT_AT: &str = "last_sent_at";
const ENDED_AT: &str = "ended_at";
const REFUSALS: &str = "refusals";
const LAST_ERROR: &str = "last_error";
/// The latest step of the job's chain claimed, and the queue message that holds it.
const CHAIN_STEP: &str = "chain_step";
const CHAIN_HOLDER: &str = "chain_holder";
/// The item of the jobs' ids, and of where the jobs not ended begin.
const SEQ_PK: &str = "broadcast#seq";
const FIRST_OPEN: &str = "first_open";
const OPEN_VERSION: &str = "open_version";
const COUNTS: [&str; 6] = ["total", "sent", "gone", "failed", "uncertain", "retrying"];
// The attributes of a recipient item.
const CHAT: &str = "chat";
/// On a job a handler started, while its audience is written as recipients: `true`, how many
/// are written, and the audience: its chats' count (in parts) or its filter, and where the scan of
/// the states goes on from.
const EXPANDING: &str = "expanding";
const EXPANDED: &str = "expanded";
const LISTED: &str = "listed";
const CHATS: &str = "chats";
const FILTER: &str = "filter";
const SCAN_FROM: &str = "scan_from";
/// Chats in one part of a listed audience, 8 bytes each: a part is well under an item's 400 KB,
/// and [`MAX_LISTED`] of them with the job fit one transaction's 4 MB.
const PART_CHATS: usize = 40_000;
/// Recipients' batch writes under way at once while an audience is written.
const WRITES_AT_ONCE: usize = 4;
const ATTEMPTS: &str = "attempts";
/// The recipient's state as JSON, and its tag alone, which conditions compare.
const TAG: &str = "tag";

/// Every broadcast of a stack, in its records' table. It only stores: core's
/// [`QueuedBroadcasts`](tgq_core::broadcast::QueuedBroadcasts) over it queues the jobs' steps on
/// the stack's broadcasts queue.
#[derive(Clone)]
pub struct DynamoBroadcasts {
    client: aws_sdk_dynamodb::Client,
    table: String,
}

/// An item that does not read as what its key says.
#[derive(Debug, thiserror::Error)]
#[error("the broadcast item {0} is malformed: {1}")]
struct Malformed(String, &'static str);

type Item = HashMap<String, AttributeValue>;

fn job_pk(id: u64) -> String {
    format!("broadcast#{id}")
}

/// Part `part` of the chats a handler listed for job `id`.
fn part_pk(id: u64, part: usize) -> String {
    format!("broadcast#{id}#a#{part}")
}

fn recipient_pk(id: u64, index: u64) -> String {
    format!("broadcast#{id}#r#{index:010}")
}

fn key_of(pk: String) -> Item {
    HashMap::from([("pk".to_owned(), string(pk))])
}

fn tag(state: &RecipientState) -> &'static str {
    match state {
        RecipientState::Pending => "pending",
        RecipientState::Retrying { .. } => "retrying",
        RecipientState::Sending => "sending",
        RecipientState::Sent { .. } => "sent",
        RecipientState::Gone { .. } => "gone",
        RecipientState::Failed { .. } => "failed",
        RecipientState::Uncertain => "uncertain",
    }
}

fn json<T: serde::Serialize>(value: &T) -> AttributeValue {
    string(serde_json::to_string(value).unwrap_or_default())
}

fn read_str<'a>(item: &'a Item, name: &'static str, pk: &str) -> Result<&'a str, PortError> {
    match item.get(name) {
        Some(AttributeValue::S(text)) => Ok(text),
        _ => Err(PortError::rejected(GET, Malformed(pk.to_owned(), name))),
    }
}

fn read_num(item: &Item, name: &'static str) -> Option<u64> {
    match item.get(name) {
        Some(AttributeValue::N(n)) => n.parse::<i64>().ok().map(|n| n.max(0) as u64),
        _ => None,
    }
}

fn read_json<T: serde::de::DeserializeOwned>(
    item: &Item,
    name: &'static str,
    pk: &str,
) -> Result<T, PortError> {
    serde_json::from_str(read_str(item, name, pk)?)
        .map_err(|_| PortError::rejected(GET, Malformed(pk.to_owned(), name)))
}

fn job_of(id: u64, item: &Item) -> Result<BroadcastJob, PortError> {
    let pk = job_pk(id);
    let count = |name| read_num(item, name).unwrap_or(0);
    Ok(BroadcastJob {
        id: BroadcastId(id),
        spec: read_json(item, SPEC, &pk)?,
        state: read_json(item, STATE, &pk)?,
        counts: Counts {
            total: count("total"),
            sent: count("sent"),
            gone: count("gone"),
            failed: count("failed"),
            uncertain: count("uncertain"),
            retrying: count("retrying"),
        },
        created_at: Timestamp(count(CREATED_AT)),
        first_sent_at: read_num(item, FIRST_SENT_AT).map(Timestamp),
        last_sent_at: read_num(item, LAST_SENT_AT).map(Timestamp),
        ended_at: read_num(item, ENDED_AT).map(Timestamp),
        refusals: u32::try_from(count(REFUSALS)).unwrap_or(u32::MAX),
        last_error: item.get(LAST_ERROR).and_then(|v| v.as_s().ok()).cloned(),
        expanding: matches!(item.get(EXPANDING), Some(AttributeValue::Bool(true))),
    })
}

/// A new job's item.
fn job_item(job: &BroadcastJob) -> Item {
    let mut item = HashMap::from([
        ("pk".to_owned(), string(job_pk(job.id.0))),
        (KIND.to_owned(), string("broadcast")),
        (SPEC.to_owned(), json(&job.spec)),
        (STATE.to_owned(), json(&job.state)),
        (CREATED_AT.to_owned(), number(job.created_at.0)),
        (REFUSALS.to_owned(), number(0)),
        (EXPANDING.to_owned(), AttributeValue::Bool(job.expanding)),
    ]);
    for name in COUNTS {
        item.insert(name.to_owned(), number(0));
    }
    item.insert("total".to_owned(), number(job.counts.total));
    item
}

fn recipient_of(id: u64, index: u64, item: &Item) -> Result<Recipient, PortError> {
    let pk = recipient_pk(id, index);
    Ok(Recipient {
        index,
        chat: match item.get(CHAT) {
            Some(AttributeValue::N(n)) => n
                .parse()
                .map_err(|_| PortError::rejected(GET, Malformed(pk.clone(), CHAT)))?,
            _ => return Err(PortError::rejected(GET, Malformed(pk, CHAT))),
        },
        attempts: u32::try_from(read_num(item, ATTEMPTS).unwrap_or(0)).unwrap_or(u32::MAX),
        state: read_json(item, STATE, &pk)?,
    })
}

fn id_of_job(item: &Item) -> Result<u64, PortError> {
    item.get("pk")
        .and_then(|pk| pk.as_s().ok())
        .and_then(|pk| pk.strip_prefix("broadcast#"))
        .and_then(|id| id.parse().ok())
        .ok_or_else(|| PortError::rejected(BATCH_GET, Malformed("a job".into(), "pk")))
}

/// Where the jobs not ended begin, as `broadcast#seq` holds it.
struct OpenMark {
    /// The last job id taken.
    last: u64,
    /// The oldest job that may not have ended: every job before it has (1 when never written).
    first: u64,
    /// One more with every move of `first`; 0 when never written.
    version: u64,
}

fn index_of(item: &Item) -> Option<u64> {
    let pk = item.get("pk")?.as_s().ok()?;
    pk.rsplit_once("#r#")?.1.parse().ok()
}

impl DynamoBroadcasts {
    /// The broadcasts in `table`.
    pub fn new(client: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    /// The jobs' ids and where the ones not ended begin.
    async fn open_mark(&self) -> Result<OpenMark, PortError> {
        let item = self.get(SEQ_PK.into()).await?;
        let read = |name| item.as_ref().and_then(|item| read_num(item, name));
        Ok(OpenMark {
            last: read("last").unwrap_or(0),
            first: read(FIRST_OPEN).unwrap_or(1),
            version: read(OPEN_VERSION).unwrap_or(0),
        })
    }

    /// Sets the oldest job that may not have ended to `first`, unless the mark moved since it
    /// was read as `mark` (a job that ended ran again meanwhile): the next look moves it then.
    async fn move_mark(&self, mark: &OpenMark, first: u64) -> Result<(), PortError> {
        let moved = self.mark_update(mark, first)?;
        // Refused when the mark moved: nothing to do.
        self.transact(vec![TransactWriteItem::builder().update(moved).build()])
            .await?;
        Ok(())
    }

    /// The write that sets the mark read as `mark` to `first`, on the condition that it is still
    /// as read.
    fn mark_update(&self, mark: &OpenMark, first: u64) -> Result<Update, PortError> {
        let update = Update::builder()
            .table_name(&self.table)
            .set_key(Some(key_of(SEQ_PK.into())))
            .update_expression("SET #first = :first, #version = :next")
            .expression_attribute_names("#first", FIRST_OPEN)
            .expression_attribute_names("#version", OPEN_VERSION)
            .expression_attribute_values(":first", number(first))
            .expression_attribute_values(":next", number(mark.version + 1));
        let update = match mark.version {
            0 => update.condition_expression("attribute_not_exists(#version)"),
            seen => update
                .condition_expression("#version = :seen")
                .expression_attribute_values(":seen", number(seen)),
        };
        update.build().map_err(|e| PortError::rejected(UPDATE, e))
    }

    /// The latest step of job `id`'s chain claimed; 0 when none was.
    async fn claimed(&self, id: u64) -> Result<u64, PortError> {
        Ok(self
            .get(job_pk(id))
            .await?
            .and_then(|item| read_num(&item, CHAIN_STEP))
            .unwrap_or(0))
    }

    async fn get(&self, pk: String) -> Result<Option<Item>, PortError> {
        let answer = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key_of(pk)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| port_error(GET, e))?;
        Ok(answer.item)
    }

    /// The items of `keys`, strongly consistent, in any order; keys with no item are left out.
    async fn batch_get(&self, keys: Vec<String>) -> Result<Vec<Item>, PortError> {
        let mut found = Vec::new();
        for chunk in keys.chunks(BATCH_GET_KEYS) {
            let mut wanted: Vec<Item> = chunk.iter().cloned().map(key_of).collect();
            while !wanted.is_empty() {
                let request = KeysAndAttributes::builder()
                    .set_keys(Some(wanted))
                    .consistent_read(true)
                    .build()
                    .map_err(|e| PortError::rejected(BATCH_GET, e))?;
                let answer = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, request)
                    .send()
                    .await
                    .map_err(|e| port_error(BATCH_GET, e))?;
                if let Some(mut items) = answer.responses {
                    found.extend(items.remove(&self.table).unwrap_or_default());
                }
                wanted = answer
                    .unprocessed_keys
                    .and_then(|mut left| left.remove(&self.table))
                    .map(|left| left.keys)
                    .unwrap_or_default();
            }
        }
        Ok(found)
    }

    /// The recipients of job `id` at `indexes`, in index order.
    async fn recipients_at(
        &self,
        id: u64,
        indexes: impl Iterator<Item = u64>,
    ) -> Result<Vec<Recipient>, PortError> {
        let keys = indexes.map(|index| recipient_pk(id, index)).collect();
        let mut recipients = Vec::new();
        for item in self.batch_get(keys).await? {
            let index = index_of(&item).ok_or_else(|| {
                PortError::rejected(BATCH_GET, Malformed("a recipient".into(), "pk"))
            })?;
            recipients.push(recipient_of(id, index, &item)?);
        }
        recipients.sort_by_key(|r| r.index);
        Ok(recipients)
    }

    /// The recipients of job `id` in `span` (of `total`), in index order, a page of
    /// [`BATCH_GET_KEYS`] at a time, until `each` says enough. [`PAGES_AT_ONCE`] pages are read
    /// at a time: a chunk is read between its sends, which wait for it.
    async fn for_each_page(
        &self,
        id: u64,
        (span, total): (&Indexes, u64),
        mut each: impl FnMut(Vec<Recipient>) -> bool,
    ) -> Result<(), PortError> {
        let end = span.end.min(total);
        let pages = (span.start..end)
            .step_by(BATCH_GET_KEYS)
            .map(|from| self.recipients_at(id, from..(from + BATCH_GET_KEYS as u64).min(end)));
        let mut pages = futures::stream::iter(pages).buffered(PAGES_AT_ONCE);
        while let Some(page) = pages.next().await {
            if !each(page?) {
                break;
            }
        }
        Ok(())
    }

    /// Writes `chats` as job `id`'s recipients, in their order.
    async fn write_recipients(&self, id: u64, chats: &[i64]) -> Result<(), PortError> {
        self.write_recipients_from(id, 0, chats).await
    }

    /// Writes `chats` as job `id`'s pending recipients from index `first` on, a few batches at a
    /// time.
    async fn write_recipients_from(
        &self,
        id: u64,
        first: u64,
        chats: &[i64],
    ) -> Result<(), PortError> {
        let items: Vec<WriteRequest> = chats
            .iter()
            .zip(first..)
            .map(|(chat, index)| {
                let state = RecipientState::Pending;
                let item = HashMap::from([
                    ("pk".to_owned(), string(recipient_pk(id, index))),
                    (KIND.to_owned(), string("broadcast_recipient")),
                    (CHAT.to_owned(), number(chat)),
                    (ATTEMPTS.to_owned(), number(0)),
                    (TAG.to_owned(), string(tag(&state))),
                    (STATE.to_owned(), json(&state)),
                ]);
                let put = PutRequest::builder()
                    .set_item(Some(item))
                    .build()
                    .map_err(|e| PortError::rejected(BATCH_WRITE, e))?;
                Ok(WriteRequest::builder().put_request(put).build())
            })
            .collect::<Result<_, PortError>>()?;
        let batches: Vec<Vec<WriteRequest>> =
            items.chunks(BATCH_WRITE_ITEMS).map(<[_]>::to_vec).collect();
        let batches = batches.into_iter().map(|batch| self.batch_write(batch));
        let mut batches = futures::stream::iter(batches).buffer_unordered(WRITES_AT_ONCE);
        while let Some(written) = batches.next().await {
            written?;
        }
        Ok(())
    }

    /// Writes `items`, again those DynamoDB left unprocessed, until all are.
    async fn batch_write(&self, items: Vec<WriteRequest>) -> Result<(), PortError> {
        let (mut left, mut pause) = (items, std::time::Duration::from_millis(50));
        while !left.is_empty() {
            let answer = self
                .client
                .batch_write_item()
                .request_items(&self.table, left)
                .send()
                .await
                .map_err(|e| port_error(BATCH_WRITE, e))?;
            left = answer
                .unprocessed_items
                .and_then(|mut items| items.remove(&self.table))
                .unwrap_or_default();
            // Left over when the table's capacity ran short: written again after a pause.
            if !left.is_empty() {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_secs(1));
            }
        }
        Ok(())
    }

    /// An update of job `id`'s counts and times for `outcome`, as [`BroadcastJob::count`] makes
    /// them, to go in one transaction with the recipient's write.
    fn count_update(
        &self,
        id: u64,
        outcome: &Outcome,
        now: Timestamp,
    ) -> Result<Update, PortError> {
        let mut values: Item = HashMap::from([(":one".to_owned(), number(1))]);
        let expression = match outcome {
            Outcome::Sent { .. } => {
                values.insert(":now".into(), number(now.0));
                values.insert(":zero".into(), number(0));
                "ADD sent :one SET first_sent_at = if_not_exists(first_sent_at, :now), \
                 last_sent_at = :now, refusals = :zero"
            }
            Outcome::Gone { .. } => "ADD gone :one",
            Outcome::Failed { error } => {
                values.insert(":error".into(), string(error.clone()));
                "ADD failed :one SET last_error = :error"
            }
            Outcome::Uncertain => "ADD uncertain :one",
            Outcome::Retry { error, .. } => {
                values.insert(":error".into(), string(error.clone()));
                "ADD retrying :one SET last_error = :error"
            }
            Outcome::Refused { error } => {
                values.insert(":error".into(), string(error.clone()));
                "ADD retrying :one, refusals :one SET last_error = :error"
            }
            Outcome::Held { .. } => "ADD retrying :one",
            Outcome::Unsent { error, .. } | Outcome::Halted { error } => {
                values.insert(":error".into(), string(error.clone()));
                "ADD retrying :one SET last_error = :error"
            }
        };
        Update::builder()
            .table_name(&self.table)
            .set_key(Some(key_of(job_pk(id))))
            .update_expression(expression)
            .set_expression_attribute_values(Some(values))
            .build()
            .map_err(|e| PortError::rejected(TRANSACT, e))
    }

    /// Runs `items` as one transaction; `false` when a condition refused it. A transaction
    /// cancelled because another one held the job item at that moment is run again.
    async fn transact(&self, items: Vec<TransactWriteItem>) -> Result<bool, PortError> {
        let mut pause = std::time::Duration::from_millis(10);
        let mut tries = 0;
        loop {
            let err = match self
                .client
                .transact_write_items()
                .set_transact_items(Some(items.clone()))
                .send()
                .await
            {
                Ok(_) => return Ok(true),
                Err(err) => err,
            };
            let reasons = match err.as_service_error() {
                Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) => {
                    cancelled.cancellation_reasons().to_vec()
                }
                _ => return Err(port_error(TRANSACT, err)),
            };
            if reasons
                .iter()
                .any(|r| r.code() == Some("ConditionalCheckFailed"))
            {
                return Ok(false);
            }
            tries += 1;
            let conflict = reasons
                .iter()
                .any(|r| r.code() == Some("TransactionConflict"));
            if !conflict || tries >= 8 {
                return Err(port_error(TRANSACT, err));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_millis(500));
        }
    }

    /// Puts `recipient` (failed or uncertain, as read) back on the list, due at `now` with no
    /// attempt spent, and counts it on the job, in one transaction; `false` when it was no longer
    /// as read.
    async fn put_back(
        &self,
        id: u64,
        recipient: &Recipient,
        now: Timestamp,
    ) -> Result<bool, PortError> {
        let again = RecipientState::Retrying { due: now.0 };
        let was = tag(&recipient.state);
        let item = Update::builder()
            .table_name(&self.table)
            .set_key(Some(key_of(recipient_pk(id, recipient.index))))
            .update_expression(
                "SET #state = :state, #tag = :to, #attempts = :zero REMOVE expires_at",
            )
            .condition_expression("#tag = :from")
            .expression_attribute_names("#state", STATE)
            .expression_attribute_names("#tag", TAG)
            .expression_attribute_names("#attempts", ATTEMPTS)
            .expression_attribute_values(":state", json(&again))
            .expression_attribute_values(":to", string(tag(&again)))
            .expression_attribute_values(":from", string(was))
            .expression_attribute_values(":zero", number(0))
            .build()
            .map_err(|e| PortError::rejected(TRANSACT, e))?;
        let job = Update::builder()
            .table_name(&self.table)
            .set_key(Some(key_of(job_pk(id))))
            .update_expression(format!("ADD {was} :less, retrying :one"))
            .expression_attribute_values(":less", number(-1))
            .expression_attribute_values(":one", number(1))
            .build()
            .map_err(|e| PortError::rejected(TRANSACT, e))?;
        self.transact(vec![
            TransactWriteItem::builder().update(item).build(),
            TransactWriteItem::builder().update(job).build(),
        ])
        .await
    }

    /// Moves recipient `index` from the state tagged `from` to `to`, counting `outcome` on the
    /// job, in one transaction; `false` when the recipient was not in `from`. A recipient given
    /// its outcome is `kept` until then, for DynamoDB's TTL.
    async fn move_recipient(
        &self,
        id: u64,
        index: u64,
        from: &str,
        (to, attempts): (&RecipientState, u32),
        (job, kept): (Update, Option<Timestamp>),
    ) -> Result<bool, PortError> {
        let mut set =
            "SET #state = :state, #tag = :to, #attempts = #attempts + :attempts".to_owned();
        let mut recipient = Update::builder();
        if let Some(until) = kept {
            set.push_str(", expires_at = :expires");
            recipient = recipient.expression_attribute_values(":expires", expiry_secs(until));
        }
        let recipient = recipient
            .table_name(&self.table)
            .set_key(Some(key_of(recipient_pk(id, index))))
            .update_expression(set)
            .condition_expression("#tag = :from")
            .expression_attribute_names("#state", STATE)
            .expression_attribute_names("#tag", TAG)
            .expression_attribute_names("#attempts", ATTEMPTS)
            .expression_attribute_values(":state", json(to))
            .expression_attribute_values(":to", string(tag(to)))
            .expression_attribute_values(":from", string(from))
            .expression_attribute_values(":attempts", number(attempts))
            .build()
            .map_err(|e| PortError::rejected(TRANSACT, e))?;
        self.transact(vec![
            TransactWriteItem::builder().update(recipient).build(),
            TransactWriteItem::builder().update(job).build(),
        ])
        .await
    }
}

impl DynamoBroadcasts {
    /// The id a new job of `spec` takes, or the job of its origin (`Err`) when a start of that
    /// origin wrote one already.
    async fn new_id(
        &self,
        spec: &BroadcastSpec,
        now: Timestamp,
    ) -> Result<Result<u64, Created>, PortError> {
        let origin_pk = format!("broadcast#origin#{}", spec.origin);
        let by_origin = spec.origin != "cli";
        let known = match by_origin {
            true => self
                .get(origin_pk.clone())
                .await?
                .and_then(|item| read_num(&item, "job")),
            false => None,
        };
        if let Some(id) = known {
            if let Some(job) = self.job(&BroadcastId(id)).await? {
                return Ok(Err(Created::Existing { job }));
            }
        }
        Ok(Ok(match known {
            // A start that died after taking its id: it goes on with it.
            Some(id) => id,
            None => {
                let answer = self
                    .client
                    .update_item()
                    .table_name(&self.table)
                    .set_key(Some(key_of(SEQ_PK.into())))
                    .update_expression("ADD #last :one SET #kind = :kind")
                    .expression_attribute_names("#last", "last")
                    .expression_attribute_names("#kind", KIND)
                    .expression_attribute_values(":one", number(1))
                    .expression_attribute_values(":kind", string("broadcast_seq"))
                    .return_values(ReturnValue::UpdatedNew)
                    .send()
                    .await
                    .map_err(|e| port_error(UPDATE, e))?;
                let id = answer
                    .attributes
                    .as_ref()
                    .and_then(|item| read_num(item, "last"))
                    .ok_or_else(|| PortError::rejected(UPDATE, Malformed(SEQ_PK.into(), "last")))?;
                if by_origin {
                    let put = self
                        .client
                        .put_item()
                        .table_name(&self.table)
                        .item("pk", string(origin_pk.clone()))
                        .item(KIND, string("broadcast_origin"))
                        .item("job", number(id))
                        // A handler's retried start comes within its update's life, well
                        // inside the time an ended job is kept.
                        .item("expires_at", expiry_secs(now.plus(KEEP_ENDED)))
                        .condition_expression("attribute_not_exists(pk)")
                        .send()
                        .await;
                    if let Err(err) = put {
                        let taken = err
                            .as_service_error()
                            .is_some_and(|e| e.is_conditional_check_failed_exception());
                        if !taken {
                            return Err(port_error(PUT, err));
                        }
                        // Another start of the same origin won: its job is the one. Until that
                        // start has written its job, writing its recipients here could undo sends
                        // it has begun, so this start is told to try again.
                        let item = self.get(origin_pk).await?;
                        let other = item.and_then(|item| read_num(&item, "job"));
                        if let Some(job) = match other {
                            Some(other) => self.job(&BroadcastId(other)).await?,
                            None => None,
                        } {
                            return Ok(Err(Created::Existing { job }));
                        }
                        return Err(PortError::unavailable(
                            PUT,
                            Malformed(
                                format!("broadcast#origin#{}", spec.origin),
                                "another start of this origin is still writing its job",
                            ),
                        ));
                    }
                }
                id
            }
        }))
    }

    async fn create_job(
        &self,
        spec: &BroadcastSpec,
        chats: &[i64],
        now: Timestamp,
    ) -> Result<Created, PortError> {
        let id = match self.new_id(spec, now).await? {
            Ok(id) => id,
            Err(existing) => return Ok(existing),
        };
        self.write_recipients(id, chats).await?;
        let job = BroadcastJob::new(BroadcastId(id), spec.clone(), chats.len() as u64, now);
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(job_item(&job)))
            .send()
            .await
            .map_err(|e| port_error(PUT, e))?;
        Ok(Created::New { job })
    }

    /// Writes job `id` with `audience` and no recipients yet, in one transaction: the job, and
    /// the listed chats in parts.
    async fn write_expanding(
        &self,
        id: u64,
        spec: &BroadcastSpec,
        audience: &Audience,
        now: Timestamp,
    ) -> Result<Created, PortError> {
        let job = BroadcastJob {
            expanding: true,
            ..BroadcastJob::new(BroadcastId(id), spec.clone(), 0, now)
        };
        let mut item = job_item(&job);
        item.insert(EXPANDED.to_owned(), number(0));
        let mut parts = Vec::new();
        match audience {
            Audience::Chats { chats } => {
                item.insert(LISTED.to_owned(), number(chats.len()));
                for (part, chats) in chats.chunks(PART_CHATS).enumerate() {
                    let bytes: Vec<u8> = chats.iter().flat_map(|chat| chat.to_le_bytes()).collect();
                    parts.push(HashMap::from([
                        ("pk".to_owned(), string(part_pk(id, part))),
                        (KIND.to_owned(), string("broadcast_audience")),
                        (CHATS.to_owned(), AttributeValue::B(Blob::new(bytes))),
                    ]));
                }
            }
            Audience::States { filter } => {
                item.insert(FILTER.to_owned(), json(filter));
            }
        }
        let puts = std::iter::once(item)
            .chain(parts)
            .map(|item| {
                let put = Put::builder()
                    .table_name(&self.table)
                    .set_item(Some(item))
                    .build()
                    .map_err(|e| PortError::rejected(TRANSACT, e))?;
                Ok(TransactWriteItem::builder().put(put).build())
            })
            .collect::<Result<Vec<_>, PortError>>()?;
        self.transact(puts).await?;
        Ok(Created::New { job })
    }

    /// Writes the next `limit` listed chats of job `item` (the job's item, read) as recipients,
    /// and moves its count on; `true` when every one is written.
    async fn expand_listed(&self, id: u64, item: &Item, limit: u64) -> Result<bool, PortError> {
        let (from, listed) = (
            read_num(item, EXPANDED).unwrap_or(0),
            read_num(item, LISTED).unwrap_or(0),
        );
        let to = from.saturating_add(limit).min(listed);
        let mut chats = Vec::new();
        let parts = (from as usize / PART_CHATS)..(to as usize).div_ceil(PART_CHATS);
        for part in parts.clone() {
            let pk = part_pk(id, part);
            let stored = self.get(pk.clone()).await?;
            let Some(AttributeValue::B(bytes)) = stored.as_ref().and_then(|i| i.get(CHATS)) else {
                return Err(PortError::rejected(GET, Malformed(pk, CHATS)));
            };
            chats.extend(
                bytes
                    .as_ref()
                    .chunks_exact(8)
                    .map(|b| i64::from_le_bytes(b.try_into().unwrap_or_default())),
            );
        }
        let skip = from as usize - parts.start * PART_CHATS;
        let chats = chats
            .get(skip..skip + (to - from) as usize)
            .ok_or_else(|| PortError::rejected(GET, Malformed(part_pk(id, parts.start), CHATS)))?;
        self.write_recipients_from(id, from, chats).await?;
        let done = to >= listed;
        if !self.expanded_to(id, from, to, None, done).await? || !done {
            return Ok(done);
        }
        // Written: the parts are kept no longer.
        self.drop_parts(id, listed).await;
        Ok(true)
    }

    /// Deletes the parts of job `id`'s list of `listed` chats; one that stays is logged, and
    /// never read again.
    async fn drop_parts(&self, id: u64, listed: u64) {
        for part in 0..(listed as usize).div_ceil(PART_CHATS) {
            let deleted = self
                .client
                .delete_item()
                .table_name(&self.table)
                .set_key(Some(key_of(part_pk(id, part))))
                .send()
                .await;
            if let Err(error) = deleted {
                tracing::warn!(broadcast = id, error = %tgq_core::error::error_chain(&port_error(DELETE, error)), "a part of a broadcast's audience was not deleted; it is kept, unread");
            }
        }
    }

    /// Ends the writing of cancelled job `id`'s audience (its item `item`, read): the rest of it
    /// is never written.
    async fn drop_audience(&self, id: u64, item: &Item) -> Result<(), PortError> {
        if !matches!(item.get(EXPANDING), Some(AttributeValue::Bool(true))) {
            return Ok(());
        }
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key_of(job_pk(id))))
            .update_expression("SET #expanding = :no REMOVE #scan")
            .expression_attribute_names("#expanding", EXPANDING)
            .expression_attribute_names("#scan", SCAN_FROM)
            .expression_attribute_values(":no", AttributeValue::Bool(false))
            .send()
            .await
            .map_err(|e| port_error(UPDATE, e))?;
        if let Some(listed) = read_num(item, LISTED) {
            self.drop_parts(id, listed).await;
        }
        Ok(())
    }

    /// Writes the chats a page of the states' scan takes for job `item` (the job's item, read),
    /// of about `limit` states, as recipients, and moves its count and its scan on; `true` when
    /// the scan is through.
    async fn expand_states(&self, id: u64, item: &Item, limit: u64) -> Result<bool, PortError> {
        let pk = job_pk(id);
        let spec: BroadcastSpec = read_json(item, SPEC, &pk)?;
        let filter: StateFilter = read_json(item, FILTER, &pk)?;
        let from = read_num(item, EXPANDED).unwrap_or(0);
        let start = item
            .get(SCAN_FROM)
            .and_then(|v| v.as_s().ok())
            .map(|at| key_of(at.clone()));
        let (chats, next) = self
            .matching_page(
                &spec.bot,
                &filter,
                start,
                i32::try_from(limit).unwrap_or(i32::MAX),
            )
            .await?;
        let to = from + chats.len() as u64;
        self.write_recipients_from(id, from, &chats).await?;
        let done = next.is_none();
        self.expanded_to(id, from, to, next, done).await?;
        Ok(done)
    }

    /// Moves job `id`'s written count from `from` to `to` (its total with it), and its scan on to
    /// `scan_from`; `done` ends the writing. `false` when another run moved it first.
    async fn expanded_to(
        &self,
        id: u64,
        from: u64,
        to: u64,
        scan_from: Option<String>,
        done: bool,
    ) -> Result<bool, PortError> {
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key_of(job_pk(id))))
            .condition_expression("#expanded = :from AND #expanding = :yes")
            .expression_attribute_names("#expanded", EXPANDED)
            .expression_attribute_names("#expanding", EXPANDING)
            .expression_attribute_names("#total", "total")
            .expression_attribute_values(":from", number(from))
            .expression_attribute_values(":to", number(to))
            .expression_attribute_values(":yes", AttributeValue::Bool(true));
        let mut set = "SET #expanded = :to, #total = :to".to_owned();
        if done {
            set.push_str(", #expanding = :no");
            update = update.expression_attribute_values(":no", AttributeValue::Bool(false));
        }
        update = match scan_from {
            Some(at) => {
                set.push_str(", #scan = :scan");
                update.expression_attribute_values(":scan", string(at))
            }
            None => {
                set.push_str(" REMOVE #scan");
                update
            }
        }
        .expression_attribute_names("#scan", SCAN_FROM);
        match update.update_expression(set).send().await {
            Ok(_) => Ok(true),
            Err(err) if update_condition_failed(&err).is_some() => Ok(false),
            Err(err) => Err(port_error(UPDATE, err)),
        }
    }

    /// The chats of `bot` whose state `filter` takes among about `limit` items of the table's
    /// scan from `start` (from its beginning when `None`), and the key the scan goes on from
    /// (`None`: it is through).
    async fn matching_page(
        &self,
        bot: &BotId,
        filter: &StateFilter,
        start: Option<Item>,
        limit: i32,
    ) -> Result<(Vec<i64>, Option<String>), PortError> {
        // The chats' states are items keyed `{bot}#state#{group}`; a scan finds them. A broadcast
        // starts now and then, so a scan's cost is paid then, not on any update's path.
        let prefix = format!("{bot}#state#");
        let answer = self
            .client
            .scan()
            .table_name(&self.table)
            .filter_expression("begins_with(pk, :prefix)")
            .expression_attribute_values(":prefix", string(prefix))
            .set_exclusive_start_key(start)
            .limit(limit.max(1))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| port_error(SCAN, e))?;
        let chats = answer
            .items
            .unwrap_or_default()
            .into_iter()
            .filter_map(|item| {
                let pk = item.get("pk").and_then(|pk| pk.as_s().ok())?;
                let chat = StateKey::split_pk(pk)?.1.parse::<i64>().ok()?;
                let state = crate::item::Item(item.clone()).state().ok()?;
                let value = serde_json::from_str(&state.json).unwrap_or(serde_json::Value::Null);
                filter.matches(&state.format, &value).then_some(chat)
            })
            .collect();
        let next = answer
            .last_evaluated_key
            .and_then(|key| key.get("pk").and_then(|pk| pk.as_s().ok()).cloned());
        Ok((chats, next))
    }

    /// [`BroadcastStore::change`]: the job's state, compared as it was read.
    async fn change_job(
        &self,
        id: &BroadcastId,
        change: Change,
        now: Timestamp,
    ) -> Result<Changed, PortError> {
        // The state is compared as it was read: a change another writer made first refuses this
        // one, which reads again.
        loop {
            let Some(mut job) = self.job(id).await? else {
                return Ok(Changed::NotFound);
            };
            let was = serde_json::to_string(&job.state).unwrap_or_default();
            if !job.apply(&change, now) {
                return Ok(Changed::Refused { job });
            }
            let mut update = self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(key_of(job_pk(id.0))))
                .condition_expression("#state = :was")
                .expression_attribute_names("#state", STATE)
                .expression_attribute_values(":was", string(was))
                .expression_attribute_values(":state", json(&job.state))
                .expression_attribute_values(":refusals", number(job.refusals));
            update = match job.ended_at {
                // An ended job is kept `KEEP_ENDED` from then, for DynamoDB's TTL.
                Some(ended) => update
                    .update_expression(
                        "SET #state = :state, refusals = :refusals, ended_at = :ended, expires_at = :expires",
                    )
                    .expression_attribute_values(":ended", number(ended.0))
                    .expression_attribute_values(":expires", expiry_secs(ended.plus(KEEP_ENDED))),
                None => update.update_expression("SET #state = :state, refusals = :refusals"),
            };
            match update.send().await {
                Ok(_) => return Ok(Changed::Changed { job }),
                Err(err) if update_condition_failed(&err).is_some() => continue,
                Err(err) => return Err(port_error(UPDATE, err)),
            }
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
        let mut abandoned = 0;
        for recipient in begun {
            let update = self.count_update(id.0, &Outcome::Uncertain, now)?;
            if self
                .move_recipient(
                    id.0,
                    recipient.index,
                    "sending",
                    (&RecipientState::Uncertain, 0),
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
