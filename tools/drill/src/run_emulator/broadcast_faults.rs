//! Scenario 20, `broadcast-faults`, on the emulator (`crate::broadcast_faults` has the scenario):
//! the job started on the stack's table and broadcasts queue as `tgq broadcast start --stack`
//! starts it, its steps run by the real worker from that queue; each kill SIGKILLs every worker
//! container mid-step (the step's message shows again after its visibility timeout) and starts
//! new ones; Telegram's outage the fake shut down and another started at its address; the job
//! resumed as `tgq broadcast resume --stack` resumes it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use serde_json::json;
use tgq_core::broadcast::{
    self, BroadcastId, BroadcastJob, BroadcastSpec, BroadcastStore as _, Change, Changed, JobState,
    QueuedBroadcasts, RecipientState,
};
use tgq_core::clock::{Clock as _, SystemClock};
use tgq_core::ids::BotId;
use tgq_e2e::functions::WORKER;
use tgq_e2e::timers::TimerParts;
use tgq_fake_telegram::FakeTelegram;
use tokio::sync::watch;

use super::broadcast::with_broadcasts;
use super::{Emulated, BOT_ID};
use crate::broadcast_faults::{
    self as scenario, limited, news, Audience, HELD_AT, KILLS_AT, NEWS, PATIENCE, TIMER_AFTER_MS,
    TIMER_EVERY,
};
use crate::plan::Plan;
use crate::scenarios::{chats, first_id, note_order};
use crate::tally::Row;

/// Timers further ahead than this become schedules; the scenario's wait on the timer queue.
const TIMER_REACH: Duration = Duration::from_secs(600);
/// How often the users write to the bot meanwhile.
const INTERACTIVE_EVERY: Duration = Duration::from_millis(250);
/// Worker containers besides the first: one for the job's steps, the others for the updates.
const CONTAINERS: usize = super::esm::CONCURRENCY;

