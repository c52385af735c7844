//! `tgq broadcast start | status | list | pause | resume | cancel`: one message to many chats, as
//! a durable job (docs/design/broadcasts.md). Locally, while `tgq local` runs, the running instance
//! answers through its admin routes and sends the job; otherwise the command works on the store,
//! and the job is sent when `tgq local` next runs. With `--stack`, the job is kept in the stack's
//! table and run by its worker from the stack's broadcasts queue.

use std::io::Read as _;
use std::path::PathBuf;
#[cfg(feature = "aws")]
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};
use serde_json::Value;
#[cfg(feature = "aws")]
use tgq_aws::{DynamoBroadcasts, SqsQueue, SsmRegistry};
#[cfg(feature = "aws")]
use tgq_core::broadcast::QueuedBroadcasts;
use tgq_core::broadcast::{
    self, ahead_of, Audience, BroadcastId, BroadcastJob, BroadcastSpec, BroadcastStore, Change,
    Changed, Created, JobState, Lane, Recipient, Retried, StartError, StateFilter,
    DEFAULT_PAID_RATE, DEFAULT_RESERVE_PERCENT, PAID_STARS_PER_MESSAGE,
};
use tgq_core::clock::{Clock as _, SystemClock};
use tgq_core::ids::BotId;
#[cfg(feature = "aws")]
use tgq_core::registry::Layout;
use tgq_embedded::EmbeddedStore;

use super::client::{self, Local};
#[cfg(feature = "aws")]
use super::target::Deployment;
use super::target::{Target, TargetArgs};

/// `tgq broadcast …`.
#[derive(Debug, Subcommand)]
pub enum BroadcastCommand {
    /// Start sending one message to a list of chats, or to every chat whose state matches.
    Start(StartArgs),
    /// Show a broadcast's progress: a bar, its rate, its counts and the time left.
    Status(StatusArgs),
    /// List the broadcasts, the newest first.
    List(ListArgs),
    /// Hold a running broadcast; `resume` lets it go on where it stopped.
    Pause(IdArgs),
    /// Let a paused broadcast go on.
    Resume(IdArgs),
    /// Stop a broadcast for good: the recipients not yet sent to are skipped.
    Cancel(IdArgs),
    /// Send again to the recipients a finished or paused broadcast failed (and, with
    /// --uncertain, to those whose send's outcome is unknown).
    Retry(RetryArgs),
}

/// `tgq broadcast retry`.
#[derive(Debug, Args)]
#[command(after_help = "\
A recipient is failed when Telegram refused the message for that chat (an id the bot cannot
reach, no right to write, a closed topic) or a passing refusal outlasted its attempts: fix the
cause, then retry. An uncertain recipient's send left and no answer came: the message may have
arrived, so --uncertain may send it twice.")]
pub struct RetryArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// The broadcast's id.
    id: u64,
    /// Also send again to the uncertain recipients, who may then get the message twice.
    #[arg(long)]
    uncertain: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// What `POST /admin/broadcasts/retry` takes.
#[derive(Debug, Serialize, Deserialize)]
pub struct RetryRequest {
    /// The job.
    pub id: u64,
    /// Whether the uncertain recipients are sent to again too.
    pub uncertain: bool,
}

/// Puts job `id`'s failed (and, when asked, uncertain) recipients back, on a store this process
/// holds.
pub async fn retry_here(
    store: &dyn BroadcastStore,
    request: &RetryRequest,
) -> anyhow::Result<Retried> {
    Ok(store
        .retry(
            &BroadcastId(request.id),
            request.uncertain,
            SystemClock.now(),
        )
        .await?)
}

