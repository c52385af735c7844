//! The bots' send budgets in memory: every cell behind one lock, each write checked against the
//! version its writer saw, as DynamoDB's conditional updates check it.

use std::collections::HashMap;

use async_trait::async_trait;
use parking_lot::Mutex;
use tgq_core::budget::{BudgetCell, BudgetCells, CellKey, Swap};
use tgq_core::ids::BotId;
use tgq_core::record::Timestamp;
use tgq_core::PortError;

/// Budget cells in memory; the processes of a test that share a budget share one instance.
#[derive(Debug, Default)]
pub struct MemoryBudgetCells {
    cells: Mutex<HashMap<CellKey, BudgetCell>>,
}

impl MemoryBudgetCells {
    /// No cell written yet.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl BudgetCells for MemoryBudgetCells {
    async fn swap(
        &self,
        key: &CellKey,
        seen: u64,
        sends: &[Timestamp],
        _keep_until: Timestamp,
    ) -> Result<Swap, PortError> {
        let mut cells = self.cells.lock();
        let cell = cells.entry(key.clone()).or_default();
        if cell.version != seen {
            return Ok(Swap::Changed((cell.version > 0).then(|| cell.clone())));
        }
        cell.version += 1;
        cell.sends = sends.to_vec();
        Ok(Swap::Written(cell.clone()))
    }

    async fn read(&self, key: &CellKey) -> Result<Option<BudgetCell>, PortError> {
        Ok(self
            .cells
            .lock()
            .get(key)
            .filter(|cell| cell.version > 0)
            .cloned())
    }

    async fn pause(
        &self,
        bot: &BotId,
        until: Timestamp,
        _keep_until: Timestamp,
    ) -> Result<Option<BudgetCell>, PortError> {
        let mut cells = self.cells.lock();
        let cell = cells.entry(CellKey::Bot(bot.clone())).or_default();
        if cell.paused_until.is_none_or(|held| held < until) {
            cell.paused_until = Some(until);
            cell.version += 1;
        }
        Ok(Some(cell.clone()))
    }
}
