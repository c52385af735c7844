//! `tgq local`'s broadcast loop (docs/ARCHITECTURE.md §13): it runs the running broadcast jobs of
//! the store, one task each, through the bot's own Bot API and the pacer the worker loops share, so
//! a broadcast and the bot's replies together keep Telegram's limits. A bot sends one broadcast at
//! a time: of its running jobs the oldest starts, and the next when that one ends or is paused. A
//! job started, resumed or left running by an earlier process is picked up within a moment.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tgq_core::bots::{BotDirectory, Lookup};
use tgq_core::broadcast::{
    ahead_of, BroadcastJob, BroadcastRunner, BroadcastStore as _, Change, JobState, RunEnd,
};
use tgq_core::clock::Clock;
use tgq_core::error::error_chain;
use tgq_core::ids::BotId;
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
    let mut running: HashMap<u64, (BotId, JoinHandle<()>)> = HashMap::new();
    loop {
        running.retain(|_, (_, run)| !run.is_finished());
        match store.jobs().await {
            Ok(jobs) => {
                let start: Vec<BroadcastJob> =
                    startable(&jobs, &running).into_iter().cloned().collect();
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
                    let (runner, stop, id) = (runner.clone(), shutdown.subscribe(), job.id.clone());
                    info!(broadcast = %id, recipients = job.counts.total, "running broadcast");
                    running.insert(
                        id.0,
                        (job.spec.bot.clone(), tokio::spawn(async move {
                            match runner.run(&id, api, stop).await {
                                Ok(RunEnd::Stopped(state)) => {
                                    info!(broadcast = %id, state = state.as_str(), "broadcast stopped")
                                }
                                Ok(_) => {}
                                Err(error) => {
                                    warn!(broadcast = %id, error = %error_chain(&error), "the broadcast's store failed; it goes on at the next look")
                                }
                            }
                        })),
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
    for (_, (_, run)) in running {
        let _ = run.await;
    }
    Ok(())
}

/// The jobs to start now: each bot's oldest running job ([`ahead_of`]), unless a job of that bot
/// already runs here.
fn startable<'j, T>(
    jobs: &'j [BroadcastJob],
    running: &HashMap<u64, (BotId, T)>,
) -> Vec<&'j BroadcastJob> {
    jobs.iter()
        .filter(|job| job.state == JobState::Running && ahead_of(jobs, job).is_none())
        .filter(|job| running.values().all(|(bot, _)| *bot != job.spec.bot))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tgq_core::broadcast::{BroadcastId, BroadcastSpec};
    use tgq_core::record::Timestamp;

    fn job(id: u64, bot: &str, state: JobState) -> BroadcastJob {
        let spec = BroadcastSpec::standard(
            BotId::new(bot).unwrap(),
            "sendMessage",
            json!({"text": "news"}),
            "cli",
        );
        let mut job = BroadcastJob::new(BroadcastId(id), spec, 10, Timestamp(0));
        job.state = state;
        job
    }

    fn ids(jobs: Vec<&BroadcastJob>) -> Vec<u64> {
        jobs.iter().map(|j| j.id.0).collect()
    }

    #[test]
    fn a_bot_sends_its_oldest_running_broadcast_and_one_at_a_time() {
        // Newest first, as the store lists them.
        let jobs = [
            job(5, "shop", JobState::Running),
            job(4, "news", JobState::Running),
            job(3, "shop", JobState::Running),
            job(2, "shop", JobState::Paused { reason: None }),
            job(1, "news", JobState::Done),
        ];
        let none: HashMap<u64, (BotId, ())> = HashMap::new();
        assert_eq!(ids(startable(&jobs, &none)), [4, 3]);
        // Job 3 ended and 5 is the shop's oldest, but a shop job still runs here (one resumed
        // while 5 waited, say): 5 waits for it.
        let mut jobs = jobs;
        jobs[2].state = JobState::Done;
        let shop_runs = HashMap::from([(9, (BotId::new("shop").unwrap(), ()))]);
        assert_eq!(ids(startable(&jobs, &shop_runs)), [4]);
        assert_eq!(ids(startable(&jobs, &none)), [5, 4]);
    }
}
