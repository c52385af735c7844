//! A counting, fault-injecting proxy between a function and the AWS emulator: the function's
//! `AWS_ENDPOINT_URL` points here, every request is counted by its operation and passed on to moto
//! unchanged — unless a fault is set for its service, in which case it is answered the way AWS
//! answers that fault. No product hook: the function cannot tell it from AWS having a bad day, and
//! the counts are what AWS would bill.
//!
//! It also tells a waiting event source mapping when a message was sent ([`Proxy::sends`]): what a
//! long poll on SQS learns by being answered at once.
//!
//! Every request is also named as the IAM action it needs ([`Proxy::actions`]): the service is the
//! signing name in the request's SigV4 credential scope, the operation its `X-Amz-Target` (the
//! JSON protocol: DynamoDB, SQS, SSM, KMS, CloudWatch Logs) or its `Action=` form field (the Query
//! protocol: CloudFormation, STS, CloudWatch). SSM reads also keep the parameter names and paths
//! they asked for ([`Proxy::ssm_reads`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::body::{to_bytes, Body};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::Notify;

/// The AWS services tgq calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    /// DynamoDB (`X-Amz-Target: DynamoDB_20120810.*`).
    Dynamo,
    /// SQS (`X-Amz-Target: AmazonSQS.*`).
    Sqs,
}

/// How a service answers while the fault is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AwsFault {
    /// 503 ServiceUnavailable: the endpoint cannot be reached or is down.
    Unavailable,
    /// DynamoDB `ProvisionedThroughputExceededException` / SQS `RequestThrottled` (400).
    Throttled,
    /// `AccessDeniedException` (400): an IAM policy that does not allow the call.
    AccessDenied,
    /// DynamoDB `ResourceNotFoundException` / SQS `QueueDoesNotExist` (400): a wrong table or
    /// queue name, or another region.
    NotFound,
}

#[derive(Default)]
struct Faults {
    dynamo: Option<AwsFault>,
    sqs: Option<AwsFault>,
    /// Requests answered with a fault, per service.
    refused: [u64; 2],
    /// Every request, by its `X-Amz-Target` (`DynamoDB_20120810.PutItem`, `AmazonSQS.SendMessage`).
    requests: BTreeMap<String, u64>,
    /// Of those, the DynamoDB requests on the bots' send budgets (items keyed `budget#…`).
    budget_requests: BTreeMap<String, u64>,
    /// How long moto took to answer each request it was passed, by `X-Amz-Target`.
    answer_times: BTreeMap<String, Vec<Duration>>,
    /// Every request, by the IAM action it needs (`dynamodb:PutItem`, `cloudformation:DescribeStacks`).
    actions: BTreeMap<String, u64>,
    /// The SSM parameter names (and paths) each SSM read asked for, by IAM action.
    ssm_reads: BTreeMap<String, BTreeSet<String>>,
}

/// How long the emulator took to answer each request a proxy passed on, by operation: what of a
/// function's latency is the emulator's.
#[derive(Clone, Debug, Default)]
pub struct AnswerTimes(pub BTreeMap<String, Vec<Duration>>);

/// Requests a proxy saw, by operation: what a function asked of AWS.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Requests(pub BTreeMap<String, u64>);

impl Requests {
    /// DynamoDB operations that write (each billed in write units).
    pub const DYNAMO_WRITES: [&'static str; 5] = [
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "TransactWriteItems",
        "BatchWriteItem",
    ];
    /// DynamoDB operations that read.
    pub const DYNAMO_READS: [&'static str; 5] = [
        "GetItem",
        "Query",
        "Scan",
        "BatchGetItem",
        "TransactGetItems",
    ];

    /// Requests of one operation of DynamoDB (`"PutItem"`).
    pub fn dynamo(&self, operation: &str) -> u64 {
        self.of(&format!("DynamoDB_20120810.{operation}"))
    }

    /// Requests of one operation of SQS (`"SendMessage"`).
    pub fn sqs(&self, operation: &str) -> u64 {
        self.of(&format!("AmazonSQS.{operation}"))
    }

