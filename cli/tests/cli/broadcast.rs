//! Broadcasts in `tgq local` against the fake Bot API with Telegram's limits on: a job killed
//! midway resumes at the next start, sending nobody a second message and skipping nobody; the
//! bot's replies go on beside it; a message Telegram refuses pauses the job; the CLI's refusals say
//! what was wrong.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tempfile::TempDir;
use tgq_fake_telegram::{FakeConfig, FakeTelegram, Fault, Limits, Scope, Times, Violations};

use common::{free_port, post_text, run, sending_to, Local};

const SECRET: &str = "broadcast-secret";

/// What most tests here start from: a fake Bot API with Telegram's limits on, and a data
/// directory for a `tgq local` whose bot sends to it.
struct Setup {
    fake: FakeTelegram,
    api_url: String,
    dir: TempDir,
}

impl Setup {
    async fn new() -> Setup {
        let fake = FakeTelegram::start_with(FakeConfig {
            limits: Some(Limits::default()),
            ..FakeConfig::default()
        })
        .await
        .unwrap();
        Setup {
            api_url: fake.url(),
            fake,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// The environment of a `tgq local` whose bot sends to the fake.
    fn envs(&self) -> [(&'static str, &str); 3] {
        sending_to(&self.fake, &self.api_url, SECRET)
    }

    /// The data directory.
    fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A `tgq local` on the data directory whose bot sends to the fake, ready.
    async fn local(&self) -> Local {
        let mut local = Local::start(self.dir(), &self.envs(), &[]);
        local.wait_ready().await;
        local
    }
}

fn status(dir: &Path, id: u64) -> Value {
    let id = id.to_string();
    let (exit, out, err) = broadcast(&[], dir, &["status", &id, "--json"]);
    assert!(exit.success(), "{err}");
    serde_json::from_str(&out).unwrap()
}

/// Waits until broadcast 1 is done, within a minute, and returns its status.
async fn done(dir: &Path) -> Value {
    reaches(
        dir,
        "done",
        Duration::from_secs(60),
        Duration::from_millis(200),
    )
    .await
}

/// Waits until broadcast 1 is in `state`, looking every `every` within `timeout`, and returns its
/// status.
async fn reaches(dir: &Path, state: &str, timeout: Duration, every: Duration) -> Value {
    let started = Instant::now();
    loop {
        let view = status(dir, 1);
        if view["job"]["state"]["state"] == state {
            return view;
        }
        assert!(started.elapsed() < timeout, "{view}");
        tokio::time::sleep(every).await;
    }
}

/// `tgq broadcast ARGS…` on the store in `dir`: (exit status, stdout, stderr).
fn broadcast(envs: &[(&str, &str)], dir: &Path, args: &[&str]) -> (ExitStatus, String, String) {
    let mut all = vec!["broadcast"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--data-dir", dir.to_str().unwrap()]);
    run(envs, &all)
}

/// `tgq broadcast start --text TEXT --to FILE` on the store in `dir`, and what it printed.
fn start_text(envs: &[(&str, &str)], dir: &Path, text: &str, to: &Path) -> String {
    let (exit, out, err) = broadcast(
        envs,
        dir,
        &["start", "--text", text, "--to", to.to_str().unwrap()],
    );
    assert!(exit.success(), "{err}");
    out
}

/// Nothing was sent over Telegram's limits nor before a retry_after had passed.
fn assert_within_limits(violations: Violations) {
    assert_eq!(
        (violations.over_limit, violations.early_sends),
        (0, 0),
        "{violations:?}"
    );
}

async fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < timeout, "{what} within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Writes `dir/recipients.txt`, chats 1 to `n`, one a line, after `header`, and returns its path.
fn recipients_file(dir: &Path, header: &str, n: i64) -> PathBuf {
    let path = dir.join("recipients.txt");
    let list: String = (1..=n).map(|chat| format!("{chat}\n")).collect();
    std::fs::write(&path, format!("{header}{list}")).unwrap();
    path
}

/// The chats the fake delivered a broadcast message to (its text is "news").
fn broadcast_deliveries(fake: &FakeTelegram) -> Vec<i64> {
    fake.delivered()
        .iter()
        .filter(|call| call.params["text"] == "news")
        .filter_map(|call| call.chat_id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcast_killed_midway_resumes_sending_nobody_twice_and_skipping_nobody() {
    const RECIPIENTS: i64 = 240;
    let setup = Setup::new().await;
    let fake = &setup.fake;
    let envs = setup.envs();
    let blocked = [7, 70, 170];
    for chat in blocked {
        fake.inject(Fault::Blocked, Scope::Chat(chat), Times::Always);
    }
    let recipients = recipients_file(setup.dir(), "# subscribers\n", RECIPIENTS);
    let payload = setup.dir().join("news.json");
    let buttons = json!({"text": "news", "reply_markup": {"inline_keyboard": [[{"text": "Read", "url": "https://example.org"}]]}});
    std::fs::write(&payload, buttons.to_string()).unwrap();

    let port = free_port();
    let mut local = Local::start_on(port, setup.dir(), &envs, &[]);
    local.wait_ready().await;
    let (exit, out, err) = broadcast(
        &envs,
        setup.dir(),
        &[
            "start",
            "--payload",
            payload.to_str().unwrap(),
            "--to",
            recipients.to_str().unwrap(),
        ],
    );
    assert!(exit.success(), "{err}");
    assert!(out.contains("broadcast 1 started: 240 recipients"), "{out}");

    // The bot's replies go on while the broadcast sends: five chats write to it.
    for chat in 9001..=9005 {
        post_text(&local, SECRET, chat, chat, "hello").await;
    }
    wait_for("a third of the recipients", Duration::from_secs(60), || {
        broadcast_deliveries(fake).len() >= 80
    })
    .await;
    local.kill();
    let before_restart = broadcast_deliveries(fake).len();
    assert!(
        before_restart < RECIPIENTS as usize - 50,
        "killed midway: {before_restart}"
    );

    let mut local = Local::start_on(port, setup.dir(), &envs, &[]);
    local.wait_ready().await;
    let view = done(setup.dir()).await;
    let counts = &view["job"]["counts"];
    let (sent, gone, uncertain) = (
        counts["sent"].as_u64().unwrap(),
        counts["gone"].as_u64().unwrap(),
        counts["uncertain"].as_u64().unwrap(),
    );
    assert_eq!(counts["failed"], 0, "{view}");
    assert_eq!(sent + gone + uncertain, RECIPIENTS as u64, "{view}");
    assert_eq!(gone, blocked.len() as u64, "{view}");

    let deliveries = broadcast_deliveries(fake);
    let unique: BTreeSet<i64> = deliveries.iter().copied().collect();
    assert_eq!(
        unique.len(),
        deliveries.len(),
        "a recipient got the message twice"
    );
    let delivered_count = deliveries.len() as u64;
    assert!(
        (sent..=sent + uncertain).contains(&delivered_count),
        "{delivered_count} delivered for {sent} sent and {uncertain} uncertain"
    );
    let uncertain_chats: BTreeSet<i64> = view["undelivered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["chat"].as_i64().unwrap())
        .collect();
    assert_eq!(uncertain_chats.len() as u64, uncertain);
    // Skipped by nobody: every recipient was delivered to, is gone, or is uncertain (its send was
    // in flight at the kill, and the fake shows whether it arrived).
    for chat in 1..=RECIPIENTS {
        let accounted =
            unique.contains(&chat) || blocked.contains(&chat) || uncertain_chats.contains(&chat);
        assert!(accounted, "chat {chat} was skipped: {view}");
    }
    assert!(uncertain <= 8, "at most the sends in flight: {uncertain}");
    let first = fake
        .delivered()
        .into_iter()
        .find(|call| call.params["text"] == "news")
        .expect("a broadcast message");
    assert_eq!(
        first.params["reply_markup"]["inline_keyboard"][0][0]["text"], "Read",
        "the buttons went along"
    );
    for chat in 9001..=9005 {
        assert_eq!(
            fake.delivered_to(chat).len(),
            1,
            "the bot's reply to {chat}"
        );
    }
    assert_within_limits(fake.violations());
    local.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_telegram_refuses_pauses_the_broadcast_with_its_words_at_its_first_try() {
    let setup = Setup::new().await;
    let fake = &setup.fake;
    let envs = setup.envs();
    fake.inject(Fault::BadRequest, Scope::Global, Times::Always);
    let recipients = recipients_file(setup.dir(), "", 100);
    // Started while tgq local is down: the job waits in the store and runs at the next start.
    let mut first = setup.local().await;
    first.terminate().await;
    let out = start_text(&envs, setup.dir(), "x", &recipients);
    assert!(out.contains("100 recipients"), "{out}");

    let mut local = setup.local().await;
    let view = reaches(
        setup.dir(),
        "paused",
        Duration::from_secs(30),
        Duration::from_millis(100),
    )
    .await;
    let reason = view["job"]["state"]["reason"].as_str().unwrap();
    assert!(reason.contains("message text is empty"), "{reason}");
    assert_eq!(
        view["job"]["counts"]["failed"], 0,
        "nobody failed for the message's fault"
    );
    assert_eq!(view["pending"], 100);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(fake.calls().len(), 1, "one refusal, then nothing more");

    let (exit, out, _) = broadcast(&[], setup.dir(), &["status", "1"]);
    assert!(exit.success());
    assert!(out.contains("paused by tgq"), "{out}");
    let (exit, out, _) = broadcast(&[], setup.dir(), &["cancel", "1"]);
    assert!(exit.success());
    assert!(out.contains("broadcast 1 is cancelled"), "{out}");
    let (exit, _, err) = broadcast(&[], setup.dir(), &["resume", "1"]);
    assert!(!exit.success());
    assert!(
        err.contains("broadcast 1 is cancelled: it cannot resume"),
        "{err}"
    );
    let (exit, _, err) = broadcast(&[], setup.dir(), &["pause", "9"]);
    assert!(!exit.success());
    assert!(err.contains("there is no broadcast 9"), "{err}");
    local.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_holds_a_running_broadcast_and_a_resume_finishes_it() {
    let setup = Setup::new().await;
    let fake = &setup.fake;
    let recipients = recipients_file(setup.dir(), "", 60);
    let mut local = setup.local().await;
    start_text(&[], setup.dir(), "news", &recipients);
    wait_for("some deliveries", Duration::from_secs(20), || {
        broadcast_deliveries(fake).len() >= 10
    })
    .await;
    let (exit, out, err) = broadcast(&[], setup.dir(), &["pause", "1"]);
    assert!(exit.success(), "{err}");
    assert!(out.contains("broadcast 1 is paused"), "{out}");
    // Sends in flight at the pause still land; then nothing for a while.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let at_pause = broadcast_deliveries(fake).len();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        broadcast_deliveries(fake).len(),
        at_pause,
        "nothing is sent while paused"
    );
    assert!(at_pause < 60);
    let (exit, _, err) = broadcast(&[], setup.dir(), &["resume", "1"]);
    assert!(exit.success(), "{err}");
    wait_for("every recipient", Duration::from_secs(30), || {
        broadcast_deliveries(fake).len() >= 60
    })
    .await;
    let view = status(setup.dir(), 1);
    assert_eq!(view["job"]["counts"]["sent"], 60, "{view}");
    let (exit, out, _) = broadcast(&[], setup.dir(), &["list"]);
    assert!(exit.success());
    assert!(
        out.lines()
            .any(|l| l.starts_with("1 ") && l.contains("done")),
        "{out}"
    );
    local.terminate().await;
}

#[test]
fn a_recipients_file_with_a_bad_line_or_nobody_in_it_is_refused_before_anything_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap();
    // `tgq broadcast start` with `args` on this data directory: refused, with what it said.
    let refused = |args: &[&str]| -> String {
        let mut all = vec!["broadcast", "start"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--data-dir", data_dir]);
        let (exit, _, err) = run(&[], &all);
        assert!(!exit.success(), "{all:?} was accepted: {err}");
        err
    };
    let bad = dir.path().join("bad.txt");
    std::fs::write(&bad, "42\n\n17 # a comment\n").unwrap();
    let err = refused(&["--text", "x", "--to", bad.to_str().unwrap()]);
    assert!(
        err.contains("line 3 of the recipients is not a chat id: \"17 # a comment\""),
        "{err}"
    );
    assert!(err.contains("nothing was sent"), "{err}");
    assert!(
        !dir.path().join(tgq_embedded::FILE_NAME).exists(),
        "nothing was stored"
    );

    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "# nobody yet\n").unwrap();
    let err = refused(&["--text", "x", "--to", empty.to_str().unwrap()]);
    assert!(err.contains("the audience is empty"), "{err}");

    let payload = dir.path().join("p.json");
    std::fs::write(&payload, r#"{"chat_id": 5, "text": "x"}"#).unwrap();
    let err = refused(&[
        "--payload",
        payload.to_str().unwrap(),
        "--to",
        bad.to_str().unwrap(),
    ]);
    assert!(
        err.contains("line 3"),
        "the recipients are checked first: {err}"
    );
}

/// Two broadcasts of one bot, both stored while `tgq local` is down: at its start it sends the older one
/// whole, then the later one, which `status` shows waiting for it meanwhile. Both at once would
/// together take the replies' share of the bot's rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_s_second_broadcast_waits_for_its_first_to_end() {
    let setup = Setup::new().await;
    // The store made, and no process sending while both jobs are stored.
    let mut local = setup.local().await;
    local.terminate().await;
    for (text, first_chat) in [("first", 1), ("second", 101)] {
        let recipients = setup.dir().join(format!("{text}.txt"));
        let list: String = (first_chat..first_chat + 40)
            .map(|chat| format!("{chat}\n"))
            .collect();
        std::fs::write(&recipients, list).unwrap();
        start_text(&[], setup.dir(), text, &recipients);
    }
    let view = status(setup.dir(), 2);
    assert_eq!(view["behind"], 1, "{view}");
    let mut local = setup.local().await;
    let texts = || -> Vec<String> {
        setup
            .fake
            .delivered()
            .iter()
            .filter_map(|call| call.params["text"].as_str().map(str::to_owned))
            .collect()
    };
    wait_for("both broadcasts", Duration::from_secs(30), || {
        texts().len() >= 80
    })
    .await;
    let texts = texts();
    let last_first = texts.iter().rposition(|t| t == "first").unwrap();
    let first_second = texts.iter().position(|t| t == "second").unwrap();
    assert!(
        last_first < first_second,
        "the second began before the first ended: {texts:?}"
    );
    assert_eq!(status(setup.dir(), 2)["job"]["counts"]["sent"], 40);
    local.terminate().await;
}

/// Telegram unreachable (connection refused) and then answering 502 in the middle of a broadcast:
/// nobody is written off or failed for it, and only a call caught on the wire as Telegram went
/// away may be uncertain; the lane waits and, once Telegram answers, every other recipient gets the
/// message once, within Telegram's limits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_telegram_outage_mid_broadcast_writes_nobody_off_and_everyone_gets_it_once() {
    const RECIPIENTS: i64 = 120;
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let limited = || FakeConfig {
        limits: Some(Limits::default()),
        ..FakeConfig::default()
    };
    let before = FakeTelegram::start_at(addr, limited()).await.unwrap();
    let api_url = before.url();
    let envs = sending_to(&before, &api_url, SECRET);
    let dir = tempfile::tempdir().unwrap();
    let recipients = recipients_file(dir.path(), "", RECIPIENTS);
    let mut local = Local::start(dir.path(), &envs, &[]);
    local.wait_ready().await;
    start_text(&envs, dir.path(), "news", &recipients);
    wait_for("the first recipients", Duration::from_secs(30), || {
        broadcast_deliveries(&before).len() >= 20
    })
    .await;

    // Telegram goes away: connections are refused for four seconds. What it took is read once
    // it has stopped, so a call it answered in its last moments is counted.
    let stopped = before.clone();
    before.shutdown().await;
    let delivered_before = broadcast_deliveries(&stopped);
    let over_limit_before = stopped.violations();
    tokio::time::sleep(Duration::from_secs(4)).await;
    // It comes back behind an edge that answers 502 for three more seconds.
    let after = FakeTelegram::start_at(addr, limited()).await.unwrap();
    after.inject(Fault::ServerError(502), Scope::Global, Times::Always);
    tokio::time::sleep(Duration::from_secs(3)).await;
    after.clear_faults();

    let view = done(dir.path()).await;
    let counts = &view["job"]["counts"];
    // The one call a shutdown can catch written on a kept-alive connection as the fake closed it
    // is uncertain, as any request written whose answer never came (docs/design/broadcasts.md):
    // at most the calls on the wire at that instant, never the ones the outage kept from leaving.
    let uncertain: Vec<i64> = view["undelivered"]
        .as_array()
        .expect("the undelivered recipients")
        .iter()
        .filter(|r| r["state"]["state"] == "uncertain")
        .map(|r| r["chat"].as_i64().expect("a chat id"))
        .collect();
    assert!(uncertain.len() <= 2, "written off by the outage: {view}");
    assert_eq!(
        (&counts["sent"], &counts["failed"], &counts["uncertain"]),
        (
            &json!(RECIPIENTS - uncertain.len() as i64),
            &json!(0),
            &json!(uncertain.len())
        ),
        "{view}"
    );
    let mut delivered = delivered_before.clone();
    delivered.extend(broadcast_deliveries(&after));
    delivered.sort_unstable();
    let mut reached = delivered.clone();
    reached.dedup();
    assert_eq!(reached, delivered, "nobody twice across the outage");
    reached.extend(uncertain.iter().filter(|chat| !delivered.contains(chat)));
    reached.sort_unstable();
    assert_eq!(
        reached,
        (1..=RECIPIENTS).collect::<Vec<_>>(),
        "each recipient once across the outage, or uncertain"
    );
    assert_within_limits(over_limit_before);
    assert_within_limits(after.violations());
    local.terminate().await;
}

/// Groups the bot cannot reach fail their recipients alone (the job never pauses for them), the
/// status lists every one of them, not the first hundred, and `tgq broadcast retry` sends to them
/// again once they can be reached; a bot the instance does not serve is refused at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_recipients_are_all_listed_and_a_retry_reaches_them_once() {
    const GROUPS: i64 = 130;
    let setup = Setup::new().await;
    let envs = setup.envs();
    for group in 1..=GROUPS {
        setup
            .fake
            .inject(Fault::ChatNotFound, Scope::Chat(-group), Times::Once);
    }
    let recipients = setup.dir().join("recipients.txt");
    let list: String = (1..=GROUPS).map(|g| format!("{}\n", -g)).collect();
    std::fs::write(&recipients, format!("{list}1\n2\n")).unwrap();
    let mut local = setup.local().await;
    let start = |bot: &str| {
        broadcast(
            &envs,
            setup.dir(),
            &[
                "start",
                "--text",
                "news",
                "--to",
                recipients.to_str().unwrap(),
                "--bot",
                bot,
            ],
        )
    };
    let (exit, _, err) = start("someone-else");
    assert!(!exit.success());
    assert!(
        err.contains("not served") && err.contains("local"),
        "names the bots it serves: {err}"
    );
    let (exit, out, err) = start("local");
    assert!(exit.success(), "{err}");
    assert!(out.contains("broadcast 1 started"), "{out}");

    let view = done(setup.dir()).await;
    assert_eq!(view["job"]["counts"]["failed"], GROUPS, "{view}");
    assert_eq!(view["job"]["counts"]["sent"], 2, "{view}");
    let listed = view["undelivered"].as_array().unwrap();
    assert_eq!(
        listed.len() as i64,
        GROUPS,
        "every failed recipient is listed"
    );

    // The groups can be reached now.
    let (exit, out, err) = broadcast(&[], setup.dir(), &["retry", "1"]);
    assert!(exit.success(), "{err}");
    assert!(
        out.contains("130 failed recipients are sent to again"),
        "{out}"
    );
    let view = done(setup.dir()).await;
    assert_eq!(
        (
            &view["job"]["counts"]["sent"],
            &view["job"]["counts"]["failed"]
        ),
        (&json!(GROUPS + 2), &json!(0)),
        "{view}"
    );
    for group in 1..=GROUPS {
        assert_eq!(setup.fake.delivered_to(-group).len(), 1, "group {}", -group);
    }
    let (exit, _, err) = broadcast(&[], setup.dir(), &["retry", "1"]);
    assert!(!exit.success());
    assert!(err.contains("no failed recipient"), "{err}");
    local.terminate().await;
}
