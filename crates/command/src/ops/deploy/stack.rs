//! What `tgq deploy` and `tgq destroy` do on AWS: the SSM parameters, the SAM CLI's build and
//! deploy, the webhook, and CloudFormation's stack (the `aws` feature).

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use aws_sdk_cloudformation::types::StackStatus;
use aws_sdk_ssm::types::ParameterType;
use rand::distr::{Alphanumeric, SampleString as _};
use secrecy::{ExposeSecret as _, SecretString};
use teloxide_core::payloads::{DeleteWebhook, GetMe};
use tgq_core::config::Vars;
use tgq_core::error::ErrorClass;
use tgq_telegram::HttpBotApi;

use super::{Architecture, DeployArgs, DestroyArgs};
use crate::ops::application::Application;
use crate::ops::setup::{self, Tools};
use crate::ops::target::{sign_in, Deployment};
use crate::ops::webhook;

/// How long one call to Telegram may take.
const TIMEOUT: Duration = Duration::from_secs(30);
/// How long `tgq destroy` (and the clean-up of a rolled-back first deploy) waits for CloudFormation.
const STACK_WAIT: Duration = Duration::from_secs(30 * 60);

impl Architecture {
    fn parameter(self) -> &'static str {
        match self {
            Architecture::Arm64 => "arm64",
            Architecture::X86_64 => "x86_64",
        }
    }
}

/// `samconfig.toml`'s deploy parameters (`parameter_overrides = "K=\"V\" …"`), if `dir` has
/// the file.
fn samconfig_parameters(dir: &std::path::Path) -> Vec<(String, String)> {
    let Ok(text) = std::fs::read_to_string(dir.join("samconfig.toml")) else {
        return Vec::new();
    };
    let Some(line) = text
        .split("[default.deploy.parameters]")
        .nth(1)
        .and_then(|section| section.split("\n[").next())
        .and_then(|section| {
            section
                .lines()
                .find(|line| line.trim_start().starts_with("parameter_overrides"))
        })
    else {
        return Vec::new();
    };
    let Some(value) = line
        .split_once('=')
        .map(|(_, value)| value.trim())
        .and_then(|value| value.strip_prefix('"'))
        .and_then(|value| value.strip_suffix('"'))
    else {
        return Vec::new();
    };
    let unescaped = value.replace("\\\"", "\"");
    let mut pairs = Vec::new();
    let mut rest = unescaped.as_str();
    while let Some((key, after)) = rest.trim_start().split_once("=\"") {
        let Some((value, next)) = after.split_once('"') else {
            break;
        };
        pairs.push((key.trim().to_owned(), value.to_owned()));
        rest = next;
    }
    pairs
}

/// One `--parameter-overrides` argument: `Key="value"`, quoted and escaped as the SAM CLI reads
/// it. Unquoted, the SAM CLI takes a value only up to its first space and refuses an empty one
/// (`AllowedSourceCidrs=` "is not a valid format"), which samconfig.toml's defaults hold.
fn sam_override(key: &str, value: &str) -> String {
    format!("{key}={}", crate::new::toml_string(value))
}

/// Sets `key` in `pairs`, replacing an earlier value.
fn set(pairs: &mut Vec<(String, String)>, key: &str, value: &str) {
    match pairs.iter_mut().find(|(k, _)| k == key) {
        Some(pair) => pair.1 = value.to_owned(),
        None => pairs.push((key.to_owned(), value.to_owned())),
    }
}

