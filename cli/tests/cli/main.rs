//! The tgq command's integration tests, one binary: each module drives the real `tgq` binary
//! (`CARGO_BIN_EXE_tgq`) or its adapters from outside, as a user or an operator would.

mod browser;
mod common;

mod aws;
mod backup;
mod bots;
mod broadcast;
mod checkout;
mod console;
mod corpus;
mod demo;
mod disk;
mod dlq;
mod drill_quick;
mod durability;
mod fake_methods;
mod fake_telegram;
mod guides;
mod listeners;
mod local_bots;
mod new_crate;
mod ops;
mod outbox;
mod payments;
mod poll;
mod poll_aws;
mod readme_deploy;
mod recovery;
mod retention;
mod setup;
mod timers;
mod usage;
mod webhook;
