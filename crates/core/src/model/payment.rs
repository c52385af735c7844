//! A payment in Telegram Stars as tgq's ledger keeps it: one entry per charge, keyed by the charge
//! id Telegram gives it (docs/design/payments.md §2).

use serde::{Deserialize, Serialize};
use teloxide_core::types::{Message, SuccessfulPayment, Update, UpdateKind};

use crate::ids::{BotId, RecordKey};
use crate::record::Timestamp;

/// The longest charge id tgq keeps: Telegram's are a few dozen characters.
pub const MAX_CHARGE_ID_BYTES: usize = 256;
/// The currency of Telegram Stars: the ledger keeps payments in it, and no other.
pub const STARS: &str = "XTR";

/// One charge in the bot's ledger: a payment in Stars tgq received, recorded once, in the same
/// write that settles the first update that carried it. It never expires.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Charge {
    /// Telegram's `telegram_payment_charge_id`: the ledger's key, with the bot's id.
    pub id: String,
    /// The user who paid.
    pub user: i64,
    /// What they paid, in Stars (`total_amount` of an `XTR` payment).
    pub stars: u32,
    /// The invoice's payload, as the bot set it.
    pub payload: String,
    /// The update that carried the payment.
    pub update_id: i64,
    /// When tgq recorded it.
    pub recorded_at: Timestamp,
    /// When tgq learnt it was refunded: its `refunded_payment` finished, or `ctx.refund` gave the
    /// Stars back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refunded_at: Option<Timestamp>,
    /// For a subscription's payment, the period it pays for. Each period's payment, the first and
    /// every renewal, is a charge of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscription: Option<Subscription>,
}

/// The subscription period a charge pays for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscription {
    /// When the period ends (`subscription_expiration_date`), in Unix seconds.
    pub until: i64,
    /// Whether the charge renews the subscription (`is_recurring` and not `is_first_recurring`):
    /// `false` for its first payment.
    pub renewal: bool,
}

/// What a payment update tells the ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PaymentUpdate {
    /// A `successful_payment`: the charge, paid.
    Paid(Charge),
    /// A `refunded_payment`: the charge, refunded.
    Refunded(Charge),
}

impl PaymentUpdate {
    /// The charge the update names, as it would enter the ledger.
    pub(crate) fn charge(&self) -> &Charge {
        match self {
            PaymentUpdate::Paid(charge) | PaymentUpdate::Refunded(charge) => charge,
        }
    }
}

/// How a settle may write a charge's entry: on what it must find there, so that two runs that read
/// the same entry cannot both act on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// No entry: a payment recorded once.
    Absent,
    /// No entry, or one not refunded: a refund recorded once.
    NotRefunded,
}

impl Expect {
    /// Whether `found`, the entry there now, is what the write expects.
    pub fn holds(self, found: Option<&Charge>) -> bool {
        match self {
            Expect::Absent => found.is_none(),
            Expect::NotRefunded => found.is_none_or(|charge| charge.refunded_at.is_none()),
        }
    }
}

/// A write of the payments ledger that a `DONE` settle makes with the update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChargeWrite {
    /// The entry as the run leaves it.
    pub entry: Charge,
    /// What the settle must find.
    pub expect: Expect,
}

impl ChargeWrite {
    /// What a payment update writes, given the entry the run read (`None` when there is nothing
    /// to write: a payment credited before, a refund known before).
    pub fn of(update: &PaymentUpdate, read: Option<&Charge>, now: Timestamp) -> Option<Self> {
        match (update, read) {
            (PaymentUpdate::Paid(charge), None) => Some(ChargeWrite::paid(charge.clone())),
            (PaymentUpdate::Paid(_), Some(_)) => None,
            (PaymentUpdate::Refunded(_), Some(known)) => Self::refund(known, now),
            (PaymentUpdate::Refunded(charge), None) => Some(ChargeWrite {
                entry: charge.clone(),
                expect: Expect::NotRefunded,
            }),
        }
    }

    /// A payment's entry, written once: where no entry is.
    pub fn paid(entry: Charge) -> Self {
        ChargeWrite {
            entry,
            expect: Expect::Absent,
        }
    }

    /// `known` marked refunded at `now`; `None` when it is already.
    pub fn refund(known: &Charge, now: Timestamp) -> Option<Self> {
        known.refunded_at.is_none().then(|| ChargeWrite {
            entry: Charge {
                refunded_at: Some(now),
                ..known.clone()
            },
            expect: Expect::NotRefunded,
        })
    }
}

