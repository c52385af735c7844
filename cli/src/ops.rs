//! `tgq status`, `tgq outbox` and `tgq dlq list`: read the local store directly, or — while
//! `tgq local` holds it — ask the running instance over loopback at the address it wrote to
//! `<data-dir>/local.addr`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use tgq_core::record::Timestamp;
use tgq_embedded::{EmbeddedStore, StoreError, StoreOptions};

use crate::config::{ADDR_FILE, DEFAULT_DATA_DIR};

/// How many entries the list commands show when `--limit` is not given.
pub const DEFAULT_LIMIT: usize = 50;

/// Which local store to read.
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// The data directory of `tgq local`.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
}

/// `tgq status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// `tgq outbox`.
#[derive(Debug, Args)]
pub struct OutboxArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Show at most this many entries, oldest first.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_LIMIT)]
    limit: usize,
}

/// `tgq dlq …`.
#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// List dead letters, oldest first, leaving them in place.
    List(DlqListArgs),
}

/// `tgq dlq list`.
#[derive(Debug, Args)]
pub struct DlqListArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Show at most this many letters, oldest first.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_LIMIT)]
    limit: usize,
}

/// `tgq status`.
pub async fn status(args: StatusArgs) -> anyhow::Result<()> {
    let (value, running) = read(&args.store.data_dir, "/admin/status", |store| {
        status_json(
            store,
            tgq_core::clock::Clock::now(&tgq_core::clock::SystemClock),
        )
    })
    .await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print_status(&value, running);
    }
    Ok(())
}

/// `tgq outbox`.
pub async fn outbox(args: OutboxArgs) -> anyhow::Result<()> {
    let limit = args.limit;
    let route = format!("/admin/outbox?limit={limit}");
    let (value, _) = read(&args.store.data_dir, &route, move |store| {
        outbox_json(store, limit)
    })
    .await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print_outbox(&value);
    }
    Ok(())
}

/// `tgq dlq …`.
pub async fn dlq(command: DlqCommand) -> anyhow::Result<()> {
    let DlqCommand::List(args) = command;
    let limit = args.limit;
    let route = format!("/admin/dlq?limit={limit}");
    let (value, _) = read(&args.store.data_dir, &route, move |store| {
        dlq_json(store, limit)
    })
    .await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print_dlq(&value);
    }
    Ok(())
}

/// Queue depths, table sizes and counters, and the writer's group commits since this process
/// opened the store (operations per commit shows how well concurrent writes share an fsync).
pub fn status_json(store: &EmbeddedStore, now: Timestamp) -> anyhow::Result<Value> {
    Ok(json!({
        "stats": store.stats(now)?,
        "counters": store.counters()?,
        "writer": { "commits": store.commits(), "operations": store.ops_committed() },
    }))
}

/// Up to `limit` outbox entries, oldest first.
pub fn outbox_json(store: &EmbeddedStore, limit: usize) -> anyhow::Result<Value> {
    Ok(serde_json::to_value(store.outbox(limit)?)?)
}

/// Up to `limit` dead letters, oldest first.
pub fn dlq_json(store: &EmbeddedStore, limit: usize) -> anyhow::Result<Value> {
    let letters = store.dead_letters(limit)?;
    Ok(Value::Array(
        letters
            .into_iter()
            .map(|letter| {
                json!({
                    "bot_id": letter.bot_id.as_str(),
                    "update_id": letter.update_id.map(|id| id.0),
                    "group": letter.group.as_ref().map(|group| group.as_str()),
                    "reason": letter.reason,
                    "error_class": letter.error_class,
                    "error": letter.error,
                    "attempts": letter.attempts,
                    "body": String::from_utf8_lossy(&letter.body),
                })
            })
            .collect(),
    ))
}

/// Reads through the store when it is free, else through the running instance's admin route.
/// Returns the instance's address when it answered.
async fn read<F>(
    data_dir: &Path,
    route: &str,
    direct: F,
) -> anyhow::Result<(Value, Option<SocketAddr>)>
where
    F: FnOnce(&EmbeddedStore) -> anyhow::Result<Value> + Send + 'static,
{
    if !data_dir.join(tgq_embedded::FILE_NAME).exists() {
        bail!(
            "there is no tgq store in {}: run `tgq local` first, or pass --data-dir",
            data_dir.display()
        );
    }
    let dir = data_dir.to_owned();
    let opened =
        tokio::task::spawn_blocking(move || EmbeddedStore::open(&dir, StoreOptions::default()))
            .await?;
    match opened {
        Ok(store) => {
            let value = tokio::task::spawn_blocking(move || direct(&store)).await??;
            Ok((value, None))
        }
        Err(StoreError::AlreadyOpen { .. }) => {
            let addr = running_addr(data_dir)?;
            Ok((get(addr, route).await?, Some(addr)))
        }
        Err(error) => Err(error.into()),
    }
}

/// The address a running `tgq local` wrote, made reachable over loopback.
fn running_addr(data_dir: &Path) -> anyhow::Result<SocketAddr> {
    let path = data_dir.join(ADDR_FILE);
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "the store in {} is held by another process, but {} cannot be read: \
             is `tgq local` still starting?",
            data_dir.display(),
            path.display()
        )
    })?;
    let addr: SocketAddr = text
        .trim()
        .parse()
        .with_context(|| format!("{} does not hold a socket address", path.display()))?;
    Ok(loopback(addr))
}

/// A server listening on every interface (0.0.0.0 or ::) is reached over loopback.
pub fn loopback(addr: SocketAddr) -> SocketAddr {
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port())
}

