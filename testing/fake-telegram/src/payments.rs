//! Payments in Telegram Stars as the fake plays them: invoices (`sendInvoice`, `createInvoiceLink`),
//! the pre-checkout query a user's Pay button sends the bot, which the bot must answer within
//! [`PRE_CHECKOUT_DEADLINE`], the charge an `ok` answer makes (a `successful_payment` message in the
//! user's chat), subscriptions (`createInvoiceLink` with `subscription_period`: the first period's
//! charge at checkout, each renewal a charge of its own, with no query), refunds
//! (`refundStarPayment`, each with its `refunded_payment` message) and the bot's transactions
//! (`getStarTransactions`, oldest first). Stars only: the currency is `XTR`, an
//! invoice has one price and no provider token, as Telegram requires of digital goods.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::envelope::ApiError;
use crate::objects::{self, Content};
use crate::params::Params;

/// How long Telegram waits for the bot's answer to a pre-checkout query; a later answer is refused
/// and the user is not charged.
pub const PRE_CHECKOUT_DEADLINE: Duration = Duration::from_secs(10);

/// The currency of Telegram Stars.
pub const STARS: &str = "XTR";

/// The one subscription period Telegram takes: 30 days, in seconds.
pub const SUBSCRIPTION_PERIOD: u32 = 2_592_000;

/// The most transactions one `getStarTransactions` answer holds, and its default.
const MAX_TRANSACTIONS: usize = 100;

/// Telegram's refusal of an answer that came too late or names no query.
const QUERY_TOO_OLD: &str = "query is too old and response timeout expired or query ID is invalid";

/// A user's payment the fake took: one `successful_payment`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Charge {
    /// `telegram_payment_charge_id`.
    pub id: String,
    /// The user who paid (and whose private chat got the message).
    pub user: i64,
    /// Stars paid.
    pub amount: u32,
    /// The invoice's payload.
    pub payload: String,
    /// Whether `refundStarPayment` gave the Stars back.
    pub refunded: bool,
    /// For a subscription's charge, the period it pays for.
    pub subscription: Option<Period>,
}

/// The period a subscription's charge pays for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Period {
    /// When it ends (`subscription_expiration_date`, Unix seconds).
    pub until: i64,
    /// Whether it is the subscription's first (`is_first_recurring`), not a renewal.
    pub first: bool,
}

/// A pre-checkout query sent to the bot and not yet answered.
#[derive(Debug)]
struct Query {
    user: i64,
    amount: u32,
    payload: String,
    asked: Instant,
    /// The subscription's period, for a subscription invoice's query.
    period: Option<u32>,
}

/// One line of the bot's Star balance, as `getStarTransactions` lists it.
#[derive(Debug)]
struct Transaction {
    charge: usize,
    refund: bool,
    date: i64,
}

/// The invoices' queries, the charges and the transactions of the bot's balance.
#[derive(Debug, Default)]
pub(crate) struct Payments {
    queries: HashMap<String, Query>,
    charges: Vec<Charge>,
    transactions: Vec<Transaction>,
    next_query: u64,
    /// The period of each subscription invoice (`createInvoiceLink`), by payload.
    subscriptions: HashMap<String, u32>,
}

/// The invoice of a `sendInvoice` or `createInvoiceLink` call, checked as Telegram checks a Stars
/// invoice.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Invoice {
    title: String,
    description: String,
    payload: String,
    amount: u32,
    /// `subscription_period`, which only `createInvoiceLink` takes.
    period: Option<u32>,
}

impl Invoice {
    /// A `createInvoiceLink` call's invoice: a `sendInvoice`'s, or a subscription's with
    /// `subscription_period`, which must be [`SUBSCRIPTION_PERIOD`].
    pub(crate) fn read_link(params: &Params) -> Result<Self, ApiError> {
        let mut invoice = Invoice::read(params)?;
        invoice.period = match params.int("subscription_period") {
            None => None,
            Some(period) if period == i64::from(SUBSCRIPTION_PERIOD) => Some(SUBSCRIPTION_PERIOD),
            Some(_) => return Err(ApiError::bad_request("SUBSCRIPTION_PERIOD_INVALID")),
        };
        Ok(invoice)
    }

    pub(crate) fn read(params: &Params) -> Result<Self, ApiError> {
        let text = |name: &str, most: usize| match params.str(name) {
            Some(value) if !value.is_empty() && value.chars().count() <= most => {
                Ok(value.to_owned())
            }
            Some(_) => Err(ApiError::bad_request(&format!(
                "invoice {name} must be 1-{most} characters"
            ))),
            None => Err(ApiError::bad_request(&format!(
                "parameter \"{name}\" is required"
            ))),
        };
        let title = text("title", 32)?;
        let description = text("description", 255)?;
        let payload = match params.str("payload") {
            Some(payload) if (1..=128).contains(&payload.len()) => payload.to_owned(),
            Some(_) => return Err(ApiError::bad_request("invoice payload must be 1-128 bytes")),
            None => return Err(ApiError::bad_request("parameter \"payload\" is required")),
        };
        if params.str("currency") != Some(STARS) {
            return Err(ApiError::bad_request("CURRENCY_INVALID"));
        }
        let provider = params.str("provider_token").unwrap_or_default();
        let tips = params.int("max_tip_amount").unwrap_or(0) > 0;
        let prices = params
            .get("prices")
            .and_then(Value::as_array)
            .ok_or_else(|| ApiError::bad_request("parameter \"prices\" is required"))?;
        let amount = match prices.as_slice() {
            [price] => price["amount"].as_u64().and_then(|a| u32::try_from(a).ok()),
            _ => None,
        };
        match amount {
            Some(amount) if amount > 0 && provider.is_empty() && !tips => Ok(Invoice {
                title,
                description,
                payload,
                amount,
                period: None,
            }),
            _ => Err(ApiError::bad_request("STARS_INVOICE_INVALID")),
        }
    }

