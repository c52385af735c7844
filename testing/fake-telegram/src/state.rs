//! Everything the fake remembers, and how one call is answered and recorded.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::chats::{Chats, Target};
use crate::checks;
use crate::config::FakeConfig;
use crate::envelope::{Answer, ApiError};
use crate::fault::{Effect, Faults, Scope};
use crate::limiter::RateLimiter;
use crate::objects::{self, Content};
use crate::params::{ChatParam, Params};
use crate::payments::{Charge, Invoice, Notice, Payments};
use crate::updates::Updates;
use crate::watch::{FloodScope, Violations, Watch};

/// `getUpdates`' default and largest `limit`.
const MAX_UPDATES: i64 = 100;

/// One call as the fake received and answered it.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedCall {
    /// Arrival order, starting at 1.
    pub seq: u64,
    /// The bot token in the call's URL: which bot called, when the fake serves several.
    pub token: String,
    /// The method name as the client spelled it in the URL.
    pub method: String,
    /// The numeric `chat_id` parameter; `None` when absent or given as `@username`.
    pub chat_id: Option<i64>,
    /// Query-string and body parameters merged into one JSON object.
    pub params: Value,
    /// The HTTP status answered, which is also the envelope's `error_code` on failure.
    pub status: u16,
    /// For answered calls, the message the call created (sends) or touched (edits, deletes).
    pub message_id: Option<i64>,
    /// When the call arrived.
    pub at: Instant,
}

impl RecordedCall {
    /// Whether the call was answered `ok: true`.
    pub fn is_delivered(&self) -> bool {
        self.status == 200
    }
}

/// How the server should answer a call.
pub(crate) enum Reply {
    Now(Answer),
    /// A [`Fault::Timeout`](crate::Fault::Timeout): the answer is held back this long.
    Delayed(Duration, Answer),
    /// `getUpdates`: answer with up to `limit` queued updates, waiting up to `wait` for one.
    Poll {
        limit: usize,
        wait: Duration,
    },
}

/// The Bot API methods the fake answers; Telegram matches method names case-insensitively.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    GetMe,
    GetFile,
    SetWebhook,
    DeleteWebhook,
    GetWebhookInfo,
    SendMessage,
    SendPhoto,
    SendDocument,
    SendAudio,
    SendVideo,
    SendMediaGroup,
    EditMessageText,
    CopyMessage,
    ForwardMessage,
    SendChatAction,
    AnswerCallbackQuery,
    AnswerInlineQuery,
    DeleteMessage,
    GetChat,
    SetMyCommands,
    SendInvoice,
    CreateInvoiceLink,
    AnswerPreCheckoutQuery,
    RefundStarPayment,
    GetStarTransactions,
}

