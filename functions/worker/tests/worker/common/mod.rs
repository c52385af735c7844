//! The worker the function tests drive: the function's own configuration read from `vars`, the
//! in-memory store and dead letters, and the real HTTP Bot API client pointed at a fake Bot API.

use std::sync::Arc;
use std::time::Duration;

use secrecy::SecretString;
use tgq_core::bots::OneBot;
use tgq_core::clock::SystemClock;
use tgq_core::config::Vars;
use tgq_core::echo::EchoBot;
use tgq_core::worker::Worker;
use tgq_fake_telegram::FakeTelegram;
use tgq_memory::{MemoryDeadLetters, MemoryStore};
use tgq_telegram::HttpBotApi;
use tgq_worker::WorkerConfig;

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
