//! The DynamoDB item of one update record, and its mapping to and from [`UpdateRecord`]. The only
//! place that knows attribute names and types; nothing of the SDK leaves the adapter.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use bytes::Bytes;
use tgq_core::audit::AuditEntry;
use tgq_core::dead::Burial;
use tgq_core::ids::{BotId, GroupKey, RecordKey, StateKey, UpdateId};
use tgq_core::payment::{charge_pk, Charge, Subscription};
use tgq_core::record::{ActionIntent, ActionRecord, ActionState, Status, Timestamp, UpdateRecord};
use tgq_core::state::StoredState;

/// The partition key, `{bot_id}#{update_id}` (S).
pub(crate) const PK: &str = "pk";
/// The status, as [`Status::as_str`] spells it (S).
pub(crate) const STATUS: &str = "status";
/// The raw update, byte for byte (B).
pub(crate) const PAYLOAD: &str = "payload";
/// The ordering group (S).
pub(crate) const GROUP: &str = "group";
/// When the webhook stored the update, in milliseconds (N).
pub(crate) const RECEIVED_AT: &str = "received_at";
/// Handler runs so far (N).
pub(crate) const ATTEMPTS: &str = "attempts";
/// The last failure's description (S, absent when none).
pub(crate) const LAST_ERROR: &str = "last_error";
/// Until when the current claim holds, in milliseconds (N, absent when none).
pub(crate) const LEASE_UNTIL: &str = "lease_until";
/// Outbound actions, keyed by sequence number (M of M).
pub(crate) const ACTIONS: &str = "actions";
/// The TTL attribute, in **seconds**: DynamoDB's TTL reads epoch seconds (N).
pub(crate) const EXPIRES_AT: &str = "expires_at";
/// Runs that ended rate-limited, refunded from the attempt budget (N, absent when none).
pub(crate) const THROTTLED: &str = "throttled";
/// When the first run started, in milliseconds (N, absent before it).
pub(crate) const FIRST_ATTEMPT_AT: &str = "first_attempt_at";
/// Why a DEAD record was given up on (M: reason, class, error, attempts; absent otherwise).
pub(crate) const BURIAL: &str = "burial";
/// In a group state's item: the format tag of its value (S).
pub(crate) const FORMAT: &str = "format";
/// In a group state's item: the value as JSON (S).
pub(crate) const VALUE: &str = "value";
/// In a group state's item: how many times it was written (N).
pub(crate) const VERSION: &str = "version";
/// A state item's tgq part: the chat's pending timers and flow, as JSON; absent when it has none.
pub(crate) const TIME: &str = "time";
/// Inside an action: the Bot API method (S).
pub(crate) const METHOD: &str = "method";
/// Inside an action: `at_least_once` or `at_most_once` (S).
pub(crate) const DELIVERY: &str = "delivery";
/// Inside an action: what is known of its outcome, as compact JSON (S).
pub(crate) const STATE: &str = "state";
/// Inside a burial: its reason (S).
const REASON: &str = "reason";
/// Inside a burial: the class of its failure (S).
const CLASS: &str = "class";
/// Inside a burial: the failure's description (S).
const ERROR: &str = "error";

/// A stored item that is not a well-formed update record.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum ItemError {
    /// A required attribute is absent.
    #[error("item has no attribute {0:?}")]
    Missing(&'static str),
    /// An attribute has the wrong type or an unreadable value.
    #[error("attribute {attribute:?} is not {expected}")]
    Malformed {
        /// The attribute at fault.
        attribute: String,
        /// What it should hold.
        expected: &'static str,
    },
}

fn malformed(attribute: impl Into<String>, expected: &'static str) -> ItemError {
    ItemError::Malformed {
        attribute: attribute.into(),
        expected,
    }
}

/// One update record's item, as DynamoDB stores it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Item(pub(crate) HashMap<String, AttributeValue>);

/// A number attribute.
pub(crate) fn number(n: impl ToString) -> AttributeValue {
    AttributeValue::N(n.to_string())
}

