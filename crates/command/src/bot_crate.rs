//! The installed `tgq` in a bot crate's folder (one `tgq new` made): the command runs as that
//! crate's own binary (`cargo run -- ARGS`, with `--features aws` for what acts on AWS), so `tgq local`, `tgq bots add` and `tgq webhook set`
//! serve and ask the crate's handlers, not those built into `tgq`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Set for the bot crate's binary the installed `tgq` started: it runs the command itself.
const STARTED_BY_TGQ: &str = "TGQ_STARTED_IN_BOT_CRATE";

/// The commands the installed `tgq` keeps: they make or equip a crate rather than run a bot.
const OWN_COMMANDS: [&str; 4] = ["new", "setup", "--version", "-V"];

/// When the current directory is in a bot crate, runs this process's command as that crate's
/// binary, through `cargo run` (which builds it first): on Unix the process becomes cargo, then
/// the bot's binary, so signals reach the bot. Outside one, refuses `tgq local` unless it runs in
/// tgq's repository or `TGQ_HANDLER` names the handler. `None` when the command is this process's
/// to run.
pub fn run_in_bot_crate() -> Option<ExitCode> {
    if std::env::var_os(STARTED_BY_TGQ).is_some() {
        return None;
    }
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let first = args.first().and_then(|arg| arg.to_str());
    if first.is_none_or(|command| OWN_COMMANDS.contains(&command)) {
        return None;
    }
    let here = std::env::current_dir().ok()?;
    let Some(manifest) = bot_crate_around(&here) else {
        return refused_outside(&args, &here);
    };
    // The AWS SDK is compiled into the crate's binary only for the commands that act on AWS.
    let features: &[&str] = match on_aws(&args) {
        Some(_) if declares_aws(&manifest) => &["--features", "aws"],
        Some(what) => {
            errln!(
                "error: {what} acts on AWS, which the bot crate of {} builds with its `aws` \
                 feature, and its Cargo.toml declares none that turns on `tgq/aws`: add \
                 `aws = [\"tgq/aws\"]` under [features] (as `tgq new` writes it); nothing was \
                 changed",
                manifest.display()
            );
            return Some(ExitCode::FAILURE);
        }
        None => &[],
    };
    errln!(
        "tgq: running the bot crate of {} (cargo run {}-- …)",
        manifest.display(),
        features
            .iter()
            .map(|arg| format!("{arg} "))
            .collect::<String>()
    );
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = std::process::Command::new(cargo);
    command
        .args(["run", "--manifest-path"])
        .arg(&manifest)
        .args(features)
        .arg("--")
        .args(&args)
        .env(STARTED_BY_TGQ, "1");
    #[cfg(unix)]
    let error = std::os::unix::process::CommandExt::exec(&mut command);
    #[cfg(not(unix))]
    let error = match command.status() {
        Ok(status) => {
            let code = status
                .code()
                .and_then(|c| u8::try_from(c).ok())
                .unwrap_or(1);
            return Some(ExitCode::from(code));
        }
        Err(error) => error,
    };
    errln!(
        "error: cannot run cargo to build and run the bot crate of {}: {error}",
        manifest.display()
    );
    Some(ExitCode::FAILURE)
}

/// What of the command acts on AWS (`deploy`, `destroy`, `poll`, or an option naming a stack or
/// its resources, as in `status --stack`), so that the bot crate's binary must be built with its
/// `aws` feature. A request for help acts on nothing: the crate's binary answers it as it is.
fn on_aws(args: &[OsString]) -> Option<String> {
    const COMMANDS: [&str; 3] = ["deploy", "destroy", "poll"];
    const OPTIONS: [&str; 4] = ["--stack", "--table", "--queue-url", "--dlq-url"];
    if asks_for_help(args) {
        return None;
    }
    let args: Vec<&str> = args.iter().filter_map(|arg| arg.to_str()).collect();
    let command = *args.first()?;
    if COMMANDS.contains(&command) {
        return Some(command.to_owned());
    }
    let option = args.iter().find_map(|arg| {
        OPTIONS.into_iter().find(|option| {
            arg.strip_prefix(option)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('='))
        })
    })?;
    Some(format!("{command} {option}"))
}

/// Whether the command line asks for help (`-h`, `--help`), which acts on nothing.
fn asks_for_help(args: &[OsString]) -> bool {
    args.iter().any(|arg| arg == "--help" || arg == "-h")
}

