//! What the harness takes from `template.yaml`, so the emulated stack is the one SAM deploys.

use serde_yaml::Value;

const TEMPLATE: &str = include_str!("../../../template.yaml");

/// The default of a numeric template parameter.
pub fn parameter_default(name: &str) -> u64 {
    let template: Value = serde_yaml::from_str(TEMPLATE).expect("template.yaml is valid YAML");
    let default = &template["Parameters"][name]["Default"];
    default
        .as_u64()
        .or_else(|| default.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("template parameter {name} has no numeric default"))
}

/// The updates queue's `maxReceiveCount`, as the stack gets it when nobody overrides it.
pub fn max_receive_count() -> u32 {
    u32::try_from(parameter_default("MaxReceiveCount")).expect("a 32-bit count")
}
