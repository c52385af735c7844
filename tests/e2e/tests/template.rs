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

/// An alarm's properties.
fn alarm<'t>(t: &'t Template, name: &str) -> &'t Value {
    let alarm = &t.0["Resources"][name];
    assert_eq!(
        alarm["Type"].as_str(),
        Some("AWS::CloudWatch::Alarm"),
        "{name} is an alarm"
    );
    &alarm["Properties"]
}

#[test]
fn every_alarm_the_operating_guide_names_watches_its_metric() {
    let t = Template::load();
    for (name, namespace, metric) in [
        ("WebhookErrorsAlarm", "AWS/Lambda", "Errors"),
        ("WebhookUrl5xxAlarm", "AWS/Lambda", "Url5xxCount"),
        ("WebhookHttpApi5xxAlarm", "AWS/ApiGateway", "5xx"),
        ("WorkerErrorsAlarm", "AWS/Lambda", "Errors"),
        ("WorkerThrottlesAlarm", "AWS/Lambda", "Throttles"),
        ("WorkerDurationAlarm", "AWS/Lambda", "Duration"),
        (
            "DeadLetterQueueNotEmptyAlarm",
            "AWS/SQS",
            "ApproximateNumberOfMessagesVisible",
        ),
        (
            "DeadLetterQueueOldestLetterAlarm",
            "AWS/SQS",
            "ApproximateAgeOfOldestMessage",
        ),
        (
            "UpdatesQueueOldestMessageAlarm",
            "AWS/SQS",
            "ApproximateAgeOfOldestMessage",
        ),
    ] {
        let alarm = alarm(&t, name);
        assert_eq!(alarm["Namespace"].as_str(), Some(namespace), "{name}");
        assert_eq!(alarm["MetricName"].as_str(), Some(metric), "{name}");
        assert!(
            !alarm["AlarmActions"].is_null() && !alarm["OKActions"].is_null(),
            "{name} notifies"
        );
    }
    let oldest = alarm(&t, "UpdatesQueueOldestMessageAlarm");
    assert_eq!(t.number(&oldest["Threshold"]), Some(300));
    assert_eq!(
        t.0["Resources"]["AlarmEmailSubscription"]["Properties"]["Protocol"].as_str(),
        Some("email")
    );
}

#[test]
fn the_worker_duration_alarm_fires_at_eighty_percent_of_its_timeout() {
    let t = Template::load();
    let threshold = t
        .number(&alarm(&t, "WorkerDurationAlarm")["Threshold"])
        .expect("a numeric threshold");
    assert_eq!(
        threshold,
        t.function_timeout("WorkerFunction") * 1000 * 8 / 10
    );
}

#[test]
fn the_oldest_letter_alarm_fires_days_before_sqs_deletes_letters() {
    let t = Template::load();
    let threshold = t
        .number(&alarm(&t, "DeadLetterQueueOldestLetterAlarm")["Threshold"])
        .expect("a numeric threshold");
    let retention = t
        .number(&t.resource("DeadLetterQueue")["MessageRetentionPeriod"])
        .unwrap();
    assert_eq!(threshold, 10 * 86_400, "ten days");
    assert!(
        retention - threshold >= 3 * 86_400,
        "{threshold} vs {retention}"
    );
}

#[test]
fn the_ingest_unavailable_alarm_sums_every_cause_the_webhook_reports_for_five_minutes() {
    let t = Template::load();
    let alarm = alarm(&t, "WebhookIngestUnavailableAlarm");
    let queries = alarm["Metrics"].as_sequence().expect("metric math");
    let mut causes = Vec::new();
    for query in queries {
        let metric = &query["MetricStat"]["Metric"];
        if metric.is_null() {
            continue;
        }
        assert_eq!(
            metric["Namespace"].as_str(),
            Some(tgq_core::metrics::NAMESPACE)
        );
        assert_eq!(
            metric["MetricName"].as_str(),
            Some(tgq_core::metrics::INGEST_UNAVAILABLE)
        );
        let dimensions = metric["Dimensions"].as_sequence().unwrap();
        assert_eq!(
            dimensions[0]["Name"].as_str(),
            Some(tgq_core::metrics::BOT_ID)
        );
        assert_eq!(
            dimensions[1]["Name"].as_str(),
            Some(tgq_core::metrics::CAUSE)
        );
        causes.push(dimensions[1]["Value"].as_str().unwrap().to_owned());
        assert_eq!(t.number(&query["MetricStat"]["Period"]), Some(60));
    }
    assert_eq!(causes, tgq_core::PortError::CAUSES);
    let minutes = t.number(&alarm["EvaluationPeriods"]).unwrap();
    assert_eq!(minutes, 5);
    assert_eq!(t.number(&alarm["DatapointsToAlarm"]), Some(minutes));
}

#[test]
fn the_webhook_cannot_read_the_bot_token_and_no_role_has_unused_actions() {
    let t = Template::load();
    let webhook = serde_yaml::to_string(&t.0["Resources"]["WebhookRole"]).unwrap();
    assert!(webhook.contains("WebhookSecretParameterName"), "{webhook}");
    assert!(!webhook.contains("BotTokenParameterName"), "{webhook}");
    assert!(!TEMPLATE.contains("ConditionCheckItem"));
    let worker = serde_yaml::to_string(&t.0["Resources"]["WorkerRole"]).unwrap();
    assert!(worker.contains("BotTokenParameterName"));
    assert!(!worker.contains("WebhookSecretParameterName"), "{worker}");
}

