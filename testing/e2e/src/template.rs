//! What the harness takes from `template.yaml`, so the emulated stack is the one SAM deploys.

use std::collections::{BTreeMap, BTreeSet};

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

/// How a granted action the tests never see says why it is granted: a trailing comment on the
/// action's line in `template.yaml` (`- ssm:GetParameter # not seen in tests: …`).
pub const UNSEEN: &str = "# not seen in tests:";

/// The actions `resource`'s section of `template.yaml` grants with an [`UNSEEN`] comment, and why.
pub fn unseen_with_reason(resource: &str) -> BTreeMap<String, String> {
    let section: Vec<&str> = TEMPLATE
        .lines()
        .skip_while(|line| *line != format!("  {resource}:"))
        .skip(1)
        // Up to the next line indented by exactly two spaces: the next resource or section comment.
        .take_while(|line| !line.starts_with("  ") || line.starts_with("   "))
        .collect();
    assert!(
        !section.is_empty(),
        "template.yaml has no resource {resource}"
    );
    section
        .iter()
        .filter_map(|line| {
            let (code, reason) = line.split_once(UNSEEN)?;
            let action = code
                .trim()
                .trim_start_matches("Action:")
                .trim_start_matches('-')
                .trim();
            Some((action.to_owned(), reason.trim().to_owned()))
        })
        .collect()
}

/// Every action the statements of the managed policy `resource` allow, whatever its conditions
/// (a statement under `!If` counts: it is granted when its condition holds).
pub fn policy_actions(resource: &str) -> BTreeSet<String> {
    let template: Value = serde_yaml::from_str(TEMPLATE).expect("template.yaml is valid YAML");
    let policy = &template["Resources"][resource];
    assert_eq!(
        policy["Type"].as_str(),
        Some("AWS::IAM::ManagedPolicy"),
        "{resource} is a managed policy"
    );
    fn collect(value: &Value, out: &mut BTreeSet<String>) {
        match value {
            Value::Mapping(map) => {
                if let Some(action) = map.get("Action") {
                    match action {
                        Value::String(one) => {
                            out.insert(one.clone());
                        }
                        Value::Sequence(many) => {
                            out.extend(many.iter().filter_map(Value::as_str).map(str::to_owned));
                        }
                        _ => {}
                    }
                }
                map.values().for_each(|v| collect(v, out));
            }
            Value::Sequence(items) => items.iter().for_each(|v| collect(v, out)),
            Value::Tagged(tagged) => collect(&tagged.value, out),
            _ => {}
        }
    }
    let mut actions = BTreeSet::new();
    collect(
        &policy["Properties"]["PolicyDocument"]["Statement"],
        &mut actions,
    );
    actions
}
