//! The update records in DynamoDB: one item per update, every state change one conditional write;
//! and the group states, one item per group in the same table, each written in one transaction with
//! the `DONE` settle of the update that changed it.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, Put, ReturnValue, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update,
};
use tgq_core::audit::{newest, AuditEntry, AuditLog, AuditReader};
use tgq_core::ids::{BotId, RecordKey, StateKey};
use tgq_core::payment::{charge_pk, Charge, ChargeWrite, Expect};
use tgq_core::ports::{
    Claim, ClaimRequest, Claimed, Final, Inserted, Lease, RecordReader, Reset, ResetRequest,
    ResetRule, Settlement, UpdateLedger, UpdateReset, UpdateStore,
};
use tgq_core::record::{ActionIntent, ActionOutcome, Status, Timestamp, UpdateRecord};
use tgq_core::state::{StateWrite, StoredState};
use tgq_core::PortError;

use crate::error::{cancellation_kind, port_error, Kind};
use crate::item::{self, expiry_secs, number, string, Item};

// The parts conditions are built from, each true of the stored item (Powertools' style).

/// No record with this key was ever stored, or TTL has already deleted it.
const NOT_EXISTS: &str = "attribute_not_exists(pk)";
/// The record outlived its TTL; DynamoDB deletes such items only eventually, so they count as absent.
const EXPIRED: &str = "expires_at <= :now_secs";
/// The record waits for a run: stored, queued, or backing off after a transient failure.
const CLAIMABLE_STATUS: &str = "#status IN (:received, :queued, :retrying)";
/// The worker holding the lease died or ran out of time, so the lease may be taken over.
const LEASE_EXPIRED: &str =
    "(#status = :processing AND (attribute_not_exists(lease_until) OR lease_until <= :now))";
/// The record was given up on.
const IS_DEAD: &str = "#status = :dead";
/// The record never finished: waiting, backing off, or claimed by a run that died.
const UNFINISHED: &str = "#status IN (:received, :queued, :retrying)";
/// The run that writes still holds the lease: the record is PROCESSING with the attempt number the
/// run's claim set (its fencing token). A run that outlived its lease fails this.
const HELD_BY_RUN: &str = "#status = :processing AND attempts = :token";

/// No state was ever written for the group: the run read none.
const NO_STATE: &str = "attribute_not_exists(pk)";
/// A charge's ledger entry is written once, by the first settle that carries it.
pub(crate) const NEW_CHARGE: &str = "attribute_not_exists(pk)";
/// A charge's refund is recorded once: the entry is absent or not marked refunded.
pub(crate) const NOT_REFUNDED: &str = "attribute_not_exists(refunded_at)";
/// The group's state is still the version the run read: nobody wrote it since.
const STATE_UNCHANGED: &str = "#version = :read";

/// A new record may be written where no live one is: the key is free or its record expired.
fn key_is_free() -> String {
    format!("{NOT_EXISTS} OR {EXPIRED}")
}

/// A claim updates in place a missing record (creating it) or a live one that is waiting or whose
/// lease lapsed. An expired record is excluded: it must restart from zero, which a put does.
fn claimable_in_place() -> String {
    format!("{NOT_EXISTS} OR (NOT ({EXPIRED}) AND ({CLAIMABLE_STATUS} OR {LEASE_EXPIRED}))")
}

/// Takes the lease and counts the run; the `if_not_exists` parts fill in a record the claim creates
/// and keep the time of the first run.
const CLAIM_UPDATE: &str = "SET #status = :processing, lease_until = :lease, \
     #group = if_not_exists(#group, :group), payload = if_not_exists(payload, :payload), \
     received_at = if_not_exists(received_at, :now), expires_at = if_not_exists(expires_at, :exp), \
     actions = if_not_exists(actions, :no_actions), \
     first_attempt_at = if_not_exists(first_attempt_at, :now) \
     ADD attempts :one";

/// How often a claim retries after losing a race to re-create an expired record.
const CLAIM_ROUNDS: usize = 3;

