//! The webhook Lambda: [`run`] is the whole function, from its cold start on. HTTP in (Function URL
//! or HTTP API, via `lambda_http`), routed by path to a bot's [`Webhook`] use case ([`Webhooks`]:
//! `/webhook/{bot_id}` for a registry bot, any other path for the environment's bot), HTTP status
//! out. The clients and ports are built in one call, [`assemble`].

use std::time::Duration;

use bytes::Bytes;
use std::net::IpAddr;

use ipnet::IpNet;
use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt as _, Response};
use secrecy::SecretString;
use tgq_core::config::{AwsResources, ConfigError, SecretSource, Vars};
use tgq_core::ids::BotId;
use tgq_core::ingest::{
    Answer, RequestHead, SharedSettings, Webhook, WebhookPorts, Webhooks, SECRET_HEADER,
};
use tgq_core::registry::{Layout, Registry};
use tracing::Instrument as _;

mod assemble;

pub use assemble::assemble;

/// The webhook Lambda: logging, the configuration read from the environment, the parts
/// [`assemble`]d once per cold start, then one answer for every request, its metrics flushed as
/// EMF lines after each. A webhook function's `main` is this call.
pub async fn run() -> Result<(), lambda_http::Error> {
    crate::init_logging();
    let config = WebhookConfig::from_vars(&Vars::from_env())?;
    let webhooks = assemble(&config).await?;
    let metrics = crate::init_metrics()?;
    metrics_cloudwatch_embedded::lambda::handler::run_http(metrics, |request: Request| {
        handle(&webhooks, &config.allowed_sources, request)
    })
    .await
}

/// The webhook's configuration, read once per cold start.
#[derive(Clone, Debug)]
pub struct WebhookConfig {
    /// The environment's bot, served on every path but `/webhook/{bot_id}`: `TGQ_BOT_ID`, with
    /// its secret from `TGQ_WEBHOOK_SECRET` or `TGQ_WEBHOOK_SECRET_PARAM`. `None`: the stack
    /// hosts registry bots only.
    pub env_bot: Option<(BotId, SecretSource)>,
    /// `TGQ_BOTS_PARAMETER_PREFIX`: the bot registry's place in SSM, if there is one.
    pub bots: Option<Layout>,
    /// `TGQ_REGISTRY_REFRESH_SECS`: how often the registry is read again.
    pub registry_refresh: Duration,
    /// `TGQ_MAX_BODY_BYTES`.
    pub max_body_bytes: usize,
    /// `TGQ_RECORD_TTL_SECS`: the records' `expires_at`, which DynamoDB's TTL acts on.
    pub record_ttl: Duration,
    /// `TGQ_TABLE`, `TGQ_QUEUE_URL`, `TGQ_DLQ_URL`.
    pub resources: AwsResources,
    /// `TGQ_ALLOWED_SOURCE_CIDRS`.
    pub allowed_sources: AllowedSources,
    /// `TGQ_ACK_CALLBACKS`.
    pub ack_callbacks: bool,
}

impl WebhookConfig {
    /// Reads and checks every variable, naming the first one that is missing or malformed.
    pub fn from_vars(vars: &Vars) -> Result<Self, ConfigError> {
        let env_bot = match vars.env_bot_id()? {
            Some(bot_id) => Some((bot_id, vars.webhook_secret()?)),
            None => None,
        };
        let bots = vars.bots_layout()?;
        if env_bot.is_none() && bots.is_none() {
            return Err(ConfigError::Missing {
                name: "TGQ_BOT_ID".into(),
                hint: "a short id for the bot, e.g. `mybot` (or TGQ_BOTS_PARAMETER_PREFIX: the bot registry's SSM path)",
            });
        }
        Ok(Self {
            env_bot,
            bots,
            registry_refresh: vars.registry_refresh()?,
            max_body_bytes: vars.max_body_bytes()?,
            record_ttl: vars.record_ttl()?,
            resources: vars.aws_resources()?,
            allowed_sources: AllowedSources::from_vars(vars)?,
            ack_callbacks: vars.ack_callbacks()?,
        })
    }

    /// What every bot's webhook shares.
    pub fn shared(&self) -> SharedSettings {
        SharedSettings {
            max_body_bytes: self.max_body_bytes,
            record_ttl: self.record_ttl,
            ack_callbacks: self.ack_callbacks,
        }
    }

    /// The environment's bot's webhook settings, once its secret is resolved; `None` without one.
    pub fn settings(&self, secret: SecretString) -> Option<tgq_core::ingest::WebhookSettings> {
        let (bot_id, _) = self.env_bot.as_ref()?;
        Some(self.shared().for_bot(bot_id.clone(), secret))
    }

