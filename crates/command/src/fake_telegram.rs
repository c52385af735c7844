//! `tgq fake-telegram`: the fake Bot API of the test suite (`tgq-fake-telegram`) as a server of its
//! own, for trying a bot by hand without Telegram and for LocalStack runs: it answers like
//! api.telegram.org, serves `getUpdates` from update files, injects the faults it is given, and
//! prints each call: its method, chat and status, and under it what the bot said — its text or
//! caption and its buttons (`--hide-text` leaves them out). These are the chats of a fake Telegram,
//! printed to the terminal that started it; nothing is logged.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use serde_json::Value;
use tgq_fake_telegram::{
    FakeConfig, FakeTelegram, Fault, Limits, RecordedCall, Scope, Times, DEFAULT_TOKEN,
};

/// How often new calls are printed.
const PRINT_EVERY: Duration = Duration::from_millis(200);

/// `tgq fake-telegram`.
#[derive(Debug, Args)]
#[command(after_help = "\
Faults (--fault, repeatable, used in the order given; a fault for a call's chat comes first):
  KIND[,chat=ID][,times=N|always]        default: any chat, once
  KIND: 500, 502, 503, 504 (server errors), 429:SECS (Too Many Requests, retry after SECS),
        timeout:MS (answer after MS, the call still happens), blocked (403 bot was blocked),
        deactivated (403 user is deactivated), chat-not-found (400),
        migrate:NEW_CHAT_ID (400, group upgraded), unauthorized (401)
  e.g. --fault 502,chat=42,times=2 --fault 429:3 --fault blocked,chat=7

Point a bot at it:
  TELEGRAM_API_URL=http://127.0.0.1:8081 TELEGRAM_BOT_TOKEN=123456:TEST tgq local --poll")]
pub struct FakeTelegramArgs {
    /// The address to listen on (0.0.0.0:PORT lets LocalStack's Lambda containers reach it).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8081")]
    addr: SocketAddr,
    /// The one bot token it accepts (the digits before ':' are the bot's id).
    #[arg(long, default_value = DEFAULT_TOKEN)]
    token: String,
    /// Enforce Telegram's flood limits (1 message/s per chat, 30/s overall, 20/min per group).
    #[arg(long)]
    limits: bool,
    /// Inject a fault (see below).
    #[arg(long = "fault", value_name = "SPEC", value_parser = fault_spec)]
    faults: Vec<FaultSpec>,
    /// Serve these updates to getUpdates: a JSON file holding one Update, or a directory of them
    /// (e.g. events/updates), in update_id order.
    #[arg(long, value_name = "PATH")]
    updates: Option<PathBuf>,
    /// Print only each call's method, chat and status, not the text and buttons it sent.
    #[arg(long)]
    hide_text: bool,
    /// Every invoice in Stars the bot sends to a private chat is paid at once: the user presses
    /// Pay, and the bot gets the pre-checkout query (then, once it answers ok within 10 s, the
    /// successful_payment message) through getUpdates.
    #[arg(long)]
    pay: bool,
}

/// One `--fault`.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultSpec {
    fault: Fault,
    scope: Scope,
    times: Times,
}

/// Reads `KIND[,chat=ID][,times=N|always]`.
fn fault_spec(text: &str) -> Result<FaultSpec, String> {
    let mut parts = text.split(',');
    let kind = parts.next().unwrap_or_default().trim();
    let fault = fault_kind(kind)?;
    let mut spec = FaultSpec {
        fault,
        scope: Scope::Global,
        times: Times::Once,
    };
    for part in parts {
        match part.trim().split_once('=') {
            Some(("chat", id)) => {
                let id = id
                    .parse()
                    .map_err(|_| format!("chat={id} is not a chat id"))?;
                spec.scope = Scope::Chat(id);
            }
            Some(("times", "always")) => spec.times = Times::Always,
            Some(("times", n)) => match n.parse() {
                Ok(1) => spec.times = Times::Once,
                Ok(n) if n > 1 => spec.times = Times::N(n),
                _ => return Err(format!("times={n} is not a count from 1, nor `always`")),
            },
            _ => return Err(format!("{part:?} is not chat=ID or times=N|always")),
        }
    }
    Ok(spec)
}

