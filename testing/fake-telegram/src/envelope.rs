//! Telegram's response envelope: `{"ok":true,"result":…}` or `{"ok":false,"error_code":…}`.

use axum::http::StatusCode;
use serde_json::{json, Value};

/// A refusal in the Bot API's shape; its code is both the HTTP status and `error_code`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ApiError {
    code: u16,
    description: String,
    parameters: Option<Value>,
}

impl ApiError {
    fn new(code: u16, description: impl Into<String>) -> Self {
        Self {
            code,
            description: description.into(),
            parameters: None,
        }
    }

    fn with_parameters(mut self, parameters: Value) -> Self {
        self.parameters = Some(parameters);
        self
    }

    /// The `retry_after` of a 429, in seconds.
    pub(crate) fn retry_after(&self) -> Option<u64> {
        self.parameters.as_ref()?.get("retry_after")?.as_u64()
    }

    /// 403 `Forbidden: user is deactivated`.
    pub(crate) fn deactivated() -> Self {
        Self::new(403, "Forbidden: user is deactivated")
    }

    /// 400 with Telegram's `Bad Request: ` prefix before `reason`.
    pub(crate) fn bad_request(reason: &str) -> Self {
        Self::new(400, format!("Bad Request: {reason}"))
    }

    pub(crate) fn chat_not_found() -> Self {
        Self::bad_request("chat not found")
    }

    pub(crate) fn migrated(to_chat_id: i64) -> Self {
        Self::bad_request("group chat was upgraded to a supergroup chat")
            .with_parameters(json!({ "migrate_to_chat_id": to_chat_id }))
    }

    pub(crate) fn unauthorized() -> Self {
        Self::new(401, "Unauthorized")
    }

    pub(crate) fn blocked() -> Self {
        Self::new(403, "Forbidden: bot was blocked by the user")
    }

    pub(crate) fn not_found() -> Self {
        Self::new(404, "Not Found")
    }

    pub(crate) fn webhook_active() -> Self {
        Self::new(
            409,
            "Conflict: can't use getUpdates method while webhook is active; \
             use deleteWebhook to delete the webhook first",
        )
    }

    pub(crate) fn too_many_requests(retry_after: u64) -> Self {
        Self::new(429, format!("Too Many Requests: retry after {retry_after}"))
            .with_parameters(json!({ "retry_after": retry_after }))
    }

    /// A 5xx named by the HTTP reason phrase, as Telegram's front end names them.
    pub(crate) fn server_error(code: u16) -> Self {
        let reason = StatusCode::from_u16(code)
            .ok()
            .and_then(|status| status.canonical_reason())
            .unwrap_or("Internal Server Error");
        Self::new(code, reason)
    }

    fn body(&self) -> Value {
        let mut body = json!({
            "ok": false,
            "error_code": self.code,
            "description": self.description,
        });
        if let Some(parameters) = &self.parameters {
            body["parameters"] = parameters.clone();
        }
        body
    }
}

/// A complete answer: the HTTP status and the envelope sent with it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Value,
}

impl Answer {
    pub(crate) fn ok(result: Value) -> Self {
        Self {
            status: 200,
            body: json!({ "ok": true, "result": result }),
        }
    }

    /// The `result` of a successful answer.
    pub(crate) fn result(&self) -> Option<&Value> {
        match self.status {
            200 => self.body.get("result"),
            _ => None,
        }
    }
}

impl From<ApiError> for Answer {
    fn from(error: ApiError) -> Self {
        Self {
            status: error.code,
            body: error.body(),
        }
    }
}

impl From<Result<Value, ApiError>> for Answer {
    fn from(outcome: Result<Value, ApiError>) -> Self {
        match outcome {
            Ok(result) => Self::ok(result),
            Err(error) => error.into(),
        }
    }
}