async fn retry(args: RetryArgs) -> anyhow::Result<()> {
    let request = RetryRequest {
        id: args.id,
        uncertain: args.uncertain,
    };
    let retried: Retried = match jobs(&args.target).await? {
        Jobs::Local(dir) => match client::open(&dir, client::Access::Write).await? {
            Local::Store(store) => {
                let retried = retry_here(&*store, &request).await;
                client::close(store).await;
                retried?
            }
            Local::Running(addr) => client::post(addr, "/admin/broadcasts/retry", &request).await?,
        },
        #[cfg(feature = "aws")]
        Jobs::Stack(store, _) => retry_here(&store, &request).await?,
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&retried)?);
    }
    let uncertain_too = match args.uncertain {
        true => "failed or uncertain",
        false => "failed",
    };
    match retried {
        Retried::Retried { recipients, job } if !args.json => outln!(
            "broadcast {}: {recipients} {uncertain_too} recipients are sent to again; it is {}",
            job.id,
            job.state.as_str()
        ),
        Retried::Retried { .. } => {}
        Retried::Nothing { job } => bail!(
            "broadcast {} has no {uncertain_too} recipient to send to again{}",
            job.id,
            match (args.uncertain, job.counts.uncertain) {
                (false, 1..) => " (--uncertain sends to the uncertain ones, who may get it twice)",
                _ => "",
            }
        ),
        Retried::Refused { job } => bail!(
            "broadcast {} is {}: {}",
            job.id,
            job.state.as_str(),
            match job.state {
                JobState::Running =>
                    "its failures are still being decided; retry once it is done, or pause it",
                _ => "a cancelled broadcast is not sent again; start a new one",
            }
        ),
        Retried::NotFound => bail!(
            "there is no broadcast {}; `tgq broadcast list` shows them",
            args.id
        ),
    }
    Ok(())
}

/// `tgq broadcast start`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  tgq broadcast start --text 'We are back!' --to subscribers.txt
  tgq broadcast start --payload news.json --to-states --state-format subs/v1 --where /on=true
  tgq broadcast start --method sendPhoto --payload photo.json --to chats.txt --paid

A recipients file holds one chat id a line; blank lines and lines starting with # are skipped, a
chat listed twice is sent to once, and a line that is not a chat id refuses the whole file, naming
the line, before anything is stored.")]
pub struct StartArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// The message's text (sendMessage).
    #[arg(long, conflicts_with = "payload", required_unless_present = "payload")]
    text: Option<String>,
    /// A JSON file with the method's parameters, without chat_id: text or photo, caption,
    /// parse_mode, reply_markup (buttons), …
    #[arg(long, value_name = "FILE")]
    payload: Option<PathBuf>,
    /// The Bot API method that sends it.
    #[arg(long, default_value = "sendMessage")]
    method: String,
    /// The recipients: a file of chat ids, one a line (`-` reads standard input).
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "to_states",
        required_unless_present = "to_states"
    )]
    to: Option<PathBuf>,
    /// The recipients: every chat of the bot with a state (narrowed by --state-format and
    /// --where), as the states are when the broadcast starts.
    #[arg(long)]
    to_states: bool,
    /// Only chats whose state has this format tag (e.g. `subs/v1`).
    #[arg(long, value_name = "FORMAT", requires = "to_states")]
    state_format: Option<String>,
    /// Only chats whose state holds this JSON value at this JSON pointer (`/subscribed=true`).
    #[arg(long = "where", value_name = "POINTER=JSON", requires = "to_states", value_parser = pointer_equals)]
    equals: Option<(String, Value)>,
    /// The bot that sends it [default: the stack's bot, TGQ_BOT_ID, or `local`].
    #[arg(long, value_name = "ID")]
    bot: Option<String>,
    /// The share of the bot's rate left to its replies, in percent.
    #[arg(long, value_name = "PERCENT", default_value_t = DEFAULT_RESERVE_PERCENT)]
    reserve: u8,
    /// Send through Telegram's paid broadcasts (allow_paid_broadcast): up to 1,000 messages a
    /// second apart from the bot's limits, 0.1 Stars each from the bot's balance.
    #[arg(long)]
    paid: bool,
    /// The paid lane's rate, messages a second.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_PAID_RATE, requires = "paid")]
    paid_rate: u32,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// `tgq broadcast status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// The broadcast's id (`tgq broadcast list`).
    id: u64,
    /// Print the status again every second until the broadcast ends or is paused.
    #[arg(long, conflicts_with = "json")]
    follow: bool,
    /// Print JSON instead of text, with the recipients that failed or are uncertain.
    #[arg(long)]
    json: bool,
}

