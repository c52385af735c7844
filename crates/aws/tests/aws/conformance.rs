//! The port conformance suite against the AWS adapters on moto server (see `common`).

use crate::common;

tgq_conformance::conformance_tests!(async { common::emulator().await.adapters() });

tgq_conformance::lease_conformance_tests!(common::poller_lease());
tgq_conformance::budget_conformance_tests!(common::budget_cells());
tgq_conformance::broadcast_conformance_tests!(common::broadcasts());
