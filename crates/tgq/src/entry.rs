//! The one entry point of a bot's own binary, for every role it plays (docs/design/local.md,
//! "Which bot a command runs"): on a developer's machine the `tgq` command with the bot's
//! handlers, and on a stack its webhook or its worker function, as the function's environment
//! says. One binary keeps the bot author's crate to one `main.rs` and one build, and the
//! template `tgq deploy` renders builds both functions from it.

use std::process::ExitCode;

use tgq_core::handlers::HandlerRegistry;

/// The environment variable that makes the binary a Lambda function: `webhook` or `worker`. The
/// template `tgq deploy` renders for a bot crate sets it on each function; unset, the binary is
/// the `tgq` command.
pub use tgq_core::config::FUNCTION;

/// The bot's binary: with [`FUNCTION`] set, the stack's function it names, run until Lambda ends
/// it (the `lambda` feature); without it, the `tgq` command with the bot of `handlers`, every
/// subcommand (`local`, `status`, `bots`, `webhook`, …) run with these handlers (the `command`
/// feature). Returns the exit code.
pub fn main(handlers: fn() -> HandlerRegistry) -> ExitCode {
    match std::env::var_os(FUNCTION) {
        Some(function) => function::run(&function.to_string_lossy(), handlers),
        None => command(handlers),
    }
}

#[cfg(feature = "command")]
fn command(handlers: fn() -> HandlerRegistry) -> ExitCode {
    tgq_command::main(handlers)
}

#[cfg(not(feature = "command"))]
fn command(_: fn() -> HandlerRegistry) -> ExitCode {
    eprintln!(
        "error: this binary was built as the bot's Lambda functions only (tgq's `lambda` feature, \
         without `command`): it runs with {FUNCTION}=webhook or worker; `cargo run -- local` \
         builds the command"
    );
    ExitCode::FAILURE
}

#[cfg(feature = "lambda")]
mod function {
    use std::process::ExitCode;

    use tgq_core::handlers::HandlerRegistry;

    use super::FUNCTION;

    /// Runs the function `name` on a runtime of one thread, as the reference functions do: a
    /// Lambda container serves one event at a time.
    pub(super) fn run(name: &str, handlers: fn() -> HandlerRegistry) -> ExitCode {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(error) => {
                eprintln!("error: cannot start the async runtime: {error}");
                return ExitCode::FAILURE;
            }
        };
        let ended = match name {
            "webhook" => runtime.block_on(tgq_aws::webhook::run()),
            "worker" => runtime.block_on(tgq_aws::worker::run(handlers())),
            other => {
                eprintln!("error: {FUNCTION}={other:?} names no function: it is webhook or worker");
                return ExitCode::FAILURE;
            }
        };
        match ended {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("error: the {name} function stopped: {error}");
                ExitCode::FAILURE
            }
        }
    }
}

#[cfg(not(feature = "lambda"))]
mod function {
    use std::process::ExitCode;

    use tgq_core::handlers::HandlerRegistry;

    use super::FUNCTION;

    /// Refuses: the functions are in the `lambda` feature, which this build left off.
    pub(super) fn run(name: &str, _: fn() -> HandlerRegistry) -> ExitCode {
        eprintln!(
            "error: {FUNCTION}={name:?} asks for a Lambda function, but this binary was built \
             without tgq's `lambda` feature: build it as `tgq deploy` does (cargo lambda build \
             reads the features in Cargo.toml's [package.metadata.lambda.build])"
        );
        ExitCode::FAILURE
    }
}
