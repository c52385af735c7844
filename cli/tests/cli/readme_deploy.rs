//! README's "Deploying" run as written from a machine with Rust and Python but none of a deploy's
//! tools: `tgq deploy --stack tgq --region eu-west-1` in a terminal asks to install them, installs
//! the pinned packages into its cache (here stand-ins for the SAM CLI, cargo-lambda and zig, served
//! as wheels from a local folder, the `sam` the deploy tests use), asks for the token, and deploys
//! against moto. `cargo install --path cli` is the binary under test.

use std::path::Path;

use aws_config::{BehaviorVersion, Region};
use serde_json::json;
use tgq_e2e::emulator::{self, Stack};
use tgq_fake_telegram::FakeTelegram;

use crate::common;

/// Runs its arguments in a terminal of their own, printing what it shows, and answers its two
/// questions as a user does: `y` once asked to install, the token once asked for it and the
/// terminal has stopped echoing.
const TYPIST: &str = r#"
import os, pty, sys, termios, time
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
answers = [(b"Go on? [y/N] ", b"y\n", False), (b"(not shown): ", os.environ["TYPED_TOKEN"].encode() + b"\n", True)]
seen = b""
while True:
    try:
        data = os.read(fd, 4096)
    except OSError:
        break
    if not data:
        break
    seen += data
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    if answers and answers[0][0] in seen:
        _, answer, hidden = answers.pop(0)
        seen = b""
        for _ in range(100):
            if not hidden or not termios.tcgetattr(fd)[3] & termios.ECHO:
                break
            time.sleep(0.05)
        os.write(fd, answer)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"#;

/// The lines of README's "Deploying" code block, comments dropped.
fn readme_lines() -> Vec<String> {
    const README: &str = include_str!("../../../README.md");
    let section = common::doc_section(README, "README", "Deploying");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the section has a sh block");
    block
        .lines()
        .map(|line| line.split(" #").next().unwrap_or(line).trim().to_owned())
        .filter(|line| !line.is_empty())
        .collect()
}