/// Whether a bot crate's manifest declares an `aws` feature that turns on the `tgq` crate's, as
/// `tgq new` writes it: `aws = ["tgq/aws"]` under `[features]` (its list may span lines).
fn declares_aws(manifest: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(manifest) else {
        return false;
    };
    manifest_table(&text, "features")
        .iter()
        .any(|(key, value)| key == "aws" && value.contains("\"tgq/aws\""))
}

/// The entries of a manifest's `[name]` table, each key (unquoted) with its value's text, read as
/// `tgq new` and `cargo new` write manifests: comments are left out, a line at the top level
/// starts a table or an entry, and a list open across lines keeps the lines after it in its entry.
pub(crate) fn manifest_table(text: &str, name: &str) -> Vec<(String, String)> {
    let mut entries: Vec<(String, String)> = Vec::new();
    let (mut inside, mut depth) = (false, 0usize);
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if depth == 0 && line.starts_with('[') {
            inside = line.trim_matches(['[', ']', ' ']) == name;
            continue;
        }
        let top = depth == 0;
        depth = (depth + line.matches('[').count()).saturating_sub(line.matches(']').count());
        if !inside {
            continue;
        }
        match (top, line.split_once('='), entries.last_mut()) {
            (true, Some((key, value)), _) => {
                entries.push((
                    key.trim().trim_matches('"').to_owned(),
                    value.trim().to_owned(),
                ));
            }
            (false, _, Some((_, value))) => value.push_str(line),
            _ => {}
        }
    }
    entries
}

/// `tgq local` of the installed `tgq` outside any bot crate and outside tgq's repository, with no
/// `TGQ_HANDLER` naming a handler: refused, saying what it looked for, before anything is written.
/// It would run the example bot built into the command, which is nobody's bot.
fn refused_outside(args: &[OsString], here: &Path) -> Option<ExitCode> {
    let local = args.first().is_some_and(|command| command == "local");
    if !local
        || asks_for_help(args)
        || std::env::var_os("TGQ_HANDLER").is_some()
        || in_tgq_repository(here)
    {
        return None;
    }
    errln!(
        "error: tgq local runs the bot of the crate it is in, and {} is in none: it looked for {}. \
         TGQ_HANDLER=echo runs tgq's built-in echo bot here instead; nothing was written",
        here.display(),
        BotCrate::LOOKED_FOR
    );
    Some(ExitCode::FAILURE)
}

/// Whether `dir` is in a checkout of tgq's repository, whose `tgq` runs the example bot of `bot/`.
fn in_tgq_repository(dir: &Path) -> bool {
    dir.ancestors().any(|d| {
        std::fs::read_to_string(d.join("cli/Cargo.toml"))
            .is_ok_and(|manifest| manifest.contains("name = \"tgq-cli\""))
    })
}

/// The manifest of the bot crate `dir` is in: the nearest `Cargo.toml` at or above it, when it is
/// a package whose `src/main.rs` runs `tgq::main`. A nearer manifest of anything else (a
/// workspace's root, another crate) means `dir` is not in a bot crate.
fn bot_crate_around(dir: &Path) -> Option<PathBuf> {
    BotCrate::around(dir).map(|found| found.root.join("Cargo.toml"))
}

/// A bot crate: a package whose binary (`src/main.rs`) runs `tgq::main`, as `tgq new` makes one.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BotCrate {
    /// The folder of its `Cargo.toml`.
    pub(crate) root: PathBuf,
    /// Its package's name, which is its binary's.
    pub(crate) name: String,
}

impl BotCrate {
    /// What the bot crate commands look for, for a message that says they found nothing.
    pub(crate) const LOOKED_FOR: &'static str = "a Cargo.toml at or above it whose package's \
        src/main.rs calls tgq::main (`tgq new NAME` creates such a crate)";

    /// The bot crate `dir` is in: the nearest `Cargo.toml` at or above it, when it is a package
    /// whose `src/main.rs` runs `tgq::main`. A nearer manifest of anything else (a workspace's
    /// root, another crate) means `dir` is not in a bot crate.
    pub(crate) fn around(dir: &Path) -> Option<Self> {
        let root = dir.ancestors().find(|d| d.join("Cargo.toml").is_file())?;
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).ok()?;
        let main = std::fs::read_to_string(root.join("src/main.rs")).unwrap_or_default();
        if !main.contains("tgq::main(") {
            return None;
        }
        Some(Self {
            root: root.to_path_buf(),
            name: package_name(&manifest)?,
        })
    }
}

