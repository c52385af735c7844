//! The use cases, each driving the ports to keep its rules (docs/ARCHITECTURE.md §4): ingest, the
//! worker, the poller and its lease, the timer relay, broadcasts, the operator's actions; and the send
//! budget and metrics they share.

pub mod broadcast;
pub mod budget;
pub mod ingest;
pub mod metrics;
pub mod operate;
pub mod pacer;
pub mod poller;
pub(crate) mod reading;
pub mod reconcile;
pub mod refund;
pub mod relay;
pub mod worker;