/// GETs an admin route and unwraps its `{"ok", "result"}` answer.
async fn get(addr: SocketAddr, route: &str) -> anyhow::Result<Value> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let mut request = client.get(format!("http://{addr}{route}"));
    if let Ok(token) = std::env::var("TGQ_ADMIN_TOKEN") {
        if !token.is_empty() {
            request = request.bearer_auth(token);
        }
    }
    let response = request
        .send()
        .await
        .with_context(|| format!("the running tgq local at {addr} does not answer"))?;
    let status = response.status();
    let body: Value = response.json().await.with_context(|| {
        format!("the running tgq local at {addr} answered {status} without JSON")
    })?;
    let result = body.get("result").cloned().unwrap_or(Value::Null);
    if !status.is_success() {
        bail!(
            "the running tgq local at {addr} answered {status}: {}",
            text_of(&result)
        );
    }
    Ok(result)
}

fn text_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

fn print_status(value: &Value, running: Option<SocketAddr>) {
    let stats = &value["stats"];
    let counters = &value["counters"];
    let number = |v: &Value| v.as_u64().unwrap_or(0);
    let oldest = match stats["oldest_pending_age_ms"].as_u64() {
        Some(ms) => format!(
            ", oldest sent {} ago",
            human_duration(Duration::from_millis(ms))
        ),
        None => String::new(),
    };
    println!(
        "queue          {} pending, {} in flight{oldest}",
        number(&stats["pending"]),
        number(&stats["in_flight"])
    );
    println!("dead letters   {}", number(&stats["dead"]));
    println!("outbox         {}", number(&stats["outbox"]));
    println!("records        {}", number(&stats["records"]));
    println!("counters (since the store was created)");
    for (name, label) in [
        ("received", "received"),
        ("duplicates", "duplicates"),
        ("poison", "poison"),
        ("processed", "processed"),
        ("retried", "retried"),
        ("dead_lettered", "dead-lettered"),
        (
            "resent_after_unknown_outcome",
            "re-sent after unknown outcome",
        ),
    ] {
        if let Some(count) = counters[name].as_u64() {
            println!("  {label:<30} {count}");
        }
    }
    match running {
        Some(addr) => println!("(from the running tgq local at {addr})"),
        None => println!("(read from the store; tgq local is not running)"),
    }
}

fn print_outbox(value: &Value) {
    let entries = value.as_array().map(Vec::as_slice).unwrap_or_default();
    if entries.is_empty() {
        println!("The outbox is empty: the bot has not sent anything offline yet.");
        return;
    }
    println!(
        "{:>6}  {:>15}  {:>11}  {:>3}  {:<20}  TEXT",
        "ID", "CHAT", "UPDATE", "SEQ", "METHOD"
    );
    for entry in entries {
        println!(
            "{:>6}  {:>15}  {:>11}  {:>3}  {:<20}  {}",
            dash(&entry["id"]),
            dash(&entry["chat_id"]),
            dash(&entry["update_id"]),
            dash(&entry["seq"]),
            entry["method"].as_str().unwrap_or("?"),
            one_line(entry["text"].as_str().unwrap_or(""), 80),
        );
    }
}

fn print_dlq(value: &Value) {
    let letters = value.as_array().map(Vec::as_slice).unwrap_or_default();
    if letters.is_empty() {
        println!("No dead letters.");
        return;
    }
    println!(
        "{:>11}  {:<16}  {:<22}  {:<10}  {:>8}  ERROR",
        "UPDATE", "GROUP", "REASON", "CLASS", "ATTEMPTS"
    );
    for letter in letters {
        println!(
            "{:>11}  {:<16}  {:<22}  {:<10}  {:>8}  {}",
            dash(&letter["update_id"]),
            letter["group"].as_str().unwrap_or("-"),
            letter["reason"].as_str().unwrap_or("?"),
            letter["error_class"].as_str().unwrap_or("?"),
            dash(&letter["attempts"]),
            one_line(letter["error"].as_str().unwrap_or(""), 80),
        );
    }
}

/// A JSON scalar for a table cell, `-` when absent.
fn dash(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Text on one line, cut at `max` characters.
pub fn one_line(text: &str, max: usize) -> String {
    let joined = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" / ");
    match joined.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &joined[..cut]),
        None => joined,
    }
}

/// `850 ms`, `4.2 s`, `3 min 5 s`, `2 h 10 min`.
pub fn human_duration(d: Duration) -> String {
    let secs = d.as_secs();
    match secs {
        0 => format!("{} ms", d.as_millis()),
        1..=59 => format!("{:.1} s", d.as_secs_f64()),
        60..=3599 => format!("{} min {} s", secs / 60, secs % 60),
        _ => format!("{} h {} min", secs / 3600, secs % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_listening_everywhere_is_reached_over_loopback() {
        let any: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        assert_eq!(
            loopback(any),
            "127.0.0.1:8080".parse::<SocketAddr>().unwrap()
        );
        let v6: SocketAddr = "[::]:9".parse().unwrap();
        assert_eq!(loopback(v6), "[::1]:9".parse::<SocketAddr>().unwrap());
    }

    #[test]
    fn table_cells_stay_on_one_line() {
        assert_eq!(
            one_line("/start – a\n/help – b", 80),
            "/start – a / /help – b"
        );
        assert_eq!(one_line("abcdef", 3), "abc…");
        assert_eq!(human_duration(Duration::from_millis(4200)), "4.2 s");
        assert_eq!(human_duration(Duration::from_secs(185)), "3 min 5 s");
    }
}
