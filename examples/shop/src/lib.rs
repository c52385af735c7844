//! A shop selling gems for Telegram Stars: `/buy` sends an invoice, a payment is credited once per
//! charge (however often it is delivered), `/balance` shows the gems, `/refund` gives back the
//! latest gem's Stars, asked of Telegram at most once.
use serde::{Deserialize, Serialize};
use tgq::payloads::{AnswerPreCheckoutQuery, SendInvoice};
use tgq::prelude::*;
use tgq::types::LabeledPrice;
use tgq::Refund;

/// What one gem costs, in Stars.
pub const GEM_STARS: u32 = 50;
/// The invoice's payload: what is sold.
pub const GEM: &str = "gem";

/// My commands:
#[derive(BotCommands, Clone)]
#[command(rename_rule = "lowercase")]
pub enum Command {
    /// Buys a gem for 50 Stars.
    Buy,
    /// Shows your gems.
    Balance,
    /// Gives back the Stars of your latest gem.
    Refund,
}

/// A user's wallet, in their private chat: the charges of the gems they hold, oldest first.
#[derive(Default, Serialize, Deserialize)]
pub struct Wallet {
    pub gems: Vec<String>,
}

impl ChatState for Wallet {
    const FORMAT: &'static str = "shop.wallet/v1";
}

pub fn handlers() -> HandlerRegistry {
    HandlerRegistry::new().with_handler("shop", Shop(Router::new()))
}

pub struct Shop(Router<Command>);

#[async_trait]
impl Handler for Shop {
    async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        let mut wallet: Wallet = ctx.state()?.unwrap_or_default();
        match self.0.route(&update) {
            // Telegram waits 10 s for this answer; tgq refuses for the bot if it cannot give it.
            Route::PreCheckout(query) => {
                let ok = query.invoice_payload == GEM && query.total_amount == GEM_STARS;
                let mut answer = AnswerPreCheckoutQuery::new(query.id.clone(), ok);
                if !ok {
                    answer.error_message = Some("This is not for sale.".into());
                }
                ctx.send(answer).await?;
                return Ok(());
            }
            Route::Command(Command::Buy, m) => {
                let price = LabeledPrice::new("Gem", GEM_STARS);
                let invoice =
                    SendInvoice::new(m.chat.id, "Gem", "One shiny gem", GEM, "XTR", [price]);
                ctx.send(invoice).await?;
                return Ok(());
            }
            Route::Command(Command::Balance, m) => {
                let gems = wallet.gems.len();
                ctx.reply(m, format!("You have {gems} gems.")).await?;
                return Ok(());
            }
            Route::Command(Command::Refund, m) => {
                let (Some(charge), Some(user)) = (wallet.gems.pop(), m.from.as_ref()) else {
                    ctx.reply(m, "Nothing to refund.").await?;
                    return Ok(());
                };
                // Asked of Telegram at most once, and marked on the charge in the ledger.
                let said = match ctx.refund(user.id, &charge).await? {
                    Refund::Refunded => format!("Refunded {GEM_STARS} Stars."),
                    Refund::Already => "That gem was refunded already.".to_owned(),
                    Refund::Uncertain => {
                        "Your refund is on its way; /balance in a while.".to_owned()
                    }
                };
                ctx.reply(m, said).await?;
            }
            Route::Other(UpdateKind::Message(m)) => {
                let Some(payment) = m.successful_payment() else {
                    return Ok(());
                };
                // Once per charge: a payment delivered again, or replayed, credits nothing.
                if !ctx.credit(payment)?.is_new() {
                    return Ok(());
                }
                wallet
                    .gems
                    .push(payment.telegram_payment_charge_id.0.clone());
                let gems = wallet.gems.len();
                ctx.reply(m, format!("Thank you! You have {gems} gems."))
                    .await?;
            }
            Route::BadCommand(_, m) => {
                ctx.reply(m, Command::descriptions().to_string()).await?;
                return Ok(());
            }
            _ => return Ok(()),
        }
        ctx.set_state(&wallet)
    }
}
