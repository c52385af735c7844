//! A fixed slice of the webhook fuzz target, run in the suite: the same generator and properties
//! as `fuzz-webhook`, 20,000 inputs from a fixed seed.

#[test]
fn twenty_thousand_hostile_webhook_requests_break_no_property() {
    let violations = tgq_drill::fuzz::run(16, 20_000);
    assert!(violations.is_empty(), "{violations:#?}");
}