    /// Every bot's webhook: the environment's bot (`env_secret`, resolved) and the bots of
    /// `registry`.
    pub fn webhooks(
        &self,
        ports: WebhookPorts,
        env_secret: Option<SecretString>,
        registry: Option<std::sync::Arc<Registry>>,
    ) -> Webhooks {
        let env = self
            .env_bot
            .as_ref()
            .zip(env_secret)
            .map(|((bot_id, _), secret)| (bot_id.clone(), secret));
        Webhooks::new(self.shared(), ports, env, registry)
    }
}

/// `TGQ_ALLOWED_SOURCE_CIDRS`: the source address ranges the webhook answers (Telegram publishes
/// 149.154.160.0/20 and 91.108.4.0/22); none set answers every source. The address is the one the
/// Function URL or HTTP API saw: behind a proxy (CloudFront, a load balancer) it is the proxy's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowedSources(Vec<IpNet>);

impl AllowedSources {
    /// Reads `TGQ_ALLOWED_SOURCE_CIDRS` (comma-separated CIDR ranges; unset or empty: every source).
    pub fn from_vars(vars: &Vars) -> Result<Self, ConfigError> {
        let Some(text) = vars.get(SOURCES_VAR) else {
            return Ok(Self::default());
        };
        text.split(',')
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(|part| {
                part.parse::<IpNet>().map_err(|_| ConfigError::Malformed {
                    name: SOURCES_VAR,
                    expected: "comma-separated CIDR ranges, e.g. 149.154.160.0/20,91.108.4.0/22",
                })
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// Whether a request from `source` is answered; an unknown source is only when no range is set.
    pub fn admit(&self, source: Option<IpAddr>) -> bool {
        match source {
            _ if self.0.is_empty() => true,
            Some(ip) => self.0.iter().any(|range| range.contains(&ip)),
            None => false,
        }
    }
}

const SOURCES_VAR: &str = "TGQ_ALLOWED_SOURCE_CIDRS";

/// The address the request came from, as the Function URL or HTTP API request context says.
fn source_ip(request: &Request) -> Option<IpAddr> {
    let source = match request.request_context_ref()? {
        RequestContext::ApiGatewayV2(context) => context.http.source_ip.clone(),
        RequestContext::ApiGatewayV1(context) => context.identity.source_ip.clone(),
        _ => None,
    };
    source?.parse().ok()
}

/// Answers one HTTP request. A source outside `sources` is 403 before anything else is looked at;
/// then the path picks the bot (404 for none, before anything is written); every refusal is a
/// status with a short reason; nothing is dropped silently. Every log line of the request carries
/// its Lambda request id.
pub async fn handle(
    webhooks: &Webhooks,
    sources: &AllowedSources,
    request: Request,
) -> Result<Response<Body>, lambda_http::Error> {
    let request_id = request
        .lambda_context_ref()
        .map(|context| context.request_id.clone())
        .unwrap_or_default();
    let span = tracing::info_span!("request", request_id = %request_id);
    let source = source_ip(&request);
    if !sources.admit(source) {
        let _entered = span.enter();
        tracing::warn!(source = ?source, "request from outside TGQ_ALLOWED_SOURCE_CIDRS refused");
        let body = serde_json::json!({
            "ok": false,
            "result": "forbidden: the request's source address is not allowed",
        });
        return Ok(Response::builder()
            .status(403)
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))?);
    }
    answer(webhooks, request).instrument(span).await
}

async fn answer(
    webhooks: &Webhooks,
    request: Request,
) -> Result<Response<Body>, lambda_http::Error> {
    let answer = match webhooks.route(request.uri().path()).await {
        Ok(webhook) => answer_for(&webhook, &request).await,
        Err(refused) => Answer::of(&Err(refused)),
    };
    let response = Response::builder()
        .status(answer.status)
        .header("content-type", "application/json")
        .body(Body::from(answer.body))?;
    Ok(response)
}

/// The answer of one bot's webhook to the request.
async fn answer_for(webhook: &Webhook, request: &Request) -> Answer {
    let body = match request.body() {
        Body::Empty => Bytes::new(),
        Body::Text(text) => Bytes::copy_from_slice(text.as_bytes()),
        Body::Binary(bytes) => Bytes::copy_from_slice(bytes),
        _ => Bytes::new(),
    };
    let head = RequestHead {
        method: request.method().as_str(),
        secret: request.headers().get(SECRET_HEADER).map(|v| v.as_bytes()),
        // Lambda hands over the whole body: its size is known, not only declared.
        declared_length: Some(body.len()),
    };
    match webhook.admit(&head) {
        Ok(()) => webhook.receive(body).await.answer(),
        Err(refused) => Answer::of(&Err(refused)),
    }
}