impl Method {
    const ALL: [(&'static str, Method); 25] = [
        ("getMe", Self::GetMe),
        ("getFile", Self::GetFile),
        ("setWebhook", Self::SetWebhook),
        ("deleteWebhook", Self::DeleteWebhook),
        ("getWebhookInfo", Self::GetWebhookInfo),
        ("sendMessage", Self::SendMessage),
        ("sendPhoto", Self::SendPhoto),
        ("sendDocument", Self::SendDocument),
        ("sendAudio", Self::SendAudio),
        ("sendVideo", Self::SendVideo),
        ("sendMediaGroup", Self::SendMediaGroup),
        ("editMessageText", Self::EditMessageText),
        ("copyMessage", Self::CopyMessage),
        ("forwardMessage", Self::ForwardMessage),
        ("sendChatAction", Self::SendChatAction),
        ("answerCallbackQuery", Self::AnswerCallbackQuery),
        ("answerInlineQuery", Self::AnswerInlineQuery),
        ("deleteMessage", Self::DeleteMessage),
        ("getChat", Self::GetChat),
        ("setMyCommands", Self::SetMyCommands),
        ("sendInvoice", Self::SendInvoice),
        ("createInvoiceLink", Self::CreateInvoiceLink),
        ("answerPreCheckoutQuery", Self::AnswerPreCheckoutQuery),
        ("refundStarPayment", Self::RefundStarPayment),
        ("getStarTransactions", Self::GetStarTransactions),
    ];

    fn parse(name: &str) -> Option<Self> {
        Self::ALL
            .iter()
            .find(|(known, _)| known.eq_ignore_ascii_case(name))
            .map(|(_, method)| *method)
    }

    /// Bot setup calls are spared so that a test's faults only hit the traffic under test.
    fn accepts_faults(self) -> bool {
        !matches!(
            self,
            Self::GetMe
                | Self::SetWebhook
                | Self::DeleteWebhook
                | Self::GetWebhookInfo
                | Self::SetMyCommands
        )
    }
}

/// The message a `forwardMessage` or `copyMessage` call points at.
struct Original {
    source: Target,
    message_id: i64,
    /// What it said, when the bot sent it through this fake.
    content: Option<Content>,
}

/// The fake's whole memory, behind the server's one lock.
#[derive(Debug)]
pub(crate) struct State {
    /// The tokens accepted: the configured one first, then any added for more bots.
    tokens: Vec<String>,
    bot_id: i64,
    calls: Vec<RecordedCall>,
    pub(crate) faults: Faults,
    limiter: Option<RateLimiter>,
    chats: Chats,
    pub(crate) updates: Updates,
    pub(crate) webhook_url: Option<String>,
    /// How long a long poll may wait, whatever `timeout` it asked for.
    long_poll_cap: Duration,
    watch: Watch,
    /// Files a bot can download, by file id (`getFile`, then `/file/bot<token>/files/<id>`).
    pub(crate) files: std::collections::HashMap<String, bytes::Bytes>,
    payments: Payments,
    /// Whether a user pays every invoice the bot sends to their private chat, at once.
    pay_invoices: bool,
}

impl State {
    pub(crate) fn new(config: &FakeConfig) -> Self {
        Self {
            tokens: vec![config.token.clone()],
            bot_id: bot_id(&config.token),
            calls: Vec::new(),
            faults: Faults::default(),
            limiter: config.limits.map(RateLimiter::new),
            chats: Chats::default(),
            updates: Updates::default(),
            webhook_url: None,
            long_poll_cap: config.long_poll_cap,
            watch: Watch::default(),
            files: std::collections::HashMap::new(),
            payments: Payments::default(),
            pay_invoices: config.pay_invoices,
        }
    }

    /// A user presses Pay on an invoice: queues the bot's pre-checkout query; returns its id.
    pub(crate) fn checkout(&mut self, user: i64, payload: &str, stars: u32, at: Instant) -> String {
        let (id, update) = self.payments.checkout(user, payload, stars, at);
        self.updates.push(update);
        id
    }

    /// Renews the subscription charge `id` paid a period of; the new charge's id.
    pub(crate) fn renew(&mut self, id: &str) -> Option<String> {
        let (renewed, notice) = self.payments.renew(id)?;
        self.notify(notice);
        Some(renewed)
    }

    /// Every charge made so far.
    pub(crate) fn charges(&self) -> &[Charge] {
        self.payments.charges()
    }

    /// Queues the message a payment or a refund shows in the user's private chat.
    fn notify(&mut self, notice: Notice) {
        let chat = Target {
            id: notice.user,
            username: None,
        };
        let id = self.chats.next_message_id(notice.user);
        let mut message = objects::message(self.bot_id, &chat, id, &notice.content, None);
        message["from"] = objects::user(notice.user);
        self.updates.push(json!({ "message": message }));
    }

    pub(crate) fn calls(&self) -> &[RecordedCall] {
        &self.calls
    }

    /// Decides the answer to one call and records the call, whether it is refused or not.
    pub(crate) fn receive(
        &mut self,
        token: &str,
        method: &str,
        params: Result<Params, ApiError>,
        at: Instant,
    ) -> Reply {
        let (params, reply) = match params {
            Ok(params) => {
                let reply = self.decide(token, method, &params, at);
                (params, reply)
            }
            Err(unreadable) => (Params::default(), Reply::Now(unreadable.into())),
        };
        self.record(token, method, params, &reply, at);
        reply
    }

    /// Accepts calls with `token` too: the fake then plays Telegram for another bot as well,
    /// recording each call's token. The bots share everything else (chats, faults, limits).
    pub(crate) fn accept_token(&mut self, token: &str) {
        if !self.tokens.iter().any(|known| known == token) {
            self.tokens.push(token.to_owned());
        }
    }

