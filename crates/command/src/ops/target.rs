//! What an operations command acts on: a deployed stack on AWS (`--stack NAME`, resolved from its
//! CloudFormation outputs, or `--table/--queue-url/--dlq-url`), or local mode's data directory
//! (neither given). The standard AWS credential chain, `AWS_REGION`/`--region` and
//! `AWS_ENDPOINT_URL` apply.

use std::path::PathBuf;
#[cfg(feature = "aws")]
use std::sync::Arc;

#[cfg(feature = "aws")]
use anyhow::{bail, Context as _};
#[cfg(feature = "aws")]
use aws_config::SdkConfig;
use clap::Args;
#[cfg(feature = "aws")]
use tgq_aws::{DynamoStore, SqsQueue};

use crate::config::DEFAULT_DATA_DIR;

/// Where an operations command acts.
#[derive(Clone, Debug, Args)]
pub struct TargetArgs {
    /// The data directory of `tgq local`, used when no AWS stack or resources are named.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// A deployed stack: the table, the queues and the parameter names come from its
    /// CloudFormation outputs.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["table", "queue_url", "dlq_url"])]
    pub stack: Option<String>,
    /// The DynamoDB table of a deployment (with --queue-url and --dlq-url, instead of --stack).
    #[arg(long, value_name = "NAME", requires_all = ["queue_url", "dlq_url"])]
    pub table: Option<String>,
    /// The updates queue's URL (with --table and --dlq-url).
    #[arg(long, value_name = "URL", requires_all = ["table", "dlq_url"])]
    pub queue_url: Option<String>,
    /// The dead-letter queue's URL (with --table and --queue-url).
    #[arg(long, value_name = "URL", requires_all = ["table", "queue_url"])]
    pub dlq_url: Option<String>,
    /// The AWS region of the stack [default: AWS_REGION, or the profile's].
    #[arg(long, value_name = "REGION")]
    pub region: Option<String>,
}

/// What a command acts on.
pub enum Target {
    /// Local mode's store in this data directory.
    Local(PathBuf),
    /// A deployment on AWS.
    #[cfg(feature = "aws")]
    Aws(Box<Deployment>),
}

/// A deployment's resources and settings, as far as the command was told or the stack says.
#[cfg(feature = "aws")]
pub struct Deployment {
    /// The stack, when named.
    pub stack: Option<String>,
    /// The client configuration (credentials, region, endpoint).
    pub sdk: SdkConfig,
    /// `TableName`.
    pub table: String,
    /// `UpdatesQueueUrl`.
    pub queue_url: String,
    /// `DeadLetterQueueUrl`.
    pub dlq_url: String,
    /// `WebhookUrl`.
    pub webhook_url: Option<String>,
    /// `BotTokenParameterName`.
    pub token_parameter: Option<String>,
    /// `WebhookSecretParameterName`.
    pub secret_parameter: Option<String>,
    /// `TelegramApiUrl`.
    pub telegram_api_url: Option<String>,
    /// `BotId`.
    pub bot_id: Option<String>,
    /// `BotsParameterPrefix`: where the bot registry's SSM parameters live.
    pub bots_parameter_prefix: Option<String>,
    /// `BotWebhookUrlPrefix`: a registry bot's webhook URL is this followed by its id.
    pub bot_webhook_url_prefix: Option<String>,
    /// `ScheduleGroupName`: the schedules of timers due later than 15 minutes.
    pub schedule_group: Option<String>,
    /// `BroadcastsQueueUrl`: where each broadcast's steps wait.
    pub broadcasts_queue_url: Option<String>,
}

impl TargetArgs {
    /// Resolves the target: reads the stack's outputs when a stack is named.
    #[cfg(feature = "aws")]
    pub async fn resolve(&self) -> anyhow::Result<Target> {
        if let (Some(table), Some(queue_url), Some(dlq_url)) =
            (&self.table, &self.queue_url, &self.dlq_url)
        {
            let deployment =
                Deployment::of_resources(table, queue_url, dlq_url, self.region.clone()).await?;
            return Ok(Target::Aws(Box::new(deployment)));
        }
        match &self.stack {
            Some(stack) => Ok(Target::Aws(Box::new(
                Deployment::of_stack(stack, self.region.clone()).await?,
            ))),
            None => Ok(Target::Local(self.data_dir.clone())),
        }
    }

