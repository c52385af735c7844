//! The update records in DynamoDB: one item per update, every state change one conditional write.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use tgq_core::ids::RecordKey;
use tgq_core::ports::{
    Claim, ClaimRequest, Claimed, Inserted, RecordReader, Settlement, UpdateLedger, UpdateStore,
};
use tgq_core::record::{ActionIntent, Status, Timestamp, UpdateRecord};
use tgq_core::PortError;

use crate::error::port_error;
use crate::item::{self, expiry_secs, number, string, Item};

// The parts conditions are built from, each true of the stored item (Powertools' style).

/// No record with this key was ever stored, or TTL has already deleted it.
const NOT_EXISTS: &str = "attribute_not_exists(pk)";
/// The record exists: an update must never create a half-formed item.
const EXISTS: &str = "attribute_exists(pk)";
/// The record outlived its TTL; DynamoDB deletes such items only eventually, so they count as absent.
const EXPIRED: &str = "expires_at <= :now_secs";
/// The record waits for a run: stored, queued, or backing off after a transient failure.
const CLAIMABLE_STATUS: &str = "#status IN (:received, :queued, :retrying)";
/// The worker holding the lease died or ran out of time, so the lease may be taken over.
const LEASE_EXPIRED: &str =
    "(#status = :processing AND (attribute_not_exists(lease_until) OR lease_until <= :now))";
/// Only a freshly stored record becomes queued; a worker may already have moved it further.
const STILL_RECEIVED: &str = "#status = :received";

/// A new record may be written where no live one is: the key is free or its record expired.
fn key_is_free() -> String {
    format!("{NOT_EXISTS} OR {EXPIRED}")
}

/// A claim updates in place a missing record (creating it) or a live one that is waiting or whose
/// lease lapsed. An expired record is excluded: it must restart from zero, which a put does.
fn claimable_in_place() -> String {
    format!("{NOT_EXISTS} OR (NOT ({EXPIRED}) AND ({CLAIMABLE_STATUS} OR {LEASE_EXPIRED}))")
}

/// Takes the lease and counts the run; the `if_not_exists` parts fill in a record the claim creates.
const CLAIM_UPDATE: &str = "SET #status = :processing, lease_until = :lease, \
     #group = if_not_exists(#group, :group), payload = if_not_exists(payload, :payload), \
     received_at = if_not_exists(received_at, :now), expires_at = if_not_exists(expires_at, :exp), \
     actions = if_not_exists(actions, :no_actions) \
     ADD attempts :one";

/// How often a claim retries after losing a race to re-create an expired record.
const CLAIM_ROUNDS: usize = 3;

const PUT: &str = "DynamoDB PutItem";
const UPDATE: &str = "DynamoDB UpdateItem";
const GET: &str = "DynamoDB GetItem";

/// The update records in one DynamoDB table with the string partition key `pk`: the webhook's
/// [`UpdateStore`], the worker's [`UpdateLedger`] and the operations' [`RecordReader`].
#[derive(Clone, Debug)]
pub struct DynamoStore {
    client: aws_sdk_dynamodb::Client,
    table: String,
}

/// The result of a claim's in-place update.
enum InPlace {
    /// Decided: run, already final, or busy.
    Decided(Claim),
    /// The stored record expired: it has to be re-created from the message.
    Expired,
}