/// Runs the scenario.
pub async fn run(on: &Emulated<'_>) -> anyhow::Result<Row> {
    let (s, o, em) = (on.scenario, on.options, on.em);
    let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let fake = FakeTelegram::start_at(addr, limited()).await?;
    let audience = Audience::new();
    audience.faults(&fake);
    let plan = Plan::ordinary(o.updates, chats(o), first_id(s), o.seed)
        .with_timers(TIMER_EVERY, TIMER_AFTER_MS);
    // The timer queue, its timers relayed into their chats by the worker as its mapping does.
    let millis = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let timers = TimerParts::create_named(
        &em.sdk,
        &format!("tgq-drill-{:02}-{millis}-timers", s.number),
    )
    .await?;
    let timer_vars = timers.function_vars(TIMER_REACH);
    let env: Vec<(&str, &str)> = timer_vars
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let (mut run, parts, store) = with_broadcasts(on, plan.clone(), fake, &env).await?;

    // The job, started as `tgq broadcast start --stack` starts it.
    let spec = BroadcastSpec::standard(
        BotId::new(BOT_ID)?,
        "sendMessage",
        json!({"text": NEWS}),
        "cli",
    );
    let started = Instant::now();
    let listed = broadcast::Audience::Chats {
        chats: audience.list.clone(),
    };
    let id = broadcast::start(&store, &spec, &listed, SystemClock.now())
        .await?
        .job()
        .id
        .clone();

    // The broadcasts queue's event source: its steps handed to the worker one at a time. A kill
    // abandons the invocation under way, as Lambda's does when its container dies.
    let (crashes, crashed) = watch::channel(0u32);
    let pumping = Arc::new(AtomicBool::new(true));
    let pump = {
        let (stack, pumping) = (run.stack.stack.clone(), pumping.clone());
        let invoke_url = em.lambda.lock().await.invoke_url(WORKER);
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(90))
            .build()?;
        let mut parts = parts;
        tokio::spawn(async move {
            while pumping.load(Ordering::SeqCst) {
                let mut crashed = crashed.clone();
                crashed.borrow_and_update();
                let crash = async move {
                    let _ = crashed.changed().await;
                };
                let invoke = |event| invoked(http.clone(), invoke_url.clone(), event);
                match parts.step_with(&stack, invoke, crash).await {
                    Ok(true) => {}
                    Ok(false) => tokio::time::sleep(Duration::from_millis(200)).await,
                    // A step whose container died answers nothing: its message shows again.
                    Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
                }
            }
            parts
        })
    };
    // The timer queue's event source: what it receives handed to the worker; an invocation a
    // kill ends hands nothing back, and its timers show again.
    let relay = {
        let (stack, pumping) = (run.stack.stack.clone(), pumping.clone());
        let invoke_url = em.lambda.lock().await.invoke_url(WORKER);
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(90))
            .build()?;
        let mut timers = timers;
        tokio::spawn(async move {
            while pumping.load(Ordering::SeqCst) {
                let invoke = |event| invoked(http.clone(), invoke_url.clone(), event);
                match timers.relay_with(&stack, invoke).await {
                    Ok(0) => tokio::time::sleep(Duration::from_millis(100)).await,
                    Ok(_) => {}
                    Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
                }
            }
            timers
        })
    };
    let posting = {
        let (poster, plan) = (run.outside.poster.clone(), plan.clone());
        tokio::spawn(async move { poster.send_paced(&plan, INTERACTIVE_EVERY).await })
    };

    // Three kills of every worker container, new ones started at once.
    for (n, at) in KILLS_AT.into_iter().enumerate() {
        audience.reached(started, 0, &run.outside.fake, at).await?;
        em.lambda.lock().await.kill_all(WORKER);
        crashes.send_replace(n as u32 + 1);
        for _ in 0..=CONTAINERS {
            run.new_worker().await?;
        }
    }

    // Telegram goes away: its connections refused, then 502s from an edge in front of it.
    let before = scenario::outage(started, &mut run.outside.fake, addr, &audience).await?;

    // The job held from half delivered until the users' updates are answered, then resumed, as
    // `tgq broadcast pause --stack` and `resume --stack` change it.
    let previous = news(&before.0).count();
    audience
        .reached(started, previous, &run.outside.fake, HELD_AT)
        .await?;
    change(&store, &id, Change::Pause).await?;
    let drain = run.drain(posting).await?;
    change(&store, &id, Change::Resume).await?;

    // The token is revoked until the job pauses, then given back, and the job resumed.
    scenario::revoke(started, &audience, previous, &run.outside.fake).await?;
    let paused = wait_for(&store, &id, started, |s| {
        matches!(s, JobState::Paused { .. })
    })
    .await?;
    run.outside.fake.clear_faults();
    audience.faults(&run.outside.fake);
    change(&store, &id, Change::Resume).await?;
    let job = wait_for(&store, &id, started, |s| *s == JobState::Done).await?;
    let took = started.elapsed();
    pumping.store(false, Ordering::SeqCst);
    let parts = pump.await?;
    let timers = relay.await?;

    let uncertain_chats = store
        .undelivered(&id, None, 10_000)
        .await?
        .into_iter()
        .filter_map(|r| match r.state {
            RecipientState::Uncertain { why } => {
                Some((r.chat, why.unwrap_or_else(|| "not kept".into())))
            }
            _ => None,
        })
        .collect();
    let reported_job = scenario::Reported {
        state: job.state.as_str().to_owned(),
        sent: job.counts.sent,
        gone: job.counts.gone,
        failed: job.counts.failed,
        uncertain: job.counts.uncertain,
        uncertain_chats,
        paused: serde_json::to_value(&paused.state)?,
        failed_when_paused: paused.counts.failed,
    };
    let after = (run.outside.fake.calls(), run.outside.fake.violations());
    let letters = run.stack.dead_letters(&run.sqs).await?;
    let reported = run.reported().await;
    let (tally, mut checks) = scenario::counted(
        &audience,
        (&plan, &run.outside.poster.posted()),
        (&before, &after),
        (&letters, &reported.resent),
        &reported_job,
        took,
    );
    if let Some(steps) = checks
        .iter_mut()
        .find(|c| c.required.starts_with("uncertain only"))
    {
        steps.observed.push_str(&format!(
            "; {} steps, {} held, {} abandoned at a kill",
            parts.steps, parts.held, parts.crashed
        ));
    }
    if let Some(fired) = checks
        .iter_mut()
        .find(|c| c.required.starts_with("every timer"))
    {
        fired.observed.push_str(&format!(
            "; {} timer records relayed, {} reported failed",
            timers.relayed, timers.failed
        ));
    }
    note_order(&mut checks, &run.mapping_note());
    run.finish_with(s, &tally, &reported, drain, checks).await
}

/// The worker's answer to `event`, invoked at `url` as a queue's event source mapping invokes it.
async fn invoked(
    http: reqwest::Client,
    url: String,
    event: SqsEvent,
) -> anyhow::Result<SqsBatchResponse> {
    let answer = http.post(&url).json(&event).send().await?;
    Ok(answer.json().await?)
}

/// Makes `change` to job `id`, as the CLI's `--stack` form makes it; an error unless it applied.
async fn change(store: &QueuedBroadcasts, id: &BroadcastId, change: Change) -> anyhow::Result<()> {
    match store.change(id, change.clone(), SystemClock.now()).await? {
        Changed::Changed { .. } => Ok(()),
        refused => bail!("{change:?} of broadcast {id} did not apply: {refused:?}"),
    }
}

/// Waits until job `id`'s state is one `state` takes; the job then.
async fn wait_for(
    store: &QueuedBroadcasts,
    id: &BroadcastId,
    started: Instant,
    state: impl Fn(&JobState) -> bool,
) -> anyhow::Result<BroadcastJob> {
    loop {
        let job = store.job(id).await?.context("the job is gone")?;
        if state(&job.state) {
            return Ok(job);
        }
        if started.elapsed() > PATIENCE {
            bail!(
                "broadcast {id} did not reach the state awaited within {PATIENCE:?}: {}",
                job.state.as_str()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
