//! The one place that decides whether an AWS failure is worth retrying: every SDK error from DynamoDB,
//! SQS or SSM becomes a [`PortError`] here.

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use tgq_core::PortError;

/// Error codes that mean "too much, too fast" or "not now": the same request may succeed later.
const TRANSIENT_CODES: &[&str] = &[
    // DynamoDB throttling.
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    // Concurrent writes to the same item; DynamoDB asks the caller to retry.
    "TransactionConflictException",
    "ReplicatedWriteConflictException",
    // SQS throttling (query and JSON protocol spellings) and KMS throttling of encrypted queues.
    "RequestThrottled",
    "AWS.SimpleQueueService.RequestThrottled",
    "KmsThrottled",
    // Failures on AWS's side that some services report with a code rather than a 5xx.
    "InternalServerError",
    "InternalFailure",
    "ServiceUnavailable",
];

/// What went wrong with a call, stripped of the SDK's types so that the decision is a pure function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure<'a> {
    /// The request could not be built: our own bug, retrying cannot help.
    Construction,
    /// No answer in time.
    Timeout,
    /// The request never reached the service, or the connection broke (DNS, TCP, TLS).
    Dispatch,
    /// An answer came but could not be read: usually a broken connection or proxy.
    Unreadable,
    /// The service answered with an error.
    Service {
        /// The AWS error code, if the answer carried one.
        code: Option<&'a str>,
        /// The HTTP status.
        status: u16,
    },
}

impl Failure<'_> {
    /// Whether the same call may succeed later.
    pub(crate) fn is_transient(self) -> bool {
        match self {
            Failure::Construction => false,
            Failure::Timeout | Failure::Dispatch | Failure::Unreadable => true,
            Failure::Service { code, status } => {
                status >= 500 || status == 429 || code.is_some_and(|c| TRANSIENT_CODES.contains(&c))
            }
        }
    }
}

/// Reads what went wrong from an SDK error.
pub(crate) fn failure<E: ProvideErrorMetadata>(err: &SdkError<E, HttpResponse>) -> Failure<'_> {
    match err {
        SdkError::ConstructionFailure(_) => Failure::Construction,
        SdkError::TimeoutError(_) => Failure::Timeout,
        SdkError::DispatchFailure(_) => Failure::Dispatch,
        SdkError::ServiceError(service) => Failure::Service {
            code: service.err().code(),
            status: service.raw().status().as_u16(),
        },
        // `ResponseError` and any variant added later.
        _ => Failure::Unreadable,
    }
}

/// Turns an SDK error from `what` into a port error: [`PortError::Unavailable`] when a retry may
/// succeed (throttling, 5xx, timeouts, network), [`PortError::Rejected`] when it cannot (validation,
/// item too large, access denied, missing table or queue).
pub(crate) fn port_error<E>(what: &'static str, err: SdkError<E, HttpResponse>) -> PortError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    if failure(&err).is_transient() {
        PortError::unavailable(what, err)
    } else {
        PortError::rejected(what, err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::error::{ConnectorError, ErrorMetadata};
    use aws_sdk_dynamodb::operation::put_item::PutItemError;
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;

    fn service_error(code: &str, status: u16) -> SdkError<PutItemError, HttpResponse> {
        let err = PutItemError::generic(ErrorMetadata::builder().code(code).build());
        let raw = HttpResponse::new(
            StatusCode::try_from(status).expect("valid status"),
            SdkBody::empty(),
        );
        SdkError::service_error(err, raw)
    }

    fn is_unavailable(err: PortError) -> bool {
        matches!(err, PortError::Unavailable { .. })
    }

    #[test]
    fn throttling_is_retried_whatever_the_status() {
        for code in [
            "ProvisionedThroughputExceededException",
            "ThrottlingException",
            "RequestLimitExceeded",
            "AWS.SimpleQueueService.RequestThrottled",
        ] {
            assert!(
                is_unavailable(port_error("test", service_error(code, 400))),
                "{code}"
            );
        }
    }

    #[test]
    fn server_errors_are_retried() {
        assert!(is_unavailable(port_error(
            "test",
            service_error("InternalServerError", 500)
        )));
        assert!(is_unavailable(port_error(
            "test",
            service_error("SomethingNew", 503)
        )));
    }

    #[test]
    fn timeouts_and_network_failures_are_retried() {
        let timeout: SdkError<PutItemError, HttpResponse> = SdkError::timeout_error("slow");
        assert!(is_unavailable(port_error("test", timeout)));
        let dispatch: SdkError<PutItemError, HttpResponse> =
            SdkError::dispatch_failure(ConnectorError::io("connection reset".into()));
        assert!(is_unavailable(port_error("test", dispatch)));
    }

    #[test]
    fn refusals_are_not_retried() {
        for code in [
            "ValidationException",
            "AccessDeniedException",
            "ResourceNotFoundException",
            "AWS.SimpleQueueService.NonExistentQueue",
        ] {
            assert!(
                matches!(
                    port_error("test", service_error(code, 400)),
                    PortError::Rejected { .. }
                ),
                "{code}"
            );
        }
    }

    #[test]
    fn a_request_that_cannot_be_built_is_not_retried() {
        let err: SdkError<PutItemError, HttpResponse> =
            SdkError::construction_failure("missing table name");
        assert!(matches!(
            port_error("test", err),
            PortError::Rejected { .. }
        ));
    }
}
