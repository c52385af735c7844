//! A broadcast's chain of steps through the worker's third event source: each step claims its
//! place in the chain as the queue message that carries it, so a copy of a step — the same body
//! under another message id, as SQS delivers one queued again after its deduplication window —
//! ends without sending or queueing anything.

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{Context, LambdaEvent};
use std::sync::Mutex;
use tgq_aws::worker::{handle_event, BroadcastSource, Sources};
use tgq_core::bots::OneBot;
use tgq_core::broadcast::chain::{BroadcastQueue, ChainStep};
use tgq_core::broadcast::steps::BroadcastSteps;
use tgq_core::broadcast::{self, Audience, BroadcastRunner, BroadcastSpec};
use tgq_core::clock::{Clock, SystemClock};
use tgq_core::echo::EchoBot;
use tgq_core::ids::BotId;
use tgq_core::pacer::{Pacer, RateLimits};
use tgq_core::policy::RetryPolicy;
use tgq_core::telegram::{BotApi, TelegramError};
use tgq_core::PortError;
use tgq_fake_telegram::FakeTelegram;
use tgq_memory::{MemoryBroadcasts, RecordingBotApi, RecordingVisibility};

use crate::common;

const STEPS_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:tgq-broadcasts.fifo";

/// The successors the steps queued.
#[derive(Default)]
struct Successors(Mutex<Vec<ChainStep>>);

#[async_trait::async_trait]
impl BroadcastQueue for Successors {
    async fn queue(&self, step: &ChainStep, _dedup: &str) -> Result<(), PortError> {
        self.0.lock().unwrap().push(step.clone());
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_of_a_step_under_another_message_id_ends_without_a_second_chain() {
    let fake = FakeTelegram::start().await.unwrap();
    let worker = common::demo_worker(&fake);
    let store = Arc::new(MemoryBroadcasts::new());
    let spec = BroadcastSpec::standard(
        BotId::new("demo").unwrap(),
        "sendMessage",
        serde_json::json!({"text": "news"}),
        "cli",
    );
    let audience = Audience::Chats {
        chats: vec![1, 2, 3],
    };
    let id = broadcast::start(store.as_ref(), &spec, &audience, SystemClock.now())
        .await
        .unwrap()
        .job()
        .id
        .clone();
    // The first send meets a timeout Telegram answered: its recipient is tried again in a
    // minute, so the first step queues the next for then.
    let api = Arc::new(RecordingBotApi::new());
    api.fail_next([TelegramError::Api {
        code: 408,
        description: "Request Timeout".into(),
    }]);
    let successors = Arc::new(Successors::default());
    let sources = Sources {
        timers: None,
        broadcasts: Some(BroadcastSource {
            steps: BroadcastSteps {
                runner: BroadcastRunner {
                    store: store.clone(),
                    budget: Arc::new(Pacer::new(RateLimits::UNLIMITED)),
                    bot_rate: None,
                    clock: Arc::new(SystemClock),
                    retry: RetryPolicy {
                        base: Duration::from_secs(60),
                        cap: Duration::from_secs(60),
                        ..RetryPolicy::default()
                    },
                },
                bots: Arc::new(OneBot::new(
                    api.clone() as Arc<dyn BotApi>,
                    Arc::new(EchoBot),
                )),
                queue: successors.clone(),
                visibility: Arc::new(RecordingVisibility::new()),
                chunk: 1_000,
                clock: Arc::new(SystemClock),
            },
            queue_arn: STEPS_ARN.to_owned(),
        }),
    };
    let body = ChainStep::start(&id).body();
    let record = |message_id: &str| {
        serde_json::json!({
            "messageId": message_id,
            "receiptHandle": format!("r-{message_id}"),
            "body": body,
            "attributes": {
                "ApproximateReceiveCount": "1",
                "MessageGroupId": format!("broadcast:{id}"),
            },
            "messageAttributes": {},
            "eventSourceARN": STEPS_ARN,
        })
    };
    for message_id in ["first", "first-queued-again"] {
        let event: SqsEvent =
            serde_json::from_value(serde_json::json!({"Records": [record(message_id)]})).unwrap();
        let mut context = Context::default();
        context.deadline = SystemClock.now().plus(Duration::from_secs(60)).0;
        let response = handle_event(&worker, &sources, LambdaEvent::new(event, context))
            .await
            .unwrap();
        assert!(
            response.batch_item_failures.is_empty(),
            "{message_id} is done with"
        );
    }
    let queued = successors.0.lock().unwrap().clone();
    assert_eq!(queued.len(), 1, "one chain: {queued:?}");
    assert_eq!(queued[0].step, 2);
    let sent: Vec<String> = api.calls().into_iter().map(|c| c.method).collect();
    assert_eq!(sent, ["sendMessage", "sendMessage"], "chats 2 and 3, once");
}
