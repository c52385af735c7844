//! Patience with a store or queue that is unavailable for a moment (throttled, a full disk): a
//! write whose failure would cost far more than a short wait — a finished run's settle, a
//! visibility change, local mode's delete — is tried again (docs/design/worker.md §1).

use std::future::Future;
use std::time::{Duration, Instant};

use tracing::warn;

use crate::error::error_chain;
use crate::PortError;

const FIRST_WAIT: Duration = Duration::from_millis(100);
const LONGEST_WAIT: Duration = Duration::from_secs(2);

/// Runs `write` until it succeeds or fails other than as unavailable, waiting between tries (100 ms
/// doubling up to 2 s) while the next wait stays within `patience` since the first try and within
/// `left()`, the time the caller still has.
pub async fn patiently<T, F, Fut>(
    what: &str,
    patience: Duration,
    left: impl Fn() -> Duration,
    mut write: F,
) -> Result<T, PortError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, PortError>>,
{
    let started = Instant::now();
    let mut wait = FIRST_WAIT;
    loop {
        match write().await {
            Err(error @ PortError::Unavailable { .. }) => {
                if started.elapsed() + wait > patience || wait > left() {
                    return Err(error);
                }
                warn!(error = %error_chain(&error), retry_in_ms = wait.as_millis() as u64, "{what} unavailable; trying again");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(LONGEST_WAIT);
            }
            other => return other,
        }
    }
}