impl Charge {
    /// The charge a payment update carries, read from `update` as the update `key` of its bot;
    /// `Ok(None)` for any other update. A payment whose charge id tgq cannot key a ledger entry by
    /// (empty, too long, or with control characters) is refused with the reason: such an update is
    /// dead-lettered, never credited.
    pub(crate) fn of(
        update: &Update,
        key: &RecordKey,
        now: Timestamp,
    ) -> Result<Option<PaymentUpdate>, String> {
        let UpdateKind::Message(message) = &update.kind else {
            return Ok(None);
        };
        let charge = |kind: &str, id: &str, stars: u32, payload: &str| -> Result<Charge, String> {
            if let Some(reason) = malformed(id) {
                return Err(format!(
                    "a {kind} whose telegram_payment_charge_id {reason}: it is not credited"
                ));
            }
            Ok(Charge {
                id: id.to_owned(),
                user: payer(message),
                stars,
                payload: payload.to_owned(),
                update_id: key.update_id.0,
                recorded_at: now,
                refunded_at: None,
                subscription: None,
            })
        };
        if let Some(paid) = message.successful_payment().filter(|p| p.currency == STARS) {
            let id = &paid.telegram_payment_charge_id.0;
            let mut entry = charge(
                "successful_payment",
                id,
                paid.total_amount,
                &paid.invoice_payload,
            )?;
            entry.subscription = paid.subscription_expiration_date.map(|until| Subscription {
                until: until.timestamp(),
                renewal: paid.is_recurring && !paid.is_first_recurring,
            });
            return Ok(Some(PaymentUpdate::Paid(entry)));
        }
        if let teloxide_core::types::MessageKind::RefundedPayment(refund) = &message.kind {
            let refund = &refund.refunded_payment;
            if refund.currency != STARS {
                return Ok(None);
            }
            let id = &refund.telegram_payment_charge_id.0;
            let mut refunded = charge(
                "refunded_payment",
                id,
                refund.total_amount,
                &refund.invoice_payload,
            )?;
            refunded.refunded_at = Some(now);
            return Ok(Some(PaymentUpdate::Refunded(refunded)));
        }
        Ok(None)
    }

    /// Whether `payment` is this charge's.
    pub(crate) fn is_of(&self, payment: &SuccessfulPayment) -> bool {
        payment.telegram_payment_charge_id.0 == self.id
    }
}

/// Who paid: the message's sender, else its (private) chat.
fn payer(message: &Message) -> i64 {
    message.from.as_ref().map_or(message.chat.id.0, |from| {
        i64::try_from(from.id.0).unwrap_or(message.chat.id.0)
    })
}

/// What is wrong with a charge id, if anything.
fn malformed(id: &str) -> Option<String> {
    if id.trim().is_empty() {
        Some("is empty".into())
    } else if id.len() > MAX_CHARGE_ID_BYTES {
        Some(format!("is over {MAX_CHARGE_ID_BYTES} bytes"))
    } else if id.chars().any(char::is_control) {
        Some("holds control characters".into())
    } else {
        None
    }
}

/// The key of a charge's ledger entry: `{bot_id}#charge#{id}`, beside the bot's records and states
/// and never one of theirs.
pub fn charge_pk(bot: &BotId, id: &str) -> String {
    format!("{bot}#charge#{id}")
}

/// The bot id and charge id a key [`charge_pk`] made.
pub fn split_charge_pk(pk: &str) -> Option<(&str, &str)> {
    pk.split_once("#charge#")
}

/// A charge of the ledger with the bot it was paid to, as `tgq payments` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerEntry {
    /// The bot.
    pub bot_id: String,
    /// The charge.
    #[serde(flatten)]
    pub charge: Charge,
}

/// Orders `entries` newest first (the latest recorded, then by charge id) and keeps `limit`.
pub fn newest_entries(mut entries: Vec<LedgerEntry>, limit: usize) -> Vec<LedgerEntry> {
    entries.sort_by(|a, b| {
        (b.charge.recorded_at, &b.charge.id).cmp(&(a.charge.recorded_at, &a.charge.id))
    });
    entries.truncate(limit);
    entries
}

/// What [`crate::Context::credit`] answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credit {
    /// The charge is new: credit it in this run. What the run sets (the chat's state) is written
    /// with the charge's entry, in the one write that finishes the update, or not at all.
    New,
    /// An earlier update carrying the same charge credited it (a payment delivered again, or
    /// replayed after its record expired): credit nothing.
    Already(Charge),
}

impl Credit {
    /// Whether the run should credit the payment.
    pub fn is_new(&self) -> bool {
        matches!(self, Credit::New)
    }
}

