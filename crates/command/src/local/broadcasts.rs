//! `tgq local`'s broadcast loop (docs/design/broadcast-runs.md): it runs the running broadcast jobs
//! of the store, one task each, through the bot's own Bot API and the pacer the worker loops share,
//! so a broadcast and the bot's replies together keep Telegram's limits. A bot sends one broadcast
//! at a time: of its running jobs the oldest runs, the next when that one ends or is paused, and a
//! run stops for an older job of its bot resumed meanwhile. A job started, resumed or left running
//! by an earlier process is picked up within a moment.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tgq_core::bots::{BotDirectory, Lookup};
use tgq_core::broadcast::{
    overtaken, startable, BroadcastJob, BroadcastRunner, BroadcastStore as _, Change, RunEnd,
};
use tgq_core::clock::Clock;
use tgq_core::error::error_chain;
use tgq_core::ids::BotId;
use tgq_embedded::EmbeddedStore;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::shutdown::Shutdown;

/// How often the loop looks for jobs to run.
const LOOK_EVERY: Duration = Duration::from_millis(500);

/// A job's run in this process.
struct Run {
    /// The job's bot.
    bot: BotId,
    /// Turned true to end the run: the process stops, or an older job of the bot was resumed.
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// Runs until `shutdown`, then waits for the jobs' runs to stop (each ends its sends in flight).
pub(super) async fn broadcast_loop(
    store: Arc<EmbeddedStore>,
    bots: Arc<dyn BotDirectory>,
    runner: Arc<BroadcastRunner>,
    clock: Arc<dyn Clock>,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let mut running: HashMap<u64, Run> = HashMap::new();
    loop {
        running.retain(|_, run| !run.task.is_finished());
        match store.open_jobs().await {
            Ok(jobs) => {
                for id in overtaken(&jobs, running.keys().copied()) {
                    if let Some(run) = running.get(&id) {
                        if !run.stop.send_replace(true) {
                            info!(
                                broadcast = id,
                                "an older broadcast of the bot was resumed: this one waits for it"
                            );
                        }
                    }
                }
                let bots_running: Vec<BotId> = running.values().map(|r| r.bot.clone()).collect();
                let start: Vec<BroadcastJob> = startable(&jobs, &bots_running)
                    .into_iter()
                    .cloned()
                    .collect();
                for job in start {
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
                    let (stop, stopped) = watch::channel(false);
                    let (runner, id) = (runner.clone(), job.id.clone());
                    info!(broadcast = %id, recipients = job.counts.total, "running broadcast");
                    let task = tokio::spawn(async move {
                        match runner.run(&id, api, stopped).await {
                            Ok(RunEnd::Stopped(state)) => {
                                info!(broadcast = %id, state = state.as_str(), "broadcast stopped")
                            }
                            Ok(_) => {}
                            Err(error) => {
                                warn!(broadcast = %id, error = %error_chain(&error), "the broadcast's store failed; it goes on at the next look")
                            }
                        }
                    });
                    let bot = job.spec.bot.clone();
                    running.insert(job.id.0, Run { bot, stop, task });
                }
            }
            Err(error) => warn!(error = %error_chain(&error), "reading the broadcasts failed"),
        }
        tokio::select! {
            () = tokio::time::sleep(LOOK_EVERY) => {}
            () = shutdown.wait() => break,
        }
    }
    for run in running.values() {
        run.stop.send_replace(true);
    }
    for (_, run) in running {
        let _ = run.task.await;
    }
    Ok(())
}
