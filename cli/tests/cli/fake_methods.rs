//! Every route of the example bot (`bot/src/lib.rs`) against a real `tgq fake-telegram`: each
//! command, plain text, each kind of button press, inline queries, the booking form, a reminder
//! and an announcement, queued at the fake for `tgq local --poll`. Each update must end `DONE`,
//! none dead-lettered for a method the fake does not serve, and the fake must have answered every
//! call the bot made.

use crate::common;

use std::io::Read as _;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tgq_core::record::{ActionState, Status, UpdateRecord};
use tgq_fake_telegram::DEFAULT_TOKEN;

use common::{run, stored_records, Local};

/// The chat whose `/announce` the bot obeys (`ANNOUNCER_CHAT`). It rolls first, so the
/// announcement's audience (the chats that rolled) is this chat.
const ANNOUNCER: i64 = 104;
/// A supergroup, where commands may name the bot.
const GROUP: i64 = -100_200;
/// The bot's username (`BOT_USERNAME`), which `/help@test_bot` names.
const USERNAME: &str = "test_bot";
/// The first query id: Telegram's are numbers, and the fake refuses an inline answer to others.
const FIRST_QUERY_ID: i64 = 4_382_139_112_311_400_000;
/// The bot's id in `tgq local` when `TGQ_BOT_ID` is unset.
const LOCAL_BOT: &str = "local";

/// A running `tgq fake-telegram` whose printout is read as it comes, stopped (SIGTERM) by
/// [`Fake::stop`] and killed when dropped.
struct Fake {
    child: Child,
    url: String,
    printed: Arc<Mutex<String>>,
    reader: Option<JoinHandle<()>>,
}

impl Fake {
    /// Starts it serving the updates in `updates` (a directory of update files) to getUpdates.
    fn start(updates: &Path) -> Fake {
        let (mut child, url) =
            common::start_fake_telegram(&["--updates", updates.to_str().unwrap()]);
        let printed = Arc::new(Mutex::new(String::new()));
        let mut stdout = child.stdout.take().expect("piped stdout");
        let sink = Arc::clone(&printed);
        let reader = std::thread::spawn(move || {
            let mut buffer = [0u8; 8192];
            while let Ok(read @ 1..) = stdout.read(&mut buffer) {
                let text = String::from_utf8_lossy(&buffer[..read]);
                sink.lock().unwrap().push_str(&text);
            }
        });
        Fake {
            child,
            url,
            printed,
            reader: Some(reader),
        }
    }

    /// What it printed so far.
    fn printed(&self) -> String {
        self.printed.lock().unwrap().clone()
    }

