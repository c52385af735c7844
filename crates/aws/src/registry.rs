//! The bot registry in SSM Parameter Store (docs/design/fleet.md §2): one parameter per field
//! under one prefix, the token and the secret as SecureStrings. The functions read it
//! ([`BotSource`]), each only what it uses, by name: the webhook every field but the tokens
//! ([`SsmRegistry::without_tokens`]), the worker every field but the secrets
//! ([`SsmRegistry::without_secrets`]); `tgq bots` reads everything, writes and removes bots.

use async_trait::async_trait;
use aws_sdk_ssm::types::{ParameterStringFilter, ParameterType};
use secrecy::{ExposeSecret as _, SecretString};
use tgq_core::ids::BotId;
use tgq_core::registry::{format_allowed_updates, BotEntry, BotSource, Field, Layout, Parsed};
use tgq_core::PortError;

use crate::error::port_error;

const GET_PARAMETERS_BY_PATH: &str = "SSM GetParametersByPath";
const DESCRIBE_PARAMETERS: &str = "SSM DescribeParameters";
const GET_PARAMETERS: &str = "SSM GetParameters";
/// The most names one GetParameters call takes.
const GET_PARAMETERS_MAX: usize = 10;
/// The most parameters one DescribeParameters page holds.
const DESCRIBE_PAGE: i32 = 50;
const PUT_PARAMETER: &str = "SSM PutParameter";
const DELETE_PARAMETERS: &str = "SSM DeleteParameters";

/// The registry under one SSM prefix.
#[derive(Clone, Debug)]
pub struct SsmRegistry {
    client: aws_sdk_ssm::Client,
    layout: Layout,
    reads: Reads,
}

/// Which fields [`BotSource::load`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reads {
    /// Every field, in one recursive read of the prefix (`ssm:GetParametersByPath`, which is
    /// authorized against the path alone and so returns every value under it).
    Read,
    /// Every field but this one: the names listed (`ssm:DescribeParameters`, names and types
    /// only), then the other fields' values read by name (`ssm:GetParameters`), so that a role
    /// allowed only those names never sees the field left out.
    AllBut(Field),
}

impl SsmRegistry {
    /// The registry under `layout`'s prefix, every field read (the worker, `tgq bots`).
    pub fn new(client: aws_sdk_ssm::Client, layout: Layout) -> Self {
        Self {
            client,
            layout,
            reads: Reads::Read,
        }
    }

    /// The registry under `layout`'s prefix as the webhook reads it: every bot's secret, handler
    /// and allowed updates, never its token (its entries have none). `GetParametersByPath` would
    /// return the tokens with the rest, since it is authorized against the path alone.
    pub fn without_tokens(client: aws_sdk_ssm::Client, layout: Layout) -> Self {
        Self {
            client,
            layout,
            reads: Reads::AllBut(Field::Token),
        }
    }

    /// The registry under `layout`'s prefix as the worker reads it: every bot's token, handler and
    /// allowed updates, never its webhook secret (the worker checks none; its entries have none).
    pub fn without_secrets(client: aws_sdk_ssm::Client, layout: Layout) -> Self {
        Self {
            client,
            layout,
            reads: Reads::AllBut(Field::Secret),
        }
    }

    /// Where the parameters live.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Every parameter under `path`, decrypted, by name.
    async fn parameters(&self, path: &str) -> Result<Vec<(String, SecretString)>, PortError> {
        let mut found = Vec::new();
        let mut next_token = None;
        loop {
            let output = self
                .client
                .get_parameters_by_path()
                .path(path)
                .recursive(true)
                .with_decryption(true)
                .set_next_token(next_token)
                .send()
                .await
                .map_err(|e| port_error(GET_PARAMETERS_BY_PATH, e))?;
            for parameter in output.parameters.unwrap_or_default() {
                if let (Some(name), Some(value)) = (parameter.name, parameter.value) {
                    found.push((name, SecretString::from(value)));
                }
            }
            next_token = output.next_token;
            if next_token.is_none() {
                return Ok(found);
            }
        }
    }

    /// Everything under the prefix: complete bots and the incomplete ones, named.
    pub async fn read(&self) -> Result<Parsed, PortError> {
        match self.reads {
            Reads::Read => Ok(self
                .layout
                .parse(self.parameters(self.layout.prefix()).await?)),
            Reads::AllBut(Field::Secret) => Ok(self
                .layout
                .parse_without_secrets(self.parameters_but(Field::Secret).await?)),
            Reads::AllBut(field) => Ok(self.layout.parse(self.parameters_but(field).await?)),
        }
    }

