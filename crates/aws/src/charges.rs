//! A stack's payments ledger as `tgq payments --stack` reads it (docs/design/payments.md §2): the
//! charge items of the records' table, which the settles write.

use tgq_core::payment::{newest_entries, split_charge_pk, LedgerEntry};
use tgq_core::PortError;

use crate::dynamo::DynamoStore;
use crate::item;

const SCAN: &str = "DynamoDB Scan";

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
