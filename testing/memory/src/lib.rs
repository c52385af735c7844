//! In-memory adapters for every tgq port: the reference semantics for the conformance suite, and the
//! fast fakes for unit tests and benchmarks. Each can be switched to "unavailable" to inject faults.
//! One module per port: `store` (records), `queue` (the FIFO updates queue), `dead_letters`,
//! `bot_api` (a recording Bot API), `bots` (the bot registry), `visibility` (a recording visibility port) and `lease` (the
//! pollers' lease); `harness` runs a handler through the worker on them.

mod bot_api;
mod bots;
mod broadcasts;
mod budget;
mod dead_letters;
mod harness;
mod lease;
mod outage;
mod queue;
mod store;
mod timers;
mod visibility;

pub use bot_api::{RecordedCall, RecordingBotApi};
pub use bots::MemoryBots;
pub use broadcasts::MemoryBroadcasts;
pub use budget::MemoryBudgetCells;
pub use dead_letters::MemoryDeadLetters;
pub use harness::{worker_ports, Harness};
pub use lease::MemoryPollerLease;
pub use outage::{Fault, Outage};
pub use queue::MemoryQueue;
pub use store::MemoryStore;
pub use timers::MemoryTimers;
pub use visibility::RecordingVisibility;
