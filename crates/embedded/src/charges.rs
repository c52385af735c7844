//! The payments ledger as `tgq payments` reads and refunds it (docs/design/payments.md §2, §3):
//! the `charges` table, which the settles write.

use async_trait::async_trait;
use redb::{ReadableTable as _, TableError};
use tgq_core::ids::BotId;
use tgq_core::payment::{
    charge_pk, newest_entries, split_charge_pk, Charge, ChargeWrite, LedgerEntry,
};
use tgq_core::ports::{ChargeBook, UpdateLedger};
use tgq_core::PortError;

use crate::schema::CHARGES;
use crate::writer::{OpError, Tx};
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

#[async_trait]
impl ChargeBook for EmbeddedStore {
    async fn entry(&self, bot: &BotId, id: &str) -> Result<Option<Charge>, PortError> {
        UpdateLedger::charge(self, bot, id).await
    }

    async fn write_charge(&self, bot: &BotId, write: &ChargeWrite) -> Result<(), PortError> {
        let pk = charge_pk(bot, &write.entry.id);
        let write = write.clone();
        self.writer
            .run(WRITE, move |tx| tx.write_charge(&pk, &write))
            .await
    }
}

/// What the writer calls an operator's write of the ledger.
const WRITE: &str = "store charge write";

impl Tx<'_> {
    /// Writes `write` at `pk` if the entry there is what it expects; refused with
    /// [`PortError::Credited`], writing nothing, otherwise.
    fn write_charge(&mut self, pk: &str, write: &ChargeWrite) -> Result<(), OpError> {
        let found: Option<Charge> = match self.table(CHARGES)?.get(pk)? {
            Some(value) => Some(
                serde_json::from_slice(value.value())
                    .map_err(|e| OpError::Rejected(format!("charge {pk}: {e}")))?,
            ),
            None => None,
        };
        if !write.expect.holds(found.as_ref()) {
            return Err(OpError::Refused(PortError::Credited {
                what: WRITE,
                charge: write.entry.id.clone(),
            }));
        }
        let value = serde_json::to_vec(&write.entry).map_err(|e| OpError::Fatal(e.to_string()))?;
        self.table_mut(CHARGES)?.insert(pk, value.as_slice())?;
        Ok(())
    }
}