fn get<'p>(pairs: &'p [(String, String)], key: &str) -> Option<&'p str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// Runs `tgq deploy`.
pub async fn deploy(args: DeployArgs) -> anyhow::Result<()> {
    // Before anything is asked, installed or written: without an application, `sam build` would
    // fail only after the token and the secret were kept.
    let here = std::env::current_dir().context("cannot tell which folder tgq deploy runs in")?;
    let application = Application::of(&here)?;
    if let Some(name) = application.bot_crate() {
        outln!(
            "Deploying the bot crate {name} of {}: both functions are built from its binary.",
            application.dir.display()
        );
    }
    let tools = setup::for_deploy(args.architecture, !args.no_build, args.yes)?;
    let sdk = sign_in(args.region.clone()).await?;
    let region = sdk.region().map(ToString::to_string).unwrap_or_default();
    let stacks = aws_sdk_cloudformation::Client::new(&sdk);
    let existing = describe(&stacks, &args.stack).await?;

    // Parameters: samconfig.toml's, the stack's own choices, then the flags.
    let mut parameters = samconfig_parameters(&application.dir);
    let existing_bot = existing
        .as_ref()
        .and_then(|stack| output(stack, "BotId"))
        .map(str::to_owned);
    let bot_id = args
        .bot_id
        .clone()
        .or(existing_bot)
        .or_else(|| get(&parameters, "BotId").map(str::to_owned))
        .unwrap_or_else(|| "mybot".to_owned());
    tgq_core::ids::BotId::new(&bot_id)?;
    set(&mut parameters, "BotId", &bot_id);
    set(
        &mut parameters,
        "Architecture",
        args.architecture.parameter(),
    );
    let token_parameter = format!("/tgq/{}/bot-token", args.stack);
    let secret_parameter = format!("/tgq/{}/webhook-secret", args.stack);
    set(&mut parameters, "BotTokenParameterName", &token_parameter);
    set(
        &mut parameters,
        "WebhookSecretParameterName",
        &secret_parameter,
    );
    for (key, value) in &args.parameters {
        set(&mut parameters, key, value);
    }
    if get(&parameters, "WebhookEndpoint") == Some("FunctionUrl")
        && tgq_core::defaults::REGIONS_WITHOUT_FUNCTION_URLS.contains(&region.as_str())
    {
        bail!(
            "{region} has no Lambda Function URLs: leave WebhookEndpoint at Auto (or HttpApi), \
             and the stack takes the HTTP API there"
        );
    }
    let vars = Vars::from_env();
    let api_url = get(&parameters, "TelegramApiUrl")
        .map(str::to_owned)
        .map_or_else(|| vars.telegram_api_url(), Ok)?;

    // The secrets, before anything is built: a bad token stops here, with nothing written.
    let ssm = aws_sdk_ssm::Client::new(&sdk);
    keep_token(&ssm, &token_parameter, &api_url).await?;
    keep_secret(&ssm, &secret_parameter).await?;

    if let Some(stack) = &existing {
        if stack.stack_status() == Some(&StackStatus::RollbackComplete) {
            outln!(
                "The stack {}'s first deploy rolled back; deleting it so this one can create it.",
                args.stack
            );
            delete_stack(&stacks, &args.stack).await?;
        }
    }
    if !args.no_build {
        step("Building the functions (sam build)");
        application.render()?;
        let architecture = format!("Architecture={}", args.architecture.parameter());
        let mut build = vec!["build"];
        build.extend(application.template_file().into_iter().flatten());
        build.extend(["--parameter-overrides", &architecture]);
        run_sam(&tools, &application.dir, &build)
            .context("sam build failed (its output is above)")?;
    }
    step(&format!(
        "Deploying the stack {} in {region} (sam deploy)",
        args.stack
    ));
    let overrides: Vec<String> = parameters
        .iter()
        .map(|(key, value)| sam_override(key, value))
        .collect();
    let mut deploy = vec![
        "deploy".to_owned(),
        "--stack-name".to_owned(),
        args.stack.clone(),
        "--region".to_owned(),
        region.clone(),
        "--no-confirm-changeset".to_owned(),
        "--no-fail-on-empty-changeset".to_owned(),
        "--capabilities".to_owned(),
        "CAPABILITY_IAM".to_owned(),
        "--resolve-s3".to_owned(),
        "--s3-prefix".to_owned(),
        args.stack.clone(),
        "--tags".to_owned(),
        format!("app=tgq bot={bot_id}"),
        "--parameter-overrides".to_owned(),
    ];
    deploy.extend(overrides);
    let deploy: Vec<&str> = deploy.iter().map(String::as_str).collect();
    if let Err(error) = run_sam(&tools, &application.dir, &deploy) {
        let reason = first_failure(&stacks, &args.stack).await;
        bail!(
            "sam deploy failed ({error}){}. Fix it and run tgq deploy again: it updates the stack, \
             or deletes a first deploy that rolled back before it creates it anew",
            reason.map(|r| format!(": {r}")).unwrap_or_default()
        );
    }

    step("Setting the webhook");
    webhook::set_for_stack(&args.stack, Some(region.clone())).await?;
    step("Status");
    let deployment = Deployment::of_stack(&args.stack, Some(region)).await?;
    let view = crate::ops::aws_status::read(&deployment).await?;
    crate::ops::aws_status::render(&view);
    outln!(
        "\nThe bot is live: write to it in Telegram. `tgq status --stack {}` shows it again; \
         `tgq destroy --stack {}` takes it down.",
        args.stack,
        args.stack
    );
    Ok(())
}

