//! An operator's refund of a charge (`tgq payments refund`): Telegram is asked only for a charge the
//! ledger holds unrefunded, the entry is marked once Telegram has given the Stars back, and every
//! call is audited with how it ended.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tgq_core::audit::{AuditAction, AuditEntry, AuditReader as _};
use tgq_core::clock::ManualClock;
use tgq_core::ids::BotId;
use tgq_core::payment::{Charge, ChargeWrite};
use tgq_core::ports::ChargeBook;
use tgq_core::record::Timestamp;
use tgq_core::refund::{refund_charge, RefundError, RefundPorts, RefundRequest, Refunded};
use tgq_core::telegram::TelegramError;
use tgq_core::PortError;
use tgq_memory::{MemoryStore, RecordingBotApi};

const PAID_AT: Timestamp = Timestamp(1_800_000_000_000);

fn bot() -> BotId {
    BotId::new("shop").unwrap()
}

fn charge(id: &str) -> Charge {
    Charge {
        id: id.to_owned(),
        user: 42,
        stars: 50,
        payload: "gems".into(),
        update_id: 7,
        recorded_at: PAID_AT,
        refunded_at: None,
        subscription: None,
    }
}

/// The ports over a ledger holding the charge `stx-1`, with the clock a minute after it was paid.
struct Desk {
    store: Arc<MemoryStore>,
    telegram: Arc<RecordingBotApi>,
    clock: ManualClock,
}

impl Desk {
    async fn new() -> Self {
        let store = Arc::new(MemoryStore::new());
        store
            .write_charge(&bot(), &ChargeWrite::paid(charge("stx-1")))
            .await
            .unwrap();
        Self {
            store,
            telegram: Arc::new(RecordingBotApi::new()),
            clock: ManualClock::at(PAID_AT.plus(Duration::from_secs(60))),
        }
    }

    fn ports(&self) -> RefundPorts {
        self.ports_over(self.store.clone())
    }

    fn ports_over(&self, book: Arc<dyn ChargeBook>) -> RefundPorts {
        RefundPorts {
            book,
            audit: self.store.clone(),
            telegram: self.telegram.clone(),
            clock: Arc::new(self.clock.clone()),
        }
    }

    async fn refund(&self, id: &str) -> Result<Refunded, RefundError> {
        refund_charge(&self.ports(), &request(id)).await
    }

    async fn entry(&self, id: &str) -> Option<Charge> {
        self.store.entry(&bot(), id).await.unwrap()
    }

    /// The refunds asked of Telegram, as `(user_id, charge id)`.
    fn asked(&self) -> Vec<(i64, String)> {
        self.telegram
            .calls()
            .into_iter()
            .map(|call| {
                assert_eq!(call.method, "refundStarPayment");
                (
                    call.params["user_id"].as_i64().unwrap(),
                    call.params["telegram_payment_charge_id"]
                        .as_str()
                        .unwrap()
                        .to_owned(),
                )
            })
            .collect()
    }

    async fn audited(&self) -> Vec<AuditEntry> {
        self.store.recent(10, self.clock_now()).await.unwrap()
    }

    /// The audit trail's outcomes, as a set: each call's entry before it, and its outcome's.
    async fn outcomes(&self) -> std::collections::BTreeSet<String> {
        self.audited()
            .await
            .into_iter()
            .map(|e| e.outcome)
            .collect()
    }

    fn clock_now(&self) -> Timestamp {
        use tgq_core::clock::Clock as _;
        self.clock.now()
    }
}

fn request(id: &str) -> RefundRequest {
    RefundRequest {
        bot: bot(),
        charge: id.to_owned(),
        principal: "ops@example".into(),
        audit_ttl: Duration::from_secs(86_400),
    }
}

fn refused(description: &str) -> TelegramError {
    TelegramError::Api {
        code: 400,
        description: description.into(),
    }
}

