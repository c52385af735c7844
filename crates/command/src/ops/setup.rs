//! `tgq setup`, and the first step of `tgq deploy`: the tools a deploy runs, installed where tgq
//! keeps its own when they are missing. The SAM CLI, and cargo-lambda with the zig it links with,
//! go into a private Python virtual environment in tgq's cache ([`ToolCache`]), at the versions the
//! test suite runs; the Rust target of the stack's architecture is added with rustup. The user's
//! own Python and PATH are left alone: a deploy hands the cache's tools to the SAM CLI it runs
//! through that process's PATH only. Everything is checked before anything is installed, and
//! nothing is installed without consent: asked in a terminal, given with `--yes`.

#[cfg(feature = "aws")]
use std::ffi::OsString;
use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _};
use clap::Args;

use super::deploy::Architecture;

/// The Python packages a deploy runs, pinned to the versions the suite tests
/// (requirements-test.txt, which a test keeps equal), each with the name users know it by.
pub const PINNED: [(&str, &str, &str); 3] = [
    ("aws-sam-cli", "1.170.0", "the SAM CLI"),
    ("cargo-lambda", "1.9.2", "cargo-lambda"),
    ("ziglang", "0.17.1", "zig"),
];

/// The oldest Python the pinned SAM CLI installs on (its `Requires-Python`).
const OLDEST_PYTHON: (u32, u32) = (3, 10);

/// Where the cache is, when set: else `$XDG_CACHE_HOME/tgq/tools`, else `~/.cache/tgq/tools`.
pub const TOOLS_DIR_VAR: &str = "TGQ_TOOLS_DIR";

/// `tgq setup`.
#[derive(Debug, Args)]
pub struct SetupArgs {
    /// The instruction set the functions will be built for: its Rust target is added.
    #[arg(long, value_enum, default_value_t = Architecture::Arm64)]
    architecture: Architecture,
    /// Install what is missing without asking.
    #[arg(long)]
    yes: bool,
}

/// The tools a deploy runs.
#[cfg(feature = "aws")]
pub struct Tools {
    /// The SAM CLI.
    pub sam: PathBuf,
    /// The PATH the SAM CLI runs with, when its helpers are the cache's; `None`: the user's.
    pub path: Option<OsString>,
}

/// `tgq setup`: the cache's tools and the Rust target, installed when missing.
pub fn setup(args: SetupArgs) -> anyhow::Result<()> {
    let cache = ToolCache::locate()?;
    let target = Target::of(args.architecture)?;
    let python = (!cache.ready())
        .then(|| cache.ready_to_install())
        .transpose()?;
    let mut wanted = Vec::new();
    if python.is_some() {
        wanted.push(cache.offer());
    }
    if !target.installed {
        wanted.push(target.offer());
    }
    if wanted.is_empty() {
        outln!(
            "Nothing to install: {} are in {}, and the Rust target {} is installed.",
            listed(),
            cache.dir.display(),
            target.name
        );
        return Ok(());
    }
    Consent::from(args.yes).allow(&wanted)?;
    target.add()?;
    if let Some(python) = python {
        cache.install(&python)?;
    }
    outln!(
        "Ready to deploy: {} in {}, the Rust target {}.",
        listed(),
        cache.dir.display(),
        target.name
    );
    Ok(())
}

/// The tools `tgq deploy` runs: the cache's when it holds them, else the user's own when each
/// is on PATH (or in the workspace's `.venv/bin`), else the cache's, installed with consent
/// (`yes`, or asked in a terminal). `build`: the functions are built here, so cargo-lambda, zig
/// and the Rust target are needed too. Everything is checked before anything is installed.
#[cfg(feature = "aws")]
pub fn for_deploy(architecture: Architecture, build: bool, yes: bool) -> anyhow::Result<Tools> {
    let cache = ToolCache::locate()?;
    let ready = cache.ready();
    let own = (!ready)
        .then(own_tools)
        .flatten()
        .filter(|own| !build || own.complete);
    let install = !ready && own.is_none();
    let missing = |why: anyhow::Error| missing_tools(&cache, architecture, build, &why);
    let target = match build {
        true => Some(Target::of(architecture).map_err(missing)?),
        false => None,
    };
    let python = match install {
        true => Some(cache.ready_to_install().map_err(missing)?),
        false => None,
    };
    let mut wanted = Vec::new();
    if install {
        wanted.push(cache.offer());
    }
    if let Some(target) = target.as_ref().filter(|target| !target.installed) {
        wanted.push(target.offer());
    }
    if !wanted.is_empty() {
        Consent::from(yes).allow(&wanted).map_err(missing)?;
    }
    if let Some(target) = &target {
        target.add()?;
    }
    if let Some(python) = python {
        cache.install(&python)?;
    }
    match own {
        Some(own) => Ok(Tools {
            sam: own.sam,
            path: None,
        }),
        None => cache.tools(),
    }
}

