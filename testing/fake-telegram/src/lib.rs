//! A fake Telegram Bot API server for tests.
//!
//! [`FakeTelegram::start`] serves on `127.0.0.1` at a free port and answers
//! `POST {url}/bot{token}/{method}` as api.telegram.org does: the same envelope, the same status
//! codes, the same error descriptions. It serves the methods tgq, the example bots and the guides
//! call (sends, edits, answers to button presses and inline queries, `getChat`, `setMyCommands`,
//! files, updates, webhooks, and payments in Stars: invoices, pre-checkout answers within
//! [`PRE_CHECKOUT_DEADLINE`], refunds and `getStarTransactions`); any other is answered 404, as
//! Telegram answers a method it does not have. [`FakeTelegram::checkout`] plays a user pressing Pay.
//!
//! A test points its client at [`FakeTelegram::url`], queues faults with [`FakeTelegram::inject`],
//! feeds `getUpdates` with [`FakeTelegram::push_update`], and afterwards reads what was sent from
//! [`FakeTelegram::calls`] and [`FakeTelegram::delivered`].
//!
//! ```no_run
//! # async fn example() -> std::io::Result<()> {
//! use tgq_fake_telegram::{Fault, FakeTelegram, Scope, Times};
//!
//! let telegram = FakeTelegram::start().await?;
//! telegram.inject(Fault::RetryAfter(5), Scope::Chat(42), Times::Once);
//! // … run the code under test against telegram.url() …
//! assert!(telegram.delivered_to(42).len() <= 1);
//! # Ok(())
//! # }
//! ```

mod chats;
mod checks;
mod config;
mod envelope;
mod fault;
mod limiter;
mod objects;
mod params;
mod payments;
mod server;
mod state;
mod updates;
mod watch;

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use config::{FakeClock, FakeConfig, Limits, DEFAULT_TOKEN};
pub use fault::{Fault, Scope, Times};
pub use payments::{Charge, Period, PRE_CHECKOUT_DEADLINE, STARS, SUBSCRIPTION_PERIOD};
pub use state::RecordedCall;
pub use watch::{Violations, IN_FLIGHT_GRACE};

use server::Shared;

/// How long [`FakeTelegram::shutdown`] lets answers in flight finish before cutting them off.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// A running fake Telegram server. Clones share the server; it stops when the last clone is
/// dropped or when [`FakeTelegram::shutdown`] is called.
#[derive(Clone)]
pub struct FakeTelegram {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    addr: SocketAddr,
    server: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shared.close();
    }
}

impl fmt::Debug for FakeTelegram {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("FakeTelegram")
            .field("addr", &self.inner.addr)
            .finish_non_exhaustive()
    }
}

impl FakeTelegram {
    /// Starts a server with [`FakeConfig::default`]: token [`DEFAULT_TOKEN`], no rate limits.
    pub async fn start() -> std::io::Result<FakeTelegram> {
        Self::start_with(FakeConfig::default()).await
    }

