//! The bot registry in SSM Parameter Store (docs/ARCHITECTURE.md §11): one parameter per field
//! under one prefix, the token and the secret as SecureStrings. The functions read it
//! ([`BotSource`]); `tgq bots` writes and removes bots.

use async_trait::async_trait;
use aws_sdk_ssm::types::ParameterType;
use secrecy::{ExposeSecret as _, SecretString};
use tgq_core::ids::BotId;
use tgq_core::registry::{format_allowed_updates, BotEntry, BotSource, Field, Layout, Parsed};
use tgq_core::PortError;

use crate::error::port_error;

const GET_PARAMETERS_BY_PATH: &str = "SSM GetParametersByPath";
const PUT_PARAMETER: &str = "SSM PutParameter";
const DELETE_PARAMETERS: &str = "SSM DeleteParameters";

/// The registry under one SSM prefix.
#[derive(Clone, Debug)]
pub struct SsmRegistry {
    client: aws_sdk_ssm::Client,
    layout: Layout,
}

impl SsmRegistry {
    /// The registry under `layout`'s prefix.
    pub fn new(client: aws_sdk_ssm::Client, layout: Layout) -> Self {
        Self { client, layout }
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
        Ok(self
            .layout
            .parse(self.parameters(self.layout.prefix()).await?))
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
                Field::Secret => entry.secret.expose_secret().to_owned(),
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