/// The error naming every tool a deploy misses and how to get each, then `why` none was installed.
#[cfg(feature = "aws")]
fn missing_tools(
    cache: &ToolCache,
    architecture: Architecture,
    build: bool,
    why: &anyhow::Error,
) -> anyhow::Error {
    let mut missing = Vec::new();
    if !cache.ready() {
        let own = own_tools();
        if own.is_none() {
            missing.push("the SAM CLI (`sam`): pip install aws-sam-cli".to_owned());
        }
        if build && !own.is_some_and(|own| own.complete) {
            if find("cargo-lambda").is_none() {
                missing.push("cargo-lambda: pip install cargo-lambda".to_owned());
            }
            if find("zig").is_none() && find("python-zig").is_none() {
                missing.push("zig, which cargo-lambda links with: pip install ziglang".to_owned());
            }
        }
    }
    if build {
        let name = architecture.rust_target();
        match Target::of(architecture) {
            Ok(target) if target.installed => {}
            Ok(_) => missing.push(format!("the Rust target {name}: rustup target add {name}")),
            Err(_) => missing.push(format!(
                "rustup, to add the Rust target {name}: https://rustup.rs"
            )),
        }
    }
    anyhow::anyhow!(
        "tgq deploy needs tools that are missing:\n  - {}\n{why:#}\n`tgq setup` installs them \
         into {} (asking first), and `tgq deploy --yes` installs them without asking",
        missing.join("\n  - "),
        cache.dir.display()
    )
}

/// The SAM CLI on the user's PATH (or in the workspace's `.venv/bin`), and whether cargo-lambda
/// and zig are there too.
#[cfg(feature = "aws")]
struct OwnTools {
    sam: PathBuf,
    complete: bool,
}

#[cfg(feature = "aws")]
fn own_tools() -> Option<OwnTools> {
    let sam = find("sam")?;
    let complete =
        find("cargo-lambda").is_some() && (find("zig").is_some() || find("python-zig").is_some());
    Some(OwnTools { sam, complete })
}

/// Finds `name` on PATH, or in `.venv/bin` (where `scripts/venv` installs the pinned tools).
#[cfg(feature = "aws")]
fn find(name: &str) -> Option<PathBuf> {
    let venv = Path::new(".venv/bin").join(name);
    on_path(name).or_else(|| venv.is_file().then_some(venv))
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// "the SAM CLI 1.170.0, cargo-lambda 1.9.2 and zig 0.17.1".
fn listed() -> String {
    let names: Vec<String> = PINNED
        .iter()
        .map(|(_, version, name)| format!("{name} {version}"))
        .collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => names.concat(),
    }
}

/// tgq's own tools: a Python virtual environment holding the pinned packages, and a file saying
/// which pins it holds (written once they all installed).
pub struct ToolCache {
    dir: PathBuf,
}

impl ToolCache {
    /// The cache [`TOOLS_DIR_VAR`] names, or the user's cache directory's.
    pub fn locate() -> anyhow::Result<Self> {
        let set = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
        let dir = set(TOOLS_DIR_VAR)
            .map(PathBuf::from)
            .or_else(|| set("XDG_CACHE_HOME").map(|dir| PathBuf::from(dir).join("tgq/tools")))
            .or_else(|| set("HOME").map(|home| PathBuf::from(home).join(".cache/tgq/tools")))
            .with_context(|| {
                format!("none of {TOOLS_DIR_VAR}, XDG_CACHE_HOME or HOME is set: set {TOOLS_DIR_VAR} to a directory tgq may keep its tools in")
            })?;
        Ok(Self { dir })
    }

    fn bin(&self) -> PathBuf {
        self.dir.join("venv/bin")
    }

