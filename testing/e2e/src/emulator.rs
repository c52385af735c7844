//! The AWS side of a test: a fresh DynamoDB table, the updates FIFO queue and its FIFO dead-letter
//! queue, all on the emulator named by `AWS_ENDPOINT_URL`, under names no other test uses.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};
use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName, QueueAttributeName};

/// The variable that points every AWS client at the emulator.
pub const ENDPOINT_VAR: &str = "AWS_ENDPOINT_URL";

/// The emulator's endpoint; panics, naming the fix, when the test was started without one.
pub fn endpoint() -> String {
    match std::env::var(ENDPOINT_VAR) {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "{ENDPOINT_VAR} is not set: the end-to-end tests need an AWS emulator. Run scripts/test \
             (it starts moto server), or start `.venv/bin/python scripts/moto_server.py -H 127.0.0.1 -p \
             5099` and export \
             {ENDPOINT_VAR}=http://127.0.0.1:5099 AWS_ACCESS_KEY_ID=testing \
             AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1"
        ),
    }
}

/// The SDK configuration the harness itself uses: the environment's region, credentials and
/// endpoint, without the functions' short timeouts (the harness long-polls and may wait on a busy
/// emulator).
pub async fn sdk_config() -> SdkConfig {
    endpoint();
    aws_config::defaults(BehaviorVersion::latest())
        .http_client(tgq_aws::https_client())
        .load()
        .await
}

/// One test's table and queues.
#[derive(Clone, Debug)]
pub struct Stack {
    /// The DynamoDB table (`TGQ_TABLE`).
    pub table: String,
    /// The updates FIFO queue (`TGQ_QUEUE_URL`).
    pub queue_url: String,
    /// Its ARN, as the event source mapping names it in every record.
    pub queue_arn: String,
    /// The dead-letter FIFO queue (`TGQ_DLQ_URL`).
    pub dlq_url: String,
    /// The region the event records name.
    pub region: String,
}

impl Stack {
    /// The functions' configuration on this stack: bot `bot_id` with webhook secret `secret`, the
    /// built-in echo bot (whose replies name their update whatever `bot/` says), and, when given,
    /// the fake Bot API's token and URL. Tests add their own settings on top.
    pub fn function_vars(
        &self,
        bot_id: &str,
        secret: &str,
        telegram: Option<&tgq_fake_telegram::FakeTelegram>,
    ) -> BTreeMap<String, String> {
        let mut vars = BTreeMap::from([
            ("TGQ_BOT_ID".to_owned(), bot_id.to_owned()),
            ("TGQ_WEBHOOK_SECRET".to_owned(), secret.to_owned()),
            ("TGQ_TABLE".to_owned(), self.table.clone()),
            ("TGQ_QUEUE_URL".to_owned(), self.queue_url.clone()),
            ("TGQ_DLQ_URL".to_owned(), self.dlq_url.clone()),
            ("TGQ_HANDLER".to_owned(), "echo".to_owned()),
        ]);
        if let Some(telegram) = telegram {
            vars.insert("TELEGRAM_BOT_TOKEN".to_owned(), telegram.token().to_owned());
            vars.insert("TELEGRAM_API_URL".to_owned(), telegram.url());
        }
        vars
    }

    /// Creates a table keyed by `pk` and the two FIFO queues (explicit deduplication ids, as the
    /// webhook and the worker always send them), the updates queue redriving to the dead-letter
    /// queue after the receives `template.yaml` sets.
    pub async fn create(config: &SdkConfig, purpose: &str) -> anyhow::Result<Stack> {
        let name = unique_name(purpose);
        let dynamo = aws_sdk_dynamodb::Client::new(config);
        dynamo
            .create_table()
            .table_name(&name)
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name("pk")
                    .attribute_type(ScalarAttributeType::S)
                    .build()?,
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name("pk")
                    .key_type(KeyType::Hash)
                    .build()?,
            )
            .billing_mode(BillingMode::PayPerRequest)
            .send()
            .await
            .context("CreateTable")?;

