//! tgq's core, in four layers (docs/ARCHITECTURE.md §3), each a folder: `model` (the update
//! envelope and its keys, records, policies, settings), `ports` (what a use case needs of the
//! world, as traits), `bot` (the bot's API) and `usecases` — [`ingest::Webhook`]
//! (docs/design/webhook.md), [`worker::Worker`] (docs/design/worker.md), [`poller::Poller`]
//! (docs/design/fleet.md §1), [`relay::TimerRelay`] (docs/design/time.md), the broadcasts'
//! [`broadcast::BroadcastRunner`] and [`broadcast::steps::BroadcastSteps`]
//! (docs/design/broadcasts.md), and the operator's dead-letter actions in [`operate`]
//! (docs/design/operate.md). Each module keeps its path at the crate's root (`tgq_core::worker`).
//! No AWS type appears here.

mod bot;
mod model;
pub mod ports;
mod usecases;

pub use bot::{context, echo, failure, flow, handler, handlers, state, timer, upload};
pub use model::{
    config, dead, defaults, envelope, error, fifo, ids, patience, payment, policy, record,
};
pub use ports::{audit, bots, clock, leadership, offline, registry, telegram};
use usecases::reading;
pub use usecases::{
    broadcast, budget, ingest, metrics, operate, pacer, poller, reconcile, refund, relay, worker,
};

pub use context::Context;
pub use error::{ErrorClass, PortError};
pub use handler::HandlerError;
pub use handler::{BotConfig, Handler};

/// The Bot API types the handler receives and sends, re-exported so bots use the same version.
pub use teloxide_core as bot_api;
