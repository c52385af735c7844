//! The SAM application `tgq deploy` builds and deploys: the `template.yaml` of the folder it runs
//! in (this repository's reference application), or else the bot crate the folder is in, with the
//! author's own `template.yaml` in its folder or, without one, a template `tgq deploy` renders from
//! the reference one so that both functions are built from the crate's own binary
//! (docs/design/local.md, "Which bot a command runs").

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};

use crate::bot_crate::BotCrate;

/// The template a folder's own SAM application keeps.
const TEMPLATE: &str = "template.yaml";

/// Where, in a bot crate, `tgq deploy` writes the template it renders: under `target/`, which
/// the crate's `.gitignore` leaves out, so the crate keeps no copy to fall behind tgq's.
const RENDERED: &str = "target/tgq/template.yaml";

/// The reference application's template, which a bot crate's is made from.
const REFERENCE: &str = include_str!("../../../../template.yaml");

/// A SAM application to build and deploy.
#[derive(Debug)]
pub(crate) struct Application {
    /// Where the SAM CLI runs: its `.aws-sam/` and `samconfig.toml` are here.
    pub(crate) dir: PathBuf,
    /// The template `sam build` reads, relative to [`dir`](Self::dir).
    template: &'static str,
    /// The bot crate whose template is rendered before the build, if it is one.
    bot_crate: Option<BotCrate>,
}

impl Application {
    /// The application of the folder `here`, or the reason there is none, naming what was looked
    /// for. Nothing is written.
    pub(crate) fn of(here: &Path) -> anyhow::Result<Self> {
        if here.join(TEMPLATE).is_file() {
            return Ok(Self {
                dir: here.to_path_buf(),
                template: TEMPLATE,
                bot_crate: None,
            });
        }
        match BotCrate::around(here) {
            // The author's own template, in the crate's folder, comes first.
            Some(found) if found.root.join(TEMPLATE).is_file() => Ok(Self {
                dir: found.root,
                template: TEMPLATE,
                bot_crate: None,
            }),
            Some(found) => Ok(Self {
                dir: found.root.clone(),
                template: RENDERED,
                bot_crate: Some(found),
            }),
            None => bail!(
                "tgq deploy deploys a SAM application, and {} has none: it looked for {TEMPLATE} \
                 there (as tgq's repository has), then for {}; nothing was written",
                here.display(),
                BotCrate::LOOKED_FOR
            ),
        }
    }

    /// The `sam build` arguments that name the template: none for the SAM CLI's default,
    /// `template.yaml` in the folder it runs in.
    pub(crate) fn template_file(&self) -> Option<[&'static str; 2]> {
        (self.template != TEMPLATE).then_some(["--template-file", self.template])
    }

    /// The bot crate's name, when the application is one's.
    pub(crate) fn bot_crate(&self) -> Option<&str> {
        self.bot_crate.as_ref().map(|found| found.name.as_str())
    }

    /// Writes a bot crate's template from the reference one; a folder's own template is left as
    /// it is.
    pub(crate) fn render(&self) -> anyhow::Result<()> {
        let Some(found) = &self.bot_crate else {
            return Ok(());
        };
        let text = crate_template(REFERENCE, &found.name)?;
        let path = self.dir.join(RENDERED);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    }
}

