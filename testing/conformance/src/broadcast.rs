//! The broadcast store's conformance bodies (docs/design/broadcast-runs.md): the same tests,
//! through the [`BroadcastRunner`], for every store of [`BroadcastStore`]. An adapter crate
//! instantiates them with [`broadcast_conformance_tests!`] and a factory giving an empty store.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};
use tgq_core::broadcast::chain::{ChainNext, ChainStep, StepClaim};
use tgq_core::broadcast::{
    start_expanding, Audience, BroadcastId, BroadcastRunner, BroadcastSpec, BroadcastStore, Change,
    Changed, Created, Indexes, JobState, Outcome, Recipient, RecipientState, Retried, RunEnd,
    StateFilter, Waits, CHUNK, EVERY, MAX_ATTEMPTS, MAX_LISTED, REFUSALS_BEFORE_PAUSE,
};
use tgq_core::clock::{Clock, SystemClock};
use tgq_core::ids::BotId;
use tgq_core::pacer::{Pacer, RateLimits};
use tgq_core::policy::RetryPolicy;
use tgq_core::record::Timestamp;
use tgq_core::telegram::{ApiCall, BotApi, CallError, TelegramError};
use tgq_core::PortError;
use tokio::sync::{watch, Mutex};

/// Keeps `json`, of `format`, as the state of `chat` of `bot`.
pub type PutState = Box<dyn Fn(&BotId, i64, &str, Value) + Send + Sync>;

/// A broadcast store for one test, and a way to give it a chat's state.
pub struct BroadcastsUnderTest {
    /// The store.
    pub store: Arc<dyn BroadcastStore>,
    /// Keeps `json`, of `format`, as the state of `chat` of `bot`.
    pub put_state: PutState,
}

/// Expands to one `#[tokio::test]` per broadcast body, each given what `$make` (an async
/// expression giving a [`BroadcastsUnderTest`]) builds.
#[macro_export]
macro_rules! broadcast_conformance_tests {
    ($make:expr) => {
        $crate::broadcast_conformance_tests!(@each $make;
            every_recipient_gets_the_message_once_and_the_job_is_done,
            recipients_who_left_are_counted_gone_and_never_tried_again,
            a_passing_failure_is_tried_again_and_a_lasting_one_ends_in_the_job_s_dead_letters,
            an_outage_of_telegram_s_writes_nobody_off_and_the_job_goes_on_when_it_answers,
            a_refusal_of_the_message_or_the_bot_mid_job_pauses_it_and_fails_nobody,
            refusals_about_one_chat_end_that_recipient_and_never_pause_the_job,
            a_group_that_became_a_supergroup_gets_the_message_there_once,
            a_retry_sends_again_to_whom_it_failed_and_the_uncertain_only_when_asked,
            a_message_refused_by_the_first_recipients_pauses_the_job_with_telegram_s_words,
            a_send_begun_by_a_process_that_died_is_uncertain_and_never_sent_again,
            a_paused_job_sends_nothing_until_resumed_and_a_cancelled_one_never,
            a_flood_wait_holds_the_broadcast_without_spending_an_attempt,
            a_start_repeated_by_a_retried_run_finds_the_job_it_started,
            an_audience_is_the_chats_whose_state_the_filter_takes,
            a_span_hands_out_waits_on_and_abandons_only_its_own_recipients,
            a_job_run_as_a_chain_of_steps_reaches_everyone_once_and_comes_back_for_its_retries,
            a_step_begins_no_chunk_it_has_no_time_to_finish,
            a_job_runs_as_one_chain_whatever_is_queued_again,
            the_runners_look_only_at_jobs_not_ended,
            a_bot_s_later_broadcast_waits_on_a_stack_until_its_older_one_ends,
            a_batch_whose_sends_all_ended_is_not_read_again,
            a_begin_whose_answer_was_lost_leaves_its_recipient_uncertain,
            a_job_a_handler_starts_writes_its_audience_in_its_own_runs,
            a_cancelled_job_s_chain_sends_nothing_and_counts_what_a_dead_process_began,
        );
    };
    (@each $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                $crate::broadcast::$name($make.await).await;
            }
        )*
    };
}

/// A Bot API that answers each chat as told, and keeps what it delivered.
#[derive(Default)]
struct Api {
    delivered: Mutex<Vec<(i64, Value)>>,
    /// Errors to answer a chat with, the first first; a chat with none left is delivered to.
    errors: Mutex<HashMap<i64, Vec<TelegramError>>>,
    calls: Mutex<u64>,
    /// How long each call takes.
    delay: Duration,
}

impl Api {
    async fn fail(&self, chat: i64, errors: impl IntoIterator<Item = TelegramError>) {
        self.errors
            .lock()
            .await
            .entry(chat)
            .or_default()
            .extend(errors);
    }

    async fn delivered_to(&self, chat: i64) -> usize {
        self.delivered
            .lock()
            .await
            .iter()
            .filter(|(c, _)| *c == chat)
            .count()
    }
}

#[async_trait]
impl BotApi for Api {
    async fn call(&self, call: &ApiCall<'_>) -> Result<Value, CallError> {
        *self.calls.lock().await += 1;
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let chat = call.params["chat_id"].as_i64().expect("a chat id");
        if let Some(errors) = self.errors.lock().await.get_mut(&chat) {
            if !errors.is_empty() {
                return Err(errors.remove(0).into());
            }
        }
        let mut delivered = self.delivered.lock().await;
        delivered.push((chat, call.params.clone()));
        Ok(json!({"message_id": delivered.len() as i64 + 1000, "chat": {"id": chat}}))
    }
}

fn bot() -> BotId {
    BotId::new("caster").expect("a valid bot id")
}

fn spec(origin: &str) -> BroadcastSpec {
    BroadcastSpec::standard(
        bot(),
        "sendMessage",
        json!({"text": "news", "reply_markup": {"inline_keyboard": [[{"text": "Read", "callback_data": "read"}]]}}),
        origin,
    )
}

fn runner(store: &Arc<dyn BroadcastStore>) -> BroadcastRunner {
    BroadcastRunner {
        store: store.clone(),
        budget: Arc::new(Pacer::new(RateLimits::UNLIMITED)),
        bot_rate: None,
        clock: Arc::new(SystemClock),
        retry: RetryPolicy {
            base: Duration::from_millis(20),
            cap: Duration::from_millis(100),
            ..RetryPolicy::default()
        },
    }
}

async fn start(store: &Arc<dyn BroadcastStore>, chats: &[i64]) -> BroadcastId {
    let created = store
        .create(&spec("cli"), chats, SystemClock.now())
        .await
        .expect("the job is created");
    created.job().id.clone()
}

/// Chat `chat`'s first send meets a timeout Telegram answered: it is tried again later.
async fn times_out_once(api: &Api, chat: i64) {
    api.fail(
        chat,
        [TelegramError::Api {
            code: 408,
            description: "Request Timeout".into(),
        }],
    )
    .await;
}

