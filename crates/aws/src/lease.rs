//! The pollers' lease in DynamoDB (docs/design/fleet.md §1): one item per bot in the records'
//! table, keyed `lease#poller#{bot_id}` (never an update's key, whose part after `#` is digits).
//! Every change is one conditional write whose condition says which lease it acts on, so two
//! pollers can never both win and a stale term can never write. The item carries no `expires_at`:
//! TTL must never delete it, or the token would start again at 1.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use tgq_core::ids::BotId;
use tgq_core::leadership::{
    Acquired, HolderId, LeaseError, LeaseState, PollerLease, TakeOver, Term, Won, FLAP_WINDOW,
};
use tgq_core::record::Timestamp;
use tgq_core::PortError;

use crate::error::{port_error, update_condition_failed};
use crate::item::{number, string};

// The parts conditions are built from, each true of the stored item.

/// No poller ever acquired the lease.
const NEVER_ACQUIRED: &str = "attribute_not_exists(pk)";
/// The last holder released the lease.
const RELEASED: &str = "attribute_not_exists(#holder)";
/// The lapsed lease the caller saw is still the one stored, and still lapsed: nobody renewed it,
/// took it over or released it meanwhile.
const STILL_LAPSED: &str = "#holder = :seen_holder AND #token = :seen_token AND #until <= :now";
/// The caller's term is the lease's current one: its holder and its token.
const HELD_BY_TERM: &str = "#holder = :holder AND #token = :token";

/// Takes the lease: the new holder, its end, the next token (`ADD` starts a missing one at 0).
const TAKE: &str = "SET #holder = :holder, #until = :until, #acquired_at = :now, #kind = :kind \
     ADD #token :one";
/// Takes a lapsed lease over: as [`TAKE`], and counts the takeover (and a flap).
const TAKE_OVER: &str = "SET #holder = :holder, #until = :until, #acquired_at = :now, \
     #last_takeover_at = :now ADD #token :one, #takeovers :one, #flaps :flap";

/// How often an acquisition starts again after the lease changed between its two steps.
const ACQUIRE_ROUNDS: usize = 3;

const UPDATE: &str = "DynamoDB UpdateItem (poller lease)";
const GET: &str = "DynamoDB GetItem (poller lease)";

// The attributes of the lease item.
const HOLDER: &str = "holder";
const TOKEN: &str = "token";
const UNTIL: &str = "lease_until";
const ACQUIRED_AT: &str = "acquired_at";
const LAST_TAKEOVER_AT: &str = "last_takeover_at";
const TAKEOVERS: &str = "takeovers";
const FLAPS: &str = "flaps";
const OFFSET: &str = "offset";
const OFFSET_TOKEN: &str = "offset_token";
const KIND: &str = "kind";
/// What `kind` says of a lease item, so that a look at the table tells it from a record.
const KIND_POLLER_LEASE: &str = "poller_lease";

/// One bot's poller lease, an item in the records' table.
#[derive(Clone, Debug)]
pub struct DynamoPollerLease {
    client: aws_sdk_dynamodb::Client,
    table: String,
    pk: String,
}

impl DynamoPollerLease {
    /// The lease of `bot` in `table`.
    pub fn new(client: aws_sdk_dynamodb::Client, table: impl Into<String>, bot: &BotId) -> Self {
        Self {
            client,
            table: table.into(),
            pk: format!("lease#poller#{bot}"),
        }
    }

