//! The installed `tgq` in a bot crate's folder (one `tgq new` made): the command runs as that
//! crate's own binary (`cargo run -- ARGS`), so `tgq local`, `tgq bots add` and `tgq webhook set`
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
/// the bot's binary, so signals reach the bot; `None` when the command is not for a bot crate.
pub fn run_in_bot_crate() -> Option<ExitCode> {
    if std::env::var_os(STARTED_BY_TGQ).is_some() {
        return None;
    }
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let first = args.first().and_then(|arg| arg.to_str());
    if first.is_none_or(|command| OWN_COMMANDS.contains(&command)) {
        return None;
    }
    let manifest = bot_crate_around(&std::env::current_dir().ok()?)?;
    errln!(
        "tgq: running the bot crate of {} (cargo run -- …)",
        manifest.display()
    );
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = std::process::Command::new(cargo);
    command
        .args(["run", "--manifest-path"])
        .arg(&manifest)
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

/// The manifest of the bot crate `dir` is in: the nearest `Cargo.toml` at or above it, when it is
/// a package whose `src/main.rs` runs `tgq::main`. A nearer manifest of anything else (a
/// workspace's root, another crate) means `dir` is not in a bot crate.
fn bot_crate_around(dir: &Path) -> Option<PathBuf> {
    let root = dir.ancestors().find(|d| d.join("Cargo.toml").is_file())?;
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).ok()?;
    let main = std::fs::read_to_string(root.join("src/main.rs")).unwrap_or_default();
    (manifest.contains("[package]") && main.contains("tgq::main(")).then(|| root.join("Cargo.toml"))
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
}
