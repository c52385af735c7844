//! What the pipeline is about: the update and its keys, its record, the policies that weigh a failure,
//! the errors a port answers with, the queue's delivery rules, the settings and their defaults.

pub mod config;
pub mod dead;
pub mod defaults;
pub mod envelope;
pub mod error;
pub mod fifo;
pub mod ids;
pub mod patience;
pub mod payment;
pub mod policy;
pub mod record;
