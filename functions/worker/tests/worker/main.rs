//! The worker function's tests, one binary: the handler on the in-memory adapters and the fake Bot API.

mod common;

mod bots;
mod function;
mod metrics;