/// A runner whose retries are due 12 s on, 6 s at the least with the policy's jitter: well after
/// a pass over a few chunks ends, however slow the store (the emulator, busy with every other test
/// of its binary, can take seconds), so a chain's step queues the next for them.
fn retrying_after_the_pass(store: &Arc<dyn BroadcastStore>) -> BroadcastRunner {
    BroadcastRunner {
        retry: RetryPolicy {
            base: Duration::from_secs(12),
            cap: Duration::from_secs(12),
            ..RetryPolicy::default()
        },
        ..runner(store)
    }
}

/// Runs the job until it ends by itself, within a minute.
async fn run(store: &Arc<dyn BroadcastStore>, id: &BroadcastId, api: &Arc<Api>) -> RunEnd {
    let (_stop, stopped) = watch::channel(false);
    let api: Arc<dyn BotApi> = api.clone();
    tokio::time::timeout(Duration::from_secs(60), runner(store).run(id, api, stopped))
        .await
        .expect("the run ends within a minute")
        .expect("the store answers")
}

/// Runs job `id` as a chain of steps over chunks of `size` until it ends, each step ended after
/// a moment as an invocation's time ends and its next queued as the broadcasts queue would hold
/// it: how the job ended, and whether a step was held for a time.
async fn run_chain(
    runner: &BroadcastRunner,
    id: &BroadcastId,
    api: &Arc<Api>,
    size: u64,
) -> (JobState, bool) {
    let mut step = ChainStep::start(id);
    let (mut steps, mut waited) = (0, false);
    loop {
        steps += 1;
        assert!(steps < 400, "the chain ends");
        // The invocation's time: a moment, so a slow store's job takes several steps.
        let until = SystemClock.now().plus(Duration::from_millis(250));
        let api: Arc<dyn BotApi> = api.clone();
        // Each step its own message; a step held is the same message shown again.
        let holder = format!("message {}", step.step);
        let next = runner
            .run_step(&step, &holder, size, api, until)
            .await
            .expect("the store answers");
        match next {
            ChainNext::End(state) => return (state, waited),
            ChainNext::Superseded => panic!("the chain's own step {step:?} was superseded"),
            ChainNext::Queue(queued) => {
                waited |= queued.not_before.is_some();
                step = ChainStep::parse(queued.body().as_bytes()).expect("a step reads back");
            }
            ChainNext::Hold(at) => {
                waited = true;
                tokio::time::sleep(Duration::from_millis(
                    at.0.saturating_sub(SystemClock.now().0),
                ))
                .await;
            }
        }
    }
}

async fn job_of(
    store: &Arc<dyn BroadcastStore>,
    id: &BroadcastId,
) -> tgq_core::broadcast::BroadcastJob {
    store
        .job(id)
        .await
        .expect("the store answers")
        .expect("the job exists")
}

/// Every recipient gets the message, with its buttons, exactly once, and the job ends done.
pub async fn every_recipient_gets_the_message_once_and_the_job_is_done(t: BroadcastsUnderTest) {
    let chats: Vec<i64> = (1..=150).chain([-1_001, -1_002]).collect();
    let id = start(&t.store, &chats).await;
    let api = Arc::new(Api::default());
    assert_eq!(run(&t.store, &id, &api).await, RunEnd::Done);
    for chat in &chats {
        assert_eq!(api.delivered_to(*chat).await, 1, "chat {chat}");
    }
    let delivered = api.delivered.lock().await;
    assert_eq!(
        delivered[0].1["reply_markup"]["inline_keyboard"][0][0]["text"],
        "Read"
    );
    let job = job_of(&t.store, &id).await;
    assert_eq!(job.state, JobState::Done);
    assert_eq!(
        (job.counts.total, job.counts.sent, job.counts.pending()),
        (152, 152, 0)
    );
    assert!(job.ended_at.is_some());
}

/// A user who blocked the bot or deleted their account, a group that kicked it: counted gone,
/// tried once.
pub async fn recipients_who_left_are_counted_gone_and_never_tried_again(t: BroadcastsUnderTest) {
    let id = start(&t.store, &[1, 2, 3, -4, 5]).await;
    let api = Arc::new(Api::default());
    let forbidden = |d: &str| TelegramError::Api {
        code: 403,
        description: d.into(),
    };
    api.fail(2, [forbidden("Forbidden: bot was blocked by the user")])
        .await;
    api.fail(3, [forbidden("Forbidden: user is deactivated")])
        .await;
    api.fail(
        -4,
        [forbidden(
            "Forbidden: bot was kicked from the supergroup chat",
        )],
    )
    .await;
    assert_eq!(run(&t.store, &id, &api).await, RunEnd::Done);
    let job = job_of(&t.store, &id).await;
    assert_eq!(
        (job.counts.sent, job.counts.gone, job.counts.failed),
        (2, 3, 0)
    );
    assert_eq!(*api.calls.lock().await, 5, "each recipient is tried once");
}

/// A passing refusal Telegram answered (a 408) is tried again after a backoff; a chat that keeps
/// meeting it ends in the job's dead letters after its attempts, and a 400 nothing tells apart,
/// once others took the message, fails that recipient alone.
pub async fn a_passing_failure_is_tried_again_and_a_lasting_one_ends_in_the_job_s_dead_letters(
    t: BroadcastsUnderTest,
) {
    let id = start(&t.store, &[1, 2, 3]).await;
    let api = Arc::new(Api::default());
    let bad_gateway = || TelegramError::Api {
        code: 408,
        description: "Request Timeout".into(),
    };
    api.fail(2, [bad_gateway()]).await;
    api.fail(
        3,
        [TelegramError::Api {
            code: 400,
            description: "Bad Request: something only this chat says".into(),
        }],
    )
    .await;
    assert_eq!(run(&t.store, &id, &api).await, RunEnd::Done);
    let job = job_of(&t.store, &id).await;
    assert_eq!(
        (job.counts.sent, job.counts.failed, job.counts.retrying),
        (2, 1, 0)
    );
    assert_eq!(api.delivered_to(2).await, 1, "delivered on the second try");
    let undelivered = t
        .store
        .undelivered(&id, None, 10)
        .await
        .expect("the store answers");
    assert_eq!(undelivered.iter().map(|r| r.chat).collect::<Vec<_>>(), [3]);

    // Two more recipients, of whom one fails every try: its attempts, then a dead letter.
    let id = start(&t.store, &[10, 11]).await;
    api.fail(11, (0..MAX_ATTEMPTS).map(|_| bad_gateway())).await;
    assert_eq!(run(&t.store, &id, &api).await, RunEnd::Done);
    let job_now = job_of(&t.store, &id).await;
    assert_eq!((job_now.counts.sent, job_now.counts.failed), (1, 1));
    let dead = t
        .store
        .undelivered(&id, None, 10)
        .await
        .expect("the store answers");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].chat, 11);
    assert_eq!(
        dead[0].attempts,
        MAX_ATTEMPTS - 1,
        "the last try fails it without a retry"
    );
    assert_eq!(api.delivered_to(11).await, 0);
}

