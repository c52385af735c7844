//! Emulator setup shared by the integration tests: the AWS adapters on moto server, reached through
//! `AWS_ENDPOINT_URL`. The table is created once per process; each test gets its own pair of FIFO
//! queues, because the queue bodies read the head of an empty queue (`receive(1)`), which tests
//! running in parallel on one shared queue would take from each other.

// Each test crate uses its own part of this module.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    TimeToLiveSpecification,
};
use aws_sdk_sqs::types::QueueAttributeName;
use tgq_aws::{aws_config, DynamoStore, SqsQueue};
use tgq_conformance::Adapters;
use tokio::sync::OnceCell;

/// The adapters of one test, and the raw clients for looking behind them.
pub struct Emulator {
    /// The record store on the shared table.
    pub store: Arc<DynamoStore>,
    /// This test's updates queue.
    pub queue: Arc<SqsQueue>,
    /// This test's dead-letter queue.
    pub dlq: Arc<SqsQueue>,
    /// The table's name.
    pub table: String,
    /// A DynamoDB client on the emulator.
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// An SQS client on the emulator.
    pub sqs: aws_sdk_sqs::Client,
    /// The dead-letter queue's URL.
    pub dlq_url: String,
    /// An SSM client on the emulator.
    pub ssm: aws_sdk_ssm::Client,
}

impl Emulator {
    /// The adapters as the conformance suite takes them.
    pub fn adapters(&self) -> Adapters {
        Adapters {
            store: self.store.clone(),
            ledger: self.store.clone(),
            reader: self.store.clone(),
            queue: self.queue.clone(),
            consumer: self.queue.clone(),
            dead: self.dlq.clone(),
            dead_reader: self.dlq.clone(),
            max_receive_count: MAX_RECEIVE_COUNT,
            reset: self.store.clone(),
            audit: self.store.clone(),
            audit_reader: self.store.clone(),
            book: self.store.clone(),
            dead_store: self.dlq.clone(),
        }
    }
}

/// Names unique to this process, so runs against a long-lived emulator never share state.
fn run_id() -> &'static str {
    static RUN_ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    RUN_ID.get_or_init(|| {
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default();
        format!("tgq-conf-{}-{millis}", std::process::id())
    })
}

/// Fresh adapters on the emulator; panics when there is none to reach.
pub async fn emulator() -> Emulator {
    let endpoint = std::env::var("AWS_ENDPOINT_URL").unwrap_or_default();
    assert!(
        !endpoint.is_empty(),
        "conformance tests need AWS_ENDPOINT_URL pointing at moto; run scripts/test"
    );
    // Clients are built per test: each test has its own runtime, and a client's connection pool
    // must not outlive the runtime it was made on.
    let config = aws_config().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    let sqs = aws_sdk_sqs::Client::new(&config);

    let table = TABLE.get_or_init(|| create_table(&dynamodb)).await;
    let store = Arc::new(DynamoStore::new(dynamodb.clone(), table.clone()));

    static QUEUES: AtomicU32 = AtomicU32::new(0);
    let n = QUEUES.fetch_add(1, Ordering::SeqCst);
    let dlq_url = create_fifo_queue(&sqs, &format!("{}-{n}-dlq", run_id()), None).await;
    let queue_url =
        create_fifo_queue(&sqs, &format!("{}-{n}-updates", run_id()), Some(&dlq_url)).await;
    Emulator {
        store,
        queue: Arc::new(SqsQueue::new(sqs.clone(), queue_url)),
        dlq: Arc::new(SqsQueue::new(sqs.clone(), dlq_url.clone())),
        table: table.clone(),
        dynamodb,
        sqs,
        dlq_url,
        ssm: aws_sdk_ssm::Client::new(&config),
    }
}

/// A fresh poller lease on the emulator's shared table: each call names a bot of its own, so the
/// lease is one nobody has acquired.
pub async fn poller_lease() -> tgq_conformance::lease::LeaseUnderTest {
    static LEASES: AtomicU32 = AtomicU32::new(0);
    let emulator = emulator_table().await;
    let n = LEASES.fetch_add(1, Ordering::SeqCst);
    let bot = tgq_core::ids::BotId::new(format!("lease{n}")).expect("a valid bot id");
    Arc::new(tgq_aws::DynamoPollerLease::new(
        emulator.0, emulator.1, &bot,
    ))
}

/// Budget cells on the emulator's shared table, and two bots of their own for each call, so
/// nothing was booked for them.
pub async fn budget_cells() -> tgq_conformance::budget::BudgetUnderTest {
    static BUDGETS: AtomicU32 = AtomicU32::new(0);
    let emulator = emulator_table().await;
    let n = BUDGETS.fetch_add(1, Ordering::SeqCst);
    let bot = |name: &str| tgq_core::ids::BotId::new(format!("{name}{n}")).expect("a valid bot id");
    tgq_conformance::budget::BudgetUnderTest {
        cells: Arc::new(tgq_aws::DynamoBudgetCells::new(emulator.0, emulator.1)),
        bot: bot("budget"),
        other: bot("other"),
    }
}

