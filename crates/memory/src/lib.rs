//! In-memory adapters for every tgq port: the reference semantics for the conformance suite, and the
//! fast fakes for unit tests and benchmarks. Each can be switched to "unavailable" to inject faults.
//! One module per port: `store` (records), `queue` (the FIFO updates queue), `dead_letters`,
//! `bot_api` (a recording Bot API) and `visibility` (a recording visibility port).

use std::time::Duration;

mod bot_api;
mod dead_letters;
mod outage;
mod queue;
mod store;
mod visibility;

pub use bot_api::{ApiCall, RecordingBotApi};
pub use dead_letters::MemoryDeadLetters;
pub use outage::Outage;
pub use queue::MemoryQueue;
pub use store::MemoryStore;
pub use visibility::RecordingVisibility;

/// SQS FIFO drops a message whose deduplication id was seen within this window.
pub const DEDUP_WINDOW: Duration = Duration::from_secs(300);
