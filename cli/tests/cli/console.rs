//! The console of `tgq local`, driven in a headless Chromium (tests/cli/browser.rs): what the page
//! shows of updates going through, failing, dying and replayed, and a conversation typed in it.
//! The bot is the built-in echo bot (its `/buttons` and `/remember`), whatever `bot/` holds.

use crate::browser::Browser;
use crate::common;

use std::time::Duration;

use common::{replies_per_chat, Local};
use serde_json::Value;
use tgq_fake_telegram::{FakeTelegram, Fault, Scope, Times};

const SECRET: &str = "console-test-secret";
const ADMIN_TOKEN: &str = "console-admin-token";

/// A string as a JavaScript literal.
fn js(text: &str) -> String {
    Value::from(text).to_string()
}

/// Types `text` in the console's message box and sends it.
fn type_message(browser: &mut Browser, text: &str) {
    browser.eval(&format!(
        "document.querySelector('#say input[name=text]').value = {}; \
         document.querySelector('#say button').click(); true",
        js(text)
    ));
}

/// Where the test leaves its screenshot: `TGQ_CONSOLE_SCREENSHOT` (the README's image is made
/// with `TGQ_CONSOLE_SCREENSHOT=../docs/console.png`), else the test's scratch directory.
fn screenshot_path() -> std::path::PathBuf {
    match std::env::var_os("TGQ_CONSOLE_SCREENSHOT") {
        Some(path) => path.into(),
        None => std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("console.png"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_shows_each_update_go_through_and_talks_to_the_bot_offline() {
    let dir = tempfile::tempdir().unwrap();
    let mut local = Local::start(
        dir.path(),
        &[("TGQ_WEBHOOK_SECRET", SECRET), ("TGQ_HANDLER", "echo")],
        &[],
    );
    local.wait_ready().await;
    let page = local.admin_url("/");
    let mut browser = tokio::task::block_in_place(|| {
        let mut browser = Browser::start(1360, 900);
        browser.open(&page);
        browser.wait_for("document.querySelector('#live.up')", "the event stream");
        browser
    });

    // An update posted to the webhook, as Telegram would, appears in the feed and goes to done.
    common::post_text(&local, SECRET, 500, 1001, "a note from Telegram").await;
    tokio::task::block_in_place(|| {
        browser.wait_for(
            "document.querySelector('tr[data-update=\"local:500\"] .badge.DONE')",
            "update 500 done in the feed",
        );
        browser.eval("document.querySelector('tr[data-update=\"local:500\"]').click(); true");
        browser.wait_for(
            "document.querySelector('#detail h2') && document.querySelector('#detail h2').textContent.includes('Update 500') && document.querySelectorAll('#detail .timeline li').length >= 4",
            "update 500's timeline",
        );
        let detail = browser.eval("document.querySelector('#detail').innerText");
        let detail = detail.as_str().unwrap();
        for step in [
            "received by the webhook",
            "QUEUED",
            "PROCESSING",
            "DONE",
            "sendMessage",
            "echo 500: a note from Telegram",
        ] {
            assert!(
                detail.contains(step),
                "the detail lacks `{step}`:\n{detail}"
            );
        }

        // A conversation typed in the console: a reply with buttons, a button pressed.
        browser.eval("location.hash = '#talk/1001'; true");
        browser.wait_for(
            "!document.querySelector('#view-talk').hidden",
            "the talk view",
        );
        type_message(&mut browser, "/buttons yes no");
        browser.wait_for(
            "document.querySelector('#conversation [data-callback=\"yes\"]')",
            "the bot's reply with its buttons",
        );
        browser
            .eval("document.querySelector('#conversation [data-callback=\"yes\"]').click(); true");
        browser.wait_for(
            "document.querySelector('#conversation').innerText.includes(': callback yes')",
            "the bot's answer to the pressed button",
        );
        // The state a run wrote, before and after: /remember keeps the text in the chat's state.
        type_message(&mut browser, "/remember tea at five");
        browser.wait_for(
            "[...document.querySelectorAll('#conversation .bubble.me')].some(b => b.textContent.includes('/remember') && b.querySelector('.badge.DONE'))",
            "/remember done",
        );
    });

    // Two that fail, by the echo bot's commands: one for good, one on every run.
    common::post_text(&local, SECRET, 600, 1002, "/fail permanent").await;
    common::post_text(&local, SECRET, 601, 1003, "/fail transient").await;
    tokio::task::block_in_place(|| {
        browser.eval("location.hash = '#updates'; true");
        browser.wait_for(
            "document.querySelector('tr[data-update=\"local:600\"] .badge.DEAD') && document.querySelector('tr[data-update=\"local:601\"] .badge.RETRYING')",
            "one update dead and one retrying in the feed",
        );
    });
    // Before the two failing ones comes /remember, typed last, with an id above every stored one.
    let feed: Value = admin_get(&local, "/admin/console/feed?limit=10", None).await;
    let newest = feed["result"][2]["update_id"].as_i64().unwrap();
    assert!(
        newest > 500,
        "typed updates take ids above every stored one: {feed}"
    );
    tokio::task::block_in_place(|| {
        browser.eval(&format!("location.hash = '#update/local/{newest}'; true"));
        browser.wait_for(
            "document.querySelector('#detail').innerText.includes('before the run')",
            "the state before and after /remember's run",
        );
        let detail = browser.text();
        assert!(detail.contains("after it"), "{detail}");
        assert!(
            detail.contains("\"said\": \"/remember tea at five\""),
            "the state the run wrote:\n{detail}"
        );
        // The README's picture: the update that asked for buttons, with the reply it got.
        let buttons = newest - 2;
        browser.eval(&format!("location.hash = '#update/local/{buttons}'; true"));
        browser.wait_for(
            &format!("document.querySelector('#detail h2').textContent.includes('Update {buttons}') && document.querySelector('#detail [data-callback]')"),
            "the /buttons update with its reply",
        );
        browser.screenshot(&screenshot_path());
        let thrown = browser.exceptions();
        assert!(thrown.is_empty(), "the page's scripts threw: {thrown:?}");
    });
    assert!(std::fs::metadata(screenshot_path()).unwrap().len() > 10_000);

    // The page never shows the webhook secret, and the texts typed are not logged.
    let page_text = tokio::task::block_in_place(|| browser.text());
    assert!(!page_text.contains(SECRET));
    local.terminate().await;
    let (stdout, stderr) = local.output();
    for said in ["a note from Telegram", "tea at five", "callback yes"] {
        assert!(
            !stdout.contains(said) && !stderr.contains(said),
            "`{said}` was logged"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_shows_why_an_update_failed_and_replays_its_dead_letter_once() {
    let fake = FakeTelegram::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = fake.url();
    let mut local = Local::start(
        dir.path(),
        &[
            ("TGQ_WEBHOOK_SECRET", SECRET),
            ("TGQ_ADMIN_TOKEN", ADMIN_TOKEN),
            ("TGQ_HANDLER", "echo"),
            ("TELEGRAM_API_URL", url.as_str()),
            ("TELEGRAM_BOT_TOKEN", fake.token()),
        ],
        &[],
    );
    local.wait_ready().await;
    // Chat 21's replies fail with a 502 for a while; chat 22's first is refused for good.
    fake.inject(Fault::ServerError(502), Scope::Chat(21), Times::N(3));
    fake.inject(Fault::BadRequest, Scope::Chat(22), Times::N(1));
    // Chat 23's reply meets Telegram's flood control, which holds the whole bot for 10 s.
    fake.inject(Fault::RetryAfter(10), Scope::Chat(23), Times::Once);
    common::post_text(&local, SECRET, 1, 21, "first").await;
    common::post_text(&local, SECRET, 2, 22, "second").await;
    common::post_text(&local, SECRET, 3, 23, "third").await;
    let page = local.admin_url("/");
    let mut browser = tokio::task::block_in_place(|| {
        let mut browser = Browser::start(1360, 900);
        browser.open(&page);
        browser
    });

    tokio::task::block_in_place(|| {
        // The failing update: its error and when it runs again.
        browser.eval("location.hash = '#update/local/1'; true");
        browser.wait_for(
            "document.querySelector('#last-error') && document.querySelector('#detail').innerText.includes('runs again in')",
            "update 1's error and backoff",
        );
        let detail = browser.eval("document.querySelector('#detail').innerText");
        assert!(detail.as_str().unwrap().contains("502"), "{detail}");
        // The chats view says what holds chat 21.
        browser.eval("location.hash = '#chats'; true");
        browser.wait_for(
            "document.querySelector('tr[data-chat=\"21\"]') && document.querySelector('tr[data-chat=\"21\"]').innerText.includes('holds the chat')",
            "what holds chat 21",
        );
        browser.wait_for(
            "document.querySelector('#holds [data-wait=\"local\"]') && document.querySelector('#holds').innerText.includes('flood control')",
            "the bot's flood wait",
        );

        // The dead one, replayed from the console.
        browser.eval("location.hash = '#dead'; true");
        browser.wait_for(
            "document.querySelector('#dead [data-replay]')",
            "update 2's dead letter",
        );
        let letter = browser.eval("document.querySelector('#dead [data-replay]').dataset.replay");
        let letter = letter.as_str().unwrap().to_owned();
        browser.eval(&format!(
            "document.querySelector('#dead [data-replay={}]').click(); true",
            js(&letter)
        ));
        browser.wait_for(
            "document.querySelector('#dead-report').textContent.includes(' replayed: ')",
            "the replay's report",
        );
        // A second replay of the same letter finds it gone and says so.
        browser.eval(&format!("act('replay', {}); true", js(&letter)));
        browser.wait_for(
            "document.querySelector('#dead-report').textContent.includes('not replayed')",
            "the report of a replay of a letter that is gone",
        );
        browser.eval("location.hash = '#audit'; true");
        browser.wait_for(
            "[...document.querySelectorAll('#audit tbody tr')].some(r => r.innerText.includes('console') && r.innerText.includes('replay'))",
            "the replay in the audit trail",
        );
    });
    local
        .wait_settled(Duration::from_secs(40), |s| s["counters"]["processed"] == 3)
        .await;
    let replies = replies_per_chat(&fake);
    assert_eq!(
        replies.get(&22).map(Vec::len),
        Some(1),
        "the replayed update ran once: {replies:?}"
    );
    assert_eq!(replies.get(&21).map(Vec::len), Some(1), "{replies:?}");
    assert_eq!(replies.get(&23).map(Vec::len), Some(1), "{replies:?}");

    // Neither the bot token nor the webhook secret is shown, by any route the page reads.
    let mut seen = tokio::task::block_in_place(|| browser.text());
    for path in [
        "/",
        "/console/console.js",
        "/admin/console/feed",
        "/admin/console/chats",
        "/admin/console/waits",
        "/admin/console/update?bot=local&id=1",
        "/admin/console/conversation?chat=21",
        "/admin/dlq",
        "/admin/audit",
    ] {
        seen.push_str(&get_text(&local, path, None).await);
    }
    for secret in [SECRET, fake.token(), ADMIN_TOKEN] {
        assert!(!seen.contains(secret), "the console shows a secret");
    }
    let thrown = tokio::task::block_in_place(|| browser.exceptions());
    assert!(thrown.is_empty(), "the page's scripts threw: {thrown:?}");

    // Through a proxy the data needs the admin token; the page itself holds none.
    let forwarded = [("x-forwarded-for", "198.51.100.4")];
    let refused = reqwest::Client::new()
        .get(local.admin_url("/admin/console/feed"))
        .header(forwarded[0].0, forwarded[0].1)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    let admitted = admin_get(&local, "/admin/console/feed", Some(ADMIN_TOKEN)).await;
    assert_eq!(admitted["ok"], true);
    let page = reqwest::get(local.admin_url("/")).await.unwrap();
    assert!(page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .contains("default-src 'none'"));
    // A request the console cannot send is refused with the reason, and nothing is stored.
    let bad = reqwest::Client::new()
        .post(local.admin_url("/admin/console/send"))
        .json(&serde_json::json!({ "chat_id": 21 }))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let reason: Value = bad.json().await.unwrap();
    assert!(
        reason["result"].as_str().unwrap().contains("`text`"),
        "{reason}"
    );
    local.terminate().await;
}

async fn get_text(local: &Local, path: &str, token: Option<&str>) -> String {
    let mut request = reqwest::Client::new().get(local.admin_url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    assert!(
        response.status().is_success(),
        "{path}: {}",
        response.status()
    );
    response.text().await.unwrap()
}

async fn admin_get(local: &Local, path: &str, token: Option<&str>) -> Value {
    serde_json::from_str(&get_text(local, path, token).await).unwrap()
}

/// The console's Payments view: the ledger's charges, the newest first, each with its update, and
/// a subscription's period as the ledger keeps it.
#[tokio::test(flavor = "multi_thread")]
async fn the_console_shows_the_payments_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let mut local = Local::start(dir.path(), &[("TGQ_WEBHOOK_SECRET", SECRET)], &[]);
    local.wait_ready().await;
    let paid = |update_id: i64, charge: &str, extra: Value| {
        let mut payment = serde_json::json!({
            "currency": "XTR", "total_amount": 40 + update_id, "invoice_payload": "gem",
            "telegram_payment_charge_id": charge, "provider_payment_charge_id": ""
        });
        payment
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::json!({ "update_id": update_id, "message": {
            "message_id": update_id, "date": 1_800_000_000,
            "chat": {"id": 77, "type": "private", "first_name": "Ada"},
            "from": {"id": 77, "is_bot": false, "first_name": "Ada"},
            "successful_payment": payment } })
    };
    common::post_update(&local, SECRET, &paid(1, "stx-one", serde_json::json!({}))).await;
    let renewal = serde_json::json!({
        "subscription_expiration_date": 1_900_000_000, "is_recurring": true,
        "is_first_recurring": false
    });
    common::post_update(&local, SECRET, &paid(2, "stx-club", renewal)).await;
    local
        .wait_settled(Duration::from_secs(30), |s| s["counters"]["processed"] == 2)
        .await;

    let page = local.admin_url("/#payments");
    tokio::task::block_in_place(|| {
        let mut browser = Browser::start(1360, 900);
        browser.open(&page);
        browser.wait_for(
            "document.querySelectorAll('#payments tbody tr').length === 2",
            "both charges in the Payments view",
        );
        let rows = browser.eval(
            "[...document.querySelectorAll('#payments tbody tr')].map(r => r.innerText.replace(/\\s+/g, ' ').trim())",
        );
        let rows: Vec<&str> = rows
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect();
        assert!(rows[0].contains("local stx-club 77 42 gem 2"), "{rows:?}");
        assert!(rows[0].contains("renewal, until 2030-03-17"), "{rows:?}");
        assert!(rows[1].contains("local stx-one 77 41 gem 1"), "{rows:?}");
        assert!(!rows[1].contains("until"), "{rows:?}");
        assert!(browser
            .eval("document.querySelector('#payments-empty').hidden")
            .as_bool()
            .unwrap());
        let thrown = browser.exceptions();
        assert!(thrown.is_empty(), "the page's scripts threw: {thrown:?}");
    });
    local.terminate().await;
}