    /// Whether `token` is one of the bots it serves.
    pub(crate) fn accepts(&self, token: &str) -> bool {
        self.tokens.iter().any(|known| known == token)
    }

    fn decide(&mut self, token: &str, method: &str, params: &Params, at: Instant) -> Reply {
        if !self.accepts(token) {
            return Reply::Now(ApiError::unauthorized().into());
        }
        if method.eq_ignore_ascii_case("getUpdates") {
            return self.get_updates(params);
        }
        let Some(method) = Method::parse(method) else {
            return Reply::Now(ApiError::not_found().into());
        };
        let chat = params.chat().id();
        let fault = if method.accepts_faults() {
            self.watch.arrive(chat, at);
            self.faults.take_scoped(chat)
        } else {
            None
        };
        let delay = match fault.map(|(fault, scope)| (fault.effect(), scope)) {
            Some((Effect::Refuse(error), scope)) => {
                if let Some(seconds) = error.retry_after() {
                    let scope = match scope {
                        Scope::Chat(chat) => FloodScope::Chat(chat),
                        Scope::Global => FloodScope::Bot,
                    };
                    self.watch.asked_to_wait(scope, seconds, at);
                }
                return Reply::Now(error.into());
            }
            Some((Effect::Delay(delay), _)) => Some(delay),
            None => None,
        };
        let answer = Answer::from(self.perform(method, params, at));
        match delay {
            Some(delay) => Reply::Delayed(delay, answer),
            None => Reply::Now(answer),
        }
    }

    fn record(&mut self, token: &str, method: &str, params: Params, reply: &Reply, at: Instant) {
        let (status, message_id) = match reply {
            Reply::Now(answer) | Reply::Delayed(_, answer) => (
                answer.status,
                answer
                    .result()
                    .and_then(|result| touched_message(result, &params)),
            ),
            Reply::Poll { .. } => (200, None),
        };
        tracing::debug!(method, status, "fake telegram answered a call");
        self.calls.push(RecordedCall {
            seq: self.calls.len() as u64 + 1,
            token: token.to_owned(),
            method: method.to_owned(),
            chat_id: params.chat().id(),
            params: params.into_value(),
            status,
            message_id,
            at,
        });
    }

    fn perform(&mut self, method: Method, params: &Params, at: Instant) -> Result<Value, ApiError> {
        match method {
            Method::GetMe => Ok(objects::me(self.bot_id)),
            Method::GetFile => {
                let id = params.str("file_id").unwrap_or_default();
                match self.files.get(id) {
                    Some(bytes) => Ok(serde_json::json!({
                        "file_id": id, "file_unique_id": format!("u-{id}"),
                        "file_size": bytes.len(), "file_path": format!("files/{id}"),
                    })),
                    None => Err(ApiError::bad_request("Bad Request: invalid file_id")),
                }
            }
            Method::SetWebhook => {
                let url = params.str("url").filter(|url| !url.is_empty());
                // Telegram resolves the webhook's host when it is set; `.invalid` never resolves
                // (RFC 2606), which lets a test see setWebhook refused.
                if url.is_some_and(unresolvable) {
                    return Err(ApiError::bad_request(
                        "bad webhook: Failed to resolve host: Name or service not known",
                    ));
                }
                Ok(self.set_webhook(url, params))
            }
            Method::DeleteWebhook => Ok(self.set_webhook(None, params)),
            Method::GetWebhookInfo => Ok(objects::webhook_info(
                self.webhook_url.as_deref(),
                self.updates.len(),
            )),
            // Answers to a query send no message: they count against no rate limit.
            Method::AnswerCallbackQuery => Ok(true.into()),
            Method::AnswerInlineQuery => {
                checks::query_id(params, "inline_query_id")?;
                checks::inline_query_results(params)?;
                Ok(true.into())
            }
            Method::SetMyCommands => {
                checks::bot_commands(params)?;
                Ok(true.into())
            }
            Method::GetChat => {
                let chat = self.chats.resolve(params.chat())?;
                Ok(objects::chat_full_info(&chat))
            }
            Method::SendChatAction | Method::DeleteMessage => {
                self.chats.resolve(params.chat()).map(|_| true.into())
            }
            Method::SendMessage => {
                let content = objects::text_content(params)?;
                self.send(params, content, at)
            }
            Method::SendPhoto => {
                let file_id = self.chats.next_file_id();
                let content = objects::photo_content(params, &file_id)?;
                self.send(params, content, at)
            }
            Method::SendDocument => {
                let file_id = self.chats.next_file_id();
                let content = objects::document_content(params, &file_id)?;
                self.send(params, content, at)
            }
            Method::SendAudio | Method::SendVideo => {
                let kind = if method == Method::SendAudio {
                    "audio"
                } else {
                    "video"
                };
                let file_id = self.chats.next_file_id();
                let content = objects::media_content(params, kind, &file_id)?;
                self.send(params, content, at)
            }
            Method::SendInvoice => {
                let invoice = Invoice::read(params)?;
                self.payments.invoiced(&invoice);
                let message = self.send(params, invoice.content(params), at)?;
                let user = message["chat"]["id"].as_i64().filter(|id| *id > 0);
                if let Some(user) = user.filter(|_| self.pay_invoices) {
                    let (payload, stars) = invoice.checkout();
                    self.checkout(user, payload, stars, at);
                }
                Ok(message)
            }
            Method::CreateInvoiceLink => {
                let invoice = Invoice::read_link(params)?;
                Ok(self.payments.link(&invoice).into())
            }
            Method::AnswerPreCheckoutQuery => {
                if let Some(paid) = self.payments.answer(params, at)? {
                    self.notify(paid);
                }
                Ok(true.into())
            }
            Method::RefundStarPayment => {
                let refunded = self.payments.refund(params)?;
                self.notify(refunded);
                Ok(true.into())
            }
            Method::GetStarTransactions => Ok(self.payments.transactions(params)),
            Method::SendMediaGroup => self.send_media_group(params, at),
            Method::ForwardMessage => self.forward(params, at),
            Method::CopyMessage => self.copy(params, at),
            Method::EditMessageText => self.edit_text(params, at),
        }
    }

