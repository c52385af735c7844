//! tgq-aws's integration tests, one binary: the DynamoDB and SQS adapters on moto.

mod common;

mod aws;
mod conformance;
mod misconfigured;
