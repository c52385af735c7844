//! What the two use cases count (docs/design/operate.md), through the `metrics` facade: the
//! Lambdas install a recorder that prints CloudWatch embedded-metric-format lines (namespace
//! [`NAMESPACE`]), `tgq local` one that serves the Prometheus text format at `/metrics`. Every
//! metric carries the label [`BOT_ID`] of the bot it counts (an EMF dimension on Lambda), so that
//! the bots of one stack are counted apart (docs/design/fleet.md §2). The names and their help
//! are here; each use case counts its result once with them, next to the result's type
//! (`ingest::Webhook::receive`, `worker::Worker::process_batch`), and without a recorder nothing is
//! counted.

use metrics::{counter, describe_counter, describe_histogram, Unit};

use crate::ids::BotId;

/// The CloudWatch namespace of every metric.
pub const NAMESPACE: &str = "tgq";
/// The label (EMF dimension) every metric carries: the id of the bot it counts.
pub const BOT_ID: &str = "BotId";
/// The label of [`INGEST_UNAVAILABLE`]: [`crate::PortError::cause`].
pub const CAUSE: &str = "Cause";
/// The label of [`RETRIED`]: [`crate::ErrorClass::as_str`].
pub(crate) const ERROR_CLASS: &str = "ErrorClass";
/// The label of [`DEAD_LETTERED`]: [`crate::dead::DeadReason::as_str`].
pub(crate) const REASON: &str = "Reason";

/// A new update stored by the webhook.
pub(crate) const RECEIVED: &str = "Received";
/// An update the webhook had already stored and enqueued.
pub(crate) const DUPLICATE: &str = "Duplicate";
/// An update stored earlier whose enqueue was never confirmed, sent again.
pub(crate) const REQUEUED: &str = "Requeued";
/// A body that is not an update, dead-lettered by the webhook.
pub(crate) const POISON: &str = "Poison";
/// A webhook request answered 503 because the update could not be made durable; by [`CAUSE`].
pub const INGEST_UNAVAILABLE: &str = "IngestUnavailable";
/// An update sent to the updates queue by the webhook (new or requeued).
pub(crate) const ENQUEUED: &str = "Enqueued";
/// A handler run that finished its update.
pub(crate) const PROCESSED: &str = "Processed";
/// A handler run that failed and will be retried; by [`ERROR_CLASS`].
pub(crate) const RETRIED: &str = "Retried";
/// An update given up on and sent to the dead-letter queue; by [`REASON`].
pub(crate) const DEAD_LETTERED: &str = "DeadLettered";
/// A run that ended because its recipient is gone (blocked the bot, deleted their account): `DONE`,
/// not a dead letter.
pub(crate) const RECIPIENT_GONE: &str = "RecipientGone";
/// A run that lost its lease to another run and stopped.
pub(crate) const FENCED: &str = "Fenced";
/// An at-most-once send whose earlier outcome was unknown, not sent again: to reconcile.
pub const UNCERTAIN_SEND: &str = "UncertainSend";
/// A read of the bot registry (SSM Parameter Store on AWS) that failed; by [`CAUSE`] alone, as the
/// registry belongs to no one bot. The function went on with the bots it had read before, if any.
pub const REGISTRY_UNAVAILABLE: &str = "RegistryUnavailable";
/// A broadcast step that could not run again on its tenth receive or later (its job makes no
/// progress: the table unreachable, the registry unreadable); by [`CAUSE`] alone, as its job's bot
/// is unknown when the job cannot be read.
pub const BROADCAST_STUCK: &str = "BroadcastStuck";
/// How long a run's sends waited for Telegram's pacing, in milliseconds.
pub(crate) const THROTTLED_WAIT_MS: &str = "ThrottledWaitMs";
/// From an update's arrival at the webhook to its `DONE`, in milliseconds.
pub(crate) const END_TO_END_LATENCY_MS: &str = "EndToEndLatencyMs";
/// How long a handler run took, in milliseconds.
pub(crate) const HANDLER_DURATION_MS: &str = "HandlerDurationMs";

/// A poller took over a lease whose holder had not released it (docs/design/fleet.md §1).
pub(crate) const POLLER_TAKEOVERS: &str = "PollerTakeovers";
/// A takeover less than a minute after the previous one: leadership is flapping (also logged as an
/// alert).
pub(crate) const POLLER_FLAPPING: &str = "PollerFlapping";
/// An offset checkpoint the lease refused because a newer leader held it.
pub(crate) const POLLER_CHECKPOINTS_REFUSED: &str = "PollerCheckpointsRefused";
/// A lease renewal that failed or did not answer before the lease's end.
pub(crate) const POLLER_RENEWALS_FAILED: &str = "PollerRenewalsFailed";

