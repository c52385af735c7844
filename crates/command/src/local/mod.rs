//! `tgq local`: the whole pipeline in one process (docs/design/local.md) — the webhook
//! endpoint, worker loops standing in for the SQS event source mapping, optional long polling,
//! retention, and the embedded store behind every port, with the same use cases the Lambdas run.
//! Besides the environment's bot (`/webhook`) it hosts the bots of `<data-dir>/bots.json`
//! (`/webhook/{bot_id}`, docs/design/fleet.md §2), read again within the refresh interval.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use tgq_core::bots::{BotRuntime, Connect, Fleet, RegistryBots};
use tgq_core::broadcast::BroadcastRunner;
use tgq_core::clock::{Clock, SystemClock};
use tgq_core::config::HandlerChoice;
use tgq_core::config::Vars;
use tgq_core::defaults;
use tgq_core::error::error_chain;
use tgq_core::handlers::HandlerRegistry;
use tgq_core::ingest::{Ingest, SharedSettings, WebhookPorts, Webhooks};
use tgq_core::pacer::Pacer;
use tgq_core::policy::RetryPolicy;
use tgq_core::registry::Registry;
use tgq_core::telegram::BotApi;
use tgq_core::worker::{Worker, WorkerPorts};
use tgq_core::BotConfig;
use tgq_embedded::{BotsFile, EmbeddedStore, OfflineBotApi, StoreOptions};
use tgq_telegram::HttpBotApi;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tracing::{error, info, warn};

use crate::config::{LocalSettings, SecretOrigin, UsageError, ADDR_FILE, WEBHOOK_ADDR_FILE};
use data_dir::DataDir;
use http::App;
use share::LoopShare;
use shutdown::Shutdown;
use worker_loop::{LoopSettings, LoopStats, Loops};

mod admin;
mod broadcasts;
mod console;
mod data_dir;
mod demo;
mod fixtures;
mod flood;
mod http;
mod share;
pub(crate) mod shutdown;
mod timers;
mod worker_loop;

