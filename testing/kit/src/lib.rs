//! The test kit for bots on tgq: run your bot through tgq's real worker, on in-memory adapters, one
//! update at a time, as Telegram would deliver them.
//!
//! ```
//! use tgq_test::TestBot;
//! # use tgq::prelude::*;
//! # struct Echo;
//! # #[async_trait]
//! # impl Handler for Echo {
//! #     async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
//! #         if let UpdateKind::Message(m) = &update.kind {
//! #             ctx.reply(m, m.text().unwrap_or_default()).await?;
//! #         }
//! #         Ok(())
//! #     }
//! # }
//! # fn handlers() -> HandlerRegistry { HandlerRegistry::new().with("mine", |_| async { Ok(Echo) }) }
//! # tokio_test(async {
//! let mut bot = TestBot::new(handlers()).await;
//! let ran = bot.text(42, "hello").await;
//! assert!(ran.is_done());
//! assert_eq!(ran.texts(), ["hello"]);
//! # });
//! # fn tokio_test(f: impl std::future::Future<Output = ()>) {
//! #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
//! # }
//! ```
//!
//! - **Feed** updates: [`TestBot::text`] (commands are texts), [`TestBot::text_in_group`],
//!   [`TestBot::press`] (the button labelled so, on the newest message that has it),
//!   [`TestBot::press_data`], or any Bot API JSON with [`TestBot::update`].
//! - **Read** what the bot sent: each run's [`Ran::sent`], everything with [`TestBot::sent`], each
//!   [`Sent`] with its method, chat, text and button labels.
//! - **Fail** a call by method, chat or position ([`TestBot::fail`] with a [`Call`] and a
//!   [`Failure`]); the update then runs again with [`TestBot::again`], as the queue redelivers it.
//! - **Crash** the next run after a number of its actions ([`TestBot::crash_after`]), then run it
//!   again; the kit shows what a killed process would have left (see [`crash`]).
//! - **State**: read and set a chat's state by chat id ([`TestBot::state`], [`TestBot::set_state`]).
//! - **Time**: [`TestBot::advance`] moves the kit's clock and runs the timers (and flow
//!   timeouts) that fall due, in their chats, as the scheduler would deliver them;
//!   [`TestBot::timers`] lists a chat's pending ones.
//! - **Pay**: [`TestBot::pay`] runs a payment in Stars: the pre-checkout query, then, when the
//!   bot answered it ok, the `successful_payment` under a new charge id. [`TestBot::subscribe`]
//!   does the same for a subscription, and [`TestBot::renew`] charges its next period.
//! - **Files**: each [`Sent`] lists what it uploaded (name, size, hash); [`TestBot::put_file`]
//!   gives the bot a file a user sent, for `ctx.download`.
//!
//! The worker is tgq's own, with the settings a deployment has by default: a failed update is
//! retried (the kit's clock moves past its backoff on [`TestBot::again`]), a refused one is
//! dead-lettered ([`Outcome::DeadLettered`]), and nothing is paced.

mod api;
pub mod crash;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use serde_json::{json, Value};
use tgq::{BotConfig, ChatState, Handler, HandlerRegistry};
use tgq_core::bots::OneBot;
use tgq_core::broadcast::{BroadcastJob, BroadcastRunner, BroadcastStore as _, JobState};
use tgq_core::clock::{Clock, ManualClock};
use tgq_core::config::{HandlerChoice, Vars};
use tgq_core::envelope::Envelope;
use tgq_core::ids::{BotId, GroupKey, MessageGroupId, StateKey};
use tgq_core::ports::{QueueRecord, ReceiptHandle};
use tgq_core::record::Timestamp;
use tgq_core::state::StoredState;
use tgq_core::timer::ChatTime;
use tgq_core::worker::{RecordOutcome, Worker, WorkerPorts, WorkerSettings};
use tgq_memory::{worker_ports, MemoryBroadcasts, MemoryDeadLetters, MemoryStore, MemoryTimers};

use api::KitApi;
pub use api::{Call, Failure, Sent};
use crash::{CrashSwitch, CrashingLedger};

/// The bot id the kit runs bots under.
pub const BOT_ID: &str = "test";

