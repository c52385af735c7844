//! `tgq new NAME`: a bot crate of its own, outside this repository. Its only tgq dependency is the
//! `tgq` crate (its binary is the `tgq` command for its handlers by default, and its Lambda
//! functions in the build cargo-lambda makes), its tests go through `tgq-test`, and it builds and
//! passes its tests as written.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use clap::Args;

/// The files of a new crate: (path in the crate, template). `{name}`, `{crate_name}`, `{stack}`,
/// `{rust_version}`, `{source_tgq}` and `{source_kit}` are filled in.
const FILES: [(&str, &str); 6] = [
    ("Cargo.toml", include_str!("new/Cargo.toml.in")),
    ("src/lib.rs", include_str!("new/lib.rs.in")),
    ("src/main.rs", include_str!("new/main.rs.in")),
    ("tests/bot.rs", include_str!("new/bot.rs.in")),
    (".gitignore", include_str!("new/gitignore.in")),
    ("README.md", include_str!("new/README.md.in")),
];

/// The longest crate name crates.io takes.
const MAX_NAME: usize = 64;

/// Names a bot crate cannot take: Rust's keywords, and its own dependencies' names.
const TAKEN: &[&str] = &[
    "tgq", "tgq-test", "tgq_test", "serde", "tokio", "test", "std", "core", "alloc", "self",
    "super", "crate", "fn", "mod", "use", "type", "struct", "enum", "impl", "trait", "async",
    "await", "loop", "match", "if", "else", "for", "while", "let", "const", "static", "pub",
];

#[derive(Debug, Args)]
pub struct NewArgs {
    /// The crate's name, and its folder's (made in the current directory).
    name: String,
    /// A checkout of tgq to depend on by path (the `tgq` crate and its test kit in it); without
    /// it, the crate depends on tgq's repository by git.
    #[arg(long, value_name = "DIR")]
    tgq_path: Option<PathBuf>,
}

