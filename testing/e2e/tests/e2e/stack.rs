//! What `sam deploy` sends, deployed here, and IAM from use.
//!
//! `template.yaml` goes through SAM's own translator (`samtranslator`, the package the pinned SAM
//! CLI ships; `testing/e2e/sam_transform.py`) as CloudFormation's `AWS::Serverless-2016-10-31`
//! transform does, and the CloudFormation stack it makes is created on moto. `sam deploy` itself
//! does not deploy this on moto 5.2.5 (tried with SAM CLI 1.170.0): it uploads the template and
//! names it by a `TemplateURL` built from the S3 endpoint, which moto reads as a bucket name
//! unless the host is `localhost` (`http://127.0.0.1:PORT/bucket/key` is bucket "127": NoSuchBucket);
//! and through `localhost` it sends the untransformed template, leaving the transform to
//! CloudFormation, which moto does not run: it skips every `AWS::Serverless::*` resource as a type
//! it does not know and reports the empty stack CREATE_COMPLETE. So the transform is done here,
//! with the same translator, and the transformed template created as CloudFormation creates it.
//!
//! Then the real `webhook` and `worker` run against the stack's own table and queues, with the
//! environment moto's Lambda holds for them (the stack's, every intrinsic resolved), each behind
//! its own counting proxy, and every AWS action each one asks for is compared both ways with its
//! role's policy as the stack made it:
//!
//! - an action a function used and its role does not grant fails;
//! - an action its role grants and it never used fails, unless the action's line in
//!   `template.yaml` says why with a trailing comment starting [`UNSEEN`]
//!   (`- ssm:GetParameter # not seen in tests: …`);
//! - an SSM read whose parameter or path no statement of that action covers fails;
//! - each `kms:Decrypt` grant is conditioned on `kms:EncryptionContext:PARAMETER_ARN` naming
//!   exactly the customer-key parameters the function reads (SSM passes the parameter's ARN as
//!   the encryption context when it decrypts a SecureString).
//!
//! Actions made on a function's behalf count as its own: the event source mapping's SQS calls
//! (made here by the harness's mapping through the worker's proxy), the Lambda service's writes
//! of the function's output to its log group (`logs:CreateLogStream`, `logs:PutLogEvents`), and
//! the `kms:Decrypt` SSM makes with the caller's identity for a SecureString read under the
//! customer-managed key.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_config::BehaviorVersion;
use aws_sdk_ssm::types::ParameterType;
use secrecy::SecretString;
use serde_json::Value;
use tgq_aws::{DynamoBroadcasts, SqsQueue, SsmRegistry};
use tgq_core::broadcast::{self, Audience, BroadcastSpec, BroadcastStore as _, QueuedBroadcasts};
use tgq_core::clock::{Clock as _, SystemClock};
use tgq_core::ids::BotId;
use tgq_core::ingest::SECRET_HEADER;
use tgq_core::registry::{BotEntry, Layout};
use tgq_e2e::broadcasts::BroadcastParts;
use tgq_e2e::cargo::workspace_root;
use tgq_e2e::emulator::{self, record_status, Stack};
use tgq_e2e::esm::EventSourceMapping;
use tgq_e2e::functions::{Functions, WEBHOOK, WORKER};
use tgq_e2e::proxy::Proxy;
use tgq_e2e::telegram::{text_update, Telegram};
use tgq_e2e::template::{unseen_with_reason, UNSEEN};
use tgq_fake_telegram::{FakeTelegram, Fault, Scope, Times};

/// The resource types of the transformed template moto 5.2.5's CloudFormation cannot create (no
/// model in `moto/cloudformation/parsing.py`), and what checks them instead. cfn-lint checks every
/// one against CloudFormation's resource schemas in the first test.
const MOTO_CANNOT_CREATE: [(&str, &str); 8] = [
    (
        "AWS::Scheduler::ScheduleGroup",
        "moto 5.2 serves EventBridge Scheduler's API but has no CloudFormation model for it; the suite creates the group through the API",
    ),
    (
        "AWS::Lambda::Url",
        "cfn-lint; `cargo lambda watch` plays the function URL for the real webhook",
    ),
    (
        "AWS::ApiGatewayV2::Api",
        "cfn-lint (WebhookEndpoint=HttpApi)",
    ),
    (
        "AWS::ApiGatewayV2::Integration",
        "cfn-lint (WebhookEndpoint=HttpApi)",
    ),
    (
        "AWS::ApiGatewayV2::Route",
        "cfn-lint (WebhookEndpoint=HttpApi)",
    ),
    (
        "AWS::ApiGatewayV2::Stage",
        "cfn-lint (WebhookEndpoint=HttpApi)",
    ),
    ("AWS::SNS::Subscription", "cfn-lint (AlarmEmail)"),
    (
        "AWS::CloudWatch::Alarm",
        "cfn-lint; testing/e2e/tests/e2e/template.rs checks their metrics and dimensions",
    ),
];