/// How long the kit's worker may take over one run: the lease it holds while it runs.
const RUN_TIME: Duration = Duration::from_secs(60);

/// A bot behind tgq's worker, on in-memory adapters, with a clock that moves only when the kit
/// moves it.
pub struct TestBot {
    worker: Worker,
    bots: Arc<OneBot>,
    bot_id: BotId,
    api: Arc<KitApi>,
    store: Arc<MemoryStore>,
    dead: Arc<MemoryDeadLetters>,
    timers: Arc<MemoryTimers>,
    broadcasts: Arc<MemoryBroadcasts>,
    clock: ManualClock,
    crash: Arc<CrashSwitch>,
    next_update_id: i64,
    next_message_id: i64,
    /// How often each update was delivered.
    deliveries: HashMap<i64, u32>,
    /// The last update delivered, and how long the queue would hide it before the next delivery.
    last: Option<(Value, Duration)>,
}

/// How a run of one update ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The handler finished: the update is done, its state written.
    Done,
    /// The handler met a recipient who blocked the bot or left: settled, not retried.
    RecipientGone,
    /// The update had finished before: it did not run again.
    AlreadyDone,
    /// The run failed and the update is back on the queue; [`TestBot::again`] runs it again.
    Retrying(String),
    /// The run failed in a way retrying cannot fix, or too often: the update went to the
    /// dead-letter queue.
    DeadLettered(String),
    /// The run died where [`TestBot::crash_after`] said; [`TestBot::again`] runs it again.
    Crashed,
}

/// One run of one update.
#[derive(Clone, Debug)]
pub struct Ran {
    /// How it ended.
    pub outcome: Outcome,
    /// The calls Telegram took during the run, in order.
    pub sent: Vec<Sent>,
}

impl Ran {
    /// Whether the handler finished.
    pub fn is_done(&self) -> bool {
        self.outcome == Outcome::Done
    }

    /// The texts of the messages this run sent or edited.
    pub fn texts(&self) -> Vec<&str> {
        self.sent
            .iter()
            .filter(|s| s.method.starts_with("send") || s.is_edit())
            .filter_map(|s| s.text.as_deref())
            .collect()
    }

    /// The calls of `method` this run made.
    pub fn calls(&self, method: &str) -> Vec<&Sent> {
        self.sent.iter().filter(|s| s.method == method).collect()
    }

