//! Installs the Node.js and Python equivalents (`tools/coldstart/node`, `tools/coldstart/python`)
//! into a scratch folder under `target/`, never committed: their pinned packages from npm and PyPI,
//! and the scripts next to them.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _};

/// The committed sources of the equivalents.
fn sources(language: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(language)
}

/// Copies every file of `from` with one of `extensions` into `into`.
fn copy_sources(from: &Path, into: &Path, extensions: &[&str]) -> anyhow::Result<()> {
    std::fs::create_dir_all(into).with_context(|| format!("creating {}", into.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let path = entry?.path();
        let wanted = path
            .extension()
            .and_then(|extension| extension.to_str())
            .is_some_and(|extension| extensions.contains(&extension));
        if wanted {
            let name = path.file_name().context("a file name")?;
            std::fs::copy(&path, into.join(name))
                .with_context(|| format!("copying {}", path.display()))?;
        }
    }
    Ok(())
}

fn run(command: &mut Command, what: &str) -> anyhow::Result<()> {
    let status = command
        .status()
        .with_context(|| format!("starting {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

/// A program found on `PATH`.
fn on_path(name: &str) -> anyhow::Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .with_context(|| format!("{name} is not on PATH"))
}

/// Installs the Node.js equivalent into `scratch/node`; returns that folder and `node`.
pub fn node(scratch: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    let folder = scratch.join("node");
    copy_sources(&sources("node"), &folder, &["mjs", "json"])?;
    eprintln!(
        "installing the Node.js equivalent's packages into {}",
        folder.display()
    );
    run(
        Command::new(on_path("npm")?)
            .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&folder),
        "npm install",
    )?;
    Ok((folder, on_path("node")?))
}

/// Installs the Python equivalent into `scratch/python` (a virtualenv of its own); returns that
/// folder and the virtualenv's interpreter.
pub fn python(scratch: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    let folder = scratch.join("python");
    copy_sources(&sources("python"), &folder, &["py", "txt"])?;
    let venv = folder.join("venv");
    let interpreter = venv.join("bin/python");
    if !interpreter.is_file() {
        run(
            Command::new(on_path("python3")?)
                .arg("-m")
                .arg("venv")
                .arg(&venv),
            "python3 -m venv",
        )?;
    }
    eprintln!(
        "installing the Python equivalent's packages into {}",
        venv.display()
    );
    run(
        Command::new(&interpreter)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(folder.join("requirements.txt")),
        "pip install",
    )?;
    Ok((folder, interpreter))
}

/// The version a program reports, for the report's header.
pub fn version(program: &Path) -> String {
    Command::new(program)
        .arg("--version")
        .output()
        .ok()
        .map(|output| {
            let text = if output.stdout.is_empty() {
                output.stderr
            } else {
                output.stdout
            };
            String::from_utf8_lossy(&text).trim().to_owned()
        })
        .unwrap_or_else(|| "unknown".to_owned())
}