/// A string attribute.
pub(crate) fn string(s: impl Into<String>) -> AttributeValue {
    AttributeValue::S(s.into())
}

/// The key of a record, ready for `GetItem` and `UpdateItem`.
pub(crate) fn key(key: &RecordKey) -> HashMap<String, AttributeValue> {
    HashMap::from([(PK.to_owned(), string(key.pk()))])
}

/// The key of a group's state item, `{bot_id}#state#{group}`: in the records' table, with no TTL
/// attribute, so it is kept until the bot changes it.
pub(crate) fn state_key(key: &StateKey) -> HashMap<String, AttributeValue> {
    HashMap::from([(PK.to_owned(), string(key.pk()))])
}

/// A group state's item.
pub(crate) fn state_item(key: &StateKey, state: &StoredState) -> HashMap<String, AttributeValue> {
    let mut item = HashMap::from([
        (PK.to_owned(), string(key.pk())),
        (FORMAT.to_owned(), string(&state.format)),
        (VALUE.to_owned(), string(&state.json)),
        (VERSION.to_owned(), number(state.version)),
    ]);
    if let Some(time) = &state.time {
        item.insert(TIME.to_owned(), string(time));
    }
    item
}

impl Item {
    /// The group state this item holds.
    pub(crate) fn state(&self) -> Result<StoredState, ItemError> {
        Ok(StoredState {
            format: self.str(FORMAT)?.to_owned(),
            json: self.str(VALUE)?.to_owned(),
            version: self.u64(VERSION)?,
            time: self.0.get(TIME).and_then(|v| v.as_s().ok()).cloned(),
        })
    }
}

/// An action whose intent is recorded and whose outcome is not yet known.
pub(crate) fn intent(intent: &ActionIntent) -> AttributeValue {
    action_value(&ActionRecord {
        method: intent.method.clone(),
        delivery: intent.delivery,
        state: ActionState::Pending,
    })
}

/// What is known of an action's outcome, as the `state` inside its action.
pub(crate) fn state(state: &ActionState) -> AttributeValue {
    // A closed enum of plain fields always serializes.
    string(serde_json::to_string(state).unwrap_or_default())
}

/// A burial as its attribute.
pub(crate) fn burial(burial: &Burial) -> AttributeValue {
    AttributeValue::M(HashMap::from([
        (REASON.to_owned(), string(burial.reason.as_str())),
        (CLASS.to_owned(), string(burial.class.as_str())),
        (ERROR.to_owned(), string(&burial.error)),
        (ATTEMPTS.to_owned(), number(burial.attempts)),
    ]))
}

/// Epoch seconds for the TTL attribute.
pub(crate) fn expiry_secs(at: Timestamp) -> AttributeValue {
    number(at.as_secs())
}

impl Item {
    fn get(&self, name: &'static str) -> Result<&AttributeValue, ItemError> {
        self.0.get(name).ok_or(ItemError::Missing(name))
    }

    fn str(&self, name: &'static str) -> Result<&str, ItemError> {
        self.get(name)?
            .as_s()
            .map(String::as_str)
            .map_err(|_| malformed(name, "a string"))
    }

    fn optional_str(&self, name: &'static str) -> Result<Option<String>, ItemError> {
        match self.0.get(name) {
            None | Some(AttributeValue::Null(_)) => Ok(None),
            Some(AttributeValue::S(s)) => Ok(Some(s.clone())),
            Some(_) => Err(malformed(name, "a string")),
        }
    }

    fn u64(&self, name: &'static str) -> Result<u64, ItemError> {
        parse_n(self.get(name)?, name)
    }

    fn optional_u64(&self, name: &'static str) -> Result<Option<u64>, ItemError> {
        match self.0.get(name) {
            None | Some(AttributeValue::Null(_)) => Ok(None),
            Some(value) => parse_n(value, name).map(Some),
        }
    }

    /// The stored status.
    pub(crate) fn status(&self) -> Result<Status, ItemError> {
        self.str(STATUS)?
            .parse()
            .map_err(|_| malformed(STATUS, "a known status"))
    }