    /// Stops it with SIGTERM: (exit success, everything it printed).
    fn stop(mut self) -> (bool, String) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(sent.is_ok_and(|status| status.success()), "SIGTERM sent");
        let status = self.child.wait().expect("tgq fake-telegram ends");
        if let Some(reader) = self.reader.take() {
            reader.join().expect("the printout's reader");
        }
        (status.success(), self.printed())
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One call as `tgq fake-telegram` printed it: `seq method chat ID|- status`, then what it said
/// (`| text` lines).
#[derive(Debug)]
struct Printed {
    method: String,
    chat: Option<i64>,
    status: u16,
    said: String,
}

/// The calls in a printout, in arrival order, getUpdates left out.
fn printed_calls(printout: &str) -> Vec<Printed> {
    let mut calls: Vec<Printed> = Vec::new();
    for line in printout.lines() {
        if let Some(said) = line.strip_prefix("        | ") {
            if let Some(call) = calls.last_mut() {
                call.said.push_str(said);
                call.said.push('\n');
            }
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let [seq, method, "chat", chat, status] = words[..] else {
            continue;
        };
        let (Ok(_), Ok(status)) = (seq.parse::<u64>(), status.parse()) else {
            continue;
        };
        calls.push(Printed {
            method: method.to_owned(),
            chat: chat.parse().ok(),
            status,
            said: String::new(),
        });
    }
    calls.retain(|call| call.method != "getUpdates");
    calls
}

/// A call the fake must have answered 200: its method, its chat (`None` for a query's answer,
/// which names none) and what it said: a part of its text, or `None` for nothing.
#[derive(Debug)]
struct Expected {
    method: &'static str,
    chat: Option<i64>,
    said: Option<&'static str>,
}

impl Expected {
    fn matches(&self, call: &Printed) -> bool {
        let said = match self.said {
            Some(part) => call.said.contains(part),
            None => call.said.is_empty(),
        };
        call.status == 200 && call.method == self.method && call.chat == self.chat && said
    }
}

fn send(chat: i64, said: &'static str) -> Expected {
    Expected {
        method: "sendMessage",
        chat: Some(chat),
        said: Some(said),
    }
}

fn answer_button(said: Option<&'static str>) -> Expected {
    Expected {
        method: "answerCallbackQuery",
        chat: None,
        said,
    }
}

fn answer_inline() -> Expected {
    Expected {
        method: "answerInlineQuery",
        chat: None,
        said: None,
    }
}

/// One update the test queues: the route it takes, the actions its record must hold when done
/// (Bot API methods and `step:` names, in order), and the calls the fake must have answered
/// because of it (a reminder's and a broadcast's included).
struct Case {
    route: &'static str,
    update: Value,
    actions: Vec<&'static str>,
    calls: Vec<Expected>,
}

fn case(
    route: &'static str,
    update: Value,
    actions: &[&'static str],
    calls: impl IntoIterator<Item = Expected>,
) -> Case {
    Case {
        route,
        update,
        actions: actions.to_vec(),
        calls: calls.into_iter().collect(),
    }
}

fn user(id: i64) -> Value {
    json!({"id": id, "is_bot": false, "first_name": "Ada"})
}

fn chat(id: i64) -> Value {
    match id > 0 {
        true => json!({"id": id, "type": "private", "first_name": "Ada"}),
        false => json!({"id": id, "type": "supergroup", "title": "Group"}),
    }
}

/// A Message with `text` in `chat`, from user 7 in a group and from the chat's user otherwise.
fn message(chat_id: i64, text: &str) -> Value {
    let from = if chat_id > 0 { chat_id } else { 7 };
    json!({
        "message_id": 1, "date": 1_767_607_200, "chat": chat(chat_id), "from": user(from),
        "text": text,
    })
}

/// A new message with `text` in `chat`.
fn text(chat_id: i64, text: &str) -> Value {
    json!({ "message": message(chat_id, text) })
}

/// A press of the button carrying `data`, under a message the bot sent to `chat_id`.
fn press(chat_id: i64, data: &str) -> Value {
    json!({"callback_query": {
        "from": user(chat_id),
        "message": {
            "message_id": 1, "date": 1_767_607_200, "chat": chat(chat_id),
            "from": {"id": 123_456, "is_bot": true, "first_name": "Test Bot", "username": USERNAME},
            "text": "a message with buttons",
        },
        "chat_instance": "1", "data": data,
    }})
}

/// A press of the button carrying `data` under a message sent inline through the bot: no chat.
fn press_inline(user_id: i64, data: &str) -> Value {
    json!({"callback_query": {
        "from": user(user_id),
        "inline_message_id": "AgAAAHEaBgBn2m8GcEI6XxGkNUM", "chat_instance": "2", "data": data,
    }})
}

/// `@test_bot query` typed by user `user_id`.
fn inline_query(user_id: i64, query: &str) -> Value {
    json!({"inline_query": {
        "from": user(user_id), "query": query,
        "offset": "", "chat_type": "sender",
    }})
}

/// Every route of `ExampleBot::handle`, and of its `timer` through a reminder, in queue order: a
/// chat's updates run one after another, so the booking form moves as a user would move it.
fn cases() -> Vec<Case> {
    let reply = ["sendMessage"];
    let press_and_reply = ["answerCallbackQuery", "sendMessage"];
    let press_only = ["answerCallbackQuery"];
    vec![
        case(
            "/start",
            text(101, "/start"),
            &reply,
            [send(101, "Hello! I am a tgq example bot.")],
        ),
        case(
            "the counting button",
            press(101, "pressed:1"),
            &press_and_reply,
            [
                answer_button(Some("Pressed!")),
                send(101, "Button pressed once."),
            ],
        ),
        case("/help", text(102, "/help"), &reply, [send(102, "/shout")]),
        case(
            "/help@test_bot in a group",
            text(GROUP, "/help@test_bot"),
            &reply,
            [send(GROUP, "/shout")],
        ),
        case(
            "a command for another bot",
            text(GROUP, "/help@other_bot"),
            &[],
            [],
        ),
        case(
            "/shout text",
            text(103, "/shout hello there"),
            &reply,
            [send(103, "HELLO THERE")],
        ),
        case(
            "/shout alone",
            text(103, "/shout"),
            &reply,
            [send(103, "Shout what?")],
        ),
        case(
            "/announce from another chat",
            text(103, "/announce hi"),
            &reply,
            [send(103, "Only the announcer's chat")],
        ),
        case(
            "/roll",
            text(ANNOUNCER, "/roll"),
            &["step:roll", "sendMessage"],
            [send(ANNOUNCER, "You rolled ")],
        ),
        case(
            "/announce from the announcer",
            text(ANNOUNCER, "/announce free cake"),
            &["step:broadcast:announce", "sendMessage"],
            [
                send(ANNOUNCER, "Broadcast 1 started."),
                send(ANNOUNCER, "free cake"),
            ],
        ),
        case(
            "/book",
            text(105, "/book"),
            &reply,
            [send(105, "Booking: what name")],
        ),
        case(
            "the booking's name",
            text(105, "Ada Lovelace"),
            &reply,
            [send(105, "Which day for Ada Lovelace?")],
        ),
        case(
            "a date button",
            press(105, "date:Tomorrow"),
            &press_and_reply,
            [
                answer_button(Some("Tomorrow")),
                send(105, "Book Ada Lovelace for Tomorrow?"),
            ],
        ),
        case(
            "the Yes button",
            press(105, "confirm:true"),
            &press_and_reply,
            [
                answer_button(None),
                send(105, "Booked: Ada Lovelace, Tomorrow."),
            ],
        ),
        case(
            "the Yes button of a booking that is over",
            press(105, "confirm:true"),
            &press_only,
            [answer_button(Some("That booking is over"))],
        ),
        case(
            "a date button of a booking that is over",
            press(105, "date:Today"),
            &press_only,
            [answer_button(Some("That booking is over"))],
        ),
        case(
            "/book to cancel",
            text(106, "/book"),
            &reply,
            [send(106, "Booking: what name")],
        ),
        case(
            "/cancel in the form",
            text(106, "/cancel"),
            &reply,
            [send(106, "Booking cancelled.")],
        ),
        case(
            "/cancel outside it",
            text(106, "/cancel"),
            &reply,
            [send(106, "Nothing to cancel.")],
        ),
        case(
            "/remind and its timer",
            text(107, "/remind 0 tea"),
            &reply,
            [
                send(107, "I will remind you in 0 min."),
                send(107, "Reminder: tea"),
            ],
        ),
        case(
            "/remind alone",
            text(107, "/remind"),
            &reply,
            [send(107, "Remind you of what?")],
        ),
        case(
            "plain text",
            text(108, "hello tgq"),
            &reply,
            [send(108, "You said: hello tgq")],
        ),
        case(
            "an unknown command",
            text(108, "/dance"),
            &reply,
            [send(108, "I do not know /dance.")],
        ),
        case(
            "a button the bot no longer knows",
            press(109, "vote:3"),
            &press_only,
            [answer_button(None)],
        ),
        case(
            "the counting button on an inline message",
            press_inline(109, "pressed:2"),
            &press_only,
            [answer_button(Some("Pressed!"))],
        ),
        case(
            "an inline query with text",
            inline_query(110, "hello"),
            &["answerInlineQuery"],
            [answer_inline()],
        ),
        case(
            "an empty inline query",
            inline_query(110, "  "),
            &["answerInlineQuery"],
            [answer_inline()],
        ),
        case(
            "an update of another kind",
            json!({ "edited_message": message(111, "edited") }),
            &[],
            [],
        ),
    ]
}

/// What is wrong with `record`, the one of `case`: not `DONE`, or other actions than expected,
/// or an action that did not succeed.
fn record_problem(case: &Case, record: Option<&UpdateRecord>) -> Option<String> {
    let Some(record) = record else {
        return Some(format!("{}: no record; tgq never stored it", case.route));
    };
    let actions: Vec<String> = record
        .actions
        .values()
        .map(|action| match &action.state {
            ActionState::Succeeded(_) => action.method.clone(),
            ActionState::Failed { code, description } => {
                format!("{} failed {code} {description}", action.method)
            }
            other => format!("{} {other:?}", action.method),
        })
        .collect();
    if record.status == Status::Done && actions == case.actions {
        return None;
    }
    Some(format!(
        "{}: ended {:?} with actions {actions:?}, not Done with {:?} (last error: {:?})",
        case.route, record.status, case.actions, record.last_error
    ))
}

/// Matches each case's expected calls to the calls the fake printed, each printed call used once;
/// every expectation nobody answered, and every call nobody expected, is a problem.
fn call_problems(cases: &[Case], printed: Vec<Printed>) -> Vec<String> {
    let mut unused: Vec<Option<Printed>> = printed.into_iter().map(Some).collect();
    let mut problems = Vec::new();
    for case in cases {
        for expected in &case.calls {
            let found = unused
                .iter_mut()
                .find(|call| call.as_ref().is_some_and(|call| expected.matches(call)));
            match found {
                Some(call) => *call = None,
                None => problems.push(format!("{}: the fake answered no {expected:?}", case.route)),
            }
        }
    }
    problems.extend(
        unused
            .into_iter()
            .flatten()
            .map(|call| format!("a call no route expected: {call:?}")),
    );
    problems
}

#[tokio::test(flavor = "multi_thread")]
async fn every_route_of_the_example_bot_is_answered_by_the_fake_and_ends_done() {
    let mut cases = cases();
    let updates = tempfile::tempdir().unwrap();
    for (n, case) in cases.iter_mut().enumerate() {
        let update_id = i64::try_from(n).unwrap() + 1;
        case.update["update_id"] = update_id.into();
        // A query's id is numbered with its update: Telegram's are numbers.
        for query in ["callback_query", "inline_query"] {
            if let Some(query) = case.update.get_mut(query) {
                query["id"] = (FIRST_QUERY_ID + update_id).to_string().into();
            }
        }
        let file = updates.path().join(format!("{update_id:03}.json"));
        std::fs::write(file, case.update.to_string()).unwrap();
    }
    let fake = Fake::start(updates.path());
    let announcer = ANNOUNCER.to_string();
    let envs = [
        ("TELEGRAM_API_URL", fake.url.as_str()),
        ("TELEGRAM_BOT_TOKEN", DEFAULT_TOKEN),
        ("TGQ_HANDLER", "bot"),
        ("BOT_USERNAME", USERNAME),
        ("ANNOUNCER_CHAT", announcer.as_str()),
    ];
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap();
    let mut local = Local::start(dir.path(), &envs, &["--poll"]);
    local.wait_ready().await;

    // Settled: every update stored and none left to run, and the reminder and the announcement,
    // which come after their updates, printed by the fake.
    let queued = cases.len();
    let started = Instant::now();
    loop {
        let status = local.status().await;
        let printed = fake.printed();
        let settled = status["counters"]["received"] == queued
            && status["stats"]["pending"] == 0
            && status["stats"]["in_flight"] == 0
            && printed.contains("| Reminder: tea")
            && printed.contains("| free cake");
        if settled {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "not settled within 90 s: {status}\n{printed}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(local.terminate().await.success(), "{:?}", local.output());
    // The fake prints what arrived every 200 ms; nothing arrives once tgq local is gone.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (stopped, printout) = fake.stop();
    assert!(stopped, "SIGTERM ends tgq fake-telegram with success");

    let (exit, letters, stderr) = run(&[], &["dlq", "list", "--json", "--data-dir", data_dir]);
    assert!(exit.success(), "{stderr}");
    let records = stored_records(dir.path(), LOCAL_BOT, 1..=i64::try_from(queued).unwrap()).await;
    let mut problems: Vec<String> = cases
        .iter()
        .zip(1..)
        .filter_map(|(case, update_id)| record_problem(case, records.get(&update_id)))
        .collect();
    problems.extend(call_problems(&cases, printed_calls(&printout)));
    assert!(
        problems.is_empty(),
        "{} problems:\n{}\n\ndead letters: {letters}\nthe fake printed:\n{printout}",
        problems.len(),
        problems.join("\n")
    );
    let letters: Value = serde_json::from_str(&letters).unwrap();
    assert_eq!(letters, json!([]), "no update was dead-lettered");
}
