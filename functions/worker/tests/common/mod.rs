//! The worker the function tests drive: the function's own configuration read from `vars`, the
//! in-memory store and dead letters, and the real HTTP Bot API client pointed at a fake Bot API.

use std::sync::Arc;
use std::time::Duration;

use secrecy::SecretString;
use tgq_core::bots::OneBot;
use tgq_core::clock::SystemClock;
use tgq_core::config::Vars;
use tgq_core::echo::EchoBot;
use tgq_core::pacer::{Pacer, RateLimits};
use tgq_core::worker::{Worker, WorkerPorts};
use tgq_fake_telegram::FakeTelegram;
use tgq_memory::{MemoryDeadLetters, MemoryStore, RecordingVisibility};
use tgq_telegram::HttpBotApi;
use tgq_worker::WorkerConfig;

/// The echo bot's worker, configured as the function configures it from `vars` (which name
/// `fake`'s token), sending to `fake` with `timeout` per call, unpaced.
pub fn echo_worker(vars: &Vars, fake: &FakeTelegram, timeout: Duration) -> Worker {
    let config = WorkerConfig::from_vars(vars).unwrap();
    let store = Arc::new(MemoryStore::new());
    let api = HttpBotApi::new(
        &fake.url(),
        SecretString::from(fake.token().to_owned()),
        timeout,
    )
    .unwrap();
    Worker::new(
        config.settings,
        WorkerPorts {
            ledger: store.clone(),
            visibility: Arc::new(RecordingVisibility::new()),
            dead: Arc::new(MemoryDeadLetters::new()),
            pacer: Arc::new(Pacer::new(RateLimits::UNLIMITED)),
            clock: Arc::new(SystemClock),
            reset: store.clone(),
            audit: store,
        },
        Arc::new(OneBot::new(Arc::new(api), Arc::new(EchoBot))),
    )
}
