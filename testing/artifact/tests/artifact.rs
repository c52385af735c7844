//! The deployable artifacts, checked as Lambda would take them: `scripts/package` runs `sam build
//! --parameter-overrides Architecture=x86_64` and zips each function as `sam deploy` does; these
//! tests read `.aws-sam/build` and `.aws-sam/package`. They fail, naming `scripts/package`, when
//! the artifacts are missing — the suite (`scripts/test`) always builds them first.

use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tgq_artifact::elf::{Elf, GlibcVersion, Machine};
use tgq_artifact::{template_functions, workspace_root, zipped_bootstrap, Function, BOOTSTRAP};
use tgq_fake_lambda::{cold_start, AnswerKind, ColdStart, Invocation, Launch};

/// Lambda's `provided.al2023` runtime ships glibc 2.34; a binary needing a newer symbol version
/// does not start there.
const PROVIDED_AL2023_GLIBC: GlibcVersion = GlibcVersion(2, 34, 0);
/// The size each function's zip must stay under (5 MiB): small zips start faster, and it leaves
/// room below Lambda's 50 MB limit for direct upload.
const MAX_ZIP_BYTES: u64 = 5 * 1024 * 1024;

fn function(binary: &str) -> Function {
    let functions = template_functions().expect("template.yaml's functions");
    functions
        .into_iter()
        .find(|function| function.binary == binary)
        .unwrap_or_else(|| panic!("template.yaml has no function built from {binary}"))
}

fn missing(path: &Path) -> String {
    format!(
        "{} is missing: run scripts/package (scripts/test does) to build the artifacts",
        path.display()
    )
}

