//! Several bots in one worker (docs/design/fleet.md §2): the function's own configuration and
//! fleet (the environment's bot `demo` and a registry in memory), one fake Bot API that accepts
//! every bot's token and records which token made each call. Each bot's share of a batch runs on
//! its own: one bot's flood wait, slow handler or failures hold back nothing of another's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use secrecy::SecretString;
use teloxide_core::payloads::SendMessage;
use teloxide_core::types::{Update, UpdateKind};
use tgq_aws::worker::WorkerConfig;
use tgq_core::clock::{Clock, SystemClock};
use tgq_core::config::Vars;
use tgq_core::dead::DeadReason;
use tgq_core::handlers::HandlerRegistry;
use tgq_core::ids::{BotId, RecordKey, UpdateId};
use tgq_core::ports::QueueRecord;
use tgq_core::record::Status;
use tgq_core::registry::BotEntry;
use tgq_core::worker::{BatchReport, RecordOutcome, Worker};
use tgq_core::{Context, ErrorClass, Handler, HandlerError};
use tgq_fake_telegram::{FakeTelegram, Fault, Scope, Times};
use tgq_memory::{MemoryBots, MemoryDeadLetters, MemoryStore};

const SHOP_TOKEN: &str = "111:SHOP";
const NEWS_TOKEN: &str = "222:NEWS";

/// Fails every update for good.
struct Broken;

#[async_trait]
impl Handler for Broken {
    async fn handle(&self, _: Update, _: &mut Context<'_>) -> Result<(), HandlerError> {
        Err(HandlerError::permanent(
            "this bot's backend refuses everything",
        ))
    }
}

/// Takes its time, then answers.
struct Slow;

#[async_trait]
impl Handler for Slow {
    async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        tokio::time::sleep(SLOW).await;
        if let UpdateKind::Message(message) = &update.kind {
            ctx.send(SendMessage::new(message.chat.id, "slow answer"))
                .await?;
        }
        Ok(())
    }
}

const SLOW: Duration = Duration::from_secs(3);

/// The handlers of this test's `bot/`: the built-in echo, a broken one, a slow one, and the echo
/// bot behind a build that takes its time (it would connect to its backend).
fn handlers() -> HandlerRegistry {
    HandlerRegistry::new()
        .with("broken", |_| async { Ok(Broken) })
        .with("slow", |_| async { Ok(Slow) })
        .with("slow_to_build", |_| async {
            tokio::time::sleep(SLOW).await;
            Ok(tgq_core::echo::EchoBot)
        })
}

fn bot(id: &str, token: &str, handler: &str) -> BotEntry {
    BotEntry {
        id: BotId::new(id).unwrap(),
        token: Some(SecretString::from(token.to_owned())),
        secret: Some(SecretString::from(format!("{id}-secret"))),
        handler: handler.to_owned(),
        allowed_updates: Vec::new(),
    }
}

struct Rig {
    worker: Worker,
    fake: FakeTelegram,
    store: Arc<MemoryStore>,
    dead: Arc<MemoryDeadLetters>,
    registry: Arc<MemoryBots>,
}

/// The worker as the function builds it: `demo` from the environment (echo), the registry holding
/// `bots`, read again after `refresh_secs`.
async fn rig(bots: Vec<BotEntry>, refresh_secs: &str) -> Rig {
    let fake = FakeTelegram::start().await.unwrap();
    for token in [SHOP_TOKEN, NEWS_TOKEN, "333:NEW"] {
        fake.accept_token(token);
    }
    let url = fake.url();
    let vars = Vars::from_pairs([
        ("TELEGRAM_BOT_TOKEN", fake.token()),
        ("TELEGRAM_API_URL", url.as_str()),
        ("TGQ_BOT_ID", "demo"),
        ("TGQ_HANDLER", "echo"),
        ("TGQ_BOTS_PARAMETER_PREFIX", "/tgq/test/bots/"),
        ("TGQ_REGISTRY_REFRESH_SECS", refresh_secs),
        ("TGQ_TABLE", "t"),
        ("TGQ_QUEUE_URL", "q"),
        ("TGQ_DLQ_URL", "d"),
    ]);
    let config = WorkerConfig::from_vars(&vars).unwrap();
    let registry = Arc::new(MemoryBots::new(bots));
    let env_token = SecretString::from(fake.token().to_owned());
    let fleet = config
        .fleet(&vars, handlers(), Some(env_token), Some(registry.clone()))
        .await
        .unwrap();
    let store = Arc::new(MemoryStore::new());
    let dead = Arc::new(MemoryDeadLetters::new());
    let ports = tgq_memory::worker_ports(&store, dead.clone(), Arc::new(SystemClock));
    Rig {
        worker: Worker::new(config.settings, ports, Arc::new(fleet)),
        fake,
        store,
        dead,
        registry,
    }
}