    /// The `invoice` of the message that carries it.
    pub(crate) fn content(&self, params: &Params) -> Content {
        let mut content = Content::new();
        content.insert(
            "invoice".to_owned(),
            json!({
                "title": self.title,
                "description": self.description,
                "start_parameter": params.str("start_parameter").unwrap_or_default(),
                "currency": STARS,
                "total_amount": self.amount,
            }),
        );
        content
    }

    /// The link `createInvoiceLink` answers: one per invoice, as a payload names it.
    pub(crate) fn link(&self) -> String {
        let slug: String = self
            .payload
            .bytes()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        format!("https://t.me/$fake{slug}")
    }

    /// The payload and price a user's checkout of it carries.
    pub(crate) fn checkout(&self) -> (&str, u32) {
        (&self.payload, self.amount)
    }
}

impl Payments {
    /// `createInvoiceLink`: the invoice's link. A subscription's period is kept for its payload,
    /// and a later invoice of the same payload (a link without the period, or a `sendInvoice`)
    /// makes it a one-off again: a checkout pays what the payload's latest invoice sells.
    pub(crate) fn link(&mut self, invoice: &Invoice) -> String {
        self.invoiced(invoice);
        invoice.link()
    }

    /// Notes what `invoice` sells under its payload.
    pub(crate) fn invoiced(&mut self, invoice: &Invoice) {
        match invoice.period {
            Some(period) => self.subscriptions.insert(invoice.payload.clone(), period),
            None => self.subscriptions.remove(&invoice.payload),
        };
    }

    /// A user presses Pay on an invoice of `amount` Stars with `payload`: the query's id, which the
    /// bot's answer names, and the `pre_checkout_query` update Telegram sends the bot.
    pub(crate) fn checkout(
        &mut self,
        user: i64,
        payload: &str,
        amount: u32,
        at: Instant,
    ) -> (String, Value) {
        self.next_query += 1;
        let id = format!("fake-checkout-{}", self.next_query);
        self.queries.insert(
            id.clone(),
            Query {
                user,
                amount,
                payload: payload.to_owned(),
                asked: at,
                period: self.subscriptions.get(payload).copied(),
            },
        );
        let update = json!({
            "pre_checkout_query": {
                "id": id,
                "from": objects::user(user),
                "currency": STARS,
                "total_amount": amount,
                "invoice_payload": payload,
            }
        });
        (id, update)
    }

    /// `answerPreCheckoutQuery`: within the deadline, `ok` charges the user and gives the
    /// `successful_payment` notice to send the bot; a refusal must say why. A query is answered
    /// once; a late answer is refused and charges nobody.
    pub(crate) fn answer(
        &mut self,
        params: &Params,
        at: Instant,
    ) -> Result<Option<Notice>, ApiError> {
        let id = params.str("pre_checkout_query_id").ok_or_else(|| {
            ApiError::bad_request("parameter \"pre_checkout_query_id\" is required")
        })?;
        if params.get("ok").is_none() {
            return Err(ApiError::bad_request("parameter \"ok\" is required"));
        }
        let ok = params.flag("ok");
        if !ok && params.str("error_message").is_none_or(str::is_empty) {
            return Err(ApiError::bad_request("ERROR_TEXT_EMPTY"));
        }
        let asked = self.queries.get(id).map(|query| query.asked);
        if asked.is_none_or(|asked| at.saturating_duration_since(asked) > PRE_CHECKOUT_DEADLINE) {
            self.queries.remove(id);
            return Err(ApiError::bad_request(QUERY_TOO_OLD));
        }
        let Some(query) = self.queries.remove(id).filter(|_| ok) else {
            return Ok(None);
        };
        let charge = Charge {
            id: format!("fake-charge-{}", self.charges.len() + 1),
            user: query.user,
            amount: query.amount,
            payload: query.payload,
            refunded: false,
            subscription: query.period.map(|period| Period {
                until: objects::unix_now() + i64::from(period),
                first: true,
            }),
        };
        let paid = notice(&charge, "successful_payment", true);
        self.transactions.push(Transaction {
            charge: self.charges.len(),
            refund: false,
            date: objects::unix_now(),
        });
        self.charges.push(charge);
        Ok(Some(paid))
    }

