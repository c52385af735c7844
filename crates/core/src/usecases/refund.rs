//! An operator's refund of one charge (docs/design/payments.md §3): `tgq payments refund`, the same
//! on a stack and locally. It asks Telegram (`refundStarPayment`) only for a charge the ledger holds
//! and does not know refunded, marks the entry once Telegram has given the Stars back, and audits
//! every call: an entry written before the call (no call without it), and one with the outcome.
//!
//! A refund is safe to ask again: Telegram gives a charge's Stars back once and answers
//! `CHARGE_ALREADY_REFUNDED` after that, which marks the entry as a refund made. So a call whose
//! answer was lost is reported as such, and running the command again settles it.

use std::sync::Arc;
use std::time::Duration;

use teloxide_core::payloads::RefundStarPayment;
use teloxide_core::requests::Payload;
use teloxide_core::types::{TelegramTransactionId, UserId};

use crate::audit::{AuditAction, AuditEntry, AuditLog};
use crate::clock::Clock;
use crate::error::PortError;
use crate::ids::BotId;
use crate::payment::{Charge, ChargeWrite};
use crate::ports::ChargeBook;
use crate::record::Timestamp;
use crate::telegram::{method_name, ApiCall, BotApi, CallError, TelegramError};

/// What a refund needs of the world.
#[derive(Clone)]
pub struct RefundPorts {
    /// The payments ledger.
    pub book: Arc<dyn ChargeBook>,
    /// Where the refund is audited.
    pub audit: Arc<dyn AuditLog>,
    /// The Bot API of the charge's bot, with its token.
    pub telegram: Arc<dyn BotApi>,
    /// Tells the time.
    pub clock: Arc<dyn Clock>,
}

/// One refund an operator asked for.
#[derive(Clone, Debug)]
pub struct RefundRequest {
    /// The charge's bot.
    pub bot: BotId,
    /// The charge's `telegram_payment_charge_id`.
    pub charge: String,
    /// Who asked, written into the audit entry.
    pub principal: String,
    /// How long the audit entry is kept: as long as records.
    pub audit_ttl: Duration,
}

/// A refund done: the entry as the ledger now holds it, marked refunded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refunded {
    /// The entry, marked refunded.
    pub charge: Charge,
    /// Whether Telegram had given the Stars back before this call (`CHARGE_ALREADY_REFUNDED`): a
    /// refund made earlier outside tgq's ledger, or one whose answer was lost.
    pub before: bool,
}

/// Why a refund was not done.
#[derive(Debug, thiserror::Error)]
pub enum RefundError {
    /// The ledger holds no such charge: nothing was asked of Telegram.
    #[error("no charge {charge:?} of bot {bot} in the payments ledger; nothing was refunded")]
    Unknown {
        /// The bot.
        bot: BotId,
        /// The charge id asked for.
        charge: String,
    },
    /// The ledger knows the charge refunded: nothing was asked of Telegram.
    #[error("the charge {charge:?} is refunded already, as the ledger shows; nothing was asked of Telegram")]
    AlreadyRefunded {
        /// The charge id.
        charge: String,
        /// When the ledger learnt it.
        at: Timestamp,
    },
    /// Telegram refused the refund or was not reached: nothing changed, in Telegram or the ledger.
    #[error("Telegram did not refund the charge {charge:?}, and nothing changed: {error}")]
    NotDone {
        /// The charge id.
        charge: String,
        /// Telegram's answer, or why it was not reached.
        error: TelegramError,
    },
    /// The call may have reached Telegram and its answer was lost: the Stars may have been given
    /// back. Asking again is safe, and settles it.
    #[error(
        "the refund of the charge {charge:?} may have been made, its answer was lost ({error}); \
         run the refund again: Telegram refunds a charge once, and the ledger is marked then"
    )]
    Uncertain {
        /// The charge id.
        charge: String,
        /// What became of the call.
        error: TelegramError,
    },
    /// Telegram gave the Stars back and the ledger could not be marked: the refund is made, and
    /// running the command again marks it.
    #[error(
        "Telegram refunded the charge {charge:?}, but the ledger was not marked ({error}); run \
         the refund again to mark it (Telegram will not refund it twice)"
    )]
    Unmarked {
        /// The charge id.
        charge: String,
        /// The store's error.
        error: PortError,
    },
    /// The ledger could not be read, or the audit entry of the call written, before Telegram was
    /// asked: nothing was asked.
    #[error(transparent)]
    Store(#[from] PortError),
}

