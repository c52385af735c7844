//! A broadcast and a bot's replies share its budget in one process: every call reaches Telegram
//! at the slot the budget counted it at, so together they never pass the bot's rate, however
//! the replies bunch. Paused time: every instant below is exact.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::{json, Value};
use tgq_core::broadcast::{BroadcastRunner, BroadcastSpec, BroadcastStore, RunEnd};
use tgq_core::budget::{Clear, Reserved, SendBudget};
use tgq_core::clock::{Clock, SystemClock};
use tgq_core::ids::BotId;
use tgq_core::pacer::{Pacer, RateLimits};
use tgq_core::policy::RetryPolicy;
use tgq_core::telegram::{ApiCall, BotApi, CallError};
use tgq_memory::MemoryBroadcasts;
use tokio::sync::watch;
use tokio::time::Instant;

/// The bot's rate in these tests: messages a second across all its chats.
const RATE: u32 = 10;

fn bot() -> BotId {
    BotId::new("paced").expect("a valid bot id")
}

/// A Bot API that answers every send and keeps the moment each reached it.
#[derive(Default)]
struct Wire {
    arrived: Mutex<Vec<Instant>>,
}

#[async_trait]
impl BotApi for Wire {
    async fn call(&self, call: &ApiCall<'_>) -> Result<Value, CallError> {
        self.arrived.lock().push(Instant::now());
        let chat = call.params["chat_id"].as_i64().expect("a chat id");
        Ok(json!({"message_id": 1, "chat": {"id": chat}}))
    }
}

/// Sends as the worker's replies do: book, wait for the slot, clear, call; booked again when
/// the slot went by or a flood wait held it.
async fn reply(budget: Arc<Pacer>, wire: Arc<Wire>, chat: i64) {
    loop {
        let Reserved::Booked(mut slot) =
            SendBudget::reserve(&*budget, &bot(), Some(chat), Duration::from_secs(60))
                .await
                .expect("an in-process budget answers")
        else {
            panic!("a slot within a minute");
        };
        tokio::time::sleep(slot.wait).await;
        match budget
            .clear_to_send(&bot(), &mut slot)
            .await
            .expect("answers")
        {
            Clear::Go => break,
            Clear::After(wait) => {
                tokio::time::sleep(wait).await;
                break;
            }
            Clear::Held(_) | Clear::Late => continue,
        }
    }
    wire.arrived.lock().push(Instant::now());
}

/// The most calls that reached the wire within any one second.
fn busiest_second(mut arrived: Vec<Instant>) -> usize {
    arrived.sort();
    let mut first = 0;
    let mut most = 0;
    for (last, at) in arrived.iter().enumerate() {
        while *at - arrived[first] >= Duration::from_secs(1) {
            first += 1;
        }
        most = most.max(last + 1 - first);
    }
    most
}

#[tokio::test(start_paused = true)]
async fn a_broadcast_and_bursts_of_replies_stay_within_the_bot_s_rate_together() {
    let limits = RateLimits {
        per_second: Some(RATE),
        ..RateLimits::default()
    };
    let budget = Arc::new(Pacer::new(limits));
    let store: Arc<dyn BroadcastStore> = Arc::new(MemoryBroadcasts::new());
    let spec = BroadcastSpec::standard(bot(), "sendMessage", json!({"text": "news"}), "cli");
    let chats: Vec<i64> = (1..=60).collect();
    let id = store
        .create(&spec, &chats, SystemClock.now())
        .await
        .expect("the job is created")
        .job()
        .id
        .clone();
    let runner = BroadcastRunner {
        store: store.clone(),
        budget: budget.clone(),
        bot_rate: Some(RATE),
        clock: Arc::new(SystemClock),
        retry: RetryPolicy::default(),
    };
    let wire = Arc::new(Wire::default());
    // Users write in bursts while the broadcast goes: six replies at once, every 1.5 s.
    let replies = {
        let (budget, wire) = (budget.clone(), wire.clone());
        tokio::spawn(async move {
            let mut sent = Vec::new();
            for burst in 0..5 {
                tokio::time::sleep(Duration::from_millis(1_500)).await;
                for user in 0..6 {
                    let chat = 10_000 + burst * 10 + user;
                    sent.push(tokio::spawn(reply(budget.clone(), wire.clone(), chat)));
                }
            }
            for reply in sent {
                reply.await.expect("the reply is sent");
            }
        })
    };
    let (_stop, stopped) = watch::channel(false);
    let api: Arc<dyn BotApi> = wire.clone();
    let ended = runner
        .run(&id, api, stopped)
        .await
        .expect("the store answers");
    replies.await.expect("every reply is sent");
    assert_eq!(ended, RunEnd::Done);
    let arrived = wire.arrived.lock().clone();
    assert_eq!(arrived.len(), 60 + 30, "every send reached the wire once");
    let busiest = busiest_second(arrived);
    assert!(
        busiest <= RATE as usize,
        "{busiest} calls reached Telegram within one second; the bot may make {RATE}"
    );
}
