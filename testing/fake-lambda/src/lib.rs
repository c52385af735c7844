//! The services a packaged Lambda function talks to, played on `127.0.0.1` at free ports:
//!
//! - [`FakeRuntime`]: the Lambda Runtime API (`/2018-06-01/runtime/…`). It hands out one invocation
//!   (or several, one per poll), keeps every later poll waiting (as Lambda freezes the process
//!   between events), and takes the function's answers — a response, an invocation error or an
//!   init error.
//! - [`FakeAws`]: SSM Parameter Store's `GetParameter`, for the secrets a function reads at cold
//!   start, and the DynamoDB and SQS calls it makes for an update, answered at once.
//!
//! Both record when things happened, so the artifact check can see what a packaged `bootstrap`
//! answered, and the cold-start bench can time it from exec to its first poll and to its answer.
//! A server stops when its value is dropped.

mod aws;
mod launch;
mod runtime;
mod server;

pub use aws::FakeAws;
pub use launch::{cold_start, cold_start_then, ColdStart, Launch, LaunchError, WarmAnswer};
pub use runtime::{Answer, AnswerKind, FakeRuntime, Invocation, Progress, RUNTIME_API_VERSION};
