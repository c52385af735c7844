//! The port conformance suite against the AWS adapters on moto server (see `common`).

mod common;

tgq_conformance::conformance_tests!(async { common::emulator().await.adapters() });

tgq_conformance::lease_conformance_tests!(common::poller_lease());
