//! The payments ledger compared with Telegram's own list of the bot's Star transactions
//! (docs/design/payments.md §4): `tgq payments reconcile`. It reads both sides and changes neither.
//!
//! Telegram lists a user's payment as an incoming transaction whose id is the payment's
//! `telegram_payment_charge_id`, and its refund as an outgoing transaction to the user with the same
//! id. Other transactions (paid media, withdrawals, ads, gifts) are counted and left out of the
//! comparison.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use teloxide_core::payloads::GetStarTransactions;
use teloxide_core::requests::Payload;
use teloxide_core::types::{
    StarTransaction, StarTransactions, TransactionPartner, TransactionPartnerUserKind,
};

use crate::payment::Charge;
use crate::telegram::{method_name, ApiCall, BotApi, CallError, TelegramError};

/// Transactions asked per call: Telegram's most.
const PAGE: u8 = 100;

/// A payment as Telegram lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedPayment {
    /// The transaction's id: the payment's `telegram_payment_charge_id`.
    pub id: String,
    /// The user who paid.
    pub user: i64,
    /// Stars paid.
    pub stars: u32,
    /// When, in Unix seconds.
    pub date: i64,
    /// The invoice's payload, when Telegram gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
}

/// A charge whose Stars the two sides give differently.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StarsDiffer {
    /// The charge id.
    pub id: String,
    /// The ledger's Stars.
    pub ledger: u32,
    /// Telegram's.
    pub telegram: u32,
}

/// What each side has that the other lacks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reconciliation {
    /// Users' payments Telegram listed.
    pub at_telegram: usize,
    /// The ledger's charges.
    pub in_ledger: usize,
    /// Charges both sides have alike: the same Stars, refunded on both or on neither.
    pub matched: usize,
    /// Telegram's transactions that are not users' invoice payments or their refunds (paid media,
    /// withdrawals, ads, gifts).
    pub other_transactions: usize,
    /// Payments Telegram lists that the ledger lacks: never delivered to tgq, dead-lettered, or
    /// paid before the ledger was kept.
    pub only_at_telegram: Vec<ListedPayment>,
    /// Charges the ledger holds that Telegram does not list.
    pub only_in_ledger: Vec<Charge>,
    /// Charges Telegram lists refunded that the ledger does not mark refunded.
    pub refunded_only_at_telegram: Vec<String>,
    /// Charges the ledger marks refunded with no refund Telegram lists.
    pub refunded_only_in_ledger: Vec<String>,
    /// Charges whose Stars differ.
    pub stars_differ: Vec<StarsDiffer>,
}

impl Reconciliation {
    /// How many differences were found.
    pub fn differences(&self) -> usize {
        self.only_at_telegram.len()
            + self.only_in_ledger.len()
            + self.refunded_only_at_telegram.len()
            + self.refunded_only_in_ledger.len()
            + self.stars_differ.len()
    }
}

/// Every transaction of the bot, oldest first, asked [`PAGE`] at a time until a page comes back
/// short. A failure ends it: nothing is compared on half a list.
pub async fn star_transactions(
    telegram: &dyn BotApi,
) -> Result<Vec<StarTransaction>, TelegramError> {
    let method = method_name(GetStarTransactions::NAME);
    let mut all = Vec::new();
    loop {
        let offset = u32::try_from(all.len()).unwrap_or(u32::MAX);
        let payload = GetStarTransactions {
            offset: Some(offset),
            limit: Some(PAGE),
        };
        let params =
            serde_json::to_value(&payload).map_err(|e| TelegramError::NotSent(e.to_string()))?;
        let result = match telegram.call(&ApiCall::plain(&method, &params)).await {
            Ok(result) => result,
            Err(CallError::Telegram(error)) => return Err(error),
            Err(CallError::Store(error)) => return Err(TelegramError::NotSent(error.to_string())),
        };
        // Read from text: teloxide-core's flattened, tagged partner kinds do not read from a
        // `serde_json::Value` alike.
        let page: StarTransactions = serde_json::from_str(&result.to_string())
            .map_err(|_| TelegramError::InvalidResponse { status: 200 })?;
        let short = page.transactions.len() < usize::from(PAGE);
        all.extend(page.transactions);
        if short {
            return Ok(all);
        }
    }
}