/// Left out because they name a resource moto cannot create (and made only with
/// WebhookEndpoint=HttpApi, which these stacks do not use).
const LEFT_OUT_BY_REFERENCE: [(&str, &str); 1] = [("WebhookHttpApiPermission", "WebhookHttpApi")];

const SECRET: &str = "tgq-iam-webhook-secret";
const DRAIN_LIMIT: Duration = Duration::from_secs(120);

fn python() -> PathBuf {
    let python = workspace_root().join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/venv (scripts/test does)",
        python.display()
    );
    python
}

/// Runs `testing/e2e/sam_transform.py` with `args` and returns the JSON it prints.
fn helper(args: &[&str]) -> Value {
    let root = workspace_root();
    let output = Command::new(python())
        .arg(root.join("testing/e2e/sam_transform.py"))
        .args(args)
        .current_dir(&root)
        .output()
        .expect("python runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "sam_transform.py {args:?} failed: {stderr}"
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "sam_transform.py {args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

fn template_path() -> String {
    workspace_root().join("template.yaml").display().to_string()
}

/// A stack name no other run uses, well inside the template's 56 characters.
fn stack_name(purpose: &str) -> String {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("tgq-{purpose}-{}-{millis}", std::process::id())
}

fn text(value: &Value) -> String {
    value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_owned)
}

/// The transformed template's resources with the condition each is created under.
fn transformed(dir: &Path, params: &Value) -> (PathBuf, Value) {
    let path = dir.join("transformed.json");
    helper(&[
        "transform",
        &template_path(),
        &params.to_string(),
        &path.display().to_string(),
    ]);
    let template = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    (path, template)
}

#[test]
fn the_template_sam_deploy_sends_creates_on_moto_and_passes_cfn_lint() {
    emulator::endpoint();
    let dir = tempfile::tempdir().unwrap();
    let params = serde_json::json!({ "BotId": "demo" });
    let (path, template) = transformed(dir.path(), &params);

    let lint = Command::new(workspace_root().join(".venv/bin/cfn-lint"))
        .arg(&path)
        .output()
        .expect("cfn-lint runs (scripts/venv installs it)");
    assert!(
        lint.status.success(),
        "cfn-lint on the transformed template: {}{}",
        String::from_utf8_lossy(&lint.stdout),
        String::from_utf8_lossy(&lint.stderr)
    );

    let deployed = helper(&[
        "deploy",
        &template_path(),
        &params.to_string(),
        &stack_name("deploy"),
    ]);
    assert_eq!(deployed["status"], "CREATE_COMPLETE", "{deployed:#}");
    let created = deployed["resources"].as_object().unwrap();
    for (name, resource) in created {
        assert_eq!(resource["status"], "CREATE_COMPLETE", "{name}: {resource}");
    }

    let left_out_types: BTreeSet<String> = deployed["left_out"]
        .as_object()
        .unwrap()
        .values()
        .map(text)
        .collect();
    let documented: BTreeSet<String> = MOTO_CANNOT_CREATE
        .iter()
        .map(|(kind, _)| (*kind).to_owned())
        .collect();
    assert_eq!(
        left_out_types, documented,
        "the types moto cannot create, as MOTO_CANNOT_CREATE documents them"
    );
    let by_reference: BTreeMap<String, String> = deployed["left_out_by_reference"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), text(v)))
        .collect();
    let expected: BTreeMap<String, String> = LEFT_OUT_BY_REFERENCE
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    assert_eq!(by_reference, expected);

    // Every resource made whatever the parameters, of a type moto can create, was created.
    for (name, resource) in template["Resources"].as_object().unwrap() {
        let kind = text(&resource["Type"]);
        let conditional = resource.get("Condition").is_some();
        if conditional || documented.contains(&kind) || expected.contains_key(name) {
            continue;
        }
        assert!(
            created.contains_key(name),
            "{name} ({kind}) was not created"
        );
    }
    // The stack's event source mapping was made, and disabled for the harness's (see sam_transform.py).
    assert_eq!(
        deployed["disabled_mappings"],
        serde_json::json!([
            "WorkerFunctionBroadcasts",
            "WorkerFunctionTimers",
            "WorkerFunctionUpdates"
        ])
    );
    for output in ["TableName", "UpdatesQueueUrl", "DeadLetterQueueUrl"] {
        assert!(
            deployed["outputs"][output].is_string(),
            "{output}: {deployed:#}"
        );
    }
}

