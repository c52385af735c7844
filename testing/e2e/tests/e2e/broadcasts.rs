//! Broadcasts on a stack (docs/design/broadcast-runs.md) with the real worker on moto: a job
//! started on the stack's table and queue runs as steps from the broadcasts queue, in chunks, while
//! the worker is SIGKILLed in the middle of a step (a new one takes over) and DynamoDB is taken
//! away from it for a step. Each recipient is sent the message at most once; only the sends the
//! dead worker had under way are uncertain; recipients who blocked the bot are gone; the job ends
//! done, and Telegram's limits hold throughout.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tgq_aws::{DynamoBroadcasts, SqsQueue};
use tgq_core::broadcast::{
    self, Audience, BroadcastSpec, BroadcastStore as _, JobState, QueuedBroadcasts,
};
use tgq_core::clock::{Clock as _, SystemClock};
use tgq_core::ids::BotId;
use tgq_e2e::broadcasts::BroadcastParts;
use tgq_e2e::emulator::{self, Stack};
use tgq_e2e::functions::{Functions, WORKER};
use tgq_e2e::proxy::{AwsFault, Proxy, Service};
use tgq_fake_telegram::{FakeConfig, FakeTelegram, Fault, Limits, Scope, Times};

const RECIPIENTS: i64 = 120;
const CHUNK: u64 = 25;
const BLOCKED: [i64; 2] = [17, 90];
const LIMIT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcast_on_a_stack_reaches_each_recipient_once_across_a_killed_worker_and_an_outage() {
    let config = emulator::sdk_config().await;
    let stack = Stack::create(&config, "casts").await.unwrap();
    let mut parts = BroadcastParts::create(&config, &stack).await.unwrap();
    let fake = FakeTelegram::start_with(FakeConfig {
        limits: Some(Limits::default()),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    for chat in BLOCKED {
        fake.inject(Fault::Blocked, Scope::Chat(chat), Times::Always);
    }
    let proxy = Proxy::start(&emulator::endpoint()).await.unwrap();
    let mut vars = stack.function_vars("demo", "tgq-example-secret", Some(&fake));
    vars.extend(parts.function_vars(CHUNK));
    vars.insert("AWS_ENDPOINT_URL".into(), proxy.url());
    let functions = Functions::start(&[WORKER], &vars).await;

    // Started as `tgq broadcast start --stack` starts it: the job in the table, its first step
    // on the queue.
    let queue = SqsQueue::new(aws_sdk_sqs::Client::new(&config), parts.queue_url.clone());
    let store = QueuedBroadcasts::new(
        Arc::new(DynamoBroadcasts::new(
            aws_sdk_dynamodb::Client::new(&config),
            stack.table.clone(),
        )),
        Arc::new(queue),
    );
    let spec = BroadcastSpec::standard(
        BotId::new("demo").unwrap(),
        "sendMessage",
        json!({"text": "news", "reply_markup": {"inline_keyboard": [[{"text": "Read", "callback_data": "read"}]]}}),
        "cli",
    );
    let chats: Vec<i64> = (1..=RECIPIENTS).collect();
    let created = broadcast::start(
        &store,
        &spec,
        &Audience::Chats {
            chats: chats.clone(),
        },
        SystemClock.now(),
    )
    .await
    .unwrap();
    let id = created.job().id.clone();
    let delivered = || {
        chats
            .iter()
            .map(|c| fake.delivered_to(*c).len())
            .sum::<usize>()
    };

    // The first step dies with its worker partway through its first chunk: a step whose first
    // chunk is slow (a loaded emulator) begins no second one, so later would be after it ended.
    let kill = async {
        let limit = Instant::now() + Duration::from_secs(60);
        while delivered() < 10 {
            assert!(Instant::now() < limit, "the first step never sent");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(functions.kill_instances(WORKER).unwrap(), 1);
    };
    assert!(parts.step_or_crash(&functions, &stack, kill).await.unwrap());
    assert_eq!(
        parts.crashed,
        1,
        "the first step ended by itself, held {} time(s), {} delivered; logs: {}",
        parts.held,
        delivered(),
        functions.logs().display()
    );
    functions.start_instance(WORKER).await.unwrap();
    let at_the_kill = delivered();

    // The step shows again; its next run finds DynamoDB gone, hides it and is run again later.
    proxy.set(Service::Dynamo, Some(AwsFault::Unavailable));
    let started = Instant::now();
    while !parts.step_once(&functions, &stack).await.unwrap() {
        assert!(
            started.elapsed() < LIMIT,
            "the killed step never showed again"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        parts.held, 1,
        "the step that met the outage is held, not lost"
    );
    assert_eq!(
        delivered(),
        at_the_kill,
        "nothing is sent while the store is away"
    );
    proxy.set(Service::Dynamo, None);

    let job = loop {
        assert!(
            started.elapsed() < LIMIT,
            "the job never ended; logs: {}",
            functions.logs().display()
        );
        let job = store.job(&id).await.unwrap().unwrap();
        if job.state.is_final() {
            break job;
        }
        if !parts.step_once(&functions, &stack).await.unwrap() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    assert_eq!(job.state, JobState::Done);
    let c = job.counts;
    assert_eq!(c.total, RECIPIENTS as u64);
    assert_eq!(
        c.gone,
        BLOCKED.len() as u64,
        "the recipients who blocked the bot"
    );
    assert_eq!((c.failed, c.retrying, c.pending()), (0, 0, 0));
    assert!(
        c.uncertain <= 8,
        "no more uncertain than the sends the dead worker had under way: {c:?}"
    );
    let mut twice = Vec::new();
    let mut skipped = Vec::new();
    let undelivered: Vec<i64> = store
        .undelivered(&id, None, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.chat)
        .collect();
    for chat in &chats {
        match fake.delivered_to(*chat).len() {
            0 if BLOCKED.contains(chat) || undelivered.contains(chat) => {}
            0 => skipped.push(*chat),
            1 => {}
            _ => twice.push(*chat),
        }
    }
    assert!(twice.is_empty(), "sent twice: {twice:?}");
    assert!(skipped.is_empty(), "skipped: {skipped:?}");
    assert_eq!(
        c.sent + c.uncertain + c.gone,
        RECIPIENTS as u64,
        "every recipient is counted once"
    );
    let sent_before_the_kill = u64::try_from(at_the_kill).unwrap();
    assert!(c.sent >= sent_before_the_kill);
    assert!(
        parts.steps >= 3,
        "the killed step, the held one and the rest: {}",
        parts.steps
    );
    let violations = fake.violations();
    assert_eq!(
        (violations.over_limit, violations.early_sends),
        (0, 0),
        "Telegram's limits held"
    );
}