    fn set_webhook(&mut self, url: Option<&str>, params: &Params) -> Value {
        self.webhook_url = url.map(str::to_owned);
        if params.flag("drop_pending_updates") {
            self.updates.clear();
        }
        true.into()
    }

    /// Delivers a new message to the call's chat, if the rate limits allow it.
    fn send(&mut self, params: &Params, content: Content, at: Instant) -> Result<Value, ApiError> {
        let chat = self.chats.resolve(params.chat())?;
        self.admit(chat.id, params.flag("allow_paid_broadcast"), at)?;
        let message_id = self.chats.next_message_id(chat.id);
        self.chats.remember(chat.id, message_id, &content);
        Ok(objects::message(
            self.bot_id,
            &chat,
            message_id,
            &content,
            params.get("reply_markup"),
        ))
    }

    /// Delivers each item of `media` as a message of its own, in order, as Telegram does an album
    /// of 2 to 10 items.
    fn send_media_group(&mut self, params: &Params, at: Instant) -> Result<Value, ApiError> {
        let items = params
            .get("media")
            .and_then(Value::as_array)
            .filter(|items| (2..=10).contains(&items.len()))
            .cloned()
            .ok_or_else(|| ApiError::bad_request("media must hold 2 to 10 items"))?;
        let mut sent = Vec::new();
        for item in items {
            let kind = item["type"].as_str().unwrap_or_default();
            if !matches!(kind, "photo" | "video" | "audio" | "document") {
                return Err(ApiError::bad_request("unsupported media type in the group"));
            }
            let file_id = self.chats.next_file_id();
            let content = objects::media_content(&Params::item(&item), kind, &file_id)?;
            sent.push(self.send(params, content, at)?);
        }
        Ok(Value::Array(sent))
    }

    fn forward(&mut self, params: &Params, at: Instant) -> Result<Value, ApiError> {
        let original = self.original(params)?;
        let origin = objects::forward_origin(
            self.bot_id,
            &original.source,
            original.message_id,
            original.content.is_some(),
        );
        let mut content = original
            .content
            .unwrap_or_else(|| objects::unknown_content(original.message_id));
        // A forwarded forward keeps the first origin, as in Telegram.
        content.entry("forward_origin").or_insert(origin);
        self.send(params, content, at)
    }

