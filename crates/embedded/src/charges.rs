//! The payments ledger as `tgq payments` reads it (docs/design/payments.md §2): the `charges`
//! table, which the settles write.

use redb::{ReadableTable as _, TableError};
use tgq_core::payment::{newest_entries, split_charge_pk, LedgerEntry};

use crate::schema::CHARGES;
use crate::{EmbeddedStore, StoreError};

impl EmbeddedStore {
    /// The ledger's charges of every bot, newest first, at most `limit`.
    pub fn charges(&self, limit: usize) -> Result<Vec<LedgerEntry>, StoreError> {
        let read = self.db.get()?.begin_read()?;
        let charges = match read.open_table(CHARGES) {
            Ok(charges) => charges,
            // A store of an older layout, not opened for writing since: no payment yet.
            Err(TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(error) => return Err(error.into()),
        };
        let mut entries = Vec::new();
        for entry in charges.iter()? {
            let (key, value) = entry?;
            let pk = key.value();
            let Some((bot_id, _)) = split_charge_pk(pk) else {
                continue;
            };
            let charge = serde_json::from_slice(value.value())
                .map_err(|e| StoreError::corrupt(format!("charge {pk}"))(e.into()))?;
            entries.push(LedgerEntry {
                bot_id: bot_id.to_owned(),
                charge,
            });
        }
        Ok(newest_entries(entries, limit))
    }
}
