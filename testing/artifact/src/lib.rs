//! The deployable artifacts `scripts/package` builds, as `sam build` and `sam deploy` make them:
//! `.aws-sam/build/<Function>/bootstrap` for each function of `template.yaml`, and
//! `.aws-sam/package/<Function>.zip`, zipped by the SAM CLI's own code. The tests in `tests/` check
//! them; the cold-start bench (`tools/coldstart`) runs them.

pub mod elf;

use std::fs::File;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use serde_yaml::Value;

/// Where `sam build` puts each function's directory, relative to the workspace root.
pub const BUILD_DIR: &str = ".aws-sam/build";
/// Where `scripts/package` puts each function's zip, relative to the workspace root.
pub const PACKAGE_DIR: &str = ".aws-sam/package";
/// The executable Lambda's `provided.al2023` runtime starts.
pub const BOOTSTRAP: &str = "bootstrap";

/// The workspace root (this crate lives in `testing/artifact`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A function of `template.yaml`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    /// The logical id, e.g. `WebhookFunction`: the name of its build directory and zip.
    pub logical_id: String,
    /// The Cargo binary built into its `bootstrap` (`Metadata.BuildProperties.Binary`).
    pub binary: String,
}

impl Function {
    /// `.aws-sam/build/<logical id>` under `root`.
    pub fn build_dir(&self, root: &Path) -> PathBuf {
        root.join(BUILD_DIR).join(&self.logical_id)
    }

    /// `.aws-sam/package/<logical id>.zip` under `root`.
    pub fn zip(&self, root: &Path) -> PathBuf {
        root.join(PACKAGE_DIR)
            .join(format!("{}.zip", self.logical_id))
    }
}

/// Every `AWS::Serverless::Function` of a SAM template, by logical id.
pub fn functions(template: &str) -> anyhow::Result<Vec<Function>> {
    let template: Value = serde_yaml::from_str(template).context("template.yaml is not YAML")?;
    let resources = template["Resources"]
        .as_mapping()
        .context("the template has no Resources")?;
    let mut functions = Vec::new();
    for (name, resource) in resources {
        if resource["Type"].as_str() != Some("AWS::Serverless::Function") {
            continue;
        }
        let logical_id = name.as_str().context("a resource name is not text")?;
        let binary = resource["Metadata"]["BuildProperties"]["Binary"]
            .as_str()
            .with_context(|| format!("{logical_id} has no Metadata.BuildProperties.Binary"))?;
        functions.push(Function {
            logical_id: logical_id.to_owned(),
            binary: binary.to_owned(),
        });
    }
    functions.sort_by(|a, b| a.logical_id.cmp(&b.logical_id));
    Ok(functions)
}

/// The functions of the workspace's `template.yaml`.
pub fn template_functions() -> anyhow::Result<Vec<Function>> {
    let path = workspace_root().join("template.yaml");
    let template =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    functions(&template)
}

/// One file in a function's zip.
#[derive(Clone, Debug)]
pub struct ZipEntry {
    pub name: String,
    /// Unix permission bits, when the zip records them.
    pub mode: Option<u32>,
    pub contents: Vec<u8>,
}

/// Every file in a zip, with its contents.
pub fn read_zip(path: &Path) -> anyhow::Result<Vec<ZipEntry>> {
    let file = File::open(path).with_context(|| {
        format!(
            "opening {} (run scripts/package to build the artifacts)",
            path.display()
        )
    })?;
    let mut archive =
        zip::ZipArchive::new(file).with_context(|| format!("{} is not a zip", path.display()))?;
    let mut entries = Vec::new();
    for index in 0..archive.len() {
        let mut entry = archive.by_index(index)?;
        if entry.is_dir() {
            continue;
        }
        let mut contents = Vec::new();
        entry.read_to_end(&mut contents)?;
        entries.push(ZipEntry {
            name: entry.name()?.into_owned(),
            mode: entry.unix_mode(),
            contents,
        });
    }
    Ok(entries)
}

/// The only file in a function's zip, which must be an executable `bootstrap`.
pub fn zipped_bootstrap(path: &Path) -> anyhow::Result<ZipEntry> {
    let mut entries = read_zip(path)?;
    let names: Vec<&str> = entries.iter().map(|entry| entry.name.as_str()).collect();
    if names != [BOOTSTRAP] {
        bail!("{} holds {names:?}, not just {BOOTSTRAP}", path.display());
    }
    let bootstrap = entries.remove(0);
    match bootstrap.mode {
        Some(mode) if mode & 0o111 == 0o111 => Ok(bootstrap),
        Some(mode) => bail!(
            "{BOOTSTRAP} in {} is not executable by everyone (mode {mode:o})",
            path.display()
        ),
        None => bail!("{BOOTSTRAP} in {} has no unix mode", path.display()),
    }
}
