//! Dollars per million updates for each implementation: Lambda on arm64 and x86_64, DynamoDB on
//! demand and SQS FIFO. The inputs are the AWS requests one update costs (counted on the emulator
//! and asserted by `testing/e2e/tests/e2e/requests.rs`), each implementation's memory size (from its peak
//! RSS measured in this run), and its warm duration: its own time on a real update (measured in
//! this run, against fakes that answer at once) plus the waits on AWS and Telegram, which are the
//! same for every implementation and assumed below.
//! `docs/PERFORMANCE.md` ("What an update costs") explains the model and its limits.

use std::fmt::Write as _;

use crate::report::{Figures, Results};
use crate::subjects::{Function, Implementation};

/// us-east-1 list prices, as read on 2026-12-01 from the AWS pricing pages of each service.
pub mod price {
    /// Lambda, per request.
    pub const LAMBDA_REQUEST: f64 = 0.20 / 1e6;
    /// Lambda duration on arm64 (Graviton), per GB-second (first pricing tier).
    pub const LAMBDA_GB_SECOND_ARM64: f64 = 0.000_013_333_4;
    /// Lambda duration on x86_64, per GB-second (first pricing tier).
    pub const LAMBDA_GB_SECOND_X86_64: f64 = 0.000_016_666_7;
    /// DynamoDB on demand, per write request unit (a write of up to 1 KB).
    pub const DYNAMODB_WRITE_UNIT: f64 = 0.625 / 1e6;
    /// DynamoDB on demand, per read request unit (a strongly consistent read of up to 4 KB).
    pub const DYNAMODB_READ_UNIT: f64 = 0.125 / 1e6;
    /// SQS FIFO, per request (each 64 KB of payload).
    pub const SQS_FIFO_REQUEST: f64 = 0.50 / 1e6;
}

/// What one update asks of AWS (an update whose handler sends one reply, items under 1 KB), as
/// `testing/e2e/tests/e2e/requests.rs` counts and asserts it.
pub mod requests {
    /// The webhook: the conditional put.
    pub const WEBHOOK_DYNAMODB_WRITES: f64 = 1.0;
    /// The webhook: the send to the updates queue.
    pub const WEBHOOK_SQS: f64 = 1.0;
    /// The worker: claim, the reply's intent, the settle (the reply's result goes with it), and
    /// the reply's booking in the bot's send budget (the bot's item and the chat's).
    pub const WORKER_DYNAMODB_WRITES: f64 = 5.0;
    /// The worker: the chat's state, read with the claim. The bot's budget item is not read
    /// again before the reply goes: its booking's write returned it a moment before.
    pub const WORKER_DYNAMODB_READS: f64 = 1.0;
    /// The event source mapping, per batch: one receive that returned it, one batch delete.
    pub const MAPPING_SQS_PER_BATCH: f64 = 2.0;
}

/// Waits every implementation has, per update, in milliseconds: assumed in-region latencies, not
/// measured (the emulator answers on loopback).
pub mod wait {
    /// One DynamoDB request.
    pub const DYNAMODB_MS: f64 = 5.0;
    /// One SQS request.
    pub const SQS_MS: f64 = 8.0;
    /// One Bot API call, from a US region to Telegram's servers.
    pub const TELEGRAM_MS: f64 = 60.0;
}

/// Updates per worker invocation the table assumes: a quiet bot, each update its own batch (the
/// worst case for requests; a busy bot's batches of up to 10 spread the per-batch costs).
pub const UPDATES_PER_BATCH: f64 = 1.0;

/// The smallest Lambda memory size this model gives a function: 1.5 × its peak RSS, rounded up to
/// 64 MB, at least Lambda's minimum of 128 MB.
pub fn memory_mb(peak_rss_mib: f64) -> f64 {
    let wanted = (peak_rss_mib * 1.5 / 64.0).ceil() * 64.0;
    wanted.max(128.0)
}

