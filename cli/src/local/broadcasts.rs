//! `tgq local`'s broadcast loop (docs/ARCHITECTURE.md §13): it runs every running broadcast job of
//! the store, one task each, through the bot's own Bot API and the pacer the worker loops share, so
//! a broadcast and the bot's replies together keep Telegram's limits. A job started, resumed or
//! left running by an earlier process is picked up within a moment.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tgq_core::bots::{BotDirectory, Lookup};
use tgq_core::broadcast::{BroadcastRunner, BroadcastStore as _, Change, JobState, RunEnd};
use tgq_core::clock::Clock;
use tgq_core::error::error_chain;
use tgq_embedded::EmbeddedStore;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::shutdown::Shutdown;

/// How often the loop looks for jobs to run.
const LOOK_EVERY: Duration = Duration::from_millis(500);

/// Runs until `shutdown`, then waits for the jobs' runs to stop (each ends its sends in flight).
pub(super) async fn broadcast_loop(
    store: Arc<EmbeddedStore>,
    bots: Arc<dyn BotDirectory>,
    runner: Arc<BroadcastRunner>,
    clock: Arc<dyn Clock>,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let mut running: HashMap<u64, JoinHandle<()>> = HashMap::new();
    loop {
        running.retain(|_, run| !run.is_finished());
        match store.jobs().await {
            Ok(jobs) => {
                for job in jobs.into_iter().filter(|j| j.state == JobState::Running) {
                    if running.contains_key(&job.id.0) {
                        continue;
                    }
                    let api = match bots.lookup(&job.spec.bot).await {
                        Lookup::Found(bot) => bot.api.clone(),
                        Lookup::Refused(_, why) => {
                            let reason = format!("bot {} cannot send: {why}", job.spec.bot);
                            warn!(broadcast = %job.id, "{reason}");
                            let _ = store
                                .change(&job.id, Change::PauseBecause(reason), clock.now())
                                .await;
                            continue;
                        }
                        // Looked up again at the next look.
                        Lookup::Unavailable(error) => {
                            warn!(broadcast = %job.id, error = %error_chain(&error), "the broadcast's bot cannot be reached now");
                            continue;
                        }
                    };
                    let (runner, stop, id) = (runner.clone(), shutdown.subscribe(), job.id.clone());
                    info!(broadcast = %id, recipients = job.counts.total, "running broadcast");
                    running.insert(
                        id.0,
                        tokio::spawn(async move {
                            match runner.run(&id, api, stop).await {
                                Ok(RunEnd::Stopped(state)) => {
                                    info!(broadcast = %id, state = state.as_str(), "broadcast stopped")
                                }
                                Ok(_) => {}
                                Err(error) => {
                                    warn!(broadcast = %id, error = %error_chain(&error), "the broadcast's store failed; it goes on at the next look")
                                }
                            }
                        }),
                    );
                }
            }
            Err(error) => warn!(error = %error_chain(&error), "reading the broadcasts failed"),
        }
        tokio::select! {
            () = tokio::time::sleep(LOOK_EVERY) => {}
            () = shutdown.wait() => break,
        }
    }
    for (_, run) in running {
        let _ = run.await;
    }
    Ok(())
}