    /// Copies a message without a link to the original; Telegram answers only the new id.
    fn copy(&mut self, params: &Params, at: Instant) -> Result<Value, ApiError> {
        let original = self.original(params)?;
        let mut content = original
            .content
            .unwrap_or_else(|| objects::unknown_content(original.message_id));
        content.remove("forward_origin");
        if let Some(caption) = params.get("caption") {
            content.insert("caption".to_owned(), caption.clone());
        }
        let message = self.send(params, content, at)?;
        Ok(json!({ "message_id": message["message_id"] }))
    }

    fn original(&mut self, params: &Params) -> Result<Original, ApiError> {
        let source = self.chats.resolve(params.chat_at("from_chat_id"))?;
        let message_id = params
            .int("message_id")
            .ok_or_else(|| ApiError::bad_request("message identifier is not specified"))?;
        let content = self.chats.content(source.id, message_id).cloned();
        Ok(Original {
            source,
            message_id,
            content,
        })
    }

    /// Replaces a message's text; inline messages (no chat) are answered `true`, as Telegram does.
    fn edit_text(&mut self, params: &Params, at: Instant) -> Result<Value, ApiError> {
        let content = objects::text_content(params)?;
        let chat = params.chat();
        if chat == ChatParam::Missing && params.get("inline_message_id").is_some() {
            return Ok(true.into());
        }
        let chat = self.chats.resolve(chat)?;
        let message_id = params
            .int("message_id")
            .ok_or_else(|| ApiError::bad_request("message identifier is not specified"))?;
        self.admit(chat.id, false, at)?;
        self.chats.remember(chat.id, message_id, &content);
        let mut message = objects::message(
            self.bot_id,
            &chat,
            message_id,
            &content,
            params.get("reply_markup"),
        );
        message["edit_date"] = objects::unix_now().into();
        Ok(message)
    }

    fn admit(&mut self, chat: i64, paid: bool, at: Instant) -> Result<(), ApiError> {
        let admitted = match &mut self.limiter {
            Some(limiter) => limiter.admit(chat, paid, at),
            None => Ok(()),
        };
        if let Err(refusal) = &admitted {
            self.watch.over_limit();
            if let Some(seconds) = refusal.retry_after() {
                self.watch
                    .asked_to_wait(FloodScope::Chat(chat), seconds, at);
            }
        }
        admitted
    }

    /// What the drill counts beyond the calls.
    pub(crate) fn violations(&self) -> Violations {
        self.watch.counts()
    }

    /// Notes that the answer to call `seq` never reached its client.
    pub(crate) fn unanswered(&mut self, seq: u64) {
        self.watch.unanswered(seq);
    }

    fn get_updates(&mut self, params: &Params) -> Reply {
        if self.webhook_url.is_some() {
            return Reply::Now(ApiError::webhook_active().into());
        }
        if let Some(offset) = params.int("offset") {
            self.updates.confirm(offset);
        }
        let limit = params
            .int("limit")
            .map_or(MAX_UPDATES, |limit| limit.clamp(1, MAX_UPDATES));
        let wait = match params.int("timeout") {
            // The client's timeout is honoured, as Telegram does; the cap only shortens it.
            Some(timeout) if timeout > 0 => self
                .long_poll_cap
                .min(Duration::from_secs(u64::try_from(timeout).unwrap_or(0))),
            _ => Duration::ZERO,
        };
        Reply::Poll {
            limit: usize::try_from(limit).unwrap_or(1),
            wait,
        }
    }
}

/// Whether a webhook URL's host is under `.invalid`, which no resolver answers.
fn unresolvable(url: &str) -> bool {
    let host = url
        .split_once("://")
        .map_or(url, |(_, rest)| rest)
        .split(['/', ':', '?'])
        .next()
        .unwrap_or_default();
    host.ends_with(".invalid")
}

/// Real tokens start with the bot's user id; a token that does not is given id 1.
fn bot_id(token: &str) -> i64 {
    token
        .split(':')
        .next()
        .and_then(|prefix| prefix.parse().ok())
        .unwrap_or(1)
}

/// The message an answered call created or touched: the result's own id, else the one it named.
fn touched_message(result: &Value, params: &Params) -> Option<i64> {
    result
        .get("message_id")
        .and_then(Value::as_i64)
        .or_else(|| params.int("message_id"))
}