/// Writes a wheel of `package` at `version` into `dir` whose scripts are `scripts`.
fn wheel(dir: &Path, package: &str, version: &str, scripts: &[(&str, String)]) {
    let spec = json!({
        "dir": dir, "name": package.replace('-', "_"), "package": package, "version": version,
        "scripts": scripts.iter().map(|(n, s)| json!([n, s])).collect::<Vec<_>>(),
    });
    let made = std::process::Command::new("python3")
        .args([
            "-c",
            r#"
import json, sys, zipfile, os
s = json.loads(sys.argv[1])
base = f"{s['name']}-{s['version']}"
path = os.path.join(s['dir'], f"{base}-py3-none-any.whl")
files = {
    f"{base}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {s['package']}\nVersion: {s['version']}\n",
    f"{base}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: tgq-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
for name, script in s['scripts']:
    files[f"{base}.data/scripts/{name}"] = script
files[f"{base}.dist-info/RECORD"] = "".join(f"{n},,\n" for n in files) + f"{base}.dist-info/RECORD,,\n"
with zipfile.ZipFile(path, "w") as z:
    for name, text in files.items():
        info = zipfile.ZipInfo(name)
        info.external_attr = 0o100755 << 16
        z.writestr(info, text)
"#,
            &spec.to_string(),
        ])
        .status()
        .unwrap();
    assert!(made.success(), "the wheel of {package} was made");
}

#[tokio::test(flavor = "multi_thread")]
async fn readme_s_deploying_lines_run_as_written_from_a_machine_without_the_tools() {
    let lines = readme_lines();
    assert_eq!(
        lines,
        [
            "cargo install --path cli",
            "tgq deploy --stack tgq --region eu-west-1"
        ],
        "README's Deploying lines are the ones this test runs"
    );
    let deploy: Vec<&str> = lines[1].split_whitespace().skip(1).collect();

    let fake = FakeTelegram::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let calls = dir.path().join("sam-calls");
    // PyPI, as this test serves it: the pinned versions, as stand-ins.
    let index = dir.path().join("index");
    std::fs::create_dir_all(&index).unwrap();
    let sam = format!("#!/bin/sh\necho \"$@\" >> '{}'\n", calls.display());
    wheel(&index, "aws-sam-cli", "1.170.0", &[("sam", sam)]);
    wheel(
        &index,
        "cargo-lambda",
        "1.9.2",
        &[("cargo-lambda", "#!/bin/sh\n".to_owned())],
    );
    wheel(&index, "ziglang", "0.17.1", &[]);
    // The machine: Python, and rustup with the arm64 target; no SAM CLI, cargo-lambda or zig.
    let bin = common::python_and_rustup(dir.path(), "aarch64-unknown-linux-gnu");
    let python = common::real_python();
    let path = format!("{}:/usr/bin:/bin", bin.display());

    // What `sam deploy` makes, in the README's region: the stack's outputs and its resources.
    emulator::endpoint();
    let sdk = aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new("eu-west-1"))
        .http_client(tgq_aws::https_client())
        .load()
        .await;
    let resources = Stack::create(&sdk, "readme").await.unwrap();
    let stacks = aws_sdk_cloudformation::Client::new(&sdk);
    // Nothing of an earlier run on the same emulator: the stack, and the parameters it kept.
    let _ = stacks.delete_stack().stack_name("tgq").send().await;
    let ssm = aws_sdk_ssm::Client::new(&sdk);
    for name in ["/tgq/tgq/bot-token", "/tgq/tgq/webhook-secret"] {
        let _ = ssm.delete_parameter().name(name).send().await;
    }
    let template = json!({
        "Resources": { "Marker": { "Type": "AWS::SSM::Parameter", "Properties": {
            "Name": "/tgq/tgq/readme-marker", "Type": "String", "Value": "x" } } },
        "Outputs": {
            "TableName": { "Value": resources.table },
            "UpdatesQueueUrl": { "Value": resources.queue_url },
            "DeadLetterQueueUrl": { "Value": resources.dlq_url },
            "WebhookUrl": { "Value": "https://readme.example.com/webhook" },
            "BotId": { "Value": "mybot" },
            "BotTokenParameterName": { "Value": "/tgq/tgq/bot-token" },
            "WebhookSecretParameterName": { "Value": "/tgq/tgq/webhook-secret" },
            "TelegramApiUrl": { "Value": fake.url() },
        },
    });
    stacks
        .create_stack()
        .stack_name("tgq")
        .template_body(template.to_string())
        .send()
        .await
        .unwrap();

    // The README's lines run from the repository's root: its template is there.
    let template = Path::new(env!("CARGO_MANIFEST_DIR")).join("../template.yaml");
    std::fs::copy(template, dir.path().join("template.yaml")).unwrap();

    // In a terminal, answered as a user does: yes to the install once asked, then the token once
    // asked and the terminal no longer echoes.
    let mut command = std::process::Command::new(&python);
    for name in tgq_core::config::SETTINGS {
        command.env_remove(name);
    }
    let terminal = command
        .args(["-c", TYPIST, env!("CARGO_BIN_EXE_tgq")])
        .args(&deploy)
        .current_dir(dir.path())
        .env("PATH", &path)
        .env("TGQ_TOOLS_DIR", dir.path().join("tools"))
        .env("TELEGRAM_API_URL", fake.url())
        .env("TYPED_TOKEN", fake.token())
        .env("PIP_NO_INDEX", "1")
        .env("PIP_FIND_LINKS", &index)
        .env("PIP_CONFIG_FILE", "/dev/null")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let output = tokio::task::spawn_blocking(move || terminal.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let seen = String::from_utf8_lossy(&output.stdout).into_owned();
    let _ = stacks.delete_stack().stack_name("tgq").send().await;
    assert!(output.status.success(), "{seen}");
    for said in [
        "tgq will install the SAM CLI 1.170.0, cargo-lambda 1.9.2 and zig 0.17.1 from PyPI",
        "The bot's token from @BotFather (not shown)",
        "The bot is live",
    ] {
        assert!(seen.contains(said), "{said:?} in {seen}");
    }
    assert!(!seen.contains(fake.token()), "the token was shown");
    assert!(dir.path().join("tools/installed").exists());
    let called = std::fs::read_to_string(&calls).unwrap();
    assert!(
        called.starts_with("build --parameter-overrides Architecture=arm64")
            && called.contains("deploy --stack-name tgq"),
        "{called}"
    );
    assert_eq!(
        fake.webhook_url().as_deref(),
        Some("https://readme.example.com/webhook")
    );
}