/// Restarts a record for a replay ([`tgq_core::record::UpdateRecord::restart`]): every earlier run
/// refunded, the time budget, lease and burial gone; `attempts` keeps counting (fencing).
const RESTART_UPDATE: &str = "SET #status = :queued, throttled = attempts \
     REMOVE first_attempt_at, lease_until, burial";

/// The prefix of audit entries' keys; update records' keys start with a bot id, which has no `#`.
const AUDIT_PREFIX: &str = "audit#";

const PUT: &str = "DynamoDB PutItem";
const SCAN: &str = "DynamoDB Scan";
const UPDATE: &str = "DynamoDB UpdateItem";
const GET: &str = "DynamoDB GetItem";
const TRANSACT: &str = "DynamoDB TransactWriteItems";

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
            // The old item tells what the claim took over: its runs, actions, and whether the
            // previous run died holding the lease. A claim that created the record has none.
            .return_values(ReturnValue::AllOld)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let old = match result {
            Ok(output) => {
                let old = Item(output.attributes.unwrap_or_default());
                let claimed =
                    claimed_from(&old, request).map_err(|e| PortError::rejected(UPDATE, e))?;
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
        record.first_attempt_at = Some(request.now);
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
                received_at: request.now,
                lease: Lease {
                    key: request.key.clone(),
                    token: record.attempts,
                },
                actions: record.actions,
                throttled: 0,
                first_attempt_at: request.now,
                resumed: false,
                // The caller adds the group's state, read before the claim.
                state: None,
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
    match status {
        Status::Done => return Ok(InPlace::Decided(Claim::AlreadyFinal(Final::Done))),
        Status::Dead => {
            let burial = old.burial().map_err(unreadable)?;
            return Ok(InPlace::Decided(Claim::AlreadyFinal(Final::Dead(burial))));
        }
        _ => {}
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

/// What a claim took over, from the item as it was before the claim (empty when it created it).
fn claimed_from(old: &Item, request: &ClaimRequest) -> Result<Claimed, item::ItemError> {
    let existed = !old.0.is_empty();
    let attempts_before = if existed { old.attempts()? } else { 0 };
    Ok(Claimed {
        lease: Lease {
            key: request.key.clone(),
            token: attempts_before + 1,
        },
        actions: if existed {
            old.actions()?
        } else {
            Default::default()
        },
        throttled: if existed { old.throttled()? } else { 0 },
        first_attempt_at: old.first_attempt_at()?.unwrap_or(request.now),
        resumed: existed && old.status()? == Status::Processing,
        received_at: if existed {
            old.received_at()?
        } else {
            request.now
        },
        // The caller adds the group's state, read before the claim.
        state: None,
    })
}

fn no_old_item(what: &'static str) -> PortError {
    PortError::rejected(
        what,
        "the failed condition returned no item (ReturnValuesOnConditionCheckFailure unsupported?)",
    )
}

/// The old item (if returned) when a put failed on its condition; `None` for any other failure.
pub(crate) fn put_condition_failed(
    err: &SdkError<PutItemError, HttpResponse>,
) -> Option<Option<Item>> {
    match err.as_service_error() {
        Some(PutItemError::ConditionalCheckFailedException(e)) => Some(e.item.clone().map(Item)),
        _ => None,
    }
}

/// The old item (if returned) when an update failed on its condition; `None` for any other failure.
fn update_condition_failed(err: &SdkError<UpdateItemError, HttpResponse>) -> Option<Option<Item>> {
    crate::error::update_condition_failed(err).map(|item| item.map(Item))
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
}

#[async_trait]
impl UpdateLedger for DynamoStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<Claim, PortError> {
        // No DynamoDB call both takes the lease and reads another item, so the state is a second,
        // strongly consistent read — made first, so that a failed read costs no attempt and holds
        // no lease. It cannot be stale: the queue hands out one message of a group at a time, and
        // the group's previous update settled (and wrote its state) before its message was
        // deleted; a writer from elsewhere is caught by the settle's version condition.
        let state = self.read_state(&request.state_key()).await?;
        for _ in 0..CLAIM_ROUNDS {
            let decided = match self.claim_in_place(request).await? {
                InPlace::Decided(claim) => Some(claim),
                InPlace::Expired => self.recreate(request).await?,
            };
            match decided {
                Some(Claim::Run(claimed)) => return Ok(Claim::Run(Claimed { state, ..claimed })),
                Some(claim) => return Ok(claim),
                None => {}
            }
        }
        Err(PortError::unavailable(
            UPDATE,
            "the record kept being re-created during the claim",
        ))
    }

    async fn record_intent(
        &self,
        lease: &Lease,
        intent: &ActionIntent,
        outcomes: &[ActionOutcome],
    ) -> Result<(), PortError> {
        let write = RunWrite::new(lease, outcomes)
            .set("actions.#intent", ":intent", item::intent(intent))
            .name("#intent", intent.seq.to_string());
        self.write_run(write).await
    }

    async fn record_outcomes(
        &self,
        lease: &Lease,
        outcomes: &[ActionOutcome],
    ) -> Result<(), PortError> {
        if outcomes.is_empty() {
            return Ok(());
        }
        self.write_run(RunWrite::new(lease, outcomes)).await
    }

    async fn settle(
        &self,
        lease: &Lease,
        settlement: &Settlement,
        outcomes: &[ActionOutcome],
    ) -> Result<(), PortError> {
        let mut write = RunWrite::new(lease, outcomes)
            .set("#status", ":settled", string(settlement.status().as_str()))
            .remove("lease_until");
        write = match settlement {
            Settlement::Done { .. } => write.remove("last_error"),
            Settlement::RecipientGone { error } => write.set("last_error", ":error", string(error)),
            Settlement::Retrying { error, throttled } => {
                let write = write.set("last_error", ":error", string(error));
                match throttled {
                    // Pacing, not a failure: refunded from the attempt budget.
                    true => write.add("throttled", ":one", number(1)),
                    false => write,
                }
            }
            Settlement::Dead(burial) => write
                .set("last_error", ":error", string(&burial.error))
                .set("burial", ":burial", item::burial(burial)),
        };
        match (settlement.state(), settlement.charges()) {
            (None, []) => self.write_run(write).await,
            (state, charges) => self.write_run_with(write, state, charges).await,
        }
    }

    async fn charge(&self, bot: &BotId, id: &str) -> Result<Option<Charge>, PortError> {
        self.read_item(item::pk(charge_pk(bot, id)))
            .await?
            .map(|found| found.charge())
            .transpose()
            .map_err(|e| PortError::rejected(GET, e))
    }
}

/// One fenced write of a run, built from named parts: what it sets, adds and removes, the outcomes
/// it records, and the condition that the run still holds the lease and that each outcome's action
/// was intended.
struct RunWrite {
    sets: Vec<String>,
    adds: Vec<String>,
    removes: Vec<String>,
    conditions: Vec<String>,
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
    key: RecordKey,
    token: u32,
}

impl RunWrite {
    fn new(lease: &Lease, outcomes: &[ActionOutcome]) -> Self {
        let mut write = Self {
            sets: Vec::new(),
            adds: Vec::new(),
            removes: Vec::new(),
            conditions: vec![HELD_BY_RUN.to_owned()],
            names: HashMap::from([("#status".to_owned(), item::STATUS.to_owned())]),
            values: HashMap::from([
                (
                    ":processing".to_owned(),
                    string(Status::Processing.as_str()),
                ),
                (":token".to_owned(), number(lease.token)),
            ]),
            key: lease.key.clone(),
            token: lease.token,
        };
        for (n, outcome) in outcomes.iter().enumerate() {
            let (action, value) = (format!("#o{n}"), format!(":o{n}"));
            // A result belongs to an intent: an outcome for a position nobody intended is refused.
            write
                .conditions
                .push(format!("attribute_exists(actions.{action})"));
            write = write
                .set(
                    &format!("actions.{action}.#state"),
                    &value,
                    item::state(&outcome.state),
                )
                .name(&action, outcome.seq.to_string());
        }
        if !outcomes.is_empty() {
            write = write.name("#state", item::STATE.to_owned());
        }
        write
    }

    fn set(mut self, path: &str, placeholder: &str, value: AttributeValue) -> Self {
        self.sets.push(format!("{path} = {placeholder}"));
        self.values.insert(placeholder.to_owned(), value);
        self
    }

    fn add(mut self, path: &str, placeholder: &str, value: AttributeValue) -> Self {
        self.adds.push(format!("{path} {placeholder}"));
        self.values.insert(placeholder.to_owned(), value);
        self
    }

    fn remove(mut self, path: &str) -> Self {
        self.removes.push(path.to_owned());
        self
    }

    fn name(mut self, placeholder: &str, name: String) -> Self {
        self.names.insert(placeholder.to_owned(), name);
        self
    }

    /// Why the write's condition failed, from the item as it was (when returned):
    /// [`PortError::Fenced`] when the run no longer holds the lease, a rejection when it does (an
    /// outcome without its intent).
    fn refusal(&self, old: Option<&Item>, what: &'static str) -> PortError {
        let still_held = old.is_some_and(|old| {
            old.status().ok() == Some(Status::Processing) && old.attempts().ok() == Some(self.token)
        });
        if still_held {
            return PortError::rejected(what, "an outcome without its intent");
        }
        PortError::fenced(what)
    }

    fn update_expression(&self) -> String {
        let mut clauses = Vec::new();
        for (keyword, parts, separator) in [
            ("SET", &self.sets, ", "),
            ("ADD", &self.adds, ", "),
            ("REMOVE", &self.removes, ", "),
        ] {
            if !parts.is_empty() {
                clauses.push(format!("{keyword} {}", parts.join(separator)));
            }
        }
        clauses.join(" ")
    }
}

impl DynamoStore {
    /// Runs a fenced write; a failed condition is [`PortError::Fenced`] when the run lost its lease,
    /// a rejection when it still holds it (an outcome without its intent).
    async fn write_run(&self, write: RunWrite) -> Result<(), PortError> {
        let result = self
            .update(&write.key)
            .update_expression(write.update_expression())
            .condition_expression(write.conditions.join(" AND "))
            .set_expression_attribute_names(Some(write.names.clone()))
            .set_expression_attribute_values(Some(write.values.clone()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let err = match result {
            Ok(_) => return Ok(()),
            Err(err) => err,
        };
        let Some(old) = update_condition_failed(&err) else {
            return Err(port_error(UPDATE, err));
        };
        Err(write.refusal(old.as_ref(), UPDATE))
    }

    /// Runs a fenced settle with what it writes besides the record, in one transaction: the
    /// record's update (fenced as [`DynamoStore::write_run`]), a put of the group's state item
    /// conditional on the version the run read, and a put of the charge's ledger entry conditional
    /// on what the run read of it. All are written or none.
    async fn write_run_with(
        &self,
        write: RunWrite,
        state: Option<&StateWrite>,
        charges: &[ChargeWrite],
    ) -> Result<(), PortError> {
        let build = |e: aws_sdk_dynamodb::error::BuildError| PortError::rejected(TRANSACT, e);
        let record = Update::builder()
            .table_name(&self.table)
            .set_key(Some(item::key(&write.key)))
            .update_expression(write.update_expression())
            .condition_expression(write.conditions.join(" AND "))
            .set_expression_attribute_names(Some(write.names.clone()))
            .set_expression_attribute_values(Some(write.values.clone()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(build)?;
        let mut items = vec![TransactWriteItem::builder().update(record).build()];
        if let Some(state) = state {
            let new_state = StoredState {
                format: state.format.clone(),
                json: state.json.clone(),
                version: state.read_version + 1,
                time: state.time.clone(),
            };
            let mut put = Put::builder()
                .table_name(&self.table)
                .set_item(Some(item::state_item(&state.key, &new_state)))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                );
            put = match state.read_version {
                0 => put.condition_expression(NO_STATE),
                read => put
                    .condition_expression(STATE_UNCHANGED)
                    .expression_attribute_names("#version", item::VERSION)
                    .expression_attribute_values(":read", number(read)),
            };
            items.push(
                TransactWriteItem::builder()
                    .put(put.build().map_err(build)?)
                    .build(),
            );
        }
        let charges_from = items.len();
        for charge in charges {
            let put = Put::builder()
                .table_name(&self.table)
                .set_item(Some(item::charge_item(&write.key.bot_id, &charge.entry)))
                .condition_expression(match charge.expect {
                    Expect::Absent => NEW_CHARGE,
                    Expect::NotRefunded => NOT_REFUNDED,
                })
                .build()
                .map_err(build)?;
            items.push(TransactWriteItem::builder().put(put).build());
        }
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await;
        let err = match result {
            Ok(_) => return Ok(()),
            Err(err) => err,
        };
        let reasons = match err.as_service_error() {
            Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) => {
                cancelled.cancellation_reasons().to_vec()
            }
            _ => return Err(port_error(TRANSACT, err)),
        };
        // One reason per item, in order: the record's, the state's, the charge's ("None" where
        // it passed).
        let condition_failed = |reason: Option<&CancellationReason>| {
            reason.and_then(|r| r.code()) == Some("ConditionalCheckFailed")
        };
        if condition_failed(reasons.first()) {
            let old = reasons[0].item().map(|old| Item(old.clone()));
            return Err(write.refusal(old.as_ref(), TRANSACT));
        }
        if let Some(state) = state.filter(|_| condition_failed(reasons.get(1))) {
            let found = reasons[1]
                .item()
                .map(|old| Item(old.clone()).state())
                .transpose()
                .map_err(|e| PortError::rejected(TRANSACT, e))?;
            return Err(PortError::Conflict {
                what: TRANSACT,
                found: found.map_or(0, |s| s.version),
                read: state.read_version,
            });
        }
        let moved = charges
            .iter()
            .enumerate()
            .find(|(n, _)| condition_failed(reasons.get(charges_from + n)));
        if let Some((_, charge)) = moved {
            return Err(PortError::Credited {
                what: TRANSACT,
                charge: charge.entry.id.clone(),
            });
        }
        let failed = reasons
            .iter()
            .find(|r| r.code().is_some_and(|code| code != "None"));
        let (code, message) = failed.map_or((None, None), |r| (r.code(), r.message()));
        Err(match cancellation_kind(code, message) {
            Kind::Unavailable => PortError::unavailable(TRANSACT, err),
            Kind::Misconfigured => PortError::misconfigured(TRANSACT, err),
            Kind::TooLarge => PortError::too_large(TRANSACT, err),
            Kind::Rejected => PortError::rejected(TRANSACT, err),
        })
    }

    /// The client, for the other parts of the crate that work on the table.
    pub(crate) fn client(&self) -> &aws_sdk_dynamodb::Client {
        &self.client
    }

    /// The table's name.
    pub(crate) fn table(&self) -> &str {
        &self.table
    }

    /// [`DynamoStore::read_state`], for the other parts of the crate.
    pub(crate) async fn state_of(&self, key: &StateKey) -> Result<Option<StoredState>, PortError> {
        self.read_state(key).await
    }

    /// The state of a group, if one was ever written.
    async fn read_state(&self, key: &StateKey) -> Result<Option<StoredState>, PortError> {
        self.read_item(item::state_key(key))
            .await?
            .map(|found| found.state())
            .transpose()
            .map_err(|e| PortError::rejected(GET, e))
    }

    /// Every item of the table that has the attribute `name`, with its `pk`: a Scan of the whole
    /// table, which reads (and is billed for) every item, for the operator's listings.
    pub(crate) async fn scan_having(&self, name: &str) -> Result<Vec<(String, Item)>, PortError> {
        let mut items = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let output = self
                .client()
                .scan()
                .table_name(self.table())
                .filter_expression("attribute_exists(#having)")
                .expression_attribute_names("#having", name)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| port_error(SCAN, e))?;
            for found in output.items.unwrap_or_default() {
                let found = Item(found);
                if let Some(pk) = found.0.get(item::PK).and_then(|v| v.as_s().ok()) {
                    items.push((pk.clone(), found));
                }
            }
            match output.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => return Ok(items),
            }
        }
    }

    /// The item with this key, if any, by a strongly consistent read.
    async fn read_item(
        &self,
        key: HashMap<String, AttributeValue>,
    ) -> Result<Option<Item>, PortError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| port_error(GET, e))?;
        Ok(output.item.map(Item))
    }
}