/// `tgq broadcast list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// `tgq broadcast pause | resume | cancel`.
#[derive(Debug, Args)]
pub struct IdArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// The broadcast's id.
    id: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// What `POST /admin/broadcasts/start` takes.
#[derive(Debug, Serialize, Deserialize)]
pub struct StartRequest {
    /// What to send.
    pub spec: BroadcastSpec,
    /// To whom.
    pub audience: Audience,
}

/// What `POST /admin/broadcasts/change` takes.
#[derive(Debug, Serialize, Deserialize)]
pub struct ChangeRequest {
    /// The job.
    pub id: u64,
    /// What to do.
    pub change: Change,
}

/// A job with what `status` shows of it.
#[derive(Debug, Serialize, Deserialize)]
pub struct StatusView {
    /// The job as the store keeps it.
    pub job: BroadcastJob,
    /// Recipients with no outcome yet.
    pub pending: u64,
    /// Messages a second from its first send to its latest.
    pub rate: Option<f64>,
    /// The time left at that rate, in seconds.
    pub seconds_left: Option<u64>,
    /// The older running job of the bot it waits for: a bot sends one broadcast at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behind: Option<BroadcastId>,
    /// Every recipient that failed for good or is uncertain.
    pub undelivered: Vec<Recipient>,
}

/// How many undelivered recipients a status reads at a time.
const UNDELIVERED_PAGE: usize = 1000;

/// Runs one `tgq broadcast` subcommand.
pub async fn run(command: BroadcastCommand) -> anyhow::Result<()> {
    match command {
        BroadcastCommand::Start(args) => start(args).await,
        BroadcastCommand::Status(args) => status(args).await,
        BroadcastCommand::List(args) => list(args).await,
        BroadcastCommand::Pause(args) => change(args, Change::Pause).await,
        BroadcastCommand::Resume(args) => change(args, Change::Resume).await,
        BroadcastCommand::Cancel(args) => change(args, Change::Cancel).await,
        BroadcastCommand::Retry(args) => retry(args).await,
    }
}

/// `--where /path=JSON`: the value is JSON, or else taken as a string.
fn pointer_equals(text: &str) -> Result<(String, Value), String> {
    let Some((pointer, value)) = text.split_once('=') else {
        return Err(format!(
            "{text:?} is not POINTER=VALUE, e.g. /subscribed=true"
        ));
    };
    if !pointer.starts_with('/') {
        return Err(format!(
            "{pointer:?} is not a JSON pointer: it starts with /, e.g. /subscribed"
        ));
    }
    let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_owned()));
    Ok((pointer.to_owned(), value))
}

/// Where a command's broadcasts are.
enum Jobs {
    /// Local mode's store in this data directory.
    Local(PathBuf),
    /// A stack's table, its jobs run from its broadcasts queue; with the stack.
    #[cfg(feature = "aws")]
    Stack(QueuedBroadcasts, Box<Deployment>),
}

/// Where the target keeps its broadcasts. A stack must have its broadcasts queue: a job started
/// or resumed there is queued on it.
async fn jobs(target: &TargetArgs) -> anyhow::Result<Jobs> {
    match target.resolve().await? {
        Target::Local(dir) => Ok(Jobs::Local(dir)),
        #[cfg(feature = "aws")]
        Target::Aws(deployment) => {
            let Some(url) = deployment.broadcasts_queue_url.clone() else {
                bail!(
                    "broadcasts on AWS run from the stack's broadcasts queue, which --table and \
                     --queue-url do not name (or the stack is older than it): give --stack NAME \
                     of a stack deployed with this version"
                );
            };
            let queue = SqsQueue::new(aws_sdk_sqs::Client::new(&deployment.sdk), url);
            let store = QueuedBroadcasts::new(
                Arc::new(DynamoBroadcasts::new(
                    aws_sdk_dynamodb::Client::new(&deployment.sdk),
                    deployment.table.clone(),
                )),
                Arc::new(queue),
            );
            Ok(Jobs::Stack(store, deployment))
        }
    }
}

