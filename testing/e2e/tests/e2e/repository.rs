//! The repository tells one story: README names the Rust version Cargo.toml requires, the LICENSE
//! file is the license Cargo.toml names, README's map of the code names paths that exist, every
//! comment that cites the architecture or a design doc cites one, and a section of it, that
//! exists — and nothing cites a design document the repository does not contain, or one over
//! 15 KB — docs/CONFIGURATION.md lists every
//! setting with the default, the range and the template parameter the code and template.yaml have,
//! and cli/README.md every command `tgq` has.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use tgq_e2e::cargo::workspace_root;

fn read(path: &str) -> String {
    std::fs::read_to_string(workspace_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The value of `key = "…"` in the workspace's Cargo.toml.
fn workspace_setting(key: &str) -> String {
    let manifest = read("Cargo.toml");
    manifest
        .lines()
        .find_map(|line| {
            let value = line.strip_prefix(key)?.trim_start().strip_prefix('=')?;
            Some(value.trim().trim_matches('"').to_owned())
        })
        .unwrap_or_else(|| panic!("no {key} in Cargo.toml"))
}

#[test]
fn readme_states_the_rust_version_cargo_toml_requires() {
    let version = workspace_setting("rust-version");
    let readme = read("README.md");
    assert!(
        readme.contains(&format!("Rust {version}")),
        "README does not say `Rust {version}`"
    );
}

#[test]
fn readme_states_the_to_do_examples_length_as_it_is() {
    let lines = read("examples/todo/src/lib.rs").lines().count();
    let readme = read("README.md");
    assert!(
        readme.contains(&format!("a to-do list per chat in {lines} lines")),
        "README does not say the to-do example has its {lines} lines"
    );
}

#[test]
fn the_license_file_is_the_license_cargo_toml_names() {
    assert_eq!(workspace_setting("license"), "MIT");
    let license = read("LICENSE");
    assert_eq!(license.lines().next(), Some("MIT License"));
    assert!(license.contains("Permission is hereby granted, free of charge"));
}

#[test]
fn every_path_in_the_readme_map_exists() {
    let readme = read("README.md");
    let map = readme
        .split("## Map of the code")
        .nth(1)
        .expect("README has a map of the code");
    let mut checked = 0;
    for row in map.lines().take_while(|line| !line.starts_with("## ")) {
        let Some(first_cell) = row.strip_prefix("| `") else {
            continue;
        };
        // The cell's code spans are paths, and crate names (no `/` or `.`) in parentheses.
        let cell = first_cell.split('|').next().unwrap();
        for path in cell
            .split('`')
            .enumerate()
            .filter(|(index, _)| index % 2 == 0)
            .map(|(_, span)| span.trim())
            .filter(|span| span.contains('/') || span.contains('.'))
        {
            assert!(
                workspace_root().join(path).exists(),
                "README's map names {path}, which does not exist"
            );
            checked += 1;
        }
    }
    assert!(checked > 10, "only {checked} paths found in README's map");
}

/// Every source and document of the repository (not build output, tools or local data).
/// The `tgq` subcommands `crates/command/src/lib.rs` declares (its `Command` enum's variants, in kebab
/// case), less the hidden ones.
fn tgq_commands() -> Vec<String> {
    let main = read("crates/command/src/lib.rs");
    let body = main
        .split_once("enum Command {")
        .and_then(|(_, rest)| rest.split_once("\n}"))
        .expect("crates/command/src/lib.rs has enum Command")
        .0;
    let mut commands = Vec::new();
    let mut hidden = false;
    for line in body.lines() {
        let line = line.trim();
        if line.starts_with("#[command(") && line.contains("hide = true") {
            hidden = true;
            continue;
        }
        let Some(first) = line.chars().next().filter(char::is_ascii_uppercase) else {
            continue;
        };
        let name: String = line
            .chars()
            .take_while(char::is_ascii_alphanumeric)
            .collect();
        let mut kebab = first.to_ascii_lowercase().to_string();
        for c in name.chars().skip(1) {
            if c.is_ascii_uppercase() {
                kebab.push('-');
            }
            kebab.push(c.to_ascii_lowercase());
        }
        if !std::mem::take(&mut hidden) {
            commands.push(kebab);
        }
    }
    commands
}

#[test]
fn the_cli_readme_lists_every_command() {
    let readme = read("cli/README.md");
    // The first cell of each row of its table of commands.
    let rows: Vec<&str> = readme
        .lines()
        .filter_map(|line| line.strip_prefix("| `tgq "))
        .collect();
    let commands = tgq_commands();
    assert!(
        commands.len() >= 12,
        "only {commands:?} found in crates/command/src/lib.rs"
    );
    let missing: Vec<&String> = commands
        .iter()
        .filter(|c| !rows.iter().any(|row| row.starts_with(&format!("{c} "))))
        .collect();
    assert!(
        missing.is_empty(),
        "cli/README.md's table lacks `tgq {missing:?}`"
    );
}

fn repository_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !["target", ".git", ".venv", ".tgq", ".aws-sam"].contains(&name.as_str()) {
                    walk(&path, files);
                }
            } else if [".rs", ".md", ".toml", ".yaml", ".sh"]
                .iter()
                .any(|ext| name.ends_with(ext))
            {
                files.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&workspace_root(), &mut files);
    files
}