    /// DynamoDB requests that write.
    pub fn dynamo_writes(&self) -> u64 {
        Self::DYNAMO_WRITES.iter().map(|op| self.dynamo(op)).sum()
    }

    /// DynamoDB requests that read.
    pub fn dynamo_reads(&self) -> u64 {
        Self::DYNAMO_READS.iter().map(|op| self.dynamo(op)).sum()
    }

    /// Every SQS request.
    pub fn sqs_total(&self) -> u64 {
        self.prefixed("AmazonSQS.")
    }

    /// Every DynamoDB request.
    pub fn dynamo_total(&self) -> u64 {
        self.prefixed("DynamoDB_20120810.")
    }

    fn of(&self, target: &str) -> u64 {
        self.0.get(target).copied().unwrap_or(0)
    }

    fn prefixed(&self, prefix: &str) -> u64 {
        self.0
            .iter()
            .filter(|(target, _)| target.starts_with(prefix))
            .map(|(_, n)| n)
            .sum()
    }
}

/// A running proxy.
#[derive(Clone)]
pub struct Proxy {
    addr: SocketAddr,
    faults: Arc<Mutex<Faults>>,
    sends: Arc<Notify>,
}

#[derive(Clone)]
struct Shared {
    upstream: String,
    http: reqwest::Client,
    faults: Arc<Mutex<Faults>>,
    sends: Arc<Notify>,
}

impl Proxy {
    /// Starts a proxy on a free loopback port passing requests to `upstream` (moto).
    pub async fn start(upstream: &str) -> anyhow::Result<Proxy> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let faults = Arc::new(Mutex::new(Faults::default()));
        let sends = Arc::new(Notify::new());
        let shared = Shared {
            upstream: upstream.trim_end_matches('/').to_owned(),
            http: reqwest::Client::new(),
            faults: faults.clone(),
            sends: sends.clone(),
        };
        let app = Router::new().fallback(forward).with_state(shared);
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Proxy {
            addr,
            faults,
            sends,
        })
    }

    /// Notified (one permit, kept until taken) each time moto accepts an SQS `SendMessage` or
    /// `SendMessageBatch` through this proxy.
    pub fn sends(&self) -> Arc<Notify> {
        self.sends.clone()
    }

    /// The URL to give the function as `AWS_ENDPOINT_URL`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Sets (or with `None` clears) the fault of `service`.
    pub fn set(&self, service: Service, fault: Option<AwsFault>) {
        let mut faults = self.faults.lock().unwrap_or_else(PoisonError::into_inner);
        match service {
            Service::Dynamo => faults.dynamo = fault,
            Service::Sqs => faults.sqs = fault,
        }
    }

    /// The requests seen since the proxy started or was last [`take_requests`](Self::take_requests).
    pub fn requests(&self) -> Requests {
        let faults = self.faults.lock().unwrap_or_else(PoisonError::into_inner);
        Requests(faults.requests.clone())
    }

    /// The requests seen so far, starting the count again from zero.
    pub fn take_requests(&self) -> Requests {
        let mut faults = self.faults.lock().unwrap_or_else(PoisonError::into_inner);
        Requests(std::mem::take(&mut faults.requests))
    }

    /// The requests on the bots' send budgets seen so far (counted in
    /// [`take_requests`](Self::take_requests) too), starting the count again from zero.
    pub fn take_budget_requests(&self) -> Requests {
        let mut faults = self.faults.lock().unwrap_or_else(PoisonError::into_inner);
        Requests(std::mem::take(&mut faults.budget_requests))
    }

    /// Moto's answer times since the proxy started or this was last called, starting again
    /// from none.
    pub fn take_answer_times(&self) -> AnswerTimes {
        let mut faults = self.faults.lock().unwrap_or_else(PoisonError::into_inner);
        AnswerTimes(std::mem::take(&mut faults.answer_times))
    }

    /// Every request seen since the proxy started, by the IAM action it needs
    /// (`ssm:GetParameter`), whatever its protocol.
    pub fn actions(&self) -> BTreeMap<String, u64> {
        let faults = self.faults.lock().unwrap_or_else(PoisonError::into_inner);
        faults.actions.clone()
    }

    /// The parameter names (`GetParameter`, `GetParameters`) and paths (`GetParametersByPath`) the
    /// SSM reads seen since the proxy started asked for, by IAM action (`ssm:GetParameters`).
    pub fn ssm_reads(&self) -> BTreeMap<String, BTreeSet<String>> {
        let faults = self.faults.lock().unwrap_or_else(PoisonError::into_inner);
        faults.ssm_reads.clone()
    }

    /// Requests answered with a fault so far, (DynamoDB, SQS).
    pub fn refused(&self) -> (u64, u64) {
        let faults = self.faults.lock().unwrap_or_else(PoisonError::into_inner);
        (faults.refused[0], faults.refused[1])
    }
}

