//! Timers through the kit: each fires once, in its chat, and only while the chat still names it.

use std::time::Duration;

use tgq::prelude::*;
use tgq::{MAX_TIMERS_PER_CHAT, MAX_TIMER_PAYLOAD_BYTES};
use tgq_test::{Call, Failure, Outcome, TestBot};

const MINUTE: Duration = Duration::from_secs(60);

/// `/remind N` schedules "remind" N minutes ahead, `/cancel` cancels it, `/again` schedules it
/// twice in one run, `/past` schedules it an hour ago, `/bad WHAT` tries a schedule that breaks a
/// limit and replies with the error. A fired "remind" sends `reminder: PAYLOAD`.
struct Reminder {
    /// Schedule only on the update's first run (to leave a handed-over timer behind a crash).
    first_run_only: bool,
}

#[async_trait]
impl Handler for Reminder {
    async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        let UpdateKind::Message(m) = &update.kind else {
            let error = ctx.schedule("remind", MINUTE, &"no chat").unwrap_err();
            return Err(HandlerError::permanent(error.to_string()));
        };
        let text = m.text().unwrap_or_default();
        let mut words = text.split_whitespace();
        match (words.next(), words.next()) {
            (Some("/remind"), Some(minutes)) => {
                if self.first_run_only && ctx.attempt() > 1 {
                    return Ok(());
                }
                let minutes: u64 = minutes.parse().unwrap_or(1);
                ctx.schedule("remind", MINUTE * minutes as u32, &text)?;
                ctx.reply(m, "scheduled").await
            }
            (Some("/again"), _) => {
                ctx.schedule("remind", MINUTE, &"first")?;
                ctx.schedule("remind", MINUTE * 2, &"second")?;
                ctx.reply(m, "scheduled").await
            }
            (Some("/past"), _) => {
                let an_hour_ago = std::time::SystemTime::now() - 60 * MINUTE;
                ctx.schedule("remind", an_hour_ago, &"late")?;
                Ok(())
            }
            (Some("/cancel"), _) => {
                let was = ctx.cancel_timer("remind");
                ctx.reply(m, format!("cancelled: {was}")).await
            }
            (Some("/bad"), Some(what)) => {
                let error = match what {
                    "key" => ctx.schedule("tgq:mine", MINUTE, &()),
                    "far" => ctx.schedule("k", MINUTE * 60 * 24 * 367, &()),
                    "payload" => ctx.schedule("k", MINUTE, &"x".repeat(MAX_TIMER_PAYLOAD_BYTES)),
                    _ => {
                        let mut last = Ok(());
                        for n in 0..=MAX_TIMERS_PER_CHAT {
                            last = ctx.schedule(&format!("k{n}"), MINUTE, &n);
                        }
                        last
                    }
                }
                .unwrap_err();
                assert!(matches!(error, HandlerError::Timer(_)), "{error:?}");
                ctx.reply(m, error.to_string()).await
            }
            _ => Ok(()),
        }
    }

    async fn timer(&self, fired: Fired, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        let payload: String = fired.payload()?;
        let chat = ChatId(fired.chat_id);
        ctx.send(SendMessage::new(chat, format!("reminder: {payload}")))
            .await
            .map(|_| ())
    }
}

fn reminder() -> TestBot {
    TestBot::handler(Reminder {
        first_run_only: false,
    })
}

#[tokio::test]
async fn a_timer_fires_once_in_its_chat_when_it_is_due_and_not_before() {
    let mut bot = reminder();
    assert!(bot.text(1, "/remind 10").await.is_done());
    assert_eq!(bot.timers(1).len(), 1);
    assert!(bot.advance(MINUTE * 9).await.is_empty(), "not due yet");

    let fired = bot.advance(MINUTE).await;
    assert_eq!(fired.len(), 1);
    assert!(fired[0].is_done(), "{:?}", fired[0].outcome);
    assert_eq!(fired[0].texts(), ["reminder: /remind 10"]);
    assert_eq!(fired[0].sent[0].chat, Some(1));
    assert!(bot.timers(1).is_empty(), "the run that fired it removed it");
    assert!(bot.advance(MINUTE * 60).await.is_empty(), "fired once");
}

