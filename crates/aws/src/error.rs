//! The one place that decides whether an AWS failure is worth retrying: every SDK error from DynamoDB,
//! SQS or SSM becomes a [`PortError`] here.

use std::collections::HashMap;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::AttributeValue;
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

/// Error codes that mean the stack is set up wrong: no request succeeds until an operator fixes it,
/// and then every one does. Never the update's fault.
const MISCONFIGURED_CODES: &[&str] = &[
    // Permissions (an IAM edit, a missing KMS grant) and credentials.
    "AccessDenied",
    "AccessDeniedException",
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "ExpiredTokenException",
    "MissingAuthenticationToken",
    "KMS.AccessDeniedException",
    "KmsAccessDenied",
    "KMS.DisabledException",
    "KmsDisabled",
    // A wrong TGQ_TABLE / TGQ_QUEUE_URL / secret parameter name, or resources in another region.
    "ParameterNotFound",
    "ResourceNotFoundException",
    "AWS.SimpleQueueService.NonExistentQueue",
    "QueueDoesNotExist",
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
        /// The error's message, if the answer carried one.
        message: Option<&'a str>,
        /// The HTTP status.
        status: u16,
    },
}

/// What the caller may do about a failure (the variants of [`PortError`] without their payload).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Unavailable,
    Misconfigured,
    TooLarge,
    Rejected,
}

impl Failure<'_> {
    /// Sorts the failure: throttling, 5xx and network trouble may pass; permissions and missing
    /// resources wait for an operator; an item over DynamoDB's size limit can never be stored;
    /// anything else is a request this version got wrong.
    pub(crate) fn kind(self) -> Kind {
        match self {
            Failure::Construction => Kind::Rejected,
            Failure::Timeout | Failure::Dispatch | Failure::Unreadable => Kind::Unavailable,
            Failure::Service {
                code,
                message,
                status,
            } => {
                let is = |codes: &[&str]| code.is_some_and(|c| codes.contains(&c));
                if status >= 500 || status == 429 || is(TRANSIENT_CODES) {
                    Kind::Unavailable
                } else if is(MISCONFIGURED_CODES) || status == 403 {
                    Kind::Misconfigured
                } else if code == Some("ValidationException")
                    && message.is_some_and(|m| m.contains("Item size"))
                {
                    // "Item size has exceeded the maximum allowed size", on a put or an update.
                    Kind::TooLarge
                } else {
                    Kind::Rejected
                }
            }
        }
    }
}

/// Sorts the reason DynamoDB gives for cancelling a transaction's item (`CancellationReason`),
/// other than a failed condition, which the caller reads itself: throttling and a conflicting
/// transaction on the same item may pass; an item over the size limit never will; anything else is
/// a request this version got wrong.
pub(crate) fn cancellation_kind(code: Option<&str>, message: Option<&str>) -> Kind {
    match code {
        Some(
            "TransactionConflict"
            | "ThrottlingError"
            | "ProvisionedThroughputExceeded"
            | "RequestLimitExceeded",
        ) => Kind::Unavailable,
        Some("ValidationError") if message.is_some_and(|m| m.contains("Item size")) => {
            Kind::TooLarge
        }
        _ => Kind::Rejected,
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
            message: service.err().message(),
            status: service.raw().status().as_u16(),
        },
        // `ResponseError` and any variant added later.
        _ => Failure::Unreadable,
    }
}

/// Turns an SDK error from `what` into the port error its [`Kind`] names.
pub(crate) fn port_error<E>(what: &'static str, err: SdkError<E, HttpResponse>) -> PortError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match failure(&err).kind() {
        Kind::Unavailable => PortError::unavailable(what, err),
        Kind::Misconfigured => PortError::misconfigured(what, err),
        Kind::TooLarge => PortError::too_large(what, err),
        Kind::Rejected => PortError::rejected(what, err),
    }
}

/// The stored item (when DynamoDB returned it) of an update refused by its condition; `None`
/// for any other failure.
pub(crate) fn update_condition_failed(
    err: &SdkError<UpdateItemError, HttpResponse>,
) -> Option<Option<HashMap<String, AttributeValue>>> {
    match err.as_service_error() {
        Some(UpdateItemError::ConditionalCheckFailedException(e)) => Some(e.item.clone()),
        _ => None,
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
        service_error_saying(code, "", status)
    }

    fn service_error_saying(
        code: &str,
        message: &str,
        status: u16,
    ) -> SdkError<PutItemError, HttpResponse> {
        let err =
            PutItemError::generic(ErrorMetadata::builder().code(code).message(message).build());
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
    fn a_transaction_cancelled_by_throttling_or_a_conflict_is_retried_and_oversize_is_too_large() {
        for code in [
            "TransactionConflict",
            "ThrottlingError",
            "ProvisionedThroughputExceeded",
            "RequestLimitExceeded",
        ] {
            assert_eq!(
                cancellation_kind(Some(code), None),
                Kind::Unavailable,
                "{code}"
            );
        }
        assert_eq!(
            cancellation_kind(
                Some("ValidationError"),
                Some("Item size has exceeded the maximum allowed size")
            ),
            Kind::TooLarge
        );
        assert_eq!(
            cancellation_kind(Some("ValidationError"), Some("bad expression")),
            Kind::Rejected
        );
        assert_eq!(cancellation_kind(None, None), Kind::Rejected);
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
    fn a_misconfigured_stack_is_told_apart_from_a_bad_request() {
        for code in [
            "AccessDeniedException",
            "ResourceNotFoundException",
            "AWS.SimpleQueueService.NonExistentQueue",
            "UnrecognizedClientException",
        ] {
            assert!(
                matches!(
                    port_error("test", service_error(code, 400)),
                    PortError::Misconfigured { .. }
                ),
                "{code}"
            );
        }
        assert!(matches!(
            port_error("test", service_error("ValidationException", 400)),
            PortError::Rejected { .. }
        ));
    }

    #[test]
    fn an_item_over_the_size_limit_is_too_large_not_rejected() {
        let err = service_error_saying(
            "ValidationException",
            "Item size has exceeded the maximum allowed size",
            400,
        );
        assert!(matches!(
            port_error("test", err),
            PortError::TooLarge { .. }
        ));
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
