//! `template.yaml` and the code must tell the same story: each setting the code relies on is checked
//! against `tgq_core::defaults` here, so a change to one without the other fails the build.

use serde_yaml::value::TaggedValue;
use serde_yaml::Value;
use tgq_core::config::Vars;
use tgq_core::defaults;
use tgq_core::ids::BotId;
use tgq_core::worker::GoneRecipients;

const TEMPLATE: &str = include_str!("../../../template.yaml");

/// Telegram gives a webhook this long to answer before it counts the delivery as failed.
const TELEGRAM_WEBHOOK_LIMIT_SECS: u64 = 60;
/// SQS keeps a message at most this long: 14 days.
const SQS_MAX_RETENTION_SECS: u64 = 1_209_600;
/// The SQS event source hands a FIFO queue's worker at most this many records per batch.
const SQS_FIFO_MAX_BATCH: u64 = 10;

/// The parsed template, with CloudFormation's short tags (`!Ref`, `!Sub`, `!GetAtt`) kept as tags.
struct Template(Value);

impl Template {
    fn load() -> Self {
        Self(serde_yaml::from_str(TEMPLATE).expect("template.yaml is valid YAML"))
    }

    fn resource(&self, name: &str) -> &Value {
        &self.0["Resources"][name]["Properties"]
    }

    /// A function's timeout in seconds, falling back to the `Globals` section as SAM does.
    fn function_timeout(&self, function: &str) -> u64 {
        let own = &self.resource(function)["Timeout"];
        let timeout = if own.is_null() {
            &self.0["Globals"]["Function"]["Timeout"]
        } else {
            own
        };
        self.number(timeout)
            .unwrap_or_else(|| panic!("{function} has no numeric Timeout"))
    }

    /// The number a value stands for: a literal, a numeric string, or `!Ref` to a parameter with a
    /// default (what the stack gets when nobody overrides it).
    fn number(&self, value: &Value) -> Option<u64> {
        match value {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.parse().ok(),
            Value::Tagged(tagged) => {
                let parameter = ref_target(tagged)?;
                self.number(&self.0["Parameters"][parameter]["Default"])
            }
            _ => None,
        }
    }
}

/// The logical id a `!Ref` names.
fn ref_target(tagged: &TaggedValue) -> Option<&str> {
    if tagged.tag == "Ref" {
        tagged.value.as_str()
    } else {
        None
    }
}

/// The resource a `!GetAtt Resource.Attribute` names.
fn get_att_resource(value: &Value) -> Option<&str> {
    match value {
        Value::Tagged(tagged) if tagged.tag == "GetAtt" => tagged.value.as_str()?.split('.').next(),
        _ => None,
    }
}

fn updates_event(template: &Template) -> &Value {
    &template.resource("WorkerFunction")["Events"]["Updates"]["Properties"]
}

#[test]
fn the_updates_queue_hides_a_message_for_at_least_six_worker_timeouts() {
    let t = Template::load();
    let visibility = t
        .number(&t.resource("UpdatesQueue")["VisibilityTimeout"])
        .expect("UpdatesQueue has a numeric VisibilityTimeout");
    let worker = t.function_timeout("WorkerFunction");
    assert!(
        visibility >= 6 * worker,
        "VisibilityTimeout {visibility} s < 6 × worker Timeout {worker} s"
    );
}

#[test]
fn the_worker_timeout_is_the_one_the_code_assumes() {
    let t = Template::load();
    assert_eq!(
        t.function_timeout("WorkerFunction"),
        defaults::WORKER_TIMEOUT.as_secs()
    );
}

#[test]
fn the_attempt_budget_is_the_code_default_and_the_worker_receives_it() {
    let t = Template::load();
    let max_attempts = t
        .number(&t.0["Parameters"]["MaxAttempts"]["Default"])
        .expect("MaxAttempts has a numeric default");
    assert_eq!(max_attempts, u64::from(defaults::MAX_ATTEMPTS));
    let given = &t.resource("WorkerFunction")["Environment"]["Variables"]["TGQ_MAX_ATTEMPTS"];
    assert_eq!(t.number(given), Some(max_attempts));
}

#[test]
fn gone_recipients_settle_by_default_and_the_worker_receives_the_setting() {
    let t = Template::load();
    let parameter = &t.0["Parameters"]["DeadLetterGoneRecipients"];
    let read = |value: &Value| {
        let text = value.as_str().expect("a string value");
        Vars::from_pairs([("TGQ_DEAD_LETTER_GONE_RECIPIENTS", text)]).gone_recipients()
    };
    assert_eq!(
        read(&parameter["Default"]),
        Ok(GoneRecipients::default()),
        "the template's default is the code's"
    );
    let allowed = parameter["AllowedValues"]
        .as_sequence()
        .expect("AllowedValues");
    assert_eq!(allowed.len(), 2);
    for value in allowed {
        assert!(read(value).is_ok(), "{value:?} is a value the worker reads");
    }
    let given = &t.resource("WorkerFunction")["Environment"]["Variables"]
        ["TGQ_DEAD_LETTER_GONE_RECIPIENTS"];
    let Value::Tagged(tagged) = given else {
        panic!("the worker gets the parameter: {given:?}")
    };
    assert_eq!(ref_target(tagged), Some("DeadLetterGoneRecipients"));
}