/// Telegram unreachable (connection refused) and then answering 502, for longer than a
/// recipient's attempts: nobody is written off as failed or uncertain, the lane waits, and when
/// Telegram answers again everyone gets the message once.
pub async fn an_outage_of_telegram_s_writes_nobody_off_and_the_job_goes_on_when_it_answers(
    t: BroadcastsUnderTest,
) {
    let chats: Vec<i64> = (1..=6).collect();
    let id = start(&t.store, &chats).await;
    let api = Arc::new(Api::default());
    let refused = || TelegramError::NotSent("connection refused".into());
    let bad_gateway = || TelegramError::Api {
        code: 502,
        description: "Bad Gateway".into(),
    };
    // More failures in a row than a recipient's attempts, before anyone took the message.
    api.fail(
        1,
        [
            refused(),
            refused(),
            refused(),
            bad_gateway(),
            bad_gateway(),
            bad_gateway(),
        ],
    )
    .await;
    api.fail(4, [bad_gateway(), refused()]).await;
    assert_eq!(run(&t.store, &id, &api).await, RunEnd::Done);
    let job = job_of(&t.store, &id).await;
    assert_eq!(
        (job.counts.sent, job.counts.failed, job.counts.uncertain),
        (6, 0, 0),
        "{:?}",
        job.counts
    );
    for chat in &chats {
        assert_eq!(api.delivered_to(*chat).await, 1, "chat {chat}");
    }
}

/// A token revoked after the first recipients took the message (401): the job pauses with
/// Telegram's words at the first refusal and fails nobody; resumed once the token works, it
/// sends the rest once each.
pub async fn a_refusal_of_the_message_or_the_bot_mid_job_pauses_it_and_fails_nobody(
    t: BroadcastsUnderTest,
) {
    let chats: Vec<i64> = (1..=10).collect();
    let id = start(&t.store, &chats).await;
    let api = Arc::new(Api::default());
    let revoked = || TelegramError::Api {
        code: 401,
        description: "Unauthorized".into(),
    };
    for chat in 4..=10 {
        api.fail(chat, [revoked()]).await;
    }
    let end = run(&t.store, &id, &api).await;
    let job = job_of(&t.store, &id).await;
    let JobState::Paused {
        reason: Some(reason),
    } = &job.state
    else {
        panic!("paused with a reason, not {end:?} / {:?}", job.state);
    };
    assert!(reason.contains("Unauthorized"), "{reason}");
    assert_eq!(
        (job.counts.sent, job.counts.failed, job.counts.uncertain),
        (3, 0, 0),
        "{:?}",
        job.counts
    );
    // The token works again (the other chats' refusals were never met): resumed, it ends.
    api.errors.lock().await.clear();
    t.store
        .change(&id, Change::Resume, SystemClock.now())
        .await
        .expect("the store answers");
    assert_eq!(run(&t.store, &id, &api).await, RunEnd::Done);
    for chat in &chats {
        assert_eq!(api.delivered_to(*chat).await, 1, "chat {chat}");
    }
}

/// Refusals about one chat (an id the bot cannot reach, a closed topic, no right to write), even
/// before anyone took the message, fail that recipient and never pause the job.
pub async fn refusals_about_one_chat_end_that_recipient_and_never_pause_the_job(
    t: BroadcastsUnderTest,
) {
    let chats: Vec<i64> = vec![-1, -2, -3, -4, 5, 6];
    let id = start(&t.store, &chats).await;
    let api = Arc::new(Api::default());
    for (chat, said) in [
        (-1, "Bad Request: PEER_ID_INVALID"),
        (-2, "Bad Request: TOPIC_CLOSED"),
        (
            -3,
            "Bad Request: not enough rights to send text messages to the chat",
        ),
        (-4, "Bad Request: chat not found"),
    ] {
        api.fail(
            chat,
            [TelegramError::Api {
                code: 400,
                description: said.into(),
            }],
        )
        .await;
    }
    assert_eq!(run(&t.store, &id, &api).await, RunEnd::Done);
    let job = job_of(&t.store, &id).await;
    assert_eq!(
        (job.counts.sent, job.counts.failed),
        (2, 4),
        "{:?}",
        job.counts
    );
}

/// A group upgraded to a supergroup: the send is followed once to the supergroup, which gets the
/// message, and the recipient keeps where it went.
pub async fn a_group_that_became_a_supergroup_gets_the_message_there_once(t: BroadcastsUnderTest) {
    let id = start(&t.store, &[-5, 6]).await;
    let api = Arc::new(Api::default());
    api.fail(-5, [TelegramError::MigrateToChat(-1_005)]).await;
    assert_eq!(run(&t.store, &id, &api).await, RunEnd::Done);
    let job = job_of(&t.store, &id).await;
    assert_eq!(
        (job.counts.sent, job.counts.failed),
        (2, 0),
        "{:?}",
        job.counts
    );
    assert_eq!(api.delivered_to(-1_005).await, 1);
    assert_eq!(api.delivered_to(-5).await, 0);
}

/// `retry` puts the failed recipients back on a finished job, which runs again and reaches them
/// once; the uncertain ones only when asked. A running job, and one with nothing to retry, say
/// so; the undelivered are read page by page.
pub async fn a_retry_sends_again_to_whom_it_failed_and_the_uncertain_only_when_asked(
    t: BroadcastsUnderTest,
) {
    let chats: Vec<i64> = (1..=6).collect();
    let id = start(&t.store, &chats).await;
    let api = Arc::new(Api::default());
    let unreachable = || TelegramError::Api {
        code: 400,
        description: "Bad Request: PEER_ID_INVALID".into(),
    };
    for chat in [2, 4, 5] {
        api.fail(chat, [unreachable()]).await;
    }
    let now = SystemClock.now();
    assert!(matches!(
        t.store
            .retry(&id, false, now)
            .await
            .expect("the store answers"),
        Retried::Refused { .. }
    ));
    // Chat 6's send began in a process that died: it is uncertain when the job runs.
    let taken = t
        .store
        .next(&id, &(5..6), now, 1)
        .await
        .expect("the store answers");
    t.store
        .begin(&id, taken[0].index)
        .await
        .expect("the store answers");
    assert_eq!(run(&t.store, &id, &api).await, RunEnd::Done);
    let pages: Vec<Vec<i64>> = {
        let first = t
            .store
            .undelivered(&id, None, 2)
            .await
            .expect("the store answers");
        let last = first.last().map(|r| r.index);
        let second = t
            .store
            .undelivered(&id, last, 2)
            .await
            .expect("the store answers");
        [first, second]
            .iter()
            .map(|page| page.iter().map(|r| r.chat).collect())
            .collect()
    };
    assert_eq!(pages, [vec![2, 4], vec![5, 6]]);

    let retried = t
        .store
        .retry(&id, false, SystemClock.now())
        .await
        .expect("the store answers");
    let Retried::Retried { recipients, job } = retried else {
        panic!("retried, not {retried:?}");
    };
    assert_eq!(recipients, 3);
    assert_eq!(job.state, JobState::Running);
    assert_eq!((job.counts.failed, job.counts.pending()), (0, 3));
    assert_eq!(run(&t.store, &id, &api).await, RunEnd::Done);
    assert_eq!(
        api.delivered_to(6).await,
        0,
        "the uncertain one waits to be asked for"
    );
    let retried = t
        .store
        .retry(&id, true, SystemClock.now())
        .await
        .expect("the store answers");
    assert!(
        matches!(retried, Retried::Retried { recipients: 1, .. }),
        "{retried:?}"
    );
    assert_eq!(run(&t.store, &id, &api).await, RunEnd::Done);
    for chat in &chats {
        assert_eq!(api.delivered_to(*chat).await, 1, "chat {chat}");
    }
    assert!(matches!(
        t.store
            .retry(&id, true, SystemClock.now())
            .await
            .expect("the store answers"),
        Retried::Nothing { .. }
    ));
    assert_eq!(
        t.store
            .retry(&BroadcastId(999_999), false, SystemClock.now())
            .await
            .expect("the store answers"),
        Retried::NotFound
    );
}