    /// Without the `aws` feature: local mode's data directory, and a refusal when a stack or its
    /// resources are named.
    #[cfg(not(feature = "aws"))]
    pub async fn resolve(&self) -> anyhow::Result<Target> {
        match self.stack.is_some() || self.table.is_some() {
            true => Err(crate::without_aws(
                "--stack (or --table, --queue-url and --dlq-url)",
            )),
            false => Ok(Target::Local(self.data_dir.clone())),
        }
    }
}

#[cfg(feature = "aws")]
impl Deployment {
    /// A deployment named by its resources alone (no stack, so nothing of its outputs).
    pub async fn of_resources(
        table: &str,
        queue_url: &str,
        dlq_url: &str,
        region: Option<String>,
    ) -> anyhow::Result<Deployment> {
        Ok(Deployment {
            stack: None,
            sdk: sign_in(region).await?,
            table: table.to_owned(),
            queue_url: queue_url.to_owned(),
            dlq_url: dlq_url.to_owned(),
            webhook_url: None,
            token_parameter: None,
            secret_parameter: None,
            telegram_api_url: None,
            bot_id: None,
            bots_parameter_prefix: None,
            bot_webhook_url_prefix: None,
            schedule_group: None,
            broadcasts_queue_url: None,
        })
    }

    /// Reads a stack's outputs.
    pub async fn of_stack(stack: &str, region: Option<String>) -> anyhow::Result<Self> {
        let sdk = sign_in(region).await?;
        let client = aws_sdk_cloudformation::Client::new(&sdk);
        let described = client
            .describe_stacks()
            .stack_name(stack)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!(aws_sdk_cloudformation::error::DisplayErrorContext(e)))
            .with_context(|| {
                format!(
                    "cannot read the stack {stack} (check its name, the region and your credentials)"
                )
            })?;
        let Some(found) = described.stacks.unwrap_or_default().into_iter().next() else {
            bail!("there is no stack {stack}");
        };
        let outputs = found.outputs.unwrap_or_default();
        let output = |key: &str| {
            outputs
                .iter()
                .find(|o| o.output_key.as_deref() == Some(key))
                .and_then(|o| o.output_value.clone())
                .filter(|v| !v.is_empty())
        };
        let required = |key: &str| {
            output(key).with_context(|| {
                format!("the stack {stack} has no output {key}: is it a tgq stack?")
            })
        };
        Ok(Self {
            stack: Some(stack.to_owned()),
            table: required("TableName")?,
            queue_url: required("UpdatesQueueUrl")?,
            dlq_url: required("DeadLetterQueueUrl")?,
            webhook_url: output("WebhookUrl"),
            token_parameter: output("BotTokenParameterName"),
            secret_parameter: output("WebhookSecretParameterName"),
            telegram_api_url: output("TelegramApiUrl"),
            bot_id: output("BotId"),
            bots_parameter_prefix: output("BotsParameterPrefix"),
            bot_webhook_url_prefix: output("BotWebhookUrlPrefix"),
            schedule_group: output("ScheduleGroupName"),
            broadcasts_queue_url: output("BroadcastsQueueUrl"),
            sdk,
        })
    }

    /// The record store on the deployment's table.
    pub fn store(&self) -> Arc<DynamoStore> {
        Arc::new(DynamoStore::new(
            aws_sdk_dynamodb::Client::new(&self.sdk),
            self.table.clone(),
        ))
    }

    /// The updates queue.
    pub fn queue(&self) -> Arc<SqsQueue> {
        Arc::new(SqsQueue::new(
            aws_sdk_sqs::Client::new(&self.sdk),
            self.queue_url.clone(),
        ))
    }

    /// The dead-letter queue.
    pub fn dlq(&self) -> Arc<SqsQueue> {
        Arc::new(SqsQueue::new(
            aws_sdk_sqs::Client::new(&self.sdk),
            self.dlq_url.clone(),
        ))
    }

    /// The Bot API base URL a command reaches the stack's bots at: TELEGRAM_API_URL, else the
    /// stack's TelegramApiUrl output, else Telegram's.
    pub fn api_url(&self, vars: &tgq_core::config::Vars) -> anyhow::Result<String> {
        match (vars.get("TELEGRAM_API_URL"), &self.telegram_api_url) {
            (None, Some(url)) => Ok(url.clone()),
            _ => Ok(vars.telegram_api_url()?),
        }
    }

    /// Who the caller is, for the audit trail: the ARN of its IAM identity.
    pub async fn principal(&self) -> anyhow::Result<String> {
        let identity = aws_sdk_sts::Client::new(&self.sdk)
            .get_caller_identity()
            .send()
            .await
            .map_err(|e| anyhow::anyhow!(aws_sdk_sts::error::DisplayErrorContext(e)))
            .context("cannot tell who you are (sts:GetCallerIdentity) for the audit trail")?;
        identity
            .arn
            .context("sts:GetCallerIdentity returned no ARN")
    }
}