        let sqs = aws_sdk_sqs::Client::new(config);
        let dlq_url = create_fifo_queue(&sqs, &format!("{name}-dlq.fifo"), HashMap::new()).await?;
        let dlq_arn = queue_arn(&sqs, &dlq_url).await?;
        let redrive = serde_json::json!({
            "deadLetterTargetArn": dlq_arn,
            "maxReceiveCount": crate::template::max_receive_count(),
        });
        let queue_url = create_fifo_queue(
            &sqs,
            &format!("{name}.fifo"),
            HashMap::from([(QueueAttributeName::RedrivePolicy, redrive.to_string())]),
        )
        .await?;
        let queue_arn = queue_arn(&sqs, &queue_url).await?;
        let region = config
            .region()
            .map_or_else(|| "us-east-1".to_owned(), ToString::to_string);
        Ok(Stack {
            table: name,
            queue_url,
            queue_arn,
            dlq_url,
            region,
        })
    }
}

/// Creates the FIFO queue `name` (deduplicated by the sender's ids) with `attributes`; its URL.
pub(crate) async fn create_fifo_queue(
    sqs: &aws_sdk_sqs::Client,
    name: &str,
    mut attributes: HashMap<QueueAttributeName, String>,
) -> anyhow::Result<String> {
    attributes.insert(QueueAttributeName::FifoQueue, "true".into());
    attributes.insert(
        QueueAttributeName::ContentBasedDeduplication,
        "false".into(),
    );
    let created = sqs
        .create_queue()
        .queue_name(name)
        .set_attributes(Some(attributes))
        .send()
        .await
        .with_context(|| format!("CreateQueue {name}"))?;
    created
        .queue_url
        .with_context(|| format!("CreateQueue {name} returned no URL"))
}

/// The ARN of the queue at `url`.
pub async fn queue_arn(sqs: &aws_sdk_sqs::Client, url: &str) -> anyhow::Result<String> {
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .context("GetQueueAttributes QueueArn")?;
    attributes
        .attributes
        .and_then(|mut a| a.remove(&QueueAttributeName::QueueArn))
        .with_context(|| format!("{url} has no QueueArn"))
}