#[test]
fn the_queue_moves_a_message_to_the_dlq_only_after_a_hundred_times_the_attempt_budget_in_receives()
{
    let t = Template::load();
    let redrive = &t.resource("UpdatesQueue")["RedrivePolicy"];
    let max_receive_count = t
        .number(&redrive["maxReceiveCount"])
        .expect("the redrive policy has a numeric maxReceiveCount");
    let max_attempts = t
        .number(&t.0["Parameters"]["MaxAttempts"]["Default"])
        .expect("MaxAttempts has a numeric default");
    // A message waiting behind a failing one of its chat is received with every retry of it: the
    // redrive limit must stay far above what a run of failing heads can spend.
    assert!(
        max_receive_count >= 100 * max_attempts,
        "maxReceiveCount {max_receive_count} must be at least 100 x MaxAttempts {max_attempts}"
    );
    assert_eq!(max_receive_count, u64::from(defaults::MAX_RECEIVE_COUNT));
    let given = &t.resource("WorkerFunction")["Environment"]["Variables"]["TGQ_MAX_RECEIVE_COUNT"];
    assert_eq!(
        t.number(given),
        Some(max_receive_count),
        "the worker knows the limit"
    );
    assert_eq!(
        get_att_resource(&redrive["deadLetterTargetArn"]),
        Some("DeadLetterQueue")
    );
}

#[test]
fn both_queues_are_fifo() {
    let t = Template::load();
    for queue in ["UpdatesQueue", "DeadLetterQueue"] {
        assert_eq!(
            t.resource(queue)["FifoQueue"].as_bool(),
            Some(true),
            "{queue}"
        );
    }
}

#[test]
fn the_worker_reads_the_updates_queue_in_batches_of_at_most_ten_and_reports_failures_per_item() {
    let t = Template::load();
    let event = updates_event(&t);
    assert_eq!(
        t.resource("WorkerFunction")["Events"]["Updates"]["Type"].as_str(),
        Some("SQS")
    );
    assert_eq!(get_att_resource(&event["Queue"]), Some("UpdatesQueue"));
    let batch = t
        .number(&event["BatchSize"])
        .expect("the SQS event has a numeric BatchSize");
    assert!(
        (1..=SQS_FIFO_MAX_BATCH).contains(&batch),
        "BatchSize {batch}"
    );
    let response_types = event["FunctionResponseTypes"]
        .as_sequence()
        .expect("FunctionResponseTypes is a list");
    assert!(response_types
        .iter()
        .any(|kind| kind.as_str() == Some("ReportBatchItemFailures")));
}

#[test]
fn dead_letters_are_kept_for_the_longest_time_sqs_allows() {
    let t = Template::load();
    assert_eq!(
        t.number(&t.resource("DeadLetterQueue")["MessageRetentionPeriod"]),
        Some(SQS_MAX_RETENTION_SECS)
    );
}

#[test]
fn the_table_expires_records_through_ttl_on_expires_at() {
    let t = Template::load();
    let ttl = &t.resource("UpdatesTable")["TimeToLiveSpecification"];
    assert_eq!(ttl["AttributeName"].as_str(), Some("expires_at"));
    assert_eq!(ttl["Enabled"].as_bool(), Some(true));
}

#[test]
fn the_webhook_gives_up_before_telegram_does() {
    let t = Template::load();
    let webhook = t.function_timeout("WebhookFunction");
    assert!(
        webhook < TELEGRAM_WEBHOOK_LIMIT_SECS,
        "webhook Timeout {webhook} s"
    );
}

#[test]
fn the_bot_id_parameter_accepts_exactly_the_ids_the_code_accepts() {
    let t = Template::load();
    let parameter = &t.0["Parameters"]["BotId"];
    let pattern = parameter["AllowedPattern"].as_str().unwrap();
    let max: usize = pattern
        .strip_prefix("^[A-Za-z0-9_-]{1,")
        .and_then(|rest| rest.strip_suffix("}$"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("BotId's pattern is not ^[A-Za-z0-9_-]{{1,N}}$: {pattern}"));
    assert!(BotId::new("a".repeat(max)).is_ok(), "{max} characters");
    assert!(
        BotId::new("a".repeat(max + 1)).is_err(),
        "{} characters",
        max + 1
    );
    assert!(BotId::new("").is_err());
    for byte in 0x20u8..0x7f {
        let c = char::from(byte);
        let in_pattern = c.is_ascii_alphanumeric() || c == '_' || c == '-';
        assert_eq!(BotId::new(c.to_string()).is_ok(), in_pattern, "{c:?}");
    }
    let described = parameter["ConstraintDescription"].as_str().unwrap();
    assert!(
        described.starts_with(&format!("1-{max} characters")),
        "{described}"
    );
}

#[test]
fn both_functions_run_on_the_architecture_parameter_which_defaults_to_arm64() {
    let t = Template::load();
    let parameter = &t.0["Parameters"]["Architecture"];
    assert_eq!(parameter["Default"].as_str(), Some("arm64"));
    let allowed: Vec<&str> = parameter["AllowedValues"]
        .as_sequence()
        .expect("Architecture has AllowedValues")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(allowed, ["arm64", "x86_64"]);
    let global = t.0["Globals"]["Function"]["Architectures"]
        .as_sequence()
        .expect("Globals.Function.Architectures is a list");
    let targets: Vec<Option<&str>> = global
        .iter()
        .map(|value| match value {
            Value::Tagged(tagged) => ref_target(tagged),
            _ => None,
        })
        .collect();
    assert_eq!(targets, [Some("Architecture")]);
    for function in ["WebhookFunction", "WorkerFunction"] {
        assert!(
            t.resource(function)["Architectures"].is_null(),
            "{function} overrides the Architecture parameter"
        );
    }
}