#[async_trait]
impl RecordReader for DynamoStore {
    async fn get(
        &self,
        key: &RecordKey,
        now: Timestamp,
    ) -> Result<Option<UpdateRecord>, PortError> {
        let Some(found) = self.read_item(item::key(key)).await? else {
            return Ok(None);
        };
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

/// Which records a reset may restart, as a condition: a live record that the rule allows.
fn restartable(rule: ResetRule) -> String {
    match rule {
        ResetRule::Dead => format!("NOT ({EXPIRED}) AND {IS_DEAD}"),
        ResetRule::DeadOrUnfinished => {
            format!("NOT ({EXPIRED}) AND ({IS_DEAD} OR {UNFINISHED} OR {LEASE_EXPIRED})")
        }
    }
}

#[async_trait]
impl UpdateReset for DynamoStore {
    async fn reset(&self, request: &ResetRequest) -> Result<Reset, PortError> {
        let result = self
            .update(&request.key)
            .update_expression(RESTART_UPDATE)
            .condition_expression(restartable(request.rule))
            .expression_attribute_names("#status", item::STATUS)
            .set_expression_attribute_values(Some(reset_values(request)))
            .return_values(ReturnValue::AllOld)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let unreadable = |e: item::ItemError| PortError::rejected(UPDATE, e);
        match result {
            Ok(output) => {
                let old = Item(output.attributes.unwrap_or_default());
                Ok(Reset::Restarted(old.status().map_err(unreadable)?))
            }
            Err(err) => match update_condition_failed(&err) {
                Some(None) => Ok(Reset::Absent),
                Some(Some(old)) if old.is_expired(request.now).map_err(unreadable)? => {
                    Ok(Reset::Absent)
                }
                Some(Some(old)) => Ok(Reset::Refused(old.status().map_err(unreadable)?)),
                None => Err(port_error(UPDATE, err)),
            },
        }
    }
}

/// Every value the reset's condition and update name (the rule picks among them).
fn reset_values(request: &ResetRequest) -> HashMap<String, AttributeValue> {
    let mut values = HashMap::from([
        (":dead".to_owned(), string(Status::Dead.as_str())),
        (":queued".to_owned(), string(Status::Queued.as_str())),
        (":now_secs".to_owned(), number(request.now.as_secs())),
    ]);
    if request.rule == ResetRule::DeadOrUnfinished {
        values.extend([
            (":received".to_owned(), string(Status::Received.as_str())),
            (":retrying".to_owned(), string(Status::Retrying.as_str())),
            (
                ":processing".to_owned(),
                string(Status::Processing.as_str()),
            ),
            (":now".to_owned(), number(request.now.0)),
        ]);
    }
    values
}

#[async_trait]
impl AuditLog for DynamoStore {
    async fn append(&self, entry: &AuditEntry) -> Result<(), PortError> {
        let pk = format!(
            "{AUDIT_PREFIX}{}#{:020}#{:08x}",
            entry.bot_id,
            entry.at.0,
            rand::random::<u32>()
        );
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item::audit_item(pk, entry)))
            .condition_expression(NOT_EXISTS)
            .send()
            .await
            .map_err(|e| port_error(PUT, e))?;
        Ok(())
    }
}

#[async_trait]
impl AuditReader for DynamoStore {
    /// Scans the table for audit entries (keys starting with `audit#`): an operator's command, which
    /// reads the whole table once; the functions never call it.
    async fn recent(&self, max: usize, now: Timestamp) -> Result<Vec<AuditEntry>, PortError> {
        let mut entries = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let output = self
                .client
                .scan()
                .table_name(&self.table)
                .filter_expression("begins_with(pk, :audit)")
                .expression_attribute_values(":audit", string(AUDIT_PREFIX))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| port_error(SCAN, e))?;
            for found in output.items.unwrap_or_default() {
                let entry =
                    item::audit_entry(&Item(found)).map_err(|e| PortError::rejected(SCAN, e))?;
                entries.push(entry);
            }
            match output.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => break,
            }
        }
        Ok(newest(entries, max, now))
    }
}