    /// An update of the lease item with every attribute name the expressions use.
    fn update(&self) -> UpdateItemFluentBuilder {
        let names = [
            ("#holder", HOLDER),
            ("#token", TOKEN),
            ("#until", UNTIL),
            ("#acquired_at", ACQUIRED_AT),
            ("#last_takeover_at", LAST_TAKEOVER_AT),
            ("#takeovers", TAKEOVERS),
            ("#flaps", FLAPS),
            ("#offset", OFFSET),
            ("#offset_token", OFFSET_TOKEN),
            ("#kind", KIND),
        ];
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", string(&self.pk))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        for (placeholder, name) in names {
            update = update.expression_attribute_names(placeholder, name);
        }
        update
    }

    /// Runs an update whose expressions name only some of the attributes: DynamoDB refuses names
    /// an expression does not use, so the unused ones are dropped first.
    async fn send(
        &self,
        update: UpdateItemFluentBuilder,
    ) -> Result<Result<LeaseState, Option<LeaseState>>, LeaseError> {
        let used = {
            let input = update.as_input();
            [
                input.get_update_expression(),
                input.get_condition_expression(),
            ]
            .into_iter()
            .flatten()
            .cloned()
            .collect::<Vec<String>>()
            .join(" ")
        };
        let names = update
            .get_expression_attribute_names()
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|(placeholder, _)| mentions(&used, placeholder))
            .collect::<HashMap<_, _>>();
        let result = update
            .set_expression_attribute_names(Some(names))
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        match result {
            Ok(output) => {
                let item = output.attributes.unwrap_or_default();
                Ok(Ok(
                    lease_state(&item).map_err(|e| PortError::rejected(UPDATE, e))?
                ))
            }
            Err(err) => match update_condition_failed(&err) {
                Some(old) => {
                    let old = old
                        .map(|item| lease_state(&item))
                        .transpose()
                        .map_err(|e| PortError::rejected(UPDATE, e))?;
                    Ok(Err(old))
                }
                None => Err(port_error(UPDATE, err).into()),
            },
        }
    }

    /// The first step: takes a lease nobody holds (never acquired, or released).
    async fn take_free(
        &self,
        holder: &HolderId,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<Result<LeaseState, Option<LeaseState>>, LeaseError> {
        let update = self
            .update()
            .update_expression(TAKE)
            .condition_expression(format!("{NEVER_ACQUIRED} OR {RELEASED}"))
            .expression_attribute_values(":holder", string(holder.as_str()))
            .expression_attribute_values(":until", number(until.0))
            .expression_attribute_values(":now", number(now.0))
            .expression_attribute_values(":kind", string(KIND_POLLER_LEASE))
            .expression_attribute_values(":one", number(1));
        self.send(update).await
    }

    /// The second step: takes over the lapsed lease the first step saw.
    async fn take_over(
        &self,
        seen: &LeaseState,
        seen_holder: &HolderId,
        holder: &HolderId,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<Result<LeaseState, Option<LeaseState>>, LeaseError> {
        let flapping = is_flapping(seen, now);
        let update = self
            .update()
            .update_expression(TAKE_OVER)
            .condition_expression(STILL_LAPSED)
            .expression_attribute_values(":seen_holder", string(seen_holder.as_str()))
            .expression_attribute_values(":seen_token", number(seen.token))
            .expression_attribute_values(":holder", string(holder.as_str()))
            .expression_attribute_values(":until", number(until.0))
            .expression_attribute_values(":now", number(now.0))
            .expression_attribute_values(":one", number(1))
            .expression_attribute_values(":flap", number(u64::from(flapping)));
        self.send(update).await
    }

    /// A holder's write, conditional on its term; [`LeaseError::Lost`] when the term is not current.
    async fn as_holder(
        &self,
        term: &Term,
        update: UpdateItemFluentBuilder,
    ) -> Result<LeaseState, LeaseError> {
        let update = update
            .condition_expression(HELD_BY_TERM)
            .expression_attribute_values(":holder", string(term.holder.as_str()))
            .expression_attribute_values(":token", number(term.token));
        match self.send(update).await? {
            Ok(state) => Ok(state),
            Err(old) => Err(LeaseError::Lost {
                token: term.token,
                current: old.map(|s| s.token),
            }),
        }
    }
}

/// Whether a takeover at `now` comes within a minute of the previous one.
fn is_flapping(seen: &LeaseState, now: Timestamp) -> bool {
    seen.last_takeover_at
        .is_some_and(|at| now.since(at) < FLAP_WINDOW)
}

/// Whether `expression` mentions `placeholder` as a whole word (`#token` is not `#token_x`).
fn mentions(expression: &str, placeholder: &str) -> bool {
    expression.match_indices(placeholder).any(|(at, _)| {
        let next = expression[at + placeholder.len()..].chars().next();
        !next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// The old item (if returned) when an update failed on its condition; `None` for any other failure.
/// A lease item that does not read as one.
#[derive(Debug, thiserror::Error)]
#[error("the poller lease item's {0} is missing or malformed")]
struct Malformed(&'static str);

fn number_at<T: std::str::FromStr>(
    item: &HashMap<String, AttributeValue>,
    name: &'static str,
) -> Result<Option<T>, Malformed> {
    match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::N(n)) => n.parse().map(Some).map_err(|_| Malformed(name)),
        Some(_) => Err(Malformed(name)),
    }
}

/// The lease as the item holds it.
fn lease_state(item: &HashMap<String, AttributeValue>) -> Result<LeaseState, Malformed> {
    let holder = match item.get(HOLDER) {
        None => None,
        Some(AttributeValue::S(s)) => {
            Some(HolderId::new(s.clone()).map_err(|_| Malformed(HOLDER))?)
        }
        Some(_) => return Err(Malformed(HOLDER)),
    };
    let required = |name| number_at::<u64>(item, name)?.ok_or(Malformed(name));
    Ok(LeaseState {
        holder,
        token: required(TOKEN)?,
        until: Timestamp(required(UNTIL)?),
        acquired_at: Timestamp(required(ACQUIRED_AT)?),
        last_takeover_at: number_at(item, LAST_TAKEOVER_AT)?.map(Timestamp),
        takeovers: number_at(item, TAKEOVERS)?.unwrap_or(0),
        flaps: number_at(item, FLAPS)?.unwrap_or(0),
        offset: number_at(item, OFFSET)?,
        offset_token: number_at(item, OFFSET_TOKEN)?,
    })
}

fn won(state: LeaseState, holder: &HolderId, took_over: Option<TakeOver>) -> Acquired {
    Acquired::Won(Won {
        term: Term {
            holder: holder.clone(),
            token: state.token,
            until: state.until,
        },
        offset: state.offset,
        took_over,
    })
}

#[async_trait]
impl PollerLease for DynamoPollerLease {
    async fn acquire(
        &self,
        holder: &HolderId,
        now: Timestamp,
        ttl: Duration,
    ) -> Result<Acquired, LeaseError> {
        let until = now.plus(ttl);
        for _ in 0..ACQUIRE_ROUNDS {
            let seen = match self.take_free(holder, now, until).await? {
                Ok(state) => return Ok(won(state, holder, None)),
                Err(Some(seen)) => seen,
                Err(None) => {
                    return Err(PortError::rejected(
                        UPDATE,
                        "the failed condition returned no item (ReturnValuesOnConditionCheckFailure unsupported?)",
                    )
                    .into())
                }
            };
            if let Some(holding) = seen.held_at(now) {
                return Ok(Acquired::Held(holding));
            }
            // Free by `take_free`'s own test, the lease was released meanwhile: start again.
            let Some(seen_holder) = seen.holder.clone() else {
                continue;
            };
            match self
                .take_over(&seen, &seen_holder, holder, now, until)
                .await?
            {
                Ok(state) => {
                    let took_over = TakeOver {
                        from: seen_holder,
                        from_token: seen.token,
                        flapping: is_flapping(&seen, now),
                    };
                    return Ok(won(state, holder, Some(took_over)));
                }
                // Someone renewed, took over or released it since: look again.
                Err(Some(now_stored)) => {
                    if let Some(holding) = now_stored.held_at(now) {
                        return Ok(Acquired::Held(holding));
                    }
                }
                Err(None) => {}
            }
        }
        Err(PortError::unavailable(
            UPDATE,
            "the poller lease kept changing during the acquisition",
        )
        .into())
    }

    async fn renew(&self, term: &Term, now: Timestamp, ttl: Duration) -> Result<Term, LeaseError> {
        let until = now.plus(ttl);
        let update = self
            .update()
            .update_expression("SET #until = :until")
            .expression_attribute_values(":until", number(until.0));
        self.as_holder(term, update).await?;
        Ok(Term {
            until,
            ..term.clone()
        })
    }

    async fn checkpoint(&self, term: &Term, offset: i64) -> Result<(), LeaseError> {
        let update = self
            .update()
            .update_expression("SET #offset = :offset, #offset_token = :token")
            .expression_attribute_values(":offset", number(offset));
        self.as_holder(term, update).await.map(|_| ())
    }

    async fn release(&self, term: &Term, now: Timestamp) -> Result<(), LeaseError> {
        let update = self
            .update()
            .update_expression("SET #until = :now REMOVE #holder")
            .expression_attribute_values(":now", number(now.0));
        self.as_holder(term, update).await.map(|_| ())
    }

    async fn read(&self) -> Result<Option<LeaseState>, PortError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", string(&self.pk))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| port_error(GET, e))?;
        output
            .item
            .map(|item| lease_state(&item))
            .transpose()
            .map_err(|e| PortError::rejected(GET, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_placeholder_is_matched_as_a_whole_word() {
        assert!(mentions("SET #offset = :offset", "#offset"));
        assert!(!mentions("SET #offset_token = :token", "#offset"));
        assert!(mentions("#holder = :holder AND #token = :token", "#token"));
    }

    #[test]
    fn an_item_without_a_token_is_malformed() {
        let item = HashMap::from([(UNTIL.to_owned(), number(5))]);
        assert!(lease_state(&item).is_err());
    }
}
