//! `tgq setup`: the tools a deploy runs installed into tgq's own cache, pinned, once; and every
//! tool it cannot install named, with what to do, before anything is installed.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common;

/// `tgq setup ARGS` with its cache at `tools` and `envs` set.
fn setup(tools: &Path, envs: &[(&str, &str)], args: &[&str]) -> Output {
    common::tgq(envs)
        .env("TGQ_TOOLS_DIR", tools)
        .arg("setup")
        .args(args)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A directory to be the whole PATH: python3 (the machine's, or a script) and each of `scripts`.
fn bin(dir: &Path, python: Option<&str>, scripts: &[(&str, &str)]) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let write = |name: &str, script: &str| {
        let path = bin.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    match python {
        Some(script) => write("python3", script),
        None => std::os::unix::fs::symlink(common::real_python(), bin.join("python3")).unwrap(),
    }
    for (name, script) in scripts {
        write(name, script);
    }
    bin
}

/// The machine's PATH behind a rustup that lists the x86_64 target, whether or not the machine
/// has rustup: what these tests install needs no other target.
fn with_rustup(dir: &Path) -> String {
    let stand_in = dir.join("rustup-bin");
    std::fs::create_dir_all(&stand_in).unwrap();
    let rustup = stand_in.join("rustup");
    std::fs::write(&rustup, "#!/bin/sh\necho x86_64-unknown-linux-gnu\n").unwrap();
    std::fs::set_permissions(&rustup, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut dirs = vec![stand_in];
    dirs.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap()));
    std::env::join_paths(dirs).unwrap().into_string().unwrap()
}

/// pip with no index and no other place to find packages: what a machine off the network meets.
fn offline(empty: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("PIP_NO_INDEX", "1".to_owned()),
        ("PIP_FIND_LINKS", empty.display().to_string()),
        ("PIP_CONFIG_FILE", "/dev/null".to_owned()),
    ]
}

fn envs<'a>(pairs: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    pairs.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// Runs `tool ARGS` from the cache; its output.
fn version(tools: &Path, tool: &str, args: &[&str]) -> String {
    let output = std::process::Command::new(tools.join("venv/bin").join(tool))
        .args(args)
        .output()
        .unwrap();
    assert!(output.status.success(), "{tool}: {}", text(&output.stderr));
    text(&output.stdout)
}

#[test]
fn setup_installs_the_pinned_tools_into_its_cache_and_a_second_run_installs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools");
    let path = with_rustup(dir.path());
    let first = setup(
        &tools,
        &[("PATH", &path)],
        &["--yes", "--architecture", "x86_64"],
    );
    assert!(first.status.success(), "{}", text(&first.stderr));
    assert!(
        text(&first.stdout).contains("Ready to deploy"),
        "{}",
        text(&first.stdout)
    );
    assert!(version(&tools, "sam", &["--version"]).contains("1.170.0"));
    assert!(version(&tools, "cargo-lambda", &["lambda", "--version"]).contains("1.9.2"));
    assert_eq!(
        version(&tools, "python3", &["-m", "ziglang", "version"]).trim(),
        "0.17.1"
    );
    let installed = tools.join("installed");
    let before = std::fs::metadata(&installed).unwrap().modified().unwrap();

    // Again, with pip unable to fetch anything: it finds the cache and needs nothing.
    let empty = dir.path().join("no-packages");
    std::fs::create_dir_all(&empty).unwrap();
    let offline = offline(&empty);
    let second = setup(
        &tools,
        &envs(&offline),
        &["--yes", "--architecture", "x86_64"],
    );
    assert!(second.status.success(), "{}", text(&second.stderr));
    assert!(
        text(&second.stdout).starts_with("Nothing to install"),
        "{}",
        text(&second.stdout)
    );
    let after = std::fs::metadata(&installed).unwrap().modified().unwrap();
    assert_eq!(before, after);
}