/// A message Telegram refuses for everyone in words tgq does not know (a 400 before anyone took
/// it) pauses the job with Telegram's words after a few recipients, who are kept for a resume, not
/// failed.
pub async fn a_message_refused_by_the_first_recipients_pauses_the_job_with_telegram_s_words(
    t: BroadcastsUnderTest,
) {
    let chats: Vec<i64> = (1..=50).collect();
    let id = start(&t.store, &chats).await;
    let api = Arc::new(Api::default());
    for chat in &chats {
        api.fail(
            *chat,
            [TelegramError::Api {
                code: 400,
                description: "Bad Request: SOMETHING_NEW_ABOUT_THE_MESSAGE".into(),
            }],
        )
        .await;
    }
    let end = run(&t.store, &id, &api).await;
    let job_now = job_of(&t.store, &id).await;
    let JobState::Paused {
        reason: Some(reason),
    } = &job_now.state
    else {
        panic!(
            "the job is paused with a reason, not {end:?} / {:?}",
            job_now.state
        );
    };
    assert!(
        reason.contains("SOMETHING_NEW_ABOUT_THE_MESSAGE"),
        "{reason}"
    );
    assert_eq!(
        *api.calls.lock().await,
        u64::from(REFUSALS_BEFORE_PAUSE),
        "no more calls than the refusals that paused it"
    );
    assert_eq!(
        (job_now.counts.failed, job_now.counts.pending()),
        (0, 50),
        "nobody is failed for the message's fault"
    );
}

/// A recipient whose send began in a process that died (no outcome recorded) is uncertain, and
/// the job resumed in another process sends it nothing and everyone else their message once.
pub async fn a_send_begun_by_a_process_that_died_is_uncertain_and_never_sent_again(
    t: BroadcastsUnderTest,
) {
    let id = start(&t.store, &[1, 2, 3, 4]).await;
    let now = SystemClock.now();
    let taken = t
        .store
        .next(&id, &EVERY, now, 2)
        .await
        .expect("the store answers");
    assert_eq!(taken.iter().map(|r| r.chat).collect::<Vec<_>>(), [1, 2]);
    t.store
        .begin(&id, taken[0].index)
        .await
        .expect("the store answers");
    t.store
        .settle(
            &id,
            taken[0].index,
            Outcome::Sent {
                message_id: 7,
                migrated_to: None,
            },
            now,
        )
        .await
        .expect("the store answers");
    t.store
        .begin(&id, taken[1].index)
        .await
        .expect("the store answers");
    // The process dies here, with chat 2's send begun. A begun send is never handed out again.
    let next = t
        .store
        .next(&id, &EVERY, now, 10)
        .await
        .expect("the store answers");
    assert_eq!(next.iter().map(|r| r.chat).collect::<Vec<_>>(), [3, 4]);

    let api = Arc::new(Api::default());
    assert_eq!(run(&t.store, &id, &api).await, RunEnd::Done);
    assert_eq!(api.delivered_to(1).await, 0, "sent before the crash");
    assert_eq!(api.delivered_to(2).await, 0, "uncertain: never sent again");
    assert_eq!(
        (api.delivered_to(3).await, api.delivered_to(4).await),
        (1, 1)
    );
    let job_now = job_of(&t.store, &id).await;
    assert_eq!((job_now.counts.sent, job_now.counts.uncertain), (3, 1));
    let undelivered = t
        .store
        .undelivered(&id, None, 10)
        .await
        .expect("the store answers");
    assert_eq!(undelivered.iter().map(|r| r.chat).collect::<Vec<_>>(), [2]);
    // It says why, as the store keeps it.
    assert!(
        matches!(&undelivered[0].state, RecipientState::Uncertain { why: Some(why) } if why.contains("outcome was never recorded")),
        "{:?}",
        undelivered[0].state
    );
}

/// Pause, resume and cancel move a job only along its states; a paused job's run stops and sends
/// nothing more, a resumed one finishes, and a cancelled one never runs again.
pub async fn a_paused_job_sends_nothing_until_resumed_and_a_cancelled_one_never(
    t: BroadcastsUnderTest,
) {
    let id = start(&t.store, &[1, 2, 3]).await;
    let now = SystemClock.now();
    let changed = t
        .store
        .change(&id, Change::Pause, now)
        .await
        .expect("the store answers");
    assert!(matches!(changed, Changed::Changed { .. }), "{changed:?}");
    let again = t
        .store
        .change(&id, Change::Pause, now)
        .await
        .expect("the store answers");
    assert!(matches!(again, Changed::Refused { .. }), "{again:?}");
    let api = Arc::new(Api::default());
    assert_eq!(
        run(&t.store, &id, &api).await,
        RunEnd::Stopped(JobState::Paused { reason: None })
    );
    assert_eq!(*api.calls.lock().await, 0);

    t.store
        .change(&id, Change::Resume, now)
        .await
        .expect("the store answers");
    assert_eq!(run(&t.store, &id, &api).await, RunEnd::Done);
    assert_eq!(api.delivered.lock().await.len(), 3);

    let cancelled = start(&t.store, &[5, 6]).await;
    t.store
        .change(&cancelled, Change::Cancel, now)
        .await
        .expect("the store answers");
    assert_eq!(
        run(&t.store, &cancelled, &api).await,
        RunEnd::Stopped(JobState::Cancelled)
    );
    let refused = t
        .store
        .change(&cancelled, Change::Resume, now)
        .await
        .expect("the store answers");
    assert!(matches!(refused, Changed::Refused { .. }), "{refused:?}");
    assert_eq!(
        api.delivered.lock().await.len(),
        3,
        "nothing sent for the cancelled job"
    );
    let missing = t
        .store
        .change(&BroadcastId(9_999), Change::Pause, now)
        .await
        .expect("the store answers");
    assert_eq!(missing, Changed::NotFound);
}