/// The reference template made into the bot crate `bin`'s: both functions are built from the
/// crate's binary, in the crate's folder (two up from [`RENDERED`]), and each is told by
/// `TGQ_FUNCTION` which of them it is. Everything else (resources, parameters, alarms, outputs)
/// is the reference application's, so a version bump of tgq brings its template along.
fn crate_template(reference: &str, bin: &str) -> anyhow::Result<String> {
    let function = tgq_core::config::FUNCTION;
    // The worker's first variable, and the webhook's: each function's `Variables` begin with it.
    let worker_first = "TELEGRAM_BOT_TOKEN_PARAM: !Ref BotTokenParameterName\n";
    let webhook_first = "TGQ_WEBHOOK_SECRET_PARAM:";
    let variables = "        Variables:\n          ";
    let edits = [
        (
            "        Binary: webhook\n".to_owned(),
            format!("        Binary: {bin}\n"),
            1,
        ),
        (
            "        Binary: worker\n".to_owned(),
            format!("        Binary: {bin}\n"),
            1,
        ),
        (
            "      CodeUri: ./\n".to_owned(),
            "      CodeUri: ../../\n".to_owned(),
            2,
        ),
        (
            format!("{variables}{webhook_first}"),
            format!("{variables}{function}: webhook\n          {webhook_first}"),
            1,
        ),
        (
            format!("{variables}{worker_first}"),
            format!("{variables}{function}: worker\n          {worker_first}"),
            1,
        ),
    ];
    let mut text = format!(
        "# The SAM application of the bot crate {bin}, rendered by `tgq deploy` from tgq {}'s \
         template.yaml\n# at each deploy (edits here are lost): a template.yaml in the crate's \
         folder is deployed instead.\n",
        env!("CARGO_PKG_VERSION")
    );
    text.push_str(reference);
    for (from, to, times) in edits {
        let found = text.matches(from.as_str()).count();
        if found != times {
            bail!(
                "tgq's template.yaml has {found} of {from:?} where rendering a bot crate's \
                 template expects {times}: this build of tgq is inconsistent"
            );
        }
        text = text.replace(&from, &to);
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bot_crate_s_template_builds_both_functions_from_its_binary_and_names_each() {
        let text = crate_template(REFERENCE, "my-bot").unwrap();
        assert_eq!(text.matches("        Binary: my-bot\n").count(), 2);
        assert_eq!(text.matches("      CodeUri: ../../\n").count(), 2);
        assert!(!text.contains("Binary: webhook") && !text.contains("Binary: worker"));
        assert!(!text.contains("CodeUri: ./\n"));
        let webhook = text.split("  WebhookFunction:\n").nth(1).unwrap();
        let webhook = webhook.split("\n  WorkerFunction:\n").next().unwrap();
        assert!(webhook.contains("TGQ_FUNCTION: webhook\n"), "{webhook}");
        let worker = text.split("\n  WorkerFunction:\n").nth(1).unwrap();
        let worker = worker.split("\n\n  #").next().unwrap();
        assert!(worker.contains("TGQ_FUNCTION: worker\n"), "{worker}");
        // Everything else is the reference application's.
        assert_eq!(
            text.lines().count(),
            REFERENCE.lines().count() + 2 + 2,
            "two lines of header and one variable a function"
        );
    }

    #[test]
    fn a_template_the_renderer_does_not_know_is_refused_not_half_rendered() {
        let changed = REFERENCE.replace("        Binary: worker\n", "        Binary: w\n");
        let error = crate_template(&changed, "my-bot").unwrap_err().to_string();
        assert!(
            error.contains("has 0 of") && error.contains("Binary: worker"),
            "{error}"
        );
    }

    #[test]
    fn a_folder_s_own_template_comes_first_then_the_bot_crate_around_it() {
        let root = tempfile::tempdir().unwrap();
        let bot = root.path().join("my-bot");
        std::fs::create_dir_all(bot.join("src")).unwrap();
        std::fs::write(bot.join("Cargo.toml"), "[package]\nname = \"my-bot\"\n").unwrap();
        std::fs::write(
            bot.join("src/main.rs"),
            "fn main() -> std::process::ExitCode { tgq::main(my_bot::handlers) }",
        )
        .unwrap();

        let from_src = Application::of(&bot.join("src")).unwrap();
        assert_eq!(from_src.dir, bot);
        assert_eq!(from_src.template, RENDERED);
        assert_eq!(from_src.bot_crate(), Some("my-bot"));
        from_src.render().unwrap();
        let rendered = std::fs::read_to_string(bot.join(RENDERED)).unwrap();
        assert!(rendered.contains("Binary: my-bot"));

        std::fs::write(bot.join(TEMPLATE), "its own").unwrap();
        let own = Application::of(&bot.join("src")).unwrap();
        assert_eq!((own.template, own.bot_crate()), (TEMPLATE, None));
        assert_eq!(own.dir, bot);
        own.render().unwrap();
        assert_eq!(
            std::fs::read_to_string(bot.join(TEMPLATE)).unwrap(),
            "its own"
        );

        let error = Application::of(root.path()).unwrap_err().to_string();
        assert!(
            error.contains("looked for template.yaml")
                && error.contains("tgq new NAME")
                && error.contains("nothing was written"),
            "{error}"
        );
    }
}
