//! A fake AWS endpoint, answering at once over the JSON protocols every current AWS SDK speaks to
//! these services: SSM Parameter Store's `GetParameter` (JSON 1.1), for the secrets a function reads
//! at cold start; and, for the warm invocations of the cold-start bench, the data-plane calls the
//! functions make for an update — DynamoDB's item calls (JSON 1.0) answered as a table where no item
//! exists yet, and SQS's `SendMessage` (JSON 1.0) with the body's MD5, which the SDKs check. Nothing
//! is stored: what is measured against it is the caller's own time.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use md5::{Digest as _, Md5};
use serde_json::json;

use crate::server::{respond, Server};

const CONTENT_TYPE: &str = "application/x-amz-json-1.1";
const JSON_1_0: &str = "application/x-amz-json-1.0";
const GET_PARAMETER: &str = "AmazonSSM.GetParameter";
const SEND_MESSAGE: &str = "AmazonSQS.SendMessage";
/// DynamoDB's item calls: each answered `{}`, as for an item that does not exist yet (no old
/// attributes returned, no item read, a condition on absence met).
const DYNAMODB_ITEM_CALLS: [&str; 5] = [
    "DynamoDB_20120810.PutItem",
    "DynamoDB_20120810.UpdateItem",
    "DynamoDB_20120810.GetItem",
    "DynamoDB_20120810.DeleteItem",
    "DynamoDB_20120810.TransactWriteItems",
];

/// A running fake AWS endpoint; it stops when dropped.
pub struct FakeAws {
    server: Server,
    calls: Arc<AtomicUsize>,
}

impl FakeAws {
    /// Starts the fake on `127.0.0.1` at a free port, serving `parameters` (name → value) as
    /// SecureString parameters.
    pub async fn start(parameters: BTreeMap<String, String>) -> io::Result<FakeAws> {
        let parameters = Arc::new(parameters);
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&calls);
        let server = Server::start(move |request| {
            counter.fetch_add(1, Ordering::SeqCst);
            let answer = answer(&parameters, &request);
            async move { answer }
        })
        .await?;
        Ok(FakeAws { server, calls })
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
    match target {
        Some(GET_PARAMETER) => get_parameter(parameters, request),
        Some(SEND_MESSAGE) => send_message(request),
        Some(target) if DYNAMODB_ITEM_CALLS.contains(&target) => {
            respond(StatusCode::OK, JSON_1_0, "{}")
        }
        _ => error(
            "UnknownOperationException",
            "the fake serves GetParameter, SendMessage and DynamoDB's item calls only",
        ),
    }
}

fn send_message(request: &Request<Bytes>) -> Response<Full<Bytes>> {
    let body: serde_json::Value = serde_json::from_slice(request.body()).unwrap_or_default();
    let Some(message) = body["MessageBody"].as_str() else {
        return error("MissingParameter", "MessageBody is required");
    };
    let md5 = Md5::digest(message.as_bytes())
        .iter()
        .fold(String::new(), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        });
    let sent = json!({
        "MessageId": "00000000-0000-4000-8000-000000000000",
        "MD5OfMessageBody": md5,
        "SequenceNumber": "1",
    });
    respond(StatusCode::OK, JSON_1_0, sent.to_string())
}

fn get_parameter(
    parameters: &BTreeMap<String, String>,
    request: &Request<Bytes>,
) -> Response<Full<Bytes>> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn call(target: &str, body: &str) -> (StatusCode, serde_json::Value) {
        let request = Request::builder()
            .header("x-amz-target", target)
            .body(Bytes::from(body.to_owned()))
            .expect("a request");
        let parameters = BTreeMap::from([("/tgq/secret".to_owned(), "s3cret".to_owned())]);
        let response = answer(&parameters, &request);
        let status = response.status();
        let body = body_of(response);
        (
            status,
            serde_json::from_slice(&body).expect("a JSON answer"),
        )
    }

    fn body_of(response: Response<Full<Bytes>>) -> Bytes {
        use http_body_util::BodyExt as _;
        let collected = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
            .block_on(response.into_body().collect())
            .expect("a body");
        collected.to_bytes()
    }

    #[test]
    fn send_message_answers_the_body_s_md5_and_dynamodb_item_calls_an_empty_table() {
        let (status, sent) = call(SEND_MESSAGE, r#"{"QueueUrl":"q","MessageBody":"hello"}"#);
        assert_eq!(status, StatusCode::OK);
        assert_eq!(sent["MD5OfMessageBody"], "5d41402abc4b2a76b9719d911017c592");
        for target in DYNAMODB_ITEM_CALLS {
            assert_eq!(call(target, "{}"), (StatusCode::OK, json!({})), "{target}");
        }
        let (status, parameter) = call(GET_PARAMETER, r#"{"Name":"/tgq/secret"}"#);
        assert_eq!(status, StatusCode::OK);
        assert_eq!(parameter["Parameter"]["Value"], "s3cret");
        let (status, refused) = call("DynamoDB_20120810.Scan", "{}");
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(refused["__type"], "UnknownOperationException");
    }
}