/// A DynamoDB client on the emulator and the shared table, without the queues [`emulator`] makes.
async fn emulator_table() -> (aws_sdk_dynamodb::Client, String) {
    let endpoint = std::env::var("AWS_ENDPOINT_URL").unwrap_or_default();
    assert!(
        !endpoint.is_empty(),
        "conformance tests need AWS_ENDPOINT_URL pointing at moto; run scripts/test"
    );
    let dynamodb = aws_sdk_dynamodb::Client::new(&aws_config().await);
    let table = TABLE.get_or_init(|| create_table(&dynamodb)).await.clone();
    (dynamodb, table)
}

/// The table every test of the process shares, created by the first that needs it.
static TABLE: OnceCell<String> = OnceCell::const_new();

/// The table as `template.yaml` declares it: string key `pk`, TTL on `expires_at`.
async fn create_table(client: &aws_sdk_dynamodb::Client) -> String {
    create_table_named(client, &format!("{}-updates", run_id())).await
}

/// A table named `name` as `template.yaml` declares it; creating one that exists is fine.
pub async fn create_table_named(client: &aws_sdk_dynamodb::Client, name: &str) -> String {
    let name = name.to_owned();
    let created = client
        .create_table()
        .table_name(&name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("pk")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("complete attribute definition"),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("pk")
                .key_type(KeyType::Hash)
                .build()
                .expect("complete key schema"),
        )
        .send()
        .await;
    if let Err(err) = created {
        // Creating is idempotent: a table left by an earlier attempt in this process is fine.
        let in_use = err
            .as_service_error()
            .is_some_and(|e| e.is_resource_in_use_exception());
        assert!(
            in_use,
            "cannot create table {name} at the emulator: {:?}",
            err
        );
    }
    client
        .update_time_to_live()
        .table_name(&name)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .attribute_name("expires_at")
                .enabled(true)
                .build()
                .expect("complete TTL specification"),
        )
        .send()
        .await
        .expect("enable TTL on expires_at");
    name
}

/// The updates queue's redrive limit in these tests: small, so the conformance suite reaches it.
pub const MAX_RECEIVE_COUNT: u32 = 3;

/// A FIFO queue with explicit deduplication ids, as `template.yaml` declares the updates queue;
/// with `redrive_to`, it moves a message there after [`MAX_RECEIVE_COUNT`] receives.
async fn create_fifo_queue(
    client: &aws_sdk_sqs::Client,
    name: &str,
    redrive_to: Option<&str>,
) -> String {
    let mut request = client
        .create_queue()
        .queue_name(format!("{name}.fifo"))
        .attributes(QueueAttributeName::FifoQueue, "true")
        .attributes(QueueAttributeName::ContentBasedDeduplication, "false");
    if let Some(dlq_url) = redrive_to {
        let arn = client
            .get_queue_attributes()
            .queue_url(dlq_url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .expect("the dead-letter queue's ARN")
            .attributes
            .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
            .expect("GetQueueAttributes returns the ARN");
        let policy = serde_json::json!({
            "deadLetterTargetArn": arn,
            "maxReceiveCount": MAX_RECEIVE_COUNT.to_string(),
        });
        request = request.attributes(QueueAttributeName::RedrivePolicy, policy.to_string());
    }
    request
        .send()
        .await
        .unwrap_or_else(|e| panic!("cannot create queue {name}.fifo at the emulator: {e:?}"))
        .queue_url
        .expect("CreateQueue returns the queue URL")
}

/// Broadcasts on a table of their own for each call (a job's ids and listing are the table's), and
/// the records' store on it, which writes the chats' states an audience is chosen from.
pub async fn broadcasts() -> tgq_conformance::broadcast::BroadcastsUnderTest {
    static TABLES: AtomicU32 = AtomicU32::new(0);
    let dynamodb = aws_sdk_dynamodb::Client::new(&aws_config().await);
    let n = TABLES.fetch_add(1, Ordering::SeqCst);
    let table = create_table_named(&dynamodb, &format!("{}-broadcasts-{n}", run_id())).await;
    let records = Arc::new(tgq_aws::DynamoStore::new(dynamodb.clone(), table.clone()));
    tgq_conformance::broadcast::BroadcastsUnderTest {
        store: Arc::new(tgq_aws::DynamoBroadcasts::new(dynamodb, table)),
        put_state: Box::new(move |bot, chat, format, json| {
            let (records, bot, format) = (records.clone(), bot.clone(), format.to_owned());
            let json = json.to_string();
            tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(tgq_conformance::write_state(
                    &*records,
                    &*records,
                    (&bot, chat),
                    &format,
                    &json,
                ))
            })
        }),
    }
}
