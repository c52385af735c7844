//! `tgq new` as a bot author runs it: a crate of its own in a fresh folder, against this
//! checkout. The crate's tests pass as created, `tgq local --demo --exit` in its folder runs its
//! bot (its replies in the demo's summary), not the bot built into `tgq`, and `tgq deploy` there
//! builds the crate's own functions (the SAM CLI a stand-in, the stack on moto).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use tgq_e2e::emulator::{self, Stack};
use tgq_fake_telegram::FakeTelegram;

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

/// The packages the crate at `dir` links with `features` (cargo tree's arguments), by name:
/// `edges` `normal` for what its binary links, `normal,dev` for what `cargo test` builds too.
fn linked(dir: &Path, features: &[&str], edges: &str) -> BTreeSet<String> {
    let mut tree = clean(Command::new("cargo"));
    tree.args(["tree", "--offline"])
        .args(features)
        .args(["-e", edges, "--prefix", "none", "--format", "{p}"])
        .current_dir(dir);
    let (ok, out, err) = run(&mut tree);
    assert!(ok, "cargo tree: {err}");
    out.lines()
        .filter_map(|line| line.split(' ').next())
        .map(str::to_owned)
        .collect()
}

/// A shell script at `path` that the tests run in place of a tool.
fn stand_in(path: &Path, script: &str) {
    crate::common::write_script(path, &format!("#!/bin/sh\n{script}\n"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_crate_passes_its_tests_runs_its_bot_locally_and_deploys_its_own_functions() {
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

    its_own_build_compiles_no_aws(&dir);
    deploys_its_own_functions(&dir).await;
    its_functions_build_without_the_command(&dir);
}

/// The crate's own build (`cargo test`, `tgq local`) links no AWS SDK; its `aws` feature, which
/// the installed `tgq` turns on for the commands that act on AWS, does. Its binary built without
/// the feature refuses such a command, saying how to run it.
fn its_own_build_compiles_no_aws(dir: &Path) {
    let own = linked(dir, &[], "normal,dev");
    assert!(own.contains("tgq-command"), "{own:?}");
    for aws in ["tgq-aws", "aws-config"] {
        assert!(!own.contains(aws), "the crate's own build links {aws}");
    }
    assert!(
        !own.iter().any(|package| package.starts_with("aws-sdk-")),
        "the crate's own build links aws-sdk-"
    );
    let with_aws = linked(dir, &["--features", "aws"], "normal,dev");
    for aws in ["tgq-aws", "aws-sdk-cloudformation", "aws-sdk-sso"] {
        assert!(with_aws.contains(aws), "the aws feature links {aws}");
    }

    // The binary the demo ran, asked for a stack.
    let mut status = clean(Command::new(crate_target().join("debug/my-bot")));
    status
        .args(["status", "--stack", "shop"])
        .env("TGQ_STARTED_IN_BOT_CRATE", "1");
    let (ok, out, err) = run(&mut status);
    assert!(!ok, "{out}");
    assert!(
        err.contains("--stack (or --table, --queue-url and --dlq-url) acts on AWS, and this build")
            && err.contains("cargo run --features aws"),
        "{err}"
    );
}

/// `tgq deploy` in the crate's folder: the SAM CLI (a stand-in that records where it ran and what
/// it was asked) builds the template rendered for the crate, whose two functions are the crate's
/// binary in the crate's folder; the webhook is set on the stack `sam deploy` leaves (made here on
/// moto, as the deploy tests do).
async fn deploys_its_own_functions(dir: &Path) {
    let fake = FakeTelegram::start().await.unwrap();
    let sdk = emulator::sdk_config().await;
    let resources = Stack::create(&sdk, "new-crate").await.unwrap();
    let stack = resources.table.replace("tgq-e2e-", "crate-");
    crate::aws::stack_as_sam_deploy_leaves_it(
        &sdk,
        &resources,
        &stack,
        "https://crate.example.com/webhook",
        &fake.url(),
    )
    .await;

    let tools = tempfile::tempdir().unwrap();
    let bin = crate::aws::deploy_tools(tools.path());
    let calls = tools.path().join("sam-calls");
    stand_in(
        &bin.join("sam"),
        &format!("echo \"$PWD $*\" >> '{}'", calls.display()),
    );
    // The stand-ins first; cargo, which builds the crate's binary with its `aws` feature and runs
    // it, and the C toolchain that build links with, after them.
    let cargo_bin = which("cargo");
    let cc = which("cc");
    let path = std::env::join_paths([
        bin.as_path(),
        cargo_bin.parent().unwrap(),
        cc.parent().unwrap(),
    ])
    .unwrap();
    let api = format!("TelegramApiUrl={}", fake.url());
    let mut deploy = clean(Command::new(env!("CARGO_BIN_EXE_tgq")));
    deploy
        .args(["deploy", "--stack", &stack, "--parameter", &api])
        .env("PATH", &path)
        .env("TGQ_TOOLS_DIR", tools.path().join("cache"))
        .env("TELEGRAM_BOT_TOKEN", fake.token())
        .current_dir(dir.join("src"));
    let (ok, out, err) = run(&mut deploy);
    assert!(ok, "tgq deploy in the new crate failed:\n{out}\n{err}");
    assert!(out.contains("Deploying the bot crate my-bot of"), "{out}");
    assert!(err.contains("(cargo run --features aws -- …)"), "{err}");

    // Built: the rendered template, from the crate's folder; then deployed from there.
    let root = dir.canonicalize().unwrap();
    let calls = std::fs::read_to_string(&calls).unwrap();
    let calls: Vec<&str> = calls.lines().collect();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(
        calls[0].starts_with(&format!(
            "{} build --template-file target/tgq/template.yaml",
            root.display()
        )),
        "{calls:?}"
    );
    assert!(
        calls[1].starts_with(&format!("{} deploy --stack-name {stack}", root.display())),
        "{calls:?}"
    );
    let rendered = root.join("target/tgq/template.yaml");
    let template = std::fs::read_to_string(&rendered).unwrap();
    assert_eq!(template.matches("Binary: my-bot\n").count(), 2);
    assert_eq!(template.matches("TGQ_FUNCTION: ").count(), 2);
    assert!(!template.contains("Binary: webhook") && !template.contains("Binary: worker"));
    for code in template.lines().filter(|line| line.contains("CodeUri:")) {
        let uri = code.split_once("CodeUri:").unwrap().1.trim();
        let folder = rendered.parent().unwrap().join(uri).canonicalize().unwrap();
        assert_eq!(folder, root, "the functions' code is the crate: {code}");
    }
    assert_eq!(
        fake.webhook_url().as_deref(),
        Some("https://crate.example.com/webhook")
    );
    assert!(out.contains("The bot is live"), "{out}");

    // The operator's commands run in the crate's folder as its binary too: the stack's status,
    // dead letters, timers and bots, then its teardown (the webhook first).
    for args in [
        vec!["status", "--stack", stack.as_str()],
        vec!["dlq", "list", "--stack", stack.as_str()],
        vec!["timers", "list", "--stack", stack.as_str()],
        vec!["bots", "list", "--stack", stack.as_str()],
        vec!["destroy", "--stack", stack.as_str(), "--yes"],
    ] {
        let mut command = clean(Command::new(env!("CARGO_BIN_EXE_tgq")));
        command.args(&args).env("PATH", &path).current_dir(dir);
        let (ok, out, err) = run(&mut command);
        assert!(ok, "tgq {args:?} in the new crate failed:\n{out}\n{err}");
        assert!(
            err.contains("running the bot crate of")
                && err.contains("(cargo run --features aws --"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(fake.webhook_url(), None, "destroy deleted the webhook");
}

/// The build cargo-lambda makes of the crate (the features its `[package.metadata.lambda.build]`
/// names: `lambda` without the default `command`) compiles, and its binary is a function as its
/// environment says, or says it has no command.
fn its_functions_build_without_the_command(dir: &Path) {
    let linked = linked(
        dir,
        &["--no-default-features", "--features", "lambda"],
        "normal",
    );
    assert!(linked.contains("tgq-aws"), "{linked:?}");
    for tool in [
        "tgq-command",
        "tgq-embedded",
        "tgq-fake-telegram",
        "redb",
        "aws-sdk-sso",
    ] {
        assert!(!linked.contains(tool), "the functions link {tool}");
    }

    let mut build = clean(Command::new("cargo"));
    build
        .args(["build", "--no-default-features", "--features", "lambda"])
        .current_dir(dir);
    let (ok, out, err) = run(&mut build);
    assert!(
        ok,
        "the functions' build of the new crate failed:\n{out}\n{err}"
    );
    let binary = crate_target().join("debug/my-bot");

    let mut command = clean(Command::new(&binary));
    command.arg("local");
    let (ok, _, err) = run(&mut command);
    assert!(!ok);
    assert!(
        err.contains("built as the bot's Lambda functions only"),
        "{err}"
    );

    // Outside Lambda the worker stops at its configuration, which names what it lacks.
    let mut worker = clean(Command::new(&binary));
    worker.env("TGQ_FUNCTION", "worker");
    let (ok, _, err) = run(&mut worker);
    assert!(!ok);
    assert!(
        err.contains("the worker function stopped: TELEGRAM_BOT_TOKEN is not set"),
        "{err}"
    );

    let mut neither = clean(Command::new(&binary));
    neither.env("TGQ_FUNCTION", "poller");
    let (ok, _, err) = run(&mut neither);
    assert!(!ok);
    assert!(
        err.contains("TGQ_FUNCTION=\"poller\" names no function: it is webhook or worker"),
        "{err}"
    );
}

/// Where `program` is on this process's PATH.
fn which(program: &str) -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
        .unwrap_or_else(|| panic!("{program} is on PATH"))
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

/// Outside any bot crate and outside this repository, the installed `tgq local` has no bot of
/// anyone's to run: it says what it looked for and how to make a crate, and writes nothing. With
/// `TGQ_HANDLER` naming a handler it runs that one there.
#[test]
fn tgq_local_outside_a_bot_crate_says_what_it_looked_for_and_writes_nothing() {
    let work = tempfile::tempdir().unwrap();
    let mut local = clean(Command::new(env!("CARGO_BIN_EXE_tgq")));
    local
        .args(["local", "--demo", "--exit"])
        .current_dir(work.path());
    let (ok, out, err) = run(&mut local);
    assert!(!ok, "tgq local ran outside a bot crate: {out}");
    let here = work.path().canonicalize().unwrap();
    for words in [
        format!(
            "tgq local runs the bot of the crate it is in, and {} is in none",
            here.display()
        ),
        "src/main.rs calls tgq::main (`tgq new NAME` creates such a crate)".to_owned(),
        "TGQ_HANDLER=echo runs tgq's built-in echo bot here instead".to_owned(),
    ] {
        assert!(err.contains(&words), "{words} in {err}");
    }
    let left: Vec<_> = std::fs::read_dir(work.path()).unwrap().collect();
    assert!(left.is_empty(), "tgq local wrote {left:?}");

    let mut echo = clean(Command::new(env!("CARGO_BIN_EXE_tgq")));
    echo.args(["local", "--demo", "--exit"])
        .env("TGQ_HANDLER", "echo")
        .current_dir(work.path());
    let (ok, out, err) = run(&mut echo);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("echo "), "the echo bot's replies: {out}");
}

/// A bot crate whose Cargo.toml has no `aws` feature (made before `tgq new` wrote one) cannot
/// build its binary for a command that acts on AWS: the installed `tgq` says what to add, before
/// it runs cargo. Its other commands, and help, run as the crate's binary as before.
#[test]
fn a_stack_command_in_a_crate_without_the_aws_feature_says_what_to_add() {
    let work = tempfile::tempdir().unwrap();
    let manifest = "[package]\nname = \"old-bot\"\nversion = \"0.1.0\"\n\n[dependencies]\n\
                    tgq = \"0.1\"\n\n[features]\ndefault = [\"command\"]\n\
                    command = [\"tgq/command\"]\n";
    std::fs::write(work.path().join("Cargo.toml"), manifest).unwrap();
    std::fs::create_dir(work.path().join("src")).unwrap();
    std::fs::write(
        work.path().join("src/main.rs"),
        "fn main() -> std::process::ExitCode { tgq::main(old_bot::handlers) }\n",
    )
    .unwrap();
    // cargo as the installed `tgq` runs it: a stand-in that records its arguments.
    let tools = tempfile::tempdir().unwrap();
    let calls = tools.path().join("cargo-calls");
    let cargo = tools.path().join("cargo");
    stand_in(&cargo, &format!("echo \"$*\" >> '{}'", calls.display()));
    let tgq = |args: &[&str]| {
        let mut command = clean(Command::new(env!("CARGO_BIN_EXE_tgq")));
        command
            .args(args)
            .env("CARGO", &cargo)
            .current_dir(work.path());
        run(&mut command)
    };
    for (args, what) in [
        (vec!["status", "--stack", "shop"], "status --stack"),
        (vec!["deploy", "--stack", "shop"], "deploy"),
    ] {
        let (ok, out, err) = tgq(&args);
        assert!(!ok, "{args:?}: {out}");
        assert!(
            err.contains(&format!("error: {what} acts on AWS"))
                && err.contains("add `aws = [\"tgq/aws\"]` under [features]"),
            "{args:?}: {err}"
        );
    }
    assert!(!calls.exists(), "cargo ran for a refused command");

    for args in [vec!["status"], vec!["deploy", "--help"]] {
        let (ok, out, err) = tgq(&args);
        assert!(ok, "{args:?}: {out}{err}");
    }
    let manifest = work.path().canonicalize().unwrap().join("Cargo.toml");
    let calls = std::fs::read_to_string(&calls).unwrap();
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        [
            format!("run --manifest-path {} -- status", manifest.display()),
            format!(
                "run --manifest-path {} -- deploy --help",
                manifest.display()
            ),
        ]
    );
    let mut left: Vec<_> = std::fs::read_dir(work.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    left.sort();
    assert_eq!(left, ["Cargo.toml", "src"], "nothing was written");
}
