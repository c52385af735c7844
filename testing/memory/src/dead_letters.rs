//! The dead-letter queue: letters in arrival order, each with an id, and the operator's holds.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;
use tgq_core::ports::{
    DeadLetter, DeadLetterReader, DeadLetterStore, DeadLetters, HeldLetter, LetterHandle,
};
use tgq_core::PortError;

use crate::Outage;

#[derive(Default)]
pub(crate) struct Letters {
    /// `(id, letter)` in arrival order.
    entries: Vec<(u64, DeadLetter)>,
    next_id: u64,
    /// Letters an operator holds, until when.
    held: HashMap<u64, Instant>,
}

impl Letters {
    /// Appends a letter under the next id, unless a letter with its dedup id is kept already (as a
    /// FIFO dead-letter queue drops a repeated deduplication id).
    pub(crate) fn push(&mut self, letter: DeadLetter) {
        let dedup = letter.dedup_id();
        if self
            .entries
            .iter()
            .any(|(_, kept)| kept.dedup_id() == dedup)
        {
            return;
        }
        self.next_id += 1;
        self.entries.push((self.next_id, letter));
    }
}

/// The dead-letter queue: letters in arrival order.
#[derive(Default)]
pub struct MemoryDeadLetters {
    pub(crate) letters: Mutex<Letters>,
    /// Fails every call while on.
    pub outage: Outage,
}

impl MemoryDeadLetters {
    /// An empty dead-letter queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every letter still in the queue.
    pub fn letters(&self) -> Vec<DeadLetter> {
        let letters = self.letters.lock();
        letters.entries.iter().map(|(_, l)| l.clone()).collect()
    }
}

fn id_of(handle: &LetterHandle) -> Result<u64, PortError> {
    handle
        .0
        .parse()
        .map_err(|_| PortError::rejected("dead-letter handle", "not a letter id"))
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
        Ok(self.letters().into_iter().take(max).collect())
    }
}

#[async_trait]
impl DeadLetterStore for MemoryDeadLetters {
    async fn hold(&self, max: usize, hold: Duration) -> Result<Vec<HeldLetter>, PortError> {
        self.outage.check("dead-letter hold")?;
        let now = Instant::now();
        let mut guard = self.letters.lock();
        let letters = &mut *guard;
        letters.held.retain(|_, until| *until > now);
        let mut taken = Vec::new();
        for (id, letter) in &letters.entries {
            if taken.len() >= max {
                break;
            }
            if letters.held.contains_key(id) {
                continue;
            }
            taken.push(HeldLetter {
                id: id.to_string(),
                handle: LetterHandle(id.to_string()),
                sent_at: None,
                letter: letter.clone(),
            });
        }
        for held in &taken {
            letters.held.insert(id_of(&held.handle)?, now + hold);
        }
        Ok(taken)
    }

    async fn release(&self, handle: &LetterHandle) -> Result<(), PortError> {
        self.outage.check("dead-letter release")?;
        let id = id_of(handle)?;
        self.letters.lock().held.remove(&id);
        Ok(())
    }

    async fn remove(&self, handle: &LetterHandle) -> Result<(), PortError> {
        self.outage.check("dead-letter remove")?;
        let id = id_of(handle)?;
        let mut letters = self.letters.lock();
        letters.held.remove(&id);
        letters.entries.retain(|(entry, _)| *entry != id);
        Ok(())
    }

    async fn depth(&self) -> Result<u64, PortError> {
        self.outage.check("dead-letter depth")?;
        Ok(self.letters.lock().entries.len() as u64)
    }
}
