//! The `tgq` command as a library, for any bot's handlers: runs a bot locally on an embedded
//! durable store (`tgq local`, in `local/`) and operates it (`tgq status`, `tgq outbox`, `tgq dlq`,
//! `tgq webhook`, `tgq bots`, in `ops/`). [`main`] parses the command line and hands over; the
//! `tgq` binary (`cli/`) calls it with `bot/`'s handlers, and a bot's own binary with its own.

#[macro_use]
mod output;

mod bot_crate;
mod config;
mod fake_telegram;
mod local;
mod logging;
mod new;
mod noop_http;
mod ops;
mod poll;
mod prometheus;
mod views;

use std::process::ExitCode;
use std::sync::OnceLock;

use anyhow::Context as _;
use clap::{CommandFactory, Parser, Subcommand};
use tgq_core::handlers::HandlerRegistry;

pub use bot_crate::run_in_bot_crate;

/// The bot a command runs: its registry of handlers (`tgq_bot::handlers` for the `tgq` binary),
/// asked each time a command needs it.
pub type Handlers = fn() -> HandlerRegistry;

/// The bot this process runs, given to [`main`] before any command starts.
static BOT: OnceLock<Handlers> = OnceLock::new();

/// The handlers of the bot this process runs: `tgq local` serves them, `tgq bots add` checks a
/// handler's name against them, and `tgq webhook set` asks them which updates they take.
pub(crate) fn handlers() -> anyhow::Result<HandlerRegistry> {
    let bot = BOT
        .get()
        .context("no bot was given to tgq_command::main before its command ran")?;
    Ok(bot())
}

/// The refusal of what acts on AWS (`what`: a command, or `--stack`) in a build without the `aws`
/// feature: a bot crate's own build leaves the AWS SDK out, and the installed `tgq` turns the
/// feature on for the commands that need it (docs/ARCHITECTURE.md §5).
#[cfg(not(feature = "aws"))]
pub(crate) fn without_aws(what: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{what} acts on AWS, and this build of the tgq command has none (its `aws` feature, which \
         compiles the AWS SDK, is off): run it with the installed `tgq`, which turns the feature \
         on in a bot crate's folder, or as `cargo run --features aws -- …`; nothing was changed"
    )
}

/// Hosts a Telegram bot so that no update is lost, none is handled twice, and each chat's updates are
/// handled in order.
#[derive(Debug, Parser)]
#[command(name = "tgq", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the whole pipeline in one process: webhook endpoint, worker loops and an embedded store.
    Local(local::LocalArgs),
    /// Poll Telegram (getUpdates) into the AWS pipeline; several may run, one polls at a time.
    Poll(poll::PollArgs),
    /// Show queue depths, oldest message age, dead letters, and locally the outbox and counters;
    /// on AWS (--stack) also the webhook's pending updates and the alarms.
    Status(ops::StatusArgs),
    /// List the Bot API calls the offline outbox accepted (no TELEGRAM_BOT_TOKEN).
    Outbox(ops::OutboxArgs),
    /// Write a consistent copy of the local store to a file, while `tgq local` runs or not.
    Backup(ops::BackupArgs),
    /// Put a backup in place of the local store (refused while `tgq local` runs), keeping the
    /// store it replaces.
    Restore(ops::RestoreArgs),
    /// List, show, replay and purge dead letters, on AWS (--stack) or locally, every replay and
    /// purge audited.
    Dlq {
        #[command(subcommand)]
        command: ops::dlq::DlqCommand,
    },
    /// List and cancel the chats' pending timers and flow timeouts in local mode's store.
    Timers {
        #[command(subcommand)]
        command: ops::timers::TimersCommand,
    },
    /// The payments ledger: each charge the bots were paid in Stars, credited once (local mode's
    /// store, or a stack's table with --stack).
    Payments {
        #[command(subcommand)]
        command: ops::payments::PaymentsCommand,
    },
    /// Send one message to many chats as a durable job: start, status, list, pause, resume,
    /// cancel (local mode's store; `tgq local` sends it).
    Broadcast {
        #[command(subcommand)]
        command: ops::broadcast::BroadcastCommand,
    },
    /// Deploy the bot to AWS in one command: check the tools, keep the token and a webhook secret
    /// in SSM, build and deploy the stack with the SAM CLI, set the webhook, show the status.
    Deploy(ops::deploy::DeployArgs),
    /// Install the tools a deploy runs, when missing, into tgq's cache: the SAM CLI, cargo-lambda
    /// and zig (pinned, from PyPI) and the Rust target of the functions' architecture.
    Setup(ops::setup::SetupArgs),
    /// Take a deployed bot down: delete its webhook, then its stack (the parameters with a flag).
    Destroy(ops::deploy::DestroyArgs),
    /// Add, list and remove the bots one stack (or one `tgq local`) hosts, each on /webhook/ID.
    Bots {
        #[command(subcommand)]
        command: ops::bots::BotsCommand,
    },
    /// Set, show or delete the bot's webhook at Telegram (needs TELEGRAM_BOT_TOKEN).
    Webhook {
        #[command(subcommand)]
        command: ops::webhook::WebhookCommand,
    },
    /// Create a bot crate of your own: NAME/ with the bot, its tests through tgq's kit, and its
    /// own `tgq` command (`cargo run -- local`).
    New(new::NewArgs),
    /// Serve a fake Telegram Bot API: try a bot without Telegram, inject faults, feed getUpdates.
    FakeTelegram(fake_telegram::FakeTelegramArgs),
    /// For tgq-bench: answer every webhook request at once, storing nothing.
    #[command(hide = true)]
    NoopHttp(noop_http::NoopHttpArgs),
}