/// The most a design doc, or the architecture's map, may hold: what a newcomer reads in a sitting.
const MOST_DOC_BYTES: usize = 15_000;

#[test]
fn architecture_citations_name_sections_that_exist_and_nothing_cites_an_absent_design() {
    // Spelled in parts so that this file does not match itself.
    let absent = ["DESIGN", ".md"].concat();
    let absent_section = ["DESIGN", " §"].concat();
    let cites = [
        ["docs/ARCHITECTURE", ".md"].concat(),
        ["docs/design/", ""].concat(),
    ];
    let mut citations = 0;
    for file in repository_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let shown = file
            .strip_prefix(workspace_root())
            .unwrap_or(&file)
            .display();
        assert!(
            !text.contains(&absent) && !text.contains(&absent_section),
            "{shown} cites a design document the repository does not hold"
        );
        for cite in &cites {
            for cited in text.split(cite.as_str()).skip(1) {
                let name: String = cited
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
                    .collect();
                // A folder named on its own (`docs/design/`) is not a citation of a doc.
                let Some(doc) = cited_doc(cite, &name) else {
                    continue;
                };
                let path = workspace_root().join(&doc);
                let Ok(cited_text) = std::fs::read_to_string(&path) else {
                    panic!("{shown} cites {doc}, which the repository does not hold");
                };
                let after = &cited[name.len()..];
                if let Some(section) = after.strip_prefix(" §") {
                    let section: String =
                        section.chars().take_while(char::is_ascii_digit).collect();
                    assert!(
                        cited_text.contains(&format!("\n## §{section} ")),
                        "{shown} cites section {section:?} of {doc}, which has none such"
                    );
                }
                citations += 1;
            }
        }
    }
    assert!(citations > 100, "only {citations} citations found");
}

/// The doc a citation names: the architecture's map, or the design doc `name` (`worker.md`).
fn cited_doc(cite: &str, name: &str) -> Option<String> {
    if cite.ends_with(".md") {
        return Some(cite.to_owned());
    }
    let name = name.trim_end_matches('.');
    name.ends_with(".md").then(|| format!("{cite}{name}"))
}

#[test]
fn the_architecture_and_each_design_doc_can_be_read_in_a_sitting() {
    let mut docs = vec![workspace_root().join("docs/ARCHITECTURE.md")];
    let design = std::fs::read_dir(workspace_root().join("docs/design")).unwrap();
    docs.extend(design.map(|entry| entry.unwrap().path()));
    assert!(docs.len() > 5, "the design docs are in docs/design/");
    for doc in docs {
        let bytes = std::fs::metadata(&doc).unwrap().len() as usize;
        assert!(
            bytes <= MOST_DOC_BYTES,
            "{} holds {bytes} bytes, over the {MOST_DOC_BYTES} a reader takes in at a sitting",
            doc.display()
        );
    }
}

#[test]
fn the_localstack_scripts_name_every_tool_they_lack_and_how_to_install_it() {
    // A PATH with the shell's basics and none of the tools: each script stops before touching
    // anything and names them all.
    for (script, tools) in [
        (
            "infra/localstack/deploy.sh",
            &[
                "samlocal",
                "'sam'",
                "awslocal",
                "'aws'",
                "cargo-lambda",
                "zig",
            ][..],
        ),
        (
            "infra/localstack/teardown.sh",
            &["samlocal", "awslocal", "'aws'"][..],
        ),
    ] {
        let output = std::process::Command::new("/bin/bash")
            .arg(workspace_root().join(script))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{script}");
        for tool in tools {
            assert!(stderr.contains(tool), "{script} names {tool}: {stderr}");
        }
        assert!(stderr.contains("pip install"), "{script}: {stderr}");
    }
}

// ---------------------------------------------------------------- docs/CONFIGURATION.md

/// The rows of the table in `doc`'s section `heading` (a `## ` heading), each split into its
/// cells; the header row and the separator are left out.
fn table_rows(doc: &str, heading: &str) -> Vec<Vec<String>> {
    let section = doc
        .split(&format!("\n## {heading}\n"))
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .unwrap_or_else(|| panic!("the document has a section {heading:?}"));
    let rows: Vec<Vec<String>> = section
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2)
        .map(|line| {
            line.trim()
                .trim_matches('|')
                .split('|')
                .map(|cell| cell.trim().to_owned())
                .collect()
        })
        .collect();
    assert!(!rows.is_empty(), "the section {heading:?} has a table");
    rows
}

/// The code spans of a table cell, in order.
fn spans(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// A measure as the docs write it: `2 s`, `250 ms`, `5 min`, `24 h`, `15 days`, `512 KiB`, `1 MiB`,
/// `64 bytes`, or a bare number; in milliseconds, bytes or itself.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Measure {
    Millis(f64),
    Bytes(f64),
    Number(f64),
}

