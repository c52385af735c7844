//! The ports: small capability traits, one per thing a function is allowed to do. Adapters (in-memory,
//! embedded, AWS) implement them; no SDK type crosses them.
//!
//! One file per capability: the update path's, the send budget's, the pollers' lease, the operator's
//! audit, the bots a deployment serves, the clock and the Bot API. The broadcasts' store and queue
//! are beside the jobs they hold, in `usecases/broadcast`.

pub mod audit;
pub mod bots;
pub mod budget;
pub mod clock;
pub mod leadership;
pub mod offline;
pub mod registry;
pub mod telegram;

mod dead_letters;
mod ledger;
mod queue;
mod reset;
mod store;
mod timers;

pub use crate::dead::DeadLetter;
pub use dead_letters::*;
pub use ledger::*;
pub use queue::*;
pub use reset::*;
pub use store::*;
pub use timers::*;
