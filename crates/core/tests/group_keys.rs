//! The group key of every update kind: each real update in `events/updates/` against the group
//! `events/updates/expected_groups.json` names for it (the table events/README.md describes).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tgq_core::envelope::Envelope;

const TABLE: &str = "expected_groups.json";

fn updates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../events/updates")
}

/// Every update fixture's file name, sorted; the table itself is not an update.
fn fixtures() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(updates_dir())
        .expect("events/updates is readable")
        .map(|entry| entry.expect("a directory entry").file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".json") && name != TABLE)
        .collect();
    names.sort();
    names
}

/// The table: fixture file name → the group key the policy prescribes for it.
fn expected_groups() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(updates_dir().join(TABLE)).expect("the table is readable");
    serde_json::from_str(&text).expect("the table maps file names to group keys")
}

#[test]
fn every_update_fixture_gets_the_group_key_its_table_entry_names() {
    let expected = expected_groups();
    let mut wrong = Vec::new();
    for name in fixtures() {
        let body = std::fs::read(updates_dir().join(&name)).expect("the fixture is readable");
        let envelope = Envelope::parse(&body)
            .unwrap_or_else(|poison| panic!("{name} is a real update, yet poison: {poison}"));
        let Some(wanted) = expected.get(&name) else {
            continue; // Reported by the next test.
        };
        if envelope.group.as_str() != wanted {
            wrong.push(format!(
                "{name}: group {:?}, the table says {wanted:?}",
                envelope.group.as_str()
            ));
        }
    }
    assert!(wrong.is_empty(), "group keys differ:\n{}", wrong.join("\n"));
}

#[test]
fn the_table_lists_every_update_fixture_and_nothing_else() {
    let expected = expected_groups();
    let fixtures = fixtures();
    let unlisted: Vec<&String> = fixtures
        .iter()
        .filter(|name| !expected.contains_key(*name))
        .collect();
    let missing: Vec<&String> = expected
        .keys()
        .filter(|name| !fixtures.contains(name))
        .collect();
    assert!(
        unlisted.is_empty(),
        "fixtures without an expected group in {TABLE}: {unlisted:?}"
    );
    assert!(
        missing.is_empty(),
        "{TABLE} names fixtures that do not exist: {missing:?}"
    );
    assert!(
        fixtures.len() >= 20,
        "only {} update fixtures were found in {}",
        fixtures.len(),
        updates_dir().display()
    );
}
