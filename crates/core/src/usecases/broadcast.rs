//! Broadcasts (docs/design/broadcasts.md): one message to many chats, as a durable job that sends
//! to each recipient at most once and counts every one.
//!
//! A job is its payload, its recipients (fixed when it starts) and their states. The runner
//! ([`BroadcastRunner`]) takes the next recipients from the store, books each send in the bot's
//! budget (the one the worker paces through, so a broadcast and the bot's replies together keep
//! Telegram's limits) at the job's own lane rate, which leaves a reserve for interactive replies,
//! and records each send's intent before the call and its outcome after it. A recipient whose send
//! began and never ended (the process died in between) is recorded as uncertain, never sent again.
//!
//! One file each, under `broadcast/`: the spec (what is sent, and the checks that refuse a bad
//! one), the job and its recipients, the store port, the start, the runner and its lane, the
//! refusals (what Telegram's answers mean for a recipient) and the outage; on a stack, the
//! [`chain`] of steps and the [`steps`] the worker runs.

use std::collections::HashSet;
use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{info, warn};

pub mod chain;
mod job;
mod lane;
mod outage;
mod queued;
mod recipient;
mod refusal;
mod runner;
mod spec;
mod start;
pub mod steps;
mod store;

pub use job::*;
use lane::*;
pub use queued::QueuedBroadcasts;
pub use recipient::*;
pub use refusal::outcome_of;
pub use runner::*;
pub use spec::*;
pub use start::*;
pub use store::*;

use crate::budget::{Clear, Reserved, SendBudget, Slot};
use crate::clock::Clock;
use crate::error::{error_chain, PortError};
use crate::ids::BotId;
use crate::offline::sends_a_message;
use crate::policy::RetryPolicy;
use crate::record::Timestamp;
use crate::telegram::{ApiCall, BotApi, CallError, TelegramError};

/// The share of the bot's send rate a broadcast leaves to the bot's replies, unless told otherwise.
pub const DEFAULT_RESERVE_PERCENT: u8 = 20;
/// The rate of Telegram's paid lane (`allow_paid_broadcast`), unless told otherwise: Telegram's
/// ceiling.
pub const DEFAULT_PAID_RATE: u32 = 1000;
/// What Telegram charges for each message sent in the paid lane, in Stars.
pub const PAID_STARS_PER_MESSAGE: f64 = 0.1;
/// How many of the first recipients may refuse the message, before any took it, until the job is
/// paused: a payload Telegram refuses for everyone must not burn through the list.
pub const REFUSALS_BEFORE_PAUSE: u32 = 3;
/// How long a lane holds after a send met Telegram's outage (a request that never left, a 5xx);
/// each next failure in a row doubles it.
pub const OUTAGE_FIRST_WAIT: Duration = Duration::from_millis(200);
/// The longest a lane holds for an outage between two tries.
pub const OUTAGE_LONGEST_WAIT: Duration = Duration::from_secs(30);
/// How many times a recipient's send is tried when it fails for a passing reason (a 5xx, a
/// definite network refusal), before it goes to the job's dead letters.
pub const MAX_ATTEMPTS: u32 = 5;
/// The most sends of one job in flight at once, a quarter of its lane's rate within these bounds:
/// each send waits for two durable writes and Telegram's answer, tens of milliseconds in all, so a
/// lane of 1,000 a second needs a few hundred under way to keep its pace.
const IN_FLIGHT: (usize, usize) = (8, 256);
/// The sends under way for a Bot API nobody paces (the offline outbox): as many as the store's
/// commits share well.
const UNPACED_IN_FLIGHT: usize = 32;
/// How many recipients the runner takes from the store at a time: the sends in flight drain
/// between two takes.
const TAKE: usize = 1000;
/// How long a job that ended (done or cancelled) is kept, with its recipients, after it ended:
/// `status`, `list` and `retry` reach it until then. `tgq local`'s retention removes it then;
/// on a stack its items carry `expires_at` for DynamoDB's TTL.
pub const KEEP_ENDED: Duration = Duration::from_secs(30 * 24 * 3600);
/// The most chats a handler's broadcast may list: the list is written with its job, in one write
/// of at most 4 MB on DynamoDB.
pub const MAX_LISTED: usize = 400_000;
/// How many recipients of an audience a run in `tgq local` writes at a time
/// ([`BroadcastStore::expand`]); a step on a stack writes a chunk's worth.
const EXPAND_CHUNK: u64 = CHUNK;
/// How often an idle runner looks for work and an active one for a pause or a cancel.
const LOOK_EVERY: Duration = Duration::from_millis(250);
/// The longest a send books ahead in the bot's budget: a longer wait is asked for again.
const BOOK_WITHIN: Duration = Duration::from_secs(2);
/// Slack on the lane's one-second window, for sends that leave on time and arrive unevenly.
const LANE_SLACK: Duration = Duration::from_millis(20);
/// How far behind its schedule the lane catches up.
const CATCH_UP: Duration = Duration::from_millis(20);

/// The indexes of a share of a job's recipients: what one run on a stack works through (a chunk of
/// [`CHUNK`]), or every recipient ([`EVERY`]) for the process that runs the whole job.
pub type Indexes = Range<u64>;
/// Every recipient of a job.
pub const EVERY: Indexes = 0..u64::MAX;
/// How many recipients a chunk on a stack holds: what one run reads and works through before the
/// next chunk (docs/design/broadcast-runs.md).
pub const CHUNK: u64 = 1000;
