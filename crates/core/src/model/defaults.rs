//! Defaults shared by the code, `template.yaml` and the README; a test keeps them in step.

use std::time::Duration;

/// Handler runs allowed per update before it is dead-lettered.
pub const MAX_ATTEMPTS: u32 = 8;
/// First backoff step; doubled on every further attempt.
pub(crate) const BACKOFF_BASE: Duration = Duration::from_secs(2);
/// Largest backoff step before jitter.
pub(crate) const BACKOFF_CAP: Duration = Duration::from_secs(300);
/// How long an update Telegram keeps rate-limiting may go on being retried, from its first run.
pub(crate) const MAX_RETRY_AGE: Duration = Duration::from_secs(24 * 3600);
/// Largest webhook body accepted (Telegram updates are far smaller). Chosen so that every body
/// accepted can be queued or dead-lettered whole: a body DynamoDB cannot hold ([`MAX_ITEM_BYTES`])
/// is buried with its bytes, base64 when it is not text, and that stays under SQS's 1 MiB message
/// ([`MAX_MESSAGE_BYTES`]) with the letter's attributes.
pub const MAX_BODY_BYTES: usize = 512 * 1024;
/// SQS's largest message, the `MaximumMessageSize` of both queues in `template.yaml`.
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;
/// DynamoDB's item size limit: a record that would grow past it can never be stored.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;
/// How long an update record is kept before DynamoDB's TTL (or local retention) removes it: the
/// dead-letter queue's 14 days and a day more, so a letter replayed on its last day still finds its
/// record, with the sends and steps it recorded, and repeats none of them. Every claim starts the
/// count again, and a letter is sent right after its last claim.
pub const RECORD_TTL: Duration = Duration::from_secs(15 * 24 * 3600);
/// How long one Bot API call may take before it counts as a (transient) timeout.
pub const TELEGRAM_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for one AWS call, retries included (the SDK clients' operation timeout).
pub const AWS_OPERATION_TIMEOUT: Duration = Duration::from_secs(5);
/// What the worker keeps of an invocation's time for itself: a handler's run is cut off this long
/// before the deadline, and no record starts with less left. It covers one Telegram call in flight
/// and one store write (settling the run).
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(15);
/// How long a settle or a visibility change the store or queue refused as unavailable is retried
/// within the run, before the message is left to come back (docs/design/worker.md §1).
pub const STORE_PATIENCE: Duration = Duration::from_secs(20);
/// The worker Lambda's timeout in `template.yaml`; the queue's visibility timeout must be ≥ 6× this.
pub const WORKER_TIMEOUT: Duration = Duration::from_secs(60);
/// SQS's largest `maxReceiveCount`, the updates queue's redrive setting: receives are a crash-loop
/// net, not a budget (a message waiting behind a failing one of its chat is received again with
/// every retry of it, without running).
pub const MAX_RECEIVE_COUNT: u32 = 1000;
/// A record received this share of `MAX_RECEIVE_COUNT` times is logged as close to redrive.
pub const RECEIVE_WARNING_SHARE: f64 = 0.8;
/// The SQS ceiling for a message's visibility, counted from each receive of it (SQS starts the
/// count again with every receive).
pub const MAX_VISIBILITY: Duration = Duration::from_secs(12 * 3600);
/// The longest a Lambda invocation runs (its largest timeout): a batch the worker holds was
/// received at most this long ago.
pub(crate) const MAX_INVOCATION: Duration = Duration::from_secs(15 * 60);
/// SQS FIFO drops a message whose deduplication id was seen within this window.
pub const DEDUP_WINDOW: Duration = Duration::from_secs(300);
/// Telegram's published limit on a bot's messages overall.
pub(crate) const RATE_PER_SECOND: u32 = 30;
/// Telegram's published limit on a bot's messages to one chat.
pub(crate) const RATE_PER_CHAT_PER_SECOND: u32 = 1;
/// Telegram's published limit on a bot's messages to one group.
pub(crate) const RATE_PER_GROUP_PER_MINUTE: u32 = 20;
/// How long a send may wait inside a run for Telegram's pacing (the limiter, or a short flood wait)
/// before the run gives the update back to the queue instead.
pub const MAX_INLINE_WAIT: Duration = Duration::from_secs(5);
/// [`MAX_INLINE_WAIT`] for an invocation whose batch carries several bots' updates
/// (docs/design/fleet.md §2): a run waiting out one bot's flood wait, or its chats' one
/// message a second, would hold the invocation, and with it one of the mapping's few concurrent
/// invocations, from every other bot. The spacing of a bot's 30 messages a second is still waited
/// for; anything longer gives the update back to the queue for as long.
pub const SHARED_INLINE_WAIT: Duration = Duration::from_millis(250);
/// The commercial AWS regions where Lambda has no Function URLs (the Lambda developer guide,
/// "Creating and managing Lambda function URLs"): `template.yaml`'s FunctionUrlsUnavailable
/// condition takes the HTTP API there, and `tgq deploy` refuses `WebhookEndpoint=FunctionUrl`.
pub const REGIONS_WITHOUT_FUNCTION_URLS: [&str; 11] = [
    "ap-east-2",
    "ap-south-2",
    "ap-southeast-4",
    "ap-southeast-5",
    "ap-southeast-6",
    "ap-southeast-7",
    "ca-west-1",
    "eu-central-2",
    "eu-south-2",
    "il-central-1",
    "me-central-1",
];
/// The Telegram Bot API base URL used when `TELEGRAM_API_URL` is not set.
pub const TELEGRAM_API_URL: &str = "https://api.telegram.org";
/// How often the functions read the bot registry again: a bot added, changed or removed is picked
/// up within this long (docs/design/fleet.md §2).
pub const REGISTRY_REFRESH: Duration = Duration::from_secs(30);
/// A bot id the registry does not know makes the registry read again at once, but never this soon
/// after the last read, and only once between two scheduled reads: a bot just added is served
/// within seconds, and a flood of unknown ids costs at most one read per refresh interval
/// (docs/design/fleet.md §2).
pub const REGISTRY_MISS_REREAD: Duration = Duration::from_secs(2);

/// What a pre-checkout query's handler leaves of Telegram's 10 s for tgq's own refusal to reach
/// Telegram (`TGQ_PRE_CHECKOUT_MARGIN_MS`).
pub const PRE_CHECKOUT_MARGIN: Duration = Duration::from_secs(2);

/// The words of tgq's own refusal of a pre-checkout query its handler did not answer in time
/// (`TGQ_PRE_CHECKOUT_REFUSAL`).
pub const PRE_CHECKOUT_REFUSAL: &str =
    "The payment could not be confirmed in time. Nothing was charged; please try again.";
