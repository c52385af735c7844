//! The emulator keeps the SQS semantics tgq's promise rests on: what these tests find wrong would
//! otherwise surface later, as replies out of order in a test or a drill.

use std::time::Duration;

use aws_sdk_sqs::types::Message;
use tgq_e2e::emulator::{self, Stack};

/// Messages of one group received together, left to their visibility, and received again: they
/// come back in the order they were sent, as SQS FIFO hands a group's messages out.
#[tokio::test]
async fn a_group_s_messages_come_back_in_order_when_their_visibility_expires() {
    let config = emulator::sdk_config().await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let stack = Stack::create(&config, "fifo-expiry").await.unwrap();
    let sent = ["first", "second", "third"];
    for body in sent {
        sqs.send_message()
            .queue_url(&stack.queue_url)
            .message_group_id("chat-1")
            .message_deduplication_id(body)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }

    let receive = |visibility: i32| {
        sqs.receive_message()
            .queue_url(&stack.queue_url)
            .max_number_of_messages(10)
            .visibility_timeout(visibility)
            .wait_time_seconds(0)
            .send()
    };
    let bodies = |messages: Option<Vec<Message>>| -> Vec<String> {
        messages
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| m.body)
            .collect()
    };
    let held = bodies(receive(1).await.unwrap().messages);
    assert_eq!(held, sent, "the first receive hands out the group in order");

    // Nobody deletes them: the consumer died, and each comes back once its second is up.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let mut again = Vec::new();
    for _ in 0..sent.len() {
        let got = bodies(receive(30).await.unwrap().messages);
        if got.is_empty() {
            break;
        }
        again.extend(got);
    }
    assert_eq!(
        again, sent,
        "after their visibility expired, the group came back in its order"
    );
}