fn service_of(headers: &HeaderMap) -> Option<Service> {
    let target = headers.get("x-amz-target")?.to_str().ok()?;
    if target.starts_with("DynamoDB_") {
        Some(Service::Dynamo)
    } else if target.starts_with("AmazonSQS") {
        Some(Service::Sqs)
    } else {
        None
    }
}

/// Whether a DynamoDB request's key is a send budget's item (docs/design/pacing.md).
fn names_budget_item(body: &[u8]) -> bool {
    let Ok(request) = serde_json::from_slice::<serde_json::Value>(body) else {
        return false;
    };
    request["Key"]["pk"]["S"]
        .as_str()
        .is_some_and(|pk| pk.starts_with("budget#"))
}

async fn forward(State(shared): State<Shared>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let service = service_of(&parts.headers);
    let Ok(bytes) = to_bytes(body, 16 * 1024 * 1024).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    // Named before any fault: a refused request still asked for the permission.
    if let Some(action) = iam_action(&parts.headers, &bytes) {
        let mut faults = shared.faults.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(names) = ssm_names(&action, &bytes) {
            faults
                .ssm_reads
                .entry(action.clone())
                .or_default()
                .extend(names);
        }
        *faults.actions.entry(action).or_default() += 1;
    }
    let fault = {
        let mut faults = shared.faults.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(target) = parts
            .headers
            .get("x-amz-target")
            .and_then(|t| t.to_str().ok())
        {
            *faults.requests.entry(target.to_owned()).or_default() += 1;
            if service == Some(Service::Dynamo) && names_budget_item(&bytes) {
                *faults.budget_requests.entry(target.to_owned()).or_default() += 1;
            }
        }
        let fault = match service {
            Some(Service::Dynamo) => faults.dynamo,
            Some(Service::Sqs) => faults.sqs,
            None => None,
        };
        if let (Some(_), Some(service)) = (fault, service) {
            faults.refused[service as usize] += 1;
        }
        fault
    };
    if let (Some(fault), Some(service)) = (fault, service) {
        return refusal(service, fault);
    }
    let target = parts
        .headers
        .get("x-amz-target")
        .and_then(|t| t.to_str().ok())
        .map(str::to_owned);
    let sends = target
        .as_deref()
        .is_some_and(|t| matches!(t, "AmazonSQS.SendMessage" | "AmazonSQS.SendMessageBatch"));
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut upstream = shared
        .http
        .request(parts.method.clone(), format!("{}{path}", shared.upstream))
        .body(bytes);
    for (name, value) in &parts.headers {
        if name != "host" && name != "content-length" {
            upstream = upstream.header(name, value);
        }
    }
    let asked = Instant::now();
    match upstream.send().await {
        Ok(answer) => {
            let status = answer.status();
            let headers = answer.headers().clone();
            let body = answer.bytes().await.unwrap_or_default();
            if let Some(target) = target {
                shared
                    .faults
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .answer_times
                    .entry(target)
                    .or_default()
                    .push(asked.elapsed());
            }
            if sends && status.is_success() {
                shared.sends.notify_one();
            }
            let mut response = Response::new(Body::from(body));
            *response.status_mut() = status;
            for (name, value) in &headers {
                if name != "content-length" && name != "transfer-encoding" {
                    response.headers_mut().insert(name, value.clone());
                }
            }
            response
        }
        Err(_) => StatusCode::BAD_GATEWAY.into_response(),
    }
}