#[test]
fn the_dashboard_shows_every_metric_the_functions_emit() {
    let t = Template::load();
    let body = match &t.resource("Dashboard")["DashboardBody"] {
        Value::Tagged(tagged) if tagged.tag == "Sub" => tagged.value.as_str().unwrap().to_owned(),
        other => panic!("DashboardBody is not a !Sub string: {other:?}"),
    };
    let widgets: serde_json::Value =
        serde_json::from_str(&body).expect("the dashboard body is JSON");
    let text = widgets.to_string();
    for name in tgq_core::metrics::COUNTERS
        .iter()
        .chain(&tgq_core::metrics::HISTOGRAMS)
    {
        assert!(
            text.contains(&format!("\"{name}\"")) || text.contains(&format!("\\\"{name}\\\"")),
            "{name} is on the dashboard"
        );
    }
    assert!(text.contains(&format!("{{{},BotId", tgq_core::metrics::NAMESPACE)));
}

#[test]
fn the_stack_outputs_what_the_tgq_command_reads() {
    let t = Template::load();
    // `tgq status|dlq|webhook set --stack` (cli/src/ops/target.rs) read these outputs.
    for output in [
        "TableName",
        "UpdatesQueueUrl",
        "DeadLetterQueueUrl",
        "WebhookUrl",
        "BotTokenParameterName",
        "WebhookSecretParameterName",
        "TelegramApiUrl",
        // `tgq bots add|list|remove --stack` (docs/ARCHITECTURE.md §11).
        "BotsParameterPrefix",
        "BotWebhookUrlPrefix",
    ] {
        assert!(
            !t.0["Outputs"][output]["Value"].is_null(),
            "output {output}"
        );
    }
}

#[test]
fn samconfig_tags_the_stack_and_overrides_every_parameter() {
    const SAMCONFIG: &str = include_str!("../../../samconfig.toml");
    let deploy = SAMCONFIG
        .split("[default.deploy.parameters]")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .expect("a deploy section");
    assert!(
        deploy.lines().any(|line| line.starts_with("tags = \"app=")),
        "{deploy}"
    );
    let t = Template::load();
    for (name, _) in t.0["Parameters"].as_mapping().unwrap() {
        let name = name.as_str().unwrap();
        assert!(
            deploy.contains(&format!("{name}=\\\"")),
            "parameter_overrides names {name}"
        );
    }
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

/// The registry's prefix as the template resolves it: the parameter, or the default path.
const DEFAULT_BOTS_PREFIX: &str = "/tgq/${AWS::StackName}/bots/";

#[test]
fn both_functions_read_the_bot_registry_the_stack_names_and_the_http_api_routes_each_bot() {
    let t = Template::load();
    let prefix = &t.0["Parameters"]["BotsParameterPrefix"];
    assert_eq!(prefix["Default"].as_str(), Some(""));
    let pattern = regex_lite(prefix["AllowedPattern"].as_str().unwrap());
    for (text, accepted) in [
        ("", true),
        ("/tgq/prod/bots/", true),
        ("/bots/", true),
        ("/tgq/prod/bots", false),
        ("tgq/bots/", false),
        ("/a//b/", false),
    ] {
        assert_eq!(pattern(text), accepted, "{text:?}");
        if accepted && !text.is_empty() {
            tgq_core::registry::Layout::new(text).expect("the code accepts what the template does");
        }
    }
    let resolved = serde_yaml::to_string(&t.0["Outputs"]["BotsParameterPrefix"]["Value"]).unwrap();
    assert!(resolved.contains(DEFAULT_BOTS_PREFIX), "{resolved}");
    for function in ["WebhookFunction", "WorkerFunction"] {
        let env = &t.resource(function)["Environment"]["Variables"];
        let value = serde_yaml::to_string(&env["TGQ_BOTS_PARAMETER_PREFIX"]).unwrap();
        assert_eq!(
            value, resolved,
            "{function} reads the prefix the stack outputs"
        );
    }
    // The worker reads the whole registry; the webhook every field but the tokens, by name
    // (GetParametersByPath is authorized against the path alone and would return the tokens).
    let worker = serde_yaml::to_string(&t.0["Resources"]["WorkerRole"]).unwrap();
    assert!(worker.contains("ssm:GetParametersByPath"), "{worker}");
    assert!(worker.contains(DEFAULT_BOTS_PREFIX), "{worker}");
    let webhook = serde_yaml::to_string(&t.0["Resources"]["WebhookRole"]).unwrap();
    assert!(!webhook.contains("ssm:GetParametersByPath"), "{webhook}");
    assert!(webhook.contains("ssm:DescribeParameters"), "{webhook}");
    for field in ["secret", "handler", "allowed_updates"] {
        assert!(
            webhook.contains(&format!("${{Prefix}}*/{field}")),
            "{webhook}"
        );
    }
    assert!(!webhook.contains("*/token"), "{webhook}");
    let route = t.resource("WebhookHttpApiBotRoute");
    assert_eq!(route["RouteKey"].as_str(), Some("POST /webhook/{bot_id}"));
    let urls = serde_yaml::to_string(&t.0["Outputs"]["BotWebhookUrlPrefix"]["Value"]).unwrap();
    assert!(urls.contains("FunctionUrl}webhook/"), "{urls}");
    assert!(urls.contains("ApiEndpoint}/webhook/"), "{urls}");
}

/// The template's `AllowedPattern` for the prefix, checked without a regex crate: empty, or
/// `/`-separated segments of `[A-Za-z0-9_.-]+` between a leading and a trailing `/`.
fn regex_lite(pattern: &str) -> impl Fn(&str) -> bool {
    assert_eq!(
        pattern, "^(|/[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*/)$",
        "the pattern this check reads"
    );
    |text: &str| {
        if text.is_empty() {
            return true;
        }
        let Some(inner) = text.strip_prefix('/').and_then(|t| t.strip_suffix('/')) else {
            return false;
        };
        inner.split('/').all(|segment| {
            !segment.is_empty()
                && segment
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
        })
    }
}
