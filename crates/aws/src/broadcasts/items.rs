//! The broadcast items' names and attributes, and how each reads and writes.

use super::*;

pub(super) const GET: &str = "DynamoDB GetItem (broadcast)";
pub(super) const PUT: &str = "DynamoDB PutItem (broadcast)";
pub(super) const UPDATE: &str = "DynamoDB UpdateItem (broadcast)";
pub(super) const BATCH_GET: &str = "DynamoDB BatchGetItem (broadcast)";
pub(super) const BATCH_WRITE: &str = "DynamoDB BatchWriteItem (broadcast)";
pub(super) const TRANSACT: &str = "DynamoDB TransactWriteItems (broadcast)";
pub(super) const SCAN: &str = "DynamoDB Scan (broadcast audience)";
pub(super) const DELETE: &str = "DynamoDB DeleteItem (broadcast audience)";

/// BatchGetItem's most keys a request.
pub(super) const BATCH_GET_KEYS: usize = 100;
/// How many pages of a span's recipients are read at once.
pub(super) const PAGES_AT_ONCE: usize = 4;
/// BatchWriteItem's most items a request.
pub(super) const BATCH_WRITE_ITEMS: usize = 25;

// The attributes of a job item.
pub(super) const KIND: &str = "kind";
pub(super) const SPEC: &str = "spec";
pub(super) const STATE: &str = "state";
pub(super) const CREATED_AT: &str = "created_at";
pub(super) const FIRST_SENT_AT: &str = "first_sent_at";
pub(super) const LAST_SENT_AT: &str = "last_sent_at";
pub(super) const ENDED_AT: &str = "ended_at";
pub(super) const REFUSALS: &str = "refusals";
pub(super) const LAST_ERROR: &str = "last_error";
/// The latest step of the job's chain claimed, and the queue message that holds it.
pub(super) const CHAIN_STEP: &str = "chain_step";
pub(super) const CHAIN_HOLDER: &str = "chain_holder";
/// The item of the jobs' ids, and of where the jobs not ended begin.
pub(super) const SEQ_PK: &str = "broadcast#seq";
pub(super) const FIRST_OPEN: &str = "first_open";
pub(super) const OPEN_VERSION: &str = "open_version";
pub(super) const COUNTS: [&str; 6] = ["total", "sent", "gone", "failed", "uncertain", "retrying"];
// The attributes of a recipient item.
pub(super) const CHAT: &str = "chat";
/// On a job a handler started, while its audience is written as recipients: `true`, how many
/// are written, and the audience: its chats' count (in parts) or its filter, and where the scan of
/// the states goes on from.
pub(super) const EXPANDING: &str = "expanding";
pub(super) const EXPANDED: &str = "expanded";
pub(super) const LISTED: &str = "listed";
pub(super) const CHATS: &str = "chats";
pub(super) const FILTER: &str = "filter";
pub(super) const SCAN_FROM: &str = "scan_from";
/// Chats in one part of a listed audience, 8 bytes each: a part is well under an item's 400 KB,
/// and [`MAX_LISTED`] of them with the job fit one transaction's 4 MB.
pub(super) const PART_CHATS: usize = 40_000;
/// Recipients' batch writes under way at once while an audience is written.
pub(super) const WRITES_AT_ONCE: usize = 4;
pub(super) const ATTEMPTS: &str = "attempts";
/// The recipient's state as JSON, and its tag alone, which conditions compare.
pub(super) const TAG: &str = "tag";

/// An item that does not read as what its key says.
#[derive(Debug, thiserror::Error)]
#[error("the broadcast item {0} is malformed: {1}")]
pub(super) struct Malformed(pub(super) String, pub(super) &'static str);

pub(super) type Item = HashMap<String, AttributeValue>;

pub(super) fn job_pk(id: u64) -> String {
    format!("broadcast#{id}")
}

/// Part `part` of the chats a handler listed for job `id`.
pub(super) fn part_pk(id: u64, part: usize) -> String {
    format!("broadcast#{id}#a#{part}")
}

pub(super) fn recipient_pk(id: u64, index: u64) -> String {
    format!("broadcast#{id}#r#{index:010}")
}

pub(super) fn key_of(pk: String) -> Item {
    HashMap::from([("pk".to_owned(), string(pk))])
}

pub(super) fn tag(state: &RecipientState) -> &'static str {
    match state {
        RecipientState::Pending => "pending",
        RecipientState::Retrying { .. } => "retrying",
        RecipientState::Sending => "sending",
        RecipientState::Sent { .. } => "sent",
        RecipientState::Gone { .. } => "gone",
        RecipientState::Failed { .. } => "failed",
        RecipientState::Uncertain { .. } => "uncertain",
    }
}

pub(super) fn json<T: serde::Serialize>(value: &T) -> AttributeValue {
    string(serde_json::to_string(value).unwrap_or_default())
}

pub(super) fn read_str<'a>(
    item: &'a Item,
    name: &'static str,
    pk: &str,
) -> Result<&'a str, PortError> {
    match item.get(name) {
        Some(AttributeValue::S(text)) => Ok(text),
        _ => Err(PortError::rejected(GET, Malformed(pk.to_owned(), name))),
    }
}

pub(super) fn read_num(item: &Item, name: &'static str) -> Option<u64> {
    match item.get(name) {
        Some(AttributeValue::N(n)) => n.parse::<i64>().ok().map(|n| n.max(0) as u64),
        _ => None,
    }
}

pub(super) fn read_json<T: serde::de::DeserializeOwned>(
    item: &Item,
    name: &'static str,
    pk: &str,
) -> Result<T, PortError> {
    serde_json::from_str(read_str(item, name, pk)?)
        .map_err(|_| PortError::rejected(GET, Malformed(pk.to_owned(), name)))
}

pub(super) fn job_of(id: u64, item: &Item) -> Result<BroadcastJob, PortError> {
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
pub(super) fn job_item(job: &BroadcastJob) -> Item {
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

pub(super) fn recipient_of(id: u64, index: u64, item: &Item) -> Result<Recipient, PortError> {
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

pub(super) fn id_of_job(item: &Item) -> Result<u64, PortError> {
    item.get("pk")
        .and_then(|pk| pk.as_s().ok())
        .and_then(|pk| pk.strip_prefix("broadcast#"))
        .and_then(|id| id.parse().ok())
        .ok_or_else(|| PortError::rejected(BATCH_GET, Malformed("a job".into(), "pk")))
}

/// Where the jobs not ended begin, as `broadcast#seq` holds it.
pub(super) struct OpenMark {
    /// The last job id taken.
    pub(super) last: u64,
    /// The oldest job that may not have ended: every job before it has (1 when never written).
    pub(super) first: u64,
    /// One more with every move of `first`; 0 when never written.
    pub(super) version: u64,
}

pub(super) fn index_of(item: &Item) -> Option<u64> {
    let pk = item.get("pk")?.as_s().ok()?;
    pk.rsplit_once("#r#")?.1.parse().ok()
}