/// The bots a stack serves: its own (output `BotId`) and those of its registry (the SSM
/// parameters under output `BotsParameterPrefix`).
#[cfg(feature = "aws")]
async fn served_on_stack(deployment: &Deployment) -> anyhow::Result<Vec<BotId>> {
    let mut served: Vec<BotId> = deployment
        .bot_id
        .iter()
        .filter_map(|id| BotId::new(id.clone()).ok())
        .collect();
    if let Some(prefix) = &deployment.bots_parameter_prefix {
        let layout = Layout::new(prefix).with_context(|| {
            format!("the stack's BotsParameterPrefix {prefix} is not an SSM path")
        })?;
        // Read as `tgq bots list` reads it: the operator's policy grants that, and nothing
        // read here is kept or shown but the ids.
        let registry = SsmRegistry::new(aws_sdk_ssm::Client::new(&deployment.sdk), layout);
        let parsed = registry
            .read()
            .await
            .with_context(|| format!("cannot read the bots the stack serves, under {prefix}"))?;
        served.extend(parsed.bots.into_iter().map(|bot| bot.id));
    }
    Ok(served)
}

/// `--bot`, or else the stack's bot, `TGQ_BOT_ID`, or local mode's.
fn default_bot(bot: Option<String>, stack_bot: Option<String>) -> anyhow::Result<BotId> {
    let bot = bot
        .or(stack_bot)
        .or_else(|| std::env::var("TGQ_BOT_ID").ok())
        .unwrap_or_else(|| crate::config::LOCAL_BOT_ID.to_owned());
    BotId::new(bot).map_err(|e| anyhow::anyhow!("--bot: {e}"))
}

fn read_input(path: &PathBuf, what: &str) -> anyhow::Result<String> {
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .with_context(|| format!("reading the {what} from standard input"))?;
        return Ok(text);
    }
    std::fs::read_to_string(path)
        .with_context(|| format!("reading the {what} in {}", path.display()))
}

/// The request `start` sends, checked: a bad recipients file or payload is refused here, before
/// anything is stored.
fn start_request(args: &StartArgs, stack_bot: Option<String>) -> anyhow::Result<StartRequest> {
    let params = match (&args.text, &args.payload) {
        (Some(text), _) => serde_json::json!({ "text": text }),
        (None, Some(path)) => {
            let text = read_input(path, "payload")?;
            serde_json::from_str::<Value>(&text)
                .with_context(|| format!("{} is not JSON", path.display()))?
        }
        (None, None) => bail!("give the message with --text or --payload"),
    };
    let audience = match (&args.to, args.to_states) {
        (Some(path), _) => Audience::Chats {
            chats: broadcast::parse_recipients(&read_input(path, "recipients")?)
                .with_context(|| format!("{} is refused, and nothing was sent", path.display()))?,
        },
        (None, true) => Audience::States {
            filter: StateFilter {
                format: args.state_format.clone(),
                equals: args.equals.clone(),
            },
        },
        (None, false) => bail!("give the recipients with --to FILE or --to-states"),
    };
    let spec = BroadcastSpec {
        bot: default_bot(args.bot.clone(), stack_bot)?,
        method: args.method.clone(),
        params,
        lane: if args.paid {
            Lane::Paid
        } else {
            Lane::Standard
        },
        reserve_percent: args.reserve,
        paid_rate: args.paid_rate,
        origin: "cli".into(),
    };
    spec.check()?;
    Ok(StartRequest { spec, audience })
}