fn measure(text: &str) -> Option<Measure> {
    let (number, unit) = text.trim().split_once(' ').unwrap_or((text.trim(), ""));
    let n: f64 = number.replace([',', '_'], "").parse().ok()?;
    Some(match unit {
        "" => Measure::Number(n),
        "ms" => Measure::Millis(n),
        "s" => Measure::Millis(n * 1e3),
        "min" => Measure::Millis(n * 60e3),
        "h" => Measure::Millis(n * 3600e3),
        "days" => Measure::Millis(n * 86_400e3),
        "bytes" => Measure::Bytes(n),
        "KiB" => Measure::Bytes(n * 1024.0),
        "MiB" => Measure::Bytes(n * 1024.0 * 1024.0),
        _ => return None,
    })
}

/// What a cell's parenthesised conversions, `(2 s)` or `(512 KiB)`, say the value is.
fn conversions(cell: &str) -> Vec<Measure> {
    cell.split('(')
        .skip(1)
        .filter_map(|rest| measure(rest.split(')').next()?))
        .collect()
}

/// The Rust sources of the repository outside its tests and test harnesses: what the binaries
/// (with the fake Bot API `tgq fake-telegram` serves), the drill and the benches are built from.
fn product_sources() -> Vec<(PathBuf, String)> {
    repository_files()
        .into_iter()
        .filter(|file| file.extension().is_some_and(|ext| ext == "rs"))
        .filter(|file| {
            let relative = file.strip_prefix(workspace_root()).unwrap_or(file);
            !relative
                .components()
                .any(|part| part.as_os_str() == "tests")
                && !relative.starts_with("testing/e2e")
                && !relative.starts_with("testing/artifact")
        })
        .map(|file| {
            let text = std::fs::read_to_string(&file).unwrap();
            (file, text)
        })
        .collect()
}

/// The value of `const NAME: T = value;` in the product's sources: a string literal's contents,
/// or a number (`Duration::from_secs(5 * 60)` in seconds).
fn source_const(sources: &[(PathBuf, String)], name: &str) -> String {
    let needle = format!("const {name}: ");
    let value = sources
        .iter()
        .find_map(|(_, text)| {
            let rest = &text[text.find(&needle)?..];
            let value = rest.split_once('=')?.1.split(';').next()?.trim();
            Some(value.to_owned())
        })
        .unwrap_or_else(|| panic!("no `const {name}` in the sources"));
    literal(&value)
}

/// A Rust literal or a product of integers, as the docs write it.
fn literal(value: &str) -> String {
    if let Some(text) = value.strip_prefix('"') {
        return text.trim_end_matches('"').to_owned();
    }
    let number = value
        .strip_prefix("Duration::from_secs(")
        .map_or(value, |inner| inner.trim_end_matches(')'));
    let product: Option<u64> = number
        .split('*')
        .map(|factor| factor.trim().replace('_', "").parse::<u64>().ok())
        .product();
    product.map_or_else(|| value.to_owned(), |n| n.to_string())
}

/// Every `--flag` of the `tgq` command (and `tgq-drill`) declared with a default, with its
/// defaults: clap's `default_value` or `default_value_t` on the field the flag is named after.
fn flag_defaults(sources: &[(PathBuf, String)]) -> std::collections::BTreeMap<String, Vec<String>> {
    let is_field = |line: &str| {
        let line = line.strip_prefix("pub ").unwrap_or(line);
        line.split_once(": ").is_some_and(|(name, _)| {
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        })
    };
    let mut flags: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for (file, text) in sources {
        // The benches' flags are theirs (docs/PERFORMANCE.md); the drill's are listed.
        let relative = file.strip_prefix(workspace_root()).unwrap_or(file);
        if relative.starts_with("tools") && !relative.starts_with("tools/drill") {
            continue;
        }
        let mut attributes = String::new();
        for line in text.lines().map(str::trim) {
            if line.starts_with("//") {
                continue;
            }
            if is_field(line) && attributes.contains("#[arg(") {
                let field = line
                    .strip_prefix("pub ")
                    .unwrap_or(line)
                    .split(':')
                    .next()
                    .unwrap();
                let long = attributes
                    .split("long = \"")
                    .nth(1)
                    .and_then(|rest| rest.split('"').next())
                    .map_or_else(|| field.replace('_', "-"), str::to_owned);
                let default = ["default_value_t = ", "default_value = "]
                    .iter()
                    .find_map(|key| attributes.split(key).nth(1));
                if let (true, Some(default)) = (attributes.contains("long"), default) {
                    let expression = match default.strip_prefix('"') {
                        Some(quoted) => quoted.split('"').next().unwrap().to_owned(),
                        None => default
                            .split(|c: char| c == ',' || c == ')' || c.is_whitespace())
                            .next()
                            .unwrap()
                            .to_owned(),
                    };
                    let value = match expression.rsplit_once("::") {
                        // A value enum's variant, as clap spells it.
                        Some((_, variant)) => variant.to_lowercase(),
                        None if expression
                            .chars()
                            .all(|c| c.is_ascii_uppercase() || c == '_') =>
                        {
                            source_const(sources, &expression)
                        }
                        None => expression,
                    };
                    flags.entry(format!("--{long}")).or_default().push(value);
                }
                attributes.clear();
            } else if is_field(line)
                || line.is_empty()
                || line.ends_with('{')
                || line.ends_with('}')
            {
                attributes.clear();
            } else {
                attributes.push_str(line);
                attributes.push(' ');
            }
        }
    }
    flags
}

