//! `tgq new` as a bot author runs it: a crate of its own in a fresh folder, against this
//! checkout. The crate's tests pass as created, and `tgq local --demo --exit` in its folder runs
//! its bot (its replies in the demo's summary), not the bot built into `tgq`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// This checkout: the new crate depends on it by path.
fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ is in the checkout")
        .canonicalize()
        .unwrap()
}

/// Where new crates build: this workspace's target directory. The new crate starts from this
/// checkout's lock file and builds with the same dev profile, so it finds nearly every
/// dependency built already and adds only its own crates.
fn crate_target() -> PathBuf {
    checkout().join("target")
}

/// `command` with a clean tgq environment, building into [`crate_target`].
fn clean(mut command: Command) -> Command {
    for name in tgq_core::config::SETTINGS.iter().chain(&["NO_COLOR"]) {
        command.env_remove(name);
    }
    command.env("CARGO_TARGET_DIR", crate_target());
    command
}

fn run(command: &mut Command) -> (bool, String, String) {
    let output = command.output().expect("the command runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_new_crate_passes_its_tests_and_tgq_local_in_its_folder_runs_its_bot() {
    let work = tempfile::tempdir().unwrap();
    let tgq = env!("CARGO_BIN_EXE_tgq");
    let mut new = clean(Command::new(tgq));
    new.args(["new", "my-bot", "--tgq-path"])
        .arg(checkout())
        .current_dir(work.path());
    let (ok, out, err) = run(&mut new);
    assert!(ok, "tgq new failed: {out}{err}");
    assert!(out.contains("Created the bot crate my-bot"), "{out}");
    let dir = work.path().join("my-bot");

    // One tgq dependency, and serde.
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    let dependencies: Vec<&str> = manifest
        .split("[dependencies]")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .unwrap()
        .lines()
        .filter(|line| !line.starts_with('#') && line.contains('='))
        .filter_map(|line| line.split('=').next().map(str::trim))
        .collect();
    assert_eq!(dependencies, ["tgq", "serde"], "{manifest}");

    let mut test = clean(Command::new("cargo"));
    test.arg("test").current_dir(&dir);
    let (ok, out, err) = run(&mut test);
    assert!(ok, "cargo test in the new crate failed:\n{out}\n{err}");
    assert!(
        out.contains("test result: ok. 2 passed"),
        "the crate's two tests ran: {out}"
    );

    // The installed `tgq`, from a folder inside the crate: the crate's own binary runs the demo.
    let mut demo = clean(Command::new(tgq));
    demo.args(["local", "--demo", "--exit"])
        .current_dir(dir.join("src"));
    let (ok, out, err) = run(&mut demo);
    assert!(
        ok,
        "tgq local --demo --exit in the new crate failed:\n{out}\n{err}"
    );
    assert!(
        err.contains(&format!(
            "running the bot crate of {}",
            dir.canonicalize().unwrap().join("Cargo.toml").display()
        )),
        "{err}"
    );
    assert!(
        out.contains("(message 1 here)"),
        "the demo's summary shows the new bot's replies:\n{out}"
    );
}

#[test]
fn tgq_new_refuses_a_folder_in_use_and_a_name_cargo_refuses_writing_nothing() {
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir(work.path().join("taken")).unwrap();
    std::fs::write(work.path().join("taken/notes.txt"), "mine").unwrap();
    let refusals = [
        (
            vec!["new", "taken"],
            "taken exists and is not empty: give a new name, or remove the folder",
        ),
        (
            vec!["new", "2fa"],
            "\"2fa\" is not a crate name: a crate name is ASCII letters, digits, `-` and `_`, \
             starts with a letter, and is at most 64 characters",
        ),
        (vec!["new", "tgq"], "\"tgq\" is taken"),
        (
            vec!["new", "ok", "--tgq-path", "/nonexistent/tgq"],
            "--tgq-path /nonexistent/tgq",
        ),
    ];
    for (args, words) in refusals {
        let mut new = clean(Command::new(env!("CARGO_BIN_EXE_tgq")));
        new.args(&args).current_dir(work.path());
        let (ok, out, err) = run(&mut new);
        assert!(!ok, "{args:?} was taken: {out}");
        assert!(err.contains(words), "{args:?}: {err}");
    }
    let left: Vec<_> = std::fs::read_dir(work.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(left, ["taken"], "nothing was written");
    assert_eq!(
        std::fs::read_to_string(work.path().join("taken/notes.txt")).unwrap(),
        "mine"
    );
}
