//! Running `cargo` from a test: the environment a developer's shell would give it, and where the
//! workspace and its target directory are.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;

/// Variables `cargo test` sets for the test it runs, describing this package. Build scripts track
/// some of them (ring's reruns when `CARGO_MANIFEST_DIR` or `CARGO_PKG_NAME` changes), so a nested
/// `cargo` that inherited them would rebuild the TLS and AWS SDK stack, and the next plain build
/// would rebuild it back.
const TEST_RUN_VARS: [&str; 9] = [
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_MANIFEST_LINKS",
    "CARGO_CRATE_NAME",
    "CARGO_BIN_NAME",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_TARGET_TMPDIR",
    "CARGO_RUSTC_CURRENT_DIR",
    "OUT_DIR",
];

/// `cargo` in `dir`, with the environment a developer's shell would give it.
pub fn command(dir: &Path) -> Command {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut command = Command::new(cargo);
    command.current_dir(dir);
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_PKG_") || TEST_RUN_VARS.contains(&name.as_ref()) {
            command.env_remove(name.as_ref());
        }
    }
    command
}

/// The workspace this test was built from.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The target directory this test binary was built into (it runs from `<target>/<profile>/deps`).
pub fn target_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    exe.ancestors()
        .nth(3)
        .map(Path::to_owned)
        .context("the test binary is not inside <target>/<profile>/deps")
}
