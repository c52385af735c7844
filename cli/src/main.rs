//! `tgq`: the command (`tgq_command`), with the example bot of `bot/` as the bot it runs; in a bot
//! crate's folder, that crate's own binary runs the command instead, with the crate's bot.

use std::process::ExitCode;

/// mimalloc rather than the system allocator: buffers allocated on the runtime's threads are freed
/// on the store's writer thread and back, which glibc's per-thread arenas handle poorly; durable
/// ingest at 64 clients was about an eighth faster with it (CHANGELOG.md, "Local mode's speed").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    if let Some(code) = tgq_command::run_in_bot_crate() {
        return code;
    }
    tgq_command::main(tgq_bot::handlers)
}