/// The IAM actions a role's statements allow, by action.
fn granted(statements: &Value) -> BTreeMap<String, Vec<&Value>> {
    let mut granted: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for statement in statements.as_array().unwrap() {
        assert_eq!(statement["Effect"], "Allow", "{statement}");
        let actions = match &statement["Action"] {
            Value::Array(actions) => actions.iter().map(text).collect(),
            action => vec![text(action)],
        };
        for action in actions {
            granted.entry(action).or_default().push(statement);
        }
    }
    granted
}

fn resources(statement: &Value) -> Vec<String> {
    match &statement["Resource"] {
        Value::Array(resources) => resources.iter().map(text).collect(),
        resource => vec![text(resource)],
    }
}

/// IAM's resource match: `*` stands for any run of characters.
fn matches(pattern: &str, arn: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let [first, middle @ .., last] = parts.as_slice() else {
        return pattern == arn;
    };
    let Some(mut rest) = arn.strip_prefix(first) else {
        return false;
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// The functions' variables: the stack's, as moto's Lambda holds them, with the endpoint of the
/// function's own proxy, the fake Bot API, and the echo bot whose replies name their update.
fn function_vars(
    environment: &Value,
    proxy: &Proxy,
    fake: &FakeTelegram,
) -> BTreeMap<String, String> {
    let mut vars: BTreeMap<String, String> = environment
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), text(v)))
        .collect();
    vars.insert("AWS_ENDPOINT_URL".into(), proxy.url());
    vars.insert("TELEGRAM_API_URL".into(), fake.url());
    vars.insert("TGQ_HANDLER".into(), "echo".into());
    vars
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_real_functions_run_on_the_stacks_own_resources_and_use_exactly_what_their_roles_grant()
{
    let config = emulator::sdk_config().await;
    let name = stack_name("iam");
    let key = text(&helper(&["key"])["arn"]);
    let token_parameter = format!("/tgq/{name}/bot-token");
    let secret_parameter = format!("/tgq/{name}/webhook-secret");
    let params = serde_json::json!({
        "BotId": "demo",
        "SecretsKmsKeyArn": key,
        "BotTokenParameterName": token_parameter,
        "WebhookSecretParameterName": secret_parameter,
    });
    let fake = FakeTelegram::start().await.unwrap();
    // The two parameters the stack names, written before the deploy as README asks, under the
    // customer-managed key.
    let ssm = aws_sdk_ssm::Client::new(&config);
    for (parameter, value) in [
        (&token_parameter, fake.token().to_owned()),
        (&secret_parameter, SECRET.to_owned()),
    ] {
        ssm.put_parameter()
            .name(parameter)
            .value(value)
            .r#type(ParameterType::SecureString)
            .key_id(&key)
            .send()
            .await
            .unwrap();
    }
    let deployed = helper(&["deploy", &template_path(), &params.to_string(), &name]);
    assert_eq!(deployed["status"], "CREATE_COMPLETE", "{deployed:#}");
    let outputs = &deployed["outputs"];
    let queue_url = text(&outputs["UpdatesQueueUrl"]);
    let account = queue_url.split('/').nth(3).unwrap().to_owned();
    let region = config.region().unwrap().to_string();
    let stack = Stack {
        table: text(&outputs["TableName"]),
        queue_arn: format!(
            "arn:aws:sqs:{region}:{account}:{}",
            queue_url.rsplit('/').next().unwrap()
        ),
        queue_url,
        dlq_url: text(&outputs["DeadLetterQueueUrl"]),
        region: region.clone(),
    };

    // A registry bot, written as `tgq bots add` writes it (its SecureStrings under aws/ssm).
    let prefix = text(&outputs["BotsParameterPrefix"]);
    let shop_token = "333:SHOP-TOKEN";
    fake.accept_token(shop_token);
    SsmRegistry::new(ssm.clone(), Layout::new(&prefix).unwrap())
        .put(&BotEntry {
            id: BotId::new("shop").unwrap(),
            token: Some(SecretString::from(shop_token.to_owned())),
            secret: Some(SecretString::from("shop-secret".to_owned())),
            handler: "echo".to_owned(),
            allowed_updates: Vec::new(),
        })
        .await
        .unwrap();

    let webhook_proxy = Proxy::start(&emulator::endpoint()).await.unwrap();
    let worker_proxy = Proxy::start(&emulator::endpoint()).await.unwrap();
    let environment = &deployed["environment"];
    let webhook = Functions::start(
        &[WEBHOOK],
        &function_vars(&environment["WebhookFunction"], &webhook_proxy, &fake),
    )
    .await;
    let worker = Functions::start(
        &[WORKER],
        &function_vars(&environment["WorkerFunction"], &worker_proxy, &fake),
    )
    .await;

    // Chat 7's reply is refused for good once (dead-lettered, then moved back by an operator),
    // chat 8's fails once with a 502 (backed off by visibility).
    fake.inject(Fault::BadRequest, Scope::Chat(7), Times::Once);
    fake.inject(Fault::ServerError(502), Scope::Chat(8), Times::Once);
    let telegram = Telegram::new(webhook.function_url(WEBHOOK), SECRET);
    let first = text_update(930_000_001, 7, 1, "hello").to_string();
    for body in [
        first.clone(),
        text_update(930_000_002, 8, 1, "hello").to_string(),
        first,                                // a duplicate
        r#"{"not": "an update"}"#.to_owned(), // poison, dead-lettered by the webhook
    ] {
        assert!(telegram.deliver(&body).await.unwrap().is_empty());
    }
    let shop = reqwest::Client::new()
        .post(format!("{}webhook/shop", webhook.function_url(WEBHOOK)))
        .header(SECRET_HEADER, "shop-secret")
        .json(&text_update(930_000_003, 9, 1, "hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(shop.status().as_u16(), 200);

    // The event source mapping's calls go through the worker's proxy: they are the worker role's.
    let as_worker = aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(worker_proxy.url())
        .http_client(tgq_aws::https_client())
        .load()
        .await;
    let mapping_sqs = aws_sdk_sqs::Client::new(&as_worker);
    let mapping = EventSourceMapping::new(mapping_sqs, stack.clone(), &worker);
    mapping
        .run_until_drained(|| true, DRAIN_LIMIT)
        .await
        .unwrap();
    let sqs = aws_sdk_sqs::Client::new(&config);
    assert_eq!(
        emulator::redrive(&sqs, &stack, Some("demo:7"))
            .await
            .unwrap(),
        1,
        "chat 7's letter"
    );
    mapping
        .run_until_drained(|| true, DRAIN_LIMIT)
        .await
        .unwrap();
    let dynamo = aws_sdk_dynamodb::Client::new(&config);
    for (bot, update_id) in [
        ("demo", 930_000_001),
        ("demo", 930_000_002),
        ("shop", 930_000_003),
    ] {
        assert_eq!(
            record_status(&dynamo, &stack.table, bot, update_id)
                .await
                .unwrap()
                .as_deref(),
            Some("DONE"),
            "{bot} {update_id}; logs: {} {}",
            webhook.logs().display(),
            worker.logs().display()
        );
    }

    // A broadcast, started on the stack's table and queue as `tgq broadcast start --stack` does,
    // run by the worker from its third event source (its receives and deletes the worker role's).
    let broadcasts_url = text(&outputs["BroadcastsQueueUrl"]);
    let broadcasts_arn = format!(
        "arn:aws:sqs:{region}:{account}:{}",
        broadcasts_url.rsplit('/').next().unwrap()
    );
    let store = QueuedBroadcasts::new(
        Arc::new(DynamoBroadcasts::new(
            aws_sdk_dynamodb::Client::new(&config),
            stack.table.clone(),
        )),
        Arc::new(SqsQueue::new(sqs.clone(), broadcasts_url.clone())),
    );
    let spec = BroadcastSpec::standard(
        BotId::new("demo").unwrap(),
        "sendMessage",
        serde_json::json!({"text": "news"}),
        "cli",
    );
    let audience = Audience::Chats {
        chats: vec![21, 22, 23],
    };
    let job = broadcast::start(&store, &spec, &audience, SystemClock.now())
        .await
        .unwrap()
        .job()
        .id
        .clone();
    let mut steps = BroadcastParts::on(
        aws_sdk_sqs::Client::new(&as_worker),
        broadcasts_url,
        broadcasts_arn,
    );
    let started = std::time::Instant::now();
    while !store.job(&job).await.unwrap().unwrap().state.is_final() {
        assert!(started.elapsed() < DRAIN_LIMIT, "the broadcast never ended");
        if !steps.step_once(&worker, &stack).await.unwrap() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    for chat in [21, 22, 23] {
        assert_eq!(fake.delivered_to(chat).len(), 1, "chat {chat}");
    }

    let customer_key_parameters = BTreeSet::from([token_parameter, secret_parameter]);
    let parameter_arn = |name: &str| format!("arn:aws:ssm:{region}:{account}:parameter{name}");
    let mut failures = Vec::new();
    for (role, proxy) in [
        ("WebhookRole", &webhook_proxy),
        ("WorkerRole", &worker_proxy),
    ] {
        let statements = &deployed["policies"][role];
        let granted = granted(statements);
        let reads = proxy.ssm_reads();
        // SQS authorizes a batch call by its single counterpart's action.
        let mut used: BTreeSet<String> = proxy
            .actions()
            .into_keys()
            .map(|action| match action.as_str() {
                "sqs:SendMessageBatch" => "sqs:SendMessage".to_owned(),
                "sqs:DeleteMessageBatch" => "sqs:DeleteMessage".to_owned(),
                "sqs:ChangeMessageVisibilityBatch" => "sqs:ChangeMessageVisibility".to_owned(),
                // DynamoDB authorizes a transaction by each of its actions; tgq's are updates.
                "dynamodb:TransactWriteItems" => "dynamodb:UpdateItem".to_owned(),
                _ => action,
            })
            .collect();
        // The Lambda service writes the function's output to its log group with its role.
        used.extend(["logs:CreateLogStream".into(), "logs:PutLogEvents".into()]);
        let decrypted: BTreeSet<&String> = reads
            .values()
            .flatten()
            .filter(|name| customer_key_parameters.contains(*name))
            .collect();
        if !decrypted.is_empty() {
            // SSM decrypts a SecureString under a customer key with the caller's identity.
            used.insert("kms:Decrypt".into());
        }

        for action in used.iter().filter(|a| !granted.contains_key(*a)) {
            failures.push(format!("{role}: uses {action}, which it is not granted"));
        }
        let reasons = unseen_with_reason(role);
        for action in granted.keys().filter(|a| !used.contains(*a)) {
            if !reasons.contains_key(action) {
                failures.push(format!(
                    "{role}: is granted {action}, never used, and template.yaml does not say why \
                     (a trailing `{UNSEEN} …` on its line)"
                ));
            }
        }
        for action in reasons.keys().filter(|a| used.contains(*a)) {
            failures.push(format!(
                "{role}: {action} is marked `{UNSEEN}` but the tests use it"
            ));
        }
        for (action, names) in &reads {
            for name in names {
                let covered = granted.get(action).into_iter().flatten().any(|statement| {
                    resources(statement)
                        .iter()
                        .any(|pattern| matches(pattern, &parameter_arn(name)))
                });
                if !covered {
                    failures.push(format!(
                        "{role}: {action} of {name}, which no statement's resource covers"
                    ));
                }
            }
        }
        let expected_context: BTreeSet<String> =
            decrypted.iter().map(|name| parameter_arn(name)).collect();
        for statement in granted.get("kms:Decrypt").into_iter().flatten() {
            let context =
                &statement["Condition"]["StringEquals"]["kms:EncryptionContext:PARAMETER_ARN"];
            let named: BTreeSet<String> = match context {
                Value::Array(arns) => arns.iter().map(text).collect(),
                Value::String(arn) => BTreeSet::from([arn.clone()]),
                _ => BTreeSet::new(),
            };
            if named != expected_context {
                failures.push(format!(
                    "{role}: kms:Decrypt is conditioned on PARAMETER_ARN {named:?}, not on the \
                     parameters it decrypts, {expected_context:?}"
                ));
            }
        }
        eprintln!("{role} used: {used:?}; SSM reads: {reads:?}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn an_iam_resource_pattern_matches_as_iam_matches_it() {
    assert!(matches(
        "arn:x:parameter/a/*/token",
        "arn:x:parameter/a/shop/token"
    ));
    assert!(!matches(
        "arn:x:parameter/a/*/token",
        "arn:x:parameter/a/shop/secret"
    ));
    assert!(matches("arn:x:parameter/a/*", "arn:x:parameter/a/"));
    assert!(matches("*", "anything"));
    assert!(matches("arn:x:table/t", "arn:x:table/t"));
    assert!(!matches("arn:x:table/t", "arn:x:table/tt"));
}