    /// Until when the current claim holds, if one does.
    pub(crate) fn lease_until(&self) -> Result<Option<Timestamp>, ItemError> {
        Ok(self.optional_u64(LEASE_UNTIL)?.map(Timestamp))
    }

    /// When the record expires, from the TTL attribute's seconds.
    pub(crate) fn expires_at(&self) -> Result<Timestamp, ItemError> {
        Ok(Timestamp(self.u64(EXPIRES_AT)?.saturating_mul(1000)))
    }

    /// Whether readers must treat the record as gone, DynamoDB's TTL deletion lagging behind.
    pub(crate) fn is_expired(&self, now: Timestamp) -> Result<bool, ItemError> {
        Ok(self.expires_at()? <= now)
    }

    /// When the webhook (or a claim that created the record) stored it.
    pub(crate) fn received_at(&self) -> Result<Timestamp, ItemError> {
        Ok(Timestamp(self.u64(RECEIVED_AT)?))
    }

    /// Handler runs so far.
    pub(crate) fn attempts(&self) -> Result<u32, ItemError> {
        u32::try_from(self.u64(ATTEMPTS)?).map_err(|_| malformed(ATTEMPTS, "a 32-bit count"))
    }

    /// Runs refunded as rate-limited (0 when the attribute is absent).
    pub(crate) fn throttled(&self) -> Result<u32, ItemError> {
        let n = self.optional_u64(THROTTLED)?.unwrap_or(0);
        u32::try_from(n).map_err(|_| malformed(THROTTLED, "a 32-bit count"))
    }

    /// When the first run started, if one has.
    pub(crate) fn first_attempt_at(&self) -> Result<Option<Timestamp>, ItemError> {
        Ok(self.optional_u64(FIRST_ATTEMPT_AT)?.map(Timestamp))
    }

    /// Why a DEAD record was given up on, if it says.
    pub(crate) fn burial(&self) -> Result<Option<Burial>, ItemError> {
        let Some(value) = self.0.get(BURIAL) else {
            return Ok(None);
        };
        let at = |field: &str| format!("{BURIAL}.{field}");
        let fields = value.as_m().map_err(|_| malformed(BURIAL, "a map"))?;
        let text = |field: &'static str| match fields.get(field) {
            Some(AttributeValue::S(text)) => Ok(text.as_str()),
            _ => Err(malformed(at(field), "a string")),
        };
        Ok(Some(Burial {
            reason: text(REASON)?
                .parse()
                .map_err(|_| malformed(at(REASON), "a known reason"))?,
            class: text(CLASS)?
                .parse()
                .map_err(|_| malformed(at(CLASS), "a known class"))?,
            error: text(ERROR)?.to_owned(),
            attempts: fields
                .get(ATTEMPTS)
                .and_then(|n| parse_n(n, ATTEMPTS).ok())
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| malformed(at(ATTEMPTS), "a 32-bit count"))?,
        }))
    }

    /// The recorded outbound actions by sequence number.
    pub(crate) fn actions(&self) -> Result<BTreeMap<u32, ActionRecord>, ItemError> {
        let map = match self.0.get(ACTIONS) {
            None => return Ok(BTreeMap::new()),
            Some(value) => value.as_m().map_err(|_| malformed(ACTIONS, "a map"))?,
        };
        map.iter()
            .map(|(seq, action)| {
                let seq = seq
                    .parse::<u32>()
                    .map_err(|_| malformed(format!("{ACTIONS}.{seq}"), "keyed by a number"))?;
                Ok((seq, action_record(seq, action)?))
            })
            .collect()
    }

    fn key(&self) -> Result<RecordKey, ItemError> {
        let pk = self.str(PK)?;
        let bad_key = || malformed(PK, "of the form bot_id#update_id");
        let (bot, update) = pk.split_once('#').ok_or_else(bad_key)?;
        let bot_id = BotId::new(bot).map_err(|_| bad_key())?;
        let update_id = update.parse::<i64>().map_err(|_| bad_key())?;
        Ok(RecordKey::new(bot_id, UpdateId(update_id)))
    }

    fn payload(&self) -> Result<Bytes, ItemError> {
        let blob = self
            .get(PAYLOAD)?
            .as_b()
            .map_err(|_| malformed(PAYLOAD, "binary"))?;
        Ok(Bytes::copy_from_slice(blob.as_ref()))
    }
}