/// The IAM action a request needs: `{service}:{operation}`, the service from the SigV4 credential
/// scope (`Credential=AKID/20260101/us-east-1/dynamodb/aws4_request`), the operation from
/// `X-Amz-Target` (`DynamoDB_20120810.PutItem`) or the Query protocol's `Action=` form field.
fn iam_action(headers: &HeaderMap, body: &[u8]) -> Option<String> {
    let authorization = headers.get("authorization")?.to_str().ok()?;
    let scope = authorization
        .split("Credential=")
        .nth(1)?
        .split(',')
        .next()?;
    let signing_name = scope.split('/').nth(3)?;
    // CloudWatch signs as `monitoring`; its IAM actions are `cloudwatch:*`.
    let service = match signing_name {
        "monitoring" => "cloudwatch",
        other => other,
    };
    let operation = match headers.get("x-amz-target").and_then(|t| t.to_str().ok()) {
        Some(target) => target.rsplit('.').next()?.to_owned(),
        None => std::str::from_utf8(body)
            .ok()?
            .split('&')
            .find_map(|pair| pair.strip_prefix("Action="))?
            .to_owned(),
    };
    Some(format!("{service}:{operation}"))
}

/// The parameter names or path an SSM read asks for; `None` for any other request.
fn ssm_names(action: &str, body: &[u8]) -> Option<Vec<String>> {
    let field = match action {
        "ssm:GetParameter" => "Name",
        "ssm:GetParameters" => "Names",
        "ssm:GetParametersByPath" => "Path",
        _ => return None,
    };
    let request: serde_json::Value = serde_json::from_slice(body).ok()?;
    Some(match &request[field] {
        serde_json::Value::String(name) => vec![name.clone()],
        serde_json::Value::Array(names) => names
            .iter()
            .filter_map(|n| n.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    })
}

/// The answer AWS gives for `fault` in the JSON protocol both services speak.
fn refusal(service: Service, fault: AwsFault) -> Response {
    let (status, kind, query_code, message) = match (service, fault) {
        (_, AwsFault::Unavailable) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "com.amazonaws.dynamodb.v20120810#ServiceUnavailable",
            "ServiceUnavailable",
            "Service Unavailable",
        ),
        (Service::Dynamo, AwsFault::Throttled) => (
            StatusCode::BAD_REQUEST,
            "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
            "",
            "The level of configured provisioned throughput for the table was exceeded.",
        ),
        (Service::Sqs, AwsFault::Throttled) => (
            StatusCode::BAD_REQUEST,
            "com.amazonaws.sqs#RequestThrottled",
            "AWS.SimpleQueueService.RequestThrottled;Sender",
            "Request is throttled.",
        ),
        (_, AwsFault::AccessDenied) => (
            StatusCode::BAD_REQUEST,
            "com.amazon.coral.service#AccessDeniedException",
            "AccessDenied;Sender",
            "User: arn:aws:sts::123456789012:assumed-role/tgq/drill is not authorized to perform this action",
        ),
        (Service::Dynamo, AwsFault::NotFound) => (
            StatusCode::BAD_REQUEST,
            "com.amazonaws.dynamodb.v20120810#ResourceNotFoundException",
            "",
            "Requested resource not found",
        ),
        (Service::Sqs, AwsFault::NotFound) => (
            StatusCode::BAD_REQUEST,
            "com.amazonaws.sqs#QueueDoesNotExist",
            "AWS.SimpleQueueService.NonExistentQueue;Sender",
            "The specified queue does not exist.",
        ),
    };
    let kind = match (service, fault) {
        (Service::Sqs, AwsFault::Unavailable) => "com.amazonaws.sqs#ServiceUnavailable",
        _ => kind,
    };
    let body = serde_json::json!({ "__type": kind, "message": message }).to_string();
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        "content-type",
        HeaderValue::from_static("application/x-amz-json-1.0"),
    );
    if !query_code.is_empty() {
        headers.insert("x-amzn-query-error", HeaderValue::from_static(query_code));
    }
    response
}
