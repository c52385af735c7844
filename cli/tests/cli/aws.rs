//! `tgq dlq`, `tgq status`, `tgq webhook set` and `tgq poll --stack` against a deployment on moto: the table and queues
//! created as `template.yaml` declares them, and a CloudFormation stack whose outputs name them as
//! a tgq stack's do. Fails, naming the fix, without `AWS_ENDPOINT_URL` (scripts/test starts moto).

use crate::common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use bytes::Bytes;
use common::{audit_entries, ids_by_update, message_update, run};
use serde_json::{json, Value};
use tgq_aws::{DynamoStore, SqsQueue};
use tgq_core::clock::{Clock as _, SystemClock};
use tgq_core::dead::{Burial, DeadReason, FailureClass};
use tgq_core::ids::{BotId, GroupKey, RecordKey, UpdateId};
use tgq_core::ports::{
    Claim, ClaimRequest, DeadLetter, DeadLetters as _, RecordReader as _, Settlement,
    UpdateLedger as _, UpdateStore as _,
};
use tgq_core::record::{Status, Timestamp, UpdateRecord};
use tgq_e2e::broadcasts::BroadcastParts;
use tgq_e2e::emulator::{self, Stack};
use tgq_fake_telegram::FakeTelegram;

/// moto's identity for every caller.
const MOTO_PRINCIPAL: &str = "arn:aws:sts::123456789012:user/moto";

/// A deployment on moto and the stack that names it.
struct Deployed {
    name: String,
    resources: Stack,
    store: Arc<DynamoStore>,
    dlq: Arc<SqsQueue>,
    sqs: aws_sdk_sqs::Client,
    sdk: aws_config::SdkConfig,
}

/// Creates the resources and a stack whose outputs name them, with the SSM parameters a tgq stack
/// names (the bot token, the webhook secret) and `outputs` on top.
async fn deploy(purpose: &str, token: &str, outputs: &[(&str, &str)]) -> Deployed {
    deploy_as(None, purpose, token, outputs).await
}

/// [`deploy`] under the stack name `name` (a stack of that name left by an earlier run is deleted
/// first), or one unique to the test.
async fn deploy_as(
    name: Option<&str>,
    purpose: &str,
    token: &str,
    outputs: &[(&str, &str)],
) -> Deployed {
    let sdk = emulator::sdk_config().await;
    let resources = Stack::create(&sdk, purpose)
        .await
        .expect("resources on moto");
    let name = match name {
        Some(name) => {
            let stacks = aws_sdk_cloudformation::Client::new(&sdk);
            let _ = stacks.delete_stack().stack_name(name).send().await;
            name.to_owned()
        }
        None => resources.table.replace("tgq-e2e-", "ops-"),
    };
    let broadcasts = BroadcastParts::create(&sdk, &resources)
        .await
        .expect("a broadcasts queue on moto");
    let mut template_outputs = serde_json::Map::new();
    for (key, value) in [
        ("TableName", resources.table.as_str()),
        ("UpdatesQueueUrl", resources.queue_url.as_str()),
        ("DeadLetterQueueUrl", resources.dlq_url.as_str()),
        ("BroadcastsQueueUrl", broadcasts.queue_url.as_str()),
    ]
    .iter()
    .chain(outputs)
    {
        template_outputs.insert((*key).to_owned(), json!({ "Value": value }));
    }
    template_outputs.insert(
        "BotTokenParameterName".into(),
        json!({ "Value": { "Ref": "BotToken" } }),
    );
    template_outputs.insert(
        "WebhookSecretParameterName".into(),
        json!({ "Value": { "Ref": "WebhookSecret" } }),
    );
    let template = json!({
        "Resources": {
            "BotToken": {"Type": "AWS::SSM::Parameter", "Properties": {
                "Name": format!("/{name}/bot-token"), "Type": "String", "Value": token}},
            "WebhookSecret": {"Type": "AWS::SSM::Parameter", "Properties": {
                "Name": format!("/{name}/webhook-secret"), "Type": "String",
                "Value": "stack-webhook-secret"}},
        },
        "Outputs": template_outputs,
    });
    aws_sdk_cloudformation::Client::new(&sdk)
        .create_stack()
        .stack_name(&name)
        .template_body(template.to_string())
        .send()
        .await
        .expect("a stack on moto");
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    Deployed {
        store: Arc::new(DynamoStore::new(
            aws_sdk_dynamodb::Client::new(&sdk),
            resources.table.clone(),
        )),
        dlq: Arc::new(SqsQueue::new(sqs.clone(), resources.dlq_url.clone())),
        name,
        resources,
        sqs,
        sdk,
    }
}

fn key(update_id: i64) -> RecordKey {
    RecordKey::new(BotId::new("demo").unwrap(), UpdateId(update_id))
}

/// [`deploy`] of a stack that serves several bots: their parameters under a prefix unique to the
/// run (returned with it), their webhooks at `webhook_prefix` and the bot's id, Telegram at
/// `fake`; `outputs` on top.
async fn deploy_bots(
    purpose: &str,
    fake: &FakeTelegram,
    webhook_prefix: &str,
    outputs: &[(&str, &str)],
) -> (Deployed, String) {
    let prefix = format!("/tgq/{purpose}-{}/bots/", SystemClock.now().0);
    let api_url = fake.url();
    let mut all = vec![
        ("BotsParameterPrefix", prefix.as_str()),
        ("BotWebhookUrlPrefix", webhook_prefix),
        ("TelegramApiUrl", api_url.as_str()),
    ];
    all.extend_from_slice(outputs);
    let d = deploy(purpose, fake.token(), &all).await;
    (d, prefix)
}

/// The token of the second bot the several-bots guide adds.
const SECOND_BOT_TOKEN: &str = "654321:guide-second-bot";

/// A fake Bot API that takes [`SECOND_BOT_TOKEN`] besides its own, and a stack for several bots
/// talking to it (see [`deploy_bots`]).
async fn deploy_two_bots(
    purpose: &str,
    webhook_prefix: &str,
    outputs: &[(&str, &str)],
) -> (FakeTelegram, Deployed) {
    let fake = FakeTelegram::start().await.unwrap();
    fake.accept_token(SECOND_BOT_TOKEN);
    let (d, _) = deploy_bots(purpose, &fake, webhook_prefix, outputs).await;
    (fake, d)
}

/// Claims the stored update `update_id` of `group` and buries it as the worker does when its run
/// fails for good: its record DEAD with the run's number as its attempts, a letter on the
/// dead-letter queue.
async fn claim_and_bury(
    store: &DynamoStore,
    dlq: &SqsQueue,
    update_id: i64,
    group: &GroupKey,
    body: Bytes,
) {
    let now = SystemClock.now();
    let request = ClaimRequest {
        key: key(update_id),
        group: group.clone(),
        payload: body.clone(),
        now,
        lease_until: now.plus(Duration::from_secs(60)),
        expires_at: now.plus(Duration::from_secs(86_400)),
    };
    let Claim::Run(claimed) = store.claim(&request).await.unwrap() else {
        panic!("the claim of update {update_id} runs");
    };
    let burial = Burial {
        reason: DeadReason::Permanent,
        class: FailureClass::Permanent,
        error: "Telegram answered 403: Forbidden: bot was blocked by the user".into(),
        attempts: claimed.lease.token,
    };
    store
        .settle(&claimed.lease, &Settlement::Dead(burial.clone()), &[])
        .await
        .unwrap();
    let letter = DeadLetter::for_update(&key(update_id), group, body, &burial);
    dlq.dead_letter(&letter).await.unwrap();
}

