//! The worker function's tests, one binary: the handler on the in-memory adapters and the fake Bot API.

mod common;

mod bots;
mod chain;
mod function;
mod metrics;