/// Runs `tgq destroy`: the webhook first (Telegram stops posting to a URL about to vanish), then
/// the stack, then, when asked, the parameters.
pub async fn destroy(args: DestroyArgs) -> anyhow::Result<()> {
    if !args.yes {
        confirm(&args.stack)?;
    }
    let deployment = Deployment::of_stack(&args.stack, args.region.clone()).await?;
    let ssm = aws_sdk_ssm::Client::new(&deployment.sdk);
    let token = match &deployment.token_parameter {
        Some(name) => tgq_aws::resolve_secret(
            &ssm,
            tgq_core::config::SecretSource::Parameter(name.clone()),
        )
        .await
        .with_context(|| format!("cannot read the bot token from {name} to delete the webhook"))?,
        None => bail!(
            "the stack {} has no BotTokenParameterName output",
            args.stack
        ),
    };
    let api_url = match &deployment.telegram_api_url {
        Some(url) => url.clone(),
        None => Vars::from_env().telegram_api_url()?,
    };
    let api = HttpBotApi::new(&api_url, token, TIMEOUT)?;
    tgq_telegram::call(&api, &DeleteWebhook::new())
        .await
        .map_err(|e| anyhow::anyhow!("Telegram refused deleteWebhook: {e}"))?;
    outln!("Webhook deleted: Telegram keeps the bot's updates for getUpdates.");
    let stacks = aws_sdk_cloudformation::Client::new(&deployment.sdk);
    delete_stack(&stacks, &args.stack).await?;
    outln!(
        "Stack {} deleted. Its table {} is kept (DeletionPolicy Retain): delete it with \
         `aws dynamodb delete-table --table-name {}` once its records are no longer wanted.",
        args.stack,
        deployment.table,
        deployment.table
    );
    if args.delete_parameters {
        for name in [&deployment.token_parameter, &deployment.secret_parameter]
            .into_iter()
            .flatten()
        {
            match ssm.delete_parameter().name(name).send().await {
                Ok(_) => outln!("Parameter {name} deleted."),
                Err(error) if is_not_found(&error) => {}
                Err(error) => {
                    return Err(anyhow::anyhow!(aws_sdk_ssm::error::DisplayErrorContext(
                        error
                    )))
                    .with_context(|| format!("cannot delete the parameter {name}"))
                }
            }
        }
    } else {
        outln!("The bot token and webhook secret stay in SSM (--delete-parameters removes them).");
    }
    Ok(())
}

fn step(what: &str) {
    outln!("\n== {what}");
}

/// Runs the SAM CLI with its output on the terminal; `Err` says how it ended.
fn run_sam(tools: &Tools, dir: &std::path::Path, args: &[&str]) -> anyhow::Result<()> {
    let sam = &tools.sam;
    let mut command = Command::new(sam);
    command
        .current_dir(dir)
        .args(args)
        // The SAM CLI would otherwise send usage data.
        .env("SAM_CLI_TELEMETRY", "0");
    if let Some(path) = &tools.path {
        command.env("PATH", path);
    }
    let status = command
        .status()
        .with_context(|| format!("cannot run {}", sam.display()))?;
    if !status.success() {
        bail!("{} {} exited with {status}", sam.display(), args[0]);
    }
    Ok(())
}