#[tokio::test]
async fn a_retried_run_and_a_key_scheduled_twice_in_a_run_make_one_timer() {
    let mut bot = reminder();
    bot.fail(
        Call::method("sendMessage").chat(1),
        Failure::api(502, "Bad Gateway"),
    );
    let failed = bot.text(1, "/remind 5").await;
    assert!(matches!(failed.outcome, Outcome::Retrying(_)), "{failed:?}");
    assert_eq!(bot.timers_held(), 0, "a failed run hands nothing over");
    assert!(bot.again().await.is_done());
    assert!(bot.text(2, "/again").await.is_done());
    assert_eq!(bot.timers_held(), 2, "one per chat");

    let fired = bot.advance(MINUTE * 5).await;
    let texts: Vec<Vec<&str>> = fired.iter().map(|r| r.texts()).collect();
    assert_eq!(
        texts,
        [vec!["reminder: second"], vec!["reminder: /remind 5"]],
        "chat 2's second schedule replaced its first"
    );
}

#[tokio::test]
async fn a_cancelled_or_replaced_timer_arrives_and_does_not_run() {
    let mut bot = reminder();
    bot.text(1, "/remind 10").await;
    assert_eq!(bot.text(1, "/cancel").await.texts(), ["cancelled: true"]);
    assert_eq!(bot.text(1, "/cancel").await.texts(), ["cancelled: false"]);
    let arrived = bot.advance(MINUTE * 10).await;
    assert_eq!(arrived.len(), 1, "the scheduler still delivers it");
    assert!(arrived[0].is_done() && arrived[0].sent.is_empty());

    bot.text(1, "/remind 10").await;
    bot.text(1, "/remind 20").await;
    let stale = bot.advance(MINUTE * 10).await;
    assert_eq!(stale.len(), 1);
    assert!(stale[0].sent.is_empty(), "replaced by the later schedule");
    let fired = bot.advance(MINUTE * 10).await;
    assert_eq!(fired[0].texts(), ["reminder: /remind 20"]);
}

#[tokio::test]
async fn a_timer_handed_over_by_a_run_that_never_settled_does_not_run() {
    let mut bot = TestBot::handler(Reminder {
        first_run_only: true,
    });
    bot.crash_after(5);
    assert_eq!(bot.text(1, "/remind 1").await.outcome, Outcome::Crashed);
    assert_eq!(bot.timers_held(), 1, "handed over before the settle");
    assert!(bot.again().await.is_done(), "the retry schedules nothing");
    assert!(bot.timers(1).is_empty());
    let arrived = bot.advance(MINUTE).await;
    assert_eq!(arrived.len(), 1);
    assert!(arrived[0].sent.is_empty(), "the chat never named it");
}

#[tokio::test]
async fn a_time_in_the_past_fires_at_once() {
    let mut bot = reminder();
    bot.text(1, "/past").await;
    let fired = bot.advance(Duration::ZERO).await;
    assert_eq!(fired[0].texts(), ["reminder: late"]);
}

#[tokio::test]
async fn each_timer_limit_is_refused_naming_it() {
    let mut bot = reminder();
    let refusal = |ran: tgq_test::Ran| ran.texts()[0].to_owned();
    assert!(refusal(bot.text(1, "/bad key").await).contains("may not start with \"tgq:\""));
    assert!(refusal(bot.text(1, "/bad far").await).contains("366 days"));
    assert!(refusal(bot.text(1, "/bad payload").await).contains("4096 byte limit"));
    assert!(refusal(bot.text(1, "/bad many").await).contains("64 timers pending"));
    let no_chat = bot
        .update(serde_json::json!({"inline_query": {
            "id": "q", "from": {"id": 5, "is_bot": false, "first_name": "A"},
            "query": "", "offset": "",
        }}))
        .await;
    assert!(
        matches!(&no_chat.outcome, Outcome::DeadLettered(_)),
        "{no_chat:?}"
    );
}

/// Schedules on every text and has no `timer`.
struct Forgetful;

#[async_trait]
impl Handler for Forgetful {
    async fn handle(&self, _update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        ctx.schedule("k", MINUTE, &())
    }
}

#[tokio::test]
async fn a_timer_no_handler_takes_ends_as_a_dead_letter() {
    let mut bot = TestBot::handler(Forgetful);
    bot.text(1, "hi").await;
    let fired = bot.advance(MINUTE).await;
    assert!(
        matches!(&fired[0].outcome, Outcome::DeadLettered(_)),
        "{:?}",
        fired[0].outcome
    );
    assert_eq!(bot.dead_letters(), 1);
}
