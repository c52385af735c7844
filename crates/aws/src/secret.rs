//! Secrets from SSM Parameter Store, read once at cold start.

use secrecy::SecretString;
use tgq_core::config::SecretSource;
use tgq_core::PortError;

use crate::error::port_error;

const GET_PARAMETER: &str = "SSM GetParameter";

/// A secret could not be read. Names the parameter, never its value.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the SSM parameter {name}")]
pub struct SecretError {
    /// The parameter's name.
    pub name: String,
    /// Why: unavailable (retry the cold start) or misconfigured (missing parameter, no permission).
    #[source]
    pub source: PortError,
}

/// The value of a secret: given directly, or read from an SSM SecureString parameter with
/// decryption. The caller keeps it for the life of the process; it is never logged.
pub async fn resolve_secret(
    ssm: &aws_sdk_ssm::Client,
    source: SecretSource,
) -> Result<SecretString, SecretError> {
    let name = match source {
        SecretSource::Value(value) => return Ok(value),
        SecretSource::Parameter(name) => name,
    };
    let fail = |source| SecretError {
        name: name.clone(),
        source,
    };
    let output = ssm
        .get_parameter()
        .name(&name)
        .with_decryption(true)
        .send()
        .await
        .map_err(|e| fail(port_error(GET_PARAMETER, e)))?;
    output
        .parameter
        .and_then(|parameter| parameter.value)
        .map(SecretString::from)
        .ok_or_else(|| {
            fail(PortError::rejected(
                GET_PARAMETER,
                "the parameter has no value",
            ))
        })
}
