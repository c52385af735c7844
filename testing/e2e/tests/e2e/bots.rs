//! Several bots on one stack with the real functions on moto (docs/design/fleet.md §2): two bots
//! in the SSM registry besides the stack's own, each updated through its `/webhook/{bot_id}` with
//! its own secret, and each bot's reply sent with its own token — the fake Bot API records which
//! token made each call.

use std::collections::BTreeMap;
use std::time::Duration;

use secrecy::SecretString;
use tgq_aws::SsmRegistry;
use tgq_core::ids::BotId;
use tgq_core::ingest::SECRET_HEADER;
use tgq_core::registry::{BotEntry, Layout};
use tgq_e2e::emulator::{self, record_status, Stack};
use tgq_e2e::esm::EventSourceMapping;
use tgq_e2e::functions::{Functions, WEBHOOK, WORKER};
use tgq_e2e::telegram::text_update;
use tgq_fake_telegram::FakeTelegram;

const SECRET: &str = "tgq-example-secret";
const DRAIN_LIMIT: Duration = Duration::from_secs(120);

/// A registry bot: its token, its secret, and the chat its user writes from.
struct RegistryBot {
    id: &'static str,
    token: &'static str,
    secret: &'static str,
    chat: i64,
}

const SHOP: RegistryBot = RegistryBot {
    id: "shop",
    token: "111:SHOP-TOKEN",
    secret: "shop-webhook-secret",
    chat: 41,
};
const NEWS: RegistryBot = RegistryBot {
    id: "news",
    token: "222:NEWS-TOKEN",
    secret: "news-webhook-secret",
    chat: 42,
};

impl RegistryBot {
    fn entry(&self) -> BotEntry {
        BotEntry {
            id: BotId::new(self.id).unwrap(),
            token: Some(SecretString::from(self.token.to_owned())),
            secret: Some(SecretString::from(self.secret.to_owned())),
            handler: "echo".to_owned(),
            allowed_updates: Vec::new(),
        }
    }
}

async fn post(http: &reqwest::Client, url: &str, secret: &str, update_id: i64, chat: i64) -> u16 {
    http.post(url)
        .header(SECRET_HEADER, secret)
        .json(&text_update(update_id, chat, 1, "hello"))
        .send()
        .await
        .expect("the webhook answers")
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_registry_bots_each_get_their_update_through_their_path_and_reply_with_their_token() {
    let config = emulator::sdk_config().await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let dynamo = aws_sdk_dynamodb::Client::new(&config);
    let stack = Stack::create(&config, "bots").await.unwrap();
    // A prefix of this stack's own (its table's unique name), as the template derives it.
    let prefix = format!("/tgq/{}/bots/", stack.table);
    let registry = SsmRegistry::new(
        aws_sdk_ssm::Client::new(&config),
        Layout::new(&prefix).unwrap(),
    );
    for bot in [&SHOP, &NEWS] {
        registry.put(&bot.entry()).await.unwrap();
    }
    let fake = FakeTelegram::start().await.unwrap();
    for bot in [&SHOP, &NEWS] {
        fake.accept_token(bot.token);
    }
    let mut vars: BTreeMap<String, String> = stack.function_vars("demo", SECRET, Some(&fake));
    vars.insert("TGQ_BOTS_PARAMETER_PREFIX".into(), prefix);
    let functions = Functions::start(&[WEBHOOK, WORKER], &vars).await;
    let http = reqwest::Client::new();
    let base = functions.function_url(WEBHOOK);
    let url = |bot: &str| format!("{base}webhook/{bot}");

    assert_eq!(
        post(&http, &url(SHOP.id), SHOP.secret, 920_000_001, SHOP.chat).await,
        200
    );
    assert_eq!(
        post(&http, &url(NEWS.id), NEWS.secret, 920_000_002, NEWS.chat).await,
        200
    );
    // The stack's own bot keeps the function URL's root.
    assert_eq!(post(&http, &base, SECRET, 920_000_003, 43).await, 200);
    // Nobody by that id, and one bot's secret on another's path: refused, nothing written.
    assert_eq!(
        post(&http, &url("ghost"), SHOP.secret, 920_000_004, 44).await,
        404
    );
    assert_eq!(
        post(&http, &url(SHOP.id), NEWS.secret, 920_000_005, SHOP.chat).await,
        401
    );

    EventSourceMapping::new(sqs.clone(), stack.clone(), &functions)
        .run_until_drained(|| true, DRAIN_LIMIT)
        .await
        .unwrap();
    let logs = functions.logs().display().to_string();
    for (bot, update_id, chat, token) in [
        ("shop", 920_000_001, SHOP.chat, SHOP.token),
        ("news", 920_000_002, NEWS.chat, NEWS.token),
        ("demo", 920_000_003, 43, fake.token()),
    ] {
        assert_eq!(
            record_status(&dynamo, &stack.table, bot, update_id)
                .await
                .unwrap()
                .as_deref(),
            Some("DONE"),
            "{bot}'s update; logs: {logs}"
        );
        let replies: Vec<(String, String)> = fake
            .delivered_to(chat)
            .into_iter()
            .map(|call| (call.token, call.params["text"].as_str().unwrap().to_owned()))
            .collect();
        assert_eq!(
            replies,
            [(token.to_owned(), format!("echo {update_id}: hello"))],
            "{bot}'s reply, with its own token"
        );
    }
    for (bot, update_id) in [("ghost", 920_000_004), ("shop", 920_000_005)] {
        assert_eq!(
            record_status(&dynamo, &stack.table, bot, update_id)
                .await
                .unwrap(),
            None,
            "a refused request wrote nothing"
        );
    }
    assert_eq!(
        emulator::item_count(&dynamo, &stack.table).await.unwrap(),
        3
    );
}