/// `tgq new`.
pub fn run(args: NewArgs) -> anyhow::Result<()> {
    check_name(&args.name)?;
    let dir = PathBuf::from(&args.name);
    let sources = match &args.tgq_path {
        Some(path) => by_path(path)?,
        None => by_git(),
    };
    if dir.exists() {
        let empty = std::fs::read_dir(&dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .next()
            .is_none();
        if !empty {
            bail!(
                "{} exists and is not empty: give a new name, or remove the folder",
                dir.display()
            );
        }
    }
    write_crate(&dir, &args.name, &sources)?;
    outln!("Created the bot crate {} in {}/", args.name, dir.display());
    outln!("  cd {}", args.name);
    outln!("  cargo test                          # the bot's tests");
    outln!("  cargo run -- local --demo --exit    # the whole pipeline, offline, then a summary");
    outln!("  tgq local --poll                    # the bot live on Telegram (TELEGRAM_BOT_TOKEN)");
    let deploy = format!("tgq deploy --stack {}", args.name.replace('_', "-"));
    outln!("  {deploy:<35} # the bot on AWS: both functions built from this crate");
    Ok(())
}

/// Where the new crate's `tgq` and `tgq-test` come from, as the inside of a dependency's table, and
/// the lock file of the checkout they are in: the versions tgq's own tests pass with.
struct Sources {
    tgq: String,
    kit: String,
    lock: Option<PathBuf>,
}

fn by_path(checkout: &Path) -> anyhow::Result<Sources> {
    let root = checkout
        .canonicalize()
        .with_context(|| format!("--tgq-path {}", checkout.display()))?;
    let (tgq, kit) = (root.join("crates/tgq"), root.join("testing/kit"));
    for crate_dir in [&tgq, &kit] {
        if !crate_dir.join("Cargo.toml").is_file() {
            bail!(
                "--tgq-path {} is not a checkout of tgq: it has no {}",
                checkout.display(),
                crate_dir.join("Cargo.toml").display()
            );
        }
    }
    let path = |dir: &Path| format!("path = {}", toml_string(&dir.display().to_string()));
    let lock = Some(root.join("Cargo.lock")).filter(|lock| lock.is_file());
    Ok(Sources {
        tgq: path(&tgq),
        kit: path(&kit),
        lock,
    })
}

fn by_git() -> Sources {
    let git = format!("git = {}", toml_string(env!("CARGO_PKG_REPOSITORY")));
    Sources {
        tgq: git.clone(),
        kit: git,
        lock: None,
    }
}

/// `text` as a TOML basic string (also how the SAM CLI reads a quoted parameter value).
pub(crate) fn toml_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Cargo's rule for a package name, and the names a bot crate cannot take.
fn check_name(name: &str) -> anyhow::Result<()> {
    let rule =
        "a crate name is ASCII letters, digits, `-` and `_`, starts with a letter, and is at \
                most 64 characters";
    let mut chars = name.chars();
    let first_is_letter = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    let rest_allowed = chars.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !first_is_letter || !rest_allowed || name.len() > MAX_NAME {
        bail!("{name:?} is not a crate name: {rule}");
    }
    if TAKEN.contains(&name) {
        bail!(
            "{name:?} is taken: it is a Rust keyword or a dependency of the crate; choose another"
        );
    }
    Ok(())
}

fn write_crate(dir: &Path, name: &str, sources: &Sources) -> anyhow::Result<()> {
    let crate_name = name.replace('-', "_");
    for (path, template) in FILES {
        let text = template
            .replace("{name}", name)
            .replace("{crate_name}", &crate_name)
            // CloudFormation's stack names take `-` but not `_`.
            .replace("{stack}", &name.replace('_', "-"))
            .replace("{rust_version}", env!("CARGO_PKG_RUST_VERSION"))
            .replace("{source_tgq}", &sources.tgq)
            .replace("{source_kit}", &sources.kit);
        let file = dir.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&file, text).with_context(|| format!("writing {}", file.display()))?;
    }
    // Cargo keeps the versions a lock file names that the crate still uses, and drops the rest.
    if let Some(lock) = &sources.lock {
        std::fs::copy(lock, dir.join("Cargo.lock"))
            .with_context(|| format!("copying {}", lock.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_held_to_cargo_s_rule_and_the_crate_s_own_dependencies() {
        for good in ["echo", "my-bot", "shop_2"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "2fa",
            "-bot",
            "my bot",
            "bot!",
            "ünïcode",
            &"b".repeat(65),
        ] {
            let error = check_name(bad).unwrap_err().to_string();
            assert!(
                error.contains("is not a crate name: a crate name is"),
                "{bad}: {error}"
            );
        }
        for taken in ["tgq", "tgq-test", "serde", "fn"] {
            let error = check_name(taken).unwrap_err().to_string();
            assert!(error.contains("is taken"), "{taken}: {error}");
        }
    }

    /// The entries of a manifest's `[NAME]` table.
    fn table(manifest: &str, name: &str) -> Vec<(String, String)> {
        let entries = crate::bot_crate::manifest_table(manifest, name);
        assert!(!entries.is_empty(), "a [{name}] table");
        entries
    }

    fn release_profile(manifest: &str) -> Vec<(String, String)> {
        table(manifest, "profile.release")
    }

    #[test]
    fn tgq_s_own_bots_have_the_features_of_a_new_crate() {
        let new = FILES[0].1;
        for (bot, manifest) in [
            ("bot", include_str!("../../../bot/Cargo.toml")),
            (
                "examples/todo",
                include_str!("../../../examples/todo/Cargo.toml"),
            ),
        ] {
            for name in ["features", "package.metadata.lambda.build"] {
                assert_eq!(table(manifest, name), table(new, name), "{bot}'s [{name}]");
            }
        }
        assert!(table(new, "features").contains(&("aws".to_owned(), "[\"tgq/aws\"]".to_owned())));
    }

    #[test]
    fn a_new_crate_s_functions_build_with_the_release_profile_tgq_s_functions_ship_with() {
        let workspace = include_str!("../../../Cargo.toml");
        let new = release_profile(FILES[0].1);
        assert_eq!(new, release_profile(workspace));
        assert!(
            new.contains(&("panic".to_owned(), "\"unwind\"".to_owned())),
            "{new:?}"
        );
    }

    #[test]
    fn every_placeholder_of_the_templates_is_filled() {
        let dir = tempfile::tempdir().unwrap();
        let sources = Sources {
            tgq: "path = \"/tgq/crates/tgq\"".into(),
            kit: "path = \"/tgq/testing/kit\"".into(),
            lock: None,
        };
        write_crate(dir.path(), "my-bot", &sources).unwrap();
        for (path, _) in FILES {
            let text = std::fs::read_to_string(dir.path().join(path)).unwrap();
            let placeholders = [
                "{name}",
                "{crate_name}",
                "{stack}",
                "{rust_version}",
                "{source_tgq}",
                "{source_kit}",
            ];
            for placeholder in placeholders {
                assert!(!text.contains(placeholder), "{path} keeps {placeholder}");
            }
        }
        let main = std::fs::read_to_string(dir.path().join("src/main.rs")).unwrap();
        assert!(main.contains("tgq::main(my_bot::handlers)"), "{main}");
        let manifest = std::fs::read_to_string(dir.path().join("Cargo.toml")).unwrap();
        assert!(manifest.contains("name = \"my-bot\""), "{manifest}");
        assert!(
            manifest.contains("tgq = { path = \"/tgq/crates/tgq\" }"),
            "{manifest}"
        );
        // The command by default; the functions alone in the build cargo-lambda makes.
        for line in [
            "default = [\"command\"]",
            "command = [\"tgq/command\"]",
            "aws = [\"tgq/aws\"]",
            "lambda = [\"tgq/lambda\"]",
            "[package.metadata.lambda.build]\nno_default_features = true\nfeatures = [\"lambda\"]",
        ] {
            assert!(manifest.contains(line), "{line} in {manifest}");
        }
    }
}