/// The rig with two echo bots, `shop` and `news`, the registry read every 30 s.
async fn shop_and_news() -> Rig {
    rig(
        vec![
            bot("shop", SHOP_TOKEN, "echo"),
            bot("news", NEWS_TOKEN, "echo"),
        ],
        "30",
    )
    .await
}

/// A message from the private chat `chat` to `bot`, as the updates queue delivers it.
fn record(bot: &str, update_id: i64, chat: i64) -> QueueRecord {
    let body = serde_json::json!({
        "update_id": update_id,
        "message": {
            "message_id": update_id,
            "date": 1767607201,
            "chat": {"id": chat, "type": "private", "first_name": "A"},
            "from": {"id": chat, "is_bot": false, "first_name": "A"},
            "text": format!("hi {update_id}"),
        },
    });
    let message: aws_lambda_events::event::sqs::SqsMessage =
        serde_json::from_value(serde_json::json!({
            "messageId": format!("m-{bot}-{update_id}"),
            "receiptHandle": format!("r-{bot}-{update_id}"),
            "body": body.to_string(),
            "attributes": {
                "MessageGroupId": format!("{bot}:{chat}"),
                "ApproximateReceiveCount": "1",
            },
        }))
        .unwrap();
    tgq_aws::worker::queue_record(message).unwrap()
}

async fn run(rig: &Rig, records: &[QueueRecord]) -> BatchReport {
    let deadline = SystemClock.now().plus(Duration::from_secs(60));
    rig.worker.process_batch(records, deadline).await
}

fn outcome<'r>(report: &'r BatchReport, bot: &str, update_id: i64) -> &'r RecordOutcome {
    let id = format!("m-{bot}-{update_id}");
    &report
        .outcomes
        .iter()
        .find(|(message_id, _)| *message_id == id)
        .unwrap()
        .1
}

/// The tokens the fake saw on delivered sends to `chat`.
fn tokens_to(fake: &FakeTelegram, chat: i64) -> Vec<String> {
    fake.delivered_to(chat)
        .into_iter()
        .map(|call| call.token)
        .collect()
}

fn key(bot: &str, update_id: i64) -> RecordKey {
    RecordKey::new(BotId::new(bot).unwrap(), UpdateId(update_id))
}

#[tokio::test]
async fn each_bot_s_replies_go_out_with_its_own_token_and_the_environment_s_bot_runs_as_before() {
    let rig = shop_and_news().await;
    let report = run(
        &rig,
        &[
            record("shop", 1, 111),
            record("demo", 2, 333),
            record("news", 3, 222),
        ],
    )
    .await;
    assert!(report.failed_message_ids().is_empty(), "{report:?}");
    assert_eq!(tokens_to(&rig.fake, 111), [SHOP_TOKEN]);
    assert_eq!(tokens_to(&rig.fake, 222), [NEWS_TOKEN]);
    assert_eq!(tokens_to(&rig.fake, 333), [rig.fake.token()]);
    assert_eq!(rig.registry.reads(), 1, "one read for the whole batch");
}

#[tokio::test]
async fn a_flood_wait_of_one_bot_pauses_its_own_sends_and_nothing_of_another_s() {
    let rig = shop_and_news().await;
    // Telegram asks shop to wait 30 s after its send to chat 111.
    rig.fake
        .inject(Fault::RetryAfter(30), Scope::Chat(111), Times::Always);
    let started = Instant::now();
    let report = run(
        &rig,
        &[
            record("shop", 1, 111),
            record("shop", 2, 112),
            record("news", 3, 222),
            record("news", 4, 223),
        ],
    )
    .await;
    let took = started.elapsed();
    // Shop's wait holds both of shop's chats (Telegram's pause is per bot) and spends no attempt.
    for update_id in [1, 2] {
        assert!(
            matches!(
                outcome(&report, "shop", update_id),
                RecordOutcome::Retrying(_, ErrorClass::RateLimited(_))
            ),
            "{report:?}"
        );
    }
    assert!(rig.fake.delivered_to(112).is_empty());
    // News in the same batch is neither paused nor kept waiting.
    for update_id in [3, 4] {
        assert!(
            matches!(outcome(&report, "news", update_id), RecordOutcome::Done(_)),
            "{report:?}"
        );
    }
    assert_eq!(tokens_to(&rig.fake, 222), [NEWS_TOKEN]);
    assert_eq!(tokens_to(&rig.fake, 223), [NEWS_TOKEN]);
    assert!(
        took < Duration::from_secs(10),
        "the batch waited for shop's 30 s: {took:?}"
    );
    // A later batch of news alone is not paused either.
    let next = run(&rig, &[record("news", 5, 224)]).await;
    assert!(matches!(outcome(&next, "news", 5), RecordOutcome::Done(_)));
}

