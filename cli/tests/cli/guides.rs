//! The bot guide's block for trying a bot without Telegram (docs/BOT.md, "Running it on your
//! machine") runs as pasted: started in a fresh directory, it brings `tgq local` up, posts an
//! update, prints the bot's reply from the outbox and stops it. Only `cargo run -p tgq-cli --`
//! becomes this build's `tgq`: a test run must not build the CLI a second time.

use std::path::Path;
use std::process::Command;

/// The first `sh` block after `heading` in `markdown`.
fn shell_block_after(markdown: &str, heading: &str) -> Option<String> {
    let section = &markdown[markdown.find(heading)?..];
    let start = section.find("```sh\n")? + "```sh\n".len();
    let end = section[start..].find("```")?;
    Some(section[start..start + end].to_owned())
}

#[test]
fn the_bot_guides_offline_block_runs_as_pasted_and_shows_the_reply() {
    let guide_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/BOT.md");
    let guide = std::fs::read_to_string(&guide_path).unwrap();
    let block = shell_block_after(&guide, "## Running it on your machine")
        .expect("docs/BOT.md has a shell block under \"Running it on your machine\"");
    assert!(
        block.contains("cargo run -p tgq-cli --"),
        "the block runs tgq through cargo: {block}"
    );
    // The block is written for `tgq local`'s default address.
    assert!(
        std::net::TcpListener::bind("127.0.0.1:8080").is_ok(),
        "127.0.0.1:8080 is taken by another program: docs/BOT.md's block runs tgq local there"
    );
    let tgq = env!("CARGO_BIN_EXE_tgq");
    let script = block.replace("cargo run -p tgq-cli --", &format!("'{tgq}'"));

    let dir = tempfile::tempdir().unwrap();
    // Bounded: a port 8080 held by something else would keep the block waiting for /healthz.
    let mut bash = Command::new("timeout");
    for name in tgq_core::config::SETTINGS.iter().chain(&["NO_COLOR"]) {
        bash.env_remove(name);
    }
    // The suite asserts the built-in echo bot's replies, whatever bot/ holds.
    let output = bash
        .args(["120", "bash", "-c", &script])
        .env("TGQ_HANDLER", "echo")
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the block failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains(r#"{"ok":true"#),
        "the update was taken: {stdout}"
    );
    let reply = tgq_core::echo::reply_text(1, "/help");
    assert!(
        stdout
            .lines()
            .any(|line| line.contains("sendMessage") && line.contains(&reply)),
        "the outbox shows the reply {reply:?}:\n{stdout}\n{stderr}"
    );
}