/// Each environment variable's default, as the code has it when the variable is unset: the values
/// the docs must show in code spans (none for a variable without a default).
fn environment_defaults(
    sources: &[(PathBuf, String)],
) -> std::collections::BTreeMap<&'static str, Vec<String>> {
    use tgq_core::config::Vars;
    use tgq_core::leadership;

    let unset = Vars::default();
    let retry = unset
        .retry_policy()
        .expect("the retry policy reads when nothing is set");
    let rates = unset
        .rate_limits()
        .expect("the rate limits read when nothing is set");
    let one = |value: &dyn ToString| vec![value.to_string()];
    let rate = |limit: Option<u32>| limit.map(|n| n.to_string()).into_iter().collect::<Vec<_>>();
    // The accepted spellings that read as an unset variable does.
    fn as_unset<T: PartialEq>(
        name: &str,
        choices: &[&str],
        read: impl Fn(&Vars) -> T,
    ) -> Vec<String> {
        let unset = read(&Vars::default());
        choices
            .iter()
            .filter(|choice| read(&Vars::from_pairs([(name, **choice)])) == unset)
            .map(|choice| (*choice).to_owned())
            .collect()
    }
    let none = Vec::new;
    std::collections::BTreeMap::from([
        ("TGQ_BOT_ID", vec![source_const(sources, "LOCAL_BOT_ID")]),
        ("TGQ_BOTS_PARAMETER_PREFIX", none()),
        (
            "TGQ_REGISTRY_REFRESH_SECS",
            one(&unset.registry_refresh().unwrap().as_secs()),
        ),
        ("TGQ_WEBHOOK_SECRET", none()),
        ("TGQ_WEBHOOK_SECRET_PARAM", none()),
        ("TELEGRAM_BOT_TOKEN", none()),
        ("TELEGRAM_BOT_TOKEN_PARAM", none()),
        ("TELEGRAM_API_URL", one(&unset.telegram_api_url().unwrap())),
        (
            "TGQ_HANDLER",
            as_unset("TGQ_HANDLER", &["bot", "echo"], Vars::handler),
        ),
        ("TGQ_TABLE", none()),
        ("TGQ_QUEUE_URL", none()),
        ("TGQ_DLQ_URL", none()),
        ("TGQ_TIMERS_QUEUE_URL", none()),
        ("TGQ_TIMERS_QUEUE_ARN", none()),
        ("TGQ_SCHEDULE_GROUP", none()),
        ("TGQ_SCHEDULER_ROLE_ARN", none()),
        (
            "TGQ_TIMER_QUEUE_REACH_SECS",
            one(&tgq_core::timer::MAX_TIMER_HOLD.as_secs()),
        ),
        ("TGQ_BROADCASTS_QUEUE_URL", none()),
        ("TGQ_BROADCASTS_QUEUE_ARN", none()),
        ("TGQ_BROADCAST_CHUNK", one(&tgq_core::broadcast::CHUNK)),
        ("TGQ_STACK", none()),
        ("TGQ_MAX_ATTEMPTS", one(&retry.max_attempts)),
        ("TGQ_BACKOFF_BASE_MS", one(&retry.base.as_millis())),
        ("TGQ_BACKOFF_CAP_MS", one(&retry.cap.as_millis())),
        (
            "TGQ_MAX_RETRY_AGE_SECS",
            one(&retry.max_retry_age.as_secs()),
        ),
        (
            "TGQ_MAX_RECEIVE_COUNT",
            one(&unset.max_receive_count().unwrap()),
        ),
        (
            "TGQ_DEAD_LETTER_GONE_RECIPIENTS",
            as_unset(
                "TGQ_DEAD_LETTER_GONE_RECIPIENTS",
                &["true", "false"],
                Vars::gone_recipients,
            ),
        ),
        (
            "TGQ_ACK_CALLBACKS",
            as_unset("TGQ_ACK_CALLBACKS", &["true", "false"], Vars::ack_callbacks),
        ),
        (
            "TGQ_PRE_CHECKOUT_MARGIN_MS",
            one(&unset.pre_checkout().unwrap().margin.as_millis()),
        ),
        (
            "TGQ_PRE_CHECKOUT_REFUSAL",
            one(&unset.pre_checkout().unwrap().refusal),
        ),
        ("TGQ_RATE_PER_SECOND", rate(rates.per_second)),
        (
            "TGQ_RATE_PER_CHAT_PER_SECOND",
            rate(rates.per_chat_per_second),
        ),
        (
            "TGQ_RATE_PER_GROUP_PER_MINUTE",
            rate(rates.per_group_per_minute),
        ),
        ("TGQ_ALLOWED_SOURCE_CIDRS", none()),
        ("TGQ_MAX_BODY_BYTES", one(&unset.max_body_bytes().unwrap())),
        (
            "TGQ_RECORD_TTL_SECS",
            one(&unset.record_ttl().unwrap().as_secs()),
        ),
        (
            "TGQ_PURGE_INTERVAL_SECS",
            vec![source_const(sources, "DEFAULT_PURGE_INTERVAL")],
        ),
        (
            "TGQ_WORKER_LOOPS",
            vec![source_const(sources, "DEFAULT_WORKER_LOOPS")],
        ),
        (
            "TGQ_WORKER_BATCH",
            vec![source_const(sources, "DEFAULT_WORKER_BATCH")],
        ),
        ("TGQ_ADMIN_TOKEN", none()),
        ("TGQ_LEASE_TTL_SECS", one(&leadership::LEASE_TTL.as_secs())),
        (
            "TGQ_LEASE_RENEW_SECS",
            one(&leadership::RENEW_EVERY.as_secs()),
        ),
        (
            "TGQ_LEASE_COOLDOWN_SECS",
            one(&leadership::COOLDOWN.as_secs()),
        ),
        ("TGQ_LOG_FORMAT", none()),
        ("TGQ_TOOLS_DIR", none()),
        ("TGQ_STARTED_IN_BOT_CRATE", none()),
        ("TGQ_FUNCTION", none()),
        ("RUST_LOG", one(&tgq_aws::DEFAULT_LOG_FILTER)),
        ("TOKIO_WORKER_THREADS", none()),
        ("AWS_ENDPOINT_URL", none()),
        ("AWS_REGION", none()),
        ("BOT_USERNAME", none()),
    ])
}

