//! Runs the built `tgq` binary for the integration tests: a `tgq local` on a free port and a
//! temporary data directory, its output captured, stopped by SIGTERM or SIGKILL.

#![allow(dead_code)] // Each test file uses its own part of these helpers.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;
use tgq_core::clock::{Clock as _, SystemClock};
use tgq_core::ids::{BotId, RecordKey, UpdateId};
use tgq_core::ports::RecordReader as _;
use tgq_core::record::{ActionState, UpdateRecord};
use tgq_embedded::{EmbeddedStore, StoreOptions};
use tgq_fake_telegram::FakeTelegram;

/// `tgq` with a clean environment plus `envs`, running the built-in echo bot unless `envs` sets
/// `TGQ_HANDLER`: the suite asserts replies that name their update (`echo 17: hi`), whatever the
/// bot in `bot/` says.
pub fn tgq(envs: &[(&str, &str)]) -> Command {
    tgq_at(Path::new(env!("CARGO_BIN_EXE_tgq")), envs)
}

/// [`tgq`], run from the binary at `exe` (a copy another user can reach).
pub fn tgq_at(exe: &Path, envs: &[(&str, &str)]) -> Command {
    let mut command = Command::new(exe);
    // Nothing of the developer's shell changes what the tests see (NO_COLOR their output either).
    for name in tgq_core::config::SETTINGS.iter().chain(&["NO_COLOR"]) {
        command.env_remove(name);
    }
    command.env("TGQ_HANDLER", "echo");
    command.envs(envs.iter().copied());
    command
}

/// Starts `tgq fake-telegram ARGS…` on a free port, its stdout piped, and waits until it listens:
/// the process and its URL.
pub fn start_fake_telegram(args: &[&str]) -> (Child, String) {
    let addr = format!("127.0.0.1:{}", free_port());
    let child = tgq(&[])
        .args(["fake-telegram", "--addr", &addr])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("tgq fake-telegram starts");
    let started = Instant::now();
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "tgq fake-telegram did not listen on {addr}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (child, format!("http://{addr}"))
}

/// The environment of a `tgq local` whose bot sends to `fake`, at `api_url`, and whose webhook
/// takes `secret`.
pub fn sending_to<'a>(
    fake: &'a FakeTelegram,
    api_url: &'a str,
    secret: &'a str,
) -> [(&'static str, &'a str); 3] {
    [
        ("TELEGRAM_API_URL", api_url),
        ("TELEGRAM_BOT_TOKEN", fake.token()),
        ("TGQ_WEBHOOK_SECRET", secret),
    ]
}

/// Posts a text update to `local`'s webhook with `secret`, expecting it to be taken (200).
pub async fn post_text(local: &Local, secret: &str, update_id: i64, chat: i64, text: &str) {
    post_update(local, secret, &message_update(update_id, chat, text)).await;
}

