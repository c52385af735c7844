//! Telegram's Bot API for tgq: the HTTP adapter of [`BotApi`], and typed calls over any [`BotApi`].
//!
//! Requests and results are teloxide-core's typed payloads and types. The HTTP exchange is done here
//! rather than through teloxide's `Bot` because its `RequestError` drops Telegram's `error_code`, and the
//! code is what separates a retryable 5xx from a permanent 4xx.

use std::time::Duration;

use async_trait::async_trait;
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use teloxide_core::requests::Payload;
use teloxide_core::types::ResponseParameters;
use tgq_core::error::error_chain;
use tgq_core::telegram::{method_name, ApiCall, BotApi, CallError, TelegramError, Upload};

/// Calls the Bot API over HTTPS (or HTTP, for a local fake) at a configurable base URL.
#[derive(Clone)]
pub struct HttpBotApi {
    client: reqwest::Client,
    base_url: String,
    token: SecretString,
}

impl std::fmt::Debug for HttpBotApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpBotApi")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

/// Why the HTTP client could not be built.
#[derive(Debug, thiserror::Error)]
#[error("the HTTP client for Telegram could not be built")]
pub struct ClientError(#[source] reqwest::Error);

impl HttpBotApi {
    /// A client for `base_url` (e.g. `https://api.telegram.org`) with a per-call timeout.
    pub fn new(
        base_url: &str,
        token: SecretString,
        timeout: Duration,
    ) -> Result<Self, ClientError> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .build()
            .map_err(ClientError)?;
        Ok(Self {
            client,
            base_url: base_url.trim_end_matches('/').to_owned(),
            token,
        })
    }
}

/// Telegram's answer envelope: `ok`, then either `result` or the error fields.
#[derive(Deserialize)]
struct Envelope {
    ok: bool,
    #[serde(default)]
    result: Value,
    error_code: Option<u16>,
    #[serde(default)]
    description: String,
    parameters: Option<ResponseParameters>,
}

#[async_trait]
impl BotApi for HttpBotApi {
    /// Sends the call; which action it is does not travel to Telegram.
    async fn call(&self, call: &ApiCall<'_>) -> Result<Value, CallError> {
        self.send(call.method, call.params, call.files)
            .await
            .map_err(CallError::Telegram)
    }

    /// Streams the file from Telegram's file server, stopping as soon as it passes `limit`.
    async fn download(&self, file_path: &str, limit: u64) -> Result<bytes::Bytes, TelegramError> {
        // The token is part of the path: no error below may carry the URL.
        let url = format!(
            "{}/file/bot{}/{file_path}",
            self.base_url,
            self.token.expose_secret()
        );
        let mut response = self.client.get(url).send().await.map_err(transport_error)?;
        let status = response.status().as_u16();
        if status != 200 {
            return Err(TelegramError::Api {
                code: status,
                description: format!("the file server answered {status} for {file_path}"),
            });
        }
        let mut body = bytes::BytesMut::new();
        while let Some(chunk) = response.chunk().await.map_err(transport_error)? {
            body.extend_from_slice(&chunk);
            if body.len() as u64 > limit {
                return Err(TelegramError::Api {
                    code: 400,
                    description: format!(
                        "{file_path} is over {limit} bytes; Telegram lets a bot download files of up to 20 MB"
                    ),
                });
            }
        }
        Ok(body.freeze())
    }
}