/// The `name` of a manifest's `[package]` table.
fn package_name(manifest: &str) -> Option<String> {
    manifest_table(manifest, "package")
        .into_iter()
        .find_map(|(key, value)| (key == "name").then(|| value.trim_matches('"').to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, path: &str, text: &str) {
        let file = dir.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, text).unwrap();
    }

    #[test]
    fn a_bot_crate_is_found_from_any_folder_inside_it_and_nothing_else_is_one() {
        let root = tempfile::tempdir().unwrap();
        let bot = root.path().join("bot");
        write(&bot, "Cargo.toml", "[package]\nname = \"bot\"\n");
        write(
            &bot,
            "src/main.rs",
            "fn main() { tgq::main(bot::handlers) }",
        );
        std::fs::create_dir_all(bot.join("src/deep")).unwrap();
        assert_eq!(
            bot_crate_around(&bot.join("src/deep")),
            Some(bot.join("Cargo.toml"))
        );
        assert_eq!(
            BotCrate::around(&bot).map(|found| found.name),
            Some("bot".to_owned())
        );

        // A library of handlers (no binary), the tgq binary's own crate, a workspace's root.
        let library = root.path().join("library");
        write(&library, "Cargo.toml", "[package]\nname = \"library\"\n");
        write(&library, "src/lib.rs", "pub fn handlers() {}");
        let command = root.path().join("command");
        write(&command, "Cargo.toml", "[package]\nname = \"tgq-cli\"\n");
        write(
            &command,
            "src/main.rs",
            "fn main() { tgq_command::main(tgq_bot::handlers) }",
        );
        let workspace = root.path().join("workspace");
        write(
            &workspace,
            "Cargo.toml",
            "[workspace]\nmembers = [\"bot\"]\n",
        );
        write(
            &workspace,
            "src/main.rs",
            "fn main() { tgq::main(x::handlers) }",
        );
        for dir in [&library, &command, &workspace, &root.path().to_path_buf()] {
            assert_eq!(bot_crate_around(dir), None, "{}", dir.display());
        }
    }

    #[test]
    fn the_commands_that_act_on_aws_are_those_that_deploy_poll_or_name_a_stack() {
        let args = |line: &str| line.split(' ').map(OsString::from).collect::<Vec<_>>();
        for (aws, what) in [
            ("deploy", "deploy"),
            ("destroy --yes", "destroy"),
            ("poll", "poll"),
            ("status --stack shop", "status --stack"),
            ("dlq list --stack=shop", "dlq --stack"),
            (
                "broadcast start --table t --queue-url q --dlq-url d",
                "broadcast --table",
            ),
            ("webhook set --stack shop", "webhook --stack"),
            ("bots list --stack shop", "bots --stack"),
        ] {
            assert_eq!(on_aws(&args(aws)).as_deref(), Some(what), "{aws}");
        }
        for local in [
            "local --demo --exit",
            "status",
            "dlq list --data-dir .tgq",
            "status --stacks",
            "bots list",
            "new shop",
            "deploy --help",
            "status --stack shop -h",
        ] {
            assert_eq!(on_aws(&args(local)), None, "{local}");
        }
    }

    #[test]
    fn the_aws_feature_is_read_from_the_features_table_alone() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = dir.path().join("Cargo.toml");
        let cases = [
            ("[features]\naws = [\"tgq/aws\"]\n", true),
            ("[features]\ndefault = [\"command\"]\naws=[\"tgq/aws\"]\n[dependencies]\n", true),
            ("[ features ]  # ours\n\"aws\" = [\n  \"tgq/aws\",\n]\n", true),
            ("# [features] below\n[features]\ncommand = [\n  \"tgq/command\",\n]\naws = [\"tgq/aws\"]\n", true),
            ("[features]\naws = []\nlambda = [\"tgq/lambda\", \"tgq/aws\"]\n", false),
            ("[features]\ncommand = [\"tgq/command\"]\n\n[dependencies]\naws = \"tgq/aws\"\n", false),
            ("[features]\n# aws = [\"tgq/aws\"]\n", false),
            ("[package]\nname = \"a\"\n", false),
        ];
        for (text, declared) in cases {
            std::fs::write(&manifest, text).unwrap();
            assert_eq!(declares_aws(&manifest), declared, "{text}");
        }
    }
}
