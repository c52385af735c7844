//! `template.yaml` and the code must tell the same story: each setting the code relies on is checked
//! against `tgq_core::defaults` here, so a change to one without the other fails the build.

use serde_yaml::value::TaggedValue;
use serde_yaml::Value;
use tgq_core::config::Vars;
use tgq_core::defaults;
use tgq_core::ids::BotId;
use tgq_core::worker::GoneRecipients;

const TEMPLATE: &str = include_str!("../../../../template.yaml");

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

/// The one query of a metric-math alarm, which must be a Metrics Insights `SELECT` returning the
/// alarm's series.
fn insights_query(t: &Template, name: &str) -> String {
    let queries = alarm(t, name)["Metrics"]
        .as_sequence()
        .unwrap_or_else(|| panic!("{name} alarms on a query"));
    assert_eq!(queries.len(), 1, "{name}: one query, one series");
    assert_eq!(queries[0]["ReturnData"].as_bool(), Some(true), "{name}");
    assert_eq!(t.number(&queries[0]["Period"]), Some(60), "{name}");
    let expression = match &queries[0]["Expression"] {
        Value::String(text) => text.clone(),
        Value::Tagged(tagged) if tagged.tag == "Sub" => tagged.value.as_str().unwrap().to_owned(),
        other => panic!("{name}: the query is not a string: {other:?}"),
    };
    assert!(
        expression.starts_with("SELECT SUM("),
        "{name}: {expression}"
    );
    expression
}

#[test]
fn the_ingest_unavailable_alarm_sums_every_bot_and_every_cause_for_five_minutes() {
    let t = Template::load();
    let query = insights_query(&t, "WebhookIngestUnavailableAlarm");
    let schema = format!(
        "SELECT SUM({}) FROM SCHEMA({}, {}, {})",
        tgq_core::metrics::INGEST_UNAVAILABLE,
        tgq_core::metrics::NAMESPACE,
        tgq_core::metrics::BOT_ID,
        tgq_core::metrics::CAUSE
    );
    // No WHERE: a registry bot's 503s count as the stack's bot's do, and so does every cause.
    assert_eq!(query, schema);
    let alarm = alarm(&t, "WebhookIngestUnavailableAlarm");
    let minutes = t.number(&alarm["EvaluationPeriods"]).unwrap();
    assert_eq!(minutes, 5);
    assert_eq!(t.number(&alarm["DatapointsToAlarm"]), Some(minutes));
}

#[test]
fn throttled_table_requests_and_unreadable_registries_page_someone() {
    let t = Template::load();
    let table = insights_query(&t, "TableThrottledAlarm");
    assert!(
        table
            .contains("SUM(ThrottledRequests) FROM SCHEMA(\"AWS/DynamoDB\", Operation, TableName)")
            && table.ends_with("WHERE TableName = '${UpdatesTable}'"),
        "every operation on the stack's table: {table}"
    );
    let registry = insights_query(&t, "RegistryUnavailableAlarm");
    assert_eq!(
        registry,
        format!(
            "SELECT SUM({}) FROM SCHEMA({}, {})",
            tgq_core::metrics::REGISTRY_UNAVAILABLE,
            tgq_core::metrics::NAMESPACE,
            tgq_core::metrics::CAUSE
        )
    );
    for name in ["TableThrottledAlarm", "RegistryUnavailableAlarm"] {
        let alarm = alarm(&t, name);
        assert!(
            !alarm["AlarmActions"].is_null() && !alarm["OKActions"].is_null(),
            "{name} notifies"
        );
    }
}