#[tokio::test]
async fn a_short_flood_wait_gives_the_bot_s_updates_back_instead_of_holding_the_invocation() {
    let rig = shop_and_news().await;
    // A 3 s flood wait: a single-bot worker sits it out inside the run (up to 5 s); with a
    // registry the invocation carries other bots' updates too, and the next invocation of the
    // mapping waits for it, so shop's later updates go back to the queue for the 3 s instead.
    rig.fake
        .inject(Fault::RetryAfter(3), Scope::Chat(111), Times::Once);
    let started = Instant::now();
    let report = run(
        &rig,
        &[
            record("shop", 1, 111),
            record("shop", 2, 112),
            record("news", 3, 222),
        ],
    )
    .await;
    let took = started.elapsed();
    assert!(
        matches!(
            outcome(&report, "shop", 2),
            RecordOutcome::Retrying(wait, ErrorClass::RateLimited(_)) if *wait >= Duration::from_secs(2)
        ),
        "{report:?}"
    );
    assert!(
        rig.fake.delivered_to(112).is_empty(),
        "not sent inside the run"
    );
    assert!(matches!(
        outcome(&report, "news", 3),
        RecordOutcome::Done(_)
    ));
    assert!(
        took < Duration::from_secs(2),
        "the invocation sat out shop's flood wait: {took:?}"
    );
}

/// Runs shop (with `handler`, slow in some way) first and news (echo) second in one batch, and
/// checks that news's reply went out while shop was still held up.
async fn news_is_not_held_up_by_shop(handler: &str, by_what: &str) {
    let rig = rig(
        vec![
            bot("shop", SHOP_TOKEN, handler),
            bot("news", NEWS_TOKEN, "echo"),
        ],
        "30",
    )
    .await;
    let report = run(&rig, &[record("shop", 1, 111), record("news", 2, 222)]).await;
    assert!(report.failed_message_ids().is_empty(), "{report:?}");
    let shop = &rig.fake.delivered_to(111)[0];
    let news = &rig.fake.delivered_to(222)[0];
    // Shop comes first in the batch, yet news's reply is out while shop is still held up.
    assert!(
        news.at + SLOW - Duration::from_millis(500) < shop.at,
        "news waited for shop's {by_what}: news at {:?}, shop at {:?}",
        news.at,
        shop.at
    );
}

#[tokio::test]
async fn a_slow_bot_holds_back_nothing_of_another_bot_in_the_same_batch() {
    news_is_not_held_up_by_shop("slow", "handler").await;
}

#[tokio::test]
async fn a_bot_slow_to_build_holds_back_no_other_bot_met_in_the_same_batch() {
    news_is_not_held_up_by_shop("slow_to_build", "handler to be built").await;
}

#[tokio::test]
async fn a_bot_failing_for_good_is_dead_lettered_and_another_bot_is_unaffected() {
    let rig = rig(
        vec![
            bot("shop", SHOP_TOKEN, "broken"),
            bot("news", NEWS_TOKEN, "echo"),
        ],
        "30",
    )
    .await;
    let report = run(
        &rig,
        &[
            record("shop", 1, 111),
            record("news", 2, 222),
            record("shop", 3, 111),
            record("news", 4, 222),
        ],
    )
    .await;
    for update_id in [1, 3] {
        assert_eq!(
            outcome(&report, "shop", update_id),
            &RecordOutcome::DeadLettered(DeadReason::Permanent)
        );
    }
    for update_id in [2, 4] {
        assert!(matches!(
            outcome(&report, "news", update_id),
            RecordOutcome::Done(_)
        ));
    }
    assert_eq!(tokens_to(&rig.fake, 222), [NEWS_TOKEN, NEWS_TOKEN]);
    let letters = rig.dead.letters();
    assert_eq!(letters.len(), 2);
    assert!(letters
        .iter()
        .all(|letter| letter.bot_id.as_str() == "shop"));
}