/// Refunds charge `request.charge` of `request.bot`: reads its entry, asks Telegram unless the
/// ledger knows it refunded, marks the entry refunded once Telegram has, and audits the call.
pub async fn refund_charge(
    ports: &RefundPorts,
    request: &RefundRequest,
) -> Result<Refunded, RefundError> {
    let Some(entry) = ports.book.entry(&request.bot, &request.charge).await? else {
        return Err(RefundError::Unknown {
            bot: request.bot.clone(),
            charge: request.charge.clone(),
        });
    };
    if let Some(at) = entry.refunded_at {
        return Err(RefundError::AlreadyRefunded {
            charge: entry.id,
            at,
        });
    }
    // Audited before the call: a command killed while Telegram answers leaves the call on record.
    audit(ports, request, &entry, "asking Telegram to refund").await?;
    let answer = ask_telegram(ports.telegram.as_ref(), &entry).await;
    let charge = entry.id.clone();
    let done = match answer {
        Ok(()) => Ok(false),
        Err(TelegramError::Api { description, .. })
            if description.contains("CHARGE_ALREADY_REFUNDED") =>
        {
            Ok(true)
        }
        Err(error) if error.is_definite() => Err(RefundError::NotDone { charge, error }),
        Err(error) => Err(RefundError::Uncertain { charge, error }),
    };
    let now = ports.clock.now();
    let result = match done {
        Ok(before) => mark(ports.book.as_ref(), &request.bot, &entry, now)
            .await
            .map(|charge| Refunded { charge, before }),
        Err(refused) => Err(refused),
    };
    let outcome = match &result {
        Ok(Refunded { before: false, .. }) => "refunded".to_owned(),
        Ok(Refunded { before: true, .. }) => "refunded before (CHARGE_ALREADY_REFUNDED)".to_owned(),
        Err(RefundError::NotDone { error, .. }) => format!("not refunded: {error}"),
        Err(RefundError::Uncertain { error, .. }) => format!("unknown, answer lost: {error}"),
        Err(RefundError::Unmarked { error, .. }) => format!("refunded, ledger not marked: {error}"),
        Err(other) => format!("failed: {other}"),
    };
    if let Err(error) = audit(ports, request, &entry, &outcome).await {
        tracing::warn!(bot_id = %request.bot, error = %error, "a refund's outcome could not be audited");
    }
    result
}

/// Appends the audit entry of `entry`'s refund with `outcome`.
async fn audit(
    ports: &RefundPorts,
    request: &RefundRequest,
    entry: &Charge,
    outcome: &str,
) -> Result<(), PortError> {
    let now = ports.clock.now();
    ports
        .audit
        .append(&AuditEntry {
            at: now,
            principal: request.principal.clone(),
            action: AuditAction::Refund,
            bot_id: request.bot.clone(),
            update_id: Some(crate::ids::UpdateId(entry.update_id)),
            letter_id: None,
            outcome: format!(
                "charge {} of user {}, {} Stars: {outcome}",
                entry.id, entry.user, entry.stars
            ),
            expires_at: now.plus(request.audit_ttl),
        })
        .await
}

/// Calls `refundStarPayment` for `entry`.
async fn ask_telegram(telegram: &dyn BotApi, entry: &Charge) -> Result<(), TelegramError> {
    let payload = RefundStarPayment::new(
        UserId(entry.user.unsigned_abs()),
        TelegramTransactionId(entry.id.clone()),
    );
    let params =
        serde_json::to_value(&payload).map_err(|e| TelegramError::NotSent(e.to_string()))?;
    let method = method_name(RefundStarPayment::NAME);
    match telegram.call(&ApiCall::plain(&method, &params)).await {
        Ok(_) => Ok(()),
        Err(CallError::Telegram(error)) => Err(error),
        // A Bot API that records its calls itself (the offline outbox) is not Telegram: the
        // caller refuses a bot without a token before this.
        Err(CallError::Store(error)) => Err(TelegramError::NotSent(error.to_string())),
    }
}

/// Marks `entry` refunded at `now`; an entry a `refunded_payment` update marked meanwhile is
/// taken as it is.
async fn mark(
    book: &dyn ChargeBook,
    bot: &BotId,
    entry: &Charge,
    now: Timestamp,
) -> Result<Charge, RefundError> {
    let unmarked = |error| RefundError::Unmarked {
        charge: entry.id.clone(),
        error,
    };
    let Some(write) = ChargeWrite::refund(entry, now) else {
        return Ok(entry.clone());
    };
    match book.write_charge(bot, &write).await {
        Ok(()) => Ok(write.entry),
        Err(PortError::Credited { .. }) => book
            .entry(bot, &entry.id)
            .await
            .map_err(unmarked)?
            .ok_or_else(|| {
                unmarked(PortError::rejected(
                    "ledger refund",
                    "the entry is gone from the ledger",
                ))
            }),
        Err(error) => Err(unmarked(error)),
    }
}
