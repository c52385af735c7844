//! The port conformance suite: one set of test bodies that every adapter (in-memory, embedded, AWS on
//! an emulator) must pass. An adapter crate instantiates it with [`conformance_tests!`] and a factory
//! giving fresh, empty adapters for each test. The poller lease has its own bodies in [`lease`],
//! instantiated with [`lease_conformance_tests!`], and the send budget its own in [`budget`],
//! instantiated with [`budget_conformance_tests!`].

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tgq_core::audit::{AuditAction, AuditEntry, AuditLog, AuditReader};
use tgq_core::clock::{Clock, SystemClock};
use tgq_core::dead::{Burial, DeadReason, FailureClass};
use tgq_core::ids::{BotId, GroupKey, RecordKey, StateKey, UpdateId};
use tgq_core::payment::{Charge, ChargeWrite, PaymentUpdate, Subscription};
use tgq_core::ports::{
    ChargeBook, Claim, ClaimRequest, Claimed, DeadLetter, DeadLetterReader, DeadLetterStore,
    DeadLetters, Final, Inserted, OutgoingMessage, QueueConsumer, RecordReader, Reset,
    ResetRequest, ResetRule, Settlement, UpdateLedger, UpdateQueue, UpdateReset, UpdateStore,
};
use tgq_core::record::{
    ActionIntent, ActionOutcome, ActionResult, ActionState, Delivery, Status, Timestamp,
    UpdateRecord,
};
use tgq_core::state::{StateWrite, StoredState};
use tgq_core::PortError;

pub mod broadcast;
pub mod budget;
pub mod lease;

/// Fresh adapters for one test; the same object may implement several ports.
#[derive(Clone)]
pub struct Adapters {
    /// The webhook's record port.
    pub store: Arc<dyn UpdateStore>,
    /// The worker's record port.
    pub ledger: Arc<dyn UpdateLedger>,
    /// Reads records back.
    pub reader: Arc<dyn RecordReader>,
    /// The updates queue, send side.
    pub queue: Arc<dyn UpdateQueue>,
    /// The updates queue, receive side.
    pub consumer: Arc<dyn QueueConsumer>,
    /// The dead-letter queue, send side.
    pub dead: Arc<dyn DeadLetters>,
    /// The dead-letter queue, read side: where the updates queue redrives to, as well.
    pub dead_reader: Arc<dyn DeadLetterReader>,
    /// The updates queue's redrive limit (`maxReceiveCount`); small, so a test can reach it.
    pub max_receive_count: u32,
    /// The operator's record port.
    pub reset: Arc<dyn UpdateReset>,
    /// The audit trail, append side.
    pub audit: Arc<dyn AuditLog>,
    /// The audit trail, read side.
    pub audit_reader: Arc<dyn AuditReader>,
    /// The dead-letter queue, operator side.
    pub dead_store: Arc<dyn DeadLetterStore>,
    /// The payments ledger, operator side.
    pub book: Arc<dyn ChargeBook>,
}

/// Expands to one `#[tokio::test]` per conformance body, each built from `$make` (an async
/// expression giving [`Adapters`]).
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!(@each $make;
            a_new_update_is_stored_and_a_repeat_reports_its_status,
            an_expired_record_counts_as_absent,
            a_claim_counts_the_run_and_holds_a_lease_until_it_expires,
            a_finished_record_is_never_claimed_again,
            a_claim_creates_a_missing_record_from_the_message,
            recorded_actions_come_back_with_the_next_claim,
            settling_records_the_status_and_the_error,
            the_payload_comes_back_byte_for_byte,
            a_group_with_a_message_in_flight_delivers_nothing_else,
            a_repeated_dedup_id_is_dropped,
            visibility_zero_redelivers_the_same_message_first,
            a_hidden_message_holds_back_its_group_only,
            a_dead_letter_keeps_its_bytes_and_reasons,
            a_dead_letter_sent_again_is_kept_once,
            a_run_whose_lease_was_taken_over_can_no_longer_write,
            an_outcome_is_never_attached_to_an_action_without_its_intent,
            a_rate_limited_run_is_refunded_and_the_first_attempt_time_kept,
            a_claim_after_a_run_died_holding_the_lease_says_so,
            a_record_over_the_item_size_limit_is_refused_as_too_large,
            a_message_received_max_receive_count_times_is_redriven_untried,
            a_reset_restarts_a_dead_record_with_a_fresh_budget_and_leaves_a_finished_one,
            a_reset_under_the_dead_rule_leaves_an_unfinished_record_and_an_expired_one_is_absent,
            audit_entries_come_back_newest_first_without_the_expired_ones,
            a_held_letter_is_hidden_until_released_and_a_removed_one_is_gone,
            a_claim_returns_the_state_its_group_s_last_done_settle_wrote,
            the_chat_s_timers_part_is_written_and_read_with_its_state,
            a_state_write_from_a_stale_read_is_a_conflict_and_writes_nothing,
            outcomes_written_at_once_come_back_with_the_next_claim_and_are_fenced,
            a_recipient_gone_settle_is_done_and_keeps_why,
            a_charge_is_recorded_once_with_the_settle_that_carries_it,
            a_refund_is_recorded_once_on_its_charge,
            an_operator_s_refund_marks_its_charge_once,
        );
    };
    (@each $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                $crate::$name($make.await).await;
            }
        )*
    };
}

fn bot() -> BotId {
    BotId::new("conf").expect("valid id")
}

/// A key unique to this process and test run, so tests can share a remote table.
fn fresh_key() -> RecordKey {
    use std::sync::atomic::{AtomicI64, Ordering};
    static NEXT: AtomicI64 = AtomicI64::new(0);
    let base = i64::try_from(SystemClock.now().0).unwrap_or(0) * 1000;
    RecordKey::new(bot(), UpdateId(base + NEXT.fetch_add(1, Ordering::SeqCst)))
}

fn now() -> Timestamp {
    SystemClock.now()
}

const DAY: Duration = Duration::from_secs(86_400);

fn record(key: &RecordKey, group: &str) -> UpdateRecord {
    let body = format!(
        r#"{{"update_id":{},"message":{{"chat":{{"id":{group}}},"text":"héllo"}}}}"#,
        key.update_id
    );
    UpdateRecord::received(
        key.clone(),
        GroupKey::new(group),
        Bytes::from(body),
        now(),
        DAY,
    )
}

fn claim_request(record: &UpdateRecord, at: Timestamp, lease: Duration) -> ClaimRequest {
    ClaimRequest {
        key: record.key.clone(),
        group: record.group.clone(),
        payload: record.payload.clone(),
        now: at,
        lease_until: at.plus(lease),
        expires_at: at.plus(DAY),
    }
}