#[test]
fn a_broadcast_step_stuck_past_its_tenth_receive_pages_someone_until_it_runs() {
    let t = Template::load();
    assert_eq!(
        insights_query(&t, "BroadcastStuckAlarm"),
        format!(
            "SELECT SUM({}) FROM SCHEMA({}, {})",
            tgq_core::metrics::BROADCAST_STUCK,
            tgq_core::metrics::NAMESPACE,
            tgq_core::metrics::CAUSE
        )
    );
    let alarm = alarm(&t, "BroadcastStuckAlarm");
    // The worker receives a stuck step again every 10 minutes at most: one count in a window
    // longer than that keeps the alarm on between two receives.
    let window = t.number(&alarm["EvaluationPeriods"]).unwrap() * 60;
    assert!(window > 600, "{window} s");
    // CloudWatch evaluates a Metrics Insights alarm over three hours at most.
    assert!(window <= 3 * 3600, "{window} s");
    assert_eq!(t.number(&alarm["DatapointsToAlarm"]), Some(1));
    assert!(
        !alarm["AlarmActions"].is_null() && !alarm["OKActions"].is_null(),
        "it notifies"
    );
}

#[test]
fn every_alarm_of_the_stack_has_its_row_in_the_operating_guide() {
    const GUIDE: &str = include_str!("../../../../docs/OPERATIONS.md");
    let t = Template::load();
    let mut names = Vec::new();
    for (_, resource) in t.0["Resources"].as_mapping().unwrap() {
        if resource["Type"].as_str() != Some("AWS::CloudWatch::Alarm") {
            continue;
        }
        let name = match &resource["Properties"]["AlarmName"] {
            Value::Tagged(tagged) if tagged.tag == "Sub" => tagged.value.as_str().unwrap(),
            other => panic!("an alarm's name is not a !Sub string: {other:?}"),
        };
        let suffix = name
            .strip_prefix("${AWS::StackName}-")
            .unwrap_or_else(|| panic!("{name} begins with the stack's name"));
        names.push(suffix.to_owned());
    }
    assert!(names.len() >= 10, "{names:?}");
    let table: Vec<&str> = GUIDE
        .split_once("### What each alarm means")
        .expect("docs/OPERATIONS.md has its alarm table")
        .1
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .collect();
    for name in names {
        assert!(
            table
                .iter()
                .any(|row| row.starts_with(&format!("| `{name}`"))
                    || row.contains(&format!(", `{name}` |"))),
            "docs/OPERATIONS.md's alarm table has no row for `{name}`"
        );
    }
}

#[test]
fn the_function_url_alarm_watches_the_series_lambda_publishes_for_the_url() {
    let t = Template::load();
    let dimensions = alarm(&t, "WebhookUrl5xxAlarm")["Dimensions"]
        .as_sequence()
        .unwrap()
        .clone();
    let resource = dimensions
        .iter()
        .find(|d| d["Name"].as_str() == Some("Resource"))
        .expect("a Resource dimension");
    // Lambda names a URL's series `function:$LATEST` (or `function:alias`), never the bare name.
    let value = serde_yaml::to_string(&resource["Value"]).unwrap();
    assert!(value.contains("${WebhookFunction}:$LATEST"), "{value}");
}

#[test]
fn the_oldest_message_alarm_stays_quiet_through_a_whole_retry_budget_of_ordinary_backoff() {
    use tgq_core::policy::{Jitter, RetryPolicy};
    let t = Template::load();
    let threshold = t
        .number(&alarm(&t, "UpdatesQueueOldestMessageAlarm")["Threshold"])
        .unwrap();
    let policy = RetryPolicy::default();
    // Every backoff of the budget at the largest jitter (1.5 x the step).
    let held: u64 = (1..defaults::MAX_ATTEMPTS)
        .map(|attempt| policy.backoff(attempt, Jitter::NONE).as_secs() * 3 / 2)
        .sum();
    assert!(
        threshold >= 2 * held,
        "the alarm fires at {threshold} s, while ordinary backoff holds a message up to {held} s"
    );
}

