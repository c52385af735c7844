//! The end-to-end tests, one binary: the real function binaries under `cargo lambda watch`, moto,
//! the fake Bot API, and the checks of the repository's own files (docs, template, scripts).

mod ack_callbacks;
mod bot_swap;
mod bots;
mod broadcasts;
mod corpus;
mod emulator;
mod operations;
mod pipeline;
mod redrive;
mod repository;
mod requests;
mod stack;
mod template;
mod timers;
