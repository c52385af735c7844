//! The bot's API: a handler, the context it runs with (calls, steps, state, timers, uploads,
//! broadcasts), conversations, and how a run's failure is told; and the built-in echo bot.

pub mod context;
pub mod echo;
pub mod failure;
pub mod flow;
pub mod handler;
pub mod handlers;
pub mod state;
pub mod timer;
pub mod upload;
