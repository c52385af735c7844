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

/// Every kind of update the Bot API server delivers (tdlib/telegram-bot-api, `Client.cpp`,
/// `get_update_type_name`, less its `custom_*` kinds, which it never sends to a bot). The server
/// queues each one under a chat or a user (the `webhook_queue_id` of `add_update`) and delivers
/// each queue in order, so tgq must order each by a chat or a user as well, never by the update
/// alone.
const SERVER_KINDS: [&str; 25] = [
    "message",
    "edited_message",
    "channel_post",
    "edited_channel_post",
    "inline_query",
    "chosen_inline_result",
    "callback_query",
    "shipping_query",
    "pre_checkout_query",
    "poll",
    "poll_answer",
    "my_chat_member",
    "chat_member",
    "chat_join_request",
    "chat_boost",
    "removed_chat_boost",
    "message_reaction",
    "message_reaction_count",
    "business_connection",
    "business_message",
    "edited_business_message",
    "deleted_business_messages",
    "purchased_paid_media",
    "managed_bot",
    "guest_message",
];

#[test]
fn every_kind_telegram_s_server_queues_is_ordered_by_a_chat_or_a_user() {
    let mut unordered = Vec::new();
    for kind in SERVER_KINDS {
        let name = format!("{kind}.json");
        let body = std::fs::read(updates_dir().join(&name))
            .unwrap_or_else(|e| panic!("every server kind has a fixture; {name}: {e}"));
        let envelope = Envelope::parse(&body)
            .unwrap_or_else(|poison| panic!("{name} is a real update, yet poison: {poison}"));
        assert_eq!(envelope.kind, kind, "{name} holds another kind");
        // The worker decodes what it runs: a fixture it could not decode would be dead-lettered.
        if let Err(e) = serde_json::from_slice::<teloxide_core::types::Update>(&body) {
            panic!("{name} does not decode as an Update: {e}");
        }
        if envelope.group.as_str().starts_with("update:") {
            unordered.push(format!("{kind}: {}", envelope.group.as_str()));
        }
    }
    assert!(
        unordered.is_empty(),
        "kinds the server orders that tgq runs in a queue of their own:\n{}",
        unordered.join("\n")
    );
}