async fn start(args: StartArgs) -> anyhow::Result<()> {
    let created: Created = match jobs(&args.target).await? {
        Jobs::Local(dir) => {
            let request = start_request(&args, None)?;
            match client::open(&dir, client::Access::Write).await? {
                Local::Store(store) => {
                    let created = start_here(&*store, &request).await;
                    client::close(store).await;
                    created?
                }
                Local::Running(addr) => {
                    client::post(addr, "/admin/broadcasts/start", &request).await?
                }
            }
        }
        #[cfg(feature = "aws")]
        Jobs::Stack(store, deployment) => {
            let request = start_request(&args, deployment.bot_id.clone())?;
            // A job for a bot the stack does not serve would be paused by its first step with
            // the bot's refusal: it is refused before anything is stored.
            let served = served_on_stack(&deployment).await?;
            if !served.contains(&request.spec.bot) {
                let names: Vec<String> = served.iter().map(ToString::to_string).collect();
                bail!(
                    "bot `{}` is not served by the stack, which serves {}: pass --bot with one \
                     of them, or add the bot with `tgq bots add --stack`; nothing was stored",
                    request.spec.bot,
                    match names.is_empty() {
                        true => "no bot".to_owned(),
                        false => names.join(", "),
                    }
                );
            }
            start_here(&store, &request).await?
        }
    };
    let job = created.job();
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&created)?);
        return Ok(());
    }
    if let Created::Existing { .. } = created {
        outln!("broadcast {} of the same origin exists already", job.id);
        return Ok(());
    }
    outln!(
        "broadcast {} started: {} recipients, bot {}",
        job.id,
        job.counts.total,
        job.spec.bot
    );
    if job.spec.lane == Lane::Paid {
        outln!(
            "paid lane at {}/s: {:.0} Stars for {} messages, from the bot's balance",
            job.spec.paid_rate,
            job.counts.total as f64 * PAID_STARS_PER_MESSAGE,
            job.counts.total
        );
    }
    outln!(
        "`tgq broadcast status {} --follow` shows its progress",
        job.id
    );
    Ok(())
}

/// Starts a broadcast on a store this process holds: the CLI's own, the running instance's, or a
/// stack's.
pub async fn start_here(
    store: &dyn BroadcastStore,
    request: &StartRequest,
) -> anyhow::Result<Created> {
    let created =
        broadcast::start(store, &request.spec, &request.audience, SystemClock.now()).await;
    match created {
        Ok(created) => Ok(created),
        Err(StartError::Spec(error)) => Err(anyhow::Error::new(error).context("nothing was sent")),
        Err(StartError::Store(error)) => Err(error.into()),
    }
}

/// The status of job `id` on a store this process holds.
pub async fn status_here(
    store: &dyn BroadcastStore,
    id: u64,
) -> anyhow::Result<Option<StatusView>> {
    let id = BroadcastId(id);
    let Some(job) = store.job(&id).await? else {
        return Ok(None);
    };
    let mut undelivered: Vec<Recipient> = Vec::new();
    loop {
        let after = undelivered.last().map(|r| r.index);
        let page = store.undelivered(&id, after, UNDELIVERED_PAGE).await?;
        let last = page.len() < UNDELIVERED_PAGE;
        undelivered.extend(page);
        if last {
            break;
        }
    }
    let pending = job.counts.pending();
    let rate = job.rate();
    let seconds_left = rate
        .filter(|r| *r > 0.0 && !job.state.is_final())
        .map(|r| (pending as f64 / r).ceil() as u64);
    let behind = match job.state {
        JobState::Running => ahead_of(&store.open_jobs().await?, &job),
        _ => None,
    };
    Ok(Some(StatusView {
        job,
        pending,
        rate,
        seconds_left,
        behind,
        undelivered,
    }))
}

/// Applies `change` to job `id` on a store this process holds.
pub async fn change_here(
    store: &dyn BroadcastStore,
    request: &ChangeRequest,
) -> anyhow::Result<Changed> {
    Ok(store
        .change(
            &BroadcastId(request.id),
            request.change.clone(),
            SystemClock.now(),
        )
        .await?)
}