    /// Telegram renews the subscription that charge `id` paid a period of: a new charge for the
    /// period after the subscription's latest (renewing the same charge twice pays two periods,
    /// one after the other), made with no query (Telegram charges a renewal by itself), and its
    /// `successful_payment` notice. `None` when `id` is no subscription's charge.
    pub(crate) fn renew(&mut self, id: &str) -> Option<(String, Notice)> {
        let paid = self.charges.iter().find(|charge| charge.id == id)?;
        paid.subscription?;
        let period = self.subscriptions.get(&paid.payload).copied()?;
        let latest = self
            .charges
            .iter()
            .filter(|c| (c.user, &c.payload) == (paid.user, &paid.payload))
            .filter_map(|c| c.subscription)
            .map(|period| period.until)
            .max()?;
        let until = latest + i64::from(period);
        let charge = Charge {
            id: format!("fake-charge-{}", self.charges.len() + 1),
            subscription: Some(Period {
                until,
                first: false,
            }),
            refunded: false,
            ..paid.clone()
        };
        let notice = notice(&charge, "successful_payment", true);
        self.transactions.push(Transaction {
            charge: self.charges.len(),
            refund: false,
            date: objects::unix_now(),
        });
        let id = charge.id.clone();
        self.charges.push(charge);
        Some((id, notice))
    }

    /// `refundStarPayment`: gives a charge's Stars back to the user who paid, once, with the
    /// `refunded_payment` notice to send the bot. A charge the fake never made (or another user's)
    /// is refused `CHARGE_NOT_FOUND`, the fake's wording.
    pub(crate) fn refund(&mut self, params: &Params) -> Result<Notice, ApiError> {
        let user = params
            .int("user_id")
            .ok_or_else(|| ApiError::bad_request("invalid user_id specified"))?;
        let id = params
            .str("telegram_payment_charge_id")
            .filter(|id| !id.is_empty())
            .ok_or_else(|| ApiError::bad_request("CHARGE_ID_EMPTY"))?;
        let Some(index) = self
            .charges
            .iter()
            .position(|charge| charge.id == id && charge.user == user)
        else {
            return Err(ApiError::bad_request("CHARGE_NOT_FOUND"));
        };
        let charge = &mut self.charges[index];
        if charge.refunded {
            return Err(ApiError::bad_request("CHARGE_ALREADY_REFUNDED"));
        }
        charge.refunded = true;
        self.transactions.push(Transaction {
            charge: index,
            refund: true,
            date: objects::unix_now(),
        });
        Ok(notice(charge, "refunded_payment", false))
    }

    /// `getStarTransactions`: the bot's transactions, oldest first, from `offset`, at most `limit`.
    pub(crate) fn transactions(&self, params: &Params) -> Value {
        let offset = usize::try_from(params.int("offset").unwrap_or(0)).unwrap_or(0);
        let limit = usize::try_from(params.int("limit").unwrap_or(100))
            .unwrap_or(MAX_TRANSACTIONS)
            .clamp(1, MAX_TRANSACTIONS);
        let listed: Vec<Value> = self
            .transactions
            .iter()
            .skip(offset)
            .take(limit)
            .map(|transaction| {
                let charge = &self.charges[transaction.charge];
                let mut partner = json!({
                    "type": "user",
                    "transaction_type": "invoice_payment",
                    "user": objects::user(charge.user),
                    "invoice_payload": charge.payload,
                });
                if charge.subscription.is_some() {
                    partner["subscription_period"] = self.subscriptions[&charge.payload].into();
                }
                let side = if transaction.refund {
                    "receiver"
                } else {
                    "source"
                };
                json!({
                    "id": charge.id,
                    "amount": charge.amount,
                    "date": transaction.date,
                    side: partner,
                })
            })
            .collect();
        json!({ "transactions": listed })
    }

    /// Every charge made so far, in order.
    pub(crate) fn charges(&self) -> &[Charge] {
        &self.charges
    }
}

/// A service message to send the bot, in the user's private chat: a payment, or its refund.
#[derive(Debug)]
pub(crate) struct Notice {
    /// The user, whose private chat it is in.
    pub(crate) user: i64,
    /// `successful_payment` or `refunded_payment`, and what it holds.
    pub(crate) content: Content,
}

/// The notice of a payment (`successful_payment`) or of its refund (`refunded_payment`).
fn notice(charge: &Charge, field: &str, with_provider_id: bool) -> Notice {
    let mut payment = json!({
        "currency": STARS,
        "total_amount": charge.amount,
        "invoice_payload": charge.payload,
        "telegram_payment_charge_id": charge.id,
    });
    if with_provider_id {
        // Stars have no provider; Telegram sends the field empty.
        payment["provider_payment_charge_id"] = "".into();
    }
    if let Some(period) = charge.subscription.filter(|_| with_provider_id) {
        payment["subscription_expiration_date"] = period.until.into();
        payment["is_recurring"] = true.into();
        payment["is_first_recurring"] = period.first.into();
    }
    let mut content = Content::new();
    content.insert(field.to_owned(), payment);
    Notice {
        user: charge.user,
        content,
    }
}
