//! Timers on a stack (docs/design/time.md) with the real functions on moto: one timer short
//! enough for an SQS message timer, one long enough for an EventBridge Scheduler schedule (the
//! queue's reach shortened to 2 s so that it takes seconds), the schedule delivered twice as
//! Scheduler may, and SQS and DynamoDB down for the worker while the first timer is due. Each
//! timer fires once, in its chat, after the chat's earlier updates, never early; no schedule is
//! left; and a timer of a bot the stack no longer hosts ends as a dead letter saying so.

use std::time::{Duration, Instant};

use tgq_core::clock::{Clock as _, SystemClock};
use tgq_core::echo::{reply_text, timer_reply_text};
use tgq_core::ids::{BotId, GroupKey, UpdateId};
use tgq_core::timer::TimerMessage;
use tgq_e2e::emulator::{self, Stack};
use tgq_e2e::esm::EventSourceMapping;
use tgq_e2e::functions::{Functions, WEBHOOK, WORKER};
use tgq_e2e::proxy::{AwsFault, Proxy, Service};
use tgq_e2e::telegram::text_update;
use tgq_e2e::timers::TimerParts;
use tgq_fake_telegram::FakeTelegram;

const SECRET: &str = "tgq-example-secret";
const SHORT_CHAT: i64 = 61;
const LONG_CHAT: i64 = 62;
const GHOST_CHAT: i64 = 63;
const LIMIT: Duration = Duration::from_secs(120);

