//! The end-to-end harness (docs/design/local.md): the real `webhook` and `worker` binaries behind
//! `cargo lambda watch`, the AWS emulator named by `AWS_ENDPOINT_URL` (moto server in the suite), and
//! the fake Bot API — with the harness playing the two parts AWS and Telegram play around them:
//! Telegram posting updates to the function URL ([`telegram::Telegram`]) and the SQS event source
//! mapping feeding the worker ([`esm::EventSourceMapping`]), and for timers the second mapping and
//! EventBridge Scheduler ([`timers::TimerParts`]), and for broadcasts the third mapping
//! ([`broadcasts::BroadcastParts`]).
//!
//! Nothing here skips: a test that cannot reach the emulator or `cargo lambda` panics saying what is
//! missing.

pub mod broadcasts;
pub mod cargo;
pub mod corpus;
pub mod dashboard;
pub mod emulator;
pub mod esm;
pub mod functions;
pub mod proxy;
pub mod telegram;
pub mod template;
pub mod timers;