/// A 429 holds the bot's sends for its `retry_after` (in the budget the worker shares) and the
/// recipient is sent to after it, with no attempt spent.
pub async fn a_flood_wait_holds_the_broadcast_without_spending_an_attempt(t: BroadcastsUnderTest) {
    let id = start(&t.store, &[1, 2]).await;
    let api = Arc::new(Api::default());
    api.fail(1, [TelegramError::RetryAfter(Duration::from_secs(1))])
        .await;
    let budget = Arc::new(Pacer::new(RateLimits::UNLIMITED));
    let runner = BroadcastRunner {
        budget: budget.clone(),
        ..runner(&t.store)
    };
    let (_stop, stopped) = watch::channel(false);
    let dyn_api: Arc<dyn BotApi> = api.clone();
    let started = std::time::Instant::now();
    let end =
        tokio::time::timeout(Duration::from_secs(60), runner.run(&id, dyn_api, stopped)).await;
    assert_eq!(end.expect("ends").expect("the store answers"), RunEnd::Done);
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "the wait was kept: {:?}",
        started.elapsed()
    );
    assert_eq!(api.delivered_to(1).await, 1);
    let recipients = t
        .store
        .undelivered(&id, None, 10)
        .await
        .expect("the store answers");
    assert!(recipients.is_empty());
    let job_now = job_of(&t.store, &id).await;
    assert_eq!((job_now.counts.sent, job_now.counts.failed), (2, 0));
}

/// A handler's run that started a broadcast and was retried starts nothing new: the job of the
/// same origin is found. Jobs started from the command line are all new.
pub async fn a_start_repeated_by_a_retried_run_finds_the_job_it_started(t: BroadcastsUnderTest) {
    let now = SystemClock.now();
    let first = t
        .store
        .create(&spec("update:7:news"), &[1, 2], now)
        .await
        .expect("the store answers");
    let again = t
        .store
        .create(&spec("update:7:news"), &[1, 2, 3], now)
        .await
        .expect("the store answers");
    assert!(matches!(first, Created::New { .. }));
    assert!(matches!(again, Created::Existing { .. }));
    assert_eq!(first.job().id, again.job().id);
    assert_eq!(again.job().counts.total, 2);
    let a = start(&t.store, &[1]).await;
    let b = start(&t.store, &[1]).await;
    assert_ne!(a, b);
    let listed = t.store.jobs().await.expect("the store answers");
    assert_eq!(
        listed.iter().map(|j| j.id.clone()).collect::<Vec<_>>(),
        [b, a, first.job().id.clone()],
        "newest first"
    );
}

/// The chats whose state has the filter's format and value are the audience; other bots' chats
/// and other formats are not.
pub async fn an_audience_is_the_chats_whose_state_the_filter_takes(t: BroadcastsUnderTest) {
    let other = BotId::new("other").expect("a valid bot id");
    (t.put_state)(&bot(), 30, "subs/v1", json!({"on": true}));
    (t.put_state)(&bot(), 10, "subs/v1", json!({"on": true}));
    (t.put_state)(&bot(), 20, "subs/v1", json!({"on": false}));
    (t.put_state)(&bot(), 40, "cart/v1", json!({"on": true}));
    (t.put_state)(&other, 50, "subs/v1", json!({"on": true}));
    let filter = StateFilter {
        format: Some("subs/v1".into()),
        equals: Some(("/on".into(), json!(true))),
    };
    let chats = t
        .store
        .chats_matching(&bot(), &filter)
        .await
        .expect("the store answers");
    assert_eq!(chats, [10, 30]);
    let every = t
        .store
        .chats_matching(&bot(), &StateFilter::default())
        .await
        .expect("the store answers");
    assert_eq!(every, [10, 20, 30, 40]);
}

/// A span's run sees only its own recipients: the next ones to send, the retries it waits for and
/// the begun sends it gives up on are all of the span, so one chunk's run on a stack never touches
/// another's.
pub async fn a_span_hands_out_waits_on_and_abandons_only_its_own_recipients(
    t: BroadcastsUnderTest,
) {
    let id = start(&t.store, &[1, 2, 3, 4, 5, 6]).await;
    let now = SystemClock.now();
    let chats = |recipients: Vec<tgq_core::broadcast::Recipient>| {
        recipients.into_iter().map(|r| r.chat).collect::<Vec<_>>()
    };
    let second = t
        .store
        .next(&id, &(2..4), now, 10)
        .await
        .expect("the store answers");
    assert_eq!(chats(second.clone()), [3, 4]);
    // Chat 3's send begins and dies with its process; chat 5 waits for another try.
    t.store
        .begin(&id, second[0].index)
        .await
        .expect("the store answers");
    let third = t
        .store
        .next(&id, &(4..6), now, 1)
        .await
        .expect("the store answers");
    assert_eq!(chats(third.clone()), [5]);
    t.store
        .begin(&id, third[0].index)
        .await
        .expect("the store answers");
    let due = now.0 + 60_000;
    t.store
        .settle(
            &id,
            third[0].index,
            Outcome::Retry {
                due,
                error: "502".into(),
            },
            now,
        )
        .await
        .expect("the store answers");
    let later = Timestamp(now.0 + 120_000);
    assert_eq!(
        chats(
            t.store
                .next(&id, &(4..6), later, 10)
                .await
                .expect("the store answers")
        ),
        [5, 6],
        "the due retry first, then the span's fresh recipient"
    );
    assert_eq!(
        chats(
            t.store
                .next(&id, &(0..2), later, 10)
                .await
                .expect("the store answers")
        ),
        [1, 2],
        "no other span's retry"
    );
    assert_eq!(
        t.store
            .next_retry(&id, &(0..4))
            .await
            .expect("the store answers"),
        None
    );
    assert_eq!(
        t.store
            .next_retry(&id, &(4..6))
            .await
            .expect("the store answers"),
        Some(Timestamp(due))
    );
    assert_eq!(
        t.store
            .abandon_begun(&id, &(0..2), now)
            .await
            .expect("the store answers"),
        0,
        "chat 3's send is not this span's"
    );
    assert_eq!(
        t.store
            .abandon_begun(&id, &(2..4), now)
            .await
            .expect("the store answers"),
        1
    );
    let job_now = job_of(&t.store, &id).await;
    assert_eq!((job_now.counts.uncertain, job_now.counts.retrying), (1, 1));
}

