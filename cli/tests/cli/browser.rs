//! A headless Chromium driven over the DevTools protocol, for the console's tests.
//!
//! Chromium is started with `--remote-debugging-pipe`: it reads commands from its fd 3 and writes
//! answers and events to its fd 4, each a JSON message ended by a NUL byte, so no port is opened
//! and no WebSocket client is needed. The binary is `TGQ_TEST_CHROMIUM`, or the first of
//! `chromium`, `chromium-browser` and `google-chrome` on the PATH (`scripts/test` installs
//! Debian's `chromium` when none is there). Without one the test fails, naming what to install.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The browser, with one page open.
pub struct Browser {
    child: Child,
    commands: std::fs::File,
    answers: mpsc::Receiver<Value>,
    next_id: u64,
    session: String,
    /// Exceptions the page's scripts threw, as the protocol reported them.
    exceptions: Arc<Mutex<Vec<String>>>,
    _profile: tempfile::TempDir,
}

/// The Chromium binary the tests use.
fn chromium() -> PathBuf {
    if let Some(path) = std::env::var_os("TGQ_TEST_CHROMIUM") {
        return PathBuf::from(path);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "the console's browser tests need Chromium: install Debian's `chromium` package \
         (scripts/test does when it is missing) or set TGQ_TEST_CHROMIUM to a Chrome binary"
    );
}

/// A pipe whose two ends close on exec.
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    let made = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(made, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: pipe2 succeeded, so both are open descriptors this process owns alone.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

impl Browser {
    /// Starts Chromium with a fresh profile and opens a page of `width` × `height`.
    pub fn start(width: u32, height: u32) -> Browser {
        let profile = tempfile::tempdir().expect("a profile directory");
        let (their_commands, our_commands) = pipe();
        let (our_answers, their_answers) = pipe();
        let (read_fd, write_fd) = (their_commands.as_raw_fd(), their_answers.as_raw_fd());
        let mut command = Command::new(chromium());
        command
            .args([
                "--headless=new",
                "--remote-debugging-pipe",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--mute-audio",
                "--hide-scrollbars",
                &format!("--window-size={width},{height}"),
                &format!("--user-data-dir={}", profile.path().display()),
                "about:blank",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: only async-signal-safe calls between fork and exec: dup2 puts the pipe's ends on
        // the descriptors Chromium reads and writes (dup2 clears their close-on-exec flag).
        unsafe {
            command.pre_exec(move || {
                if libc::dup2(read_fd, 3) < 0 || libc::dup2(write_fd, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().expect("Chromium starts");
        drop((their_commands, their_answers));
        let (sender, answers) = mpsc::channel();
        let exceptions = Arc::new(Mutex::new(Vec::new()));
        let seen = exceptions.clone();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(std::fs::File::from(our_answers));
            let mut message = Vec::new();
            while reader.read_until(0, &mut message).is_ok_and(|n| n > 0) {
                if message.last() == Some(&0) {
                    message.pop();
                }
                if let Ok(value) = serde_json::from_slice::<Value>(&message) {
                    if value["method"] == "Runtime.exceptionThrown" {
                        let details = &value["params"]["exceptionDetails"];
                        seen.lock().unwrap().push(format!(
                            "{} {}",
                            details["text"], details["exception"]["description"]
                        ));
                    }
                    if sender.send(value).is_err() {
                        break;
                    }
                }
                message.clear();
            }
        });
        let mut browser = Browser {
            child,
            commands: std::fs::File::from(our_commands),
            answers,
            next_id: 0,
            session: String::new(),
            exceptions,
            _profile: profile,
        };
        let target = browser.command("Target.createTarget", json!({ "url": "about:blank" }));
        let target_id = target["targetId"].as_str().expect("a target id").to_owned();
        let attached = browser.command(
            "Target.attachToTarget",
            json!({ "targetId": target_id, "flatten": true }),
        );
        browser.session = attached["sessionId"]
            .as_str()
            .expect("a session id")
            .to_owned();
        browser.command("Runtime.enable", json!({}));
        browser.command("Page.enable", json!({}));
        browser.command(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false }),
        );
        browser
    }

    /// Sends a command (to the page once one is attached) and waits for its answer.
    fn command(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if !self.session.is_empty() {
            message["sessionId"] = Value::from(self.session.clone());
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.commands
            .write_all(&bytes)
            .expect("Chromium reads commands");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let answer = self
                .answers
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("Chromium did not answer {method} within 30 s"));
            if answer["id"] == id {
                if let Some(error) = answer.get("error") {
                    panic!("{method}: {error}");
                }
                return answer["result"].clone();
            }
        }
    }

    /// Opens `url` and waits until its document has loaded.
    pub fn open(&mut self, url: &str) {
        self.command("Page.navigate", json!({ "url": url }));
        self.wait_for("document.readyState === 'complete'", "the page to load");
    }

    /// The value of a script run in the page (a promise is awaited); panics on an exception.
    pub fn eval(&mut self, script: &str) -> Value {
        let answer = self.command(
            "Runtime.evaluate",
            json!({ "expression": script, "awaitPromise": true, "returnByValue": true }),
        );
        if let Some(details) = answer.get("exceptionDetails") {
            panic!("the script `{script}` threw: {details}");
        }
        answer["result"]["value"].clone()
    }

    /// Waits up to 20 s for `condition` (a script) to be true; panics naming `what` with the
    /// page's text when it is not.
    pub fn wait_for(&mut self, condition: &str, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if self.eval(&format!("Boolean({condition})")) == Value::Bool(true) {
                return;
            }
            if Instant::now() > deadline {
                let text = self.eval("document.body ? document.body.innerText : ''");
                panic!("waited 20 s for {what} (`{condition}`); the page shows:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The page's visible text.
    pub fn text(&mut self) -> String {
        self.eval("document.body.innerText")
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Writes a PNG of the page to `path`.
    pub fn screenshot(&mut self, path: &Path) {
        use base64::Engine as _;
        let shot = self.command("Page.captureScreenshot", json!({ "format": "png" }));
        let data = shot["data"].as_str().expect("screenshot data");
        let png = base64::engine::general_purpose::STANDARD
            .decode(data)
            .expect("base64 from Chromium");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, png).unwrap();
    }

    /// What the page's scripts threw so far.
    pub fn exceptions(&self) -> Vec<String> {
        self.exceptions.lock().unwrap().clone()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