    fn pins_file(&self) -> PathBuf {
        self.dir.join("installed")
    }

    fn pins() -> String {
        PINNED
            .iter()
            .map(|(package, version, _)| format!("{package}=={version}\n"))
            .collect()
    }

    /// Whether the cache holds every pinned tool at its version.
    pub fn ready(&self) -> bool {
        std::fs::read_to_string(self.pins_file()).is_ok_and(|pins| pins == Self::pins())
            && ["sam", "cargo-lambda", "python3"]
                .iter()
                .all(|tool| self.bin().join(tool).is_file())
    }

    /// What installing would do, for the question.
    fn offer(&self) -> String {
        format!("install {} from PyPI into {}", listed(), self.dir.display())
    }

    /// Checks that an install can work: a Python new enough to make a virtual environment, and
    /// a cache directory tgq can write. The Python to make it with.
    fn ready_to_install(&self) -> anyhow::Result<PathBuf> {
        let python = python()?;
        writable(&self.dir)?;
        Ok(python)
    }

    /// Installs the pinned tools with `python`'s venv and pip.
    fn install(&self, python: &Path) -> anyhow::Result<()> {
        // A half-done install is not taken for a whole one.
        match std::fs::remove_file(self.pins_file()) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => {
                return Err(error)
                    .with_context(|| format!("cannot replace {}", self.pins_file().display()))
            }
        }
        outln!("Installing {} into {} …", listed(), self.dir.display());
        if !self.bin().join("python3").is_file() {
            let made = Command::new(python)
                .args(["-m", "venv"])
                .arg(self.dir.join("venv"))
                .status()
                .with_context(|| format!("cannot run {}", python.display()))?;
            if !made.success() {
                bail!(
                    "{} -m venv {} failed ({made}; its output is above)",
                    python.display(),
                    self.dir.join("venv").display()
                );
            }
        }
        let pins: Vec<String> = Self::pins().lines().map(str::to_owned).collect();
        let installed = Command::new(self.bin().join("python3"))
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(&pins)
            .status()
            .with_context(|| format!("cannot run pip in {}", self.dir.display()))?;
        if !installed.success() {
            bail!(
                "pip could not install {} ({installed}; its output is above): check that PyPI, \
                 or the index PIP_INDEX_URL names, can be reached, then run tgq setup again",
                pins.join(" ")
            );
        }
        std::fs::write(self.pins_file(), Self::pins())
            .with_context(|| format!("cannot write {}", self.pins_file().display()))?;
        Ok(())
    }

    /// The cache's tools, for a deploy: its SAM CLI, run with its bin directory first on PATH
    /// (where the SAM CLI finds cargo-lambda, and cargo-lambda the Python that holds zig).
    #[cfg(feature = "aws")]
    fn tools(&self) -> anyhow::Result<Tools> {
        let mut dirs = vec![self.bin()];
        dirs.extend(
            std::env::var_os("PATH")
                .iter()
                .flat_map(std::env::split_paths),
        );
        let path = std::env::join_paths(dirs).context("the cache's path cannot join PATH")?;
        Ok(Tools {
            sam: self.bin().join("sam"),
            path: Some(path),
        })
    }
}

/// `python3` on PATH, checked: new enough for the pinned SAM CLI, and able to make a virtual
/// environment with pip in it.
fn python() -> anyhow::Result<PathBuf> {
    let (major, minor) = OLDEST_PYTHON;
    let python = on_path("python3").with_context(|| {
        format!(
            "no python3 on PATH: the SAM CLI and cargo-lambda are Python packages; install Python \
             {major}.{minor} or newer"
        )
    })?;
    let probe = Command::new(&python)
        .args([
            "-c",
            "import sys, venv, ensurepip; print('%d.%d' % sys.version_info[:2])",
        ])
        .output()
        .with_context(|| format!("cannot run {}", python.display()))?;
    let version = String::from_utf8_lossy(&probe.stdout).trim().to_owned();
    if !probe.status.success() {
        bail!(
            "{} cannot make a virtual environment with pip (its venv or ensurepip module is \
             missing; on Debian and Ubuntu: apt install python3-venv)",
            python.display()
        );
    }
    let parsed = version
        .split_once('.')
        .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)));
    match parsed {
        Some(found) if found >= OLDEST_PYTHON => Ok(python),
        Some(_) => bail!(
            "{} is Python {version}, older than the SAM CLI {} supports ({major}.{minor} or \
             newer): install a newer Python and put it first on PATH",
            python.display(),
            PINNED[0].1
        ),
        None => bail!(
            "{} did not say its version (it printed {version:?})",
            python.display()
        ),
    }
}

