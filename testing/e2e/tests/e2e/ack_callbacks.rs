//! `TGQ_ACK_CALLBACKS=true` with the real functions on moto: the webhook answers a callback query's
//! request with `answerCallbackQuery` in its reply body once the update is queued, and the worker
//! sends the echo bot's reply but not its own answer to the query. An ignored test measures how long
//! the user waits for the answer: in the reply, or from the worker as without the setting.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tgq_core::ingest::SECRET_HEADER;
use tgq_e2e::emulator::{self, record_status, Stack};
use tgq_e2e::esm::EventSourceMapping;
use tgq_e2e::functions::{Functions, WEBHOOK, WORKER};
use tgq_fake_telegram::FakeTelegram;

const BOT_ID: &str = "demo";
const SECRET: &str = "tgq-example-secret";
const DRAIN_LIMIT: Duration = Duration::from_secs(120);

fn vars(stack: &Stack, fake: &FakeTelegram, ack_callbacks: bool) -> BTreeMap<String, String> {
    let mut vars = stack.function_vars(BOT_ID, SECRET, Some(fake));
    vars.insert("TGQ_ACK_CALLBACKS".into(), ack_callbacks.to_string());
    vars
}

/// A button press in chat `chat`, as Telegram sends it.
fn callback_update(update_id: i64, chat: i64) -> Value {
    let user = json!({ "id": chat, "is_bot": false, "first_name": "Ada" });
    json!({
        "update_id": update_id,
        "callback_query": {
            "id": format!("cb-{update_id}"),
            "from": user,
            "chat_instance": "1",
            "data": "press",
            "message": {
                "message_id": 1,
                "date": 1_767_607_200,
                "chat": { "id": chat, "first_name": "Ada", "type": "private" },
                "text": "Press the button."
            }
        }
    })
}

/// Posts an update as Telegram does and returns the answer's status and JSON body.
async fn post(http: &reqwest::Client, url: &str, update: &Value) -> (u16, Value) {
    let answer = http
        .post(url)
        .header(SECRET_HEADER, SECRET)
        .json(update)
        .send()
        .await
        .expect("the webhook answers");
    let status = answer.status().as_u16();
    (status, answer.json().await.expect("a JSON answer"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_answers_a_callback_query_in_its_reply_and_the_worker_does_not_answer_again() {
    let config = emulator::sdk_config().await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let dynamo = aws_sdk_dynamodb::Client::new(&config);
    let stack = Stack::create(&config, "ackcb").await.unwrap();
    let fake = FakeTelegram::start().await.unwrap();
    let functions = Functions::start(&[WEBHOOK, WORKER], &vars(&stack, &fake, true)).await;
    let http = reqwest::Client::new();
    let url = functions.function_url(WEBHOOK);

    let (status, body) = post(&http, &url, &callback_update(910_000_001, 5)).await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"method": "answerCallbackQuery", "callback_query_id": "cb-910000001"})
    );
    // Answered only once the update is stored (RECEIVED until a worker claims it) and queued.
    assert_eq!(
        record_status(&dynamo, &stack.table, BOT_ID, 910_000_001)
            .await
            .unwrap()
            .as_deref(),
        Some("RECEIVED"),
        "stored before the answer"
    );
    let depth = tgq_e2e::emulator::queue_depth(&sqs, &stack.queue_url)
        .await
        .unwrap();
    assert!(!depth.is_empty(), "queued before the answer: {depth:?}");
    let (_, plain) = post(
        &http,
        &url,
        &tgq_e2e::telegram::text_update(910_000_002, 5, 2, "hi"),
    )
    .await;
    assert_eq!(plain["result"], "queued", "{plain}");

    EventSourceMapping::new(sqs.clone(), stack.clone(), &functions)
        .run_until_drained(|| true, DRAIN_LIMIT)
        .await
        .unwrap();
    let methods: Vec<String> = fake.calls().into_iter().map(|c| c.method).collect();
    assert_eq!(
        methods,
        ["sendMessage", "sendMessage"],
        "the echo bot's answerCallbackQuery was not sent; logs: {}",
        functions.logs().display()
    );
    assert_eq!(
        record_status(&dynamo, &stack.table, BOT_ID, 910_000_001)
            .await
            .unwrap()
            .as_deref(),
        Some("DONE")
    );
}

/// The p50 and p99 of `samples`, in milliseconds.
fn percentiles(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let at = |q: f64| {
        let index = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
        samples[index].as_secs_f64() * 1e3
    };
    (at(0.50), at(0.99))
}

/// POST → callback answered, `runs` button presses each way, one at a time: in the reply (the
/// moment the webhook's answer arrives; Telegram makes the call then) and from the worker without
/// the setting (the moment the fake Bot API receives the handler's `answerCallbackQuery`, through
/// the harness's event source mapping). Prints p50/p99; `TGQ_MEASURE_RUNS` sets the count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: cargo test -p tgq-e2e --test e2e ack_callbacks -- --ignored --nocapture"]
async fn measure_post_to_callback_answered_reply_path_against_worker_path() {
    let runs: i64 = std::env::var("TGQ_MEASURE_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(50);
    let config = emulator::sdk_config().await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let http = reqwest::Client::new();
    let mut figures = Vec::new();
    for ack_callbacks in [true, false] {
        let stack = Stack::create(&config, if ack_callbacks { "ackon" } else { "ackoff" })
            .await
            .unwrap();
        let fake = FakeTelegram::start().await.unwrap();
        let functions =
            Functions::start(&[WEBHOOK, WORKER], &vars(&stack, &fake, ack_callbacks)).await;
        let url = functions.function_url(WEBHOOK);
        let mapping = EventSourceMapping::new(sqs.clone(), stack.clone(), &functions);
        // One unmeasured press warms both functions.
        let mut samples = Vec::new();
        for n in 0..=runs {
            let update_id = 920_000_000 + n;
            let started = Instant::now();
            let (status, body) = post(&http, &url, &callback_update(update_id, 100 + n)).await;
            assert_eq!(status, 200, "{body}");
            let answered = match ack_callbacks {
                true => {
                    assert_eq!(body["method"], "answerCallbackQuery", "{body}");
                    started.elapsed()
                }
                false => {
                    mapping
                        .run_until_drained(|| true, DRAIN_LIMIT)
                        .await
                        .unwrap();
                    let id = format!("cb-{update_id}");
                    let answered = fake
                        .calls()
                        .into_iter()
                        .find(|call| call.params["callback_query_id"] == id.as_str())
                        .expect("the worker answered the query");
                    answered.at.saturating_duration_since(started)
                }
            };
            if n > 0 {
                samples.push(answered);
            }
        }
        if ack_callbacks {
            mapping
                .run_until_drained(|| true, DRAIN_LIMIT)
                .await
                .unwrap();
        }
        let (p50, p99) = percentiles(samples);
        figures.push((ack_callbacks, p50, p99));
    }
    println!("POST → callback answered, {runs} presses each, one at a time, on moto:");
    for (ack, p50, p99) in figures {
        let path = match ack {
            true => "reply path (TGQ_ACK_CALLBACKS=true)",
            false => "worker path (default)",
        };
        println!("  {path}: p50 {p50:.1} ms, p99 {p99:.1} ms");
    }
}
