//! The bots' send budgets in DynamoDB (docs/design/pacing.md): items of
//! the records' table keyed `budget#bot#{bot_id}` and `budget#chat#{bot_id}#{chat_id}` (never an
//! update's key, whose part after `#` is digits). Every booking is one conditional update on the
//! version its writer saw, returning the stored item when another container wrote first, so a
//! lost race costs no extra read.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use tgq_core::budget::{BudgetCell, BudgetCells, CellKey, Swap};
use tgq_core::ids::BotId;
use tgq_core::record::Timestamp;
use tgq_core::PortError;

use crate::error::{port_error, update_condition_failed};
use crate::item::{expiry_secs, number, string};

// The parts conditions are built from, each true of the stored item.

/// Nobody booked from this cell yet.
const NEVER_WRITTEN: &str = "attribute_not_exists(#version)";
/// The cell is still at the version the writer saw.
const AT_SEEN_VERSION: &str = "#version = :seen";
/// The bot is not held as long as the new pause already.
const HELD_SHORTER: &str = "attribute_not_exists(#paused_until) OR #paused_until < :until";

/// A booking: the cell's new window, one more version, kept a day past the booking.
const BOOK: &str =
    "SET #sends = :sends, #kind = :kind, #expires_at = :expires_at ADD #version :one";
/// A pause: the bot's hold, one more version, so bookings made on the version before are refused.
/// The item is kept a day past the pause's end, however long ago the last booking was.
const PAUSE: &str = "SET #paused_until = :until, #kind = :kind, #expires_at = :expires_at \
     ADD #version :one";

const UPDATE: &str = "DynamoDB UpdateItem (send budget)";
const GET: &str = "DynamoDB GetItem (send budget)";

// The attributes of a budget item.
const SENDS: &str = "sends";
const VERSION: &str = "version";
const PAUSED_UNTIL: &str = "paused_until";
const EXPIRES_AT: &str = "expires_at";
const KIND: &str = "kind";
/// What `kind` says of a budget item, so that a look at the table tells it from a record.
const KIND_SEND_BUDGET: &str = "send_budget";

/// Every bot's budget cells, as items of the records' table.
#[derive(Clone, Debug)]
pub struct DynamoBudgetCells {
    client: aws_sdk_dynamodb::Client,
    table: String,
}

impl DynamoBudgetCells {
    /// The cells in `table`.
    pub fn new(client: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }
}

fn pk(key: &CellKey) -> String {
    match key {
        CellKey::Bot(bot) => format!("budget#bot#{bot}"),
        CellKey::Chat(bot, chat) => format!("budget#chat#{bot}#{chat}"),
    }
}

/// A budget item that does not read as one.
#[derive(Debug, thiserror::Error)]
#[error("the send budget item's {0} is malformed")]
struct Malformed(&'static str);

/// The cell an item holds; `what` names the request that read it, for the error.
fn cell(
    item: &HashMap<String, AttributeValue>,
    what: &'static str,
) -> Result<BudgetCell, PortError> {
    let millis = |value: &AttributeValue, name| match value {
        AttributeValue::N(n) => n
            .parse::<u64>()
            .map(Timestamp)
            .map_err(|_| PortError::rejected(what, Malformed(name))),
        _ => Err(PortError::rejected(what, Malformed(name))),
    };
    let version = match item.get(VERSION) {
        None => 0,
        Some(AttributeValue::N(n)) => n
            .parse()
            .map_err(|_| PortError::rejected(what, Malformed(VERSION)))?,
        Some(_) => return Err(PortError::rejected(what, Malformed(VERSION))),
    };
    let sends = match item.get(SENDS) {
        None => Vec::new(),
        Some(AttributeValue::L(list)) => list
            .iter()
            .map(|value| millis(value, SENDS))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(PortError::rejected(what, Malformed(SENDS))),
    };
    let paused_until = item
        .get(PAUSED_UNTIL)
        .map(|value| millis(value, PAUSED_UNTIL))
        .transpose()?;
    Ok(BudgetCell {
        version,
        sends,
        paused_until,
    })
}

impl DynamoBudgetCells {
    /// Runs an update of `key`'s item: the new cell, or the stored one when the condition failed.
    async fn update(
        &self,
        key: &CellKey,
        expression: &str,
        condition: &str,
        values: Vec<(&str, AttributeValue)>,
    ) -> Result<Swap, PortError> {
        let mut names = vec![
            ("#version", VERSION),
            ("#kind", KIND),
            ("#expires_at", EXPIRES_AT),
        ];
        if expression.contains("#sends") {
            names.push(("#sends", SENDS));
        }
        if expression.contains("#paused_until") {
            names.push(("#paused_until", PAUSED_UNTIL));
        }
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", string(pk(key)))
            .update_expression(expression)
            .condition_expression(condition)
            .expression_attribute_values(":kind", string(KIND_SEND_BUDGET))
            .expression_attribute_values(":one", number(1))
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        for (placeholder, name) in names {
            update = update.expression_attribute_names(placeholder, name);
        }
        for (placeholder, value) in values {
            update = update.expression_attribute_values(placeholder, value);
        }
        match update.send().await {
            Ok(output) => Ok(Swap::Written(cell(
                &output.attributes.unwrap_or_default(),
                UPDATE,
            )?)),
            Err(err) => match update_condition_failed(&err) {
                Some(stored) => Ok(Swap::Changed(
                    stored.as_ref().map(|item| cell(item, UPDATE)).transpose()?,
                )),
                None => Err(port_error(UPDATE, err)),
            },
        }
    }
}

#[async_trait]
impl BudgetCells for DynamoBudgetCells {
    async fn swap(
        &self,
        key: &CellKey,
        seen: u64,
        sends: &[Timestamp],
        keep_until: Timestamp,
    ) -> Result<Swap, PortError> {
        let sends = AttributeValue::L(sends.iter().map(|at| number(at.0)).collect());
        let mut values = vec![(":sends", sends), (":expires_at", expiry_secs(keep_until))];
        let condition = match seen {
            0 => NEVER_WRITTEN,
            seen => {
                values.push((":seen", number(seen)));
                AT_SEEN_VERSION
            }
        };
        self.update(key, BOOK, condition, values).await
    }

    async fn read(&self, key: &CellKey) -> Result<Option<BudgetCell>, PortError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", string(pk(key)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|err| port_error(GET, err))?;
        output.item.as_ref().map(|item| cell(item, GET)).transpose()
    }

    async fn pause(
        &self,
        bot: &BotId,
        until: Timestamp,
        keep_until: Timestamp,
    ) -> Result<Option<BudgetCell>, PortError> {
        let values = vec![
            (":until", number(until.0)),
            (":expires_at", expiry_secs(keep_until)),
        ];
        // A refused condition means the bot is held as long already: the stored cell says so.
        match self
            .update(&CellKey::Bot(bot.clone()), PAUSE, HELD_SHORTER, values)
            .await?
        {
            Swap::Written(cell) => Ok(Some(cell)),
            Swap::Changed(stored) => Ok(stored),
        }
    }
}