#[test]
fn both_queues_keep_messages_fourteen_days_and_take_any_body_the_webhook_stores() {
    let t = Template::load();
    assert_eq!(
        t.number(&t.resource("UpdatesQueue")["MessageRetentionPeriod"]),
        Some(SQS_MAX_RETENTION_SECS),
        "a backlog SQS deletes for age reaches no dead-letter queue"
    );
    for queue in ["UpdatesQueue", "DeadLetterQueue"] {
        let size = t
            .number(&t.resource(queue)["MaximumMessageSize"])
            .unwrap_or_else(|| panic!("{queue} sets MaximumMessageSize"));
        assert_eq!(size, defaults::MAX_MESSAGE_BYTES as u64, "{queue}");
    }
    // A body DynamoDB cannot hold is dead-lettered whole: base64 (when it is not text) of the
    // largest body the webhook takes, with room for the letter's attributes.
    let buried = defaults::MAX_BODY_BYTES.div_ceil(3) * 4;
    assert!(
        buried + 16 * 1024 <= defaults::MAX_MESSAGE_BYTES,
        "a {}-byte body is {buried} bytes in a letter",
        defaults::MAX_BODY_BYTES
    );
}

#[test]
fn a_record_outlives_its_dead_letter() {
    let t = Template::load();
    let retention = t
        .number(&t.resource("DeadLetterQueue")["MessageRetentionPeriod"])
        .unwrap();
    assert!(
        defaults::RECORD_TTL.as_secs() >= retention + 86_400,
        "records expire after {:?}, letters after {retention} s",
        defaults::RECORD_TTL
    );
    assert!(
        t.resource("WebhookFunction")["Environment"]["Variables"]["TGQ_RECORD_TTL_SECS"].is_null()
            && t.0["Globals"]["Function"]["Environment"]["Variables"]["TGQ_RECORD_TTL_SECS"]
                .is_null(),
        "the functions keep the code's record TTL"
    );
}

#[test]
fn in_a_region_without_function_urls_the_stack_takes_the_http_api() {
    let t = Template::load();
    // The condition is Or of Equals [Ref AWS::Region, region]: every other string in it is a region.
    fn strings<'v>(value: &'v Value, out: &mut Vec<&'v str>) {
        match value {
            Value::String(text) => out.push(text),
            Value::Sequence(items) => items.iter().for_each(|item| strings(item, out)),
            Value::Tagged(tagged) => strings(&tagged.value, out),
            _ => {}
        }
    }
    let mut listed = Vec::new();
    strings(&t.0["Conditions"]["FunctionUrlsUnavailable"], &mut listed);
    listed.retain(|text| *text != "AWS::Region");
    listed.sort_unstable();
    assert_eq!(listed, defaults::REGIONS_WITHOUT_FUNCTION_URLS);
    let readme = include_str!("../../../../README.md");
    for region in defaults::REGIONS_WITHOUT_FUNCTION_URLS {
        assert!(readme.contains(region), "README names {region}");
    }
    let endpoint = &t.0["Parameters"]["WebhookEndpoint"];
    assert_eq!(endpoint["Default"].as_str(), Some("Auto"));
    let use_url = serde_yaml::to_string(&t.0["Conditions"]["UseFunctionUrl"]).unwrap();
    assert!(
        use_url.contains("FunctionUrlsUnavailable") && use_url.contains("Auto"),
        "{use_url}"
    );
    let use_api = serde_yaml::to_string(&t.0["Conditions"]["UseHttpApi"]).unwrap();
    assert!(
        use_api.contains("Not") && use_api.contains("UseFunctionUrl"),
        "{use_api}"
    );
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