#[test]
fn setup_off_the_network_names_the_packages_and_keeps_no_half_install() {
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools");
    let empty = dir.path().join("no-packages");
    std::fs::create_dir_all(&empty).unwrap();
    let offline = offline(&empty);
    let output = setup(
        &tools,
        &envs(&offline),
        &["--yes", "--architecture", "x86_64"],
    );
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains(
            "pip could not install aws-sam-cli==1.170.0 cargo-lambda==1.9.2 ziglang==0.17.1"
        ) && stderr.contains("run tgq setup again"),
        "{stderr}"
    );
    assert!(!tools.join("installed").exists());
}

#[test]
fn setup_for_arm64_names_the_target_rustup_cannot_add_before_installing_anything() {
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools");
    let rustup = "case \"$2\" in\n  list) echo x86_64-unknown-linux-gnu ;;\n  add) echo \"error: could not download component\" >&2; exit 1 ;;\nesac";
    let path = bin(dir.path(), None, &[("rustup", rustup)]);
    let output = setup(
        &tools,
        &[("PATH", path.to_str().unwrap())],
        &["--yes", "--architecture", "arm64"],
    );
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("`rustup target add aarch64-unknown-linux-gnu` failed")
            && stderr.contains("--architecture"),
        "{stderr}"
    );
    assert!(!tools.join("venv").exists(), "nothing installed");
}

#[test]
fn setup_without_rustup_says_where_to_get_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = bin(dir.path(), None, &[]);
    let output = setup(
        &dir.path().join("tools"),
        &[("PATH", path.to_str().unwrap())],
        &["--yes", "--architecture", "x86_64"],
    );
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("rustup did not answer") && stderr.contains("https://rustup.rs"),
        "{stderr}"
    );
    assert!(!dir.path().join("tools").exists());
}

#[test]
fn setup_refuses_a_cache_it_cannot_write_a_python_too_old_and_installing_unasked() {
    let dir = tempfile::tempdir().unwrap();
    let rustup = "echo x86_64-unknown-linux-gnu";

    // The cache beneath a file: it cannot be made.
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let path = bin(&dir.path().join("good"), None, &[("rustup", rustup)]);
    let output = setup(
        &file.join("tools"),
        &[("PATH", path.to_str().unwrap())],
        &["--yes", "--architecture", "x86_64"],
    );
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("tgq cannot write its tools' cache") && stderr.contains("TGQ_TOOLS_DIR"),
        "{stderr}"
    );

    // A Python the SAM CLI does not install on.
    let old = bin(
        &dir.path().join("old"),
        Some("echo 3.8"),
        &[("rustup", rustup)],
    );
    let tools = dir.path().join("tools");
    let output = setup(
        &tools,
        &[("PATH", old.to_str().unwrap())],
        &["--yes", "--architecture", "x86_64"],
    );
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("is Python 3.8, older than the SAM CLI 1.170.0 supports (3.10 or newer)"),
        "{stderr}"
    );
    assert!(!tools.exists());

    // No terminal to ask on, and no --yes.
    let output = setup(
        &tools,
        &[("PATH", path.to_str().unwrap())],
        &["--architecture", "x86_64"],
    );
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("there is no terminal to ask on") && stderr.contains("--yes"),
        "{stderr}"
    );
    assert!(!tools.join("venv").exists());
}

#[test]
fn setup_in_a_terminal_asks_first_and_a_no_installs_nothing() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools");
    // Python's pty module gives tgq a terminal, fed what the test writes.
    let mut terminal = std::process::Command::new(common::real_python())
        .args([
            "-c",
            "import pty, sys; sys.exit(pty.spawn(sys.argv[1:]) >> 8)",
            env!("CARGO_BIN_EXE_tgq"),
            "setup",
            "--architecture",
            "x86_64",
        ])
        .env("TGQ_TOOLS_DIR", &tools)
        .env("PATH", with_rustup(dir.path()))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    terminal.stdin.take().unwrap().write_all(b"n\n").unwrap();
    let output = terminal.wait_with_output().unwrap();
    let seen = text(&output.stdout);
    assert!(!output.status.success(), "{seen}");
    assert!(
        seen.contains(
            "tgq will install the SAM CLI 1.170.0, cargo-lambda 1.9.2 and zig 0.17.1 from PyPI"
        ) && seen.contains("Go on? [y/N]")
            && seen.contains("nothing was installed: declined"),
        "{seen}"
    );
    assert!(!tools.join("venv").exists());
}