/// A job run on a stack: steps over chunks of 3, each ended after a moment as an invocation's
/// time ends, every next step queued as the broadcasts queue would hold it. Everyone gets the
/// message once; a chunk whose retry is not due is passed over, and a later step comes back for
/// it when it is due; the last step finishes the job.
pub async fn a_job_run_as_a_chain_of_steps_reaches_everyone_once_and_comes_back_for_its_retries(
    t: BroadcastsUnderTest,
) {
    let chats: Vec<i64> = (1..=10).collect();
    let id = start(&t.store, &chats).await;
    let api = Arc::new(Api::default());
    times_out_once(&api, 2).await;
    // A retry due well after the pass over the chunks ends, however slow the store.
    let runner = retrying_after_the_pass(&t.store);
    let (ended, waited) = run_chain(&runner, &id, &api, 3).await;
    assert_eq!(ended, JobState::Done);
    for chat in &chats {
        assert_eq!(api.delivered_to(*chat).await, 1, "chat {chat}");
    }
    assert!(
        waited,
        "the retry of chunk 0 was waited for through the queue, not in a step"
    );
    let job_now = job_of(&t.store, &id).await;
    assert_eq!((job_now.counts.sent, job_now.counts.pending()), (10, 0));
}

/// A job's steps on a stack are one chain. A step queued again for a running job — a resume of
/// it, or a copy of a step its queue took in again once the deduplication window had passed —
/// ends at once, sending nothing and queuing nothing, when its place in the chain was claimed by
/// another message or a later step ran; the message of a step received again runs as itself.
pub async fn a_job_runs_as_one_chain_whatever_is_queued_again(t: BroadcastsUnderTest) {
    let chats: Vec<i64> = (1..=6).collect();
    let id = start(&t.store, &chats).await;
    let api = Arc::new(Api::default());
    // Chat 2's first send fails, its retry due well after the pass over the chunks ends: the
    // first step queues the next for then.
    times_out_once(&api, 2).await;
    let runner = retrying_after_the_pass(&t.store);
    let run = |step: &ChainStep, holder: &'static str| {
        let (api, runner, step): (Arc<dyn BotApi>, _, _) = (api.clone(), &runner, step.clone());
        async move {
            let until = SystemClock.now().plus(Duration::from_secs(30));
            runner
                .run_step(&step, holder, 3, api, until)
                .await
                .expect("the store answers")
        }
    };
    let first = ChainStep::start(&id);
    let ChainNext::Queue(second) = run(&first, "m1").await else {
        panic!("the first step queues the next");
    };
    assert_eq!(second.step, first.step + 1);
    // The first step's message received again before the next ran (its deletion was lost):
    // it is still the chain's.
    assert!(
        matches!(run(&first, "m1").await, ChainNext::Queue(_)),
        "the first step's own message was refused"
    );
    // The job resumed while running, its chain alive: a first step in the place after the
    // latest claimed, as the stack's store queues one.
    let resumed = ChainStep::after(&id, first.step);
    let held = ChainStep {
        not_before: None,
        ..second.clone()
    };
    // The queued next runs first (the queue keeps the group's order), held for its retry.
    assert!(matches!(run(&second, "m2").await, ChainNext::Hold(_)));
    assert_eq!(run(&resumed, "resume").await, ChainNext::Superseded);
    // A copy of the second step queued again after the deduplication window, and the first
    // step's message shown once more: both behind the chain.
    assert_eq!(run(&held, "m2 copy").await, ChainNext::Superseded);
    assert_eq!(run(&first, "m1").await, ChainNext::Superseded);
    // The chain goes on: its held step, shown again when due, reaches chat 2 and ends the job.
    let due = second.not_before.expect("held for the retry");
    tokio::time::sleep(Duration::from_millis(
        due.saturating_sub(SystemClock.now().0),
    ))
    .await;
    assert_eq!(run(&held, "m2").await, ChainNext::End(JobState::Done));
    for chat in &chats {
        assert_eq!(api.delivered_to(*chat).await, 1, "chat {chat}");
    }
}