fn parse_n(value: &AttributeValue, name: &str) -> Result<u64, ItemError> {
    value
        .as_n()
        .ok()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| malformed(name, "a whole number"))
}

fn action_record(seq: u32, value: &AttributeValue) -> Result<ActionRecord, ItemError> {
    let at = |field: &str| format!("{ACTIONS}.{seq}.{field}");
    let fields = value
        .as_m()
        .map_err(|_| malformed(format!("{ACTIONS}.{seq}"), "a map"))?;
    let text = |field: &'static str| match fields.get(field) {
        Some(AttributeValue::S(text)) => Ok(text.as_str()),
        _ => Err(malformed(at(field), "a string")),
    };
    Ok(ActionRecord {
        method: text(METHOD)?.to_owned(),
        delivery: text(DELIVERY)?
            .parse()
            .map_err(|_| malformed(at(DELIVERY), "a known delivery"))?,
        state: serde_json::from_str(text(STATE)?)
            .map_err(|_| malformed(at(STATE), "an action state"))?,
    })
}

fn action_value(action: &ActionRecord) -> AttributeValue {
    AttributeValue::M(HashMap::from([
        (METHOD.to_owned(), string(&action.method)),
        (DELIVERY.to_owned(), string(action.delivery.as_str())),
        (STATE.to_owned(), state(&action.state)),
    ]))
}

impl From<&UpdateRecord> for Item {
    fn from(record: &UpdateRecord) -> Self {
        let mut item = HashMap::from([
            (PK.to_owned(), string(record.key.pk())),
            (STATUS.to_owned(), string(record.status.as_str())),
            (
                PAYLOAD.to_owned(),
                AttributeValue::B(Blob::new(record.payload.to_vec())),
            ),
            (GROUP.to_owned(), string(record.group.as_str())),
            (RECEIVED_AT.to_owned(), number(record.received_at.0)),
            (ATTEMPTS.to_owned(), number(record.attempts)),
            (THROTTLED.to_owned(), number(record.throttled)),
            (
                ACTIONS.to_owned(),
                AttributeValue::M(
                    record
                        .actions
                        .iter()
                        .map(|(seq, action)| (seq.to_string(), action_value(action)))
                        .collect(),
                ),
            ),
            (EXPIRES_AT.to_owned(), expiry_secs(record.expires_at)),
        ]);
        if let Some(error) = &record.last_error {
            item.insert(LAST_ERROR.to_owned(), string(error));
        }
        if let Some(lease) = record.lease_until {
            item.insert(LEASE_UNTIL.to_owned(), number(lease.0));
        }
        if let Some(first) = record.first_attempt_at {
            item.insert(FIRST_ATTEMPT_AT.to_owned(), number(first.0));
        }
        if let Some(buried) = &record.burial {
            item.insert(BURIAL.to_owned(), burial(buried));
        }
        Item(item)
    }
}

impl TryFrom<&Item> for UpdateRecord {
    type Error = ItemError;

    fn try_from(item: &Item) -> Result<Self, Self::Error> {
        Ok(UpdateRecord {
            key: item.key()?,
            status: item.status()?,
            payload: item.payload()?,
            group: GroupKey::new(item.str(GROUP)?),
            received_at: Timestamp(item.u64(RECEIVED_AT)?),
            attempts: item.attempts()?,
            throttled: item.throttled()?,
            first_attempt_at: item.first_attempt_at()?,
            last_error: item.optional_str(LAST_ERROR)?,
            lease_until: item.lease_until()?,
            actions: item.actions()?,
            burial: item.burial()?,
            expires_at: item.expires_at()?,
        })
    }
}