/// Every dashboard of the template with its body as CloudFormation hands it to CloudWatch: the
/// `Fn::Sub` resolved with the parameters' defaults (`mybot` for BotId, which has none), the pseudo
/// parameters of a stack `tgq` in us-east-1, and a stand-in for each resource's name or attribute.
fn dashboard_bodies(t: &Template) -> Vec<(String, serde_json::Value)> {
    let parameters = t.0["Parameters"].as_mapping().unwrap();
    let resources = t.0["Resources"].as_mapping().unwrap();
    let value = |name: &str| -> Option<String> {
        let pseudo = match name {
            "AWS::Region" => Some("us-east-1"),
            "AWS::StackName" => Some("tgq"),
            "AWS::AccountId" => Some("123456789012"),
            "AWS::Partition" => Some("aws"),
            "AWS::URLSuffix" => Some("amazonaws.com"),
            _ => None,
        };
        if let Some(pseudo) = pseudo {
            return Some(pseudo.to_owned());
        }
        if let Some(parameter) = parameters.get(name) {
            return Some(match &parameter["Default"] {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => "mybot".to_owned(),
            });
        }
        let resource = name.split('.').next()?;
        resources
            .contains_key(resource)
            .then(|| format!("tgq-{}", resource.to_lowercase()))
    };
    let mut bodies = Vec::new();
    for (name, resource) in resources {
        if resource["Type"].as_str() != Some("AWS::CloudWatch::Dashboard") {
            continue;
        }
        let name = name.as_str().unwrap().to_owned();
        let text = match &resource["Properties"]["DashboardBody"] {
            Value::String(text) => text.clone(),
            Value::Tagged(tagged) if tagged.tag == "Sub" => {
                let template = tagged
                    .value
                    .as_str()
                    .unwrap_or_else(|| panic!("{name}: DashboardBody's !Sub takes a string"));
                tgq_e2e::dashboard::sub(template, value)
                    .unwrap_or_else(|error| panic!("{name}: {error}"))
            }
            other => panic!("{name}: DashboardBody is neither a string nor a !Sub: {other:?}"),
        };
        let body = serde_json::from_str(&text)
            .unwrap_or_else(|error| panic!("{name}: the body is not JSON after Fn::Sub: {error}"));
        bodies.push((name, body));
    }
    bodies
}

#[test]
fn every_dashboard_body_is_one_cloudwatch_accepts() {
    let t = Template::load();
    let bodies = dashboard_bodies(&t);
    assert!(!bodies.is_empty(), "the template has a dashboard");
    let mut problems = Vec::new();
    for (name, body) in &bodies {
        problems.extend(
            tgq_e2e::dashboard::problems(body)
                .into_iter()
                .map(|problem| format!("{name}: {problem}")),
        );
    }
    assert!(
        problems.is_empty(),
        "CloudWatch would refuse the dashboard (and roll the stack back):\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_stack_outputs_what_the_tgq_command_reads() {
    let t = Template::load();
    // `tgq status|dlq|webhook set --stack` (crates/command/src/ops/target.rs) read these outputs.
    for output in [
        "TableName",
        "UpdatesQueueUrl",
        "DeadLetterQueueUrl",
        "WebhookUrl",
        "BotTokenParameterName",
        "WebhookSecretParameterName",
        "TelegramApiUrl",
        // `tgq bots add|list|remove --stack` (docs/design/fleet.md §2).
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
    const SAMCONFIG: &str = include_str!("../../../../samconfig.toml");
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
    // Each function reads the registry's fields by name, only those it uses: the webhook every
    // field but the tokens, the worker every field but the webhook secrets (GetParametersByPath is
    // authorized against the path alone and would return every value under it).
    for (role, reads, never) in [
        (
            "WebhookRole",
            ["secret", "handler", "allowed_updates"],
            "token",
        ),
        (
            "WorkerRole",
            ["token", "handler", "allowed_updates"],
            "secret",
        ),
    ] {
        let policy = serde_yaml::to_string(&t.0["Resources"][role]).unwrap();
        assert!(
            !policy.contains("ssm:GetParametersByPath"),
            "{role}: {policy}"
        );
        assert!(
            policy.contains("ssm:DescribeParameters"),
            "{role}: {policy}"
        );
        assert!(policy.contains(DEFAULT_BOTS_PREFIX), "{role}: {policy}");
        for field in reads {
            assert!(
                policy.contains(&format!("${{Prefix}}*/{field}")),
                "{role} reads {field}: {policy}"
            );
        }
        assert!(
            !policy.contains(&format!("*/{never}")) && !policy.contains("${Prefix}*\n"),
            "{role} never reads {never}: {policy}"
        );
    }
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