/// Calls `method` of the Bot API at `url` with `token` and `params`, as a bot would outside tgq:
/// the answer's envelope.
pub async fn call_bot_api(url: &str, token: &str, method: &str, params: Value) -> Value {
    reqwest::Client::new()
        .post(format!("{url}/bot{token}/{method}"))
        .json(&params)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Posts `update` to `local`'s webhook with `secret`, expecting it to be taken (200).
pub async fn post_update(local: &Local, secret: &str, update: &serde_json::Value) {
    let response = reqwest::Client::new()
        .post(local.url("/webhook"))
        .header("x-telegram-bot-api-secret-token", secret)
        .body(update.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        200,
        "update {} was not taken",
        update["update_id"]
    );
}

/// Runs `tgq args…` to completion: (exit status, stdout, stderr).
pub fn run(envs: &[(&str, &str)], args: &[&str]) -> (ExitStatus, String, String) {
    let output = tgq(envs).args(args).output().expect("tgq runs");
    (
        output.status,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Runs `tgq args…` with its stdout a pipe whose reader is closed at once, as `tgq … | head -0`
/// would: (exit status, stderr).
pub fn run_into_closed_pipe(envs: &[(&str, &str)], args: &[&str]) -> (ExitStatus, String) {
    let mut child = tgq(envs)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tgq runs");
    drop(child.stdout.take());
    let output = child.wait_with_output().expect("tgq ends");
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A port nobody listens on right now, and one no other test of this binary was given: the
/// kernel hands a port it just freed to the next bind, so two tests starting at once could
/// otherwise both take it, and one `tgq local` would find it in use.
pub fn free_port() -> u16 {
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let mut given = GIVEN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// The update fixtures of `events/updates` (the group-key table excluded).
pub fn update_fixture_count() -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../events/updates");
    std::fs::read_dir(dir)
        .expect("events/updates")
        .filter_map(Result::ok)
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".json") && name != "expected_groups.json")
        .count()
}

/// The fixtures of `events/updates` this build's parser (teloxide-core 0.13) cannot read: the
/// worker dead-letters them as `unreadable` (its `message_ids` are integers, as the Bot API says,
/// where the parser expects objects).
pub const UNREADABLE_FIXTURES: [&str; 1] = ["deleted_business_messages.json"];

/// The fixtures of `events/updates` a run of the bot processes.
pub fn readable_fixture_count() -> usize {
    update_fixture_count() - UNREADABLE_FIXTURES.len()
}

/// A message update from `chat` (a private chat with that user) carrying `text`.
pub fn message_update(update_id: i64, chat: i64, text: &str) -> Value {
    serde_json::json!({
        "update_id": update_id,
        "message": {
            "message_id": update_id,
            "date": 1_767_607_200,
            "chat": {"id": chat, "type": "private", "first_name": "Tester"},
            "from": {"id": chat, "is_bot": false, "first_name": "Tester"},
            "text": text,
        }
    })
}

/// The dead letters `tgq dlq list --json` printed: their ids by update id.
pub fn ids_by_update(letters: &Value) -> BTreeMap<i64, String> {
    letters
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["update_id"].as_i64().unwrap(),
                l["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The entries `tgq dlq audit --json` printed, as it printed them: (action, update id, principal).
pub fn audit_entries(audit: &Value) -> Vec<(&str, i64, &str)> {
    audit
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap(),
                e["update_id"].as_i64().unwrap(),
                e["principal"].as_str().unwrap(),
            )
        })
        .collect()
}

/// A running `tgq local`.
pub struct Local {
    child: Child,
    /// Its data directory.
    pub data_dir: PathBuf,
    /// Where its webhook listener is (`--addr`).
    pub addr: SocketAddr,
    /// Where its console, admin routes and metrics are (`--admin-addr`).
    pub admin_addr: SocketAddr,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    /// The threads copying stdout and stderr; they end when the process is gone.
    readers: Vec<JoinHandle<()>>,
}

/// `tgq local` against a fake Bot API on an address of its own, for tests that take Telegram away:
/// such a test stops the fake and starts another at [`OnFake::addr`] (connections refused, then
/// back), and starts `tgq local` again on the same port and store after killing it.
pub struct OnFake {
    /// Where the fake answers, and where the next one must.
    pub addr: SocketAddr,
    /// `tgq local`'s data directory.
    pub dir: tempfile::TempDir,
    port: u16,
    envs: [(&'static str, String); 3],
}

impl OnFake {
    /// Starts a fake Bot API with Telegram's defaults and `tgq local` against it with `secret`,
    /// ready.
    pub async fn start(secret: &str) -> (Self, FakeTelegram, Local) {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let fake = FakeTelegram::start_at(addr, Default::default())
            .await
            .unwrap();
        let on = OnFake {
            addr,
            dir: tempfile::tempdir().unwrap(),
            port: free_port(),
            envs: [
                ("TELEGRAM_API_URL", fake.url()),
                ("TELEGRAM_BOT_TOKEN", fake.token().to_owned()),
                ("TGQ_WEBHOOK_SECRET", secret.to_owned()),
            ],
        };
        let mut local = on.restart();
        local.wait_ready().await;
        (on, fake, local)
    }

    /// `tgq local` started again on the same port and store (after a kill), not yet ready.
    pub fn restart(&self) -> Local {
        let envs = self
            .envs
            .each_ref()
            .map(|(name, value)| (*name, value.as_str()));
        Local::start_on(self.port, self.dir.path(), &envs, &[])
    }
}

impl Local {
    /// Starts `tgq local` on a free port with `envs` and extra `args`.
    pub fn start(data_dir: &Path, envs: &[(&str, &str)], args: &[&str]) -> Local {
        Self::start_on(free_port(), data_dir, envs, args)
    }

    /// Starts `tgq local` on `port`.
    pub fn start_on(port: u16, data_dir: &Path, envs: &[(&str, &str)], args: &[&str]) -> Local {
        Self::start_with(port, data_dir, envs, args, |_| {})
    }

    /// Starts `tgq local` on `port`, letting `prepare` adjust the command first.
    pub fn start_with(
        port: u16,
        data_dir: &Path,
        envs: &[(&str, &str)],
        args: &[&str],
        prepare: impl FnOnce(&mut Command),
    ) -> Local {
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("an address");
        let admin_addr: SocketAddr = format!("127.0.0.1:{}", free_port())
            .parse()
            .expect("an address");
        let mut command = tgq(envs);
        prepare(&mut command);
        let mut child = command
            .arg("local")
            .arg("--addr")
            .arg(addr.to_string())
            .arg("--admin-addr")
            .arg(admin_addr.to_string())
            .arg("--data-dir")
            .arg(data_dir)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tgq local starts");
        let (stdout, out_reader) = capture(child.stdout.take().expect("piped stdout"));
        let (stderr, err_reader) = capture(child.stderr.take().expect("piped stderr"));
        Local {
            child,
            data_dir: data_dir.to_owned(),
            addr,
            admin_addr,
            stdout,
            stderr,
            readers: vec![out_reader, err_reader],
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `http://addr/path` on the webhook listener.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `http://admin_addr/path` on the admin listener: the console, `/admin/*`, `/metrics`.
    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.admin_addr)
    }

    /// What it printed so far: (stdout, stderr).
    pub fn output(&self) -> (String, String) {
        (
            self.stdout.lock().unwrap().clone(),
            self.stderr.lock().unwrap().clone(),
        )
    }

    /// Waits until `/readyz` answers 200; fails with its output if it exits or takes too long.
    pub async fn wait_ready(&mut self) {
        let client = reqwest::Client::new();
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!(
                    "tgq local exited with {status} before it was ready: {:?}",
                    self.output()
                );
            }
            if let Ok(response) = client.get(self.url("/readyz")).send().await {
                if response.status() == 200 {
                    return;
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "tgq local was not ready within 30 s: {:?}",
                self.output()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `GET /admin/status`'s result.
    pub async fn status(&self) -> Value {
        let body: Value = reqwest::get(self.admin_url("/admin/status"))
            .await
            .expect("admin/status answers")
            .json()
            .await
            .expect("JSON");
        body["result"].clone()
    }

    /// Waits until nothing is pending or in flight and `done` holds; fails after `timeout`.
    pub async fn wait_settled(&self, timeout: Duration, done: impl Fn(&Value) -> bool) -> Value {
        let started = Instant::now();
        loop {
            let status = self.status().await;
            let stats = &status["stats"];
            if stats["pending"] == 0 && stats["in_flight"] == 0 && done(&status) {
                return status;
            }
            assert!(
                started.elapsed() < timeout,
                "not settled within {timeout:?}: {status}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Sends SIGTERM and waits for the exit (graceful shutdown).
    pub async fn terminate(&mut self) -> ExitStatus {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill runs");
        assert!(sent.success(), "SIGTERM could not be sent");
        self.wait_exit(Duration::from_secs(30)).await
    }

    /// Sends SIGKILL (no cleanup of any kind) and reaps the process.
    pub fn kill(&mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reaped");
        self.drain_output();
    }

    /// Waits for the reader threads, which reach the end of the pipes once the process is gone:
    /// afterwards [`Local::output`] holds everything it printed.
    fn drain_output(&mut self) {
        for reader in self.readers.drain(..) {
            reader.join().expect("an output reader thread");
        }
    }

    /// Waits for the process to exit by itself.
    pub async fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                self.drain_output();
                return status;
            }
            assert!(
                started.elapsed() < timeout,
                "tgq local did not exit within {timeout:?}: {:?}",
                self.output()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn capture(mut pipe: impl Read + Send + 'static) -> (Arc<Mutex<String>>, JoinHandle<()>) {
    let text = Arc::new(Mutex::new(String::new()));
    let sink = text.clone();
    let reader = std::thread::spawn(move || {
        let mut buffer = [0u8; 8192];
        while let Ok(read) = pipe.read(&mut buffer) {
            if read == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buffer[..read]));
        }
    });
    (text, reader)
}

/// The records of `update_ids` in the store of `data_dir`, read directly while no `tgq` holds it
/// (after a SIGKILL or a clean exit): what survived, in which status, with which actions.
pub async fn stored_records(
    data_dir: &Path,
    bot_id: &str,
    update_ids: impl IntoIterator<Item = i64>,
) -> BTreeMap<i64, UpdateRecord> {
    let dir = data_dir.to_owned();
    let store =
        tokio::task::spawn_blocking(move || EmbeddedStore::open(&dir, StoreOptions::default()))
            .await
            .unwrap()
            .expect("the store opens once tgq local is gone");
    let bot = BotId::new(bot_id).expect("a valid bot id");
    let now = SystemClock.now();
    let mut records = BTreeMap::new();
    for update_id in update_ids {
        let key = RecordKey::new(bot.clone(), UpdateId(update_id));
        if let Some(record) = store.get(&key, now).await.expect("a record read") {
            records.insert(update_id, record);
        }
    }
    // Closing the store releases its file for the next `tgq local`.
    tokio::task::spawn_blocking(move || drop(store))
        .await
        .unwrap();
    records
}

/// The actions with an unknown outcome: an intent recorded, nothing else. Such a send may have
/// reached Telegram, and an at-least-once action is sent again. By (update id, method).
pub fn unknown_outcomes(records: &BTreeMap<i64, UpdateRecord>) -> BTreeSet<(i64, String)> {
    records
        .iter()
        .flat_map(|(update_id, record)| {
            record
                .actions
                .values()
                .filter(|action| action.state == ActionState::Pending)
                .map(move |action| (*update_id, action.method.clone()))
        })
        .collect()
}

/// Every sendMessage text the fake Bot API accepted, per chat, in arrival order.
pub fn replies_per_chat(fake: &FakeTelegram) -> BTreeMap<i64, Vec<String>> {
    let mut replies: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for call in fake
        .delivered()
        .iter()
        .filter(|c| c.method == "sendMessage")
    {
        let text = call.params["text"].as_str().unwrap_or_default().to_owned();
        replies
            .entry(call.chat_id.unwrap_or_default())
            .or_default()
            .push(text);
    }
    replies
}

/// The interpreter python3 on this machine's PATH runs (not a shim that needs the PATH).
pub fn real_python() -> PathBuf {
    let output = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 on PATH");
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

/// `dir/bin`, to be a whole PATH for a deploy's tool checks: the machine's python3 and a rustup
/// that lists `target` as installed; no SAM CLI, cargo-lambda or zig.
pub fn python_and_rustup(dir: &Path, target: &str) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(real_python(), bin.join("python3")).unwrap();
    write_script(&bin.join("rustup"), &format!("#!/bin/sh\necho {target}\n"));
    bin
}

/// Writes `script` to `path`, executable by its owner alone: a stand-in for a tool.
pub fn write_script(path: &Path, script: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, script).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).unwrap();
}

/// The text of `doc`'s `## heading` section, up to the next `## `; `doc` names it in the panic.
pub fn doc_section<'d>(text: &'d str, doc: &str, heading: &str) -> &'d str {
    text.split(&format!("\n## {heading}\n"))
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .unwrap_or_else(|| panic!("{doc} has a \"{heading}\" section"))
}