// The attributes of a charge's entry in the payments ledger, an item of its own in the records'
// table (key `{bot_id}#charge#{id}`, no TTL attribute: kept until removed).
pub(crate) const CHARGE_ID: &str = "charge_id";
const USER: &str = "user";
const STARS: &str = "stars";
const INVOICE_PAYLOAD: &str = "invoice_payload";
const REFUNDED_AT: &str = "refunded_at";
/// A subscription's payment: when its period ends (Unix seconds), and whether it renews.
const SUBSCRIPTION_UNTIL: &str = "subscription_until";
const RENEWAL: &str = "renewal";

/// The key of an item of the table by its `pk`.
pub(crate) fn pk(pk: String) -> HashMap<String, AttributeValue> {
    HashMap::from([(PK.to_owned(), string(pk))])
}

/// The item of `bot`'s ledger entry of `charge`.
pub(crate) fn charge_item(bot: &BotId, charge: &Charge) -> HashMap<String, AttributeValue> {
    let mut item = HashMap::from([
        (PK.to_owned(), string(charge_pk(bot, &charge.id))),
        (CHARGE_ID.to_owned(), string(&charge.id)),
        (USER.to_owned(), number(charge.user)),
        (STARS.to_owned(), number(charge.stars)),
        (INVOICE_PAYLOAD.to_owned(), string(&charge.payload)),
        (UPDATE_ID.to_owned(), number(charge.update_id)),
        (AT.to_owned(), number(charge.recorded_at.0)),
    ]);
    if let Some(at) = charge.refunded_at {
        item.insert(REFUNDED_AT.to_owned(), number(at.0));
    }
    if let Some(subscription) = charge.subscription {
        item.insert(SUBSCRIPTION_UNTIL.to_owned(), number(subscription.until));
        item.insert(
            RENEWAL.to_owned(),
            AttributeValue::Bool(subscription.renewal),
        );
    }
    item
}

impl Item {
    /// The ledger entry this item holds.
    pub(crate) fn charge(&self) -> Result<Charge, ItemError> {
        let signed = |name: &'static str| -> Result<i64, ItemError> {
            self.get(name)?
                .as_n()
                .ok()
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| malformed(name, "a whole number"))
        };
        Ok(Charge {
            id: self.str(CHARGE_ID)?.to_owned(),
            user: signed(USER)?,
            stars: u32::try_from(self.u64(STARS)?).map_err(|_| malformed(STARS, "a count"))?,
            payload: self.str(INVOICE_PAYLOAD)?.to_owned(),
            update_id: signed(UPDATE_ID)?,
            recorded_at: Timestamp(self.u64(AT)?),
            refunded_at: self.optional_u64(REFUNDED_AT)?.map(Timestamp),
            subscription: match self.0.get(SUBSCRIPTION_UNTIL) {
                None => None,
                Some(_) => Some(Subscription {
                    until: signed(SUBSCRIPTION_UNTIL)?,
                    renewal: matches!(self.0.get(RENEWAL), Some(AttributeValue::Bool(true))),
                }),
            },
        })
    }
}

// The attributes of an audit entry, an item of its own in the records' table (key `audit#…`).
const AT: &str = "at";
const PRINCIPAL: &str = "principal";
const ACTION: &str = "action";
const BOT_ID: &str = "bot_id";
const UPDATE_ID: &str = "update_id";
const LETTER_ID: &str = "letter_id";
const OUTCOME: &str = "outcome";

/// The item of an audit entry under `pk`, expiring with the records (TTL on `expires_at`).
pub(crate) fn audit_item(pk: String, entry: &AuditEntry) -> HashMap<String, AttributeValue> {
    let mut item = HashMap::from([
        (PK.to_owned(), string(pk)),
        (AT.to_owned(), number(entry.at.0)),
        (PRINCIPAL.to_owned(), string(&entry.principal)),
        (ACTION.to_owned(), string(entry.action.as_str())),
        (BOT_ID.to_owned(), string(entry.bot_id.as_str())),
        (OUTCOME.to_owned(), string(&entry.outcome)),
        (EXPIRES_AT.to_owned(), expiry_secs(entry.expires_at)),
    ]);
    if let Some(update_id) = entry.update_id {
        item.insert(UPDATE_ID.to_owned(), number(update_id.0));
    }
    if let Some(letter_id) = &entry.letter_id {
        item.insert(LETTER_ID.to_owned(), string(letter_id));
    }
    item
}

