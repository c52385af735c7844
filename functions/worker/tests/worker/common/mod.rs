//! The worker the function tests drive: the function's own configuration read from `vars`, the
//! in-memory store and dead letters, and the real HTTP Bot API client pointed at a fake Bot API.

use std::sync::Arc;
use std::time::Duration;

use secrecy::SecretString;
use tgq_aws::worker::WorkerConfig;
use tgq_core::bots::OneBot;
use tgq_core::clock::SystemClock;
use tgq_core::config::Vars;
use tgq_core::echo::EchoBot;
use tgq_core::worker::Worker;
use tgq_fake_telegram::FakeTelegram;
use tgq_memory::{MemoryDeadLetters, MemoryStore};
use tgq_telegram::HttpBotApi;

/// The echo bot's worker on `store`, configured as the function configures it from `vars` (which
/// name `fake`'s token), sending to `fake` with `timeout` per call, unpaced.
pub fn echo_worker(
    vars: &Vars,
    fake: &FakeTelegram,
    timeout: Duration,
    store: Arc<MemoryStore>,
) -> Worker {
    let config = WorkerConfig::from_vars(vars).unwrap();
    let api = HttpBotApi::new(
        &fake.url(),
        SecretString::from(fake.token().to_owned()),
        timeout,
    )
    .unwrap();
    Worker::new(
        config.settings,
        tgq_memory::worker_ports(
            &store,
            Arc::new(MemoryDeadLetters::new()),
            Arc::new(SystemClock),
        ),
        Arc::new(OneBot::new(Arc::new(api), Arc::new(EchoBot))),
    )
}

/// The worker function's settings for bot `demo` with `token`, on a made-up table and queues.
pub fn demo_vars(token: &str) -> Vars {
    Vars::from_pairs([
        ("TELEGRAM_BOT_TOKEN", token),
        ("TGQ_BOT_ID", "demo"),
        ("TGQ_TABLE", "t"),
        ("TGQ_QUEUE_URL", "q"),
        ("TGQ_DLQ_URL", "d"),
    ])
}

/// The echo worker of bot `demo`, sending to `fake`, on an empty in-memory store.
#[allow(
    dead_code,
    reason = "the logs test builds its worker with a token of its own"
)]
pub fn demo_worker(fake: &FakeTelegram) -> Worker {
    let store = Arc::new(MemoryStore::new());
    echo_worker(
        &demo_vars(fake.token()),
        fake,
        Duration::from_secs(5),
        store,
    )
}

/// The webhook of bot `demo` on in-memory adapters, storing into `store` and checking `secret`,
/// with `extra` settings on top of the made-up table and queues.
pub fn memory_webhook(
    store: &Arc<MemoryStore>,
    secret: &str,
    extra: &[(&str, &str)],
) -> tgq_core::ingest::Webhooks {
    use tgq_core::ingest::{Ingest, WebhookPorts};
    let mut vars = vec![
        ("TGQ_BOT_ID", "demo"),
        ("TGQ_WEBHOOK_SECRET", secret),
        ("TGQ_TABLE", "t"),
        ("TGQ_QUEUE_URL", "q"),
        ("TGQ_DLQ_URL", "d"),
    ];
    vars.extend_from_slice(extra);
    let config = tgq_aws::webhook::WebhookConfig::from_vars(&Vars::from_pairs(vars)).unwrap();
    config.webhooks(
        WebhookPorts {
            ingest: Ingest::PutThenSend {
                store: store.clone(),
                queue: Arc::new(tgq_memory::MemoryQueue::new(Arc::new(SystemClock))),
            },
            dead: Arc::new(MemoryDeadLetters::new()),
            clock: Arc::new(SystemClock),
        },
        Some(SecretString::from(secret.to_owned())),
        None,
    )
}