/// The bot token's parameter: kept when it exists, else written from TELEGRAM_BOT_TOKEN (or the
/// terminal); either way checked with getMe first.
async fn keep_token(ssm: &aws_sdk_ssm::Client, name: &str, api_url: &str) -> anyhow::Result<()> {
    let (token, stored) = match read_parameter(ssm, name).await? {
        Some(token) => (token, true),
        None => (ask_token()?, false),
    };
    webhook::check_token(token.expose_secret())?;
    let api = HttpBotApi::new(api_url, token.clone(), TIMEOUT)?;
    let me = tgq_telegram::call(&api, &GetMe::new())
        .await
        .map_err(|e| match e.class() {
            // An outage says nothing of the token: nothing is written, and a later run checks it.
            ErrorClass::Transient | ErrorClass::RateLimited(_) => anyhow::anyhow!(
                "Telegram could not check the bot token (getMe: {e}); nothing was written: run \
                 tgq deploy again once Telegram answers"
            ),
            ErrorClass::Permanent => anyhow::anyhow!("Telegram refused the bot token (getMe: {e})"),
        })?;
    let bot = me.user.username.as_deref().unwrap_or("(no username)");
    if stored {
        outln!("Bot token: kept in {name} (the bot @{bot}).");
        return Ok(());
    }
    put_secure(ssm, name, &token).await?;
    outln!("Bot token: checked (the bot @{bot}) and written to {name}.");
    Ok(())
}

/// The webhook secret's parameter: kept when it exists, else generated and written.
async fn keep_secret(ssm: &aws_sdk_ssm::Client, name: &str) -> anyhow::Result<()> {
    if read_parameter(ssm, name).await?.is_some() {
        outln!("Webhook secret: kept in {name}.");
        return Ok(());
    }
    // Telegram's secret_token takes 1-256 of A-Z, a-z, 0-9, '_' and '-'.
    let secret = SecretString::from(Alphanumeric.sample_string(&mut rand::rng(), 48));
    put_secure(ssm, name, &secret).await?;
    outln!("Webhook secret: generated and written to {name}.");
    Ok(())
}

fn ask_token() -> anyhow::Result<SecretString> {
    if let Ok(token) = std::env::var("TELEGRAM_BOT_TOKEN") {
        if !token.trim().is_empty() {
            return Ok(SecretString::from(token.trim().to_owned()));
        }
    }
    if !std::io::stdin().is_terminal() {
        bail!("no bot token: set TELEGRAM_BOT_TOKEN to the token @BotFather gave the bot");
    }
    eprint!("The bot's token from @BotFather (not shown): ");
    std::io::stderr().flush()?;
    // The terminal does not echo what is typed while the token is read.
    let stty = |mode: &str| {
        Command::new("stty")
            .arg(mode)
            .stdin(std::process::Stdio::inherit())
            .status()
            .is_ok_and(|status| status.success())
    };
    let hidden = stty("-echo");
    let mut line = String::new();
    let read = std::io::stdin().lock().read_line(&mut line);
    if hidden {
        stty("echo");
        eprintln!();
    }
    read?;
    Ok(SecretString::from(line.trim().to_owned()))
}

async fn read_parameter(
    ssm: &aws_sdk_ssm::Client,
    name: &str,
) -> anyhow::Result<Option<SecretString>> {
    match ssm
        .get_parameter()
        .name(name)
        .with_decryption(true)
        .send()
        .await
    {
        Ok(found) => Ok(found
            .parameter
            .and_then(|p| p.value)
            .map(SecretString::from)),
        Err(error) if is_not_found(&error) => Ok(None),
        Err(error) => Err(anyhow::anyhow!(aws_sdk_ssm::error::DisplayErrorContext(
            error
        )))
        .with_context(|| format!("cannot read the parameter {name}")),
    }
}

async fn put_secure(
    ssm: &aws_sdk_ssm::Client,
    name: &str,
    value: &SecretString,
) -> anyhow::Result<()> {
    ssm.put_parameter()
        .name(name)
        .value(value.expose_secret())
        .r#type(ParameterType::SecureString)
        .overwrite(false)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!(aws_sdk_ssm::error::DisplayErrorContext(e)))
        .with_context(|| format!("cannot write the parameter {name}"))?;
    Ok(())
}