/// The async runtime's threads for `tgq local`: one per core but the one the store's writer thread
/// keeps busy under load, so the two do not take turns on a core (at least one). `None` leaves
/// tokio's default, or the `TOKIO_WORKER_THREADS` the user set.
///
/// On the 2-core development machine this raised durable ingest at 64 clients by about a sixth
/// (CHANGELOG.md, "Local mode's speed").
fn local_runtime_threads() -> Option<usize> {
    if std::env::var_os("TOKIO_WORKER_THREADS").is_some() {
        return None;
    }
    let cores = std::thread::available_parallelism().ok()?.get();
    Some(cores.saturating_sub(1).max(1))
}

/// Runs the command the process's arguments name, for the bot of `handlers`, and says how it ended.
/// The process's allocator is the caller's to choose (the `tgq` binary uses mimalloc).
pub fn main(handlers: Handlers) -> ExitCode {
    let _ = BOT.set(handlers);
    let cli = Cli::parse();
    // A server logs what it does; a one-shot command (and the demo, whose summary tells the story)
    // only what went wrong.
    let level = match &cli.command {
        Command::Local(args) if !args.is_demo() => "info",
        Command::Poll(_) => "info",
        _ => "warn",
    };
    logging::init(level);
    // tokio panics on 0 worker threads, and on a value it cannot parse.
    if let Some(threads) = std::env::var_os("TOKIO_WORKER_THREADS") {
        let valid = threads
            .to_str()
            .and_then(|text| text.trim().parse::<usize>().ok())
            .is_some_and(|n| n > 0);
        if !valid {
            errln!(
                "error: TOKIO_WORKER_THREADS={} is not a number of threads of at least 1 (unset \
                 it for one per core)",
                threads.to_string_lossy()
            );
            return ExitCode::FAILURE;
        }
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    // The no-op server the bench compares `tgq local` with runs on the same runtime.
    if let Command::Local(_) | Command::NoopHttp(_) = &cli.command {
        if let Some(threads) = local_runtime_threads() {
            builder.worker_threads(threads);
        }
    }
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            errln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    // Which subcommand's usage line a usage error shows.
    let usage_of = match &cli.command {
        Command::Poll(_) => "poll",
        _ => "local",
    };
    let outcome = runtime.block_on(async {
        match cli.command {
            Command::Local(args) => local::run(args).await,
            Command::Poll(args) => poll::run(args).await,
            Command::Status(args) => ops::status(args).await,
            Command::Backup(args) => ops::backup(args).await,
            Command::Restore(args) => ops::restore(args).await,
            Command::Outbox(args) => ops::outbox(args).await,
            Command::Dlq { command } => ops::dlq::run(command).await,
            Command::Timers { command } => ops::timers::run(command).await,
            Command::Payments { command } => ops::payments::run(command).await,
            Command::Broadcast { command } => ops::broadcast::run(command).await,
            Command::Webhook { command } => ops::webhook::run(command).await,
            Command::Bots { command } => ops::bots::run(command).await,
            Command::FakeTelegram(args) => fake_telegram::run(args).await,
            Command::NoopHttp(args) => noop_http::run(args).await,
            Command::Deploy(args) => ops::deploy::deploy(args).await,
            Command::Destroy(args) => ops::deploy::destroy(args).await,
            Command::Setup(args) => ops::setup::setup(args),
            Command::New(args) => new::run(args),
        }
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => match error.downcast::<config::UsageError>() {
            // Usage errors look like clap's own, with the usage line and exit code 2.
            Ok(usage) => {
                let mut command = Cli::command();
                command.build();
                let local = command
                    .find_subcommand_mut(usage_of)
                    .cloned()
                    .unwrap_or(command);
                local
                    .clone()
                    .error(clap::error::ErrorKind::ArgumentConflict, usage.0)
                    .exit()
            }
            Err(error) => {
                errln!("error: {error:#}");
                // `tgq payments reconcile` found differences: a result, told apart from a failure.
                match error.is::<ops::payments::Differences>() {
                    true => ExitCode::from(ops::payments::Differences::EXIT_CODE),
                    false => ExitCode::FAILURE,
                }
            }
        },
    }
}
