//! Conversations (docs/design/time.md): a flow is a type whose value names the step a chat is
//! at, kept in the chat's state and moved by the handler with [`crate::Context::wait`], so a step
//! advances exactly once with the update that moved it.
//!
//! Why typed steps, and not straight-line code that `await`s the user's next answer: code that
//! waits would have to be rebuilt on every update by replaying it over the chat's earlier updates
//! (grammY's conversations do this), and a replay is only right while the code is unchanged and
//! every branch is deterministic — a redeploy in the middle of a conversation changes the code it
//! replays. A step is a plain value: it survives redeploys, can be read and migrated like any
//! state (`FORMAT`-style, through `NAME`), and the handler's `match` on it shows every place a
//! conversation can be. A wait's timeout is a timer of tgq's own (`FLOW_TIMEOUT_KEY`) that each
//! move replaces, so only the latest wait can time out, once.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The key of a flow's timeout timer; each [`crate::Context::wait`] replaces it.
pub(crate) const FLOW_TIMEOUT_KEY: &str = "tgq:flow-timeout";

/// A conversation's steps: usually an enum with a variant per question, carrying what the chat
/// answered so far.
///
/// ```
/// #[derive(serde::Serialize, serde::Deserialize)]
/// enum Booking { Name, Date { name: String }, Confirm { name: String, date: String } }
///
/// impl tgq_core::flow::Flow for Booking {
///     const NAME: &'static str = "booking/v1";
/// }
/// ```
pub trait Flow: Serialize + DeserializeOwned {
    /// Names the flow and the version of its steps' layout, stored with the step. A chat whose
    /// stored step has another name is not in this flow ([`crate::Context::flow`] returns `None`).
    const NAME: &'static str;
}
