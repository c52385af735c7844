//! A scenario's table and queues on moto, with the redrive of `template.yaml`: the updates queue
//! moves a message to the dead-letter queue after the template's `MaxReceiveCount` receives.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use aws_config::SdkConfig;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use aws_sdk_sqs::types::QueueAttributeName;

use crate::tally::Letter;

/// One scenario's resources.
#[derive(Clone, Debug)]
pub struct DrillStack {
    /// `TGQ_TABLE`.
    pub table: String,
    /// `TGQ_QUEUE_URL`.
    pub queue_url: String,
    /// The queue's ARN, named in every event record.
    pub queue_arn: String,
    /// `TGQ_DLQ_URL`.
    pub dlq_url: String,
    /// The region.
    pub region: String,
    /// The redrive's `maxReceiveCount`, as `template.yaml` sets it.
    pub max_receive_count: u32,
}

/// `MaxReceiveCount`'s default in `template.yaml`.
pub fn template_max_receive_count() -> anyhow::Result<u32> {
    let text = include_str!("../../../../template.yaml");
    // CloudFormation's short forms (!Ref, !Sub…) are tags to a YAML parser; they do not matter here.
    let template: serde_yaml::Value = serde_yaml::from_str(text)?;
    template["Parameters"]["MaxReceiveCount"]["Default"]
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .context("template.yaml has no Parameters.MaxReceiveCount.Default")
}

impl DrillStack {
    /// Creates the table and the two FIFO queues for scenario `name`.
    pub async fn create(config: &SdkConfig, name: &str) -> anyhow::Result<DrillStack> {
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let name = format!("tgq-drill-{name}-{}-{millis}", std::process::id());
        let max_receive_count = template_max_receive_count()?;
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
        let dlq_url = fifo(&sqs, &format!("{name}-dlq.fifo"), HashMap::new()).await?;
        let dlq_arn = arn(&sqs, &dlq_url).await?;
        let redrive = serde_json::json!({
            "deadLetterTargetArn": dlq_arn,
            "maxReceiveCount": max_receive_count,
        });
        let queue_url = fifo(
            &sqs,
            &format!("{name}.fifo"),
            HashMap::from([(QueueAttributeName::RedrivePolicy, redrive.to_string())]),
        )
        .await?;
        let queue_arn = arn(&sqs, &queue_url).await?;
        let region = config
            .region()
            .map_or_else(|| "us-east-1".to_owned(), ToString::to_string);
        Ok(DrillStack {
            table: name,
            queue_url,
            queue_arn,
            dlq_url,
            region,
            max_receive_count,
        })
    }

    /// Every dead letter, taken off the dead-letter queue (the scenario is over). A message without
    /// tgq's attributes was moved there by the redrive policy.
    ///
    /// Each letter is deleted once read: the queue is FIFO, so while one letter of a group is held
    /// by a receive, the group's later letters are not handed out (hiding them, as the suite's
    /// `read_all` does, reads only the first batch of each group).
    pub async fn dead_letters(&self, sqs: &aws_sdk_sqs::Client) -> anyhow::Result<Vec<Letter>> {
        let mut letters = Vec::new();
        let mut empty = 0;
        while empty < 2 {
            let messages = sqs
                .receive_message()
                .queue_url(&self.dlq_url)
                .max_number_of_messages(10)
                .visibility_timeout(60)
                .wait_time_seconds(1)
                .message_attribute_names("All")
                .send()
                .await
                .context("ReceiveMessage (dead letters)")?
                .messages
                .unwrap_or_default();
            if messages.is_empty() {
                empty += 1;
                continue;
            }
            empty = 0;
            for message in messages {
                let attribute = |name: &str| {
                    message
                        .message_attributes
                        .as_ref()
                        .and_then(|a| a.get(name))
                        .and_then(|v| v.string_value.clone())
                };
                let body = message.body.clone().unwrap_or_default();
                let update_id = attribute("update_id")
                    .and_then(|v| v.parse().ok())
                    .or_else(|| {
                        serde_json::from_str::<serde_json::Value>(&body)
                            .ok()
                            .and_then(|b| b["update_id"].as_i64())
                    });
                letters.push(Letter {
                    update_id,
                    reason: attribute("reason").unwrap_or_else(|| "max_receive_count".to_owned()),
                    attempts: attribute("attempts")
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0),
                    body,
                });
                if let Some(receipt) = message.receipt_handle {
                    sqs.delete_message()
                        .queue_url(&self.dlq_url)
                        .receipt_handle(receipt)
                        .send()
                        .await
                        .context("DeleteMessage (dead letter)")?;
                }
            }
        }
        Ok(letters)
    }
}

async fn fifo(
    sqs: &aws_sdk_sqs::Client,
    name: &str,
    mut attributes: HashMap<QueueAttributeName, String>,
) -> anyhow::Result<String> {
    attributes.insert(QueueAttributeName::FifoQueue, "true".into());
    attributes.insert(
        QueueAttributeName::ContentBasedDeduplication,
        "false".into(),
    );
    sqs.create_queue()
        .queue_name(name)
        .set_attributes(Some(attributes))
        .send()
        .await
        .with_context(|| format!("CreateQueue {name}"))?
        .queue_url
        .with_context(|| format!("CreateQueue {name} returned no URL"))
}

async fn arn(sqs: &aws_sdk_sqs::Client, url: &str) -> anyhow::Result<String> {
    sqs.get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .context("GetQueueAttributes")?
        .attributes
        .and_then(|mut a| a.remove(&QueueAttributeName::QueueArn))
        .with_context(|| format!("{url} has no QueueArn"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_redrive_limit_is_read_from_the_template() {
        let n = super::template_max_receive_count().unwrap();
        assert!(n >= 1, "{n}");
    }
}