fn is_not_found<E: aws_sdk_ssm::error::ProvideErrorMetadata, R>(
    error: &aws_sdk_ssm::error::SdkError<E, R>,
) -> bool {
    error.as_service_error().and_then(|e| e.code()) == Some("ParameterNotFound")
}

async fn describe(
    stacks: &aws_sdk_cloudformation::Client,
    name: &str,
) -> anyhow::Result<Option<aws_sdk_cloudformation::types::Stack>> {
    match stacks.describe_stacks().stack_name(name).send().await {
        Ok(found) => Ok(found.stacks.unwrap_or_default().into_iter().next()),
        Err(error) => {
            let text = aws_sdk_cloudformation::error::DisplayErrorContext(&error).to_string();
            // CloudFormation answers a stack that does not exist with a validation error.
            if text.contains("does not exist") {
                return Ok(None);
            }
            Err(anyhow::anyhow!(text)).with_context(|| format!("cannot read the stack {name}"))
        }
    }
}

fn output<'s>(stack: &'s aws_sdk_cloudformation::types::Stack, key: &str) -> Option<&'s str> {
    stack
        .outputs()
        .iter()
        .find(|o| o.output_key() == Some(key))
        .and_then(|o| o.output_value())
}

/// Deletes a stack and waits until CloudFormation has.
async fn delete_stack(stacks: &aws_sdk_cloudformation::Client, name: &str) -> anyhow::Result<()> {
    stacks
        .delete_stack()
        .stack_name(name)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!(aws_sdk_cloudformation::error::DisplayErrorContext(e)))
        .with_context(|| format!("cannot delete the stack {name}"))?;
    let started = Instant::now();
    loop {
        match describe(stacks, name).await? {
            None => return Ok(()),
            Some(stack) => match stack.stack_status() {
                Some(StackStatus::DeleteComplete) => return Ok(()),
                Some(StackStatus::DeleteFailed) => bail!(
                    "CloudFormation could not delete the stack {name}: {}",
                    stack.stack_status_reason().unwrap_or("no reason given")
                ),
                _ if started.elapsed() > STACK_WAIT => {
                    bail!("the stack {name} is still being deleted after 30 minutes")
                }
                _ => tokio::time::sleep(Duration::from_secs(5)).await,
            },
        }
    }
}

/// The first failed resource of the stack's latest events, in words.
async fn first_failure(stacks: &aws_sdk_cloudformation::Client, name: &str) -> Option<String> {
    let events = stacks
        .describe_stack_events()
        .stack_name(name)
        .send()
        .await
        .ok()?;
    events
        .stack_events()
        .iter()
        .rev()
        .find(|event| {
            event
                .resource_status()
                .is_some_and(|status| status.as_str().ends_with("_FAILED"))
        })
        .map(|event| {
            format!(
                "{} {}",
                event.logical_resource_id().unwrap_or("the stack"),
                event.resource_status_reason().unwrap_or("failed")
            )
        })
}

fn confirm(stack: &str) -> anyhow::Result<()> {
    if !std::io::stdin().is_terminal() {
        bail!("tgq destroy deletes the stack {stack} and its webhook: pass --yes to confirm");
    }
    eprint!("Delete the webhook and the stack {stack}? Type the stack's name to confirm: ");
    std::io::stderr().flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    if line.trim() != stack {
        bail!("not confirmed; nothing was deleted");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_override_is_quoted_as_the_sam_cli_reads_it() {
        assert_eq!(sam_override("BotId", "mybot"), r#"BotId="mybot""#);
        assert_eq!(
            sam_override("AllowedSourceCidrs", ""),
            r#"AllowedSourceCidrs="""#
        );
        assert_eq!(
            sam_override("PreCheckoutRefusal", r#"Sold out; say "sorry" \ bye"#),
            r#"PreCheckoutRefusal="Sold out; say \"sorry\" \\ bye""#
        );
    }
}