/// `tgq local`.
#[derive(Debug, Args)]
#[command(after_help = "\
Environment (the same variables as the Lambda functions):
  TELEGRAM_BOT_TOKEN     the bot's token; without it the bot's sends go to the offline outbox
  TELEGRAM_API_URL       the Bot API base URL (default https://api.telegram.org)
  TGQ_BOT_ID             the bot's id in record keys and message groups (default `local`)
  TGQ_HANDLER            `bot` (the first handler of the bot's registry, default) or `echo` (the
                         built-in echo bot)
  TGQ_WEBHOOK_SECRET     the webhook secret; unset: generated once, kept in <data-dir>/webhook-secret
  TGQ_MAX_BODY_BYTES     the largest webhook body accepted (default 524288, 512 KiB)
  TGQ_MAX_ATTEMPTS, TGQ_BACKOFF_BASE_MS, TGQ_BACKOFF_CAP_MS   the retry budget and backoff
  TGQ_DEAD_LETTER_GONE_RECIPIENTS=true   dead-letter updates whose user blocked the bot or left
                         (default: settle them DONE as recipient_gone, counted in `tgq status`)
  TGQ_RECORD_TTL_SECS    how long records and outbox entries are kept (default 1296000, 15 days)
  TGQ_PURGE_INTERVAL_SECS  how often retention removes what outlived it (default 300)
  TGQ_WORKER_LOOPS       worker loops running at once (default 128; 4 take batches while the webhook is busy)
  TGQ_WORKER_BATCH       messages a worker loop receives at once (1 to 10, default 5)
  TGQ_REGISTRY_REFRESH_SECS  how often <data-dir>/bots.json (more bots, on /webhook/{bot_id}) is
                         read again (default 30)
  TGQ_ADMIN_TOKEN        lets non-loopback clients read /admin/* with `Authorization: Bearer …`
  TGQ_LOG_FORMAT=json    JSON log lines on stderr (RUST_LOG sets the level)")]
pub struct LocalArgs {
    /// Where Telegram's webhook requests come: `/webhook`, `/webhook/{bot_id}`, `/healthz` and
    /// `/readyz`, nothing else, so a proxy or tunnel to it exposes nothing more (port 0 picks a free
    /// port; the address used is written to <data-dir>/webhook.addr).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8080", value_parser = listen_addr)]
    addr: String,
    /// Where the console, `/admin/*` and `/metrics` are served: loopback, unless TGQ_ADMIN_TOKEN
    /// is set (the `tgq` commands find it in <data-dir>/local.addr).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8088", value_parser = listen_addr)]
    admin_addr: String,
    /// The one directory `POST /admin/backup` (and `tgq backup` while this instance runs) may
    /// write a backup into; without it, backups are taken only while tgq local is stopped.
    #[arg(long, value_name = "DIR")]
    backup_dir: Option<PathBuf>,
    /// Where the store, the generated webhook secret and local.addr live [default: ./.tgq; with
    /// --demo, a fresh directory for each run, removed when it ends].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Fetch updates from Telegram by long polling (getUpdates) instead of waiting for webhook
    /// requests. Needs TELEGRAM_BOT_TOKEN, and no webhook set for the bot.
    #[arg(long)]
    poll: bool,
    /// Send the example updates of events/ to this instance, then print what the bot did.
    /// Runs offline (no TELEGRAM_BOT_TOKEN).
    #[arg(long, conflicts_with = "poll")]
    demo: bool,
    /// With --demo: exit once the demo has settled and printed, instead of serving on.
    #[arg(long, requires = "demo")]
    exit: bool,
}

impl LocalArgs {
    /// Whether `--demo` was given.
    pub fn is_demo(&self) -> bool {
        self.demo
    }
}

/// `--addr`: a host (an IP address or a name that resolves) and a port. Read with the command line,
/// so that a mistake stops `tgq local` before it creates anything on disk.
fn listen_addr(text: &str) -> Result<String, String> {
    use std::net::ToSocketAddrs as _;
    match text.to_socket_addrs().map(|mut addrs| addrs.next()) {
        Ok(Some(_)) => Ok(text.to_owned()),
        Ok(None) => Err(format!("{text} names no address")),
        Err(e) => Err(format!(
            "{e}: expected HOST:PORT, e.g. 127.0.0.1:8080, 0.0.0.0:8443 or localhost:0"
        )),
    }
}

/// Binds `addr` (named on the command line by `flag`); the demo takes a free loopback port when
/// the default one is in use rather than fail.
async fn listen(addr: &str, flag: &str, demo: bool) -> anyhow::Result<TcpListener> {
    match TcpListener::bind(addr).await {
        Ok(listener) => Ok(listener),
        Err(e) if demo && e.kind() == std::io::ErrorKind::AddrInUse => {
            errln!("  note       {addr} is in use; the demo listens on a free port instead");
            TcpListener::bind("127.0.0.1:0")
                .await
                .context("cannot listen on a free loopback port")
        }
        Err(e) => Err(e).with_context(|| {
            format!("cannot listen on {addr} (choose another address with {flag})")
        }),
    }
}

/// The admin listener serves the bot's messages, dead letters and backups: on an address other
/// machines reach, only with a token they must present.
fn admin_reachable_only_by_its_operator(addr: &str, has_token: bool) -> anyhow::Result<()> {
    use std::net::ToSocketAddrs as _;
    let loopback = addr
        .to_socket_addrs()
        .map(|mut addrs| addrs.all(|a| a.ip().to_canonical().is_loopback()))
        .unwrap_or(false);
    if loopback || has_token {
        return Ok(());
    }
    Err(UsageError(format!(
        "--admin-addr {addr} is not a loopback address and TGQ_ADMIN_TOKEN is not set: the console \
         and /admin/* would answer anyone who reaches it. Set TGQ_ADMIN_TOKEN (clients then send \
         `Authorization: Bearer <token>`), or keep it on 127.0.0.1"
    ))
    .into())
}

/// `--backup-dir`: an existing directory, made absolute, so that what the admin route writes
/// stays inside it whatever the working directory.
fn backup_dir(dir: &Path) -> anyhow::Result<PathBuf> {
    let absolute = std::fs::canonicalize(dir)
        .with_context(|| format!("--backup-dir {} cannot be used", dir.display()))?;
    if !absolute.is_dir() {
        return Err(
            UsageError(format!("--backup-dir {} is not a directory", dir.display())).into(),
        );
    }
    Ok(absolute)
}

/// Runs local mode until SIGINT/SIGTERM (or the end of `--demo --exit`).
pub async fn run(args: LocalArgs) -> anyhow::Result<()> {
    let vars = Vars::from_env();
    let has_token = crate::config::bot_token(&vars)?.is_some();
    if args.poll && !has_token {
        return Err(UsageError(
            "--poll needs TELEGRAM_BOT_TOKEN: long polling asks Telegram for the bot's updates"
                .into(),
        )
        .into());
    }
    if args.demo && has_token {
        return Err(UsageError(
            "--demo runs offline so that its made-up chats get no real messages: unset TELEGRAM_BOT_TOKEN".into(),
        )
        .into());
    }
    let admin_token = crate::config::admin_token(&vars);
    admin_reachable_only_by_its_operator(&args.admin_addr, admin_token.is_some())?;
    let backup_dir = args.backup_dir.as_deref().map(backup_dir).transpose()?;
    // Listening first: an address that cannot be had stops the run before the data directory,
    // its secret or its store exist.
    let listener = listen(&args.addr, "--addr", args.demo).await?;
    let admin_listener = listen(&args.admin_addr, "--admin-addr", args.demo).await?;
    // Declared before the store, so that a temporary directory outlives it and goes last.
    let data = DataDir::choose(args.data_dir.clone(), args.demo)?;
    let mut settings = LocalSettings::from_vars(&vars, data.path())?;
    if args.poll {
        // Polled updates come with no request to answer: the handler answers its callback queries.
        settings.worker.ack_callbacks = false;
    }
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let data_dir = data.path().to_owned();
    let options = StoreOptions {
        ttl: settings.record_ttl,
        max_receive_count: settings.worker.max_receive_count,
        // A `tgq status` reading the stopped store is done within moments.
        lock_wait: Duration::from_secs(5),
        ..StoreOptions::default()
    };
    let store =
        tokio::task::spawn_blocking(move || EmbeddedStore::open(&data_dir, options)).await??;
    // This process holds the store's lock: no run of an earlier one can be alive, so what they still
    // held is released now rather than after a visibility timeout.
    let recovered = store
        .recover()
        .await
        .context("releasing what a previous run of tgq local held")?;
    if recovered.messages + recovered.leases + recovered.poller_leases > 0 {
        info!(
            messages = recovered.messages,
            leases = recovered.leases,
            poller_leases = recovered.poller_leases,
            "released what the previous run of tgq local still held"
        );
    }

    let addr = listener.local_addr()?;
    let admin_addr = admin_listener.local_addr()?;
    // The commands reach the admin routes through local.addr; webhook.addr is for whoever posts
    // updates (a bench, a test) to an instance that picked its own port.
    let addr_file = data.path().join(ADDR_FILE);
    let webhook_addr_file = data.path().join(WEBHOOK_ADDR_FILE);
    write_addr_file(&addr_file, admin_addr)?;
    write_addr_file(&webhook_addr_file, addr)?;

    // What the use cases count, served at /metrics in the Prometheus text format, each metric
    // labelled with its bot.
    let metrics = crate::prometheus::install()?;

    let shutdown = Shutdown::new();
    shutdown.on_signals()?;
    let loop_settings = LoopSettings {
        loops: settings.worker_loops,
        batch_size: settings.worker_batch,
        ..LoopSettings::default()
    };
    let loops = Arc::new(LoopStats::default());
    // One registry for the webhook and the worker loops: read at most once per interval.
    let registry = Arc::new(Registry::new(
        Arc::new(BotsFile::in_dir(data.path())),
        settings.registry_refresh,
    ));
    let webhooks = webhooks(&settings, &store, &clock, registry.clone());
    let bots = Arc::new(bots(&settings, &vars, &store, registry).await?);
    // One pacer for every worker loop: Telegram's limits are per bot, not per loop. Its flood
    // waits outlive the process.
    let (waits, remembered) = flood::FloodWaits::open(data.path());
    let waits = Arc::new(waits);
    let pacer = Arc::new(Pacer::remembering(
        settings.rate_limits,
        waits.clone(),
        &remembered,
    ));
    let mut tasks: JoinSet<anyhow::Result<()>> = JoinSet::new();

    let share = Arc::new(LoopShare::new(loop_settings.loops));
    let shared = Loops {
        settings: loop_settings,
        store: store.clone(),
        clock: clock.clone(),
        stats: loops.clone(),
        share: share.clone(),
        shutdown: shutdown.clone(),
    };
    for id in 0..loop_settings.loops {
        let worker = worker(&settings, &store, &clock, &pacer, bots.clone());
        let shared = shared.clone();
        tasks.spawn(async move {
            worker_loop::run(id, shared, worker).await;
            Ok(())
        });
    }
    tasks.spawn({
        let (share, shutdown) = (share.clone(), shutdown.clone());
        async move {
            share.run(shutdown).await;
            Ok(())
        }
    });
    tasks.spawn(timers::timer_loop(
        store.clone(),
        clock.clone(),
        shutdown.clone(),
    ));
    tasks.spawn(broadcasts::broadcast_loop(
        store.clone(),
        bots.clone(),
        Arc::new(BroadcastRunner {
            store: store.clone(),
            budget: pacer.clone(),
            bot_rate: settings.rate_limits.per_second,
            clock: clock.clone(),
            retry: RetryPolicy::default(),
        }),
        clock.clone(),
        shutdown.clone(),
    ));
    tasks.spawn(retention(
        store.clone(),
        clock.clone(),
        settings.purge_every,
        shutdown.clone(),
    ));
    let app = App {
        webhooks: webhooks.clone(),
        store: store.clone(),
        clock: clock.clone(),
        admin_token: settings.admin_token.clone(),
        backup_dir,
        loops,
        share,
        expected_loops: loop_settings.loops,
        shutdown: shutdown.clone(),
        metrics,
        data_dir: data.path().to_owned(),
        console_bot: settings.bot_id.clone(),
        console_ids: Arc::default(),
        flood_waits: waits,
        bots: bots.clone(),
    };
    for (listener, routes) in [
        (listener, http::webhook_router(app.clone())),
        (admin_listener, http::admin_router(app)),
    ] {
        let server_shutdown = shutdown.clone();
        tasks.spawn(async move {
            let service = routes.into_make_service_with_connect_info::<std::net::SocketAddr>();
            axum::serve(listener, service)
                .with_graceful_shutdown(async move { server_shutdown.wait().await })
                .await
                .context("the HTTP server failed")
        });
    }
    if args.poll {
        let token = settings
            .token
            .clone()
            .context("--poll needs TELEGRAM_BOT_TOKEN")?;
        let api = HttpBotApi::new(
            &settings.telegram_api_url,
            token,
            tgq_core::poller::POLL_TIMEOUT + defaults::TELEGRAM_TIMEOUT,
        )?;
        // The same poller as `tgq poll`, on the embedded store's lease: a second `tgq local` cannot
        // open the store, but the lease keeps the offset checkpoint with its token all the same.
        // It polls for the environment's bot; the registry's bots take webhooks.
        let webhook = webhooks
            .env()
            .cloned()
            .context("local mode always has the environment's bot")?;
        let poller = crate::poll::local_poller(
            Arc::new(api),
            Arc::new(store.poller_lease(&settings.bot_id)),
            clock.clone(),
            pacer.clone(),
            webhook,
        )?;
        let stop = shutdown.subscribe();
        tasks.spawn(async move { Ok(poller.run(stop).await?) });
    }

    print_banner(&args, &data, &settings, addr, admin_addr);

    if args.demo {
        let (secret, store, shutdown, exit) = (
            settings.secret.clone(),
            store.clone(),
            shutdown.clone(),
            args.exit,
        );
        let place = demo::Place {
            data_dir_option: data.option(),
            removed_at_exit: data.is_temporary() && exit,
        };
        tasks.spawn(async move {
            tokio::select! {
                finished = demo::run(addr, &secret, store, &place) => finished?,
                // Stopped before the demo settled: nothing more to show.
                () = shutdown.wait() => return Ok(()),
            }
            if exit {
                shutdown.trigger();
            } else {
                outln!("Still serving; press Ctrl-C to stop.");
            }
            Ok(())
        });
    }

    let mut failure: Option<anyhow::Error> = None;
    while let Some(joined) = tasks.join_next().await {
        let outcome = joined
            .map_err(anyhow::Error::from)
            .and_then(|result| result);
        if let Err(error) = outcome {
            // One part failing stops the others cleanly; the first failure is the one reported.
            error!(error = %format!("{error:#}"), "stopping");
            shutdown.trigger();
            failure.get_or_insert(error);
        }
    }
    remove_addr_file(&addr_file);
    remove_addr_file(&webhook_addr_file);
    drop(webhooks);
    // The last handle: closing the store releases its file for the next `tgq` command.
    tokio::task::spawn_blocking(move || drop(store)).await?;
    info!("stopped");
    match failure {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// The webhooks on the embedded store: the environment's bot on `/webhook`, the registry's on
/// `/webhook/{bot_id}`.
fn webhooks(
    settings: &LocalSettings,
    store: &Arc<EmbeddedStore>,
    clock: &Arc<dyn Clock>,
    registry: Arc<Registry>,
) -> Webhooks {
    let shared = SharedSettings {
        max_body_bytes: settings.max_body_bytes,
        record_ttl: settings.record_ttl,
        ack_callbacks: settings.worker.ack_callbacks,
    };
    let ports = WebhookPorts {
        // The store holds the queue too: a new update and its message take one commit.
        ingest: Ingest::Atomic(store.clone()),
        dead: store.clone(),
        clock: clock.clone(),
    };
    let env = (settings.bot_id.clone(), settings.secret.clone());
    Webhooks::new(shared, ports, Some(env), Some(registry))
}

/// Where a bot's sends go: Telegram with its token, or (without one) the offline outbox, each
/// entry naming its bot.
fn telegram_or_outbox(
    url: &str,
    token: Option<&secrecy::SecretString>,
    store: &Arc<EmbeddedStore>,
) -> anyhow::Result<Arc<dyn BotApi>> {
    Ok(match token {
        Some(token) => Arc::new(HttpBotApi::new(
            url,
            token.clone(),
            defaults::TELEGRAM_TIMEOUT,
        )?),
        // Each send names its update and position itself, and records its outcome in its commit.
        None => Arc::new(OfflineBotApi::new(store.clone())),
    })
}

/// The bots every worker loop runs: the environment's, with the handler `TGQ_HANDLER` picks,
/// built once; and the bots of `bots.json`, each built when first met with its own handler and
/// its own token (or the outbox).
async fn bots(
    settings: &LocalSettings,
    vars: &Vars,
    store: &Arc<EmbeddedStore>,
    registry: Arc<Registry>,
) -> anyhow::Result<Fleet> {
    let handlers: HandlerRegistry = crate::handlers()?;
    let api = telegram_or_outbox(&settings.telegram_api_url, settings.token.as_ref(), store)?;
    let config = BotConfig {
        bot_id: settings.bot_id.clone(),
        vars: vars.clone(),
        api: api.clone(),
    };
    let handler = handlers
        .build(handlers.name_of(settings.handler), config)
        .await
        .with_context(|| {
            format!(
                "the bot's handler {:?} could not be built",
                handlers.name_of(settings.handler)
            )
        })?;
    let env = (settings.bot_id.clone(), BotRuntime { api, handler });
    let (url, outbox) = (settings.telegram_api_url.clone(), store.clone());
    let connect: Connect = Arc::new(move |bot| {
        telegram_or_outbox(&url, bot.token.as_ref(), &outbox).map_err(Into::into)
    });
    let registry = RegistryBots::new(registry, handlers, connect, vars.clone());
    Ok(Fleet::new(Some(env), Some(registry)))
}

/// The worker use case of one loop, on the embedded store.
fn worker(
    settings: &LocalSettings,
    store: &Arc<EmbeddedStore>,
    clock: &Arc<dyn Clock>,
    pacer: &Arc<Pacer>,
    bots: Arc<Fleet>,
) -> Worker {
    Worker::new(
        settings.worker.clone(),
        WorkerPorts {
            budget: pacer.clone(),
            clock: clock.clone(),
            timers: Some(store.clone()),
            broadcasts: Some(store.clone()),
            ..WorkerPorts::around(store.clone(), store.clone(), store.clone())
        },
        bots,
    )
}

/// Purges expired records, outbox entries and ended broadcasts at start and then every `every`.
async fn retention(
    store: Arc<EmbeddedStore>,
    clock: Arc<dyn Clock>,
    every: Duration,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    loop {
        match store.purge_expired(clock.now()).await {
            Ok(purged) if purged.records + purged.outbox + purged.broadcasts > 0 => {
                info!(
                    records = purged.records,
                    outbox = purged.outbox,
                    broadcasts = purged.broadcasts,
                    "expired records, outbox entries and ended broadcasts purged"
                );
            }
            Ok(_) => {}
            Err(error) => {
                warn!(error = %error_chain(&error), "retention purge failed; trying again later")
            }
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = shutdown.wait() => return Ok(()),
        }
    }
}

/// Writes the listen address for `tgq status`/`tgq outbox`, atomically (a reader never sees half).
fn write_addr_file(path: &Path, addr: std::net::SocketAddr) -> anyhow::Result<()> {
    tgq_embedded::files::write_whole(path, format!("{addr}\n").as_bytes(), 0o644)
        .with_context(|| format!("cannot write {}", path.display()))
}

fn remove_addr_file(path: &Path) {
    if let Err(error) = std::fs::remove_file(path) {
        warn!(file = %path.display(), error = %error, "could not remove the address file");
    }
}

/// Tells a new user where everything is; never the secret's value.
fn print_banner(
    args: &LocalArgs,
    data: &DataDir,
    settings: &LocalSettings,
    addr: std::net::SocketAddr,
    admin_addr: std::net::SocketAddr,
) {
    let base = format!("http://{}", crate::ops::loopback(addr));
    let admin = format!("http://{}", crate::ops::loopback(admin_addr));
    let secret = match &settings.secret_origin {
        SecretOrigin::Environment => "from TGQ_WEBHOOK_SECRET".to_owned(),
        SecretOrigin::File {
            path,
            created: true,
        } => format!("generated and kept in {}", path.display()),
        SecretOrigin::File {
            path,
            created: false,
        } => format!("kept in {}", path.display()),
    };
    let telegram = match settings.token {
        Some(_) => format!("sends go to {}", settings.telegram_api_url),
        None => format!(
            "offline (no TELEGRAM_BOT_TOKEN): sends go to the outbox, see `tgq outbox{}`",
            data.option()
        ),
    };
    let updates = if args.poll {
        "long polling getUpdates".to_owned()
    } else {
        format!("POST {base}/webhook (point Telegram at it with `tgq webhook set https://<public-host>/webhook`)")
    };
    let kept = if data.is_temporary() {
        " (fresh for this demo, removed when it ends; --data-dir DIR keeps one)"
    } else {
        ""
    };
    outln!(
        "tgq local: bot `{}`, data in {}{kept}",
        settings.bot_id,
        data.path().display()
    );
    outln!("  webhook    {base}  (/webhook, /webhook/{{bot_id}} for the bots of bots.json, /healthz, /readyz: all it serves)");
    outln!("  admin      {admin}  (the console, /admin/*, /metrics)");
    let console = match admin_addr.ip().is_loopback() {
        true => {
            format!("{admin}/  (open it in a browser: each update, the chats, talk to the bot)")
        }
        false => format!("{admin}/  (from another machine it asks for TGQ_ADMIN_TOKEN)"),
    };
    outln!("  console    {console}");
    outln!("  secret     {secret} (header X-Telegram-Bot-Api-Secret-Token)");
    let bot = match settings.handler {
        HandlerChoice::Bot => {
            let name = crate::handlers().map(|h| h.name_of(HandlerChoice::Bot).to_owned());
            format!(
                "{} (the first handler of the bot's registry)",
                name.unwrap_or_default()
            )
        }
        HandlerChoice::Echo => "the built-in echo bot (TGQ_HANDLER=echo)".to_owned(),
    };
    outln!("  bot        {bot}");
    outln!("  telegram   {telegram}");
    outln!("  updates    {updates}");
    if !args.demo {
        outln!("Press Ctrl-C to stop.");
    }
}
