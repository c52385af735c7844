//! A scenario's table and queues on moto: the end-to-end harness's `Stack` (the updates queue
//! redriving to the dead-letter queue after `template.yaml`'s `MaxReceiveCount` receives), named
//! for the scenario, and the drill's way of reading its dead letters to the end.

use anyhow::Context as _;
use aws_config::SdkConfig;
use tgq_e2e::emulator::Stack;

use crate::tally::Letter;

/// One scenario's resources.
#[derive(Clone, Debug)]
pub struct DrillStack {
    /// The table and the two queues.
    pub stack: Stack,
    /// The redrive's `maxReceiveCount`, as `template.yaml` sets it.
    pub max_receive_count: u32,
}

impl std::ops::Deref for DrillStack {
    type Target = Stack;

    fn deref(&self) -> &Stack {
        &self.stack
    }
}

impl DrillStack {
    /// Creates the table and the two FIFO queues for scenario `name`.
    pub async fn create(config: &SdkConfig, name: &str) -> anyhow::Result<DrillStack> {
        Ok(DrillStack {
            stack: Stack::create(config, &format!("drill-{name}")).await?,
            max_receive_count: tgq_e2e::template::max_receive_count(),
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
                    bot: attribute("bot_id"),
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
