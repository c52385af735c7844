//! The README's bot is a whole bot, and editing `bot/src/lib.rs` in any way that compiles keeps the
//! suite building: a copy of the workspace with the README's bot in `bot/src/lib.rs` (its first Rust
//! block: another type name, other words, none of the example bot's items) and the README's test of
//! it in `bot/tests/bot.rs` (its block with a `#[tokio::test]`), as the README says to put them,
//! passes `cargo check --workspace --all-targets` — every binary, library, test and benchmark, so
//! nothing outside `bot/` names the example bot — and the README's test passes.
//!
//! The copy lives in `<target>/bot-swap/` and is built with this target directory, so the
//! dependencies are not compiled again (only tgq's own crates, at their new path); files are
//! rewritten only when they changed, so a second run builds only what changed since.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use tgq_e2e::cargo;

/// Top-level entries of the workspace that are not sources: build output, tools, local data.
const NOT_COPIED: [&str; 4] = ["target", ".git", ".venv", ".tgq"];

/// The README's Rust blocks, in order.
fn readme_rust_blocks(readme: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in readme.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```rust") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), line) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

#[test]
fn the_readmes_bot_and_its_test_build_in_bot_and_the_test_passes() {
    let root = cargo::workspace_root().canonicalize().unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let blocks = readme_rust_blocks(&readme);
    let bot = blocks
        .iter()
        .find(|b| b.contains("pub fn handlers()"))
        .expect("the README has a bot: a Rust block with `pub fn handlers()`");
    let test = blocks
        .iter()
        .find(|b| b.contains("#[tokio::test]"))
        .expect("the README has a test of its bot: a Rust block with `#[tokio::test]`");
    let target = cargo::target_dir().unwrap();
    let copy = target.join("bot-swap");
    let swaps = [
        Swap {
            path: copy.join("bot/src/lib.rs"),
            bytes: bot.as_bytes(),
        },
        Swap {
            path: copy.join("bot/tests/bot.rs"),
            bytes: test.as_bytes(),
        },
    ];
    sync_sources(&root, &copy, &swaps).unwrap();
    assert_ne!(
        std::fs::read(root.join("bot/src/lib.rs")).unwrap(),
        bot.as_bytes(),
        "the copy must hold another bot than the workspace"
    );

    let started = Instant::now();
    let check = [
        "check",
        "--workspace",
        "--all-targets",
        "--locked",
        "--offline",
    ];
    let test_readme = [
        "test",
        "-p",
        "tgq-bot",
        "--test",
        "bot",
        "--locked",
        "--offline",
    ];
    for args in [&check[..], &test_readme[..]] {
        let output = cargo::command(&copy)
            .args(args)
            .env("CARGO_TARGET_DIR", &target)
            // Incremental caches for a copy nobody edits would only take disk.
            .env("CARGO_INCREMENTAL", "0")
            .output()
            .expect("cargo runs");
        assert!(
            output.status.success(),
            "cargo {} with the README's bot in bot/src/lib.rs failed:\n{}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    eprintln!(
        "the workspace checked and the README's test run with the README's bot: {:.1?}",
        started.elapsed()
    );
}

#[test]
fn the_readme_blocks_are_found_as_written() {
    let readme = "text\n```rust\nfn a() {}\n```\n```sh\nls\n```\n```rust\nfn b() {}\n```\n";
    assert_eq!(readme_rust_blocks(readme), ["fn a() {}\n", "fn b() {}\n"]);
}

/// One file of the copy whose content is not the workspace's.
struct Swap<'a> {
    path: PathBuf,
    bytes: &'a [u8],
}

/// Makes `to` a copy of the workspace sources in `from`, with `swaps` in place: writes files that
/// differ, removes files that are gone, and leaves the rest (and their times) alone.
fn sync_sources(from: &Path, to: &Path, swaps: &[Swap]) -> std::io::Result<()> {
    let mut copied = BTreeSet::new();
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        if NOT_COPIED.iter().any(|skipped| name == *skipped) {
            continue;
        }
        copy_tree(&entry.path(), &to.join(&name), swaps, &mut copied)?;
    }
    for swap in swaps {
        if !copied.contains(&swap.path) {
            write_if_changed(&swap.path, swap.bytes)?;
            copied.insert(swap.path.clone());
        }
    }
    remove_others(to, &copied)
}

fn copy_tree(
    from: &Path,
    to: &Path,
    swaps: &[Swap],
    copied: &mut BTreeSet<PathBuf>,
) -> std::io::Result<()> {
    if from.is_dir() {
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            if entry.file_name() == "target" {
                continue;
            }
            copy_tree(&entry.path(), &to.join(entry.file_name()), swaps, copied)?;
        }
        return Ok(());
    }
    match swaps.iter().find(|swap| swap.path == to) {
        Some(swap) => write_if_changed(to, swap.bytes)?,
        None => write_if_changed(to, &std::fs::read(from)?)?,
    }
    copied.insert(to.to_owned());
    Ok(())
}

fn write_if_changed(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, bytes)
}

/// Removes every file under `dir` that is not in `keep` (a source deleted since the last run would
/// otherwise still be compiled, as a test or a module).
fn remove_others(dir: &Path, keep: &BTreeSet<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            remove_others(&path, keep)?;
        } else if !keep.contains(&path) {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}