    /// Every parameter under the prefix but `left_out`'s, decrypted, by name.
    async fn parameters_but(
        &self,
        left_out: Field,
    ) -> Result<Vec<(String, SecretString)>, PortError> {
        let suffix = format!("/{}", left_out.as_str());
        let names: Vec<String> = self
            .names()
            .await?
            .into_iter()
            .filter(|name| !name.ends_with(&suffix))
            .collect();
        let mut found = Vec::with_capacity(names.len());
        for chunk in names.chunks(GET_PARAMETERS_MAX) {
            let output = self
                .client
                .get_parameters()
                .set_names(Some(chunk.to_vec()))
                .with_decryption(true)
                .send()
                .await
                .map_err(|e| port_error(GET_PARAMETERS, e))?;
            // A parameter deleted since it was listed is left out, as if listed a moment later.
            for parameter in output.parameters.unwrap_or_default() {
                if let (Some(name), Some(value)) = (parameter.name, parameter.value) {
                    found.push((name, SecretString::from(value)));
                }
            }
        }
        Ok(found)
    }

    /// The names of every parameter under the prefix, without their values.
    async fn names(&self) -> Result<Vec<String>, PortError> {
        let under_prefix = ParameterStringFilter::builder()
            .key("Path")
            .option("Recursive")
            .values(self.layout.prefix().trim_end_matches('/'))
            .build()
            .map_err(|e| PortError::misconfigured(DESCRIBE_PARAMETERS, e))?;
        let mut names = Vec::new();
        let mut next_token = None;
        loop {
            let output = self
                .client
                .describe_parameters()
                .parameter_filters(under_prefix.clone())
                .max_results(DESCRIBE_PAGE)
                .set_next_token(next_token)
                .send()
                .await
                .map_err(|e| port_error(DESCRIBE_PARAMETERS, e))?;
            names.extend(
                output
                    .parameters
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|parameter| parameter.name),
            );
            next_token = output.next_token;
            if next_token.is_none() {
                return Ok(names);
            }
        }
    }

    /// Whether any parameter of `bot` exists, complete or not.
    pub async fn exists(&self, bot: &BotId) -> Result<bool, PortError> {
        Ok(!self
            .parameters(&self.layout.bot_path(bot))
            .await?
            .is_empty())
    }

    /// Writes every field of `entry`, the handler last (see [`Field::ALL`]), overwriting none: a
    /// parameter that already exists fails the call.
    pub async fn put(&self, entry: &BotEntry) -> Result<(), PortError> {
        for field in Field::ALL {
            let value = match field {
                Field::Token => match &entry.token {
                    Some(token) => token.expose_secret().to_owned(),
                    None => continue,
                },
                Field::Secret => match &entry.secret {
                    Some(secret) => secret.expose_secret().to_owned(),
                    None => {
                        return Err(PortError::rejected(
                            PUT_PARAMETER,
                            "a bot is written with its webhook secret",
                        ))
                    }
                },
                Field::Handler => entry.handler.clone(),
                Field::AllowedUpdates if entry.allowed_updates.is_empty() => continue,
                Field::AllowedUpdates => format_allowed_updates(&entry.allowed_updates),
            };
            let kind = if field.is_secret() {
                ParameterType::SecureString
            } else {
                ParameterType::String
            };
            self.client
                .put_parameter()
                .name(self.layout.parameter(&entry.id, field))
                .value(value)
                .r#type(kind)
                .overwrite(false)
                .send()
                .await
                .map_err(|e| port_error(PUT_PARAMETER, e))?;
        }
        Ok(())
    }

    /// Deletes every parameter of `bot`; those already gone are no error. The handler goes first,
    /// so a removal that stops half way leaves an incomplete bot, which nothing serves.
    pub async fn remove(&self, bot: &BotId) -> Result<(), PortError> {
        let names: Vec<String> = Field::ALL
            .iter()
            .rev()
            .map(|field| self.layout.parameter(bot, *field))
            .collect();
        for name in names {
            self.client
                .delete_parameters()
                .names(name)
                .send()
                .await
                .map_err(|e| port_error(DELETE_PARAMETERS, e))?;
        }
        Ok(())
    }
}

#[async_trait]
impl BotSource for SsmRegistry {
    async fn load(&self) -> Result<Vec<BotEntry>, PortError> {
        let parsed = self.read().await?;
        for (bot, why) in &parsed.incomplete {
            tracing::warn!(bot, why, "a bot of the registry is left out");
        }
        Ok(parsed.bots)
    }
}