/// A unique group per test, so tests can share a remote queue.
fn fresh_group(tag: &str) -> GroupKey {
    GroupKey::new(format!("{tag}-{}", fresh_key().update_id))
}

fn message(group: &GroupKey, n: u32) -> OutgoingMessage {
    let key = fresh_key();
    OutgoingMessage::for_update(
        &key,
        group,
        Bytes::from(format!(r#"{{"update_id":{},"n":{n}}}"#, key.update_id)),
    )
}

async fn receive_all(
    adapters: &Adapters,
    visibility: Duration,
) -> Vec<tgq_core::ports::QueueRecord> {
    adapters
        .consumer
        .receive(10, visibility, Duration::from_millis(300))
        .await
        .expect("receive")
}

/// The webhook's conditional put: the first insert wins, a repeat learns the stored status.
pub async fn a_new_update_is_stored_and_a_repeat_reports_its_status(a: Adapters) {
    let r = record(&fresh_key(), "1");
    assert_eq!(a.store.insert(&r, now()).await.unwrap(), Inserted::New);
    assert_eq!(
        a.store.insert(&r, now()).await.unwrap(),
        Inserted::Exists(Status::Received)
    );
    claim(&a, &r, now(), Duration::from_secs(30)).await;
    assert_eq!(
        a.store.insert(&r, now()).await.unwrap(),
        Inserted::Exists(Status::Processing)
    );
}

/// Claims a new update of `group` now, for 30 s; panics unless the claim runs.
async fn claim_next(a: &Adapters, group: &GroupKey) -> Claimed {
    let update = record(&fresh_key(), group.as_str());
    claim(a, &update, now(), Duration::from_secs(30)).await
}

/// Claims the record for a run of `lease` from `at`; panics unless the claim runs.
async fn claim(a: &Adapters, r: &UpdateRecord, at: Timestamp, lease: Duration) -> Claimed {
    match a.ledger.claim(&claim_request(r, at, lease)).await.unwrap() {
        Claim::Run(claimed) => claimed,
        other => panic!("expected the claim to run, got {other:?}"),
    }
}

fn intent(seq: u32, method: &str, delivery: Delivery) -> ActionIntent {
    ActionIntent {
        seq,
        method: method.into(),
        delivery,
    }
}

fn retrying(error: &str) -> Settlement {
    Settlement::Retrying {
        error: error.into(),
        throttled: false,
    }
}

fn burial() -> Burial {
    Burial {
        reason: DeadReason::Permanent,
        class: FailureClass::Permanent,
        error: "Telegram answered 403: Forbidden: bot was blocked by the user".into(),
        attempts: 1,
    }
}

/// Readers ignore expired records even before the store deletes them.
pub async fn an_expired_record_counts_as_absent(a: Adapters) {
    let mut r = record(&fresh_key(), "1");
    r.expires_at = Timestamp(now().0 - 1000);
    a.store.insert(&r, now()).await.unwrap();
    assert_eq!(a.reader.get(&r.key, now()).await.unwrap(), None);
    let fresh = record(&r.key, "1");
    assert_eq!(a.store.insert(&fresh, now()).await.unwrap(), Inserted::New);
}

/// One claim, one counted run; a second claim waits for the lease to expire.
pub async fn a_claim_counts_the_run_and_holds_a_lease_until_it_expires(a: Adapters) {
    let r = record(&fresh_key(), "1");
    a.store.insert(&r, now()).await.unwrap();
    let t0 = now();
    let first = claim(&a, &r, t0, Duration::from_secs(10)).await;
    assert_eq!(first.lease.token, 1);
    let during = a
        .ledger
        .claim(&claim_request(
            &r,
            t0.plus(Duration::from_secs(5)),
            Duration::from_secs(10),
        ))
        .await
        .unwrap();
    assert_eq!(during, Claim::Busy(t0.plus(Duration::from_secs(10))));
    let after = claim(
        &a,
        &r,
        t0.plus(Duration::from_secs(11)),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(after.lease.token, 2);
    a.ledger
        .settle(&after.lease, &retrying("x"), &[])
        .await
        .unwrap();
    let retry = claim(
        &a,
        &r,
        t0.plus(Duration::from_secs(12)),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(retry.lease.token, 3);
}

/// DONE and DEAD records are acknowledged on redelivery, never run again; a DEAD one tells its
/// burial, so its letter can be sent again.
pub async fn a_finished_record_is_never_claimed_again(a: Adapters) {
    for (settlement, expected) in [
        (Settlement::DONE, Final::Done),
        (Settlement::Dead(burial()), Final::Dead(Some(burial()))),
    ] {
        let r = record(&fresh_key(), "1");
        a.store.insert(&r, now()).await.unwrap();
        let run = claim(&a, &r, now(), Duration::from_secs(30)).await;
        a.ledger.settle(&run.lease, &settlement, &[]).await.unwrap();
        let again = a
            .ledger
            .claim(&claim_request(
                &r,
                now().plus(DAY / 2),
                Duration::from_secs(30),
            ))
            .await
            .unwrap();
        assert_eq!(again, Claim::AlreadyFinal(expected));
    }
}

/// A message whose record is missing still runs: the claim creates the record.
pub async fn a_claim_creates_a_missing_record_from_the_message(a: Adapters) {
    let r = record(&fresh_key(), "77");
    let run = claim(&a, &r, now(), Duration::from_secs(30)).await;
    assert_eq!((run.lease.token, run.resumed), (1, false));
    let stored = a
        .reader
        .get(&r.key, now())
        .await
        .unwrap()
        .expect("created by the claim");
    assert_eq!(
        (stored.status, stored.group.as_str(), stored.payload.clone()),
        (Status::Processing, "77", r.payload.clone())
    );
}

/// Intents and outcomes recorded during a run are what the next run's claim returns: each outcome
/// written with the run's next write.
pub async fn recorded_actions_come_back_with_the_next_claim(a: Adapters) {
    let r = record(&fresh_key(), "1");
    a.store.insert(&r, now()).await.unwrap();
    let run = claim(&a, &r, now(), Duration::from_secs(30)).await;
    let sent = ActionOutcome {
        seq: 1,
        state: ActionState::Succeeded(ActionResult::Message {
            chat_id: 1,
            message_id: 5,
        }),
    };
    let refused = ActionOutcome {
        seq: 2,
        state: ActionState::failed(429, "Too Many Requests: retry after 3"),
    };
    a.ledger
        .record_intent(
            &run.lease,
            &intent(1, "sendMessage", Delivery::AtLeastOnce),
            &[],
        )
        .await
        .unwrap();
    a.ledger
        .record_intent(
            &run.lease,
            &intent(2, "sendPhoto", Delivery::AtMostOnce),
            std::slice::from_ref(&sent),
        )
        .await
        .unwrap();
    a.ledger
        .record_intent(
            &run.lease,
            &intent(3, "sendDice", Delivery::AtMostOnce),
            std::slice::from_ref(&refused),
        )
        .await
        .unwrap();
    a.ledger
        .settle(&run.lease, &retrying("boom"), &[])
        .await
        .unwrap();
    let next = claim(&a, &r, now(), Duration::from_secs(30)).await;
    assert_eq!(next.lease.token, 2);
    let actions: Vec<_> = next
        .actions
        .iter()
        .map(|(seq, a)| (*seq, a.method.as_str(), a.delivery, a.state.clone()))
        .collect();
    assert_eq!(
        actions,
        vec![
            (1, "sendMessage", Delivery::AtLeastOnce, sent.state),
            (2, "sendPhoto", Delivery::AtMostOnce, refused.state),
            (3, "sendDice", Delivery::AtMostOnce, ActionState::Pending),
        ]
    );
}

/// Settling stores the status and the error, and releases the lease.
pub async fn settling_records_the_status_and_the_error(a: Adapters) {
    let r = record(&fresh_key(), "1");
    a.store.insert(&r, now()).await.unwrap();
    let run = claim(&a, &r, now(), Duration::from_secs(30)).await;
    a.ledger
        .settle(&run.lease, &retrying("Telegram answered 502"), &[])
        .await
        .unwrap();
    let stored = a.reader.get(&r.key, now()).await.unwrap().unwrap();
    assert_eq!(
        (
            stored.status,
            stored.attempts,
            stored.last_error.as_deref(),
            stored.lease_until
        ),
        (Status::Retrying, 1, Some("Telegram answered 502"), None)
    );
}

/// The raw body is kept exactly, whitespace and non-ASCII included.
pub async fn the_payload_comes_back_byte_for_byte(a: Adapters) {
    let key = fresh_key();
    let body = format!(
        "{{ \"update_id\" : {},\n \"message\": {{\"chat\":{{\"id\":1}},\"text\":\"Grüße 👋\"}} }}",
        key.update_id
    );
    let r = UpdateRecord::received(
        key.clone(),
        GroupKey::new("1"),
        Bytes::from(body.clone()),
        now(),
        DAY,
    );
    a.store.insert(&r, now()).await.unwrap();
    assert_eq!(
        a.reader.get(&key, now()).await.unwrap().unwrap().payload,
        Bytes::from(body)
    );
}

/// A run that outlived its lease is fenced: once another run claimed the update, every write of the
/// first run — intent, outcome, settle, bury — is refused, and the second run's writes stand.
pub async fn a_run_whose_lease_was_taken_over_can_no_longer_write(a: Adapters) {
    let r = record(&fresh_key(), "1");
    a.store.insert(&r, now()).await.unwrap();
    let t0 = now();
    let stale = claim(&a, &r, t0, Duration::from_secs(1)).await;
    a.ledger
        .record_intent(
            &stale.lease,
            &intent(1, "sendMessage", Delivery::AtLeastOnce),
            &[],
        )
        .await
        .unwrap();
    let fresh = claim(
        &a,
        &r,
        t0.plus(Duration::from_secs(2)),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(fresh.lease.token, stale.lease.token + 1);
    let done = ActionOutcome {
        seq: 1,
        state: ActionState::Succeeded(ActionResult::True),
    };
    let refused: Vec<Result<(), PortError>> = vec![
        a.ledger
            .record_intent(
                &stale.lease,
                &intent(2, "sendMessage", Delivery::AtLeastOnce),
                &[],
            )
            .await,
        a.ledger
            .record_intent(
                &stale.lease,
                &intent(2, "sendMessage", Delivery::AtLeastOnce),
                std::slice::from_ref(&done),
            )
            .await,
        a.ledger
            .settle(&stale.lease, &Settlement::DONE, std::slice::from_ref(&done))
            .await,
        a.ledger.settle(&stale.lease, &retrying("late"), &[]).await,
        a.ledger
            .settle(&stale.lease, &Settlement::Dead(burial()), &[])
            .await,
    ];
    for (n, result) in refused.into_iter().enumerate() {
        assert!(
            matches!(result, Err(PortError::Fenced { .. })),
            "write {n} of the stale run: {result:?}"
        );
    }
    a.ledger
        .settle(&fresh.lease, &Settlement::DONE, &[done])
        .await
        .unwrap();
    let stored = a.reader.get(&r.key, now()).await.unwrap().unwrap();
    assert_eq!(stored.status, Status::Done);
    assert_eq!(
        stored.actions.len(),
        1,
        "the stale run's second intent was refused"
    );
    assert_eq!(
        stored.actions[&1].state,
        ActionState::Succeeded(ActionResult::True)
    );
    assert!(matches!(
        a.ledger.settle(&stale.lease, &Settlement::DONE, &[]).await,
        Err(PortError::Fenced { .. })
    ));
}

/// An outcome names its action by position; a position without an intent is refused rather than
/// given a result nobody recorded sending.
pub async fn an_outcome_is_never_attached_to_an_action_without_its_intent(a: Adapters) {
    let r = record(&fresh_key(), "1");
    a.store.insert(&r, now()).await.unwrap();
    let run = claim(&a, &r, now(), Duration::from_secs(30)).await;
    let orphan = ActionOutcome {
        seq: 7,
        state: ActionState::Succeeded(ActionResult::True),
    };
    let settled = a
        .ledger
        .settle(&run.lease, &Settlement::DONE, &[orphan])
        .await;
    assert!(
        matches!(settled, Err(PortError::Rejected { .. })),
        "{settled:?}"
    );
    let stored = a.reader.get(&r.key, now()).await.unwrap().unwrap();
    assert_eq!(
        (stored.status, stored.actions.len()),
        (Status::Processing, 0)
    );
}

/// A run Telegram rate-limited is pacing, not a failure: it is refunded from the attempt budget,
/// and the time budget counts from the first run.
pub async fn a_rate_limited_run_is_refunded_and_the_first_attempt_time_kept(a: Adapters) {
    let r = record(&fresh_key(), "1");
    a.store.insert(&r, now()).await.unwrap();
    let t0 = now();
    let first = claim(&a, &r, t0, Duration::from_secs(30)).await;
    assert_eq!(first.first_attempt_at, t0);
    let throttled = Settlement::Retrying {
        error: "rate limited by Telegram: retry after 5s".into(),
        throttled: true,
    };
    a.ledger
        .settle(&first.lease, &throttled, &[])
        .await
        .unwrap();
    let second = claim(
        &a,
        &r,
        t0.plus(Duration::from_secs(6)),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(
        (
            second.lease.token,
            second.throttled,
            second.attempts_spent()
        ),
        (2, 1, 1)
    );
    assert_eq!(second.first_attempt_at, t0);
}

/// The claim that follows a run which died holding its lease says so: the worker runs such a
/// record after the other chats of its batch.
pub async fn a_claim_after_a_run_died_holding_the_lease_says_so(a: Adapters) {
    let r = record(&fresh_key(), "1");
    a.store.insert(&r, now()).await.unwrap();
    let t0 = now();
    let died = claim(&a, &r, t0, Duration::from_secs(1)).await;
    assert!(!died.resumed);
    let next = claim(
        &a,
        &r,
        t0.plus(Duration::from_secs(2)),
        Duration::from_secs(30),
    )
    .await;
    assert!(next.resumed, "the lease expired while PROCESSING");
    a.ledger
        .settle(&next.lease, &retrying("x"), &[])
        .await
        .unwrap();
    let after_retry = claim(
        &a,
        &r,
        t0.plus(Duration::from_secs(3)),
        Duration::from_secs(30),
    )
    .await;
    assert!(!after_retry.resumed, "a settled run did not die");
}

/// A record DynamoDB would refuse for its size is refused as too large by every store, so the
/// webhook buries it instead of answering 503 forever.
pub async fn a_record_over_the_item_size_limit_is_refused_as_too_large(a: Adapters) {
    let key = fresh_key();
    let padding = "x".repeat(tgq_core::defaults::MAX_ITEM_BYTES + 1024);
    let body = format!(
        r#"{{"update_id":{},"message":{{"chat":{{"id":1}},"text":"{padding}"}}}}"#,
        key.update_id
    );
    let r = UpdateRecord::received(
        key.clone(),
        GroupKey::new("1"),
        Bytes::from(body),
        now(),
        DAY,
    );
    let inserted = a.store.insert(&r, now()).await;
    assert!(
        matches!(inserted, Err(PortError::TooLarge { .. })),
        "{inserted:?}"
    );
    assert_eq!(a.reader.get(&key, now()).await.unwrap(), None);
}

/// The updates queue's redrive: a message received `max_receive_count` times without being deleted
/// goes to the dead-letter queue on its next receive, with its bytes, group and update id.
pub async fn a_message_received_max_receive_count_times_is_redriven_untried(a: Adapters) {
    let group = fresh_group("r");
    let m = message(&group, 1);
    a.queue.enqueue(&m).await.unwrap();
    for n in 1..=a.max_receive_count {
        let got = a
            .consumer
            .receive(1, Duration::from_secs(30), Duration::from_secs(2))
            .await
            .unwrap();
        assert_eq!(got.len(), 1, "receive {n}");
        assert_eq!(
            (got[0].body.clone(), got[0].receive_count),
            (m.body.clone(), n)
        );
        a.consumer
            .change_visibility(&got[0].receipt, Duration::ZERO)
            .await
            .unwrap();
    }
    let after = a
        .consumer
        .receive(1, Duration::from_secs(30), Duration::from_millis(500))
        .await
        .unwrap();
    assert!(
        after.iter().all(|r| r.body != m.body),
        "delivered past the limit"
    );
    let letters = a.dead_reader.peek(100).await.unwrap();
    let letter = letters
        .iter()
        .find(|l| l.body == m.body)
        .expect("the message was redriven to the dead-letter queue");
    assert_eq!(letter.reason, DeadReason::Redriven);
    assert_eq!(letter.group.as_ref(), Some(&group));
    assert_eq!(
        letter.update_id,
        tgq_core::envelope::Envelope::parse(&m.body)
            .ok()
            .map(|e| e.update_id)
    );
}

/// A `DONE` settle that writes its group's state, read at `read_version`.
fn done_with(group: &GroupKey, json: &str, read_version: u64) -> Settlement {
    Settlement::Done {
        state: Some(StateWrite {
            key: StateKey::new(bot(), group.clone()),
            format: "conf/v1".into(),
            json: json.into(),
            read_version,
            time: None,
        }),
        charges: Vec::new(),
    }
}

fn stored(json: &str, version: u64) -> Option<StoredState> {
    Some(StoredState {
        format: "conf/v1".into(),
        json: json.into(),
        version,
        time: None,
    })
}

/// The state of a group comes with every claim of its updates, as the group's last `DONE` settle
/// wrote it; other settles and other groups leave it alone.
pub async fn a_claim_returns_the_state_its_group_s_last_done_settle_wrote(a: Adapters) {
    let group = fresh_group("s");
    let first = record(&fresh_key(), group.as_str());
    let run = claim(&a, &first, now(), Duration::from_secs(30)).await;
    assert_eq!(run.state, None, "no state was ever written");
    a.ledger
        .settle(&run.lease, &done_with(&group, r#"{"n":1,"é":"ü"}"#, 0), &[])
        .await
        .unwrap();

    let second = record(&fresh_key(), group.as_str());
    let run = claim(&a, &second, now(), Duration::from_secs(30)).await;
    assert_eq!(run.state, stored(r#"{"n":1,"é":"ü"}"#, 1));
    a.ledger
        .settle(&run.lease, &retrying("x"), &[])
        .await
        .unwrap();
    let run = claim(&a, &second, now(), Duration::from_secs(30)).await;
    assert_eq!(
        run.state,
        stored(r#"{"n":1,"é":"ü"}"#, 1),
        "a retry changes nothing"
    );
    a.ledger
        .settle(&run.lease, &done_with(&group, r#"{"n":2}"#, 1), &[])
        .await
        .unwrap();

    let third = record(&fresh_key(), group.as_str());
    let run = claim(&a, &third, now(), Duration::from_secs(30)).await;
    assert_eq!(run.state, stored(r#"{"n":2}"#, 2));
    let elsewhere = record(&fresh_key(), fresh_group("t").as_str());
    let run = claim(&a, &elsewhere, now(), Duration::from_secs(30)).await;
    assert_eq!(run.state, None, "each group has its own state");
}

/// tgq's part of a state (the chat's pending timers and flow) is written with the bot's value in
/// the same settle and comes back with the next claim; a write without it clears it.
pub async fn the_chat_s_timers_part_is_written_and_read_with_its_state(a: Adapters) {
    let group = fresh_group("tm");
    let time = r#"{"timers":{"remind":{"id":-12,"due":1800000060000}}}"#;
    let first = record(&fresh_key(), group.as_str());
    let run = claim(&a, &first, now(), Duration::from_secs(30)).await;
    let mut write = done_with(&group, "null", 0);
    if let Settlement::Done {
        state: Some(state), ..
    } = &mut write
    {
        state.format = StoredState::NO_VALUE.into();
        state.time = Some(time.into());
    }
    a.ledger.settle(&run.lease, &write, &[]).await.unwrap();

    let second = record(&fresh_key(), group.as_str());
    let run = claim(&a, &second, now(), Duration::from_secs(30)).await;
    let state = run
        .state
        .clone()
        .expect("the timers were written as the group's state");
    assert_eq!(state.time.as_deref(), Some(time));
    assert!(!state.has_value(), "only tgq's part was written");
    a.ledger
        .settle(&run.lease, &done_with(&group, r#"{"n":1}"#, 1), &[])
        .await
        .unwrap();

    let third = record(&fresh_key(), group.as_str());
    let run = claim(&a, &third, now(), Duration::from_secs(30)).await;
    assert_eq!(
        run.state,
        stored(r#"{"n":1}"#, 2),
        "the timers part is gone"
    );
}

/// A settle whose state write starts from a version that is no longer stored is refused as a
/// conflict and writes nothing — neither the state nor the record; a stale lease is refused as
/// fenced first.
pub async fn a_state_write_from_a_stale_read_is_a_conflict_and_writes_nothing(a: Adapters) {
    let group = fresh_group("c");
    let (one, two) = (
        record(&fresh_key(), group.as_str()),
        record(&fresh_key(), group.as_str()),
    );
    let t0 = now();
    let first = claim(&a, &one, t0, Duration::from_secs(30)).await;
    let second = claim(&a, &two, t0, Duration::from_secs(30)).await;
    a.ledger
        .record_intent(
            &second.lease,
            &intent(1, "sendMessage", Delivery::AtLeastOnce),
            &[],
        )
        .await
        .unwrap();
    a.ledger
        .settle(&first.lease, &done_with(&group, r#"{"by":1}"#, 0), &[])
        .await
        .unwrap();
    let sent = ActionOutcome {
        seq: 1,
        state: ActionState::Succeeded(ActionResult::True),
    };
    let refused = a
        .ledger
        .settle(
            &second.lease,
            &done_with(&group, r#"{"by":2}"#, 0),
            std::slice::from_ref(&sent),
        )
        .await;
    assert!(
        matches!(refused, Err(PortError::Conflict { .. })),
        "{refused:?}"
    );
    let unchanged = a.reader.get(&two.key, now()).await.unwrap().unwrap();
    assert_eq!(
        unchanged.status,
        Status::Processing,
        "the record is unchanged"
    );
    assert_eq!(unchanged.actions[&1].state, ActionState::Pending);

    // The run may still settle otherwise; a stale lease is fenced before its state is looked at.
    a.ledger
        .settle(&second.lease, &retrying("conflict"), &[sent])
        .await
        .unwrap();
    let stale = a
        .ledger
        .settle(&second.lease, &done_with(&group, r#"{"by":2}"#, 0), &[])
        .await;
    assert!(matches!(stale, Err(PortError::Fenced { .. })), "{stale:?}");
    let third = record(&fresh_key(), group.as_str());
    let run = claim(&a, &third, now(), Duration::from_secs(30)).await;
    assert_eq!(run.state, stored(r#"{"by":1}"#, 1));
}

/// A payment's charge enters the ledger with the `DONE` settle of the first update carrying it, in
/// the same write as its state; a second update carrying it (delivered again, or replayed after
/// its record expired) cannot record it again, and its settle writes nothing, state included.
pub async fn a_charge_is_recorded_once_with_the_settle_that_carries_it(a: Adapters) {
    let group = fresh_group("pay");
    let id = format!("stx-{}", fresh_key().update_id);
    let (first, again) = (
        record(&fresh_key(), group.as_str()),
        record(&fresh_key(), group.as_str()),
    );
    let charge = Charge {
        id: id.clone(),
        user: 42,
        stars: 50,
        payload: "gem".into(),
        update_id: first.key.update_id.0,
        recorded_at: now(),
        refunded_at: None,
        subscription: None,
    };
    assert_eq!(a.ledger.charge(&bot(), &id).await.unwrap(), None);
    let credit = |json: &str, read_version| {
        let Settlement::Done { state, .. } = done_with(&group, json, read_version) else {
            unreachable!("done_with settles DONE")
        };
        Settlement::Done {
            state,
            charges: vec![ChargeWrite::paid(charge.clone())],
        }
    };

    let run = claim(&a, &first, now(), Duration::from_secs(30)).await;
    a.ledger
        .settle(&run.lease, &credit(r#"{"stars":50}"#, 0), &[])
        .await
        .unwrap();
    assert_eq!(
        a.ledger.charge(&bot(), &id).await.unwrap(),
        Some(charge.clone())
    );
    let other_bot = BotId::new("conf-other").unwrap();
    assert_eq!(
        a.ledger.charge(&other_bot, &id).await.unwrap(),
        None,
        "a bot's own ledger"
    );

    let run = claim(&a, &again, now(), Duration::from_secs(30)).await;
    let refused = a
        .ledger
        .settle(&run.lease, &credit(r#"{"stars":100}"#, 1), &[])
        .await;
    assert!(
        matches!(&refused, Err(PortError::Credited { charge, .. }) if *charge == id),
        "{refused:?}"
    );
    let unchanged = a.reader.get(&again.key, now()).await.unwrap().unwrap();
    assert_eq!(
        unchanged.status,
        Status::Processing,
        "the record is unchanged"
    );
    a.ledger
        .settle(&run.lease, &Settlement::DONE, &[])
        .await
        .unwrap();
    let next = claim_next(&a, &group).await;
    assert_eq!(next.state, stored(r#"{"stars":50}"#, 1), "credited once");
    assert_eq!(a.ledger.charge(&bot(), &id).await.unwrap(), Some(charge));
}

/// User 42's payment of 50 Stars with charge `id`, carried by update 1, recorded now.
fn paid_charge(id: &str) -> Charge {
    Charge {
        id: id.to_owned(),
        user: 42,
        stars: 50,
        payload: "gem".into(),
        update_id: 1,
        recorded_at: now(),
        refunded_at: None,
        subscription: None,
    }
}

/// A refund marks its charge's entry once: a second run that read it unrefunded is refused, with no
/// state in the write; a refund of a charge the ledger never had enters it refunded.
pub async fn a_refund_is_recorded_once_on_its_charge(a: Adapters) {
    let group = fresh_group("refund");
    let id = format!("stx-{}", fresh_key().update_id);
    let paid = paid_charge(&id);
    let settle = |writes: Vec<ChargeWrite>| Settlement::Done {
        state: None,
        charges: writes,
    };
    let run = claim_next(&a, &group).await;
    let written = ChargeWrite::of(&PaymentUpdate::Paid(paid.clone()), None, now()).unwrap();
    a.ledger
        .settle(&run.lease, &settle(vec![written]), &[])
        .await
        .unwrap();

    // Two runs read it unrefunded; the first to settle marks it, the other is refused.
    let at = now().plus(Duration::from_secs(1));
    let refund = ChargeWrite::refund(&paid, at).unwrap();
    let (one, two) = (claim_next(&a, &group).await, claim_next(&a, &group).await);
    a.ledger
        .settle(&one.lease, &settle(vec![refund.clone()]), &[])
        .await
        .unwrap();
    let refused = a
        .ledger
        .settle(&two.lease, &settle(vec![refund]), &[])
        .await;
    assert!(
        matches!(&refused, Err(PortError::Credited { charge, .. }) if *charge == id),
        "{refused:?}"
    );
    let marked = a.ledger.charge(&bot(), &id).await.unwrap().unwrap();
    assert_eq!(marked.refunded_at, Some(at));
    assert_eq!(
        marked.recorded_at, paid.recorded_at,
        "the payment's entry, marked"
    );

    let unknown = format!("{id}-unknown");
    let entry = Charge {
        id: unknown.clone(),
        refunded_at: Some(at),
        ..paid
    };
    let run = claim_next(&a, &group).await;
    let write = ChargeWrite::of(&PaymentUpdate::Refunded(entry.clone()), None, at).unwrap();
    a.ledger
        .settle(&run.lease, &settle(vec![write]), &[])
        .await
        .unwrap();
    assert_eq!(
        a.ledger.charge(&bot(), &unknown).await.unwrap(),
        Some(entry)
    );
}

/// An operator's refund marks a charge's entry outside any run, once: a second write that read it
/// unrefunded is refused and changes nothing, and the worker's read sees the mark. The entry, a
/// subscription's renewal, reads back whole.
pub async fn an_operator_s_refund_marks_its_charge_once(a: Adapters) {
    let group = fresh_group("operator-refund");
    let id = format!("stx-{}", fresh_key().update_id);
    // A subscription's renewal: its period comes back whole.
    let paid = Charge {
        subscription: Some(Subscription {
            until: 1_900_000_000,
            renewal: true,
        }),
        ..paid_charge(&id)
    };
    let run = claim_next(&a, &group).await;
    let settle = Settlement::Done {
        state: None,
        charges: vec![ChargeWrite::paid(paid.clone())],
    };
    a.ledger.settle(&run.lease, &settle, &[]).await.unwrap();
    assert_eq!(a.book.entry(&bot(), &id).await.unwrap(), Some(paid.clone()));

    let at = now().plus(Duration::from_secs(1));
    let refund = ChargeWrite::refund(&paid, at).unwrap();
    a.book.write_charge(&bot(), &refund).await.unwrap();
    let later = ChargeWrite::refund(&paid, at.plus(Duration::from_secs(1))).unwrap();
    let refused = a.book.write_charge(&bot(), &later).await;
    assert!(
        matches!(&refused, Err(PortError::Credited { charge, .. }) if *charge == id),
        "{refused:?}"
    );
    let marked = a.ledger.charge(&bot(), &id).await.unwrap().unwrap();
    assert_eq!(marked.refunded_at, Some(at), "marked once, by the first");
    assert_eq!(
        a.book.entry(&bot(), &format!("{id}-none")).await.unwrap(),
        None
    );
}

/// Outcomes written at once (a step's result) are on the record for the next claim, and a run that
/// lost its lease cannot write them.
pub async fn outcomes_written_at_once_come_back_with_the_next_claim_and_are_fenced(a: Adapters) {
    let r = record(&fresh_key(), "1");
    a.store.insert(&r, now()).await.unwrap();
    let t0 = now();
    let run = claim(&a, &r, t0, Duration::from_secs(1)).await;
    a.ledger
        .record_intent(
            &run.lease,
            &intent(1, "step:charge", Delivery::AtMostOnce),
            &[],
        )
        .await
        .unwrap();
    let charged = ActionOutcome {
        seq: 1,
        state: ActionState::Succeeded(ActionResult::Json {
            json: r#"{"id":"ch_1"}"#.into(),
        }),
    };
    a.ledger
        .record_outcomes(&run.lease, std::slice::from_ref(&charged))
        .await
        .unwrap();
    let next = claim(
        &a,
        &r,
        t0.plus(Duration::from_secs(2)),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(next.actions[&1].method, "step:charge");
    assert_eq!(next.actions[&1].state, charged.state);
    let late = a.ledger.record_outcomes(&run.lease, &[charged]).await;
    assert!(matches!(late, Err(PortError::Fenced { .. })), "{late:?}");
}

/// A run whose recipient is gone settles `DONE`, keeping Telegram's answer as its last error: a
/// redelivery is acknowledged without running.
pub async fn a_recipient_gone_settle_is_done_and_keeps_why(a: Adapters) {
    let r = record(&fresh_key(), "1");
    a.store.insert(&r, now()).await.unwrap();
    let run = claim(&a, &r, now(), Duration::from_secs(30)).await;
    let gone = Settlement::RecipientGone {
        error: "Telegram answered 403: Forbidden: user is deactivated".into(),
    };
    a.ledger.settle(&run.lease, &gone, &[]).await.unwrap();
    let stored = a.reader.get(&r.key, now()).await.unwrap().unwrap();
    assert_eq!(
        (
            stored.status,
            stored.last_error.as_deref(),
            stored.lease_until
        ),
        (
            Status::Done,
            Some("Telegram answered 403: Forbidden: user is deactivated"),
            None
        )
    );
    let again = a
        .ledger
        .claim(&claim_request(&r, now(), Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(again, Claim::AlreadyFinal(Final::Done));
}

/// FIFO groups: while one message of a group is in flight, the group delivers nothing else.
pub async fn a_group_with_a_message_in_flight_delivers_nothing_else(a: Adapters) {
    let group_a = fresh_group("a");
    let group_b = fresh_group("b");
    let (a1, a2, b1) = (
        message(&group_a, 1),
        message(&group_a, 2),
        message(&group_b, 1),
    );
    for m in [&a1, &a2, &b1] {
        a.queue.enqueue(m).await.unwrap();
    }
    let first = a
        .consumer
        .receive(1, Duration::from_secs(30), Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(first.len(), 1);
    let held = &first[0];
    let second = receive_all(&a, Duration::from_secs(30)).await;
    assert!(
        second.iter().all(|m| m.group_id != held.group_id),
        "a second message of {} was delivered while the first was in flight",
        held.group_id
    );
    for m in &second {
        a.consumer.delete(&m.receipt).await.unwrap();
    }
    a.consumer.delete(&held.receipt).await.unwrap();
    let rest = receive_all(&a, Duration::from_secs(30)).await;
    let bodies: Vec<_> = first
        .iter()
        .chain(&second)
        .chain(&rest)
        .map(|m| m.body.clone())
        .collect();
    let pos = |m: &OutgoingMessage| {
        bodies
            .iter()
            .position(|b| *b == m.body)
            .expect("every message delivered")
    };
    assert!(pos(&a1) < pos(&a2), "group order broken");
    assert!(bodies.contains(&b1.body));
    for m in &rest {
        a.consumer.delete(&m.receipt).await.unwrap();
    }
}

/// The same dedup id within the window is sent once.
pub async fn a_repeated_dedup_id_is_dropped(a: Adapters) {
    let m = message(&fresh_group("d"), 1);
    a.queue.enqueue(&m).await.unwrap();
    a.queue.enqueue(&m).await.unwrap();
    let got = receive_all(&a, Duration::from_secs(30)).await;
    assert_eq!(got.iter().filter(|r| r.body == m.body).count(), 1);
    for r in &got {
        a.consumer.delete(&r.receipt).await.unwrap();
    }
    let again = receive_all(&a, Duration::from_secs(30)).await;
    assert!(
        again.iter().all(|r| r.body != m.body),
        "a deleted duplicate came back"
    );
}

/// Making a message visible at once returns it before the rest of its group, with a higher receive count.
pub async fn visibility_zero_redelivers_the_same_message_first(a: Adapters) {
    let group = fresh_group("v");
    let (m1, m2) = (message(&group, 1), message(&group, 2));
    a.queue.enqueue(&m1).await.unwrap();
    a.queue.enqueue(&m2).await.unwrap();
    let first = a
        .consumer
        .receive(1, Duration::from_secs(30), Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(first[0].body, m1.body);
    a.consumer
        .change_visibility(&first[0].receipt, Duration::ZERO)
        .await
        .unwrap();
    let again = a
        .consumer
        .receive(1, Duration::from_secs(30), Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(
        (again[0].body.clone(), again[0].receive_count),
        (m1.body.clone(), 2)
    );
    a.consumer.delete(&again[0].receipt).await.unwrap();
    let next = a
        .consumer
        .receive(1, Duration::from_secs(30), Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(next[0].body, m2.body);
    a.consumer.delete(&next[0].receipt).await.unwrap();
}

/// A message hidden for its backoff holds back its own group and no other.
pub async fn a_hidden_message_holds_back_its_group_only(a: Adapters) {
    let (slow, fast) = (fresh_group("slow"), fresh_group("fast"));
    let (s1, s2, f1) = (message(&slow, 1), message(&slow, 2), message(&fast, 1));
    a.queue.enqueue(&s1).await.unwrap();
    a.queue.enqueue(&s2).await.unwrap();
    let got = a
        .consumer
        .receive(1, Duration::from_secs(30), Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(got[0].body, s1.body);
    a.consumer
        .change_visibility(&got[0].receipt, Duration::from_secs(60))
        .await
        .unwrap();
    a.queue.enqueue(&f1).await.unwrap();
    let later = receive_all(&a, Duration::from_secs(30)).await;
    assert!(
        later.iter().any(|m| m.body == f1.body),
        "the other group was held back"
    );
    assert!(
        later.iter().all(|m| m.body != s2.body),
        "the hidden message's group was overtaken"
    );
    for m in &later {
        a.consumer.delete(&m.receipt).await.unwrap();
    }
}

/// A dead letter keeps the raw bytes and every attribute.
pub async fn a_dead_letter_keeps_its_bytes_and_reasons(a: Adapters) {
    let key = fresh_key();
    let letter = DeadLetter {
        bot_id: bot(),
        update_id: Some(key.update_id),
        group: Some(GroupKey::new("42")),
        body: Bytes::from_static(b"{\"update_id\":1, \"raw\":true}"),
        reason: DeadReason::Permanent,
        error_class: FailureClass::Permanent,
        error: "Telegram answered 403: Forbidden: bot was blocked by the user".into(),
        attempts: 3,
    };
    a.dead.dead_letter(&letter).await.unwrap();
    let letters = a.dead_reader.peek(10).await.unwrap();
    assert!(
        letters.contains(&letter),
        "letter not found among {} letters",
        letters.len()
    );
}

/// A letter sent again (a run that crashed between sending its update's letter and deleting the
/// message buries it again on the next delivery) is kept once: its dedup id names the burial.
pub async fn a_dead_letter_sent_again_is_kept_once(a: Adapters) {
    let key = fresh_key();
    let letter = DeadLetter {
        bot_id: bot(),
        update_id: Some(key.update_id),
        group: Some(GroupKey::new("43")),
        body: Bytes::from_static(b"{\"update_id\":2}"),
        reason: DeadReason::BudgetSpent,
        error_class: FailureClass::Transient,
        error: "Telegram answered 502: Bad Gateway".into(),
        attempts: 8,
    };
    a.dead.dead_letter(&letter).await.unwrap();
    a.dead.dead_letter(&letter).await.unwrap();
    let kept = a
        .dead_reader
        .peek(100)
        .await
        .unwrap()
        .into_iter()
        .filter(|l| l.update_id == Some(key.update_id) && l.bot_id == bot())
        .count();
    assert_eq!(kept, 1, "the same burial sent twice");
}

fn reset_request(key: &RecordKey, rule: ResetRule) -> ResetRequest {
    ResetRequest {
        key: key.clone(),
        now: now(),
        rule,
    }
}

/// An operator's replay restarts a DEAD record with a fresh budget, keeping its recorded actions
/// and counting its runs on (the next run's fencing token is new); once the update has run again
/// and finished, a second replay is refused.
pub async fn a_reset_restarts_a_dead_record_with_a_fresh_budget_and_leaves_a_finished_one(
    a: Adapters,
) {
    let r = record(&fresh_key(), "1");
    a.store.insert(&r, now()).await.unwrap();
    let first = claim(&a, &r, now(), Duration::from_secs(30)).await;
    a.ledger
        .record_intent(
            &first.lease,
            &intent(1, "sendMessage", Delivery::AtLeastOnce),
            &[],
        )
        .await
        .unwrap();
    let sent = ActionOutcome {
        seq: 1,
        state: ActionState::Succeeded(ActionResult::True),
    };
    a.ledger
        .settle(&first.lease, &Settlement::Dead(burial()), &[sent])
        .await
        .unwrap();

    let replay = reset_request(&r.key, ResetRule::DeadOrUnfinished);
    assert_eq!(
        a.reset.reset(&replay).await.unwrap(),
        Reset::Restarted(Status::Dead)
    );
    let restarted = a.reader.get(&r.key, now()).await.unwrap().unwrap();
    assert_eq!(
        (
            restarted.status,
            restarted.attempts,
            restarted.throttled,
            restarted.lease_until,
            restarted.first_attempt_at,
            restarted.burial,
        ),
        (Status::Queued, 1, 1, None, None, None)
    );
    let again = claim(&a, &r, now(), Duration::from_secs(30)).await;
    assert_eq!(again.lease.token, 2, "the fencing token keeps counting");
    assert_eq!(again.attempts_spent(), 1, "a fresh budget");
    assert!(
        again.actions.contains_key(&1),
        "a completed send is kept, so the replay does not repeat it"
    );
    assert_eq!(
        a.reset.reset(&replay).await.unwrap(),
        Reset::Refused(Status::Processing),
        "a run holds the lease"
    );
    a.ledger
        .settle(&again.lease, &Settlement::DONE, &[])
        .await
        .unwrap();
    assert_eq!(
        a.reset.reset(&replay).await.unwrap(),
        Reset::Refused(Status::Done),
        "replaying a finished update would run it twice"
    );
    assert_eq!(
        a.reset
            .reset(&reset_request(&fresh_key(), ResetRule::DeadOrUnfinished))
            .await
            .unwrap(),
        Reset::Absent
    );
}

/// A redrive through the SQS console restarts only a DEAD record, so a later delivery of the same
/// message does not refund the budget again; an expired record counts as absent.
pub async fn a_reset_under_the_dead_rule_leaves_an_unfinished_record_and_an_expired_one_is_absent(
    a: Adapters,
) {
    let r = record(&fresh_key(), "2");
    a.store.insert(&r, now()).await.unwrap();
    assert_eq!(
        a.reset
            .reset(&reset_request(&r.key, ResetRule::Dead))
            .await
            .unwrap(),
        Reset::Refused(Status::Received)
    );
    assert_eq!(
        a.reset
            .reset(&reset_request(&r.key, ResetRule::DeadOrUnfinished))
            .await
            .unwrap(),
        Reset::Restarted(Status::Received),
        "the queue's redrive moves unfinished updates too"
    );

    let key = fresh_key();
    let long_ago = Timestamp(now().0 - 3 * 86_400_000);
    let old = UpdateRecord::received(
        key.clone(),
        GroupKey::new("3"),
        Bytes::from_static(b"{}"),
        long_ago,
        DAY,
    );
    a.store.insert(&old, long_ago).await.unwrap();
    assert_eq!(
        a.reset
            .reset(&reset_request(&key, ResetRule::DeadOrUnfinished))
            .await
            .unwrap(),
        Reset::Absent
    );
}

/// The audit trail gives entries back newest first, every field kept, and leaves out expired ones.
pub async fn audit_entries_come_back_newest_first_without_the_expired_ones(a: Adapters) {
    let principal = format!(
        "arn:aws:iam::123456789012:user/conf-{}",
        fresh_key().update_id
    );
    let t = now();
    let entry = |at: u64, action, expires_at: Timestamp| AuditEntry {
        at: Timestamp(t.0 - 10_000 + at),
        principal: principal.clone(),
        action,
        bot_id: bot(),
        update_id: Some(UpdateId(i64::try_from(at).unwrap())),
        letter_id: Some(format!("letter-{at}")),
        outcome: format!("outcome {at}"),
        expires_at,
    };
    let written = [
        entry(1, AuditAction::Replay, t.plus(DAY)),
        entry(2, AuditAction::Purge, t.plus(DAY)),
        entry(3, AuditAction::Redrive, t.plus(DAY)),
        entry(4, AuditAction::Replay, Timestamp(t.0 - 1000)),
    ];
    for e in &written {
        a.audit.append(e).await.unwrap();
    }
    let ours: Vec<AuditEntry> = a
        .audit_reader
        .recent(10_000, t)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.principal == principal)
        .collect();
    let expected: Vec<AuditEntry> = written[..3].iter().rev().cloned().collect();
    // The TTL attribute keeps whole seconds.
    let seconds = |mut e: AuditEntry| {
        e.expires_at = Timestamp(e.expires_at.as_secs() * 1000);
        e
    };
    assert_eq!(
        ours.into_iter().map(seconds).collect::<Vec<_>>(),
        expected.into_iter().map(seconds).collect::<Vec<_>>()
    );
}

/// An operator's hold hides letters from the next hold until they are released; a removed letter
/// is gone for good.
pub async fn a_held_letter_is_hidden_until_released_and_a_removed_one_is_gone(a: Adapters) {
    let letter = |n: i64| DeadLetter {
        bot_id: bot(),
        update_id: Some(UpdateId(n)),
        group: Some(fresh_group("held")),
        body: Bytes::from(format!("{{\"update_id\":{n}}}")),
        reason: DeadReason::BudgetSpent,
        error_class: FailureClass::Transient,
        error: "Telegram answered 502".into(),
        attempts: 8,
    };
    let (first, second) = (
        letter(fresh_key().update_id.0),
        letter(fresh_key().update_id.0),
    );
    a.dead.dead_letter(&first).await.unwrap();
    a.dead.dead_letter(&second).await.unwrap();
    let hold = Duration::from_secs(60);

    let held = a.dead_store.hold(10, hold).await.unwrap();
    let letters: Vec<&DeadLetter> = held.iter().map(|h| &h.letter).collect();
    assert_eq!(letters, [&first, &second]);
    assert!(
        a.dead_store.hold(10, hold).await.unwrap().is_empty(),
        "held letters are hidden from the next hold"
    );
    a.dead_store.remove(&held[1].handle).await.unwrap();
    a.dead_store.release(&held[0].handle).await.unwrap();
    let again = a.dead_store.hold(10, hold).await.unwrap();
    assert_eq!(
        again.iter().map(|h| (&h.id, &h.letter)).collect::<Vec<_>>(),
        [(&held[0].id, &first)],
        "the released letter is back under its id; the removed one is gone"
    );
    a.dead_store.release(&again[0].handle).await.unwrap();
}

/// Writes `json`, of `format`, as chat `chat`'s state of `bot`, the way a run does: an update of
/// the chat stored, claimed and settled `DONE` with the state (for stores whose states only runs
/// write).
pub async fn write_state(
    store: &dyn UpdateStore,
    ledger: &dyn UpdateLedger,
    (bot, chat): (&BotId, i64),
    format: &str,
    json: &str,
) {
    let key = RecordKey::new(bot.clone(), fresh_key().update_id);
    let group = GroupKey::new(chat.to_string());
    let mut record = record(&key, group.as_str());
    record.key = key;
    store
        .insert(&record, now())
        .await
        .expect("the record is stored");
    let claimed = match ledger
        .claim(&claim_request(&record, now(), Duration::from_secs(30)))
        .await
        .expect("the claim is answered")
    {
        Claim::Run(claimed) => claimed,
        other => panic!("expected the claim to run, got {other:?}"),
    };
    let settlement = Settlement::Done {
        state: Some(StateWrite {
            key: StateKey::new(bot.clone(), group),
            format: format.into(),
            json: json.into(),
            read_version: claimed.state.map_or(0, |s| s.version),
            time: None,
        }),
        charges: Vec::new(),
    };
    ledger
        .settle(&claimed.lease, &settlement, &[])
        .await
        .expect("the state is written");
}
