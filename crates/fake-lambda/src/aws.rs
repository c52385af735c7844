//! The fake SSM Parameter Store: `GetParameter` over the AWS JSON 1.1 protocol, which every AWS SDK
//! speaks to SSM, and nothing else.

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use serde_json::json;

use crate::server::{respond, Server};

const CONTENT_TYPE: &str = "application/x-amz-json-1.1";
const GET_PARAMETER: &str = "AmazonSSM.GetParameter";

/// A running fake SSM endpoint; it stops when dropped.
pub struct FakeSsm {
    server: Server,
    calls: Arc<AtomicUsize>,
}

impl FakeSsm {
    /// Starts the fake on `127.0.0.1` at a free port, serving `parameters` (name → value) as
    /// SecureString parameters.
    pub async fn start(parameters: BTreeMap<String, String>) -> io::Result<FakeSsm> {
        let parameters = Arc::new(parameters);
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&calls);
        let server = Server::start(move |request| {
            counter.fetch_add(1, Ordering::SeqCst);
            let answer = answer(&parameters, &request);
            async move { answer }
        })
        .await?;
        Ok(FakeSsm { server, calls })
    }

    /// The value for `AWS_ENDPOINT_URL`: `http://127.0.0.1:{port}`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// How many requests arrived, answered or not.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

fn answer(
    parameters: &BTreeMap<String, String>,
    request: &Request<Bytes>,
) -> Response<Full<Bytes>> {
    let target = request
        .headers()
        .get("x-amz-target")
        .and_then(|value| value.to_str().ok());
    if target != Some(GET_PARAMETER) {
        return error(
            "UnknownOperationException",
            "the fake serves GetParameter only",
        );
    }
    let body: serde_json::Value = serde_json::from_slice(request.body()).unwrap_or_default();
    let Some(name) = body["Name"].as_str() else {
        return error("ValidationException", "Name is required");
    };
    let Some(value) = parameters.get(name) else {
        return error("ParameterNotFound", name);
    };
    let parameter = json!({
        "Parameter": {
            "Name": name,
            "Type": "SecureString",
            "Value": value,
            "Version": 1,
            "DataType": "text",
            "ARN": format!("arn:aws:ssm:us-east-1:123456789012:parameter{name}"),
        }
    });
    respond(StatusCode::OK, CONTENT_TYPE, parameter.to_string())
}

fn error(kind: &str, message: &str) -> Response<Full<Bytes>> {
    let body = json!({"__type": kind, "message": message});
    respond(StatusCode::BAD_REQUEST, CONTENT_TYPE, body.to_string())
}