/// The pollers' counters: counted by `tgq poll` and `tgq local --poll`, not by the Lambdas, so not on
/// the stack's dashboard.
pub const POLLER_COUNTERS: [&str; 4] = [
    POLLER_TAKEOVERS,
    POLLER_FLAPPING,
    POLLER_CHECKPOINTS_REFUSED,
    POLLER_RENEWALS_FAILED,
];

/// Every counter, for recorders and dashboards that list them.
pub const COUNTERS: [&str; 14] = [
    RECEIVED,
    DUPLICATE,
    REQUEUED,
    POISON,
    INGEST_UNAVAILABLE,
    ENQUEUED,
    PROCESSED,
    RETRIED,
    DEAD_LETTERED,
    RECIPIENT_GONE,
    FENCED,
    UNCERTAIN_SEND,
    REGISTRY_UNAVAILABLE,
    BROADCAST_STUCK,
];

/// Every histogram, in milliseconds.
pub const HISTOGRAMS: [&str; 3] = [
    THROTTLED_WAIT_MS,
    END_TO_END_LATENCY_MS,
    HANDLER_DURATION_MS,
];

/// Tells the installed recorder each metric's unit and meaning; call once after installing it.
pub fn describe() {
    for name in COUNTERS.into_iter().chain(POLLER_COUNTERS) {
        describe_counter!(name, Unit::Count, help(name));
    }
    for name in HISTOGRAMS {
        describe_histogram!(name, Unit::Milliseconds, help(name));
    }
}

/// One line on what a metric counts, for recorders that print help text (Prometheus' `# HELP`).
pub fn help(name: &str) -> &'static str {
    match name {
        RECEIVED => "New updates stored by the webhook.",
        DUPLICATE => "Updates the webhook had already stored and enqueued.",
        REQUEUED => "Updates stored earlier whose enqueue was never confirmed, sent again.",
        POISON => "Bodies that are not updates, dead-lettered by the webhook.",
        INGEST_UNAVAILABLE => {
            "Webhook requests answered 503: the update could not be made durable."
        }
        ENQUEUED => "Updates sent to the updates queue.",
        PROCESSED => "Handler runs that finished their update.",
        RETRIED => "Handler runs that failed and will be retried.",
        DEAD_LETTERED => "Updates given up on and dead-lettered.",
        RECIPIENT_GONE => "Runs ended because the recipient blocked the bot or is gone.",
        FENCED => "Runs that lost their lease to another run and stopped.",
        UNCERTAIN_SEND => "At-most-once sends with an unknown earlier outcome, not sent again.",
        REGISTRY_UNAVAILABLE => "Failed reads of the bot registry.",
        BROADCAST_STUCK => {
            "Broadcast steps that could not run again on their tenth receive or later."
        }
        THROTTLED_WAIT_MS => "How long a run's sends waited for Telegram's pacing.",
        END_TO_END_LATENCY_MS => "From an update's arrival at the webhook to its end.",
        HANDLER_DURATION_MS => "How long a handler run took.",
        POLLER_TAKEOVERS => "Poller leases taken over from a holder that had not released them.",
        POLLER_FLAPPING => "Poller takeovers less than a minute after the previous one.",
        POLLER_CHECKPOINTS_REFUSED => {
            "Offset checkpoints refused because a newer leader held the lease."
        }
        POLLER_RENEWALS_FAILED => "Poller lease renewals that failed or came too late.",
        _ => "",
    }
}

/// Counts a failed read of the bot registry.
pub(crate) fn registry_unavailable(error: &crate::PortError) {
    counter!(REGISTRY_UNAVAILABLE, CAUSE => error.cause()).increment(1);
}

/// Counts a broadcast step that failed again on its tenth receive or later.
pub(crate) fn broadcast_stuck(error: &crate::PortError) {
    counter!(BROADCAST_STUCK, CAUSE => error.cause()).increment(1);
}

/// Counts one event of `bot`'s poller: one of [`POLLER_COUNTERS`].
pub(crate) fn poller(bot: &BotId, name: &'static str) {
    counter!(name, BOT_ID => bot.to_string()).increment(1);
}

/// A duration as the histograms record it.
pub(crate) fn millis(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
