//! The scenarios: what each breaks, on which target it applies, and what it requires.

use serde::Serialize;

/// Where a scenario runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// The real `tgq local` process.
    Local,
    /// The real function binaries under `cargo lambda watch`, moto, the event source emulation.
    Emulator,
}

impl Target {
    /// Its name in the table.
    pub fn as_str(self) -> &'static str {
        match self {
            Target::Local => "local",
            Target::Emulator => "emulator",
        }
    }
}

/// One scenario of the drill.
#[derive(Clone, Copy, Debug)]
pub struct Scenario {
    /// Its number in the drill's table (docs/RELIABILITY.md).
    pub number: u8,
    /// A short name, also accepted on the command line.
    pub name: &'static str,
    /// What it does, in one line.
    pub what: &'static str,
    /// Whether it applies to local mode.
    pub local: bool,
    /// Whether it applies to the emulator.
    pub emulator: bool,
    /// What it waits for while it fails on the current code (an open issue), if anything.
    pub waits_for: Option<&'static str>,
}

impl Scenario {
    /// Whether it applies to `target`.
    pub fn applies_to(&self, target: Target) -> bool {
        match target {
            Target::Local => self.local,
            Target::Emulator => self.emulator,
        }
    }
}

/// Every scenario, in the table's order.
pub const SCENARIOS: [Scenario; 21] = [
    Scenario {
        number: 1,
        name: "triple-delivery",
        what: "every update delivered three times, concurrently",
        local: true,
        emulator: true,
        waits_for: None,
    },
    Scenario {
        number: 2,
        name: "worker-killed",
        what: "the worker killed mid-batch (SIGKILL of tgq local; the worker process killed as Lambda does past its timeout)",
        local: true,
        emulator: true,
        waits_for: None,
    },
    Scenario {
        number: 3,
        name: "store-unreachable",
        what: "the store or the queue unreachable at the webhook for 10 s (local: its filesystem full), Telegram-style retries",
        local: true,
        emulator: true,
        waits_for: None,
    },
    Scenario {
        number: 4,
        name: "misconfigured",
        what: "the stack misconfigured for 60 s (table missing / access denied): every answer 503, nothing dead-lettered",
        local: false,
        emulator: true,
        waits_for: None,
    },
    Scenario {
        number: 5,
        name: "throttled",
        what: "DynamoDB throttling at the worker for 2 minutes: nothing moved to the DLQ by SQS untried",
        local: false,
        emulator: true,
        waits_for: None,
    },
    Scenario {
        number: 6,
        name: "failing-head",
        what: "a chat whose first 5 updates each fail until their budget is spent, then 5 good ones",
        local: true,
        emulator: true,
        waits_for: None,
    },
    Scenario {
        number: 7,
        name: "flood-wait",
        what: "a Telegram 429 storm with retry_after: no send earlier than allowed, nothing dead-lettered",
        local: true,
        emulator: true,
        waits_for: None,
    },
    Scenario {
        number: 8,
        name: "telegram-5xx",
        what: "Telegram 5xx and timeouts for 30 s",
        local: true,
        emulator: true,
        waits_for: None,
    },
    Scenario {
        number: 9,
        name: "permanent-errors",
        what: "400s and handler permanent errors dead-lettered at once; 403 blocked / deactivated settle as recipient_gone",
        local: true,
        emulator: true,
        waits_for: None,
    },
    Scenario {
        number: 10,
        name: "poison",
        what: "poison bodies mixed into normal traffic: answered 200, dead-lettered, nothing else disturbed",
        local: true,
        emulator: true,
        waits_for: None,
    },
    Scenario {
        number: 11,
        name: "crash-after-send",
        what: "a crash after an at-most-once send and before its result is recorded: counted uncertain, never sent twice",
        local: true,
        emulator: true,
        waits_for: None,
    },
    Scenario {
        number: 12,
        name: "stale-worker",
        what: "one run frozen past its lease (SIGSTOP/SIGCONT) while another takes over: late writes refused and counted",
        local: true,
        emulator: true,
        waits_for: None,
    },
    Scenario {
        number: 13,
        name: "kill-loop",
        what: "tgq local killed with SIGKILL every few seconds under load, and restarted",
        local: true,
        emulator: false,
        waits_for: None,
    },
    Scenario {
        number: 14,
        name: "recovery-drain",
        what: "after a 60 s Telegram outage the backlog drains without breaking Telegram's limits",
        local: true,
        emulator: true,
        waits_for: None,
    },
    Scenario {
        number: 15,
        name: "disk-full",
        what: "tgq local's disk fills up: 5xx so Telegram retries, /readyz says why, recovers by itself",
        local: true,
        emulator: false,
        waits_for: None,
    },
    Scenario {
        number: 16,
        name: "damaged-store",
        what: "tgq local's store file is damaged: it refuses to start, naming the file and the way back (a backup)",
        local: true,
        emulator: false,
        waits_for: None,
    },
    Scenario {
        number: 17,
        name: "two-bots",
        what: "two bots of one registry: one in a 429 storm with chats failing for good, the other's latency within 10 % of beside it healthy (and, locally, of alone) and nothing crossing",
        local: true,
        emulator: true,
        waits_for: None,
    },
    Scenario {
        number: 18,
        name: "one-budget",
        what: "four workers at once sending for one bot at Telegram's limits through a 429 storm: 0 sends over the limits or inside a wait, throughput near the bot-wide rate",
        local: false,
        emulator: true,
        waits_for: None,
    },
    Scenario {
        number: 19,
        name: "broadcast",
        what: "a broadcast to --recipients chats run by the worker from the broadcasts queue while users write to the bot, Telegram's limits on: each recipient once, 0 over the limits, at least 95 % of the lane's rate, the replies' latency",
        local: false,
        emulator: true,
        waits_for: None,
    },
    Scenario {
        number: 20,
        name: "broadcast-faults",
        what: "a broadcast to 3,000 chats (blocked users, deleted accounts, migrated groups among them) through three SIGKILLs (of `tgq local`, or of every worker container mid-step), Telegram away for 30 s then 502 for 30 s, and a revoked token, while users write to the bot: each reachable recipient once, uncertain only for calls seen in flight, 0 over the limits",
        local: true,
        emulator: true,
        waits_for: None,
    },
    Scenario {
        number: 21,
        name: "payments",
        what: "40 users pay the echo bot in Stars at the fake's payments, each payment posted twice, through three bot-wide 429s, chats holding a failing message and three kills of the worker (SIGKILL of `tgq local`, or of every worker container) while a credit's reply is on the wire, then every payment replayed once its record expired: each pre-checkout answered inside 10 s, each charge credited once, the ledger agreeing with Telegram",
        local: true,
        emulator: true,
        waits_for: None,
    },
];

/// The scenario named by a number or a name.
pub fn find(name: &str) -> Option<Scenario> {
    SCENARIOS
        .iter()
        .find(|s| s.name == name || s.number.to_string() == name)
        .copied()
}