#[test]
fn every_function_of_the_template_is_built_into_one_executable_x86_64_bootstrap() {
    let root = workspace_root();
    let functions = template_functions().expect("template.yaml's functions");
    let binaries: Vec<&str> = functions.iter().map(|f| f.binary.as_str()).collect();
    assert_eq!(binaries, ["webhook", "worker"]);
    for function in &functions {
        let dir = function.build_dir(&root);
        let entries: Vec<String> = fs::read_dir(&dir)
            .unwrap_or_else(|_| panic!("{}", missing(&dir)))
            .map(|entry| {
                entry
                    .expect("entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(entries, [BOOTSTRAP], "{}", dir.display());
        let bootstrap = dir.join(BOOTSTRAP);
        let metadata = fs::metadata(&bootstrap).expect("bootstrap metadata");
        assert!(metadata.is_file(), "{}", bootstrap.display());
        assert_eq!(
            metadata.permissions().mode() & 0o111,
            0o111,
            "{} is not executable",
            bootstrap.display()
        );
        let elf = Elf::parse(&fs::read(&bootstrap).expect("read bootstrap")).expect("an ELF file");
        // scripts/package builds x86_64, the one Rust target this machine and CI have.
        assert_eq!(elf.machine, Machine::X86_64, "{}", bootstrap.display());
    }
}

#[test]
fn no_bootstrap_needs_a_newer_glibc_than_provided_al2023_has() {
    let root = workspace_root();
    for function in template_functions().expect("template.yaml's functions") {
        let bootstrap = function.build_dir(&root).join(BOOTSTRAP);
        let bytes = fs::read(&bootstrap).unwrap_or_else(|_| panic!("{}", missing(&bootstrap)));
        let elf = Elf::parse(&bytes).expect("an ELF file");
        let highest = elf
            .highest_glibc()
            .unwrap_or_else(|| panic!("{} needs no glibc version at all", bootstrap.display()));
        assert!(
            highest <= PROVIDED_AL2023_GLIBC,
            "{} needs GLIBC_{highest}, provided.al2023 has {PROVIDED_AL2023_GLIBC}",
            bootstrap.display()
        );
    }
}

#[test]
fn each_zip_holds_just_the_built_bootstrap_executable_and_stays_under_5_mib() {
    let root = workspace_root();
    for function in template_functions().expect("template.yaml's functions") {
        let zip = function.zip(&root);
        let size = fs::metadata(&zip)
            .unwrap_or_else(|_| panic!("{}", missing(&zip)))
            .len();
        assert!(
            size <= MAX_ZIP_BYTES,
            "{} is {size} bytes, over {MAX_ZIP_BYTES}",
            zip.display()
        );
        let bootstrap = zipped_bootstrap(&zip).expect("the zip's bootstrap");
        let built = fs::read(function.build_dir(&root).join(BOOTSTRAP)).expect("built bootstrap");
        assert!(
            bootstrap.contents == built,
            "{} does not hold the bootstrap sam build made (stale zip?)",
            zip.display()
        );
    }
}

/// A loopback address where nothing listens, so any AWS call fails at once.
fn closed_endpoint() -> String {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}

/// Unpacks a function's zip as Lambda does and starts its `bootstrap` against a fake Runtime API
/// holding `event`, with the function's configuration and every AWS endpoint closed.
async fn run_packaged(binary: &str, event: &str, vars: &[(&str, &str)]) -> ColdStart {
    let root = workspace_root();
    let function = function(binary);
    let bootstrap = zipped_bootstrap(&function.zip(&root)).expect("the zip's bootstrap");
    let task_root = tempfile::tempdir().expect("temp dir");
    let path = task_root.path().join(BOOTSTRAP);
    fs::write(&path, &bootstrap.contents).expect("unpack");
    let mode = bootstrap.mode.expect("a unix mode");
    fs::set_permissions(&path, fs::Permissions::from_mode(mode)).expect("chmod");

    let aws = closed_endpoint();
    let logs = root.join("target/test-logs");
    fs::create_dir_all(&logs).expect("log dir");
    let log = logs.join(format!("artifact-{binary}.log"));
    let _ = fs::remove_file(&log);
    let mut launch = Launch::new(&path)
        .env("AWS_ENDPOINT_URL", aws.as_str())
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "artifact-check")
        .env("AWS_SECRET_ACCESS_KEY", "artifact-check")
        .env("AWS_LAMBDA_FUNCTION_NAME", format!("tgq-{binary}"))
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
        .env("LAMBDA_TASK_ROOT", task_root.path().display().to_string())
        .env("RUST_LOG", "info")
        .env("TGQ_BOT_ID", "demo")
        .env("TGQ_TABLE", "tgq-updates")
        .env(
            "TGQ_QUEUE_URL",
            format!("{aws}/123456789012/tgq-updates.fifo"),
        )
        .env(
            "TGQ_DLQ_URL",
            format!("{aws}/123456789012/tgq-updates-dlq.fifo"),
        );
    for (name, value) in vars {
        launch = launch.env(name, *value);
    }
    launch.current_dir = Some(task_root.path().to_path_buf());
    launch.log = Some(log.clone());
    launch.timeout = Duration::from_secs(20);
    match cold_start(&launch, Invocation::new(event.to_owned())).await {
        Ok(cold) => cold,
        Err(error) => panic!("{error}; its log:\n{}", read_log(&log)),
    }
}

fn read_log(path: &PathBuf) -> String {
    fs::read_to_string(path).unwrap_or_else(|error| format!("(no log: {error})"))
}

#[tokio::test]
async fn the_packaged_webhook_refuses_a_wrong_secret_with_401_without_calling_aws() {
    let cold = run_packaged(
        "webhook",
        include_str!("../../../events/webhook/wrong_secret.json"),
        &[("TGQ_WEBHOOK_SECRET", "tgq-example-secret")],
    )
    .await;
    assert_eq!(cold.answer.kind, AnswerKind::Response, "{cold:?}");
    // Any AWS call would have met the closed endpoint and turned the answer into a 503.
    assert_eq!(cold.answer.json()["statusCode"], 401, "{cold:?}");
}

#[tokio::test]
async fn the_packaged_worker_answers_an_empty_batch_with_no_failures() {
    let cold = run_packaged(
        "worker",
        include_str!("../../../events/sqs/empty.json"),
        &[
            ("TELEGRAM_BOT_TOKEN", "7000000001:artifact-check"),
            ("TELEGRAM_API_URL", "http://127.0.0.1:9"),
        ],
    )
    .await;
    assert_eq!(cold.answer.kind, AnswerKind::Response, "{cold:?}");
    assert_eq!(
        cold.answer.json(),
        serde_json::json!({"batchItemFailures": []}),
        "{cold:?}"
    );
}

/// cargo-lambda (and so `sam build`) builds with `panic = "abort"` unless the release profile names
/// a panic strategy; the worker catches a handler's panic with `catch_unwind`, which abort defeats.
#[test]
fn the_functions_are_built_without_the_cli_s_sign_in_providers() {
    // The tgq command signs in with IAM Identity Center (SSO) and credential_process profiles
    // (aws-config's `sso` and `credentials-process` features, in cli/Cargo.toml only); Lambda
    // hands the functions their role's credentials in the environment. The workspace's
    // default-members keep `sam build` (cargo lambda build --bin NAME from the workspace root)
    // from unifying the functions' features with the CLI's.
    let root = workspace_root();
    for function in template_functions().expect("template.yaml's functions") {
        let bootstrap = function.build_dir(&root).join(BOOTSTRAP);
        let bytes = fs::read(&bootstrap).unwrap_or_else(|_| panic!("{}", missing(&bootstrap)));
        // The SSO portal's endpoint, which only aws-sdk-sso (the `sso` feature) brings.
        let marker = b"portal.sso";
        assert!(
            !bytes.windows(marker.len()).any(|w| w == marker),
            "{} links the SSO credential provider: the CLI's sign-in features leaked into the function",
            function.binary
        );
    }
}

#[test]
fn the_release_profile_keeps_panics_unwinding() {
    let manifest = fs::read_to_string(workspace_root().join("Cargo.toml")).expect("Cargo.toml");
    let manifest: toml::Table = toml::from_str(&manifest).expect("Cargo.toml is TOML");
    let panic = manifest
        .get("profile")
        .and_then(|profile| profile.get("release"))
        .and_then(|release| release.get("panic"))
        .and_then(|panic| panic.as_str());
    assert_eq!(
        panic,
        Some("unwind"),
        "[profile.release] must say panic = \"unwind\" explicitly"
    );
}

/// `sam build` builds both functions with cargo lambda on one workspace; side by side
/// (`parallel = true`) the two builds raced on a fresh clone and one failed with "File exists".
#[test]
fn sam_builds_the_functions_one_at_a_time() {
    let config =
        fs::read_to_string(workspace_root().join("samconfig.toml")).expect("samconfig.toml");
    let config: toml::Table = toml::from_str(&config).expect("samconfig.toml is TOML");
    let parallel = config
        .get("default")
        .and_then(|default| default.get("build"))
        .and_then(|build| build.get("parameters"))
        .and_then(|parameters| parameters.get("parallel"))
        .and_then(|parallel| parallel.as_bool());
    assert_ne!(
        parallel,
        Some(true),
        "samconfig.toml's [default.build.parameters] must not build in parallel"
    );
}