/// What the docs' value of a base-unit setting (`…_MS`, `…_SECS`, `…_BYTES`) measures.
fn setting_measure(name: &str, value: &str) -> Option<Measure> {
    let n: f64 = value.parse().ok()?;
    Some(match name {
        _ if name.ends_with("_MS") => Measure::Millis(n),
        _ if name.ends_with("_SECS") => Measure::Millis(n * 1e3),
        _ if name.ends_with("_BYTES") => Measure::Bytes(n),
        _ => Measure::Number(n),
    })
}

/// A fixed limit of the code, by the name the docs give it: a constant of `tgq-core`, or a number
/// the `tgq` command keeps to itself (`share::BUSY_PER_SECOND`), read from its source.
fn fixed_limit(sources: &[(PathBuf, String)], name: &str) -> Measure {
    use std::time::Duration;
    use tgq_core::defaults;
    let time = |d: Duration| Measure::Millis(d.as_secs_f64() * 1e3);
    let bytes = |n: usize| Measure::Bytes(n as f64);
    match name {
        "defaults::WORKER_TIMEOUT" => time(defaults::WORKER_TIMEOUT),
        "defaults::DEADLINE_MARGIN" => time(defaults::DEADLINE_MARGIN),
        "defaults::STORE_PATIENCE" => time(defaults::STORE_PATIENCE),
        "defaults::TELEGRAM_TIMEOUT" => time(defaults::TELEGRAM_TIMEOUT),
        "defaults::AWS_OPERATION_TIMEOUT" => time(defaults::AWS_OPERATION_TIMEOUT),
        "defaults::MAX_INLINE_WAIT" => time(defaults::MAX_INLINE_WAIT),
        "defaults::SHARED_INLINE_WAIT" => time(defaults::SHARED_INLINE_WAIT),
        "defaults::MAX_VISIBILITY" => time(defaults::MAX_VISIBILITY),
        "defaults::DEDUP_WINDOW" => time(defaults::DEDUP_WINDOW),
        "defaults::MAX_ITEM_BYTES" => bytes(defaults::MAX_ITEM_BYTES),
        "defaults::MAX_MESSAGE_BYTES" => bytes(defaults::MAX_MESSAGE_BYTES),
        "defaults::RECEIVE_WARNING_SHARE" => Measure::Number(defaults::RECEIVE_WARNING_SHARE),
        "defaults::REGISTRY_MISS_REREAD" => time(defaults::REGISTRY_MISS_REREAD),
        "state::MAX_STATE_BYTES" => bytes(tgq_core::state::MAX_STATE_BYTES),
        "record::MAX_STEP_RESULT_BYTES" => bytes(tgq_core::record::MAX_STEP_RESULT_BYTES),
        "context::MAX_STEP_NAME_BYTES" => bytes(tgq_core::context::MAX_STEP_NAME_BYTES),
        "poller::POLL_TIMEOUT" => time(tgq_core::poller::POLL_TIMEOUT),
        "leadership::FLAP_WINDOW" => time(tgq_core::leadership::FLAP_WINDOW),
        "broadcast::OUTAGE_FIRST_WAIT" => time(tgq_core::broadcast::OUTAGE_FIRST_WAIT),
        "broadcast::OUTAGE_LONGEST_WAIT" => time(tgq_core::broadcast::OUTAGE_LONGEST_WAIT),
        "budget::LOOK_AGAIN_AFTER" => time(tgq_core::budget::LOOK_AGAIN_AFTER),
        "broadcast::KEEP_ENDED" => time(tgq_core::broadcast::KEEP_ENDED),
        "journal::JOURNAL_MAX_BYTES" => bytes(tgq_embedded::JOURNAL_MAX_BYTES),
        other => {
            let constant = other.rsplit("::").next().unwrap_or(other);
            let value = source_const(sources, constant).replace('_', "");
            match value.parse() {
                Ok(number) => Measure::Number(number),
                Err(_) => panic!("docs/CONFIGURATION.md lists a fixed limit {other} = {value}, which this test cannot read"),
            }
        }
    }
}