#[tokio::test]
async fn a_record_of_a_bot_nobody_knows_is_dead_lettered_as_unknown_bot_after_one_reread() {
    let rig = rig(vec![bot("news", NEWS_TOKEN, "echo")], "30").await;
    // The registry was read by an earlier batch, long enough ago for a miss to read it again.
    run(&rig, &[record("news", 1, 222)]).await;
    tokio::time::sleep(tgq_core::defaults::REGISTRY_MISS_REREAD + Duration::from_millis(100)).await;
    let report = run(&rig, &[record("ghost", 2, 111), record("news", 3, 222)]).await;
    assert_eq!(
        outcome(&report, "ghost", 2),
        &RecordOutcome::DeadLettered(DeadReason::UnknownBot)
    );
    assert!(matches!(
        outcome(&report, "news", 3),
        RecordOutcome::Done(_)
    ));
    assert_eq!(
        rig.registry.reads(),
        2,
        "read again once for the unknown bot"
    );
    assert!(report.failed_message_ids().is_empty(), "acknowledged");
    assert_eq!(
        rig.store.record(&key("ghost", 2)).unwrap().status,
        Status::Dead
    );
    let letter = &rig.dead.letters()[0];
    assert_eq!(letter.reason, DeadReason::UnknownBot);
    assert!(letter.error.contains("ghost"), "{}", letter.error);
}

#[tokio::test]
async fn a_bot_naming_a_handler_bot_does_not_have_is_dead_lettered_as_unknown_handler() {
    let rig = rig(
        vec![
            bot("shop", SHOP_TOKEN, "ecoh"),
            bot("news", NEWS_TOKEN, "echo"),
        ],
        "30",
    )
    .await;
    let report = run(&rig, &[record("shop", 1, 111), record("news", 2, 222)]).await;
    assert_eq!(
        outcome(&report, "shop", 1),
        &RecordOutcome::DeadLettered(DeadReason::UnknownHandler)
    );
    assert!(matches!(
        outcome(&report, "news", 2),
        RecordOutcome::Done(_)
    ));
    let letter = &rig.dead.letters()[0];
    assert_eq!(letter.reason, DeadReason::UnknownHandler);
    assert!(
        letter.error.contains("\"ecoh\"")
            && letter.error.contains("broken, slow, slow_to_build, echo"),
        "the letter names the handler and the ones there are: {}",
        letter.error
    );
    assert!(rig.fake.delivered_to(111).is_empty());
}

#[tokio::test]
async fn a_registry_that_cannot_be_read_backs_off_its_bots_without_spending_an_attempt() {
    let rig = rig(vec![bot("shop", SHOP_TOKEN, "echo")], "30").await;
    rig.registry.outage.set(true);
    let report = run(&rig, &[record("shop", 1, 111), record("demo", 2, 333)]).await;
    assert!(
        matches!(
            outcome(&report, "shop", 1),
            RecordOutcome::StoreUnavailable(_)
        ),
        "{report:?}"
    );
    assert!(
        rig.store.record(&key("shop", 1)).is_none(),
        "not even claimed: no attempt spent"
    );
    assert!(matches!(
        outcome(&report, "demo", 2),
        RecordOutcome::Done(_)
    ));
    rig.registry.outage.set(false);
    let report = run(&rig, &[record("shop", 1, 111)]).await;
    assert!(matches!(
        outcome(&report, "shop", 1),
        RecordOutcome::Done(_)
    ));
    assert_eq!(rig.store.record(&key("shop", 1)).unwrap().attempts, 1);
}

#[tokio::test]
async fn a_changed_token_and_a_bot_added_are_picked_up_within_the_refresh_interval() {
    let rig = rig(vec![bot("shop", SHOP_TOKEN, "echo")], "1").await;
    run(&rig, &[record("shop", 1, 111)]).await;
    rig.registry.put(bot("shop", "333:NEW", "echo"));
    rig.registry.put(bot("news", NEWS_TOKEN, "echo"));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let report = run(&rig, &[record("shop", 2, 111), record("news", 3, 222)]).await;
    assert!(report.failed_message_ids().is_empty(), "{report:?}");
    assert_eq!(tokens_to(&rig.fake, 111), [SHOP_TOKEN, "333:NEW"]);
    assert_eq!(tokens_to(&rig.fake, 222), [NEWS_TOKEN]);
}