fn texts(fake: &FakeTelegram, chat: i64) -> Vec<String> {
    fake.delivered_to(chat)
        .into_iter()
        .map(|call| call.params["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_fire_once_in_their_chat_through_the_queue_and_through_a_schedule_across_an_outage()
{
    let config = emulator::sdk_config().await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let stack = Stack::create(&config, "timers").await.unwrap();
    let mut parts = TimerParts::create(&config, &stack).await.unwrap();
    let fake = FakeTelegram::start().await.unwrap();
    let proxy = Proxy::start(&emulator::endpoint()).await.unwrap();
    let mut vars = stack.function_vars("demo", SECRET, Some(&fake));
    vars.extend(parts.function_vars(Duration::from_secs(2)));
    vars.insert("TGQ_BACKOFF_BASE_MS".into(), "200".into());
    vars.insert("TGQ_BACKOFF_CAP_MS".into(), "1000".into());
    // The worker reaches moto through the proxy, which can take SQS and DynamoDB away from it.
    vars.insert("AWS_ENDPOINT_URL".into(), proxy.url());
    let functions = Functions::start(&[WEBHOOK, WORKER], &vars).await;
    let http = reqwest::Client::new();
    let webhook = functions.function_url(WEBHOOK);
    let updates = [
        (930_000_001, SHORT_CHAT, "/later 1500 soon"),
        (930_000_002, LONG_CHAT, "/later 8000 late"),
        (930_000_003, SHORT_CHAT, "after"),
    ];
    let posted = Instant::now();
    for (update_id, chat, text) in updates {
        let status = http
            .post(&webhook)
            .header(tgq_core::ingest::SECRET_HEADER, SECRET)
            .json(&text_update(update_id, chat, 1, text))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 200, "update {update_id}");
    }
    let mapping = EventSourceMapping::new(sqs.clone(), stack.clone(), &functions);
    mapping.run_until_drained(|| true, LIMIT).await.unwrap();

    // The short timer waits on the timer queue, the long one as a schedule.
    assert_eq!(
        parts.pending_schedules().await.unwrap(),
        1,
        "the long timer's schedule"
    );
    // Down while the short timer falls due: each relay of it fails and it shows again.
    proxy.set(Service::Sqs, Some(AwsFault::Unavailable));
    proxy.set(Service::Dynamo, Some(AwsFault::Unavailable));
    let outage = Instant::now();
    while outage.elapsed() < Duration::from_secs(4) {
        parts.relay_once(&functions, &stack).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    proxy.set(Service::Sqs, None);
    proxy.set(Service::Dynamo, None);
    assert!(
        parts.failed > 0,
        "the relay met the outage: {} relayed",
        parts.relayed
    );
    let (dynamo_refused, sqs_refused) = proxy.refused();
    assert!(dynamo_refused + sqs_refused > 0);

    let short = timer_reply_text(930_000_001, "/later 1500 soon");
    let long = timer_reply_text(930_000_002, "/later 8000 late");
    let started = Instant::now();
    while !(texts(&fake, SHORT_CHAT).contains(&short) && texts(&fake, LONG_CHAT).contains(&long)) {
        assert!(
            started.elapsed() < LIMIT,
            "the timers did not fire: {:?} {:?}; logs: {}",
            texts(&fake, SHORT_CHAT),
            texts(&fake, LONG_CHAT),
            functions.logs().display()
        );
        parts.fire_due_schedules(2).await.unwrap();
        parts.relay_once(&functions, &stack).await.unwrap();
        mapping.run_until_drained(|| true, LIMIT).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A timer of a bot the stack no longer hosts: relayed, then dead-lettered with its reason.
    let ghost = TimerMessage {
        bot_id: BotId::new("ghost").unwrap(),
        group: GroupKey::new(GHOST_CHAT.to_string()),
        update_id: UpdateId(-5),
        chat_id: GHOST_CHAT,
        key: "remind".into(),
        due: SystemClock.now(),
        payload: serde_json::Value::Null,
    };
    sqs.send_message()
        .queue_url(&parts.queue_url)
        .message_body(ghost.relay_body())
        .send()
        .await
        .unwrap();
    // Whatever is still on its way (the schedule's second delivery) is relayed and finds the
    // timer done.
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_secs(3) {
        parts.relay_once(&functions, &stack).await.unwrap();
        mapping.run_until_drained(|| true, LIMIT).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    assert_eq!(
        texts(&fake, SHORT_CHAT),
        [
            reply_text(930_000_001, "/later 1500 soon"),
            reply_text(930_000_003, "after"),
            short.clone(),
        ]
    );
    assert_eq!(
        texts(&fake, LONG_CHAT),
        [reply_text(930_000_002, "/later 8000 late"), long.clone()]
    );
    // Never early: each timer's reply comes after its delay from the moment it was asked for.
    let mut came = Vec::new();
    for (chat, reply, delay) in [(SHORT_CHAT, &short, 1_500), (LONG_CHAT, &long, 8_000)] {
        let call = fake
            .delivered_to(chat)
            .into_iter()
            .find(|call| call.params["text"].as_str() == Some(reply.as_str()))
            .unwrap();
        assert!(
            call.at >= posted + Duration::from_millis(delay),
            "{reply:?} came {:?} after the updates were posted, before its {delay} ms",
            call.at - posted
        );
        came.push(call.at - posted);
    }
    println!(
        "timers on a stack: the 1.5 s timer replied after {:.2} s (held through the 4 s outage), \
         the 8 s one after {:.2} s; {} relays failed in the outage, {dynamo_refused} DynamoDB and \
         {sqs_refused} SQS requests refused; {} relayed in all; {} schedule fired, delivered twice",
        came[0].as_secs_f64(),
        came[1].as_secs_f64(),
        parts.failed,
        parts.relayed,
        parts.fired.len(),
    );
    let letters = emulator::drain(&sqs, &stack.dlq_url).await.unwrap();
    assert_eq!(letters.len(), 1, "{letters:#?}");
    assert_eq!(letters[0].attributes["reason"], "unknown_bot");
    assert_eq!(letters[0].group_id, format!("ghost:{GHOST_CHAT}"));
    assert_eq!(parts.fired.len(), 1, "one schedule: {:?}", parts.fired);
    assert_eq!(parts.pending_schedules().await.unwrap(), 0);
    assert!(
        emulator::queue_depth(&sqs, &parts.queue_url)
            .await
            .unwrap()
            .is_empty(),
        "the timer queue is empty"
    );
}