async fn read_status(jobs: &Jobs, id: u64) -> anyhow::Result<StatusView> {
    let view = match jobs {
        Jobs::Local(dir) => {
            let route = format!("/admin/broadcasts/status?id={id}");
            let (view, _) = client::read(dir, &route, move |store: &EmbeddedStore| {
                let handle = tokio::runtime::Handle::current();
                handle.block_on(status_here(store, id))
            })
            .await?;
            view
        }
        #[cfg(feature = "aws")]
        Jobs::Stack(store, _) => status_here(store, id).await?,
    };
    view.with_context(|| format!("there is no broadcast {id}; `tgq broadcast list` shows them"))
}

async fn status(args: StatusArgs) -> anyhow::Result<()> {
    let jobs = jobs(&args.target).await?;
    loop {
        let view = read_status(&jobs, args.id).await?;
        if args.json {
            outln!("{}", serde_json::to_string_pretty(&view)?);
            return Ok(());
        }
        render(&view);
        let settled = !matches!(view.job.state, JobState::Running);
        if !args.follow || settled {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        outln!();
    }
}

/// A bar of `width` cells, `done` of `total` filled.
fn bar(done: u64, total: u64, width: usize) -> String {
    let filled = match total {
        0 => width,
        total => (done as f64 / total as f64 * width as f64).round() as usize,
    };
    format!(
        "[{}{}]",
        "#".repeat(filled.min(width)),
        "-".repeat(width - filled.min(width))
    )
}

fn human(secs: u64) -> String {
    match secs {
        s if s < 120 => format!("{s} s"),
        s if s < 7200 => format!("{} min {} s", s / 60, s % 60),
        s => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

fn render(view: &StatusView) {
    let job = &view.job;
    let c = job.counts;
    let done = c.total - view.pending;
    let lane = match job.spec.lane {
        Lane::Standard => format!(
            "{} % of the bot's rate left to replies",
            job.spec.reserve_percent
        ),
        Lane::Paid => format!("paid lane at {}/s", job.spec.paid_rate),
    };
    outln!(
        "broadcast {} of bot {}: {} ({}; {})",
        job.id,
        job.spec.bot,
        job.state.as_str(),
        job.spec.method,
        lane
    );
    let percent = if c.total == 0 {
        100.0
    } else {
        done as f64 * 100.0 / c.total as f64
    };
    outln!(
        "{} {percent:5.1} %  {done} of {}",
        bar(done, c.total, 30),
        c.total
    );
    outln!(
        "sent {} · gone {} · failed {} · uncertain {} · retrying {}",
        c.sent,
        c.gone,
        c.failed,
        c.uncertain,
        c.retrying
    );
    if job.expanding {
        outln!(
            "writing its audience: {} recipients so far; nothing is sent until all are written",
            c.total
        );
    }
    if let Some(first) = &view.behind {
        outln!("waiting: the bot sends one broadcast at a time, and broadcast {first} goes first");
        outln!("if broadcast {first} is not sending, `tgq broadcast resume {first}` sets it going again");
    }
    match (view.rate, view.seconds_left) {
        (Some(rate), Some(left)) => outln!("rate {rate:.1}/s · about {} left", human(left)),
        (Some(rate), None) => outln!("rate {rate:.1}/s"),
        _ => {}
    }
    if let JobState::Paused {
        reason: Some(reason),
    } = &job.state
    {
        outln!("paused by tgq: {reason}");
        outln!(
            "a new broadcast with a corrected message replaces it: `tgq broadcast cancel {}`",
            job.id
        );
    }
    if let Some(error) = &job.last_error {
        outln!("last error: {error}");
    }
    if c.failed + c.uncertain > 0 {
        outln!(
            "`tgq broadcast status {} --json` lists the {} recipients not delivered",
            job.id,
            c.failed + c.uncertain
        );
    }
}

async fn list(args: ListArgs) -> anyhow::Result<()> {
    let jobs: Vec<BroadcastJob> = match jobs(&args.target).await? {
        Jobs::Local(dir) => {
            client::read(&dir, "/admin/broadcasts", |store: &EmbeddedStore| {
                let handle = tokio::runtime::Handle::current();
                Ok(handle.block_on(store.jobs())?)
            })
            .await?
            .0
        }
        #[cfg(feature = "aws")]
        Jobs::Stack(store, _) => store.jobs().await?,
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&jobs)?);
        return Ok(());
    }
    if jobs.is_empty() {
        outln!("no broadcasts");
        return Ok(());
    }
    outln!(
        "{:<6} {:<12} {:<10} {:>9} {:>9} {:>7} {:>7} {:>9}",
        "ID",
        "BOT",
        "STATE",
        "TOTAL",
        "SENT",
        "GONE",
        "FAILED",
        "UNCERTAIN"
    );
    for job in &jobs {
        let c = job.counts;
        outln!(
            "{:<6} {:<12} {:<10} {:>9} {:>9} {:>7} {:>7} {:>9}",
            job.id.to_string(),
            job.spec.bot.as_str(),
            job.state.as_str(),
            c.total,
            c.sent,
            c.gone,
            c.failed,
            c.uncertain
        );
    }
    Ok(())
}

async fn change(args: IdArgs, change: Change) -> anyhow::Result<()> {
    let request = ChangeRequest {
        id: args.id,
        change: change.clone(),
    };
    let changed: Changed = match jobs(&args.target).await? {
        Jobs::Local(dir) => match client::open(&dir, client::Access::Write).await? {
            Local::Store(store) => {
                let changed = change_here(&*store, &request).await;
                client::close(store).await;
                changed?
            }
            Local::Running(addr) => {
                client::post(addr, "/admin/broadcasts/change", &request).await?
            }
        },
        #[cfg(feature = "aws")]
        Jobs::Stack(store, _) => change_here(&store, &request).await?,
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&changed)?);
    }
    let verb = match change {
        Change::Pause => "pause",
        Change::Resume => "resume",
        _ => "cancel",
    };
    match changed {
        Changed::Changed { job } if !args.json => {
            outln!("broadcast {} is {}", job.id, job.state.as_str())
        }
        Changed::Changed { .. } => {}
        Changed::Refused { job } => bail!(
            "broadcast {} is {}: it cannot {verb}",
            job.id,
            job.state.as_str()
        ),
        Changed::NotFound => bail!(
            "there is no broadcast {}; `tgq broadcast list` shows them",
            args.id
        ),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_where_clause_is_a_pointer_and_a_json_value_or_a_string() {
        assert_eq!(
            pointer_equals("/on=true"),
            Ok(("/on".into(), Value::Bool(true)))
        );
        assert_eq!(
            pointer_equals("/lang=en"),
            Ok(("/lang".into(), Value::String("en".into())))
        );
        assert!(pointer_equals("on=true").is_err());
        assert!(pointer_equals("/on").is_err());
    }

    #[tokio::test]
    async fn a_status_names_the_older_broadcast_a_running_one_waits_for() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path(), tgq_embedded::StoreOptions::default()).unwrap();
        let spec = |bot: &str| {
            BroadcastSpec::standard(
                BotId::new(bot).unwrap(),
                "sendMessage",
                serde_json::json!({"text": "news"}),
                "cli",
            )
        };
        for bot in ["shop", "shop", "news"] {
            store
                .create(&spec(bot), &[1, 2], SystemClock.now())
                .await
                .unwrap();
        }
        let behind = |id| {
            let store = store.clone();
            async move { status_here(&*store, id).await.unwrap().unwrap().behind }
        };
        assert_eq!(behind(1).await, None);
        assert_eq!(behind(2).await, Some(BroadcastId(1)));
        assert_eq!(behind(3).await, None, "another bot's");
        store
            .change(&BroadcastId(1), Change::Pause, SystemClock.now())
            .await
            .unwrap();
        assert_eq!(behind(2).await, None, "the older one paused");
    }

    #[test]
    fn the_bar_fills_with_the_share_done() {
        assert_eq!(bar(0, 10, 10), "[----------]");
        assert_eq!(bar(5, 10, 10), "[#####-----]");
        assert_eq!(bar(10, 10, 10), "[##########]");
        assert_eq!(bar(0, 0, 4), "[####]");
    }
}