/// A name no earlier run and no concurrent test has used: table and queue names share it.
fn unique_name(purpose: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!(
        "tgq-e2e-{purpose}-{}-{millis}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Counts the messages of a queue in every state, from the emulator's own bookkeeping.
pub async fn queue_depth(sqs: &aws_sdk_sqs::Client, url: &str) -> anyhow::Result<QueueDepth> {
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
        .send()
        .await
        .context("GetQueueAttributes (depth)")?
        .attributes
        .unwrap_or_default();
    let number = |name: QueueAttributeName| {
        attributes
            .get(&name)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    Ok(QueueDepth {
        visible: number(QueueAttributeName::ApproximateNumberOfMessages),
        in_flight: number(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        delayed: number(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
    })
}

/// How many messages a queue holds, by state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueDepth {
    /// Ready to be received.
    pub visible: u64,
    /// Received and not yet deleted, or hidden by a visibility change.
    pub in_flight: u64,
    /// Not yet delivered because of a delay.
    pub delayed: u64,
}

impl QueueDepth {
    /// Whether the queue holds nothing at all.
    pub fn is_empty(self) -> bool {
        self.visible + self.in_flight + self.delayed == 0
    }
}

/// One message read off a queue, with what the harness asserts on.
#[derive(Clone, Debug)]
pub struct ReadMessage {
    /// The body as SQS returned it.
    pub body: String,
    /// `MessageGroupId`.
    pub group_id: String,
    /// String message attributes by name.
    pub attributes: HashMap<String, String>,
}

/// How long [`drain`] may take before it gives up on a queue that does not empty.
const DRAIN_LIMIT: Duration = Duration::from_secs(120);

/// Reads every message of a queue by consuming it: receive, note, delete, until the emulator
/// counts no message in any state. A FIFO queue hands out nothing more of a message group while one
/// of its messages is received and not deleted, so a reader that only hid what it had read would
/// never see a group's second message; deleting each batch lets the next receive go on with the
/// group. Messages come back in the order the queue delivered them, each group's in its order.
pub async fn drain(sqs: &aws_sdk_sqs::Client, url: &str) -> anyhow::Result<Vec<ReadMessage>> {
    let started = Instant::now();
    let mut read = Vec::new();
    loop {
        let output = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            // Long enough for the delete below on a busy emulator; a message whose delete failed
            // would come back and be caught by the depth check.
            .visibility_timeout(30)
            .wait_time_seconds(1)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .context("ReceiveMessage")?;
        let messages = output.messages.unwrap_or_default();
        if messages.is_empty() {
            let depth = queue_depth(sqs, url).await?;
            if depth.is_empty() {
                return Ok(read);
            }
            if started.elapsed() > DRAIN_LIMIT {
                bail!(
                    "{url} did not drain within {DRAIN_LIMIT:?}: {depth:?} left after {} read",
                    read.len()
                );
            }
            continue;
        }
        let mut receipts = Vec::new();
        for message in messages {
            let group_id = message
                .attributes
                .as_ref()
                .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
                .cloned()
                .unwrap_or_default();
            let attributes = message
                .message_attributes
                .unwrap_or_default()
                .into_iter()
                .filter_map(|(name, value)| Some((name, value.string_value?)))
                .collect();
            receipts.extend(message.receipt_handle);
            read.push(ReadMessage {
                body: message.body.unwrap_or_default(),
                group_id,
                attributes,
            });
        }
        for receipt in receipts {
            sqs.delete_message()
                .queue_url(url)
                .receipt_handle(receipt)
                .send()
                .await
                .context("DeleteMessage")?;
        }
    }
}

/// The `status` of the update record of `update_id`, or `None` when there is no record.
pub async fn record_status(
    dynamo: &aws_sdk_dynamodb::Client,
    table: &str,
    bot_id: &str,
    update_id: i64,
) -> anyhow::Result<Option<String>> {
    let item = dynamo
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(format!("{bot_id}#{update_id:020}")))
        .consistent_read(true)
        .send()
        .await
        .context("GetItem")?
        .item;
    Ok(item.and_then(|item| match item.get("status") {
        Some(AttributeValue::S(status)) => Some(status.clone()),
        _ => None,
    }))
}

/// How many items the table holds besides the bots' send budgets (items of their own, keyed
/// `budget#…`, that every send books: docs/design/pacing.md).
pub async fn item_count(dynamo: &aws_sdk_dynamodb::Client, table: &str) -> anyhow::Result<usize> {
    let mut count = 0;
    let mut start = None;
    loop {
        let page = dynamo
            .scan()
            .table_name(table)
            .filter_expression("NOT begins_with(pk, :budget)")
            .expression_attribute_values(
                ":budget",
                aws_sdk_dynamodb::types::AttributeValue::S("budget#".into()),
            )
            .set_exclusive_start_key(start)
            .send()
            .await
            .context("Scan")?;
        count += page.items.map_or(0, |items| items.len());
        match page.last_evaluated_key {
            Some(key) => start = Some(key),
            None => return Ok(count),
        }
    }
}

/// Moves letters of the dead-letter queue back to the updates queue as SQS's message move task
/// does: the same body, group and message attributes, as a new message. Every letter of one
/// receive, or only those of `group` (the others stay hidden until their visibility ends).
pub async fn redrive(
    sqs: &aws_sdk_sqs::Client,
    stack: &Stack,
    group: Option<&str>,
) -> anyhow::Result<usize> {
    let output = sqs
        .receive_message()
        .queue_url(&stack.dlq_url)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .message_attribute_names("All")
        .send()
        .await
        .context("ReceiveMessage on the dead-letter queue")?;
    let mut moved = 0;
    for (n, message) in output.messages.unwrap_or_default().iter().enumerate() {
        let letter_group = message
            .attributes
            .as_ref()
            .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
            .cloned()
            .context("a FIFO letter without a MessageGroupId")?;
        if group.is_some_and(|group| group != letter_group) {
            continue;
        }
        let attributes: HashMap<String, MessageAttributeValue> =
            message.message_attributes.clone().unwrap_or_default();
        sqs.send_message()
            .queue_url(&stack.queue_url)
            .message_body(message.body.clone().unwrap_or_default())
            .message_group_id(letter_group)
            .message_deduplication_id(format!("moved-{n}"))
            .set_message_attributes(Some(attributes))
            .send()
            .await
            .context("SendMessage to the updates queue")?;
        sqs.delete_message()
            .queue_url(&stack.dlq_url)
            .receipt_handle(message.receipt_handle.clone().unwrap_or_default())
            .send()
            .await
            .context("DeleteMessage on the dead-letter queue")?;
        moved += 1;
    }
    Ok(moved)
}
