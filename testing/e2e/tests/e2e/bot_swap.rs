//! Editing `bot/src/lib.rs` in any way that compiles keeps the suite building: a copy of the
//! workspace with another bot in `bot/src/lib.rs` (`bot_swap/parrot.rs`: another type name, other
//! words, none of the example bot's items) passes `cargo check --workspace --all-targets` — every
//! binary, library, test and benchmark, so nothing outside `bot/` names the example bot.
//!
//! The copy lives in `<target>/bot-swap/` and is checked with this target directory, so the
//! dependencies are not compiled again (only tgq's own crates, at their new path, in check mode);
//! files are rewritten only when they changed, so a second run checks only what changed since.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use tgq_e2e::cargo;

/// The bot put in place of the example bot.
const OTHER_BOT: &str = include_str!("bot_swap/parrot.rs");

/// Top-level entries of the workspace that are not sources: build output, tools, local data.
const NOT_COPIED: [&str; 4] = ["target", ".git", ".venv", ".tgq"];

#[test]
fn the_workspace_builds_with_another_bot_in_bot_src_lib_rs() {
    let root = cargo::workspace_root().canonicalize().unwrap();
    let target = cargo::target_dir().unwrap();
    let copy = target.join("bot-swap");
    let swap = Swap {
        path: copy.join("bot/src/lib.rs"),
        bytes: OTHER_BOT.as_bytes(),
    };
    sync_sources(&root, &copy, &swap).unwrap();
    assert_eq!(std::fs::read(&swap.path).unwrap(), OTHER_BOT.as_bytes());
    assert_ne!(
        std::fs::read(root.join("bot/src/lib.rs")).unwrap(),
        OTHER_BOT.as_bytes(),
        "the copy must hold another bot than the workspace"
    );

    let started = Instant::now();
    let output = cargo::command(&copy)
        .args([
            "check",
            "--workspace",
            "--all-targets",
            "--locked",
            "--offline",
        ])
        .env("CARGO_TARGET_DIR", &target)
        // Incremental caches for a copy nobody edits would only take disk.
        .env("CARGO_INCREMENTAL", "0")
        .output()
        .expect("cargo runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the workspace does not build with another bot in bot/src/lib.rs:\n{stderr}"
    );
    eprintln!(
        "cargo check --workspace --all-targets with the other bot: {:.1?}",
        started.elapsed()
    );
}

/// One file of the copy whose content is not the workspace's.
struct Swap<'a> {
    path: PathBuf,
    bytes: &'a [u8],
}

/// Makes `to` a copy of the workspace sources in `from`, with `swap` in place: writes files that
/// differ, removes files that are gone, and leaves the rest (and their times) alone.
fn sync_sources(from: &Path, to: &Path, swap: &Swap) -> std::io::Result<()> {
    let mut copied = BTreeSet::new();
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        if NOT_COPIED.iter().any(|skipped| name == *skipped) {
            continue;
        }
        copy_tree(&entry.path(), &to.join(&name), swap, &mut copied)?;
    }
    remove_others(to, &copied)
}

fn copy_tree(
    from: &Path,
    to: &Path,
    swap: &Swap,
    copied: &mut BTreeSet<PathBuf>,
) -> std::io::Result<()> {
    if from.is_dir() {
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            if entry.file_name() == "target" {
                continue;
            }
            copy_tree(&entry.path(), &to.join(entry.file_name()), swap, copied)?;
        }
        return Ok(());
    }
    if to == swap.path {
        write_if_changed(to, swap.bytes)?;
    } else {
        write_if_changed(to, &std::fs::read(from)?)?;
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