/// Compares `ledger`, a bot's charges, with `transactions`, its Star transactions at Telegram.
pub fn reconcile(ledger: &[Charge], transactions: &[StarTransaction]) -> Reconciliation {
    let mut paid: BTreeMap<String, ListedPayment> = BTreeMap::new();
    let mut refunded: BTreeSet<String> = BTreeSet::new();
    let mut other = 0;
    for transaction in transactions {
        let id = transaction.id.0.clone();
        match (&transaction.source, &transaction.receiver) {
            (Some(TransactionPartner::User(user)), _) if is_payment(&user.kind) => {
                let payload = match &user.kind {
                    TransactionPartnerUserKind::InvoicePayment(invoice) => {
                        invoice.invoice_payload.clone()
                    }
                    _ => None,
                };
                paid.insert(
                    id.clone(),
                    ListedPayment {
                        id,
                        user: i64::try_from(user.user.id.0).unwrap_or(i64::MAX),
                        stars: transaction.amount,
                        date: transaction.date.timestamp(),
                        payload,
                    },
                );
            }
            (None, Some(TransactionPartner::User(_))) => {
                refunded.insert(id);
            }
            _ => other += 1,
        }
    }
    // A refund of a payment Telegram does not list is no user's payment of this comparison.
    let stray = refunded.iter().filter(|id| !paid.contains_key(*id)).count();
    let mut report = Reconciliation {
        at_telegram: paid.len(),
        in_ledger: ledger.len(),
        other_transactions: other + stray,
        ..Reconciliation::default()
    };
    let known: BTreeSet<&str> = ledger.iter().map(|charge| charge.id.as_str()).collect();
    for charge in ledger {
        let Some(listed) = paid.get(&charge.id) else {
            report.only_in_ledger.push(charge.clone());
            continue;
        };
        let mut alike = true;
        if listed.stars != charge.stars {
            alike = false;
            report.stars_differ.push(StarsDiffer {
                id: charge.id.clone(),
                ledger: charge.stars,
                telegram: listed.stars,
            });
        }
        match (refunded.contains(&charge.id), charge.refunded_at.is_some()) {
            (true, false) => {
                alike = false;
                report.refunded_only_at_telegram.push(charge.id.clone());
            }
            (false, true) => {
                alike = false;
                report.refunded_only_in_ledger.push(charge.id.clone());
            }
            _ => {}
        }
        if alike {
            report.matched += 1;
        }
    }
    report.only_at_telegram = paid
        .into_values()
        .filter(|listed| !known.contains(listed.id.as_str()))
        .collect();
    report
}

/// Whether a user's transaction is a payment the ledger would hold: an invoice's, which reaches
/// the bot as a `successful_payment` with its charge id. Paid media reach it as
/// `purchased_paid_media`, with no charge id, and are not in the ledger.
fn is_payment(kind: &TransactionPartnerUserKind) -> bool {
    matches!(kind, TransactionPartnerUserKind::InvoicePayment(_))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Timestamp;
    use serde_json::json;

    fn charge(id: &str, stars: u32, refunded: bool) -> Charge {
        Charge {
            id: id.into(),
            user: 42,
            stars,
            payload: "gem".into(),
            update_id: 1,
            recorded_at: Timestamp(1),
            refunded_at: refunded.then_some(Timestamp(2)),
            subscription: None,
        }
    }

    fn user() -> serde_json::Value {
        json!({ "id": 42, "is_bot": false, "first_name": "Ada" })
    }

    fn transactions(listed: serde_json::Value) -> Vec<StarTransaction> {
        let page: StarTransactions =
            serde_json::from_str(&json!({ "transactions": listed }).to_string()).unwrap();
        page.transactions
    }

    fn payment(id: &str, stars: u32) -> serde_json::Value {
        json!({ "id": id, "amount": stars, "date": 1_800_000_000, "source": {
            "type": "user", "transaction_type": "invoice_payment", "user": user(),
            "invoice_payload": "gem" } })
    }

    fn refund(id: &str, stars: u32) -> serde_json::Value {
        json!({ "id": id, "amount": stars, "date": 1_800_000_100, "receiver": {
            "type": "user", "transaction_type": "invoice_payment", "user": user(),
            "invoice_payload": "gem" } })
    }

    #[test]
    fn each_side_s_lacks_are_named_and_the_rest_matched() {
        let listed = transactions(json!([
            payment("same", 50),
            payment("both-refunded", 10),
            refund("both-refunded", 10),
            payment("telegram-only", 5),
            payment("refunded-at-telegram", 7),
            refund("refunded-at-telegram", 7),
            payment("marked-in-ledger", 8),
            payment("other-stars", 30),
            { "id": "w1", "amount": 100, "date": 1_800_000_200,
              "receiver": { "type": "fragment" } },
            { "id": "media-1", "amount": 3, "date": 1_800_000_300, "source": {
              "type": "user", "transaction_type": "paid_media_payment", "user": user(),
              "paid_media_payload": "photo" } },
        ]));
        let ledger = [
            charge("same", 50, false),
            charge("both-refunded", 10, true),
            charge("ledger-only", 20, false),
            charge("refunded-at-telegram", 7, false),
            charge("marked-in-ledger", 8, true),
            charge("other-stars", 25, false),
        ];

        let report = reconcile(&ledger, &listed);

        assert_eq!(report.at_telegram, 6);
        assert_eq!(report.in_ledger, 6);
        assert_eq!(report.matched, 2, "{report:?}");
        assert_eq!(
            report.other_transactions, 2,
            "the withdrawal and the paid media"
        );
        assert_eq!(
            report
                .only_at_telegram
                .iter()
                .map(|p| (p.id.as_str(), p.user, p.stars, p.payload.as_deref()))
                .collect::<Vec<_>>(),
            [("telegram-only", 42, 5, Some("gem"))]
        );
        assert_eq!(report.only_in_ledger, [charge("ledger-only", 20, false)]);
        assert_eq!(report.refunded_only_at_telegram, ["refunded-at-telegram"]);
        assert_eq!(report.refunded_only_in_ledger, ["marked-in-ledger"]);
        assert_eq!(
            report.stars_differ,
            [StarsDiffer {
                id: "other-stars".into(),
                ledger: 25,
                telegram: 30
            }]
        );
        assert_eq!(report.differences(), 5);
    }

    #[test]
    fn sides_alike_have_no_differences() {
        let listed = transactions(json!([payment("a", 1), payment("b", 2)]));
        let report = reconcile(&[charge("a", 1, false), charge("b", 2, false)], &listed);
        assert_eq!((report.matched, report.differences()), (2, 0));
    }
}