/// The runners' list (`open_jobs`) holds the jobs not ended, newest first, whatever ended
/// before, between and after them: a job done or cancelled leaves it, a paused one stays, and a
/// done job retried comes back — also once the list was read with it ended.
pub async fn the_runners_look_only_at_jobs_not_ended(t: BroadcastsUnderTest) {
    let done = start(&t.store, &[1, 2]).await;
    let cancelled = start(&t.store, &[3]).await;
    let paused = start(&t.store, &[4]).await;
    let running = start(&t.store, &[5]).await;
    let last_done = start(&t.store, &[6]).await;
    let open = || async {
        t.store
            .open_jobs()
            .await
            .expect("the store answers")
            .into_iter()
            .map(|job| job.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        open().await,
        [&last_done, &running, &paused, &cancelled, &done].map(Clone::clone)
    );
    let api = Arc::new(Api::default());
    // Chat 2 is unreachable: the first job ends done with a recipient to retry.
    api.fail(
        2,
        [TelegramError::Api {
            code: 400,
            description: "Bad Request: PEER_ID_INVALID".into(),
        }],
    )
    .await;
    assert_eq!(run(&t.store, &done, &api).await, RunEnd::Done);
    assert_eq!(run(&t.store, &last_done, &api).await, RunEnd::Done);
    let now = SystemClock.now();
    for (id, change) in [(&cancelled, Change::Cancel), (&paused, Change::Pause)] {
        assert!(matches!(
            t.store
                .change(id, change, now)
                .await
                .expect("the store answers"),
            Changed::Changed { .. }
        ));
    }
    let left = [running.clone(), paused.clone()];
    assert_eq!(open().await, left);
    // Read again once the jobs that ended before the first open one are behind it.
    assert_eq!(open().await, left);
    assert!(matches!(
        t.store
            .retry(&done, false, now)
            .await
            .expect("the store answers"),
        Retried::Retried { recipients: 1, .. }
    ));
    assert_eq!(open().await, [running, paused, done.clone()]);
    assert_eq!(run(&t.store, &done, &api).await, RunEnd::Done);
    assert_eq!(api.delivered_to(2).await, 1);
    assert_eq!(t.store.jobs().await.expect("the store answers").len(), 5);
}

/// A step whose time left cannot hold another chunk as long as its first ends at the chunk's
/// boundary: the next step goes on from the second chunk, which nobody has begun.
pub async fn a_step_begins_no_chunk_it_has_no_time_to_finish(t: BroadcastsUnderTest) {
    let chats: Vec<i64> = (1..=6).collect();
    let id = start(&t.store, &chats).await;
    let api = Arc::new(Api {
        delay: Duration::from_secs(1),
        ..Api::default()
    });
    // The first chunk takes two seconds and the store's moments: its first send alone, since no
    // recipient has taken the message yet, then the other two at once. It has time to finish
    // while the store's answers in it take under 1.6 s together, and then less than two seconds
    // are left.
    let until = SystemClock.now().plus(Duration::from_millis(3_600));
    let dyn_api: Arc<dyn BotApi> = api.clone();
    let next = runner(&t.store)
        .run_step(&ChainStep::start(&id), "first", 3, dyn_api, until)
        .await
        .expect("the store answers");
    let ChainNext::Queue(queued) = next else {
        panic!("the step queues the next, not {next:?}");
    };
    assert_eq!(queued.from, 3, "the next step begins at the second chunk");
    for chat in 1..=3 {
        assert_eq!(api.delivered_to(chat).await, 1, "chat {chat}");
    }
    for chat in 4..=6 {
        assert_eq!(
            api.delivered_to(chat).await,
            0,
            "chat {chat} is the next step's"
        );
    }
    let job_now = job_of(&t.store, &id).await;
    assert_eq!(
        (
            job_now.counts.sent,
            job_now.counts.uncertain,
            job_now.counts.pending()
        ),
        (3, 0, 3)
    );
}

/// Two broadcasts of one bot on a stack: the later one's step sends nothing while the older one
/// runs, and queues itself to look again later; a broadcast of another bot is not held; once the
/// older one is done, the later one goes.
pub async fn a_bot_s_later_broadcast_waits_on_a_stack_until_its_older_one_ends(
    t: BroadcastsUnderTest,
) {
    let older = start(&t.store, &[1, 2, 3]).await;
    let later = start(&t.store, &[11, 12, 13]).await;
    let other = t
        .store
        .create(
            &BroadcastSpec {
                bot: BotId::new("other").expect("a valid bot id"),
                ..spec("cli")
            },
            &[21, 22],
            SystemClock.now(),
        )
        .await
        .expect("the job is created")
        .job()
        .id
        .clone();
    let api = Arc::new(Api::default());
    let run = |step: ChainStep| {
        let api: Arc<dyn BotApi> = api.clone();
        let runner = runner(&t.store);
        async move {
            let until = SystemClock.now().plus(Duration::from_secs(30));
            let holder = format!("{} {}", step.job, step.step);
            runner
                .run_step(&step, &holder, 3, api, until)
                .await
                .expect("the store answers")
        }
    };
    let before = SystemClock.now();
    let waiting = match run(ChainStep::start(&later)).await {
        // A new message, so the wait adds no receive to this one's count.
        ChainNext::Queue(next) => {
            assert_eq!(next.from, 0);
            assert!(
                next.not_before.is_some_and(|at| at > before.0),
                "looks again later: {next:?}"
            );
            next
        }
        other => panic!("the later broadcast's step went on: {other:?}"),
    };
    for chat in [11, 12, 13] {
        assert_eq!(api.delivered_to(chat).await, 0, "chat {chat}");
    }
    assert_eq!(
        run(ChainStep::start(&other)).await,
        ChainNext::End(JobState::Done)
    );
    assert_eq!(
        run(ChainStep::start(&older)).await,
        ChainNext::End(JobState::Done)
    );
    // Shown again when its wait ends.
    let again = ChainStep {
        not_before: None,
        ..waiting
    };
    assert_eq!(run(again).await, ChainNext::End(JobState::Done));
    for chat in [1, 2, 3, 11, 12, 13, 21, 22] {
        assert_eq!(api.delivered_to(chat).await, 1, "chat {chat}");
    }
}

/// The store under test, counting the runner's reads of a span's recipients; a begin of the
/// recipient at `lost_begin` is written and then answered with an error, as a request whose
/// answer the network lost.
struct Watched {
    store: Arc<dyn BroadcastStore>,
    nexts: AtomicU64,
    abandons: AtomicU64,
    lost_begin: Option<u64>,
}

impl Watched {
    fn new(store: &Arc<dyn BroadcastStore>, lost_begin: Option<u64>) -> Arc<Self> {
        Arc::new(Self {
            store: store.clone(),
            nexts: AtomicU64::new(0),
            abandons: AtomicU64::new(0),
            lost_begin,
        })
    }
}

#[async_trait]
impl BroadcastStore for Watched {
    async fn create(
        &self,
        spec: &BroadcastSpec,
        chats: &[i64],
        now: Timestamp,
    ) -> Result<Created, PortError> {
        self.store.create(spec, chats, now).await
    }

    async fn jobs(&self) -> Result<Vec<tgq_core::broadcast::BroadcastJob>, PortError> {
        self.store.jobs().await
    }

    async fn job(
        &self,
        id: &BroadcastId,
    ) -> Result<Option<tgq_core::broadcast::BroadcastJob>, PortError> {
        self.store.job(id).await
    }

    async fn change(
        &self,
        id: &BroadcastId,
        change: Change,
        now: Timestamp,
    ) -> Result<Changed, PortError> {
        self.store.change(id, change, now).await
    }

    async fn next(
        &self,
        id: &BroadcastId,
        span: &Indexes,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Recipient>, PortError> {
        self.nexts.fetch_add(1, Ordering::SeqCst);
        self.store.next(id, span, now, limit).await
    }

    async fn next_retry(
        &self,
        id: &BroadcastId,
        span: &Indexes,
    ) -> Result<Option<Timestamp>, PortError> {
        self.store.next_retry(id, span).await
    }

    async fn begin(&self, id: &BroadcastId, index: u64) -> Result<(), PortError> {
        self.store.begin(id, index).await?;
        if self.lost_begin == Some(index) {
            return Err(PortError::unavailable(
                "the test's begin",
                "the answer was lost on its way back",
            ));
        }
        Ok(())
    }

    async fn settle(
        &self,
        id: &BroadcastId,
        index: u64,
        outcome: Outcome,
        now: Timestamp,
    ) -> Result<(), PortError> {
        self.store.settle(id, index, outcome, now).await
    }

    async fn abandon_begun(
        &self,
        id: &BroadcastId,
        span: &Indexes,
        now: Timestamp,
    ) -> Result<u64, PortError> {
        self.abandons.fetch_add(1, Ordering::SeqCst);
        self.store.abandon_begun(id, span, now).await
    }

    async fn undelivered(
        &self,
        id: &BroadcastId,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Recipient>, PortError> {
        self.store.undelivered(id, after, limit).await
    }

    async fn retry(
        &self,
        id: &BroadcastId,
        uncertain: bool,
        now: Timestamp,
    ) -> Result<Retried, PortError> {
        self.store.retry(id, uncertain, now).await
    }

    async fn open_jobs(&self) -> Result<Vec<tgq_core::broadcast::BroadcastJob>, PortError> {
        self.store.open_jobs().await
    }

    async fn claim_step(
        &self,
        id: &BroadcastId,
        step: u64,
        holder: &str,
    ) -> Result<StepClaim, PortError> {
        self.store.claim_step(id, step, holder).await
    }

    async fn claimed_step(&self, id: &BroadcastId) -> Result<u64, PortError> {
        self.store.claimed_step(id).await
    }

    async fn chats_matching(
        &self,
        bot: &BotId,
        filter: &StateFilter,
    ) -> Result<Vec<i64>, PortError> {
        self.store.chats_matching(bot, filter).await
    }
}

/// A chunk whose every send ended with its outcome is read twice in its run, not four times: once
/// to mark what an earlier run left begun, once to take its recipients; its batch held the whole
/// chunk, so nothing is left to look for. (On DynamoDB a chunk's read is ten requests.)
pub async fn a_batch_whose_sends_all_ended_is_not_read_again(t: BroadcastsUnderTest) {
    let chats: Vec<i64> = (1..=CHUNK as i64 + 5).collect();
    let id = start(&t.store, &chats).await;
    let watched = Watched::new(&t.store, None);
    let store: Arc<dyn BroadcastStore> = watched.clone();
    let api = Arc::new(Api::default());
    let (_stop, stopped) = watch::channel(false);
    let bot_api: Arc<dyn BotApi> = api.clone();
    let end = tokio::time::timeout(
        Duration::from_secs(120),
        runner(&store).run_span(&id, &(0..CHUNK), Waits::No, bot_api, stopped),
    )
    .await
    .expect("the run ends within two minutes")
    .expect("the store answers");
    assert_eq!(end, RunEnd::SpanDone);
    assert_eq!(api.delivered.lock().await.len(), CHUNK as usize);
    assert_eq!(
        api.delivered_to(CHUNK as i64 + 1).await,
        0,
        "another chunk's"
    );
    assert_eq!(
        (
            watched.nexts.load(Ordering::SeqCst),
            watched.abandons.load(Ordering::SeqCst)
        ),
        (1, 1),
        "reads of the chunk to take its recipients, and to mark what was left begun"
    );
}

/// A begin the store wrote but whose answer was lost: the recipient is begun with no outcome, so
/// before the run ends it is marked uncertain and counted, never sent; the others are sent.
pub async fn a_begin_whose_answer_was_lost_leaves_its_recipient_uncertain(t: BroadcastsUnderTest) {
    let id = start(&t.store, &[1, 2, 3, 4, 5]).await;
    let watched = Watched::new(&t.store, Some(2));
    let store: Arc<dyn BroadcastStore> = watched.clone();
    let api = Arc::new(Api::default());
    assert_eq!(run(&store, &id, &api).await, RunEnd::Done);
    assert_eq!(api.delivered_to(3).await, 0, "begun, never sent");
    for chat in [1, 2, 4, 5] {
        assert_eq!(api.delivered_to(chat).await, 1, "chat {chat}");
    }
    let job = job_of(&t.store, &id).await;
    assert_eq!(
        (
            job.state,
            job.counts.sent,
            job.counts.uncertain,
            job.counts.pending()
        ),
        (JobState::Done, 4, 1, 0)
    );
}

/// A job a handler starts (`ctx.broadcast`) is written with its audience, the chats or the
/// filter: its runs write the recipients, a write cut short going on from where it ended, before
/// anything is sent. Listed chats lose their repeats; the chats whose state the filter takes are
/// the audience, as the runs find them. Each gets the message once, through a chain of steps or
/// one run. A list that is empty, names chat 0 or is longer than a handler may list is refused,
/// and nothing is stored.
pub async fn a_job_a_handler_starts_writes_its_audience_in_its_own_runs(t: BroadcastsUnderTest) {
    let mut listed: Vec<i64> = (1..=250).collect();
    listed.extend([7, 250, 1]);
    let handler = |origin: &str| spec(&format!("update:caster:{origin}:news"));
    let audience = Audience::Chats { chats: listed };
    let created = start_expanding(&*t.store, &handler("1"), &audience, SystemClock.now())
        .await
        .expect("the job starts");
    let id = created.job().id.clone();
    // A run's write of the audience cut short, as when its process dies: the next goes on.
    let _ = tokio::time::timeout(Duration::from_millis(30), t.store.expand(&id, 100)).await;
    let runner = runner(&t.store);
    let api = Arc::new(Api::default());
    let (ended, _) = run_chain(&runner, &id, &api, 100).await;
    assert_eq!(ended, JobState::Done);
    for chat in [1, 7, 100, 101, 250] {
        assert_eq!(api.delivered_to(chat).await, 1, "chat {chat}");
    }
    assert_eq!(api.delivered.lock().await.len(), 250, "each chat once");
    let job_now = job_of(&t.store, &id).await;
    assert!(!job_now.expanding);
    assert_eq!((job_now.counts.total, job_now.counts.sent), (250, 250));
    // Started again by a retried run: the same job, written once.
    let again = start_expanding(&*t.store, &handler("1"), &audience, SystemClock.now())
        .await
        .expect("the start is found");
    assert_eq!(again.job().id, id);

    for chat in 1..=40 {
        (t.put_state)(&bot(), chat, "subs/v1", json!({"on": chat % 4 == 0}));
    }
    let subscribed = Audience::States {
        filter: StateFilter {
            format: Some("subs/v1".into()),
            equals: Some(("/on".into(), json!(true))),
        },
    };
    let created = start_expanding(&*t.store, &handler("2"), &subscribed, SystemClock.now())
        .await
        .expect("the job starts");
    let id = created.job().id.clone();
    let api = Arc::new(Api::default());
    assert_eq!(run(&t.store, &id, &api).await, RunEnd::Done);
    let mut delivered: Vec<i64> = api.delivered.lock().await.iter().map(|(c, _)| *c).collect();
    delivered.sort_unstable();
    assert_eq!(delivered, (1..=10).map(|n| n * 4).collect::<Vec<_>>());

    let jobs = t.store.jobs().await.expect("the store answers").len();
    let too_many: Vec<i64> = (1..=MAX_LISTED as i64 + 1).collect();
    for (chats, refusal) in [
        (vec![], "the audience is empty"),
        (vec![5, 0], "line 2"),
        (too_many, "a handler's broadcast lists at most"),
    ] {
        let refused = start_expanding(
            &*t.store,
            &handler("3"),
            &Audience::Chats { chats },
            SystemClock.now(),
        )
        .await
        .expect_err("refused");
        assert!(refused.to_string().contains(refusal), "{refused}");
    }
    assert_eq!(
        t.store.jobs().await.expect("answers").len(),
        jobs,
        "nothing stored"
    );
}

/// A cancelled job's chain of steps sends nothing more: it goes over its chunks once more, from
/// the first, counts a send a process that died had begun as uncertain, lets go of what it will
/// never send, and ends.
pub async fn a_cancelled_job_s_chain_sends_nothing_and_counts_what_a_dead_process_began(
    t: BroadcastsUnderTest,
) {
    let chats: Vec<i64> = (1..=7).collect();
    let id = start(&t.store, &chats).await;
    // A process began the send to the sixth, then died.
    t.store.begin(&id, 5).await.expect("the store answers");
    t.store
        .change(&id, Change::Cancel, SystemClock.now())
        .await
        .expect("the store answers");
    let api = Arc::new(Api::default());
    let (ended, _) = run_chain(&runner(&t.store), &id, &api, 3).await;
    assert_eq!(ended, JobState::Cancelled);
    assert_eq!(*api.calls.lock().await, 0, "nothing is sent");
    let job_now = job_of(&t.store, &id).await;
    assert_eq!((job_now.counts.uncertain, job_now.counts.sent), (1, 0));
    assert_eq!(job_now.state, JobState::Cancelled);
}