impl Deployed {
    /// User 42's payment of `stars` with charge `id`, recorded in bot `demo`'s ledger at
    /// `recorded_at` by the settle of update `update`, as the worker records it.
    async fn record_charge(&self, id: &str, stars: u32, update: i64, recorded_at: Timestamp) {
        use tgq_core::payment::{Charge, ChargeWrite};

        let now = SystemClock.now();
        let request = ClaimRequest {
            key: RecordKey::new(BotId::new("demo").unwrap(), UpdateId(update)),
            group: GroupKey::new("42"),
            payload: Bytes::from(format!(r#"{{"update_id":{update}}}"#)),
            now,
            lease_until: now.plus(Duration::from_secs(30)),
            expires_at: now.plus(Duration::from_secs(3600)),
        };
        let Claim::Run(claimed) = self.store.claim(&request).await.unwrap() else {
            panic!("a new record runs");
        };
        let charge = Charge {
            id: id.into(),
            user: 42,
            stars,
            payload: "gem".into(),
            update_id: update,
            recorded_at,
            refunded_at: None,
            subscription: None,
        };
        let settlement = Settlement::Done {
            state: None,
            charges: vec![ChargeWrite::paid(charge)],
        };
        self.store
            .settle(&claimed.lease, &settlement, &[])
            .await
            .unwrap();
    }

    /// Buries an update as the worker does: its record DEAD, its letter on the dead-letter queue.
    async fn bury(&self, update_id: i64, chat: i64) {
        let now = SystemClock.now();
        let body = Bytes::from(message_update(update_id, chat, "a dead update").to_string());
        let group = GroupKey::new(chat.to_string());
        let record = UpdateRecord::received(
            key(update_id),
            group.clone(),
            body.clone(),
            now,
            Duration::from_secs(86_400),
        );
        self.store.insert(&record, now).await.unwrap();
        claim_and_bury(&self.store, &self.dlq, update_id, &group, body).await;
    }

    /// `tgq ARGS --stack NAME`, expected to succeed, its stdout.
    fn tgq(&self, envs: &[(&str, &str)], args: &[&str]) -> String {
        let mut all = args.to_vec();
        all.extend(["--stack", self.name.as_str()]);
        let (status, stdout, stderr) = run(envs, &all);
        assert!(status.success(), "{all:?}: {stderr}\n{stdout}");
        stdout
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        let stdout = self.tgq(&[], &all);
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{all:?}: {e}: {stdout}"))
    }

    async fn status(&self, update_id: i64) -> Option<Status> {
        self.store
            .get(&key(update_id), SystemClock.now())
            .await
            .unwrap()
            .map(|r| r.status)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn dead_letters_on_aws_are_listed_shown_replayed_purged_and_audited() {
    let d = deploy("dlq", "123456:unused", &[]).await;
    d.bury(1, 7).await;
    d.bury(2, 7).await;
    d.bury(3, 8).await;

    let letters = d.json(&["dlq", "list"]);
    let ids = ids_by_update(&letters);
    assert_eq!(
        ids.keys().copied().collect::<Vec<_>>(),
        [1, 2, 3],
        "{letters}"
    );
    assert_eq!(letters[0]["reason"], "permanent_error", "{letters}");
    assert!(letters[0]["age_ms"].is_u64(), "{letters}");
    assert!(letters[0].get("body").is_none(), "the body only with show");

    let shown = d.tgq(&[], &["dlq", "show", &ids[&3]]);
    assert!(shown.contains("a dead update"), "{shown}");
    assert!(shown.contains("permanent error"), "{shown}");

    let report = d.json(&["dlq", "replay", &ids[&1], &ids[&2]]);
    assert_eq!(report["acted"].as_array().unwrap().len(), 2, "{report}");
    assert_eq!(d.status(1).await, Some(Status::Queued));
    let output = d
        .sqs
        .receive_message()
        .queue_url(&d.resources.queue_url)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .unwrap();
    let sent: Vec<(String, String)> = output
        .messages
        .unwrap_or_default()
        .iter()
        .map(|m| {
            let attributes = m.attributes.clone().unwrap_or_default();
            (
                attributes[&MessageSystemAttributeName::MessageGroupId].clone(),
                attributes[&MessageSystemAttributeName::MessageDeduplicationId].clone(),
            )
        })
        .collect();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[0].0, "demo:7");
    assert!(
        sent[0].1.starts_with("demo:1:replay:"),
        "a new dedup id: {sent:?}"
    );
    assert!(sent[1].1.starts_with("demo:2:replay:"), "{sent:?}");
    assert_eq!(ids_by_update(&d.json(&["dlq", "list"])).len(), 1);

    let (refused, _, stderr) = run(&[], &["dlq", "purge", "--all", "--stack", &d.name]);
    assert!(!refused.success());
    assert!(stderr.contains("--yes"), "{stderr}");
    let purged = d.json(&["dlq", "purge", "--all", "--yes"]);
    assert_eq!(purged["acted"][0]["update_id"], 3, "{purged}");
    assert!(d.json(&["dlq", "list"]).as_array().unwrap().is_empty());

    let audit = d.json(&["dlq", "audit"]);
    let entries = audit_entries(&audit);
    assert_eq!(
        entries.len(),
        3,
        "newest first: the purge, then the two replays: {audit}"
    );
    assert_eq!(entries[0], ("purge", 3, MOTO_PRINCIPAL));
    assert!(entries[1..]
        .iter()
        .all(|(action, _, who)| *action == "replay" && *who == MOTO_PRINCIPAL));

    let (status, stdout, stderr) = run(
        &[],
        &[
            "dlq",
            "list",
            "--json",
            "--table",
            &d.resources.table,
            "--queue-url",
            &d.resources.queue_url,
            "--dlq-url",
            &d.resources.dlq_url,
        ],
    );
    assert!(status.success(), "{stderr}");
    assert_eq!(
        stdout.trim(),
        "[]",
        "explicit resources name the same queue"
    );
}

/// Buries the update of every message on the stack's updates queue again, as a worker whose
/// every run fails for good would: its record DEAD once more and a new letter, `attempts` on.
async fn fail_again(
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    store: Arc<DynamoStore>,
    dlq: Arc<SqsQueue>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> u32 {
    let mut buried = 0;
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        let received = sqs
            .receive_message()
            .queue_url(&queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await
            .unwrap();
        for message in received.messages.unwrap_or_default() {
            let body = Bytes::from(message.body.clone().unwrap_or_default());
            let update: Value = serde_json::from_slice(&body).unwrap();
            let update_id = update["update_id"].as_i64().unwrap();
            let chat = update["message"]["chat"]["id"].as_i64().unwrap();
            let group = GroupKey::new(chat.to_string());
            claim_and_bury(&store, &dlq, update_id, &group, body).await;
            sqs.delete_message()
                .queue_url(&queue_url)
                .receipt_handle(message.receipt_handle.unwrap_or_default())
                .send()
                .await
                .unwrap();
            buried += 1;
        }
    }
    buried
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_all_on_a_stack_replays_each_letter_once_while_the_replayed_updates_fail_again() {
    let d = deploy("replayonce", "123456:unused", &[]).await;
    for update_id in 1..=5 {
        d.bury(update_id, 40 + update_id).await;
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let worker = tokio::spawn(fail_again(
        d.sqs.clone(),
        d.resources.queue_url.clone(),
        d.store.clone(),
        d.dlq.clone(),
        stop.clone(),
    ));
    // Each replayed update comes back as a new letter while the replay still walks the queue.
    let name = d.name.clone();
    let replay = tokio::task::spawn_blocking(move || {
        run(&[], &["dlq", "replay", "--all", "--json", "--stack", &name])
    });
    let (status, stdout, stderr) = tokio::time::timeout(Duration::from_secs(120), replay)
        .await
        .expect("the replay ends")
        .unwrap();
    assert!(status.success(), "{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let acted: Vec<i64> = report["acted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|letter| letter["update_id"].as_i64().unwrap())
        .collect();
    assert_eq!(
        acted,
        [1, 2, 3, 4, 5],
        "each letter replayed once: {report}"
    );

    // The five come back as five new letters, left for the next replay.
    let started = std::time::Instant::now();
    let letters = loop {
        let letters = d.json(&["dlq", "list"]);
        if letters.as_array().unwrap().len() >= 5 || started.elapsed() > Duration::from_secs(30) {
            break letters;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let buried = worker.await.unwrap();
    assert_eq!(buried, 5, "{letters}");
    assert_eq!(
        ids_by_update(&letters).keys().copied().collect::<Vec<_>>(),
        [1, 2, 3, 4, 5],
        "{letters}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn status_on_aws_shows_the_queues_the_alarms_and_the_webhook_through_the_stack() {
    let fake = FakeTelegram::start().await.unwrap();
    fake.set_webhook_url(Some("https://hook.example.com/webhook".into()));
    let d = deploy(
        "status",
        fake.token(),
        &[("TelegramApiUrl", fake.url().as_str())],
    )
    .await;
    d.bury(1, 7).await;
    for n in 0..2 {
        d.sqs
            .send_message()
            .queue_url(&d.resources.queue_url)
            .message_body(message_update(100 + n, 9, "waiting").to_string())
            .message_group_id("demo:9")
            .message_deduplication_id(format!("demo:{}", 100 + n))
            .send()
            .await
            .unwrap();
    }
    aws_sdk_cloudwatch::Client::new(&d.sdk)
        .put_metric_alarm()
        .alarm_name(format!("{}-dlq-not-empty", d.name))
        .namespace("AWS/SQS")
        .metric_name("ApproximateNumberOfMessagesVisible")
        .statistic(aws_sdk_cloudwatch::types::Statistic::Maximum)
        .period(60)
        .evaluation_periods(1)
        .threshold(0.0)
        .comparison_operator(aws_sdk_cloudwatch::types::ComparisonOperator::GreaterThanThreshold)
        .send()
        .await
        .unwrap();

    let status = d.json(&["status"]);
    assert_eq!(status["queue"]["visible"], 2, "{status}");
    assert_eq!(status["dead_letters"]["visible"], 1, "{status}");
    assert_eq!(
        status["webhook"]["url"], "https://hook.example.com/webhook",
        "{status}"
    );
    assert_eq!(status["webhook"]["pending_update_count"], 0, "{status}");
    assert_eq!(
        status["alarms"][0]["name"],
        format!("{}-dlq-not-empty", d.name),
        "{status}"
    );
    let text = d.tgq(&[], &["status"]);
    for part in [
        "2 visible",
        "dead letters   1",
        "https://hook.example.com/webhook",
        "dlq-not-empty",
    ] {
        assert!(text.contains(part), "{part} in {text}");
    }
    assert!(!text.contains(fake.token()), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn webhook_set_with_a_stack_takes_the_url_secret_and_token_from_it_and_checks_first() {
    let fake = FakeTelegram::start().await.unwrap();
    let url = "https://abc123.lambda-url.us-east-1.on.aws/";
    let d = deploy(
        "hook",
        fake.token(),
        &[("WebhookUrl", url), ("TelegramApiUrl", fake.url().as_str())],
    )
    .await;

    let set_with = |option: &str, value: &str| {
        run(&[], &["webhook", "set", "--stack", &d.name, option, value])
    };
    let (refused, _, stderr) = set_with("--allowed-updates", "message,bogus_kind");
    assert_eq!(refused.code(), Some(2), "{stderr}");
    assert!(stderr.contains("bogus_kind"), "{stderr}");
    let (refused, _, stderr) = set_with("--max-connections", "101");
    assert_eq!(refused.code(), Some(2), "{stderr}");
    assert!(
        fake.calls().is_empty(),
        "a bad argument is refused before Telegram is asked"
    );

    let said = d.tgq(&[], &["webhook", "set", "--max-connections", "10"]);
    assert!(said.contains(url), "{said}");
    let set = fake
        .calls()
        .into_iter()
        .find(|c| c.method == "setWebhook")
        .expect("setWebhook was called");
    assert_eq!(set.params["url"], url);
    assert_eq!(set.params["secret_token"], "stack-webhook-secret");
    assert_eq!(set.params["max_connections"], 10);
    assert_eq!(
        set.params["allowed_updates"],
        json!([
            "message",
            "edited_message",
            "channel_post",
            "edited_channel_post",
            "callback_query",
            "pre_checkout_query"
        ]),
        "the echo bot's kinds (TGQ_HANDLER=echo)"
    );
    assert!(
        fake.calls().iter().any(|c| c.method == "getWebhookInfo"),
        "confirmed with getWebhookInfo"
    );
    assert!(!said.contains("stack-webhook-secret") && !said.contains(fake.token()));
}

/// The `tgq` lines of docs/OPERATIONS.md's "Commands and targets" section, in order, each split into its arguments
/// (comments dropped).
fn operating_guide_commands() -> Vec<Vec<String>> {
    const GUIDE: &str = include_str!("../../../docs/OPERATIONS.md");
    let section = common::doc_section(GUIDE, "docs/OPERATIONS.md", "Commands and targets");
    let mut in_code = false;
    let mut commands = Vec::new();
    for line in section.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        let Some(command) = line.strip_prefix("tgq ").filter(|_| in_code) else {
            continue;
        };
        let command = command.split(" #").next().unwrap_or(command);
        commands.push(command.split_whitespace().map(str::to_owned).collect());
    }
    commands
}

#[tokio::test(flavor = "multi_thread")]
async fn the_operating_guide_runs_as_written_against_moto() {
    let fake = FakeTelegram::start().await.unwrap();
    let api_url = fake.url();
    let d = deploy_as(
        Some("tgq"),
        "guide",
        fake.token(),
        &[
            ("WebhookUrl", "https://guide.lambda-url.us-east-1.on.aws/"),
            ("TelegramApiUrl", api_url.as_str()),
            ("BotId", "demo"),
        ],
    )
    .await;
    d.bury(1, 7).await;
    d.bury(2, 8).await;
    let envs = [
        ("TELEGRAM_BOT_TOKEN", fake.token()),
        ("TELEGRAM_API_URL", api_url.as_str()),
    ];
    let ran = run_operating_guide(&d, &envs, 3, |_| true).await;
    assert_ran(
        &ran,
        &[
            "webhook set",
            "status --stack",
            "dlq list",
            "dlq show",
            "dlq replay",
            "dlq audit",
            "dlq purge",
            "destroy --stack",
        ],
    );
    assert!(
        fake.calls().iter().any(|c| c.method == "setWebhook"),
        "the guide's webhook set reached Telegram"
    );
}

/// Each of the `expected` commands is among those a guide `ran`.
fn assert_ran(ran: &[String], expected: &[&str]) {
    for expected in expected {
        assert!(
            ran.iter().any(|r| r.starts_with(expected)),
            "the guide runs `tgq {expected}`: {ran:?}"
        );
    }
}

/// Runs the `wanted` `tgq` lines of the operating guide on `d`'s stack with `envs`, as written but
/// for the stack's name; the guide's ID is a letter `tgq dlq list` names, buried (from update
/// `next_update` on) when none is left. Returns the lines run.
async fn run_operating_guide(
    d: &Deployed,
    envs: &[(&str, &str)],
    mut next_update: i64,
    wanted: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let mut ran = Vec::new();
    for mut args in operating_guide_commands().into_iter().filter(|a| wanted(a)) {
        if let Some(at) = args.iter().position(|a| a == "--stack") {
            args[at + 1] = d.name.clone();
        }
        // The guide's recipients and payload files, written where the command finds them.
        for (name, content) in [
            ("subscribers.txt", "# the guide's subscribers\n41\n42\n43\n"),
            ("news.json", r#"{"text": "We are back!"}"#),
        ] {
            if let Some(at) = args.iter().position(|a| a == name) {
                let file = std::env::temp_dir().join(format!("{}-{name}", d.name));
                std::fs::write(&file, content).unwrap();
                args[at] = file.display().to_string();
            }
        }
        if args.iter().any(|a| a == "ID") {
            let mut letters = d.json(&["dlq", "list"]);
            if letters.as_array().unwrap().is_empty() {
                d.bury(next_update, 9).await;
                next_update += 1;
                letters = d.json(&["dlq", "list"]);
            }
            let id = letters[0]["id"].as_str().unwrap().to_owned();
            args = args
                .into_iter()
                .map(|a| if a == "ID" { id.clone() } else { a })
                .collect();
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (status, stdout, stderr) = run(envs, &args);
        assert!(status.success(), "tgq {args:?}: {stderr}\n{stdout}");
        ran.push(args.join(" "));
    }
    ran
}

#[tokio::test(flavor = "multi_thread")]
async fn the_operator_policy_grants_exactly_what_the_tgq_commands_use() {
    use tgq_e2e::template::{policy_actions, unseen_with_reason, UNSEEN};
    let (fake, d) = deploy_two_bots(
        "operator",
        "https://operator.lambda-url.us-east-1.on.aws/webhook/",
        &[
            (
                "WebhookUrl",
                "https://operator.lambda-url.us-east-1.on.aws/",
            ),
            ("BotId", "demo"),
        ],
    )
    .await;
    d.bury(1, 7).await;
    d.bury(2, 8).await;
    // Every command an operator runs goes through one proxy that names each AWS action.
    let proxy = tgq_e2e::proxy::Proxy::start(&emulator::endpoint())
        .await
        .unwrap();
    let endpoint = proxy.url();
    let through = [("AWS_ENDPOINT_URL", endpoint.as_str())];
    // The registry's commands first, then the operating guide's but `tgq destroy` (deleting the
    // stack takes CloudFormation's permissions over every resource, not an operator's).
    let dir = tempfile::tempdir().unwrap();
    run_stack_block(&fake, &d, dir.path(), &through);
    let api_url = fake.url();
    let envs = [
        ("TELEGRAM_BOT_TOKEN", fake.token()),
        ("TELEGRAM_API_URL", api_url.as_str()),
        through[0],
    ];
    let ran = run_operating_guide(&d, &envs, 3, |args| args[0] != "destroy").await;
    assert!(ran.iter().any(|r| r.starts_with("dlq replay")), "{ran:?}");

    // SQS authorizes a batch call by its single counterpart's action.
    let used: BTreeSet<String> = proxy
        .actions()
        .into_keys()
        .map(|action| match action.as_str() {
            "sqs:DeleteMessageBatch" => "sqs:DeleteMessage".to_owned(),
            "sqs:ChangeMessageVisibilityBatch" => "sqs:ChangeMessageVisibility".to_owned(),
            "sqs:SendMessageBatch" => "sqs:SendMessage".to_owned(),
            _ => action,
        })
        .collect();
    let granted = policy_actions("OperatorPolicy");
    let unseen = unseen_with_reason("OperatorPolicy");
    let mut failures = Vec::new();
    for action in used.iter().filter(|a| !granted.contains(*a)) {
        failures.push(format!(
            "the tgq command uses {action}, which OperatorPolicy does not grant"
        ));
    }
    for action in granted.iter().filter(|a| !used.contains(*a)) {
        if !unseen.contains_key(action) {
            failures.push(format!(
                "OperatorPolicy grants {action}, which no command used, and does not say why \
                 (a trailing `{UNSEEN} …` on its line)"
            ));
        }
    }
    for action in unseen.keys().filter(|a| used.contains(*a)) {
        failures.push(format!(
            "{action} is marked `{UNSEEN}` but a command uses it"
        ));
    }
    assert!(
        failures.is_empty(),
        "{}\nused: {used:?}",
        failures.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_with_a_stack_takes_bot_table_queues_token_and_bot_api_from_it_and_status_shows_the_lease(
) {
    let fake = FakeTelegram::start().await.unwrap();
    let d = deploy(
        "pollstack",
        fake.token(),
        &[
            ("TelegramApiUrl", fake.url().as_str()),
            ("BotId", "stacked"),
        ],
    )
    .await;
    let health = format!("127.0.0.1:{}", common::free_port());
    // Through a proxy that names every AWS action, held to the stack's OperatorPolicy below.
    let proxy = tgq_e2e::proxy::Proxy::start(&emulator::endpoint())
        .await
        .unwrap();
    let endpoint = proxy.url();
    // No TGQ_BOT_ID, no TELEGRAM_BOT_TOKEN, no TELEGRAM_API_URL, no table or queue: all from the
    // stack.
    let mut poller = common::tgq(&[("AWS_ENDPOINT_URL", endpoint.as_str())])
        .args(["poll", "--stack", &d.name, "--health-addr", &health])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("tgq poll starts");
    fake.push_updates([message_update(1, 7, "one"), message_update(2, 8, "two")]);
    let started = std::time::Instant::now();
    while fake.pending_updates() > 0 {
        if started.elapsed() > Duration::from_secs(30) || poller.try_wait().unwrap().is_some() {
            let _ = poller.kill();
            let output = poller.wait_with_output().unwrap();
            panic!(
                "tgq poll --stack did not confirm the updates: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status: Value = reqwest::get(format!("http://{health}/status"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (status["role"].clone(), status["offset"].clone()),
        (json!("leader"), json!(3))
    );
    // tgq status --stack shows the lease as the table holds it.
    let shown = d.tgq(&[], &["status"]);
    assert!(
        shown.contains("poller lease   leader ") && shown.contains("token 1, offset 3"),
        "{shown}"
    );
    let _ = poller.kill();
    let _ = poller.wait();
    let queued = emulator::drain(&d.sqs, &d.resources.queue_url)
        .await
        .unwrap();
    assert_eq!(queued.len(), 2);
    let granted = tgq_e2e::template::policy_actions("OperatorPolicy");
    let ungranted: Vec<String> = proxy
        .actions()
        .into_keys()
        .filter(|action| !granted.contains(action))
        .collect();
    assert!(
        ungranted.is_empty(),
        "tgq poll uses what OperatorPolicy does not grant: {ungranted:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bots_on_a_stack_live_in_ssm_under_its_prefix_and_get_the_stacks_webhook_url() {
    let fake = FakeTelegram::start().await.unwrap();
    let webhook_prefix = "https://abc123.lambda-url.us-east-1.on.aws/webhook/";
    let sdk = emulator::sdk_config().await;
    let (d, prefix) = deploy_bots("bots", &fake, webhook_prefix, &[]).await;
    let token = [("TELEGRAM_BOT_TOKEN", fake.token())];

    let said = d.tgq(&token, &["bots", "add", "shop", "--handler", "echo"]);
    assert!(
        said.contains("shop") && !said.contains(fake.token()),
        "{said}"
    );
    let ssm = aws_sdk_ssm::Client::new(&sdk);
    let secret = ssm
        .get_parameter()
        .name(format!("{prefix}shop/secret"))
        .with_decryption(true)
        .send()
        .await
        .expect("the secret parameter")
        .parameter
        .unwrap();
    assert_eq!(
        secret.r#type,
        Some(aws_sdk_ssm::types::ParameterType::SecureString)
    );
    let set = fake
        .calls()
        .into_iter()
        .find(|c| c.method == "setWebhook")
        .expect("setWebhook was called");
    assert_eq!(set.params["url"], format!("{webhook_prefix}shop"));
    assert_eq!(set.params["secret_token"], secret.value.unwrap().as_str());

    let (refused, _, stderr) = run(
        &token,
        &[
            "bots",
            "add",
            "shop",
            "--handler",
            "echo",
            "--stack",
            &d.name,
        ],
    );
    assert_eq!(refused.code(), Some(1));
    assert!(stderr.contains("already registered"), "{stderr}");

    // A broadcast is for a bot the stack serves: one of its registry's, here.
    let dir = tempfile::tempdir().unwrap();
    let recipients = dir.path().join("recipients.txt");
    std::fs::write(&recipients, "1\n2\n").unwrap();
    let recipients = recipients.to_str().unwrap();
    let (refused, _, stderr) = run(
        &[],
        &[
            "broadcast",
            "start",
            "--bot",
            "ghost",
            "--text",
            "hi",
            "--to",
            recipients,
            "--stack",
            &d.name,
        ],
    );
    assert_eq!(refused.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("bot `ghost` is not served by the stack, which serves shop"),
        "{stderr}"
    );
    let jobs = d.json(&["broadcast", "list"]);
    assert_eq!(jobs, json!([]), "nothing was stored");
    let started = d.tgq(
        &[],
        &[
            "broadcast",
            "start",
            "--bot",
            "shop",
            "--text",
            "hi",
            "--to",
            recipients,
        ],
    );
    assert!(started.contains("bot shop"), "{started}");
    let jobs = d.json(&["broadcast", "list"]);
    assert_eq!(jobs.as_array().map(Vec::len), Some(1), "{jobs}");

    let listed: Value = serde_json::from_str(&d.tgq(&[], &["bots", "list", "--json"])).unwrap();
    assert_eq!(listed["bots"][0]["id"], "shop");
    assert_eq!(
        listed["bots"][0]["webhook_url"],
        format!("{webhook_prefix}shop")
    );
    assert_eq!(listed["queue"]["visible"], 0, "{listed}");

    d.tgq(&[], &["bots", "remove", "shop"]);
    let left = ssm
        .get_parameters_by_path()
        .path(&prefix)
        .recursive(true)
        .send()
        .await
        .unwrap();
    assert!(
        left.parameters.unwrap_or_default().is_empty(),
        "every parameter deleted"
    );
    assert!(fake.calls().iter().any(|c| c.method == "deleteWebhook"));
}

/// The code blocks of docs/OPERATIONS.md's "Hosting several bots" section, in order, each a list of lines
/// (comments dropped, blank lines skipped).
fn several_bots_guide_blocks() -> Vec<Vec<String>> {
    const GUIDE: &str = include_str!("../../../docs/OPERATIONS.md");
    guide_blocks(GUIDE, "docs/OPERATIONS.md", "Hosting several bots")
}

/// The code blocks of cli/README.md's "Several bots" section: the same commands on `tgq local`.
fn several_local_bots_guide_blocks() -> Vec<Vec<String>> {
    const GUIDE: &str = include_str!("../../README.md");
    guide_blocks(GUIDE, "cli/README.md", "Several bots")
}

/// The code blocks of `doc`'s section `heading`, each a list of lines (comments dropped, blank
/// lines skipped).
fn guide_blocks(doc: &str, path: &str, heading: &str) -> Vec<Vec<String>> {
    let section = common::doc_section(doc, path, heading);
    let mut blocks = Vec::new();
    let mut block: Option<Vec<String>> = None;
    for line in section.lines() {
        if line.starts_with("```") {
            match block.take() {
                Some(done) => blocks.push(done),
                None => block = Some(Vec::new()),
            }
            continue;
        }
        let line = line.split(" #").next().unwrap_or(line).trim();
        if let (Some(lines), false) = (block.as_mut(), line.is_empty()) {
            lines.push(line.to_owned());
        }
    }
    blocks
}

/// Runs one block of the guide: `export TELEGRAM_BOT_TOKEN=…` lines pick the next of `tokens`,
/// `tgq …` lines run (with `--stack tgq` meaning `stack`) and must succeed.
fn run_guide_block(
    lines: &[String],
    tokens: &mut impl Iterator<Item = String>,
    api_url: &str,
    stack: Option<&str>,
    dir: &std::path::Path,
    extra_envs: &[(&str, &str)],
) -> Vec<String> {
    let mut token = String::new();
    let mut ran = Vec::new();
    for line in lines {
        if line.starts_with("export TELEGRAM_BOT_TOKEN=") {
            token = tokens
                .next()
                .expect("a token for every export in the guide");
            continue;
        }
        let Some(command) = line.strip_prefix("tgq ") else {
            panic!("the guide's blocks hold only tgq commands and token exports: {line}");
        };
        let mut args: Vec<String> = command.split_whitespace().map(str::to_owned).collect();
        if let (Some(stack), Some(at)) = (stack, args.iter().position(|a| a == "--stack")) {
            args[at + 1] = stack.to_owned();
        }
        let mut envs = vec![("TELEGRAM_API_URL", api_url)];
        envs.extend_from_slice(extra_envs);
        if !token.is_empty() {
            envs.push(("TELEGRAM_BOT_TOKEN", token.as_str()));
        }
        let output = common::tgq(&envs)
            .args(&args)
            .current_dir(dir)
            .output()
            .expect("tgq runs");
        assert!(
            output.status.success(),
            "tgq {command}: {}{}",
            String::from_utf8_lossy(&output.stderr),
            String::from_utf8_lossy(&output.stdout)
        );
        ran.push(command.to_owned());
    }
    ran
}

/// Runs the several-bots guide's stack block on `d`'s stack from `dir`, its token exports taking
/// `fake`'s own bot's token, then [`SECOND_BOT_TOKEN`].
fn run_stack_block(
    fake: &FakeTelegram,
    d: &Deployed,
    dir: &std::path::Path,
    extra_envs: &[(&str, &str)],
) -> Vec<String> {
    let mut tokens = [fake.token().to_owned(), SECOND_BOT_TOKEN.to_owned()].into_iter();
    run_guide_block(
        &several_bots_guide_blocks()[0],
        &mut tokens,
        &fake.url(),
        Some(&d.name),
        dir,
        extra_envs,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_several_bots_guide_runs_as_written_against_moto_and_locally() {
    let (fake, d) = deploy_two_bots(
        "guide-bots",
        "https://guide.lambda-url.us-east-1.on.aws/webhook/",
        &[],
    )
    .await;
    let blocks = several_bots_guide_blocks();
    assert_eq!(
        blocks.len(),
        1,
        "one block, the stack's (the local one is cli/README.md's): {blocks:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    let ran = run_stack_block(&fake, &d, dir.path(), &[]);
    assert_ran(
        &ran,
        &[
            "bots add shop",
            "bots add news",
            "bots list",
            "bots remove news",
        ],
    );
    let listed: Value = serde_json::from_str(&d.tgq(&[], &["bots", "list", "--json"])).unwrap();
    let ids: Vec<&str> = listed["bots"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|bot| bot["id"].as_str())
        .collect();
    assert_eq!(ids, ["shop"], "news removed, shop kept");
    let webhooks: Vec<String> = fake
        .calls()
        .into_iter()
        .filter(|c| c.method == "setWebhook")
        .map(|c| c.params["url"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        webhooks,
        [
            "https://guide.lambda-url.us-east-1.on.aws/webhook/shop",
            "https://guide.lambda-url.us-east-1.on.aws/webhook/news"
        ]
    );

    let ran = run_guide_block(
        &several_local_bots_guide_blocks()[0],
        &mut std::iter::empty(),
        &fake.url(),
        None,
        dir.path(),
        &[],
    );
    assert!(
        ran.iter().any(|r| r.starts_with("bots add shop --offline")),
        "{ran:?}"
    );
    let local: Value = serde_json::from_slice(
        &std::fs::read(dir.path().join(".tgq").join("bots.json")).expect("the local registry"),
    )
    .unwrap();
    assert_eq!(local["bots"][0]["id"], "shop");
}

/// A shared AWS config file with one profile, `team`, signed in by `credential_process`: a script
/// that notes it was asked (in `asked`) and prints moto's test credentials.
fn credential_process_profile(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let asked = dir.join("asked");
    let script = dir.join("credentials.sh");
    common::write_script(
        &script,
        &format!(
            "#!/bin/sh\ntouch '{}'\necho '{{\"Version\": 1, \"AccessKeyId\": \"testing\", \"SecretAccessKey\": \"testing\"}}'\n",
            asked.display()
        ),
    );
    let config = dir.join("config");
    std::fs::write(
        &config,
        format!(
            "[profile team]\ncredential_process = {}\nregion = us-east-1\n",
            script.display()
        ),
    )
    .unwrap();
    (config, asked)
}

/// `tgq` with no credentials in its environment: only what `config` (an AWS config file) gives,
/// and no instance metadata (the suite reaches nothing but loopback).
fn tgq_without_credentials(
    config: &std::path::Path,
    profile: Option<&str>,
) -> std::process::Command {
    let mut command = common::tgq(&[
        ("AWS_CONFIG_FILE", config.to_str().unwrap()),
        ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ]);
    for name in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    ] {
        command.env_remove(name);
    }
    if let Some(profile) = profile {
        command.env("AWS_PROFILE", profile);
    }
    command
}

#[tokio::test(flavor = "multi_thread")]
async fn the_tgq_command_signs_in_through_a_credential_process_profile() {
    let d = deploy("signin", "1:x", &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let (config, asked) = credential_process_profile(dir.path());
    let output = tgq_without_credentials(&config, Some("team"))
        .args(["status", "--stack", &d.name, "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let status: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(status["queue"]["visible"], 0, "{status}");
    assert!(asked.exists(), "the profile's credential_process was asked");
}

#[tokio::test(flavor = "multi_thread")]
async fn without_credentials_a_command_says_so_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    std::fs::write(&config, "[default]\nregion = us-east-1\n").unwrap();
    let output = tgq_without_credentials(&config, None)
        .args(["status", "--stack", "any"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: no AWS credentials") && stderr.contains("aws sso login"),
        "{stderr}"
    );
}

/// A directory of stand-ins for the tools `tgq deploy` runs: `sam`, which records each call's
/// arguments in `sam-calls` (and the last call's, one by one, in `sam-argv`) and exits with the
/// code in `sam-exit` (0 when absent), and `rustup`,
/// `cargo-lambda` and `zig`, present as a developer's machine has them. The stack itself is made by
/// the test on moto (moto's CloudFormation cannot take what `sam deploy` sends: see
/// testing/e2e/tests/e2e/stack.rs), standing in for what `sam deploy` creates.
pub(crate) fn deploy_tools(dir: &std::path::Path) -> std::path::PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let calls = dir.join("sam-calls");
    let argv = dir.join("sam-argv");
    let exit = dir.join("sam-exit");
    let tools = [
        (
            "sam",
            format!(
                "#!/bin/sh\necho \"$@\" >> '{}'\nprintf '%s\\0' \"$@\" > '{}'\nexit $(/bin/cat '{}' 2>/dev/null || echo 0)\n",
                calls.display(),
                argv.display(),
                exit.display()
            ),
        ),
        (
            "rustup",
            "#!/bin/sh\necho aarch64-unknown-linux-gnu\necho x86_64-unknown-linux-gnu\n".to_owned(),
        ),
        ("cargo-lambda", "#!/bin/sh\nexit 0\n".to_owned()),
        ("zig", "#!/bin/sh\nexit 0\n".to_owned()),
    ];
    for (name, script) in tools {
        common::write_script(&bin.join(name), &script);
    }
    bin
}

/// The `--parameter-overrides` of the last `sam` call recorded in `argv`, as the pinned SAM CLI's
/// own parser reads them (python3 on the PATH is the test environment's, with the SAM CLI).
fn sam_reads_overrides(argv: &std::path::Path) -> serde_json::Value {
    let recorded = std::fs::read_to_string(argv).unwrap();
    let args: Vec<&str> = recorded.split('\0').filter(|arg| !arg.is_empty()).collect();
    let at = args
        .iter()
        .position(|arg| *arg == "--parameter-overrides")
        .expect("sam deploy is given parameters");
    let overrides = args[at + 1..]
        .iter()
        .take_while(|arg| !arg.starts_with("--"));
    let script = "import json, sys\n\
        from samcli.cli.types import CfnParameterOverridesType\n\
        print(json.dumps(CfnParameterOverridesType().convert(tuple(sys.argv[1:]), None, None)))";
    let output = std::process::Command::new("python3")
        .args(["-c", script])
        .args(overrides)
        .output()
        .expect("python3 with the SAM CLI");
    assert!(
        output.status.success(),
        "the SAM CLI refuses tgq deploy's parameters: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// [`tgq_deploy`], expected to succeed: (stdout, stderr).
fn tgq_deploys(
    dir: &std::path::Path,
    bin: &std::path::Path,
    envs: &[(&str, &str)],
    args: &[&str],
) -> (String, String) {
    let (status, stdout, stderr) = tgq_deploy(dir, bin, envs, args);
    assert!(status.success(), "{stderr}\n{stdout}");
    (stdout, stderr)
}

/// `tgq deploy|destroy ARGS` in `dir`, with `bin` as the whole PATH, and this repository's
/// `template.yaml` and `samconfig.toml` in `dir` as in a checkout (the stand-in `sam` reads
/// neither).
fn tgq_deploy(
    dir: &std::path::Path,
    bin: &std::path::Path,
    envs: &[(&str, &str)],
    args: &[&str],
) -> (std::process::ExitStatus, String, String) {
    let checkout = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::copy(checkout.join("template.yaml"), dir.join("template.yaml")).unwrap();
    std::fs::copy(checkout.join("samconfig.toml"), dir.join("samconfig.toml")).unwrap();
    // An empty cache of tgq's own tools: the stand-ins on PATH are the tools.
    let output = common::tgq(envs)
        .current_dir(dir)
        .env("PATH", bin)
        .env("TGQ_TOOLS_DIR", dir.join("tools"))
        .args(args)
        .output()
        .unwrap();
    (
        output.status,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// What `sam deploy` makes of the deploy named `stack` (which moto's CloudFormation cannot make
/// from SAM's template): a stack whose outputs name `resources`, the bot `mybot`, the parameters
/// `tgq deploy` keeps the token and the secret in, the webhook URL and the Bot API.
pub(crate) async fn stack_as_sam_deploy_leaves_it(
    sdk: &aws_config::SdkConfig,
    resources: &Stack,
    stack: &str,
    webhook_url: &str,
    api_url: &str,
) {
    let outputs = json!({
        "TableName": { "Value": resources.table },
        "UpdatesQueueUrl": { "Value": resources.queue_url },
        "DeadLetterQueueUrl": { "Value": resources.dlq_url },
        "WebhookUrl": { "Value": webhook_url },
        "BotId": { "Value": "mybot" },
        "BotTokenParameterName": { "Value": format!("/tgq/{stack}/bot-token") },
        "WebhookSecretParameterName": { "Value": format!("/tgq/{stack}/webhook-secret") },
        "TelegramApiUrl": { "Value": api_url },
        "BotsParameterPrefix": { "Value": format!("/tgq/{stack}/bots/") },
    });
    let template = json!({
        "Resources": { "Marker": { "Type": "AWS::SSM::Parameter", "Properties": {
            "Name": format!("/tgq/{stack}/marker"), "Type": "String", "Value": "x" } } },
        "Outputs": outputs,
    });
    aws_sdk_cloudformation::Client::new(sdk)
        .create_stack()
        .stack_name(stack)
        .template_body(template.to_string())
        .send()
        .await
        .expect("a stack on moto");
}

/// The SSM parameter `name` holds `expected`.
async fn assert_parameter(sdk: &aws_config::SdkConfig, name: &str, expected: &str) {
    assert_eq!(ssm_value(sdk, name).await.as_deref(), Some(expected));
}

async fn ssm_value(sdk: &aws_config::SdkConfig, name: &str) -> Option<String> {
    aws_sdk_ssm::Client::new(sdk)
        .get_parameter()
        .name(name)
        .with_decryption(true)
        .send()
        .await
        .ok()
        .and_then(|found| found.parameter)
        .and_then(|parameter| parameter.value)
}

/// Run in a folder with no SAM application and no bot crate around it, deploy refuses before it
/// asks for a tool, a credential or a token.
#[test]
fn deploy_without_a_template_says_where_it_looked_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let output = common::tgq(&[("TELEGRAM_BOT_TOKEN", "123456:TEST")])
        .current_dir(dir.path())
        .env("PATH", dir.path())
        .env("TGQ_TOOLS_DIR", dir.path().join("tools"))
        .args(["deploy", "--stack", "no-template", "--yes"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    let here = dir.path().canonicalize().unwrap();
    assert!(
        stderr.contains(&format!(
            "{} has none: it looked for template.yaml there",
            here.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("`tgq new NAME` creates"), "{stderr}");
    assert!(stderr.contains("nothing was written"), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "deploy wrote into the folder: {left:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn deploy_names_every_missing_tool_and_touches_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let (status, _, stderr) = tgq_deploy(dir.path(), &empty, &[], &["deploy", "--stack", "tools"]);
    assert!(!status.success());
    for named in [
        "pip install aws-sam-cli",
        "pip install cargo-lambda",
        "pip install ziglang",
        "rustup",
        "`tgq setup` installs them",
        "--yes",
    ] {
        assert!(stderr.contains(named), "{named} in {stderr}");
    }
    let sdk = emulator::sdk_config().await;
    assert_eq!(ssm_value(&sdk, "/tgq/tools/bot-token").await, None);
}

#[tokio::test(flavor = "multi_thread")]
async fn deploy_runs_the_tools_cache_s_sam_with_the_cache_first_on_its_path_only() {
    let fake = FakeTelegram::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A cache that holds the pins (stand-ins for the tools), and on PATH only rustup.
    let cache_bin = dir.path().join("tools/venv/bin");
    std::fs::create_dir_all(&cache_bin).unwrap();
    let calls = dir.path().join("sam-calls");
    let scripts = [
        (
            cache_bin.join("sam"),
            format!(
                "#!/bin/sh\necho \"PATH=$PATH $*\" >> '{}'\nexit 1\n",
                calls.display()
            ),
        ),
        (cache_bin.join("cargo-lambda"), "#!/bin/sh\n".to_owned()),
        (cache_bin.join("python3"), "#!/bin/sh\n".to_owned()),
        (
            dir.path().join("bin/rustup"),
            "#!/bin/sh\necho x86_64-unknown-linux-gnu\n".to_owned(),
        ),
    ];
    std::fs::create_dir_all(dir.path().join("bin")).unwrap();
    for (path, script) in scripts {
        common::write_script(&path, &script);
    }
    std::fs::write(
        dir.path().join("tools/installed"),
        "aws-sam-cli==1.170.0\ncargo-lambda==1.9.2\nziglang==0.17.1\n",
    )
    .unwrap();
    let stack = format!("cached-{}", std::process::id());
    let api = format!("TelegramApiUrl={}", fake.url());
    let (status, stdout, stderr) = tgq_deploy(
        dir.path(),
        &dir.path().join("bin"),
        &[("TELEGRAM_BOT_TOKEN", fake.token())],
        &[
            "deploy",
            "--stack",
            &stack,
            "--architecture",
            "x86_64",
            "--parameter",
            &api,
        ],
    );
    assert!(!status.success(), "{stdout}");
    assert!(stderr.contains("sam build failed"), "{stderr}");
    let called = std::fs::read_to_string(&calls).unwrap();
    let expected = format!(
        "PATH={}:{} build",
        cache_bin.display(),
        dir.path().join("bin").display()
    );
    assert!(called.starts_with(&expected), "{called}");
    assert!(
        !stdout.contains("Installing"),
        "nothing installed: {stdout}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn deploy_with_tools_it_cannot_install_deploys_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // python3 and a rustup with the target; no SAM CLI, cargo-lambda or zig, and pip finds no
    // package anywhere, as on a machine off the network.
    let bin = common::python_and_rustup(dir.path(), "x86_64-unknown-linux-gnu");
    let empty = dir.path().join("no-packages");
    std::fs::create_dir_all(&empty).unwrap();
    let stack = format!("notools-{}", std::process::id());
    let (status, stdout, stderr) = tgq_deploy(
        dir.path(),
        &bin,
        &[
            ("TELEGRAM_BOT_TOKEN", "123456:ABC"),
            ("PIP_NO_INDEX", "1"),
            ("PIP_FIND_LINKS", empty.to_str().unwrap()),
            ("PIP_CONFIG_FILE", "/dev/null"),
        ],
        &[
            "deploy",
            "--yes",
            "--stack",
            &stack,
            "--architecture",
            "x86_64",
        ],
    );
    assert!(!status.success(), "{stdout}");
    assert!(
        stderr.contains("pip could not install aws-sam-cli==1.170.0"),
        "{stderr}"
    );
    let sdk = emulator::sdk_config().await;
    assert_eq!(
        ssm_value(&sdk, &format!("/tgq/{stack}/bot-token")).await,
        None
    );
    assert!(!dir.path().join("tools/installed").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn deploy_refuses_a_token_telegram_refuses_before_writing_anything() {
    let fake = FakeTelegram::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bin = deploy_tools(dir.path());
    let stack = format!("badtoken-{}", std::process::id());
    let api = format!("TelegramApiUrl={}", fake.url());
    let stderr = deploy_refused(dir.path(), &bin, "123456:WRONG", &stack, &api);
    assert!(
        stderr.contains("Telegram refused the bot token"),
        "{stderr}"
    );
    assert_deploy_wrote_nothing(dir.path(), &stack).await;
}

/// `tgq deploy --no-build` of `stack` with `token` and the template parameter `parameter`, which
/// must fail: what it said on stderr.
fn deploy_refused(
    dir: &std::path::Path,
    bin: &std::path::Path,
    token: &str,
    stack: &str,
    parameter: &str,
) -> String {
    let (status, stdout, stderr) = tgq_deploy(
        dir,
        bin,
        &[("TELEGRAM_BOT_TOKEN", token)],
        &[
            "deploy",
            "--stack",
            stack,
            "--no-build",
            "--parameter",
            parameter,
        ],
    );
    assert!(!status.success(), "{stdout}");
    stderr
}

/// A refused deploy of `stack` from `dir` left no secret in SSM and never ran sam.
async fn assert_deploy_wrote_nothing(dir: &std::path::Path, stack: &str) {
    let sdk = emulator::sdk_config().await;
    for name in ["bot-token", "webhook-secret"] {
        assert_eq!(ssm_value(&sdk, &format!("/tgq/{stack}/{name}")).await, None);
    }
    assert!(!dir.join("sam-calls").exists(), "sam was never run");
}

#[tokio::test(flavor = "multi_thread")]
async fn deploy_through_a_telegram_outage_says_so_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let bin = deploy_tools(dir.path());
    let stack = format!("outage-{}", std::process::id());
    // Connections refused, then an edge answering 502: neither says anything of the token.
    let refused = format!("TelegramApiUrl=http://127.0.0.1:{}", common::free_port());
    let edge = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let bad_gateway = format!("TelegramApiUrl=http://{}", edge.local_addr().unwrap());
    std::thread::spawn(move || {
        use std::io::{Read as _, Write as _};
        for mut client in edge.incoming().flatten() {
            let _ = client.read(&mut [0; 4096]);
            let _ = client.write_all(
                b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
        }
    });
    for api in [refused, bad_gateway] {
        let stderr = deploy_refused(dir.path(), &bin, "123456:ABC", &stack, &api);
        assert!(
            stderr.contains("Telegram could not check the bot token")
                && stderr.contains("run tgq deploy again")
                && !stderr.contains("refused the bot token"),
            "{stderr}"
        );
    }
    assert_deploy_wrote_nothing(dir.path(), &stack).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn deploy_refuses_a_function_url_where_lambda_has_none_before_writing_anything() {
    let dir = tempfile::tempdir().unwrap();
    let bin = deploy_tools(dir.path());
    let stack = format!("nourl-{}", std::process::id());
    let (status, stdout, stderr) = tgq_deploy(
        dir.path(),
        &bin,
        &[("TELEGRAM_BOT_TOKEN", "123456:ANY")],
        &[
            "deploy",
            "--stack",
            &stack,
            "--region",
            "ap-south-2",
            "--no-build",
            "--parameter",
            "WebhookEndpoint=FunctionUrl",
        ],
    );
    assert!(!status.success(), "{stdout}");
    assert!(
        stderr.contains("ap-south-2 has no Lambda Function URLs") && stderr.contains("Auto"),
        "{stderr}"
    );
    assert!(!dir.path().join("sam-calls").exists(), "sam was never run");
}

#[tokio::test(flavor = "multi_thread")]
async fn deploy_keeps_the_secrets_deploys_sets_the_webhook_and_runs_again_in_place_and_destroy_undoes_it(
) {
    let fake = FakeTelegram::start().await.unwrap();
    let sdk = emulator::sdk_config().await;
    let resources = Stack::create(&sdk, "deploy").await.unwrap();
    let stack = resources.table.replace("tgq-e2e-", "deploy-");
    let token_parameter = format!("/tgq/{stack}/bot-token");
    let secret_parameter = format!("/tgq/{stack}/webhook-secret");
    let dir = tempfile::tempdir().unwrap();
    let bin = deploy_tools(dir.path());
    let api = format!("TelegramApiUrl={}", fake.url());
    let args = [
        "deploy",
        "--stack",
        stack.as_str(),
        "--no-build",
        "--parameter",
        api.as_str(),
    ];
    let envs = [("TELEGRAM_BOT_TOKEN", fake.token())];

    // sam deploy fails: the parameters are written, the message says what to do, and the next run
    // finishes the job.
    std::fs::write(dir.path().join("sam-exit"), "1").unwrap();
    let (status, stdout, stderr) = tgq_deploy(dir.path(), &bin, &envs, &args);
    assert!(!status.success(), "{stdout}");
    assert!(
        stderr.contains("sam deploy failed") && stderr.contains("run tgq deploy again"),
        "{stderr}"
    );
    assert_parameter(&sdk, &token_parameter, fake.token()).await;
    let secret = ssm_value(&sdk, &secret_parameter)
        .await
        .expect("a generated secret");
    assert_eq!(secret.len(), 48);

    stack_as_sam_deploy_leaves_it(
        &sdk,
        &resources,
        &stack,
        "https://hook.example.com/webhook",
        &fake.url(),
    )
    .await;
    std::fs::write(dir.path().join("sam-exit"), "0").unwrap();
    let (stdout, stderr) = tgq_deploys(dir.path(), &bin, &envs, &args);
    let calls = std::fs::read_to_string(dir.path().join("sam-calls")).unwrap();
    let last = calls.lines().last().unwrap();
    for part in [
        format!("deploy --stack-name {stack}"),
        "--no-confirm-changeset".to_owned(),
        "CAPABILITY_IAM".to_owned(),
    ] {
        assert!(last.contains(&part), "{part} in {last}");
    }
    // The parameters as the SAM CLI itself reads them: samconfig.toml's (empty values and values
    // with spaces among them), the stack's own and the flags'.
    let read = sam_reads_overrides(&dir.path().join("sam-argv"));
    for (name, value) in [
        ("BotTokenParameterName", token_parameter.as_str()),
        ("WebhookSecretParameterName", secret_parameter.as_str()),
        ("BotId", "mybot"),
        ("Architecture", "arm64"),
        ("AllowedSourceCidrs", ""),
        ("TelegramApiUrl", fake.url().as_str()),
        (
            "PreCheckoutRefusal",
            "The payment could not be confirmed in time. Nothing was charged; please try again.",
        ),
    ] {
        assert_eq!(read[name], value, "{name} as the SAM CLI reads it: {read}");
    }
    assert!(!calls.contains("build"), "--no-build: {calls}");
    assert_eq!(
        fake.webhook_url().as_deref(),
        Some("https://hook.example.com/webhook")
    );
    assert!(stdout.contains("The bot is live"), "{stdout}");
    assert!(stdout.contains("Webhook set"), "{stdout}");
    for secret in [fake.token(), secret.as_str()] {
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "a secret was printed"
        );
    }

    // A second run keeps both parameters and updates in place.
    let (stdout, _) = tgq_deploys(dir.path(), &bin, &[], &args);
    assert!(
        stdout.contains("Bot token: kept") && stdout.contains("Webhook secret: kept"),
        "{stdout}"
    );
    assert_parameter(&sdk, &secret_parameter, &secret).await;

    // Destroy: the webhook first, then the stack; the parameters stay without the flag.
    tgq_deploys(
        dir.path(),
        &bin,
        &[],
        &["destroy", "--stack", &stack, "--yes"],
    );
    assert_eq!(fake.webhook_url(), None);
    let described = aws_sdk_cloudformation::Client::new(&sdk)
        .describe_stacks()
        .stack_name(&stack)
        .send()
        .await;
    let gone = match described {
        Err(_) => true,
        Ok(found) => found.stacks().iter().all(|s| {
            s.stack_status() == Some(&aws_sdk_cloudformation::types::StackStatus::DeleteComplete)
        }),
    };
    assert!(gone, "the stack is deleted");
    assert!(
        ssm_value(&sdk, &token_parameter).await.is_some(),
        "kept without --delete-parameters"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn timers_on_a_stack_are_listed_and_cancelled_in_the_chats_state_and_lose_their_schedule() {
    let sdk = emulator::sdk_config().await;
    let scheduler = aws_sdk_scheduler::Client::new(&sdk);
    let group = format!("timers-{}", std::process::id());
    let _ = scheduler.create_schedule_group().name(&group).send().await;
    let deployed = deploy(
        "timers",
        "1:TIMERS",
        &[("BotId", "demo"), ("ScheduleGroupName", group.as_str())],
    )
    .await;
    let due = SystemClock.now().0 + 3_600_000;
    let time = json!({"timers": {
        "remind": {"id": -255, "due": due},
        "later": {"id": -256, "due": due + 60_000},
    }});
    let item = std::collections::HashMap::from([
        ("pk".to_owned(), AttributeValue::S("demo#state#42".into())),
        ("format".to_owned(), AttributeValue::S("json".into())),
        ("value".to_owned(), AttributeValue::S("{}".into())),
        ("version".to_owned(), AttributeValue::N("3".into())),
        ("time".to_owned(), AttributeValue::S(time.to_string())),
    ]);
    let dynamo = aws_sdk_dynamodb::Client::new(&sdk);
    dynamo
        .put_item()
        .table_name(&deployed.resources.table)
        .set_item(Some(item))
        .send()
        .await
        .unwrap();
    // The schedule a timer due in an hour has (the worker names it so).
    let name = tgq_aws::schedule_name(&BotId::new("demo").unwrap(), UpdateId(-255));
    scheduler
        .create_schedule()
        .name(&name)
        .group_name(&group)
        .schedule_expression("at(2030-01-01T00:00:00)")
        .flexible_time_window(
            aws_sdk_scheduler::types::FlexibleTimeWindow::builder()
                .mode(aws_sdk_scheduler::types::FlexibleTimeWindowMode::Off)
                .build()
                .unwrap(),
        )
        .target(
            aws_sdk_scheduler::types::Target::builder()
                .arn("arn:aws:sqs:us-east-1:123456789012:timers")
                .role_arn("arn:aws:iam::123456789012:role/scheduler")
                .input("{}")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();

    let listed = deployed.json(&["timers", "list"]);
    let keys: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["remind", "later"], "earliest first: {listed}");
    assert_eq!(listed[0]["chat"], "42");
    assert_eq!(listed[0]["bot_id"], "demo");

    let cancelled = deployed.tgq(&[], &["timers", "cancel", "42", "remind"]);
    assert!(
        cancelled.contains("cancelled timer \"remind\" of chat 42"),
        "{cancelled}"
    );
    let state = dynamo
        .get_item()
        .table_name(&deployed.resources.table)
        .key("pk", AttributeValue::S("demo#state#42".into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    assert_eq!(
        state["version"],
        AttributeValue::N("4".into()),
        "a run that read 3 is refused"
    );
    let left: Value = serde_json::from_str(state["time"].as_s().unwrap()).unwrap();
    assert!(left["timers"].get("remind").is_none() && left["timers"].get("later").is_some());
    let schedule = scheduler
        .get_schedule()
        .name(&name)
        .group_name(&group)
        .send()
        .await;
    assert!(schedule.is_err(), "the schedule is deleted: {schedule:?}");

    let mut again = vec!["timers", "cancel", "42", "remind", "--stack"];
    again.push(deployed.name.as_str());
    let (status, _, stderr) = run(&[], &again);
    assert!(!status.success());
    assert!(
        stderr.contains("has no pending timer \"remind\""),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payments_on_a_stack_are_the_charges_its_settles_recorded() {
    let deployed = deploy("payments", "1:PAY", &[("BotId", "demo")]).await;
    let now = SystemClock.now();
    for (update, id, stars) in [(9, "stx-s1", 30), (10, "stx-s2", 45)] {
        deployed
            .record_charge(
                id,
                stars,
                update,
                now.plus(Duration::from_millis(update as u64)),
            )
            .await;
    }

    let listed = deployed.json(&["payments", "list"]);
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["stx-s2", "stx-s1"], "newest first: {listed}");
    assert_eq!(listed[0]["bot_id"], "demo");
    assert_eq!(listed[0]["stars"], 45);
    let shown = deployed.tgq(&[], &["payments", "show", "stx-s1"]);
    assert!(shown.contains("stars      30"), "{shown}");
    assert!(shown.contains("update     9"), "{shown}");
}

/// `tgq payments refund | reconcile --stack`: the stack's token (its parameter) and Bot API URL
/// (its output) reach Telegram. The charge is refunded once, its item marked, the refund audited
/// under the caller's identity, and a second refund refused without asking; reconcile finds the
/// ledger and Telegram alike, then names the payment the ledger never got.
#[tokio::test(flavor = "multi_thread")]
async fn a_refund_and_reconcile_on_a_stack_reach_telegram_with_the_stack_s_token() {
    let fake = FakeTelegram::start().await.unwrap();
    let id = crate::payments::charge_at(&fake, 42, 30).await;
    let api_url = fake.url();
    let deployed = deploy(
        "refund",
        fake.token(),
        &[("BotId", "demo"), ("TelegramApiUrl", api_url.as_str())],
    )
    .await;
    deployed.record_charge(&id, 30, 9, SystemClock.now()).await;

    let out = deployed.tgq(&[], &["payments", "refund", &id, "--yes"]);
    assert_eq!(
        out.trim(),
        format!("Refunded charge {id} of bot demo: 30 Stars back to user 42.")
    );
    assert_eq!(crate::payments::refunds_asked(&fake, &id), [200]);
    let listed = deployed.json(&["payments", "list"]);
    assert!(listed[0]["refunded_at"].as_u64().is_some(), "{listed}");
    let audit = deployed.json(&["dlq", "audit"]);
    let refunds: Vec<&Value> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|entry| entry["action"] == "refund")
        .collect();
    // Before the call, and with its outcome.
    assert_eq!(refunds.len(), 2, "{audit}");
    let said = |ending: &str| {
        refunds.iter().any(|entry| {
            entry["outcome"]
                .as_str()
                .unwrap()
                .ends_with(&format!("charge {id} of user 42, 30 Stars: {ending}"))
        })
    };
    assert!(
        said("asking Telegram to refund") && said("refunded"),
        "{audit}"
    );
    assert!(refunds
        .iter()
        .all(|entry| !entry["principal"].as_str().unwrap().is_empty()));

    let mut again = vec!["payments", "refund", id.as_str(), "--yes", "--stack"];
    again.push(deployed.name.as_str());
    let (status, _, err) = run(&[], &again);
    assert!(!status.success());
    assert!(err.contains("was refunded at"), "{err}");
    assert_eq!(
        crate::payments::refunds_asked(&fake, &id),
        [200],
        "asked once"
    );

    // The stack's ledger against Telegram's transactions: alike, then a payment it never got.
    let agreed = deployed.tgq(&[], &["payments", "reconcile"]);
    assert!(
        agreed.contains("The ledger and Telegram agree."),
        "{agreed}"
    );
    let missed = crate::payments::charge_at(&fake, 43, 15).await;
    let (status, out, err) = run(
        &[],
        &["payments", "reconcile", "--json", "--stack", &deployed.name],
    );
    assert_eq!(status.code(), Some(3), "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["bot_id"], "demo");
    assert_eq!(
        report["only_at_telegram"][0]["id"],
        missed.as_str(),
        "{report}"
    );
    assert_eq!(report["matched"], 1, "{report}");
}