fn fault_kind(kind: &str) -> Result<Fault, String> {
    let number = |text: &str| {
        text.parse::<i64>()
            .map_err(|_| format!("{kind}: {text:?} is not a number"))
    };
    let (name, value) = match kind.split_once(':') {
        Some((name, value)) => (name, Some(value)),
        None => (kind, None),
    };
    let fault = match (name, value) {
        ("500" | "502" | "503" | "504", None) => Fault::ServerError(name.parse().unwrap_or(500)),
        ("429", Some(secs)) => Fault::RetryAfter(
            u32::try_from(number(secs)?).map_err(|_| format!("{kind}: seconds out of range"))?,
        ),
        ("timeout", Some(ms)) => Fault::Timeout(Duration::from_millis(
            u64::try_from(number(ms)?).map_err(|_| format!("{kind}: milliseconds out of range"))?,
        )),
        ("blocked", None) => Fault::Blocked,
        ("deactivated", None) => Fault::Deactivated,
        ("chat-not-found", None) => Fault::ChatNotFound,
        ("migrate", Some(chat)) => Fault::MigrateToChat(number(chat)?),
        ("unauthorized", None) => Fault::Unauthorized,
        _ => {
            return Err(format!(
                "{kind:?} is not a fault: 500, 502, 503, 504, 429:SECS, timeout:MS, blocked, \
                 deactivated, chat-not-found, migrate:CHAT_ID or unauthorized"
            ))
        }
    };
    Ok(fault)
}

/// Serves until SIGINT or SIGTERM.
pub async fn run(args: FakeTelegramArgs) -> anyhow::Result<()> {
    let updates = match &args.updates {
        Some(path) => read_updates(path)?,
        None => Vec::new(),
    };
    let config = FakeConfig {
        token: args.token.clone(),
        limits: args.limits.then(Limits::default),
        pay_invoices: args.pay,
        ..FakeConfig::default()
    };
    let fake = FakeTelegram::start_at(args.addr, config)
        .await
        .with_context(|| format!("cannot listen on {}", args.addr))?;
    for spec in &args.faults {
        fake.inject(spec.fault.clone(), spec.scope, spec.times);
    }
    let queued = updates.len();
    for update in updates {
        fake.push_update(update);
    }
    outln!("fake Telegram Bot API on {}", fake.url());
    outln!("  token    {} (any other is answered 401)", fake.token());
    outln!(
        "  limits   {}",
        if args.limits {
            "Telegram's flood limits"
        } else {
            "none"
        }
    );
    outln!("  faults   {}", args.faults.len());
    outln!(
        "  invoices {}",
        if args.pay {
            "paid at once by their users (--pay)"
        } else {
            "sent, not paid"
        }
    );
    outln!("  updates  {queued} queued for getUpdates");
    outln!(
        "Point a bot at it: TELEGRAM_API_URL={} TELEGRAM_BOT_TOKEN={}",
        fake.url(),
        fake.token()
    );
    outln!("Press Ctrl-C to stop.");

    let mut stop = std::pin::pin!(crate::local::shutdown::signalled());
    let mut printed = 0;
    loop {
        let stopping = tokio::select! {
            () = &mut stop => true,
            () = tokio::time::sleep(PRINT_EVERY) => false,
        };
        // The calls since the last print are printed on the way out too.
        for call in fake.calls_after(printed) {
            for line in shown(&call, args.hide_text) {
                outln!("{line}");
            }
            printed = call.seq;
        }
        if stopping {
            break;
        }
    }
    fake.shutdown().await;
    Ok(())
}

/// What is printed of a call: its method, chat and status; then, unless `hide_text`, the text or
/// caption it sent and its inline buttons, a row per line.
fn shown(call: &RecordedCall, hide_text: bool) -> Vec<String> {
    let chat = call
        .chat_id
        .map_or_else(|| "-".to_owned(), |chat| chat.to_string());
    let mut lines = vec![format!(
        "{:>6}  {:<22} chat {chat:<15} {}",
        call.seq, call.method, call.status
    )];
    if hide_text {
        return lines;
    }
    let said = ["text", "caption"]
        .iter()
        .find_map(|field| call.params.get(*field).and_then(Value::as_str));
    if let Some(text) = said {
        for line in text.lines() {
            lines.push(format!("        | {line}"));
        }
    }
    // A form or query-string call carries its markup as a JSON string.
    let markup = match call.params.get("reply_markup") {
        Some(Value::String(json)) => serde_json::from_str(json).unwrap_or(Value::Null),
        Some(markup) => markup.clone(),
        None => Value::Null,
    };
    for row in markup["inline_keyboard"].as_array().into_iter().flatten() {
        let labels: Vec<String> = row
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|button| button["text"].as_str())
            .map(|label| format!("[{label}]"))
            .collect();
        lines.push(format!("        {}", labels.join(" ")));
    }
    lines
}

