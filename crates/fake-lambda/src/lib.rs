//! The two services a packaged Lambda function talks to before it answers its first event, played
//! on `127.0.0.1` at free ports:
//!
//! - [`FakeRuntime`]: the Lambda Runtime API (`/2018-06-01/runtime/…`). It hands out one invocation
//!   on the first `GET …/invocation/next`, keeps every later poll waiting (as Lambda freezes the
//!   process between events), and takes the function's answer — a response, an invocation error
//!   or an init error.
//! - [`FakeSsm`]: SSM Parameter Store's `GetParameter`, for the secrets a function reads at cold
//!   start.
//!
//! Both record when things happened, so the artifact check can see what a packaged `bootstrap`
//! answered, and the cold-start bench can time it from exec to its first poll and to its answer.
//! A server stops when its value is dropped.

mod launch;
mod runtime;
mod server;
mod ssm;

pub use launch::{cold_start, ColdStart, Launch, LaunchError};
pub use runtime::{Answer, AnswerKind, FakeRuntime, Invocation, Progress, RUNTIME_API_VERSION};
pub use ssm::FakeSsm;