impl HttpBotApi {
    async fn send(
        &self,
        method: &str,
        params: &Value,
        files: &[Upload],
    ) -> Result<Value, TelegramError> {
        // The token is part of the path: no error below may carry the URL.
        let url = format!(
            "{}/bot{}/{method}",
            self.base_url,
            self.token.expose_secret()
        );
        let request = self.client.post(url);
        let request = match files {
            [] => request.json(params),
            files => request.multipart(multipart(params, files)),
        };
        let response = request.send().await.map_err(transport_error)?;
        let status = response.status().as_u16();
        let body = response.bytes().await.map_err(transport_error)?;
        let envelope: Envelope =
            serde_json::from_slice(&body).map_err(|_| TelegramError::InvalidResponse { status })?;
        if envelope.ok {
            return Ok(envelope.result);
        }
        Err(match envelope.parameters {
            Some(ResponseParameters::RetryAfter(wait)) => {
                TelegramError::RetryAfter(wait.duration())
            }
            Some(ResponseParameters::MigrateToChatId(chat)) => TelegramError::MigrateToChat(chat.0),
            None => TelegramError::Api {
                code: envelope.error_code.unwrap_or(status),
                description: envelope.description,
            },
        })
    }
}

/// What a failed exchange leaves known: a connection that never came (refused, a name that did
/// not resolve, a TLS handshake that failed, or a connect timeout) carried no request, so Telegram
/// never saw the call; any other failure may have come after the request was written.
fn transport_error(error: reqwest::Error) -> TelegramError {
    let (connect, timeout) = (error.is_connect(), error.is_timeout());
    let said = error_chain(&error.without_url());
    match (connect, timeout) {
        (true, _) => TelegramError::NotSent(said),
        (false, true) => TelegramError::Timeout,
        (false, false) => TelegramError::Network(said),
    }
}

/// A call with files as `multipart/form-data`: each parameter a text part (strings as they are,
/// everything else as JSON, as Telegram reads form fields), and each file a part of its own. A
/// top-level field that names an upload (`"photo": "attach://NAME"`) gets the file itself, the way
/// Telegram documents a file field; an upload named deeper (a media group's `media`) goes in the
/// part `NAME` its `attach://NAME` points at.
fn multipart(params: &Value, files: &[Upload]) -> reqwest::multipart::Form {
    let part = |file: &Upload| {
        reqwest::multipart::Part::stream(file.contents().clone())
            .file_name(file.file_name().to_owned())
    };
    let mut form = reqwest::multipart::Form::new();
    let mut attached = std::collections::HashSet::new();
    for (field, value) in params.as_object().into_iter().flatten() {
        let named = value
            .as_str()
            .and_then(|v| v.strip_prefix("attach://"))
            .and_then(|name| files.iter().find(|f| f.name() == name));
        form = match (named, value) {
            (Some(file), _) => {
                attached.insert(file.name());
                form.part(field.clone(), part(file))
            }
            (None, Value::String(text)) => form.text(field.clone(), text.clone()),
            (None, Value::Null) => form,
            (None, other) => form.text(field.clone(), other.to_string()),
        };
    }
    for file in files {
        if attached.insert(file.name()) {
            form = form.part(file.name().to_owned(), part(file));
        }
    }
    form
}

/// Calls a typed teloxide-core payload over any [`BotApi`]; for operations that are not a handler's
/// outbound actions (getUpdates, setWebhook, getWebhookInfo, …).
pub async fn call<P>(api: &dyn BotApi, payload: &P) -> Result<P::Output, TelegramError>
where
    P: Payload + Serialize,
    P::Output: DeserializeOwned,
{
    let params = serde_json::to_value(payload)
        .map_err(|e| TelegramError::Network(format!("payload does not serialize: {e}")))?;
    let method = method_name(P::NAME);
    let result = match api.call(&ApiCall::plain(&method, &params)).await {
        Ok(result) => result,
        Err(CallError::Telegram(e)) => return Err(e),
        // Only an outbox that records actions reports a store error, and these calls are no actions.
        Err(CallError::Store(e)) => return Err(TelegramError::Network(error_chain(&e))),
    };
    serde_json::from_value(result).map_err(|_| TelegramError::InvalidResponse { status: 200 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_the_token() {
        let api = HttpBotApi::new(
            "http://127.0.0.1:1",
            SecretString::from("123:SECRET".to_owned()),
            Duration::from_secs(1),
        )
        .unwrap();
        assert!(!format!("{api:?}").contains("SECRET"));
    }
}