impl DynamoStore {
    /// A store on `table`, using a client built once per cold start.
    pub fn new(client: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    fn update(&self, key: &RecordKey) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(item::key(key)))
    }

    /// Runs a conditional update whose failed condition means "no such record".
    async fn update_existing(
        &self,
        request: UpdateItemFluentBuilder,
        missing: &'static str,
    ) -> Result<(), PortError> {
        match request.send().await {
            Ok(_) => Ok(()),
            Err(err) if update_condition_failed(&err).is_some() => {
                Err(PortError::rejected(UPDATE, missing))
            }
            Err(err) => Err(port_error(UPDATE, err)),
        }
    }

    async fn claim_in_place(&self, request: &ClaimRequest) -> Result<InPlace, PortError> {
        let result = self
            .update(&request.key)
            .update_expression(CLAIM_UPDATE)
            .condition_expression(claimable_in_place())
            .expression_attribute_names("#status", item::STATUS)
            .expression_attribute_names("#group", item::GROUP)
            .expression_attribute_values(":processing", string(Status::Processing.as_str()))
            .expression_attribute_values(":received", string(Status::Received.as_str()))
            .expression_attribute_values(":queued", string(Status::Queued.as_str()))
            .expression_attribute_values(":retrying", string(Status::Retrying.as_str()))
            .expression_attribute_values(":lease", number(request.lease_until.0))
            .expression_attribute_values(":group", string(request.group.as_str()))
            .expression_attribute_values(
                ":payload",
                AttributeValue::B(Blob::new(request.payload.to_vec())),
            )
            .expression_attribute_values(":now", number(request.now.0))
            .expression_attribute_values(":now_secs", number(request.now.as_secs()))
            .expression_attribute_values(":exp", expiry_secs(request.expires_at))
            .expression_attribute_values(":no_actions", AttributeValue::M(HashMap::new()))
            .expression_attribute_values(":one", number(1))
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let old = match result {
            Ok(output) => {
                let new = Item(output.attributes.unwrap_or_default());
                let claimed = Claimed {
                    attempt: new.attempts().map_err(|e| PortError::rejected(UPDATE, e))?,
                    actions: new.actions().map_err(|e| PortError::rejected(UPDATE, e))?,
                };
                return Ok(InPlace::Decided(Claim::Run(claimed)));
            }
            Err(err) => match update_condition_failed(&err) {
                Some(old) => old.ok_or_else(|| no_old_item(UPDATE))?,
                None => return Err(port_error(UPDATE, err)),
            },
        };
        why_not_claimable(&old, request.now)
    }

    /// Replaces an expired record with a fresh one, already claimed: its attempts and actions
    /// belong to the old life. `None` when another worker re-created it first.
    async fn recreate(&self, request: &ClaimRequest) -> Result<Option<Claim>, PortError> {
        let mut record = UpdateRecord::received(
            request.key.clone(),
            request.group.clone(),
            request.payload.clone(),
            request.now,
            std::time::Duration::ZERO,
        );
        record.status = Status::Processing;
        record.attempts = 1;
        record.lease_until = Some(request.lease_until);
        record.expires_at = request.expires_at;
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(Item::from(&record).0))
            .condition_expression(key_is_free())
            .expression_attribute_values(":now_secs", number(request.now.as_secs()))
            .send()
            .await;
        match result {
            Ok(_) => Ok(Some(Claim::Run(Claimed {
                attempt: record.attempts,
                actions: record.actions,
            }))),
            Err(err) if put_condition_failed(&err).is_some() => Ok(None),
            Err(err) => Err(port_error(PUT, err)),
        }
    }
}

/// Why a claim's condition failed, read from the old item: the record is finished, leased, or expired.
fn why_not_claimable(old: &Item, now: Timestamp) -> Result<InPlace, PortError> {
    let unreadable = |e: item::ItemError| PortError::rejected(UPDATE, e);
    if old.is_expired(now).map_err(unreadable)? {
        return Ok(InPlace::Expired);
    }
    let status = old.status().map_err(unreadable)?;
    if status.is_final() {
        return Ok(InPlace::Decided(Claim::AlreadyFinal(status)));
    }
    match (status, old.lease_until().map_err(unreadable)?) {
        (Status::Processing, Some(until)) if until > now => {
            Ok(InPlace::Decided(Claim::Busy(until)))
        }
        _ => Err(PortError::rejected(
            UPDATE,
            format!("the claim's condition failed on a claimable {status} record"),
        )),
    }
}

fn no_old_item(what: &'static str) -> PortError {
    PortError::rejected(
        what,
        "the failed condition returned no item (ReturnValuesOnConditionCheckFailure unsupported?)",
    )
}

/// The old item (if returned) when a put failed on its condition; `None` for any other failure.
fn put_condition_failed(err: &SdkError<PutItemError, HttpResponse>) -> Option<Option<Item>> {
    match err.as_service_error() {
        Some(PutItemError::ConditionalCheckFailedException(e)) => Some(e.item.clone().map(Item)),
        _ => None,
    }
}

/// The old item (if returned) when an update failed on its condition; `None` for any other failure.
fn update_condition_failed(err: &SdkError<UpdateItemError, HttpResponse>) -> Option<Option<Item>> {
    match err.as_service_error() {
        Some(UpdateItemError::ConditionalCheckFailedException(e)) => Some(e.item.clone().map(Item)),
        _ => None,
    }
}

