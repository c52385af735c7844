//! tgq-core's integration tests, one binary: the use cases on the in-memory adapters.

mod ack_callbacks;
mod broadcast_pace;
mod checkout;
mod credit;
mod echo;
mod group_keys;
mod ingest;
mod operate;
mod poller;
mod queued;
mod recipient_gone;
mod refund;
mod state;
mod steps;
mod worker;
