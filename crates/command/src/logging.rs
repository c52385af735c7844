//! Logs: tracing to stderr, human-readable by default, JSON lines with `TGQ_LOG_FORMAT=json`.
//! `RUST_LOG` overrides the level. Nothing here ever formats a token, a secret or message text: the
//! use cases log ids, groups and error classes only.

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; `default_level` applies when `RUST_LOG` is unset.
pub fn init(default_level: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        // The HTTP stacks are chatty at info and say nothing a user of tgq needs.
        // aws-config warns for every credential provider it tries and fails; a command that finds
        // no credentials says so in one line of its own (ops::target::sign_in).
        EnvFilter::new(format!(
            "{default_level},hyper=warn,reqwest=warn,h2=warn,aws_config=error,aws_runtime=error"
        ))
    });
    let json =
        std::env::var("TGQ_LOG_FORMAT").is_ok_and(|format| format.eq_ignore_ascii_case("json"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}
