//! The bot registry in memory: a list a test changes while the functions read it, counting the
//! reads and able to fail them.

use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use parking_lot::Mutex;
use tgq_core::ids::BotId;
use tgq_core::registry::{BotEntry, BotSource};
use tgq_core::PortError;

use crate::outage::Outage;

/// A [`BotSource`] holding its bots in memory.
#[derive(Default)]
pub struct MemoryBots {
    bots: Mutex<Vec<BotEntry>>,
    reads: AtomicUsize,
    /// Makes reads fail while on.
    pub outage: Outage,
}

impl MemoryBots {
    /// A registry holding `bots`.
    pub fn new(bots: impl IntoIterator<Item = BotEntry>) -> Self {
        Self {
            bots: Mutex::new(bots.into_iter().collect()),
            ..Self::default()
        }
    }

    /// Adds `bot`, or replaces the bot of its id.
    pub fn put(&self, bot: BotEntry) {
        let mut bots = self.bots.lock();
        bots.retain(|known| known.id != bot.id);
        bots.push(bot);
    }

    /// Removes the bot `id`.
    pub fn remove(&self, id: &BotId) {
        self.bots.lock().retain(|known| &known.id != id);
    }

    /// How often the registry was read.
    pub fn reads(&self) -> usize {
        self.reads.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl BotSource for MemoryBots {
    async fn load(&self) -> Result<Vec<BotEntry>, PortError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.outage.check("registry read")?;
        Ok(self.bots.lock().clone())
    }
}
