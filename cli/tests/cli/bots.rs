//! `tgq bots add|list|remove` on local mode's registry (`<data-dir>/bots.json`), against the fake
//! Bot API: every refusal comes before anything is written, the token is tried with getMe, the
//! generated secret is the one the webhook is set with, and neither is ever printed. The same
//! commands with `--stack` are in `aws.rs`.

use crate::common;

use std::path::Path;

use common::run;
use serde_json::Value;
use tempfile::TempDir;
use tgq_fake_telegram::FakeTelegram;

const URL: &str = "https://bots.example.com/webhook/shop";

/// A fake Bot API, its own bot's token, and a data directory for local mode's registry.
struct Setup {
    fake: FakeTelegram,
    token: String,
    dir: TempDir,
}

impl Setup {
    async fn new() -> Setup {
        let fake = FakeTelegram::start().await.unwrap();
        Setup {
            token: fake.token().to_owned(),
            fake,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// The data directory.
    fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `tgq bots ARGS --data-dir DIR` against the fake with `token`: (exit code, stdout, stderr).
    fn bots(&self, token: Option<&str>, args: &[&str]) -> (i32, String, String) {
        let api = self.fake.url();
        let mut envs = vec![("TELEGRAM_API_URL", api.as_str())];
        if let Some(token) = token {
            envs.push(("TELEGRAM_BOT_TOKEN", token));
        }
        let mut all = vec!["bots"];
        all.extend_from_slice(args);
        let dir = self.dir().display().to_string();
        all.extend(["--data-dir", dir.as_str()]);
        let (status, stdout, stderr) = run(&envs, &all);
        (status.code().unwrap_or(-1), stdout, stderr)
    }

    /// `tgq bots add ID --handler echo --webhook-url URL` with `token`.
    fn add(&self, token: &str, id: &str, url: &str) -> (i32, String, String) {
        self.bots(
            Some(token),
            &["add", id, "--handler", "echo", "--webhook-url", url],
        )
    }

    /// Adds the bot `shop` with the fake's own token and [`URL`]; it succeeds.
    fn add_shop(&self) {
        let (code, _, stderr) = self.add(&self.token, "shop", URL);
        assert_eq!(code, 0, "{stderr}");
    }

    /// Adds the bot `news` offline, without a token; it succeeds.
    fn add_news_offline(&self) {
        let (code, _, stderr) = self.bots(None, &["add", "news", "--offline", "--handler", "echo"]);
        assert_eq!(code, 0, "{stderr}");
    }
}

/// Asserts that a `tgq bots` run exited with `code` and that its stderr says each of `says`.
fn assert_refused(run: (i32, String, String), code: i32, says: &[&str]) {
    let (exit, _, stderr) = run;
    assert_eq!(exit, code, "{stderr}");
    for part in says {
        assert!(stderr.contains(part), "{part:?} in {stderr}");
    }
}

fn registry(dir: &Path) -> Value {
    let text = std::fs::read(dir.join("bots.json")).unwrap_or_else(|_| b"{\"bots\": []}".to_vec());
    serde_json::from_slice(&text).expect("bots.json parses")
}

/// The bot `id` of what `tgq bots list --json` printed.
fn listed_bot<'a>(listed: &'a Value, id: &str) -> &'a Value {
    listed["bots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["id"] == id)
        .unwrap()
}

fn ids(dir: &Path) -> Vec<String> {
    registry(dir)["bots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|bot| bot["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bot_added_is_checked_with_get_me_written_with_a_fresh_secret_and_its_webhook_set() {
    let setup = Setup::new().await;

    let (code, stdout, stderr) = setup.bots(
        Some(&setup.token),
        &[
            "add",
            "shop",
            "--handler",
            "echo",
            "--webhook-url",
            URL,
            "--max-connections",
            "5",
        ],
    );
    assert_eq!(code, 0, "{stderr}\n{stdout}");
    assert_eq!(ids(setup.dir()), ["shop"]);
    let stored = &registry(setup.dir())["bots"][0];
    assert_eq!(stored["handler"], "echo");
    assert_eq!(stored["token"], setup.token.as_str());
    let secret = stored["secret"].as_str().unwrap().to_owned();
    assert!(secret.len() >= 32, "a long random secret");

    let calls = setup.fake.calls();
    let methods: Vec<&str> = calls.iter().map(|c| c.method.as_str()).collect();
    assert_eq!(
        methods,
        ["getMe", "setWebhook"],
        "the token is tried before the webhook is set"
    );
    let set = &calls[1];
    assert_eq!(set.params["url"], URL);
    assert_eq!(set.params["secret_token"], secret.as_str());
    assert_eq!(set.params["max_connections"], 5);
    assert!(
        set.params["allowed_updates"]
            .as_array()
            .is_some_and(|kinds| kinds.contains(&Value::from("callback_query"))),
        "the echo handler's kinds: {}",
        set.params["allowed_updates"]
    );
    for printed in [&stdout, &stderr] {
        assert!(
            !printed.contains(&secret) && !printed.contains(&setup.token),
            "{printed}"
        );
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(setup.dir().join("bots.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "bots.json holds tokens: its owner's only");
    }

    // A second bot registered offline, then both listed.
    setup.add_news_offline();
    let (code, stdout, stderr) = setup.bots(None, &["list", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let listed: Value = serde_json::from_str(&stdout).expect("list --json is JSON");
    let shop = listed_bot(&listed, "shop");
    assert_eq!(shop["webhook_url"], URL);
    assert_eq!(shop["pending_update_count"], 0);
    assert_eq!(shop["handler"], "echo");
    let news = listed_bot(&listed, "news");
    assert_eq!(news["telegram_user_id"], Value::Null, "offline: no token");
    assert!(
        !stdout.contains(&secret) && !stdout.contains(&setup.token),
        "{stdout}"
    );
    let (code, text, _) = setup.bots(None, &["list"]);
    assert_eq!(code, 0);
    for part in ["shop", "news", URL, "pending updates   0", "offline"] {
        assert!(text.contains(part), "{part} in {text}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_id_token_handler_or_duplicate_is_refused_by_name_before_anything_is_written() {
    let setup = Setup::new().await;

    assert_refused(
        setup.bots(
            Some(&setup.token),
            &["add", "bad id!", "--webhook-url", URL],
        ),
        2,
        &["bad id!", "1–64"],
    );
    let long = "a".repeat(65);
    let (code, _, stderr) = setup.bots(Some(&setup.token), &["add", &long, "--webhook-url", URL]);
    assert_eq!(code, 2, "{stderr}");

    assert_refused(
        setup.bots(
            Some(&setup.token),
            &["add", "shop", "--handler", "nope", "--webhook-url", URL],
        ),
        1,
        &["\"nope\"", "echo"],
    );

    assert_refused(
        setup.bots(
            Some("123:wrong-token"),
            &["add", "shop", "--webhook-url", URL],
        ),
        1,
        &["shop", "token"],
    );
    assert_refused(
        setup.bots(Some("not a token"), &["add", "shop", "--webhook-url", URL]),
        1,
        &["@BotFather"],
    );
    assert!(!setup.dir().join("bots.json").exists(), "nothing written");
    assert!(
        setup.fake.calls().iter().all(|c| c.method == "getMe"),
        "no webhook set: {:?}",
        setup.fake.calls()
    );

    setup.add_shop();
    let before = std::fs::read(setup.dir().join("bots.json")).unwrap();
    // Another bot's token under the same id: refused for the id, not for the token.
    let other = "4242:another-bot-token";
    setup.fake.accept_token(other);
    assert_refused(
        setup.add(other, "shop", URL),
        1,
        &["a bot shop is already registered"],
    );
    assert_refused(
        setup.add(&setup.token, "shop2", URL),
        1,
        &["already registered as shop"],
    );
    assert_eq!(
        std::fs::read(setup.dir().join("bots.json")).unwrap(),
        before,
        "unchanged"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_telegram_refuses_takes_the_bot_out_again_so_the_same_add_can_be_run_later() {
    let setup = Setup::new().await;
    assert_refused(
        setup.add(&setup.token, "shop", "https://nowhere.invalid/webhook/shop"),
        1,
        &["Failed to resolve host", "taken out"],
    );
    assert!(
        ids(setup.dir()).is_empty(),
        "not left registered without a webhook"
    );
    setup.add_shop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bot_removed_has_its_webhook_deleted_and_leaves_the_registry() {
    let setup = Setup::new().await;
    setup.add_shop();
    setup.add_news_offline();

    let (code, _, stderr) = setup.bots(None, &["remove", "ghost"]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("no bot ghost") && stderr.contains("news, shop")
            || stderr.contains("shop, news"),
        "{stderr}"
    );

    let (code, stdout, stderr) = setup.bots(None, &["remove", "shop"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("removed"), "{stdout}");
    assert_eq!(ids(setup.dir()), ["news"]);
    assert_eq!(
        setup
            .fake
            .calls()
            .last()
            .map(|c| c.method.clone())
            .as_deref(),
        Some("deleteWebhook"),
        "with the bot's own token, from the registry"
    );
}