/// What [`crate::Context::refund`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refund {
    /// Telegram gave the Stars back, in this run or in an earlier run of the update.
    Refunded,
    /// The charge was refunded before: the ledger says so, or Telegram answered
    /// `CHARGE_ALREADY_REFUNDED`. Nothing was given back now.
    Already,
    /// An earlier run of the update asked for the refund and died before Telegram's answer was
    /// recorded: it is not asked again (a refund is never sent twice), and whether it happened is
    /// unknown; `tgq payments show` and the bot's Star transactions tell.
    Uncertain,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::UpdateId;

    fn update(kind: &str, charge: &str) -> Update {
        let payment = serde_json::json!({
            "currency": "XTR", "total_amount": 50, "invoice_payload": "gem",
            "telegram_payment_charge_id": charge, "provider_payment_charge_id": ""
        });
        update_with(kind, payment)
    }

    /// A message of user 42 carrying `payment` as its `kind`.
    fn update_with(kind: &str, payment: serde_json::Value) -> Update {
        // From text: teloxide reads an update's kind from borrowed keys only.
        let update = serde_json::json!({
            "update_id": 7,
            "message": {
                "message_id": 3, "date": 1_700_000_000,
                "chat": {"id": 42, "type": "private", "first_name": "A"},
                "from": {"id": 42, "is_bot": false, "first_name": "A"},
                kind: payment
            }
        });
        serde_json::from_str(&update.to_string()).unwrap()
    }

    fn key() -> RecordKey {
        RecordKey::new(BotId::new("shop").unwrap(), UpdateId(7))
    }

    fn charge(refunded_at: Option<Timestamp>) -> Charge {
        Charge {
            id: "stx1".into(),
            user: 42,
            stars: 50,
            payload: "gem".into(),
            update_id: 7,
            recorded_at: Timestamp(5),
            refunded_at,
            subscription: None,
        }
    }

    /// A subscription's payment: its first (`renewal` false) or a renewal.
    fn subscribed(charge: &str, renewal: bool) -> Update {
        let payment = serde_json::json!({
            "currency": "XTR", "total_amount": 50, "invoice_payload": "club",
            "telegram_payment_charge_id": charge, "provider_payment_charge_id": "",
            "subscription_expiration_date": 1_702_592_000,
            "is_recurring": true, "is_first_recurring": !renewal
        });
        update_with("successful_payment", payment)
    }

    #[test]
    fn a_subscription_s_first_payment_and_each_renewal_are_charges_of_their_own() {
        let of = |update| match Charge::of(&update, &key(), Timestamp(5)).unwrap() {
            Some(PaymentUpdate::Paid(charge)) => charge,
            other => panic!("{other:?}"),
        };
        let first = of(subscribed("stx-first", false));
        let renewed = of(subscribed("stx-renewal", true));
        assert_eq!(
            first.subscription,
            Some(Subscription {
                until: 1_702_592_000,
                renewal: false
            })
        );
        assert_eq!(renewed.subscription.map(|s| s.renewal), Some(true));
        assert_eq!(
            charge(None).subscription,
            None,
            "a one-off payment has none"
        );
    }

    #[test]
    fn a_payment_and_a_refund_are_read_as_their_charge() {
        let of = |kind| Charge::of(&update(kind, "stx1"), &key(), Timestamp(5)).unwrap();
        assert_eq!(
            of("successful_payment"),
            Some(PaymentUpdate::Paid(charge(None)))
        );
        assert_eq!(
            of("refunded_payment"),
            Some(PaymentUpdate::Refunded(charge(Some(Timestamp(5)))))
        );
    }

    #[test]
    fn a_charge_id_no_entry_can_be_keyed_by_is_refused_with_the_reason() {
        for kind in ["successful_payment", "refunded_payment"] {
            for (id, reason) in [
                ("", "is empty"),
                ("  ", "is empty"),
                (&"x".repeat(257)[..], "is over 256 bytes"),
                ("a\nb", "holds control characters"),
            ] {
                let refused = Charge::of(&update(kind, id), &key(), Timestamp(5)).unwrap_err();
                assert!(
                    refused.contains(reason) && refused.contains(kind),
                    "{id:?}: {refused}"
                );
            }
        }
    }

    #[test]
    fn a_payment_is_written_once_and_a_refund_marks_its_charge_once() {
        let paid = PaymentUpdate::Paid(charge(None));
        let refunded = PaymentUpdate::Refunded(charge(Some(Timestamp(9))));
        let now = Timestamp(9);
        let written = |update, read: Option<&Charge>| ChargeWrite::of(update, read, now);
        assert_eq!(written(&paid, None).map(|w| w.expect), Some(Expect::Absent));
        assert_eq!(written(&paid, Some(&charge(None))), None);
        let marked = written(&refunded, Some(&charge(None))).unwrap();
        assert_eq!(
            (marked.entry.refunded_at, marked.entry.recorded_at),
            (Some(now), Timestamp(5))
        );
        assert_eq!(marked.expect, Expect::NotRefunded);
        assert_eq!(written(&refunded, Some(&charge(Some(Timestamp(8))))), None);
        assert_eq!(written(&refunded, None).unwrap().entry, charge(Some(now)));

        assert!(Expect::Absent.holds(None));
        assert!(!Expect::Absent.holds(Some(&charge(None))));
        assert!(Expect::NotRefunded.holds(Some(&charge(None))));
        assert!(!Expect::NotRefunded.holds(Some(&charge(Some(now)))));
    }
}