/// An audit entry read back.
pub(crate) fn audit_entry(item: &Item) -> Result<AuditEntry, ItemError> {
    let update_id = match item.0.get(UPDATE_ID) {
        None => None,
        Some(value) => Some(UpdateId(
            value
                .as_n()
                .ok()
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| malformed(UPDATE_ID, "a whole number"))?,
        )),
    };
    Ok(AuditEntry {
        at: Timestamp(item.u64(AT)?),
        principal: item.str(PRINCIPAL)?.to_owned(),
        action: item
            .str(ACTION)?
            .parse()
            .map_err(|_| malformed(ACTION, "a known action"))?,
        bot_id: BotId::new(item.str(BOT_ID)?).map_err(|_| malformed(BOT_ID, "a bot id"))?,
        update_id,
        letter_id: item.optional_str(LETTER_ID)?,
        outcome: item.str(OUTCOME)?.to_owned(),
        expires_at: item.expires_at()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tgq_core::dead::{DeadReason, FailureClass};
    use tgq_core::record::{ActionResult, Delivery};

    fn record() -> UpdateRecord {
        let key = RecordKey::new(BotId::new("demo").unwrap(), UpdateId(42));
        let mut record = UpdateRecord::received(
            key,
            GroupKey::new("user:7"),
            Bytes::from_static(b"{ \"update_id\": 42,\n \"text\": \"Gr\xc3\xbc\xc3\x9fe\" }"),
            Timestamp(1_700_000_000_123),
            Duration::from_secs(7 * 86_400),
        );
        record.status = Status::Retrying;
        record.attempts = 3;
        record.last_error = Some("Telegram answered 502".into());
        record.lease_until = Some(Timestamp(1_700_000_030_456));
        record.throttled = 1;
        record.first_attempt_at = Some(Timestamp(1_700_000_001_000));
        record.actions = BTreeMap::from([
            (
                1,
                ActionRecord {
                    method: "sendMessage".into(),
                    delivery: Delivery::AtLeastOnce,
                    state: ActionState::Succeeded(ActionResult::Message {
                        chat_id: 7,
                        message_id: 5,
                    }),
                },
            ),
            (
                2,
                ActionRecord {
                    method: "sendInvoice".into(),
                    delivery: Delivery::AtMostOnce,
                    state: ActionState::Pending,
                },
            ),
            (
                3,
                ActionRecord {
                    method: "sendDice".into(),
                    delivery: Delivery::AtMostOnce,
                    state: ActionState::failed(400, "Bad Request: chat not found"),
                },
            ),
        ]);
        record.burial = Some(Burial {
            reason: DeadReason::BudgetSpent,
            class: FailureClass::Transient,
            error: "Telegram answered 502".into(),
            attempts: 3,
        });
        record
    }

    #[test]
    fn a_record_survives_the_round_trip_through_its_item() {
        let original = record();
        let item = Item::from(&original);
        let back = UpdateRecord::try_from(&item).unwrap();
        // The TTL attribute holds whole seconds: the milliseconds are dropped, everything else is kept.
        let expected = UpdateRecord {
            expires_at: Timestamp(original.expires_at.as_secs() * 1000),
            ..original
        };
        assert_eq!(back, expected);
    }

    #[test]
    fn the_item_uses_the_documented_attribute_types() {
        let item = Item::from(&record());
        assert_eq!(item.0[PK], string("demo#00000000000000000042"));
        assert_eq!(item.0[STATUS], string("RETRYING"));
        assert!(
            matches!(&item.0[PAYLOAD], AttributeValue::B(b) if b.as_ref() == record().payload.as_ref())
        );
        assert_eq!(item.0[EXPIRES_AT], number(1_700_604_800u64));
        assert_eq!(item.0[LEASE_UNTIL], number(1_700_000_030_456u64));
        let actions = item.0[ACTIONS].as_m().unwrap();
        assert_eq!(
            actions["2"],
            AttributeValue::M(HashMap::from([
                (METHOD.to_owned(), string("sendInvoice")),
                (DELIVERY.to_owned(), string("at_most_once")),
                (STATE.to_owned(), string(r#"{"state":"pending"}"#)),
            ]))
        );
        assert_eq!(
            actions["1"].as_m().unwrap()[STATE],
            string(r#"{"state":"succeeded","kind":"message","chat_id":7,"message_id":5}"#)
        );
    }

    #[test]
    fn optional_attributes_are_left_out_when_empty() {
        let mut fresh = record();
        fresh.last_error = None;
        fresh.lease_until = None;
        let item = Item::from(&fresh);
        assert!(!item.0.contains_key(LAST_ERROR));
        assert!(!item.0.contains_key(LEASE_UNTIL));
        let back = UpdateRecord::try_from(&item).unwrap();
        assert_eq!((back.last_error, back.lease_until), (None, None));
    }

    #[test]
    fn an_item_expires_once_its_ttl_second_has_begun() {
        let item = Item::from(&record());
        let expiry = Timestamp(1_700_604_800_000);
        assert!(!item.is_expired(Timestamp(expiry.0 - 1)).unwrap());
        assert!(item.is_expired(expiry).unwrap());
    }

    #[test]
    fn an_unknown_status_is_reported_not_guessed() {
        let mut item = Item::from(&record());
        item.0.insert(STATUS.to_owned(), string("PAUSED"));
        assert_eq!(
            UpdateRecord::try_from(&item).unwrap_err(),
            malformed(STATUS, "a known status")
        );
    }

    #[test]
    fn a_missing_or_mistyped_attribute_is_named() {
        let mut item = Item::from(&record());
        item.0.remove(GROUP);
        assert_eq!(
            UpdateRecord::try_from(&item).unwrap_err(),
            ItemError::Missing(GROUP)
        );
        let mut item = Item::from(&record());
        item.0.insert(ATTEMPTS.to_owned(), string("three"));
        assert_eq!(
            UpdateRecord::try_from(&item).unwrap_err(),
            malformed(ATTEMPTS, "a whole number")
        );
    }

    #[test]
    fn a_state_survives_the_round_trip_through_its_item_keyed_apart_from_records() {
        let key = StateKey::new(BotId::new("demo").unwrap(), GroupKey::new("user:7"));
        let state = StoredState {
            format: "cart/v1".into(),
            json: r#"{"items":["é"]}"#.into(),
            version: 3,
            time: None,
        };
        let item = Item(state_item(&key, &state));
        assert_eq!(item.0[PK], string("demo#state#user:7"));
        assert_eq!(item.0[VERSION], number(3));
        assert!(!item.0.contains_key(EXPIRES_AT), "states do not expire");
        assert!(!item.0.contains_key(TIME), "no timers, no attribute");
        assert_eq!(item.state().unwrap(), state);
        let timed = StoredState {
            time: Some(r#"{"timers":{"k":{"id":-1,"due":5}}}"#.into()),
            ..state
        };
        assert_eq!(Item(state_item(&key, &timed)).state().unwrap(), timed);
    }

    #[test]
    fn a_recorded_intent_reads_back_without_a_result() {
        let mut item = Item::from(&record());
        let value = intent(&ActionIntent {
            seq: 9,
            method: "sendPhoto".into(),
            delivery: Delivery::AtMostOnce,
        });
        if let AttributeValue::M(actions) = item.0.get_mut(ACTIONS).unwrap() {
            actions.insert("9".into(), value);
        }
        assert_eq!(
            item.actions().unwrap()[&9],
            ActionRecord {
                method: "sendPhoto".into(),
                delivery: Delivery::AtMostOnce,
                state: ActionState::Pending,
            }
        );
    }
}