#[tokio::test]
async fn a_refund_asks_telegram_once_marks_the_charge_and_is_audited() {
    let desk = Desk::new().await;

    let done = desk.refund("stx-1").await.unwrap();

    let at = desk.clock_now();
    assert_eq!(
        done,
        Refunded {
            charge: Charge {
                refunded_at: Some(at),
                ..charge("stx-1")
            },
            before: false,
        }
    );
    assert_eq!(desk.asked(), [(42, "stx-1".to_owned())]);
    assert_eq!(desk.entry("stx-1").await.unwrap().refunded_at, Some(at));
    let audited = desk.audited().await;
    assert!(audited.iter().all(|e| e.action == AuditAction::Refund
        && e.principal == "ops@example"
        && e.update_id.map(|u| u.0) == Some(7)));
    assert_eq!(
        desk.outcomes().await,
        [
            "charge stx-1 of user 42, 50 Stars: asking Telegram to refund".to_owned(),
            "charge stx-1 of user 42, 50 Stars: refunded".to_owned()
        ]
        .into(),
        "before the call, and after"
    );

    // Again: the ledger knows it refunded, and Telegram is not asked.
    let again = desk.refund("stx-1").await;
    assert!(
        matches!(&again, Err(RefundError::AlreadyRefunded { at: when, .. }) if *when == at),
        "{again:?}"
    );
    assert_eq!(desk.asked().len(), 1, "asked once");
    assert_eq!(desk.audited().await.len(), 2, "a refusal asks nothing");
}

#[tokio::test]
async fn a_charge_the_ledger_does_not_hold_is_refused_without_asking() {
    let desk = Desk::new().await;

    let refused = desk.refund("stx-9").await;

    assert!(
        matches!(&refused, Err(RefundError::Unknown { charge, .. }) if charge == "stx-9"),
        "{refused:?}"
    );
    assert!(desk.asked().is_empty());
    assert!(desk.audited().await.is_empty());
    assert_eq!(desk.entry("stx-9").await, None, "nothing entered");
}

#[tokio::test]
async fn telegram_s_already_refunded_marks_the_charge() {
    let desk = Desk::new().await;
    desk.telegram
        .fail_next([refused("Bad Request: CHARGE_ALREADY_REFUNDED")]);

    let done = desk.refund("stx-1").await.unwrap();

    assert!(done.before);
    assert_eq!(
        desk.entry("stx-1").await.unwrap().refunded_at,
        Some(desk.clock_now())
    );
    assert!(desk
        .outcomes()
        .await
        .iter()
        .any(|o| o.ends_with("refunded before (CHARGE_ALREADY_REFUNDED)")));
}

#[tokio::test]
async fn a_refund_telegram_refuses_or_never_gets_changes_nothing_and_is_audited() {
    for (error, said) in [
        (refused("Bad Request: CHARGE_NOT_FOUND"), "CHARGE_NOT_FOUND"),
        (
            TelegramError::NotSent("connection refused".into()),
            "could not be reached",
        ),
        (
            TelegramError::Api {
                code: 502,
                description: "Bad Gateway".into(),
            },
            "Bad Gateway",
        ),
    ] {
        let desk = Desk::new().await;
        desk.telegram.fail_next([error]);

        let result = desk.refund("stx-1").await;

        assert!(
            matches!(&result, Err(RefundError::NotDone { error, .. }) if error.to_string().contains(said)),
            "{result:?}"
        );
        assert_eq!(desk.entry("stx-1").await, Some(charge("stx-1")), "unmarked");
        let outcomes = desk.outcomes().await;
        assert_eq!(outcomes.len(), 2, "the call is audited, before and after");
        assert!(
            outcomes
                .iter()
                .any(|o| o.contains("not refunded") && o.contains(said)),
            "{outcomes:?}"
        );
    }
}

/// A call whose answer was lost may have refunded: the entry stays unmarked, and running the
/// refund again asks again, which Telegram answers `CHARGE_ALREADY_REFUNDED` if it had.
#[tokio::test]
async fn a_lost_answer_is_uncertain_and_asking_again_settles_it() {
    let desk = Desk::new().await;
    desk.telegram.lose_next_answer();

    let lost = desk.refund("stx-1").await;

    assert!(
        matches!(&lost, Err(RefundError::Uncertain { .. })),
        "{lost:?}"
    );
    assert_eq!(desk.entry("stx-1").await, Some(charge("stx-1")));
    assert!(desk.outcomes().await.iter().any(|o| o.contains("unknown")));

    desk.telegram
        .fail_next([refused("Bad Request: CHARGE_ALREADY_REFUNDED")]);
    let settled = desk.refund("stx-1").await.unwrap();
    assert!(settled.before);
    assert!(desk.entry("stx-1").await.unwrap().refunded_at.is_some());
    assert_eq!(
        desk.asked().len(),
        1,
        "the first call was taken, the second refused"
    );
}