#[test]
fn the_configuration_guide_states_the_code_s_defaults_and_the_template_s_parameters() {
    let guide = read("docs/CONFIGURATION.md");
    let sources = product_sources();
    // The sources' text without backticks, where each range must be found in the code's words.
    let code_words: Vec<String> = sources
        .iter()
        .map(|(_, text)| text.replace('`', ""))
        .collect();

    // Environment variables: every one the code reads is listed, with the code's default.
    let expected = environment_defaults(&sources);
    let mut listed = BTreeSet::new();
    for row in table_rows(&guide, "Environment variables") {
        let [name, _read_by, default, range, _what] = &row[..] else {
            panic!("an environment variable's row has five cells: {row:?}");
        };
        let name = spans(name)[0];
        let code = expected
            .get(name)
            .unwrap_or_else(|| panic!("{name} is listed, and this test knows no default for it"));
        assert_eq!(&spans(default), code, "the default of {name}");
        for shown in conversions(default) {
            assert_eq!(
                Some(shown),
                setting_measure(name, &code[0]),
                "{name}: {default}"
            );
        }
        let words = range.replace('`', "");
        assert!(
            range == "—" || code_words.iter().any(|text| text.contains(&words)),
            "the range of {name}, {range:?}, is not in the code's words"
        );
        assert!(listed.insert(name.to_owned()), "{name} is listed twice");
    }
    let mut read_by_code = BTreeSet::new();
    for (_, text) in &sources {
        for quoted in text.split('"').skip(1).step_by(2) {
            let named = ["TGQ_", "TELEGRAM_"]
                .iter()
                .any(|prefix| quoted.starts_with(prefix));
            if named
                && quoted
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            {
                read_by_code.insert(quoted.to_owned());
            }
        }
    }
    let settings: BTreeSet<String> = tgq_core::config::SETTINGS
        .iter()
        .map(|name| (*name).to_owned())
        .collect();
    assert_eq!(
        settings.len(),
        tgq_core::config::SETTINGS.len(),
        "tgq_core::config::SETTINGS names one twice"
    );
    // The guide also lists the AWS SDK's own variables (which the tools pass on: the emulator is
    // reached through them) and the example bot's own setting.
    let not_tgq_s = ["AWS_ENDPOINT_URL", "AWS_REGION", "BOT_USERNAME"];
    let (missing, extra): (Vec<_>, Vec<_>) = (
        listed
            .difference(&settings)
            .filter(|name| !not_tgq_s.contains(&name.as_str()))
            .collect(),
        settings.difference(&listed).collect(),
    );
    assert!(
        missing.is_empty() && extra.is_empty(),
        "tgq_core::config::SETTINGS lacks {missing:?} and has {extra:?} besides docs/CONFIGURATION.md"
    );
    let unlisted: Vec<_> = read_by_code.difference(&listed).collect();
    assert!(
        unlisted.is_empty(),
        "the code reads {unlisted:?}, which docs/CONFIGURATION.md does not list"
    );
    let unknown: Vec<_> = expected
        .keys()
        .filter(|name| !listed.contains(**name))
        .collect();
    assert!(unknown.is_empty(), "{unknown:?} are not listed");

    // Flags: each default is the one clap declares, and every flag with a default is listed.
    let flags = flag_defaults(&sources);
    let mut flags_listed = BTreeSet::new();
    for row in table_rows(&guide, "Command-line flags") {
        let [flag, commands, default, _what] = &row[..] else {
            panic!("a flag's row has four cells: {row:?}");
        };
        let flag = spans(flag)[0];
        let declared = flags.get(flag).unwrap_or_else(|| {
            panic!("{flag} is listed, and no command declares a default for it")
        });
        let shown = spans(default);
        assert_eq!(
            shown.len(),
            1,
            "{flag} ({commands}): one default, {default}"
        );
        assert!(
            declared.iter().any(|value| value == shown[0]),
            "{flag} ({commands}) is listed with the default {default}; the code declares {declared:?}"
        );
        flags_listed.insert(flag.to_owned());
    }
    let unlisted: Vec<_> = flags
        .keys()
        .filter(|flag| !flags_listed.contains(*flag))
        .collect();
    assert!(
        unlisted.is_empty(),
        "{unlisted:?} have defaults docs/CONFIGURATION.md does not list"
    );

    // Template parameters: the same set, the same defaults, the same allowed values.
    let template: serde_yaml::Value = serde_yaml::from_str(&read("template.yaml")).unwrap();
    let parameters = template["Parameters"]
        .as_mapping()
        .expect("template.yaml has Parameters");
    let as_text = |value: &serde_yaml::Value| match value {
        serde_yaml::Value::String(text) => text.clone(),
        other => serde_yaml::to_string(other).unwrap().trim().to_owned(),
    };
    let mut documented = BTreeSet::new();
    for row in table_rows(&guide, "Template parameters") {
        let [name, default, allowed, _what] = &row[..] else {
            panic!("a template parameter's row has four cells: {row:?}");
        };
        let name = spans(name)[0];
        let parameter = parameters
            .get(name)
            .unwrap_or_else(|| panic!("{name} is listed, and template.yaml has no such parameter"));
        let code: Vec<String> = match parameter.get("Default").map(as_text) {
            None => {
                assert!(
                    default.contains("required"),
                    "{name} has no default: {default}"
                );
                Vec::new()
            }
            Some(text) if text.is_empty() => Vec::new(),
            Some(text) => vec![text],
        };
        assert_eq!(spans(default), code, "the default of {name}");
        let values: Vec<String> = match (
            parameter.get("AllowedValues"),
            parameter.get("MinValue"),
            parameter.get("MaxValue"),
            parameter.get("ConstraintDescription"),
        ) {
            (Some(values), _, _, _) => values.as_sequence().unwrap().iter().map(as_text).collect(),
            (None, Some(min), Some(max), _) => vec![as_text(min), as_text(max)],
            (None, _, _, Some(description)) => {
                assert_eq!(allowed, &as_text(description), "what {name} allows");
                Vec::new()
            }
            _ => Vec::new(),
        };
        let shown = spans(allowed);
        // A long list may be shortened to some of its values, its first and last among them.
        let shortened = values.len() > 5
            && shown.iter().all(|value| values.iter().any(|v| v == value))
            && shown.first().map(|v| v.to_string()) == values.first().cloned()
            && shown.last().map(|v| v.to_string()) == values.last().cloned();
        assert!(
            shown == values || shortened,
            "what {name} allows: {allowed} (template: {values:?})"
        );
        assert!(documented.insert(name.to_owned()), "{name} is listed twice");
    }
    let in_template: BTreeSet<String> = parameters.keys().map(as_text).collect();
    let missing: Vec<_> = in_template.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "template.yaml has {missing:?}, which docs/CONFIGURATION.md does not list"
    );

    // Fixed limits: each its constant.
    for row in table_rows(&guide, "Fixed limits") {
        let [name, value, _what] = &row[..] else {
            panic!("a fixed limit's row has three cells: {row:?}");
        };
        let name = spans(name)[0];
        let code = fixed_limit(&sources, name);
        let shown = spans(value)
            .first()
            .and_then(|text| measure(text))
            .unwrap_or_else(|| panic!("{name}'s value {value} is not a measure"));
        assert_eq!(shown, code, "{name}");
        for converted in conversions(value) {
            assert_eq!(converted, code, "{name}: {value}");
        }
    }
}

