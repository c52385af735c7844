//! `tgq payments list | show | refund`: the payments ledger of `tgq local`, read and refunded
//! through the running instance and on its store once it stopped; refunds counted at the fake Bot
//! API.

use crate::common;

use std::time::Duration;

use serde_json::{json, Value};
use tgq_fake_telegram::{FakeTelegram, Fault, Scope, Times};

use common::{post_update, run, Local};

const SECRET: &str = "payments-secret";

fn paid(update_id: i64, user: i64, charge: &str, stars: u32) -> Value {
    json!({
        "update_id": update_id,
        "message": {
            "message_id": update_id, "date": 1_800_000_000,
            "chat": {"id": user, "type": "private", "first_name": "Ada"},
            "from": {"id": user, "is_bot": false, "first_name": "Ada"},
            "successful_payment": {
                "currency": "XTR", "total_amount": stars, "invoice_payload": "gem",
                "telegram_payment_charge_id": charge, "provider_payment_charge_id": ""
            }
        }
    })
}

fn listed(data_dir: &str) -> Vec<Value> {
    let (status, out, err) = run(&[], &["payments", "list", "--json", "--data-dir", data_dir]);
    assert!(status.success(), "{err}");
    serde_json::from_str(&out).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_lists_each_charge_once_running_or_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let mut local = Local::start(dir.path(), &[("TGQ_WEBHOOK_SECRET", SECRET)], &[]);
    local.wait_ready().await;
    post_update(&local, SECRET, &paid(1, 42, "stx-a", 50)).await;
    post_update(&local, SECRET, &paid(2, 43, "stx-b", 75)).await;
    local
        .wait_settled(Duration::from_secs(30), |s| {
            s["counters"]["processed"].as_u64() == Some(2)
        })
        .await;
    let data_dir = dir.path().to_str().unwrap();

    let running = listed(data_dir);
    let charges: Vec<(&str, i64, u64)> = running
        .iter()
        .map(|e| {
            (
                e["id"].as_str().unwrap(),
                e["user"].as_i64().unwrap(),
                e["stars"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(charges.len(), 2, "{running:?}");
    assert!(charges.contains(&("stx-a", 42, 50)) && charges.contains(&("stx-b", 43, 75)));
    assert!(running.iter().all(|e| e["bot_id"] == "local"));
    let (status, shown, err) = run(&[], &["payments", "show", "stx-b", "--data-dir", data_dir]);
    assert!(status.success(), "{err}");
    assert!(shown.contains("stars      75"), "{shown}");
    assert!(shown.contains("update     2"), "{shown}");
    local.terminate().await;

    assert_eq!(
        listed(data_dir),
        running,
        "the store read directly says the same"
    );
    let (status, out, _) = run(
        &[],
        &["payments", "list", "--bot", "other", "--data-dir", data_dir],
    );
    assert!(status.success());
    assert_eq!(out.trim(), "no charges in the payments ledger");
    let (status, _, err) = run(&[], &["payments", "show", "stx-z", "--data-dir", data_dir]);
    assert!(!status.success());
    assert!(
        err.contains("no charge \"stx-z\" in the payments ledger"),
        "{err}"
    );
}

/// Calls the fake Bot API as a bot would, outside tgq: Telegram's answer.
async fn call_fake(fake: &FakeTelegram, method: &str, params: Value) -> Value {
    common::call_bot_api(&fake.url(), fake.token(), method, params).await
}

/// A user pays `stars` at the fake, the bot saying yes to the pre-checkout query: the charge
/// Telegram made, its id.
pub(crate) async fn charge_at(fake: &FakeTelegram, user: i64, stars: u32) -> String {
    let query = fake.checkout(user, "gem", stars);
    let answer = call_fake(
        fake,
        "answerPreCheckoutQuery",
        json!({ "pre_checkout_query_id": query, "ok": true }),
    )
    .await;
    assert_eq!(answer["ok"], true, "{answer}");
    let charge = fake.charges().pop().unwrap();
    assert_eq!((charge.user, charge.amount), (user, stars));
    charge.id
}

/// A fake Bot API and a data directory for `tgq local` talking to it.
struct Shop {
    fake: FakeTelegram,
    api_url: String,
    dir: tempfile::TempDir,
}

impl Shop {
    async fn open() -> Self {
        let fake = FakeTelegram::start().await.unwrap();
        Self {
            api_url: fake.url(),
            fake,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// What `tgq local` and the commands run with: the fake's URL and token.
    fn envs(&self) -> [(&'static str, &str); 3] {
        [
            ("TELEGRAM_API_URL", self.api_url.as_str()),
            ("TELEGRAM_BOT_TOKEN", self.fake.token()),
            ("TGQ_WEBHOOK_SECRET", SECRET),
        ]
    }

    fn data_dir(&self) -> &str {
        self.dir.path().to_str().unwrap()
    }

    /// `tgq local` on the data directory, ready.
    async fn local(&self) -> Local {
        let mut local = Local::start(self.dir.path(), &self.envs(), &[]);
        local.wait_ready().await;
        local
    }
}

/// Waits up to 10 s for `done`.
async fn wait_for(done: impl Fn() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("not within 10 s");
}

/// The refunds the fake was asked for `charge`, by the status it answered.
pub(crate) fn refunds_asked(fake: &FakeTelegram, charge: &str) -> Vec<u16> {
    fake.calls()
        .into_iter()
        .filter(|call| {
            call.method == "refundStarPayment"
                && call.params["telegram_payment_charge_id"] == charge
        })
        .map(|call| call.status)
        .collect()
}

fn refunded_at(data_dir: &str, charge: &str) -> Option<u64> {
    listed(data_dir)
        .into_iter()
        .find(|entry| entry["id"] == charge)
        .unwrap()["refunded_at"]
        .as_u64()
}

/// `tgq payments refund`: through the running instance, then on its stopped store. Each charge is
/// refunded once at Telegram and marked once; a charge refunded, unknown, or whose refund Telegram
/// did not take is refused with the reason, and changes nothing; every call is audited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_is_asked_once_marked_and_audited_running_or_stopped() {
    let shop = Shop::open().await;
    let (fake, envs, data_dir) = (&shop.fake, shop.envs(), shop.data_dir());
    let mut local = shop.local().await;
    let (a, b, c, d) = (
        charge_at(fake, 42, 50).await,
        charge_at(fake, 43, 75).await,
        charge_at(fake, 44, 20).await,
        charge_at(fake, 45, 10).await,
    );
    let paying = [(42, &a, 50), (43, &b, 75), (44, &c, 20), (45, &d, 10)];
    for (n, (user, charge, stars)) in paying.into_iter().enumerate() {
        post_update(&local, SECRET, &paid(n as i64 + 1, user, charge, stars)).await;
    }
    local
        .wait_settled(Duration::from_secs(30), |s| {
            s["counters"]["processed"].as_u64() == Some(4)
        })
        .await;
    let refund = |charge: &str, yes: bool| {
        let mut args = vec!["payments", "refund", charge, "--data-dir", data_dir];
        if yes {
            args.push("--yes");
        }
        run(&envs, &args)
    };

    // Without --yes, and no terminal to ask on: refused, nothing asked.
    let (status, _, err) = refund(&a, false);
    assert!(!status.success());
    assert!(err.contains("pass --yes"), "{err}");
    assert!(refunds_asked(fake, &a).is_empty());

    // Through the running instance: refunded at Telegram once, marked.
    let (status, out, err) = refund(&a, true);
    assert!(status.success(), "{err}");
    assert_eq!(
        out.trim(),
        format!("Refunded charge {a} of bot local: 50 Stars back to user 42.")
    );
    assert_eq!(refunds_asked(fake, &a), [200]);
    assert!(fake.charges().iter().any(|ch| ch.id == a && ch.refunded));
    assert!(refunded_at(data_dir, &a).is_some());

    // Again: the ledger knows it refunded; Telegram is not asked.
    let (status, _, err) = refund(&a, true);
    assert!(!status.success());
    assert!(err.contains("was refunded at"), "{err}");
    assert_eq!(refunds_asked(fake, &a), [200], "asked once");

    // A charge the ledger does not hold.
    let (status, _, err) = refund("stx-none", true);
    assert!(!status.success());
    assert!(err.contains("no charge \"stx-none\""), "{err}");

    // Telegram answers 502: not refunded, not marked, and said so.
    fake.inject(Fault::ServerError(502), Scope::Global, Times::Always);
    let (status, _, err) = refund(&b, true);
    fake.clear_faults();
    assert!(!status.success());
    assert!(err.contains("nothing changed"), "{err}");
    assert_eq!(refunds_asked(fake, &b), [502]);
    assert_eq!(refunded_at(data_dir, &b), None);

    let (status, out, err) = run(&[], &["dlq", "audit", "--json", "--data-dir", data_dir]);
    assert!(status.success(), "{err}");
    let audit: Vec<Value> = serde_json::from_str(&out).unwrap();
    let outcomes: Vec<&str> = audit
        .iter()
        .filter(|entry| entry["action"] == "refund")
        .map(|entry| entry["outcome"].as_str().unwrap())
        .collect();
    // Each call twice: before it, and with its outcome.
    assert_eq!(outcomes.len(), 4, "{audit:?}");
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| o.ends_with("asking Telegram to refund"))
            .count(),
        2,
        "{outcomes:?}"
    );
    assert!(
        outcomes
            .iter()
            .any(|o| o.ends_with(&format!("charge {a} of user 42, 50 Stars: refunded"))),
        "{outcomes:?}"
    );
    assert!(
        outcomes
            .iter()
            .any(|o| o.contains(&b) && o.contains("not refunded")),
        "{outcomes:?}"
    );
    local.terminate().await;

    // Stopped: the command asks Telegram itself, with the environment's token.
    let (status, out, err) = refund(&b, true);
    assert!(status.success(), "{err}");
    assert!(out.contains(&format!("Refunded charge {b}")), "{out}");
    assert_eq!(refunds_asked(fake, &b), [502, 200]);
    let (status, shown, _) = run(&[], &["payments", "show", &b, "--data-dir", data_dir]);
    assert!(status.success());
    assert!(shown.contains("refunded   "), "{shown}");

    // Killed while Telegram holds its answer: the refund was made and the entry is not marked; the
    // next run learns it from Telegram's refusal to refund twice, and marks it.
    fake.inject(
        Fault::Timeout(Duration::from_secs(2)),
        Scope::Global,
        Times::Once,
    );
    let mut killed = common::tgq(&envs)
        .args(["payments", "refund", &d, "--yes", "--data-dir", data_dir])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for(|| refunds_asked(fake, &d).len() == 1).await;
    killed.kill().unwrap();
    killed.wait().unwrap();
    assert_eq!(refunded_at(data_dir, &d), None, "killed before the mark");
    wait_for(|| fake.charges().iter().any(|ch| ch.id == d && ch.refunded)).await;
    let (status, out, err) = refund(&d, true);
    assert!(status.success(), "{err}");
    assert!(
        out.contains(&format!("Telegram had refunded charge {d}")),
        "{out}"
    );
    assert!(refunded_at(data_dir, &d).is_some());
    assert_eq!(refunds_asked(fake, &d).len(), 2);
    assert_eq!(refunds_asked(fake, &d)[1], 400, "refused: refunded once");

    // The token refused (revoked): Telegram's words, nothing changed.
    fake.inject(Fault::Unauthorized, Scope::Global, Times::Always);
    let (status, _, err) = refund(&c, true);
    fake.clear_faults();
    assert!(!status.success());
    assert!(
        err.contains("401") && err.contains("nothing changed"),
        "{err}"
    );
    assert_eq!(refunded_at(data_dir, &c), None);
    assert_eq!(refunds_asked(fake, &c), [401]);
    assert!(fake.charges().iter().any(|ch| ch.id == c && !ch.refunded));

    // Telegram unreachable: refused with the reason, nothing marked.
    fake.clone().shutdown().await;
    let (status, _, err) = refund(&c, true);
    assert!(!status.success());
    assert!(
        err.contains("could not be reached") && err.contains("nothing changed"),
        "{err}"
    );
    assert_eq!(refunded_at(data_dir, &c), None);
    assert_eq!(refunds_asked(fake, &c), [401], "nothing more arrived");
}

/// `tgq payments reconcile`: `tgq local`'s ledger against the fake's list of Star transactions.
/// Each side's lacks are named and nothing changes; it exits 0 while they agree and 1 once they
/// differ; with Telegram away it says so and compares nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_names_what_each_side_lacks_and_changes_nothing() {
    let shop = Shop::open().await;
    let (fake, envs, data_dir) = (&shop.fake, shop.envs(), shop.data_dir());
    let mut local = shop.local().await;
    let processed = |n: u64| move |s: &Value| s["counters"]["processed"].as_u64() == Some(n);
    let reconcile = |json: bool| {
        let mut args = vec!["payments", "reconcile", "--data-dir", data_dir];
        if json {
            args.push("--json");
        }
        run(&envs, &args)
    };

    let a = charge_at(fake, 42, 50).await;
    post_update(&local, SECRET, &paid(1, 42, &a, 50)).await;
    local
        .wait_settled(Duration::from_secs(30), processed(1))
        .await;
    let (status, out, err) = reconcile(false);
    assert!(status.success(), "{err}");
    assert!(out.contains("The ledger and Telegram agree."), "{out}");

    // Paid at Telegram and never delivered; delivered and never paid at Telegram; refunded at
    // Telegram without tgq learning it.
    let (b, c) = (charge_at(fake, 43, 75).await, charge_at(fake, 44, 20).await);
    post_update(&local, SECRET, &paid(2, 43, &b, 75)).await;
    post_update(&local, SECRET, &paid(3, 45, "stx-unknown", 5)).await;
    local
        .wait_settled(Duration::from_secs(30), processed(3))
        .await;
    let refunded = call_fake(
        fake,
        "refundStarPayment",
        json!({ "user_id": 43, "telegram_payment_charge_id": b }),
    )
    .await;
    assert_eq!(refunded["result"], true, "{refunded}");
    let before = listed(data_dir);

    let (status, out, _) = reconcile(true);
    assert_eq!(status.code(), Some(3), "they differ");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["bot_id"], "local");
    assert_eq!(
        (
            &report["at_telegram"],
            &report["in_ledger"],
            &report["matched"]
        ),
        (&json!(3), &json!(3), &json!(1)),
        "{report}"
    );
    assert_eq!(report["only_at_telegram"][0]["id"], c.as_str(), "{report}");
    assert_eq!(report["only_at_telegram"][0]["stars"], 20);
    assert_eq!(report["only_in_ledger"][0]["id"], "stx-unknown", "{report}");
    assert_eq!(report["refunded_only_at_telegram"], json!([b]), "{report}");
    assert_eq!(report["refunded_only_in_ledger"], json!([]));
    let (status, out, err) = reconcile(false);
    assert_eq!(status.code(), Some(3));
    assert!(out.contains("At Telegram, not in the ledger (1):"), "{out}");
    assert!(out.contains("In the ledger, not at Telegram (1):"), "{out}");
    assert!(
        out.contains("Refunded at Telegram, not marked in the ledger (1):"),
        "{out}"
    );
    assert!(err.contains("differ in 3 charge(s)"), "{err}");
    assert_eq!(listed(data_dir), before, "the ledger is unchanged");
    local.terminate().await;

    // Telegram answering 502, the token refused, then Telegram away: a failure to compare each
    // time, not a difference.
    for (fault, said) in [
        (Fault::ServerError(502), "502"),
        (Fault::Unauthorized, "401"),
    ] {
        fake.inject(fault, Scope::Global, Times::Always);
        let (status, _, err) = reconcile(false);
        fake.clear_faults();
        assert_eq!(status.code(), Some(1), "{err}");
        assert!(
            err.contains(said) && err.contains("nothing changed"),
            "{err}"
        );
        assert_eq!(listed(data_dir), before);
    }

    fake.clone().shutdown().await;
    let (status, _, err) = reconcile(false);
    assert_eq!(
        status.code(),
        Some(1),
        "could not compare: a failure, not a difference"
    );
    assert!(
        err.contains("could not read the Star transactions") && err.contains("nothing changed"),
        "{err}"
    );
    assert_eq!(listed(data_dir), before);
}

/// The echo bot's credit replies that reached the fake in `user`'s chat, by status.
fn credits_told(fake: &FakeTelegram, user: i64) -> Vec<(u16, String)> {
    fake.calls()
        .into_iter()
        .filter(|call| call.method == "sendMessage" && call.chat_id == Some(user))
        .filter_map(|call| Some((call.status, call.params["text"].as_str()?.to_owned())))
        .filter(|(_, text)| text.contains("credited"))
        .collect()
}

/// A payment credited by the echo bot, from outside: through 502s, an outage with connections
/// refused, a revoked token and a SIGKILL while its reply is on the wire, each charge is credited
/// once (every reply names the balance of the charges before it), counted at the fake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_is_credited_once_through_5xx_an_outage_a_revoked_token_and_a_kill() {
    let (on, fake, mut local) = common::OnFake::start(SECRET).await;
    let user = 77;
    let processed = |n: u64| move |s: &Value| s["counters"]["processed"].as_u64() == Some(n);

    // Telegram answers 502 twice: the reply is sent again, the charge credited once.
    fake.inject(Fault::ServerError(502), Scope::Global, Times::N(2));
    post_update(&local, SECRET, &paid(1, user, "ch-1", 3)).await;
    local
        .wait_settled(Duration::from_secs(60), processed(1))
        .await;
    let told = credits_told(&fake, user);
    let ok: Vec<&String> = told
        .iter()
        .filter(|(s, _)| *s == 200)
        .map(|(_, t)| t)
        .collect();
    assert_eq!(ok, ["echo 1: credited ch-1 3, balance 3"], "{told:?}");
    assert_eq!(told.iter().filter(|(s, _)| *s == 502).count(), 2);

    // Telegram's connections are refused for a while: nothing arrives, then the reply does.
    let stopped = fake.clone();
    fake.shutdown().await;
    post_update(&local, SECRET, &paid(2, user, "ch-2", 2)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        credits_told(&stopped, user).len(),
        3,
        "nothing reached a stopped Telegram"
    );
    let fake = FakeTelegram::start_at(on.addr, Default::default())
        .await
        .unwrap();
    local
        .wait_settled(Duration::from_secs(60), processed(2))
        .await;
    let told = credits_told(&fake, user);
    assert_eq!(
        told,
        [(200, "echo 2: credited ch-2 2, balance 5".to_owned())]
    );

    // The token is revoked: the update is dead-lettered with the reason, nothing credited.
    fake.inject(Fault::Unauthorized, Scope::Global, Times::Always);
    post_update(&local, SECRET, &paid(3, user, "ch-3", 4)).await;
    let status = local
        .wait_settled(Duration::from_secs(60), |s| {
            s["counters"]["dead_lettered"].as_u64() == Some(1)
        })
        .await;
    fake.clear_faults();
    let data_dir = on.dir.path().to_str().unwrap();
    let charges: Vec<String> = listed(data_dir)
        .iter()
        .filter_map(|e| Some(e["id"].as_str()?.to_owned()))
        .collect();
    assert!(
        !charges.contains(&"ch-3".to_owned()),
        "{charges:?} {status}"
    );

    // SIGKILL while the reply crediting a charge is on the wire (Telegram took it and holds its
    // answer 3 s): after the restart the charge is still credited once.
    fake.inject(
        Fault::Timeout(Duration::from_secs(3)),
        Scope::Global,
        Times::Once,
    );
    post_update(&local, SECRET, &paid(4, user, "ch-4", 1)).await;
    wait_for(|| {
        credits_told(&fake, user)
            .iter()
            .any(|(_, t)| t.contains("ch-4"))
    })
    .await;
    local.kill();
    let mut local = on.restart();
    local.wait_ready().await;
    local
        .wait_settled(Duration::from_secs(60), processed(3))
        .await;
    let told = credits_told(&fake, user);
    assert!(
        told.iter()
            .filter(|(_, t)| t.contains("ch-4"))
            .all(|(_, t)| t == "echo 4: credited ch-4 1, balance 6"),
        "one credit, whatever was sent again: {told:?}"
    );
    let charges = listed(data_dir);
    let ids: Vec<&str> = charges.iter().filter_map(|e| e["id"].as_str()).collect();
    assert_eq!(ids.len(), 3, "{charges:?}");
    for id in ["ch-1", "ch-2", "ch-4"] {
        assert!(ids.contains(&id), "{ids:?}");
    }
    assert!(local.terminate().await.success());
}