/// The ledger, read first as it was before a `refunded_payment` update marked the charge, or
/// refusing every write.
struct Stale {
    store: Arc<MemoryStore>,
    fail_writes: bool,
    read: AtomicBool,
}

impl Stale {
    fn over(store: Arc<MemoryStore>, fail_writes: bool) -> Arc<Self> {
        Arc::new(Self {
            store,
            fail_writes,
            read: AtomicBool::new(false),
        })
    }
}

#[async_trait]
impl ChargeBook for Stale {
    async fn entry(&self, bot: &BotId, id: &str) -> Result<Option<Charge>, PortError> {
        let found = self.store.entry(bot, id).await?;
        if self.read.swap(true, Ordering::SeqCst) {
            return Ok(found);
        }
        Ok(found.map(|charge| Charge {
            refunded_at: None,
            ..charge
        }))
    }

    async fn write_charge(&self, bot: &BotId, write: &ChargeWrite) -> Result<(), PortError> {
        if self.fail_writes {
            return Err(PortError::unavailable(
                "store charge write",
                "the store is down",
            ));
        }
        self.store.write_charge(bot, write).await
    }
}

#[tokio::test]
async fn a_charge_marked_meanwhile_keeps_its_mark() {
    let desk = Desk::new().await;
    let earlier = PAID_AT.plus(Duration::from_secs(1));
    let marked = ChargeWrite::refund(&charge("stx-1"), earlier).unwrap();
    desk.store.write_charge(&bot(), &marked).await.unwrap();
    desk.telegram
        .fail_next([refused("Bad Request: CHARGE_ALREADY_REFUNDED")]);
    let stale = Stale::over(desk.store.clone(), false);

    let done = refund_charge(&desk.ports_over(stale), &request("stx-1"))
        .await
        .unwrap();

    assert_eq!(
        done.charge.refunded_at,
        Some(earlier),
        "the first mark kept"
    );
    assert_eq!(
        desk.entry("stx-1").await.unwrap().refunded_at,
        Some(earlier)
    );
}

#[tokio::test]
async fn a_refund_made_whose_mark_fails_says_so_and_is_audited() {
    let desk = Desk::new().await;
    let failing = Stale::over(desk.store.clone(), true);

    let result = refund_charge(&desk.ports_over(failing), &request("stx-1")).await;

    assert!(
        matches!(&result, Err(RefundError::Unmarked { .. })),
        "{result:?}"
    );
    assert!(result
        .unwrap_err()
        .to_string()
        .contains("run the refund again"));
    assert_eq!(desk.asked().len(), 1);
    assert!(desk
        .outcomes()
        .await
        .iter()
        .any(|o| o.contains("refunded, ledger not marked")));
}

/// An audit trail that takes nothing.
struct Unwritable;

#[async_trait]
impl tgq_core::audit::AuditLog for Unwritable {
    async fn append(&self, _: &AuditEntry) -> Result<(), PortError> {
        Err(PortError::unavailable("audit append", "the store is down"))
    }
}

/// A refund whose call cannot be audited first is not asked: no Stars go back unrecorded.
#[tokio::test]
async fn a_refund_that_cannot_be_audited_first_asks_nothing() {
    let desk = Desk::new().await;
    let ports = RefundPorts {
        audit: Arc::new(Unwritable),
        ..desk.ports()
    };

    let result = refund_charge(&ports, &request("stx-1")).await;

    assert!(matches!(&result, Err(RefundError::Store(_))), "{result:?}");
    assert!(desk.asked().is_empty(), "Telegram was not asked");
    assert_eq!(desk.entry("stx-1").await, Some(charge("stx-1")));
}