/// Makes `dir` and checks that a file can be written in it.
fn writable(dir: &Path) -> anyhow::Result<()> {
    let refused = |error: std::io::Error| {
        anyhow::anyhow!(
            "tgq cannot write its tools' cache {} ({error}): make it writable, or set \
             {TOOLS_DIR_VAR} to a directory that is",
            dir.display()
        )
    };
    std::fs::create_dir_all(dir).map_err(refused)?;
    let probe = dir.join(".tgq-write-probe");
    std::fs::write(&probe, b"").map_err(refused)?;
    std::fs::remove_file(&probe).map_err(refused)?;
    Ok(())
}

/// The Rust target the functions are built for, and whether rustup has it.
struct Target {
    name: &'static str,
    installed: bool,
}

impl Target {
    /// `architecture`'s target, as rustup lists it; an error when rustup cannot be asked.
    fn of(architecture: Architecture) -> anyhow::Result<Self> {
        let name = architecture.rust_target();
        let listed = Command::new("rustup")
            .args(["target", "list", "--installed"])
            .output()
            .ok()
            .filter(|output| output.status.success())
            .with_context(|| {
                format!(
                    "rustup did not answer (is it on PATH?), and the functions are built for \
                     {name}: install Rust with rustup (https://rustup.rs)"
                )
            })?;
        let installed = String::from_utf8_lossy(&listed.stdout)
            .lines()
            .any(|line| line.trim() == name);
        Ok(Self { name, installed })
    }

    fn offer(&self) -> String {
        format!("add the Rust target {} with rustup", self.name)
    }

    /// Adds the target unless it is installed.
    fn add(&self) -> anyhow::Result<()> {
        if self.installed {
            return Ok(());
        }
        outln!("Adding the Rust target {} …", self.name);
        let added = Command::new("rustup")
            .args(["target", "add", self.name])
            .status()
            .context("cannot run rustup")?;
        if !added.success() {
            bail!(
                "`rustup target add {0}` failed ({added}; its output is above): the functions \
                 cannot be built for {0} here. Run it again once rustup can download the target, \
                 or choose the --architecture whose target is installed",
                self.name
            );
        }
        Ok(())
    }
}

/// Whether tgq may install: given (`--yes`), to be asked (a terminal), or not to be had.
enum Consent {
    Given,
    Ask,
    Unavailable,
}

impl Consent {
    fn from(yes: bool) -> Self {
        match (yes, std::io::stdin().is_terminal()) {
            (true, _) => Consent::Given,
            (false, true) => Consent::Ask,
            (false, false) => Consent::Unavailable,
        }
    }

    /// Ok when each of `wanted` may be done.
    fn allow(&self, wanted: &[String]) -> anyhow::Result<()> {
        let what = wanted.join(", and ");
        match self {
            Consent::Given => Ok(()),
            Consent::Unavailable => bail!(
                "nothing was installed: tgq would {what}, and there is no terminal to ask on; \
                 run again with --yes to install without asking"
            ),
            Consent::Ask => {
                eprint!("tgq will {what}. Go on? [y/N] ");
                std::io::stderr().flush()?;
                let mut answer = String::new();
                std::io::stdin().lock().read_line(&mut answer)?;
                match answer.trim() {
                    "y" | "Y" | "yes" | "Yes" => Ok(()),
                    _ => bail!("nothing was installed: declined"),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pins_are_those_the_suite_tests() {
        let suite = include_str!("../../../../requirements-test.txt");
        for (package, version, _) in PINNED {
            let pin = format!("{package}=={version}");
            assert!(
                suite.lines().any(|line| line.trim() == pin),
                "{pin} is not in requirements-test.txt"
            );
        }
    }

    #[test]
    fn the_tools_are_named_as_users_know_them() {
        assert_eq!(
            listed(),
            "the SAM CLI 1.170.0, cargo-lambda 1.9.2 and zig 0.17.1"
        );
    }
}