/// The updates in `path` (a file, or every `*.json` of a directory holding an `update_id`), in
/// update_id order.
fn read_updates(path: &Path) -> anyhow::Result<Vec<Value>> {
    let files = if path.is_dir() {
        let mut files = Vec::new();
        for entry in
            std::fs::read_dir(path).with_context(|| format!("cannot read {}", path.display()))?
        {
            let file = entry?.path();
            if file.extension().is_some_and(|ext| ext == "json") {
                files.push(file);
            }
        }
        files
    } else {
        vec![path.to_owned()]
    };
    let mut updates = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let update: Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", file.display()))?;
        // A directory may hold other JSON (events/updates has a table of group keys).
        if update.get("update_id").is_some_and(Value::is_i64) {
            updates.push(update);
        } else if !path.is_dir() {
            anyhow::bail!("{} is not an Update: it has no update_id", file.display());
        }
    }
    updates.sort_by_key(|update| update["update_id"].as_i64());
    Ok(updates)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(params: Value) -> RecordedCall {
        RecordedCall {
            seq: 7,
            token: DEFAULT_TOKEN.into(),
            method: "sendMessage".into(),
            chat_id: Some(42),
            params,
            status: 200,
            message_id: None,
            at: std::time::Instant::now(),
        }
    }

    #[test]
    fn a_send_is_shown_with_its_text_and_buttons_unless_they_are_hidden() {
        let sent = call(serde_json::json!({
            "chat_id": 42, "text": "To do:\nmilk",
            "reply_markup": {"inline_keyboard": [
                [{"text": "⬜ milk", "callback_data": "0"}, {"text": "⬜ eggs", "callback_data": "1"}],
                [{"text": "Clear", "callback_data": "c"}],
            ]},
        }));
        assert_eq!(
            shown(&sent, false),
            [
                "     7  sendMessage            chat 42              200",
                "        | To do:",
                "        | milk",
                "        [⬜ milk] [⬜ eggs]",
                "        [Clear]",
            ]
        );
        assert_eq!(shown(&sent, true).len(), 1);
        let form = call(serde_json::json!({
            "chat_id": "42", "caption": "a photo",
            "reply_markup": r#"{"inline_keyboard":[[{"text":"ok","callback_data":"1"}]]}"#,
        }));
        assert_eq!(
            shown(&form, false)[1..],
            ["        | a photo", "        [ok]"]
        );
    }

    #[test]
    fn fault_specs_name_the_fault_its_chat_and_how_often() {
        assert_eq!(
            fault_spec("502,chat=42,times=2").unwrap(),
            FaultSpec {
                fault: Fault::ServerError(502),
                scope: Scope::Chat(42),
                times: Times::N(2)
            }
        );
        assert_eq!(
            fault_spec("429:3,times=always").unwrap(),
            FaultSpec {
                fault: Fault::RetryAfter(3),
                scope: Scope::Global,
                times: Times::Always
            }
        );
        assert_eq!(fault_spec("blocked").unwrap().fault, Fault::Blocked);
        assert_eq!(fault_spec("deactivated").unwrap().fault, Fault::Deactivated);
        assert_eq!(
            fault_spec("timeout:1500").unwrap().fault,
            Fault::Timeout(Duration::from_millis(1500))
        );
        assert_eq!(
            fault_spec("migrate:-100123").unwrap().fault,
            Fault::MigrateToChat(-100_123)
        );
        for bad in ["418", "429", "blocked,chat=x", "500,times=0", "500,often"] {
            assert!(fault_spec(bad).is_err(), "{bad}");
        }
    }
}
