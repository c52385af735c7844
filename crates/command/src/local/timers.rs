//! `tgq local`'s timer loop (docs/design/time.md): it moves each timer onto the queue when it
//! falls due, and sleeps until the next one is due or a run hands a new one over. At start it
//! first moves every timer that fell due while the process was down.

use std::sync::Arc;
use std::time::Duration;

use tgq_core::clock::Clock;
use tgq_core::error::error_chain;
use tgq_embedded::EmbeddedStore;
use tracing::{info, warn};

use super::shutdown::Shutdown;

/// How many timers one commit moves; a minute with more due takes several.
const BATCH: usize = 1000;

/// The longest the loop sleeps without looking, and how long it waits after a failed move.
const NAP: Duration = Duration::from_secs(60);
const AFTER_FAILURE: Duration = Duration::from_secs(1);

/// Runs until `shutdown`.
pub(super) async fn timer_loop(
    store: Arc<EmbeddedStore>,
    clock: Arc<dyn Clock>,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    loop {
        let wait = match fire_due(&store, &*clock).await {
            Ok(()) => until_next(&store, &*clock).await,
            Err(()) => AFTER_FAILURE,
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = store.timer_scheduled() => {}
            () = shutdown.wait() => return Ok(()),
        }
    }
}

/// Moves every timer due now onto the queue.
async fn fire_due(store: &EmbeddedStore, clock: &dyn Clock) -> Result<(), ()> {
    let mut moved = 0;
    loop {
        match store.fire_due_timers(clock.now(), BATCH).await {
            Ok(n) => {
                moved += n;
                if n < BATCH as u64 {
                    break;
                }
            }
            Err(error) => {
                warn!(error = %error_chain(&error), "moving due timers to the queue failed; trying again");
                return Err(());
            }
        }
    }
    if moved > 0 {
        info!(timers = moved, "due timers queued in their chats");
    }
    Ok(())
}

/// How long until the earliest kept timer is due, at most [`NAP`].
async fn until_next(store: &Arc<EmbeddedStore>, clock: &dyn Clock) -> Duration {
    let reader = store.clone();
    let next = tokio::task::spawn_blocking(move || reader.next_timer_due()).await;
    match next {
        Ok(Ok(Some(due))) => due.since(clock.now()).min(NAP),
        Ok(Ok(None)) => NAP,
        Ok(Err(error)) => {
            warn!(error = %error_chain(&error), "reading the next timer failed; trying again");
            AFTER_FAILURE
        }
        Err(_) => AFTER_FAILURE,
    }
}