/// The milliseconds a warm invocation spends waiting on AWS and Telegram, per update.
fn waits_ms(function: Function) -> f64 {
    match function {
        Function::Webhook => {
            requests::WEBHOOK_DYNAMODB_WRITES * wait::DYNAMODB_MS
                + requests::WEBHOOK_SQS * wait::SQS_MS
        }
        Function::Worker => {
            (requests::WORKER_DYNAMODB_WRITES + requests::WORKER_DYNAMODB_READS) * wait::DYNAMODB_MS
                + wait::TELEGRAM_MS
        }
    }
}

/// A function's own time for an update, in milliseconds: the median warm invocation of this run,
/// on a real update against a fake AWS endpoint and a fake Bot API that answer at once.
fn own_ms(figures: &Figures) -> f64 {
    figures.warm_ms.median
}

/// Lambda dollars per update for one function on one architecture.
fn lambda_per_update(function: Function, figures: &Figures, gb_second: f64) -> f64 {
    let invocations = match function {
        Function::Webhook => 1.0,
        Function::Worker => 1.0 / UPDATES_PER_BATCH,
    };
    // Billed by the millisecond, rounded up, per invocation.
    let per_invocation_ms =
        ((waits_ms(function) + own_ms(figures)) * per_invocation_updates(function)).ceil();
    let gb = memory_mb(figures.peak_rss_mib.median) / 1024.0;
    invocations * (price::LAMBDA_REQUEST + per_invocation_ms / 1000.0 * gb * gb_second)
}

fn per_invocation_updates(function: Function) -> f64 {
    match function {
        Function::Webhook => 1.0,
        Function::Worker => UPDATES_PER_BATCH,
    }
}

/// DynamoDB dollars per update, the same for every implementation of this design.
pub fn dynamodb_per_update() -> f64 {
    (requests::WEBHOOK_DYNAMODB_WRITES + requests::WORKER_DYNAMODB_WRITES)
        * price::DYNAMODB_WRITE_UNIT
        + requests::WORKER_DYNAMODB_READS * price::DYNAMODB_READ_UNIT
}

/// SQS dollars per update, the same for every implementation of this design.
pub fn sqs_per_update() -> f64 {
    (requests::WEBHOOK_SQS + requests::MAPPING_SQS_PER_BATCH / UPDATES_PER_BATCH)
        * price::SQS_FIFO_REQUEST
}

/// Lambda dollars per million updates for one function on arm64: the chart's cost panel.
pub fn lambda_arm64_per_million(function: Function, figures: &Figures) -> f64 {
    lambda_per_update(function, figures, price::LAMBDA_GB_SECOND_ARM64) * 1e6
}

/// One implementation's costs per million updates.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cost {
    pub webhook_mb: f64,
    pub worker_mb: f64,
    pub lambda_arm64: f64,
    pub lambda_x86_64: f64,
    pub dynamodb: f64,
    pub sqs: f64,
    /// Both functions' cold start (its init, billed), per million cold starts, arm64.
    pub cold_starts_arm64: f64,
}

impl Cost {
    /// The costs of `implementation` from this run's figures, when both its functions were measured.
    pub fn of(results: &Results, implementation: Implementation) -> Option<Cost> {
        let webhook = results.get(&(Function::Webhook, implementation))?;
        let worker = results.get(&(Function::Worker, implementation))?;
        let lambda = |gb_second: f64| {
            (lambda_per_update(Function::Webhook, webhook, gb_second)
                + lambda_per_update(Function::Worker, worker, gb_second))
                * 1e6
        };
        let init = |figures: &Figures| {
            figures.to_next_ms.median / 1000.0 * memory_mb(figures.peak_rss_mib.median) / 1024.0
                * price::LAMBDA_GB_SECOND_ARM64
        };
        Some(Cost {
            webhook_mb: memory_mb(webhook.peak_rss_mib.median),
            worker_mb: memory_mb(worker.peak_rss_mib.median),
            lambda_arm64: lambda(price::LAMBDA_GB_SECOND_ARM64),
            lambda_x86_64: lambda(price::LAMBDA_GB_SECOND_X86_64),
            dynamodb: dynamodb_per_update() * 1e6,
            sqs: sqs_per_update() * 1e6,
            cold_starts_arm64: (init(webhook) + init(worker)) * 1e6,
        })
    }

