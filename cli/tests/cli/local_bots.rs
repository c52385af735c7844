//! `tgq local` hosting the bots of `<data-dir>/bots.json` besides its own
//! (docs/design/fleet.md §2), over real HTTP: each bot on `/webhook/{bot_id}` with its own secret,
//! its replies sent with its own token (or to the outbox, tagged with the bot, when it has none),
//! each counted under its own `BotId`, and a change of `bots.json` picked up without a restart.

use crate::common;

use std::time::{Duration, Instant};

use common::{message_update, Local};
use secrecy::SecretString;
use serde_json::Value;
use tgq_core::echo::reply_text;
use tgq_core::ids::BotId;
use tgq_core::registry::BotEntry;
use tgq_embedded::BotsFile;
use tgq_fake_telegram::FakeTelegram;

const SECRET: &str = "local-bot-secret";
const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";
const NEWS_TOKEN: &str = "222:NEWS";

fn bot(id: &str, token: Option<&str>) -> BotEntry {
    BotEntry {
        id: BotId::new(id).unwrap(),
        token: token.map(|token| SecretString::from(token.to_owned())),
        secret: Some(SecretString::from(format!("{id}-secret"))),
        handler: "echo".to_owned(),
        allowed_updates: Vec::new(),
    }
}

async fn post(local: &Local, path: &str, secret: &str, update_id: i64, chat: i64) -> u16 {
    let body = message_update(update_id, chat, &format!("to {path}")).to_string();
    reqwest::Client::new()
        .post(local.url(path))
        .header(SECRET_HEADER, secret)
        .body(body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn outbox(local: &Local) -> Vec<Value> {
    let answer: Value = reqwest::get(local.admin_url("/admin/outbox"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["result"].as_array().unwrap().clone()
}

/// Posts until the answer is `expected` (a registry change being picked up), for at most `within`.
async fn post_until(
    local: &Local,
    (path, secret, update_id, chat): (&str, &str, i64, i64),
    expected: u16,
    within: Duration,
) -> Duration {
    let started = Instant::now();
    loop {
        let status = post(local, path, secret, update_id, chat).await;
        if status == expected {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "{path} still answers {status}, not {expected}, after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_bots_of_bots_json_are_served_on_their_paths_and_reply_as_themselves() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeTelegram::start().await.unwrap();
    fake.accept_token(NEWS_TOKEN);
    // shop has no token (its replies go to the outbox), news has one (its replies go to the fake).
    BotsFile::in_dir(dir.path())
        .write(&[bot("shop", None), bot("news", Some(NEWS_TOKEN))])
        .unwrap();
    let url = fake.url();
    let envs = [
        ("TGQ_WEBHOOK_SECRET", SECRET),
        ("TGQ_HANDLER", "echo"),
        ("TELEGRAM_API_URL", url.as_str()),
        ("TGQ_REGISTRY_REFRESH_SECS", "1"),
    ];
    let mut local = Local::start(dir.path(), &envs, &[]);
    local.wait_ready().await;

    assert_eq!(
        post(&local, "/webhook/shop", "shop-secret", 1, 11).await,
        200
    );
    assert_eq!(
        post(&local, "/webhook/news", "news-secret", 2, 22).await,
        200
    );
    assert_eq!(post(&local, "/webhook", SECRET, 3, 33).await, 200);
    // Nobody by that id; another bot's secret; the environment's bot's secret on a registry path.
    assert_eq!(
        post(&local, "/webhook/ghost", "shop-secret", 4, 44).await,
        404
    );
    assert_eq!(
        post(&local, "/webhook/shop", "news-secret", 5, 11).await,
        401
    );
    assert_eq!(post(&local, "/webhook/shop", SECRET, 6, 11).await, 401);
    assert_eq!(post(&local, "/webhook", "shop-secret", 7, 33).await, 401);

    local
        .wait_settled(Duration::from_secs(20), |s| s["counters"]["processed"] == 3)
        .await;
    let status = local.status().await;
    assert_eq!(
        status["stats"]["records"], 3,
        "nothing refused was written: {status}"
    );
    let mut offline: Vec<(String, i64, String)> = outbox(&local)
        .await
        .iter()
        .map(|entry| {
            (
                entry["bot_id"].as_str().unwrap().to_owned(),
                entry["chat_id"].as_i64().unwrap(),
                entry["text"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    offline.sort();
    assert_eq!(
        offline,
        [
            ("local".to_owned(), 33, reply_text(3, "to /webhook")),
            ("shop".to_owned(), 11, reply_text(1, "to /webhook/shop")),
        ]
    );
    let news: Vec<(String, String)> = fake
        .delivered_to(22)
        .into_iter()
        .map(|call| (call.token, call.params["text"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(
        news,
        [(NEWS_TOKEN.to_owned(), reply_text(2, "to /webhook/news"))]
    );

    let metrics = reqwest::get(local.admin_url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for bot in ["local", "shop", "news"] {
        let processed = format!("tgq_processed_total{{bot_id=\"{bot}\"}} 1");
        assert!(metrics.contains(&processed), "{processed} in\n{metrics}");
    }
    local.terminate().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_change_of_bots_json_is_picked_up_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let file = BotsFile::in_dir(dir.path());
    file.write(&[bot("shop", None)]).unwrap();
    let envs = [
        ("TGQ_WEBHOOK_SECRET", SECRET),
        ("TGQ_HANDLER", "echo"),
        ("TGQ_REGISTRY_REFRESH_SECS", "1"),
    ];
    let mut local = Local::start(dir.path(), &envs, &[]);
    local.wait_ready().await;
    assert_eq!(
        post(&local, "/webhook/late", "late-secret", 1, 11).await,
        404
    );

    file.write(&[bot("shop", None), bot("late", None)]).unwrap();
    let added = post_until(
        &local,
        ("/webhook/late", "late-secret", 2, 12),
        200,
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(
        post(&local, "/webhook/shop", "shop-secret", 3, 13).await,
        200
    );
    file.write(&[bot("late", None)]).unwrap();
    let removed = post_until(
        &local,
        ("/webhook/shop", "shop-secret", 3, 13),
        404,
        Duration::from_secs(5),
    )
    .await;
    eprintln!("bot added served after {added:?}, bot removed refused after {removed:?}");
    local
        .wait_settled(Duration::from_secs(20), |s| s["counters"]["processed"] == 2)
        .await;
    let mut bots: Vec<String> = outbox(&local)
        .await
        .iter()
        .map(|entry| entry["bot_id"].as_str().unwrap().to_owned())
        .collect();
    bots.sort();
    assert_eq!(bots, ["late", "shop"]);
    local.terminate().await;
}