    /// The button labels of the last message this run sent or edited that has buttons.
    pub fn buttons(&self) -> Vec<Vec<&str>> {
        self.sent
            .iter()
            .rev()
            .find(|s| !s.buttons.is_empty())
            .map(|s| {
                s.buttons
                    .iter()
                    .map(|row| row.iter().map(String::as_str).collect())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// A user's payment in Stars, run by [`TestBot::pay`].
#[derive(Clone, Debug)]
pub struct Payment {
    /// The run of the pre-checkout query the user's Pay button sent.
    pub checkout: Ran,
    /// The `telegram_payment_charge_id` of the charge, when the bot answered the query ok and the
    /// user was charged.
    pub charge: Option<String>,
    /// The run of the `successful_payment` message that followed the charge.
    pub paid: Option<Ran>,
    /// For a subscription's payment ([`TestBot::subscribe`]), when its latest paid period ends
    /// (Unix seconds): the first's, or the latest [`TestBot::renew`]'s.
    pub until: Option<i64>,
    /// The user, the payload and the Stars, which a renewal charges again.
    bought: (i64, String, u32),
}

/// A subscription's renewal, run by [`TestBot::renew`]: Telegram charged the next period by
/// itself, with no pre-checkout query.
#[derive(Clone, Debug)]
pub struct Renewal {
    /// The renewal's own `telegram_payment_charge_id`.
    pub charge: String,
    /// When the period it paid ends (Unix seconds).
    pub until: i64,
    /// The run of its `successful_payment` message.
    pub paid: Ran,
}

/// The subscription period Telegram takes, 30 days, in seconds.
pub const SUBSCRIPTION_PERIOD: u32 = 2_592_000;

impl TestBot {
    /// The bot `registry` runs by default (its first, the one `TGQ_HANDLER=bot` picks), built with
    /// no settings.
    pub async fn new(registry: HandlerRegistry) -> TestBot {
        TestBot::with_vars(registry, &[]).await
    }

    /// As [`TestBot::new`], built with these settings (what the bot reads from `config.vars`).
    pub async fn with_vars(registry: HandlerRegistry, vars: &[(&str, &str)]) -> TestBot {
        let name = registry.name_of(HandlerChoice::Bot).to_owned();
        TestBot::named(registry, &name, vars).await
    }

    /// The bot `registry` names `name`, built with these settings. Panics, naming the cause, when
    /// it cannot be built.
    pub async fn named(registry: HandlerRegistry, name: &str, vars: &[(&str, &str)]) -> TestBot {
        let api = Arc::new(KitApi::default());
        let bot_id = BotId::new(BOT_ID).expect("a valid bot id");
        let config = BotConfig {
            bot_id: bot_id.clone(),
            vars: Vars::from_pairs(vars.iter().copied()),
            api: api.clone(),
        };
        let handler = match registry.build(name, config).await {
            Ok(handler) => handler,
            Err(e) => panic!("{e}: {:?}", std::error::Error::source(&e)),
        };
        TestBot::around(bot_id, handler, api)
    }

    /// A handler built by the test itself.
    pub fn handler(handler: impl Handler + 'static) -> TestBot {
        TestBot::around(
            BotId::new(BOT_ID).expect("a valid bot id"),
            Arc::new(handler),
            Arc::new(KitApi::default()),
        )
    }

    fn around(bot_id: BotId, handler: Arc<dyn Handler>, api: Arc<KitApi>) -> TestBot {
        let store = Arc::new(MemoryStore::new());
        let dead = Arc::new(MemoryDeadLetters::new());
        let clock = ManualClock::at(Timestamp(1_800_000_000_000));
        let crash = Arc::new(CrashSwitch::default());
        let timers = Arc::new(MemoryTimers::new());
        let broadcasts = Arc::new(MemoryBroadcasts::over(store.clone()));
        let bots = Arc::new(OneBot::new(api.clone(), handler));
        TestBot {
            worker: kit_worker(
                (&store, &dead, &broadcasts),
                &clock,
                &crash,
                bots.clone(),
                Some(timers.clone()),
            ),
            bots,
            bot_id,
            api,
            store,
            dead,
            timers,
            broadcasts,
            clock,
            crash,
            next_update_id: 1,
            next_message_id: 1,
            deliveries: HashMap::new(),
            last: None,
        }
    }

    /// The bot on a deployment without timers: `ctx.schedule` is refused with
    /// `TimerError::Unavailable`, as on a stack whose worker has no timer queue.
    pub fn without_timers(mut self) -> TestBot {
        self.worker = kit_worker(
            (&self.store, &self.dead, &self.broadcasts),
            &self.clock,
            &self.crash,
            self.bots.clone(),
            None,
        );
        self
    }

    /// A user sends `text` in a private chat (the chat's id is the user's).
    pub async fn text(&mut self, chat: i64, text: &str) -> Ran {
        let chat_json = json!({"id": chat, "type": "private", "first_name": "Ada"});
        self.message(chat_json, chat, text).await
    }

    /// User `from` sends `text` in the group `group` (a negative id, as Telegram's are).
    pub async fn text_in_group(&mut self, group: i64, from: i64, text: &str) -> Ran {
        let chat_json = json!({"id": group, "type": "supergroup", "title": "Group"});
        self.message(chat_json, from, text).await
    }

    /// A user presses the button labelled `label` on the newest message the bot sent to `chat`
    /// with such a button. Panics, listing the labels there are, when there is none.
    pub async fn press(&mut self, chat: i64, label: &str) -> Ran {
        let sent = self.api.sent();
        let Some((message_id, data)) = sent
            .iter()
            .rev()
            .filter(|s| s.chat == Some(chat))
            .find_map(|s| Some((s.message_id?, s.button_data(label)?.to_owned())))
        else {
            let labels: Vec<&String> = sent
                .iter()
                .filter(|s| s.chat == Some(chat))
                .flat_map(|s| s.buttons.iter().flatten())
                .collect();
            panic!("no message to chat {chat} has a button {label:?}; its buttons: {labels:?}");
        };
        self.press_raw(chat, message_id, &data).await
    }

    /// A user presses a button carrying `data` (as a [`tgq::Keyboard`] writes it) on message
    /// `message_id` of `chat`.
    pub async fn press_data(&mut self, chat: i64, message_id: i64, data: &impl Serialize) -> Ran {
        let data = serde_json::to_string(data).expect("button data serializes");
        self.press_raw(chat, message_id, &data).await
    }

    /// User `user` pays an invoice of `stars` Telegram Stars carrying `payload`, as Telegram runs
    /// a payment: the bot gets the `pre_checkout_query`; if its run answered it ok
    /// (`answerPreCheckoutQuery`), the user is charged under a new charge id and the bot gets the
    /// `successful_payment` message in the user's private chat. Deliver that message again with
    /// [`TestBot::again`] (a redelivery), or with [`TestBot::update`] and a new `update_id`.
    pub async fn pay(&mut self, user: i64, payload: &str, stars: u32) -> Payment {
        self.checkout(user, payload, stars, false).await
    }

    /// As [`TestBot::pay`], for a subscription (an invoice link with `subscription_period`): the
    /// payment carries the end of its first period ([`SUBSCRIPTION_PERIOD`] after the kit's clock)
    /// as `subscription_expiration_date`, with `is_recurring` and `is_first_recurring`. Each later
    /// period is [`TestBot::renew`].
    pub async fn subscribe(&mut self, user: i64, payload: &str, stars: u32) -> Payment {
        self.checkout(user, payload, stars, true).await
    }

    /// Telegram renews the subscription `payment` started: with no pre-checkout query, a new
    /// charge for the next period and its `successful_payment` message (`is_first_recurring`
    /// false). `payment.until` moves on to the new period's end, so the next call renews the
    /// period after. Panics when `payment` is not a subscription's paid payment.
    pub async fn renew(&mut self, payment: &mut Payment) -> Renewal {
        let until = payment
            .until
            .filter(|_| payment.charge.is_some())
            .expect("renew takes a paid subscription's payment (TestBot::subscribe)")
            + i64::from(SUBSCRIPTION_PERIOD);
        payment.until = Some(until);
        let (user, payload, stars) = payment.bought.clone();
        let charge = format!("kit-charge-{}", self.next_update_id);
        let period = Some((until, false));
        let paid = self
            .paid_message(user, &payload, stars, &charge, period)
            .await;
        Renewal {
            charge,
            until,
            paid,
        }
    }

    /// The pre-checkout query of a payment, then, if the bot answered it ok, the payment.
    async fn checkout(
        &mut self,
        user: i64,
        payload: &str,
        stars: u32,
        subscription: bool,
    ) -> Payment {
        let query = format!("checkout-{}", self.next_update_id);
        let checkout = self
            .update(json!({
                "pre_checkout_query": {
                    "id": query, "currency": "XTR", "total_amount": stars,
                    "invoice_payload": payload,
                    "from": {"id": user, "is_bot": false, "first_name": "Ada"},
                }
            }))
            .await;
        let answered_ok = checkout
            .calls("answerPreCheckoutQuery")
            .iter()
            .any(|answer| {
                answer.params["pre_checkout_query_id"] == query.as_str()
                    && answer.params["ok"] == true
            });
        let bought = (user, payload.to_owned(), stars);
        if !answered_ok {
            return Payment {
                checkout,
                charge: None,
                paid: None,
                until: None,
                bought,
            };
        }
        let start = self.clock.now().0 as i64 / 1000;
        let until = subscription.then(|| start + i64::from(SUBSCRIPTION_PERIOD));
        let charge = format!("kit-charge-{}", self.next_update_id);
        let period = until.map(|until| (until, true));
        let paid = self
            .paid_message(user, payload, stars, &charge, period)
            .await;
        Payment {
            checkout,
            charge: Some(charge),
            paid: Some(paid),
            until,
            bought,
        }
    }

    /// The `successful_payment` message of `charge` in `user`'s private chat; a subscription's
    /// carries its period's end and whether it is the first.
    async fn paid_message(
        &mut self,
        user: i64,
        payload: &str,
        stars: u32,
        charge: &str,
        period: Option<(i64, bool)>,
    ) -> Ran {
        let message_id = self.next_message_id;
        self.next_message_id += 1;
        let mut payment = json!({
            "currency": "XTR", "total_amount": stars, "invoice_payload": payload,
            "telegram_payment_charge_id": charge, "provider_payment_charge_id": "",
        });
        if let Some((until, first)) = period {
            payment["subscription_expiration_date"] = until.into();
            payment["is_recurring"] = true.into();
            payment["is_first_recurring"] = first.into();
        }
        self.update(json!({
            "message": {
                "message_id": message_id, "date": 1_800_000_000,
                "chat": {"id": user, "type": "private", "first_name": "Ada"},
                "from": {"id": user, "is_bot": false, "first_name": "Ada"},
                "successful_payment": payment,
            }
        }))
        .await
    }

    /// Delivers any update, as Bot API JSON (a fixture, say); one without an `update_id` gets the
    /// next.
    pub async fn update(&mut self, mut update: Value) -> Ran {
        let id = match update["update_id"].as_i64() {
            Some(id) => id,
            None => {
                let id = self.next_update_id;
                update["update_id"] = id.into();
                id
            }
        };
        self.next_update_id = self.next_update_id.max(id + 1);
        self.deliver(update).await
    }

    /// Delivers the last update again, once the queue would show it again: after a failure, a
    /// crash or a refusal, as SQS redelivers it.
    pub async fn again(&mut self) -> Ran {
        let (update, hidden) = self.last.clone().expect("no update was delivered yet");
        self.clock.advance(hidden);
        self.deliver(update).await
    }

    /// Moves the kit's clock on by `by` and runs every timer that is then due, earliest first,
    /// each in its chat, as the scheduler delivers them: a cancelled or replaced timer arrives and
    /// is acknowledged without running, as on a deployment. Returns the runs.
    pub async fn advance(&mut self, by: Duration) -> Vec<Ran> {
        self.clock.advance(by);
        let mut runs = Vec::new();
        // A timer a run schedules already due (a time in the past) runs in the same call.
        loop {
            let due = self.timers.take_due(self.clock.now());
            if due.is_empty() {
                return runs;
            }
            for timer in due {
                let update: Value =
                    serde_json::from_slice(&timer.body()).expect("a timer's body is JSON");
                runs.push(self.deliver(update).await);
            }
        }
    }

    /// The chat's pending timers, by key, with when each is due, as the last finished update left
    /// them.
    pub fn timers(&self, chat: i64) -> Vec<(String, Timestamp)> {
        let stored = self.store.state(&self.state_key(chat));
        let time = ChatTime::decode(stored.as_ref().and_then(|s| s.time.as_deref()));
        time.timers
            .into_iter()
            .map(|(key, pending)| (key, Timestamp(pending.due)))
            .collect()
    }

    /// The broadcasts the bot's handler started (`ctx.broadcast`), the oldest first.
    pub async fn broadcasts(&self) -> Vec<BroadcastJob> {
        let mut jobs = self.broadcasts.jobs().await.expect("memory answers");
        jobs.reverse();
        jobs
    }

    /// Sends every running broadcast to its recipients through the kit's Telegram, as `tgq local`
    /// would, unpaced: each recipient's message shows in [`TestBot::sent_to`], and a call failed
    /// with [`TestBot::fail`] counts as Telegram's answer (a blocked user is counted gone). Returns
    /// the jobs as they end.
    pub async fn run_broadcasts(&mut self) -> Vec<BroadcastJob> {
        let runner = BroadcastRunner {
            store: self.broadcasts.clone(),
            budget: Arc::new(tgq_core::pacer::Pacer::new(
                tgq_core::pacer::RateLimits::UNLIMITED,
            )),
            bot_rate: None,
            clock: Arc::new(tgq_core::clock::SystemClock),
            retry: tgq_core::policy::RetryPolicy {
                base: Duration::from_millis(1),
                cap: Duration::from_millis(5),
                ..tgq_core::policy::RetryPolicy::default()
            },
        };
        let (_stop, stopped) = tokio::sync::watch::channel(false);
        let mut ended = Vec::new();
        for job in self.broadcasts().await {
            if job.state != JobState::Running {
                continue;
            }
            runner
                .run(&job.id, self.api.clone(), stopped.clone())
                .await
                .expect("memory answers");
            ended.push(
                self.broadcasts
                    .job(&job.id)
                    .await
                    .expect("memory answers")
                    .expect("the job"),
            );
        }
        ended
    }

    /// How many timers the scheduler holds, not yet due: what runs handed over, each id once.
    pub fn timers_held(&self) -> usize {
        self.timers.held().len()
    }

    /// The kit's clock: where [`TestBot::advance`] has moved it.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Makes the next call that meets `call` fail with `failure`.
    pub fn fail(&mut self, call: Call, failure: Failure) -> &mut Self {
        self.api.fail(call, failure);
        self
    }

    /// Makes the next run die once it has made `actions` actions (Bot API calls and steps,
    /// counted in the order the handler makes them), before anything more is written; a run that
    /// makes fewer dies as it ends, before it is settled. See [`crash`].
    pub fn crash_after(&mut self, actions: u32) -> &mut Self {
        self.crash.arm(actions);
        self
    }

    /// Keeps `bytes` as the file `file_id`, as if a user had sent it: the bot's `ctx.download`
    /// reads it back.
    pub fn put_file(&mut self, file_id: &str, bytes: impl Into<Bytes>) -> &mut Self {
        self.api.put_file(file_id, bytes.into());
        self
    }

    /// Every call Telegram took, in order.
    pub fn sent(&self) -> Vec<Sent> {
        self.api.sent()
    }

    /// The calls Telegram took that went to `chat`.
    pub fn sent_to(&self, chat: i64) -> Vec<Sent> {
        self.api
            .sent()
            .into_iter()
            .filter(|s| s.chat == Some(chat))
            .collect()
    }

    /// The chat's state, as the last finished update left it. Panics when it is stored under
    /// another format than `T`'s.
    pub fn state<T: ChatState>(&self, chat: i64) -> Option<T> {
        let stored = self
            .store
            .state(&self.state_key(chat))
            .filter(StoredState::has_value)?;
        assert_eq!(
            stored.format,
            T::FORMAT,
            "chat {chat}'s state is stored as {:?}",
            stored.format
        );
        Some(serde_json::from_str(&stored.json).expect("stored state reads as its type"))
    }

    /// Sets the chat's state, as if an earlier update had left it.
    pub fn set_state<T: ChatState>(&mut self, chat: i64, value: &T) {
        let key = self.state_key(chat);
        let stored = self.store.state(&key);
        let version = stored.as_ref().map_or(0, |s| s.version) + 1;
        self.store.put_state(
            key,
            StoredState {
                format: T::FORMAT.to_owned(),
                json: serde_json::to_string(value).expect("state serializes"),
                version,
                time: stored.and_then(|s| s.time),
            },
        );
    }

    /// How many updates went to the dead-letter queue.
    pub fn dead_letters(&self) -> usize {
        self.dead.letters().len()
    }

    fn state_key(&self, chat: i64) -> StateKey {
        StateKey::new(self.bot_id.clone(), GroupKey::new(chat.to_string()))
    }

    async fn message(&mut self, chat: Value, from: i64, text: &str) -> Ran {
        let message_id = self.next_message_id;
        self.next_message_id += 1;
        let update = json!({
            "message": {
                "message_id": message_id, "date": 1_800_000_000, "text": text, "chat": chat,
                "from": {"id": from, "is_bot": false, "first_name": "Ada"},
                "entities": command_entity(text),
            }
        });
        self.update(update).await
    }

    async fn press_raw(&mut self, chat: i64, message_id: i64, data: &str) -> Ran {
        let chat_json = match chat {
            c if c > 0 => json!({"id": c, "type": "private", "first_name": "Ada"}),
            c => json!({"id": c, "type": "supergroup", "title": "Group"}),
        };
        let query_id = format!("q{}", self.next_update_id);
        let update = json!({
            "callback_query": {
                "id": query_id, "chat_instance": "1", "data": data,
                "from": {"id": chat.abs(), "is_bot": false, "first_name": "Ada"},
                "message": {
                    "message_id": message_id, "date": 1_800_000_000, "chat": chat_json,
                    "from": {"id": 1, "is_bot": true, "first_name": "bot"},
                },
            }
        });
        self.update(update).await
    }

    async fn deliver(&mut self, update: Value) -> Ran {
        let record = self.queue_record(&update);
        let before = self.api.sent_count();
        let deadline = self.clock.now().plus(RUN_TIME);
        let batch = [record];
        let outcome = tokio::select! {
            report = self.worker.process_batch(&batch, deadline) => {
                report.outcomes.into_iter().next().map(|(_, o)| o)
            }
            () = self.crash.fired() => None,
        };
        self.crash.disarm();
        let (outcome, hidden) = match outcome {
            None => (Outcome::Crashed, RUN_TIME + Duration::from_secs(1)),
            Some(outcome) => of(outcome),
        };
        self.last = Some((update, hidden));
        Ran {
            outcome,
            sent: self.api.sent().split_off(before),
        }
    }

    fn queue_record(&mut self, update: &Value) -> QueueRecord {
        let id = update["update_id"].as_i64().unwrap_or_default();
        let body = Bytes::from(update.to_string());
        let group = match Envelope::parse_queued(&body) {
            Ok(envelope) => MessageGroupId::new(&self.bot_id, &envelope.group),
            Err(_) => MessageGroupId::from_raw(format!("{}:poison", self.bot_id)),
        };
        let receive_count = self.deliveries.entry(id).or_default();
        *receive_count += 1;
        QueueRecord {
            message_id: format!("m-{id}"),
            receipt: ReceiptHandle(format!("r-{id}-{receive_count}")),
            body,
            group_id: group,
            receive_count: *receive_count,
            dead_letter: None,
        }
    }
}

/// What a worker's outcome is for a bot author, and how long the queue hides the update before it
/// is delivered again.
fn of(outcome: RecordOutcome) -> (Outcome, Duration) {
    match outcome {
        RecordOutcome::Done(_) => (Outcome::Done, Duration::ZERO),
        RecordOutcome::RecipientGone(_) => (Outcome::RecipientGone, Duration::ZERO),
        RecordOutcome::AlreadyFinal => (Outcome::AlreadyDone, Duration::ZERO),
        RecordOutcome::DeadLettered(reason) => (
            Outcome::DeadLettered(reason.describe().to_owned()),
            Duration::ZERO,
        ),
        RecordOutcome::Retrying(after, class) => (Outcome::Retrying(format!("{class:?}")), after),
        RecordOutcome::Busy(after) | RecordOutcome::StoreUnavailable(after) => {
            (Outcome::Retrying(format!("{outcome:?}")), after)
        }
        other => (Outcome::Retrying(format!("{other:?}")), Duration::ZERO),
    }
}

/// The `bot_command` entity Telegram marks a leading command with.
fn command_entity(text: &str) -> Value {
    if !text.starts_with('/') {
        return json!([]);
    }
    let length = text
        .split_whitespace()
        .next()
        .map_or(0, |word| word.encode_utf16().count());
    json!([{"type": "bot_command", "offset": 0, "length": length}])
}

/// The in-memory worker on the kit's store and clock, its ledger dying where the crash switch says,
/// with `timers` or none.
fn kit_worker(
    (store, dead, broadcasts): (
        &Arc<MemoryStore>,
        &Arc<MemoryDeadLetters>,
        &Arc<MemoryBroadcasts>,
    ),
    clock: &ManualClock,
    crash: &Arc<CrashSwitch>,
    bots: Arc<OneBot>,
    timers: Option<Arc<MemoryTimers>>,
) -> Worker {
    let ports = WorkerPorts {
        ledger: Arc::new(CrashingLedger {
            inner: store.clone(),
            switch: crash.clone(),
        }),
        timers: timers.map(|timers| timers as _),
        broadcasts: Some(broadcasts.clone()),
        ..worker_ports(store, dead.clone(), Arc::new(clock.clone()))
    };
    Worker::new(WorkerSettings::default(), ports, bots)
}
