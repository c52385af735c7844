//! `tgq deploy` and `tgq destroy`: from a clone and AWS credentials to a live bot in one command, and
//! back. `deploy` checks the tools, keeps the bot token and a generated webhook secret as SSM
//! SecureString parameters (written only when absent, never printed), builds and deploys the stack
//! through the SAM CLI, sets the webhook with the handlers' update kinds, confirms it with
//! getWebhookInfo and ends with `tgq status`. Every step can be run again: a second run updates the
//! stack in place, and a first deploy that rolled back is deleted before the next one.

use clap::{Args, ValueEnum};

#[cfg(feature = "aws")]
mod stack;

#[cfg(feature = "aws")]
pub use stack::{deploy, destroy};

/// The instruction set the functions are built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Architecture {
    /// Graviton: the template's default, cheaper per GB-second.
    Arm64,
    /// x86_64.
    #[value(name = "x86_64")]
    X86_64,
}

impl Architecture {
    pub(super) fn rust_target(self) -> &'static str {
        match self {
            Architecture::Arm64 => "aarch64-unknown-linux-gnu",
            Architecture::X86_64 => "x86_64-unknown-linux-gnu",
        }
    }
}

/// `tgq deploy`.
#[derive(Debug, Args)]
pub struct DeployArgs {
    /// The CloudFormation stack to create or update.
    #[arg(long, value_name = "NAME", default_value = "tgq")]
    stack: String,
    /// The AWS region [default: AWS_REGION, or the profile's].
    #[arg(long, value_name = "REGION")]
    region: Option<String>,
    /// The bot's id in record keys and message groups [default: the stack's BotId when it exists,
    /// else samconfig.toml's, else mybot].
    #[arg(long, value_name = "ID")]
    bot_id: Option<String>,
    /// The functions' instruction set.
    #[arg(long, value_enum, default_value_t = Architecture::Arm64)]
    architecture: Architecture,
    /// A template parameter, KEY=VALUE, over samconfig.toml's (repeat for more).
    #[arg(long = "parameter", value_name = "KEY=VALUE", value_parser = parameter)]
    parameters: Vec<(String, String)>,
    /// Deploy what `.aws-sam/build` holds, without `sam build`.
    #[arg(long)]
    no_build: bool,
    /// Install the tools that are missing (`tgq setup`'s) without asking.
    #[arg(long)]
    yes: bool,
}

/// `tgq destroy`.
#[derive(Debug, Args)]
pub struct DestroyArgs {
    /// The stack to delete.
    #[arg(long, value_name = "NAME", default_value = "tgq")]
    stack: String,
    /// The AWS region [default: AWS_REGION, or the profile's].
    #[arg(long, value_name = "REGION")]
    region: Option<String>,
    /// Delete the bot token and webhook secret parameters too.
    #[arg(long)]
    delete_parameters: bool,
    /// Do not ask first.
    #[arg(long)]
    yes: bool,
}

/// `KEY=VALUE`.
fn parameter(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

/// `tgq deploy` in a build without the AWS SDK: refused, saying how to run it.
#[cfg(not(feature = "aws"))]
pub async fn deploy(_: DeployArgs) -> anyhow::Result<()> {
    Err(crate::without_aws("tgq deploy"))
}

/// `tgq destroy` in a build without the AWS SDK: refused, saying how to run it.
#[cfg(not(feature = "aws"))]
pub async fn destroy(_: DestroyArgs) -> anyhow::Result<()> {
    Err(crate::without_aws("tgq destroy"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_key_equals_value() {
        assert_eq!(
            parameter("BotId=shop").unwrap(),
            ("BotId".to_owned(), "shop".to_owned())
        );
        assert_eq!(parameter("A=b=c").unwrap().1, "b=c");
        assert!(parameter("nothing").is_err());
        assert!(parameter("=x").is_err());
    }
}