/// The client configuration of a command that acts on AWS, with credentials found: the standard
/// chain (the environment, the shared config and credentials files with IAM Identity Center (SSO)
/// sessions and `credential_process`, web identity, the container and instance metadata), in
/// `region` when given. Without credentials it fails with one line saying how to sign in, instead
/// of the SDK's warnings from every provider it tried.
#[cfg(feature = "aws")]
pub async fn sign_in(region: Option<String>) -> anyhow::Result<SdkConfig> {
    use aws_credential_types::provider::ProvideCredentials as _;
    let sdk = tgq_aws::aws_config_in(region).await;
    let Some(provider) = sdk.credentials_provider() else {
        bail!("no AWS credentials provider is configured");
    };
    if let Err(error) = provider.provide_credentials().await {
        let profile = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".to_owned());
        bail!(
            "no AWS credentials (profile {profile}): sign in with `aws sso login --profile NAME` \
             and set AWS_PROFILE, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY ({})",
            one_line(&aws_smithy_types::error::display::DisplayErrorContext(error).to_string())
        );
    }
    if sdk.region().is_none() {
        bail!("no AWS region: pass --region, set AWS_REGION, or give the profile a region");
    }
    Ok(sdk)
}

/// A long error chain on one line, for a one-line message.
#[cfg(feature = "aws")]
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// How long audit entries are kept: as long as records (`TGQ_RECORD_TTL_SECS`, 7 days).
pub fn audit_ttl() -> anyhow::Result<std::time::Duration> {
    Ok(tgq_core::config::Vars::from_env().record_ttl()?)
}

/// Who runs a local command, for the audit trail.
pub fn local_principal() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|user| !user.is_empty())
        .unwrap_or_else(user_of_uid);
    format!("local user {user}")
}

/// The name of the process's user from the password database (cron and systemd units often set
/// no USER), else `uid N`.
fn user_of_uid() -> String {
    // SAFETY: getuid cannot fail. getpwuid_r writes only into `entry` and `buffer`, whose size it
    // is given; the name it points to lies in `buffer`, read before either goes away.
    unsafe {
        let uid = libc::getuid();
        let mut entry: libc::passwd = std::mem::zeroed();
        let mut buffer = vec![0 as libc::c_char; 4096];
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let status = libc::getpwuid_r(
            uid,
            &mut entry,
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut found,
        );
        if status != 0 || found.is_null() || entry.pw_name.is_null() {
            return format!("uid {uid}");
        }
        std::ffi::CStr::from_ptr(entry.pw_name)
            .to_string_lossy()
            .into_owned()
    }
}
