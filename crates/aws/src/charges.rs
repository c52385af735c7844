//! A stack's payments ledger as `tgq payments --stack` reads and refunds it
//! (docs/design/payments.md §2, §3): the charge items of the records' table, which the settles
//! write.

use async_trait::async_trait;
use tgq_core::ids::BotId;
use tgq_core::payment::{
    newest_entries, split_charge_pk, Charge, ChargeWrite, Expect, LedgerEntry,
};
use tgq_core::ports::{ChargeBook, UpdateLedger};
use tgq_core::PortError;

use crate::dynamo::{put_condition_failed, DynamoStore, NEW_CHARGE, NOT_REFUNDED};
use crate::error::port_error;
use crate::item;

const SCAN: &str = "DynamoDB Scan";
const PUT: &str = "DynamoDB PutItem";

impl DynamoStore {
    /// The ledger's charges of every bot, newest first, at most `limit`. A Scan of the whole table
    /// filtered to the charge items: it reads (and is billed for) every item.
    pub async fn charges(&self, limit: usize) -> Result<Vec<LedgerEntry>, PortError> {
        let mut entries = Vec::new();
        for (pk, found) in self.scan_having(item::CHARGE_ID).await? {
            let Some((bot_id, _)) = split_charge_pk(&pk) else {
                continue;
            };
            entries.push(LedgerEntry {
                bot_id: bot_id.to_owned(),
                charge: found.charge().map_err(|e| PortError::rejected(SCAN, e))?,
            });
        }
        Ok(newest_entries(entries, limit))
    }
}

#[async_trait]
impl ChargeBook for DynamoStore {
    async fn entry(&self, bot: &BotId, id: &str) -> Result<Option<Charge>, PortError> {
        UpdateLedger::charge(self, bot, id).await
    }

    /// One conditional PutItem of the charge's item, on the condition a settle's put has.
    async fn write_charge(&self, bot: &BotId, write: &ChargeWrite) -> Result<(), PortError> {
        let result = self
            .client()
            .put_item()
            .table_name(self.table())
            .set_item(Some(item::charge_item(bot, &write.entry)))
            .condition_expression(match write.expect {
                Expect::Absent => NEW_CHARGE,
                Expect::NotRefunded => NOT_REFUNDED,
            })
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(error) if put_condition_failed(&error).is_some() => Err(PortError::Credited {
                what: PUT,
                charge: write.entry.id.clone(),
            }),
            Err(error) => Err(port_error(PUT, error)),
        }
    }
}
