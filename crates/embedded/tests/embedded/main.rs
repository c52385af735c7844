//! tgq-embedded's integration tests, one binary: the redb store's conformance, durability and repair.

mod conformance;
mod console;
mod damage_and_backup;
mod store;
mod timers;
mod worker;
