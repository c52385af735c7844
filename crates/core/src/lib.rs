//! tgq's core: the update envelope and its keys, the policies, the ports, the bot's API, and the
//! use cases (docs/design/worker.md §1) — [`ingest::Webhook`] (docs/design/webhook.md),
//! [`worker::Worker`] (docs/design/worker.md), [`poller::Poller`] (docs/design/fleet.md §1),
//! [`relay::TimerRelay`] (docs/design/time.md), the broadcasts' [`broadcast::BroadcastRunner`]
//! and [`broadcast::steps::BroadcastSteps`] (docs/design/broadcasts.md), and the operator's
//! dead-letter actions in [`operate`] (docs/design/operate.md). No AWS type appears here.

pub mod audit;
pub mod bots;
pub mod broadcast;
pub mod budget;
pub mod clock;
pub mod config;
pub mod context;
pub mod dead;
pub mod defaults;
pub mod echo;
pub mod envelope;
pub mod error;
pub mod failure;
pub mod fifo;
pub mod flow;
pub mod handler;
pub mod handlers;
pub mod ids;
pub mod ingest;
pub mod leadership;
pub mod metrics;
pub mod offline;
pub mod operate;
pub mod pacer;
pub mod patience;
pub mod policy;
pub mod poller;
pub mod ports;
mod reading;
pub mod record;
pub mod registry;
pub mod relay;
pub mod state;
pub mod telegram;
pub mod timer;
pub mod upload;
pub mod worker;

pub use context::Context;
pub use error::{ErrorClass, PortError};
pub use handler::HandlerError;
pub use handler::{BotConfig, Handler};

/// The Bot API types the handler receives and sends, re-exported so bots use the same version.
pub use teloxide_core as bot_api;