    pub fn total_arm64(&self) -> f64 {
        self.lambda_arm64 + self.dynamodb + self.sqs
    }

    pub fn total_x86_64(&self) -> f64 {
        self.lambda_x86_64 + self.dynamodb + self.sqs
    }
}

/// The cost table, as Markdown.
pub fn render(results: &Results) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Dollars per million updates (us-east-1 prices read 2026-12-01; {} update(s) per worker \
         batch; own time measured (warm invocations); waits assumed: DynamoDB {} ms, SQS {} ms, \
         Telegram {} ms)\n",
        UPDATES_PER_BATCH,
        wait::DYNAMODB_MS,
        wait::SQS_MS,
        wait::TELEGRAM_MS
    );
    let _ = writeln!(
        out,
        "| implementation | memory MB, webhook / worker | Lambda arm64 | Lambda x86_64 | DynamoDB | SQS FIFO | total arm64 | total x86_64 | per million cold starts, arm64 |"
    );
    let _ = writeln!(out, "|{}", "---|".repeat(9));
    for implementation in Implementation::ALL {
        let Some(cost) = Cost::of(results, implementation) else {
            continue;
        };
        let _ = writeln!(
            out,
            "| {implementation} | {:.0} / {:.0} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
            cost.webhook_mb,
            cost.worker_mb,
            cost.lambda_arm64,
            cost.lambda_x86_64,
            cost.dynamodb,
            cost.sqs,
            cost.total_arm64(),
            cost.total_x86_64(),
            cost.cold_starts_arm64,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Spread;

    fn figures(to_next: f64, warm: f64, rss: f64) -> Figures {
        Figures {
            to_next_ms: Spread::of([to_next]),
            to_answer_ms: Spread::of([to_next + 0.2]),
            peak_rss_mib: Spread::of([rss]),
            warm_ms: Spread::of([warm]),
        }
    }

    #[test]
    fn memory_is_one_and_a_half_times_the_peak_rounded_up_to_64_mb_and_at_least_128() {
        assert_eq!(memory_mb(9.0), 128.0);
        assert_eq!(memory_mb(76.0), 128.0);
        assert_eq!(memory_mb(192.0), 320.0);
    }

    #[test]
    fn six_writes_one_read_and_three_fifo_requests_price_an_update_s_storage_and_queue() {
        // 6 × $0.625 + 1 × $0.125 per million; (1 send + receive and delete of its batch) × $0.50.
        assert!((dynamodb_per_update() * 1e6 - 3.875).abs() < 1e-9);
        assert!((sqs_per_update() * 1e6 - 1.5).abs() < 1e-9);
    }

    #[test]
    fn the_webhook_at_128_mb_costs_its_request_and_its_billed_milliseconds() {
        // 13 ms of waits + 0.2 ms own → 14 ms billed at 0.125 GB.
        let webhook = figures(6.0, 0.2, 9.0);
        let expected = 0.20 + 0.014 * 0.125 * 0.000_013_333_4 * 1e6;
        let got = lambda_arm64_per_million(Function::Webhook, &webhook);
        assert!((got - expected).abs() < 1e-9, "{got} vs {expected}");
    }

    #[test]
    fn the_measured_warm_time_is_what_is_billed_beyond_the_waits() {
        // 90 ms of waits + 3.4 ms own → 94 ms billed; the cold start's figures play no part.
        let worker = figures(160.0, 3.4, 76.0);
        let expected = 0.20 + 0.094 * 0.125 * 0.000_013_333_4 * 1e6;
        let got = lambda_arm64_per_million(Function::Worker, &worker);
        assert!((got - expected).abs() < 1e-9, "{got} vs {expected}");
    }
}