#[async_trait]
impl UpdateStore for DynamoStore {
    async fn insert(&self, record: &UpdateRecord, now: Timestamp) -> Result<Inserted, PortError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(Item::from(record).0))
            .condition_expression(key_is_free())
            .expression_attribute_values(":now_secs", number(now.as_secs()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Inserted::New),
            Err(err) => match put_condition_failed(&err) {
                // A duplicate costs no second read: the failed condition returns the stored item.
                Some(Some(old)) => old
                    .status()
                    .map(Inserted::Exists)
                    .map_err(|e| PortError::rejected(PUT, e)),
                Some(None) => Err(no_old_item(PUT)),
                None => Err(port_error(PUT, err)),
            },
        }
    }

    async fn mark_queued(&self, key: &RecordKey) -> Result<(), PortError> {
        let result = self
            .update(key)
            .update_expression("SET #status = :queued")
            .condition_expression(STILL_RECEIVED)
            .expression_attribute_names("#status", item::STATUS)
            .expression_attribute_values(":queued", string(Status::Queued.as_str()))
            .expression_attribute_values(":received", string(Status::Received.as_str()))
            .send()
            .await;
        match result {
            // Any later status, or no record at all, stays as it is.
            Err(err) if update_condition_failed(&err).is_some() => Ok(()),
            Err(err) => Err(port_error(UPDATE, err)),
            Ok(_) => Ok(()),
        }
    }
}

#[async_trait]
impl UpdateLedger for DynamoStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<Claim, PortError> {
        for _ in 0..CLAIM_ROUNDS {
            match self.claim_in_place(request).await? {
                InPlace::Decided(claim) => return Ok(claim),
                InPlace::Expired => {
                    if let Some(claim) = self.recreate(request).await? {
                        return Ok(claim);
                    }
                }
            }
        }
        Err(PortError::unavailable(
            UPDATE,
            "the record kept being re-created during the claim",
        ))
    }

    async fn record_intent(&self, key: &RecordKey, intent: &ActionIntent) -> Result<(), PortError> {
        let request = self
            .update(key)
            .update_expression("SET actions.#seq = :intent")
            .condition_expression(EXISTS)
            .expression_attribute_names("#seq", intent.seq.to_string())
            .expression_attribute_values(":intent", item::intent(intent));
        self.update_existing(request, "no such record").await
    }

    async fn record_result(
        &self,
        key: &RecordKey,
        seq: u32,
        result: &str,
    ) -> Result<(), PortError> {
        let request = self
            .update(key)
            .update_expression("SET actions.#seq.#result = :result")
            // A result without its intent would be an action nobody recorded sending.
            .condition_expression("attribute_exists(actions.#seq)")
            .expression_attribute_names("#seq", seq.to_string())
            .expression_attribute_names("#result", item::RESULT)
            .expression_attribute_values(":result", string(result));
        self.update_existing(request, "no such action intent").await
    }

    async fn settle(&self, key: &RecordKey, outcome: &Settlement) -> Result<(), PortError> {
        let request = self
            .update(key)
            .condition_expression(EXISTS)
            .expression_attribute_names("#status", item::STATUS)
            .expression_attribute_values(":status", string(outcome.status().as_str()));
        let request = match outcome {
            Settlement::Done => {
                request.update_expression("SET #status = :status REMOVE lease_until, last_error")
            }
            Settlement::Retrying { error } | Settlement::Dead { error } => request
                .update_expression("SET #status = :status, last_error = :error REMOVE lease_until")
                .expression_attribute_values(":error", string(error)),
        };
        self.update_existing(request, "no such record").await
    }
}

#[async_trait]
impl RecordReader for DynamoStore {
    async fn get(
        &self,
        key: &RecordKey,
        now: Timestamp,
    ) -> Result<Option<UpdateRecord>, PortError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(item::key(key)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| port_error(GET, e))?;
        let Some(found) = output.item else {
            return Ok(None);
        };
        let found = Item(found);
        if found
            .is_expired(now)
            .map_err(|e| PortError::rejected(GET, e))?
        {
            return Ok(None);
        }
        UpdateRecord::try_from(&found)
            .map(Some)
            .map_err(|e| PortError::rejected(GET, e))
    }
}
