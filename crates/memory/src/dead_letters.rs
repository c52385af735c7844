//! The dead-letter queue: letters in arrival order.

use async_trait::async_trait;
use parking_lot::Mutex;
use tgq_core::ports::{DeadLetter, DeadLetterReader, DeadLetters};
use tgq_core::PortError;

use crate::Outage;

/// The dead-letter queue: letters in arrival order.
#[derive(Default)]
pub struct MemoryDeadLetters {
    pub(crate) letters: Mutex<Vec<DeadLetter>>,
    /// Fails every call while on.
    pub outage: Outage,
}

impl MemoryDeadLetters {
    /// An empty dead-letter queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every letter so far.
    pub fn letters(&self) -> Vec<DeadLetter> {
        self.letters.lock().clone()
    }
}

#[async_trait]
impl DeadLetters for MemoryDeadLetters {
    async fn dead_letter(&self, letter: &DeadLetter) -> Result<(), PortError> {
        self.outage.check("dead-letter send")?;
        self.letters.lock().push(letter.clone());
        Ok(())
    }
}

#[async_trait]
impl DeadLetterReader for MemoryDeadLetters {
    async fn peek(&self, max: usize) -> Result<Vec<DeadLetter>, PortError> {
        self.outage.check("dead-letter peek")?;
        Ok(self.letters.lock().iter().take(max).cloned().collect())
    }
}