/// What `cargo tree` says `package` links (normal dependencies, transitively): one package name per
/// line.
fn linked_packages(package: &str) -> BTreeSet<String> {
    let output = tgq_e2e::cargo::command(&workspace_root())
        .args([
            "tree",
            "--offline",
            "-p",
            package,
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["--format", "{p}"])
        .output()
        .expect("running cargo tree");
    assert!(
        output.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn what_ships_links_no_test_kit_tool_or_other_function() {
    let tooling = [
        "tgq-drill",
        "tgq-e2e",
        "tgq-memory",
        "tgq-test",
        "tgq-conformance",
        "tgq-fake-lambda",
        "tgq-artifact",
        "tgq-bench",
        "tgq-coldstart",
        "tgq-warm",
    ];
    // The tgq command runs the fake Bot API when no token is given (offline local mode, `tgq
    // fake-telegram`); the functions never do.
    let shipped = [
        ("tgq-cli", &["tgq-webhook", "tgq-worker"][..], true),
        (
            "tgq-webhook",
            &["tgq-worker", "tgq-fake-telegram"][..],
            false,
        ),
        (
            "tgq-worker",
            &["tgq-webhook", "tgq-fake-telegram"][..],
            false,
        ),
    ];
    for (package, others, offline) in shipped {
        let linked = linked_packages(package);
        assert!(linked.contains("tgq-core"), "{package}: {linked:?}");
        assert_eq!(
            linked.contains("tgq-fake-telegram"),
            offline,
            "{package}: {linked:?}"
        );
        let wrong: Vec<_> = tooling
            .iter()
            .chain(others)
            .filter(|name| linked.contains(**name))
            .collect();
        assert!(wrong.is_empty(), "{package} links {wrong:?}");
    }
    // And every crate under crates/ is a dependency of something that ships.
    let mut shipped_crates = linked_packages("tgq-cli");
    shipped_crates.extend(linked_packages("tgq-worker"));
    for entry in std::fs::read_dir(workspace_root().join("crates")).unwrap() {
        let manifest = std::fs::read_to_string(entry.unwrap().path().join("Cargo.toml")).unwrap();
        let name = manifest
            .lines()
            .find_map(|line| line.strip_prefix("name = "))
            .map(|name| name.trim_matches('"').to_owned())
            .expect("a package name");
        assert!(
            shipped_crates.contains(&name),
            "crates/ holds {name}, which nothing that ships links: it belongs in testing/ or tools/"
        );
    }
}

/// tgq-core's layers, each a folder of `crates/core/src`, in the order docs/ARCHITECTURE.md §3
/// names them.
const CORE_LAYERS: [(&str, &str); 4] = [
    ("model", "model"),
    ("ports", "ports"),
    ("the bot's API", "bot"),
    ("use cases", "usecases"),
];

/// The modules of each of tgq-core's layers, by folder: the files of the folder but its `mod.rs`.
/// The private files of `ports/` hold what `crate::ports` names, and count as that module.
fn core_layer_modules() -> std::collections::BTreeMap<&'static str, BTreeSet<String>> {
    let src = workspace_root().join("crates/core/src");
    CORE_LAYERS
        .iter()
        .map(|(_, folder)| {
            let modules = std::fs::read_dir(src.join(folder))
                .unwrap_or_else(|e| panic!("crates/core/src/{folder}: {e}"))
                .filter_map(|entry| {
                    let name = entry.unwrap().file_name().to_string_lossy().into_owned();
                    name.strip_suffix(".rs").map(str::to_owned)
                })
                .filter(|name| name != "mod")
                .collect();
            (*folder, modules)
        })
        .collect()
}

/// The modules of `tgq-core` each module uses (`crate::name`, outside comments and its tests).
fn core_module_uses() -> std::collections::BTreeMap<String, BTreeSet<String>> {
    let src = workspace_root().join("crates/core/src");
    let ports_mod = std::fs::read_to_string(src.join("ports/mod.rs")).unwrap();
    // Each module's files: `folder/name.rs`, and for `ports` its mod.rs and private files.
    let mut files: std::collections::BTreeMap<String, Vec<PathBuf>> = Default::default();
    for (folder, modules) in core_layer_modules() {
        for module in modules {
            let file = src.join(folder).join(format!("{module}.rs"));
            let public = folder != "ports" || ports_mod.contains(&format!("pub mod {module};"));
            let name = if public { module } else { "ports".to_owned() };
            files.entry(name).or_default().push(file);
        }
    }
    files
        .entry("ports".to_owned())
        .or_default()
        .push(src.join("ports/mod.rs"));
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    files
        .iter()
        .map(|(module, paths)| {
            let uses = paths
                .iter()
                .flat_map(|path| {
                    let text = std::fs::read_to_string(path).unwrap();
                    let code = text
                        .split("#[cfg(test)]")
                        .next()
                        .unwrap_or_default()
                        .to_owned();
                    code.lines()
                        .filter(|line| !line.trim_start().starts_with("//"))
                        .flat_map(|line| {
                            line.split("crate::")
                                .skip(1)
                                .map(str::to_owned)
                                .collect::<Vec<_>>()
                        })
                        .collect::<Vec<_>>()
                })
                .map(|rest| {
                    rest.chars()
                        .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                        .collect::<String>()
                })
                .filter(|used| used != module && modules.contains(used))
                .collect();
            (module.clone(), uses)
        })
        .collect()
}

/// docs/ARCHITECTURE.md's layer map names each of tgq-core's layer folders and, for each, exactly
/// the modules in it; README's map names the same folders.
#[test]
fn the_layer_maps_match_tgq_core_s_folders() {
    let architecture = read("docs/ARCHITECTURE.md");
    let rows = table_rows(&architecture, "§3 Layers and ports");
    let layers = core_layer_modules();
    for (layer, folder) in CORE_LAYERS {
        let row = rows
            .iter()
            .find(|row| row[0] == layer)
            .unwrap_or_else(|| panic!("ARCHITECTURE §3 has no row for the layer {layer:?}"));
        let place = format!("crates/core/src/{folder}");
        let (_, listed) = row[1]
            .split_once(&format!("`{place}`:"))
            .unwrap_or_else(|| panic!("the {layer:?} row does not start at `{place}`: {}", row[1]));
        let listed = listed.split(';').next().unwrap_or_default();
        let named: BTreeSet<String> = spans(listed)
            .into_iter()
            .filter(|span| span.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
            .map(str::to_owned)
            .collect();
        assert_eq!(
            named, layers[folder],
            "ARCHITECTURE §3's {layer:?} row and the modules in {place}"
        );
    }
    let readme = read("README.md");
    let core_row = readme
        .lines()
        .find(|line| line.starts_with("| `crates/core` "))
        .expect("README's map has a row for crates/core");
    for (_, folder) in CORE_LAYERS {
        assert!(
            core_row.contains(&format!("`crates/core/src/{folder}`")),
            "README's map does not name crates/core/src/{folder}"
        );
    }
    let folders: BTreeSet<String> = std::fs::read_dir(workspace_root().join("crates/core/src"))
        .unwrap()
        .map(|entry| entry.unwrap())
        .filter(|entry| entry.file_type().unwrap().is_dir())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    let mapped: BTreeSet<String> = CORE_LAYERS.iter().map(|(_, f)| f.to_string()).collect();
    assert_eq!(folders, mapped, "crates/core/src's folders are its layers");
}

#[test]
fn tgq_core_s_modules_use_each_other_without_a_circle() {
    let uses = core_module_uses();
    assert!(uses["worker"].contains("ports"), "{:?}", uses["worker"]);
    // Depth-first, with the path so far: a module met again on the path closes a circle.
    fn visit(
        module: &str,
        uses: &std::collections::BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) {
        if let Some(at) = path.iter().position(|m| m == module) {
            panic!(
                "tgq-core's modules use each other in a circle: {} -> {module}",
                path[at..].join(" -> ")
            );
        }
        if done.contains(module) {
            return;
        }
        path.push(module.to_owned());
        for used in &uses[module] {
            visit(used, uses, path, done);
        }
        path.pop();
        done.insert(module.to_owned());
    }
    let mut done = BTreeSet::new();
    for module in uses.keys() {
        visit(module, &uses, &mut Vec::new(), &mut done);
    }
}
