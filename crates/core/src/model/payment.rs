//! A payment in Telegram Stars as tgq's ledger keeps it: one entry per charge, keyed by the charge
//! id Telegram gives it (docs/design/payments.md §2).

use serde::{Deserialize, Serialize};
use teloxide_core::types::{SuccessfulPayment, Update, UpdateKind};

use crate::ids::{BotId, RecordKey};
use crate::record::Timestamp;

/// The longest charge id tgq keeps: Telegram's are a few dozen characters.
pub const MAX_CHARGE_ID_BYTES: usize = 256;

/// One charge in the bot's ledger: a `successful_payment` tgq received, recorded once, in the same
/// write that settles the first update that carried it. It is kept until the operator removes it.
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
}

impl Charge {
    /// The charge a payment update carries, read from `update` as the update `key` of its bot;
    /// `Ok(None)` for any other update. A payment whose charge id tgq cannot key a ledger entry by
    /// (empty, too long, or with control characters) is refused with the reason: such an update is
    /// dead-lettered, never credited.
    pub fn of(update: &Update, key: &RecordKey, now: Timestamp) -> Result<Option<Charge>, String> {
        let UpdateKind::Message(message) = &update.kind else {
            return Ok(None);
        };
        let Some(payment) = message.successful_payment() else {
            return Ok(None);
        };
        let id = &payment.telegram_payment_charge_id.0;
        if let Some(reason) = malformed(id) {
            return Err(format!(
                "a successful_payment whose telegram_payment_charge_id {reason}: it is not credited"
            ));
        }
        let user = message.from.as_ref().map_or(message.chat.id.0, |from| {
            i64::try_from(from.id.0).unwrap_or(message.chat.id.0)
        });
        Ok(Some(Charge {
            id: id.clone(),
            user,
            stars: payment.total_amount,
            payload: payment.invoice_payload.clone(),
            update_id: key.update_id.0,
            recorded_at: now,
        }))
    }

    /// Whether `payment` is this charge's.
    pub fn is_of(&self, payment: &SuccessfulPayment) -> bool {
        payment.telegram_payment_charge_id.0 == self.id
    }
}

/// What is wrong with a charge id, if anything.
fn malformed(id: &str) -> Option<&'static str> {
    if id.trim().is_empty() {
        Some("is empty")
    } else if id.len() > MAX_CHARGE_ID_BYTES {
        Some("is over 256 bytes")
    } else if id.chars().any(char::is_control) {
        Some("holds control characters")
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::UpdateId;

    fn update(charge: &str) -> Update {
        // From text: teloxide reads an update's kind from borrowed keys only.
        let update = serde_json::json!({
            "update_id": 7,
            "message": {
                "message_id": 3, "date": 1_700_000_000,
                "chat": {"id": 42, "type": "private", "first_name": "A"},
                "from": {"id": 42, "is_bot": false, "first_name": "A"},
                "successful_payment": {
                    "currency": "XTR", "total_amount": 50, "invoice_payload": "gem",
                    "telegram_payment_charge_id": charge, "provider_payment_charge_id": ""
                }
            }
        });
        serde_json::from_str(&update.to_string()).unwrap()
    }

    fn key() -> RecordKey {
        RecordKey::new(BotId::new("shop").unwrap(), UpdateId(7))
    }

    #[test]
    fn a_payment_is_read_as_its_charge() {
        let charge = Charge::of(&update("stx1"), &key(), Timestamp(5))
            .unwrap()
            .unwrap();
        assert_eq!(
            charge,
            Charge {
                id: "stx1".into(),
                user: 42,
                stars: 50,
                payload: "gem".into(),
                update_id: 7,
                recorded_at: Timestamp(5),
            }
        );
    }

    #[test]
    fn a_charge_id_no_entry_can_be_keyed_by_is_refused_with_the_reason() {
        for (id, reason) in [
            ("", "is empty"),
            ("  ", "is empty"),
            (&"x".repeat(257)[..], "is over 256 bytes"),
            ("a\nb", "holds control characters"),
        ] {
            let refused = Charge::of(&update(id), &key(), Timestamp(5)).unwrap_err();
            assert!(refused.contains(reason), "{id:?}: {refused}");
        }
    }
}
