//! tgq-aws's integration tests on moto: the DynamoDB and SQS adapters (the 200,000-chat audience of
//! a handler's broadcast is a binary of its own, `tests/audience`).

mod common;

mod aws;
mod conformance;
mod misconfigured;