    /// Starts a server on `127.0.0.1` at a free port with the given token and limits.
    pub async fn start_with(config: FakeConfig) -> std::io::Result<FakeTelegram> {
        Self::start_at(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), config).await
    }

    /// Starts a server listening on `addr` (port 0: a free one), for `tgq fake-telegram`: a fake a
    /// person points a bot at by hand, or a Lambda in LocalStack's containers reaches.
    pub async fn start_at(addr: SocketAddr, config: FakeConfig) -> std::io::Result<FakeTelegram> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::new(&config));
        let server = tokio::spawn(server::serve(listener, Arc::clone(&shared)));
        Ok(FakeTelegram {
            inner: Arc::new(Inner {
                shared,
                addr,
                server: Mutex::new(Some(server)),
            }),
        })
    }

    /// The base URL to use in place of `https://api.telegram.org`, without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.inner.addr)
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// The token the server accepts; calls with any other token are answered 401.
    pub fn token(&self) -> &str {
        &self.inner.shared.token
    }

    /// Accepts calls with `token` as well as [`FakeTelegram::token`]: one fake for several bots,
    /// each call recorded with its token ([`RecordedCall::token`]). The bots share the fake's
    /// chats, faults and rate limits.
    pub fn accept_token(&self, token: &str) {
        self.inner.shared.state().accept_token(token);
    }

    /// Every call in arrival order, refused ones included.
    pub fn calls(&self) -> Vec<RecordedCall> {
        self.inner.shared.state().calls().to_vec()
    }

    /// The calls that arrived after call number `seq` (0: all), in arrival order.
    pub fn calls_after(&self, seq: u64) -> Vec<RecordedCall> {
        self.calls_where(|call| call.seq > seq)
    }

    /// The calls answered `ok: true`, in arrival order.
    pub fn delivered(&self) -> Vec<RecordedCall> {
        self.calls_where(RecordedCall::is_delivered)
    }

    /// The calls for `chat_id` answered `ok: true`, in arrival order.
    pub fn delivered_to(&self, chat_id: i64) -> Vec<RecordedCall> {
        self.calls_where(|call| call.is_delivered() && call.chat_id == Some(chat_id))
    }

    fn calls_where(&self, wanted: impl Fn(&RecordedCall) -> bool) -> Vec<RecordedCall> {
        let state = self.inner.shared.state();
        state
            .calls()
            .iter()
            .filter(|call| wanted(call))
            .cloned()
            .collect()
    }

    /// What a drill counts beyond the calls: sends earlier than a `retry_after` allowed, sends over
    /// the rate limits, and calls whose answer never reached the client.
    pub fn violations(&self) -> Violations {
        self.inner.shared.state().violations()
    }

    /// Queues a fault. A fault scoped to a call's chat is used before a global one; each use
    /// counts against `times`. `getMe`, `getUpdates`, `setMyCommands` and the webhook methods
    /// never see faults.
    pub fn inject(&self, fault: Fault, scope: Scope, times: Times) {
        self.inner.shared.state().faults.inject(fault, scope, times);
    }

    /// Drops every queued fault.
    pub fn clear_faults(&self) {
        self.inner.shared.state().faults.clear();
    }

    /// Keeps `bytes` as file `file_id`, as if a user had sent it: `getFile` then names it, and the
    /// file server serves it.
    pub fn put_file(&self, file_id: &str, bytes: impl Into<bytes::Bytes>) {
        self.inner
            .shared
            .state()
            .files
            .insert(file_id.to_owned(), bytes.into());
    }

    /// A user presses Pay on an invoice of `stars` Stars with `payload`: the fake queues the
    /// `pre_checkout_query` Telegram sends the bot and returns its id. An `ok` answer within
    /// [`PRE_CHECKOUT_DEADLINE`] charges the user ([`FakeTelegram::charges`]) and queues the
    /// `successful_payment` message; a later answer is refused and charges nobody.
    pub fn checkout(&self, user: i64, payload: &str, stars: u32) -> String {
        let at = self.inner.shared.now();
        let id = {
            let mut state = self.inner.shared.state();
            state.checkout(user, payload, stars, at)
        };
        self.inner.shared.wake_pollers();
        id
    }

    /// Telegram renews the subscription whose period charge `charge` paid: a new charge for the
    /// next period, made with no pre-checkout query, and its `successful_payment` message queued
    /// (`is_first_recurring` false). Returns the new charge's id; `None` when `charge` is not a
    /// subscription's (its invoice a `createInvoiceLink` with `subscription_period`).
    pub fn renew(&self, charge: &str) -> Option<String> {
        let renewed = self.inner.shared.state().renew(charge);
        self.inner.shared.wake_pollers();
        renewed
    }

    /// Every charge the fake made, in order, refunded or not.
    pub fn charges(&self) -> Vec<Charge> {
        self.inner.shared.state().charges().to_vec()
    }

    /// Queues an update for `getUpdates`, numbering it when it has no `update_id`, and wakes any
    /// long poll waiting for one.
    pub fn push_update(&self, update: serde_json::Value) {
        self.push_updates([update]);
    }

    /// Queues several updates at once, as [`FakeTelegram::push_update`] does one: a waiting long
    /// poll is woken only once all are queued, so it answers with all of them (up to its limit).
    pub fn push_updates(&self, updates: impl IntoIterator<Item = serde_json::Value>) {
        {
            let mut state = self.inner.shared.state();
            for update in updates {
                state.updates.push(update);
            }
        }
        self.inner.shared.wake_pollers();
    }

    /// Updates pushed and not yet confirmed by a `getUpdates` offset.
    pub fn pending_updates(&self) -> usize {
        self.inner.shared.state().updates.len()
    }

    /// The `update_id` of every update the `getUpdates` answers carried so far, in answer order,
    /// an update answered twice (its offset never confirmed) appearing twice.
    pub fn handed_out(&self) -> Vec<i64> {
        self.inner.shared.state().updates.handed_out().to_vec()
    }

    /// How many `getUpdates` long polls are waiting for an update right now.
    pub fn waiting_polls(&self) -> usize {
        self.inner.shared.waiting_polls()
    }

    /// How many `getUpdates` calls began while another was being answered (long polls included,
    /// until answered or abandoned by their client): the count of two pollers polling at once.
    pub fn overlapping_polls(&self) -> u64 {
        self.inner.shared.overlapping_polls()
    }

    /// Moves the fake's clock forward (see [`FakeClock`]): sends count against the rate limits as
    /// if `by` had passed.
    pub fn advance_clock(&self, by: Duration) {
        self.inner.shared.advance_clock(by);
    }

    /// Sets or removes the webhook, as `setWebhook`/`deleteWebhook` would; while one is set,
    /// `getUpdates` is answered 409 Conflict.
    pub fn set_webhook_url(&self, url: Option<String>) {
        self.inner.shared.state().webhook_url = url;
    }

    /// The webhook URL the bot has now (`setWebhook` sets it, `deleteWebhook` clears it).
    pub fn webhook_url(&self) -> Option<String> {
        self.inner.shared.state().webhook_url.clone()
    }

    /// Stops the server for every clone: it refuses new connections, and answers held back by
    /// timeouts or long polls are released at once.
    pub async fn shutdown(self) {
        self.inner.shared.close();
        let server = self
            .inner
            .server
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(mut server) = server else {
            return;
        };
        if tokio::time::timeout(SHUTDOWN_GRACE, &mut server)
            .await
            .is_err()
        {
            server.abort();
        }
    }
}
