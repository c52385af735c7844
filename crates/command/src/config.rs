//! Local mode's configuration: the functions' environment variables (`tgq_core::config::Vars`) with
//! local defaults, and the webhook secret kept in the data directory when none is given.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context as _};
use rand::distr::{Alphanumeric, SampleString as _};
use secrecy::{ExposeSecret as _, SecretString};
use tgq_core::config::HandlerChoice;
use tgq_core::config::{ConfigError, SecretSource, Vars};
use tgq_core::ids::BotId;
use tgq_core::pacer::RateLimits;
use tgq_core::worker::WorkerSettings;
use tgq_embedded::files;
use tracing::warn;

/// The bot id local mode uses when `TGQ_BOT_ID` is unset.
pub const LOCAL_BOT_ID: &str = "local";
/// The file in the data directory that keeps a generated webhook secret.
pub const SECRET_FILE: &str = "webhook-secret";
/// The file in the data directory where a running `tgq local` writes its admin listener's
/// address, where the `tgq` commands reach it.
pub const ADDR_FILE: &str = "local.addr";
/// The file in the data directory where a running `tgq local` writes its webhook listener's
/// address.
pub const WEBHOOK_ADDR_FILE: &str = "webhook.addr";
/// The data directory when `--data-dir` is not given.
pub const DEFAULT_DATA_DIR: &str = "./.tgq";
/// Worker loops when `TGQ_WORKER_LOOPS` is unset. Each loop handles its batch's records one after
/// another, a few commits each; many loops let the writer put many of those in one commit
/// (docs/PERFORMANCE.md, "Draining a backlog").
pub const DEFAULT_WORKER_LOOPS: usize = 128;

/// Messages a loop receives at once when `TGQ_WORKER_BATCH` is unset. A batch holds each of its
/// chats until the loop has handled all of it: half of SQS's 10 lets twice the loops hold the
/// same number of chats, each handling one record at a time (docs/PERFORMANCE.md, "Draining a
/// backlog").
pub const DEFAULT_WORKER_BATCH: usize = 5;

/// How often retention runs when `TGQ_PURGE_INTERVAL_SECS` is unset.
pub const DEFAULT_PURGE_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// `TGQ_ADMIN_TOKEN`: what a client that is not on this machine presents to the admin routes.
pub fn admin_token(vars: &Vars) -> Option<SecretString> {
    vars.get("TGQ_ADMIN_TOKEN")
        .filter(|token| !token.is_empty())
        .map(|token| SecretString::from(token.to_owned()))
}

/// A mistake in how the command was called; reported like clap's own errors (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Where the webhook secret came from; said at start so the user can find it (its value never is).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretOrigin {
    /// `TGQ_WEBHOOK_SECRET`.
    Environment,
    /// A file in the data directory; `created` when this run generated it.
    File {
        /// The file.
        path: PathBuf,
        /// Whether this run generated it.
        created: bool,
    },
}

/// Everything `tgq local` reads from the environment.
#[derive(Clone, Debug)]
pub struct LocalSettings {
    /// `TGQ_BOT_ID`, default `local`.
    pub bot_id: BotId,
    /// `TGQ_WEBHOOK_SECRET`, or the generated one.
    pub secret: SecretString,
    /// Where the secret came from.
    pub secret_origin: SecretOrigin,
    /// `TGQ_MAX_BODY_BYTES`.
    pub max_body_bytes: usize,
    /// The worker's settings: `TGQ_MAX_ATTEMPTS`, `TGQ_BACKOFF_*`, `TGQ_MAX_RETRY_AGE_SECS`,
    /// `TGQ_RECORD_TTL_SECS`, `TGQ_MAX_RECEIVE_COUNT` (the local queue's redrive limit too).
    pub worker: WorkerSettings,
    /// `TGQ_RATE_*`: Telegram's flood limits for the bot.
    pub rate_limits: RateLimits,
    /// `TELEGRAM_BOT_TOKEN`; without it sends go to the offline outbox.
    pub token: Option<SecretString>,
    /// `TELEGRAM_API_URL`.
    pub telegram_api_url: String,
    /// `TGQ_ADMIN_TOKEN`: lets non-loopback clients read the admin routes.
    pub admin_token: Option<SecretString>,
    /// `TGQ_RECORD_TTL_SECS`: how long records and outbox entries are kept.
    pub record_ttl: Duration,
    /// `TGQ_PURGE_INTERVAL_SECS`: how often retention removes what outlived the TTL.
    pub purge_every: Duration,
    /// `TGQ_HANDLER`: the bot in `bot/` or the built-in echo bot.
    pub handler: HandlerChoice,
    /// `TGQ_WORKER_LOOPS`: worker loops running at once (the event source mapping's
    /// MaximumConcurrency), local mode only.
    pub worker_loops: usize,
    /// `TGQ_WORKER_BATCH`: messages a loop receives at once (the event source mapping's
    /// BatchSize), local mode only.
    pub worker_batch: usize,
    /// `TGQ_REGISTRY_REFRESH_SECS`: how often `<data-dir>/bots.json` is read again.
    pub registry_refresh: Duration,
}

impl LocalSettings {
    /// Reads the variables; generates (once) and keeps the webhook secret in `data_dir` when
    /// `TGQ_WEBHOOK_SECRET` is unset.
    pub fn from_vars(vars: &Vars, data_dir: &Path) -> anyhow::Result<Self> {
        let bot_id = local_bot_id(vars)?;
        let (secret, secret_origin) = webhook_secret(vars, data_dir)?;
        Ok(Self {
            bot_id,
            secret,
            secret_origin,
            max_body_bytes: vars.max_body_bytes()?,
            // A loop's batch is acknowledged whole, as an invocation's is: a batch of several bots
            // keeps to the shorter inline wait here too.
            worker: WorkerSettings::from_vars(vars)?,
            rate_limits: vars.rate_limits()?,
            token: bot_token(vars)?,
            telegram_api_url: vars.telegram_api_url()?,
            admin_token: admin_token(vars),
            record_ttl: vars.record_ttl()?,
            purge_every: purge_interval(vars)?,
            handler: vars.handler()?,
            worker_loops: worker_loops(vars)?,
            worker_batch: worker_batch(vars)?,
            registry_refresh: vars.registry_refresh()?,
        })
    }
}

/// `TGQ_WORKER_LOOPS` (local mode only), default [`DEFAULT_WORKER_LOOPS`].
fn worker_loops(vars: &Vars) -> Result<usize, ConfigError> {
    let expected = "a whole number of loops from 1 to 1024";
    let loops = vars.parsed("TGQ_WORKER_LOOPS", expected, DEFAULT_WORKER_LOOPS)?;
    if !(1..=1024).contains(&loops) {
        return Err(ConfigError::Malformed {
            name: "TGQ_WORKER_LOOPS",
            expected,
        });
    }
    Ok(loops)
}

/// `TGQ_WORKER_BATCH` (local mode only), default [`DEFAULT_WORKER_BATCH`]: at most SQS's 10.
fn worker_batch(vars: &Vars) -> Result<usize, ConfigError> {
    let expected = "a whole number of messages from 1 to 10";
    let batch = vars.parsed("TGQ_WORKER_BATCH", expected, DEFAULT_WORKER_BATCH)?;
    if !(1..=10).contains(&batch) {
        return Err(ConfigError::Malformed {
            name: "TGQ_WORKER_BATCH",
            expected,
        });
    }
    Ok(batch)
}

/// `TGQ_PURGE_INTERVAL_SECS` (local mode only), default 5 minutes.
fn purge_interval(vars: &Vars) -> Result<Duration, ConfigError> {
    let expected = "a whole number of seconds from 1";
    let secs = vars.parsed(
        "TGQ_PURGE_INTERVAL_SECS",
        expected,
        DEFAULT_PURGE_INTERVAL.as_secs(),
    )?;
    if secs == 0 {
        return Err(ConfigError::Malformed {
            name: "TGQ_PURGE_INTERVAL_SECS",
            expected,
        });
    }
    Ok(Duration::from_secs(secs))
}

/// The environment's bot in local mode: TGQ_BOT_ID, else `local`.
pub fn local_bot_id(vars: &Vars) -> anyhow::Result<BotId> {
    Ok(match vars.get("TGQ_BOT_ID") {
        Some(_) => vars.bot_id()?,
        None => BotId::new(LOCAL_BOT_ID)?,
    })
}

/// `TELEGRAM_BOT_TOKEN`, if set. An SSM parameter name cannot be resolved without AWS.
pub fn bot_token(vars: &Vars) -> anyhow::Result<Option<SecretString>> {
    match vars.bot_token() {
        None => Ok(None),
        Some(SecretSource::Value(token)) => Ok(Some(token)),
        Some(SecretSource::Parameter(_)) => bail!(
            "TELEGRAM_BOT_TOKEN_PARAM names an SSM parameter, which the tgq command does not read: \
             set TELEGRAM_BOT_TOKEN instead"
        ),
    }
}

/// `TGQ_WEBHOOK_SECRET`, else the secret kept in `<data_dir>/webhook-secret` (generated once).
pub fn webhook_secret(
    vars: &Vars,
    data_dir: &Path,
) -> anyhow::Result<(SecretString, SecretOrigin)> {
    match vars.secret("TGQ_WEBHOOK_SECRET", "TGQ_WEBHOOK_SECRET_PARAM") {
        Some(SecretSource::Value(secret)) => {
            check_secret(secret.expose_secret(), "TGQ_WEBHOOK_SECRET")?;
            Ok((secret, SecretOrigin::Environment))
        }
        Some(SecretSource::Parameter(_)) => bail!(
            "TGQ_WEBHOOK_SECRET_PARAM names an SSM parameter, which the tgq command does not read: \
             set TGQ_WEBHOOK_SECRET, or leave both unset to use a generated secret"
        ),
        None => {
            let path = data_dir.join(SECRET_FILE);
            let (secret, created) = load_or_create_secret(&path)?;
            Ok((secret, SecretOrigin::File { path, created }))
        }
    }
}

/// Reads the secret file, or creates it (mode 0600, written whole) with a fresh random secret.
/// An empty file is what an older tgq left when a first start hit a full disk: it never held a
/// secret, so it is replaced.
pub fn load_or_create_secret(path: &Path) -> anyhow::Result<(SecretString, bool)> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)
            .with_context(|| format!("cannot create the data directory {}", parent.display()))?;
    }
    // Telegram's secret_token allows 1–256 of A–Z, a–z, 0–9, '_' and '-'; 48 alphanumerics carry
    // about 285 bits.
    let fresh = Alphanumeric.sample_string(&mut rand::rng(), 48);
    let empty = fs::metadata(path).is_ok_and(|meta| meta.len() == 0);
    let created = match empty {
        true => files::write_whole(path, fresh.as_bytes(), files::PRIVATE).map(|()| true),
        false => files::create_whole(path, fresh.as_bytes(), files::PRIVATE),
    };
    match created.with_context(|| format!("cannot write {}", path.display()))? {
        true => Ok((SecretString::from(fresh), true)),
        false => {
            let text = fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let secret = text.trim();
            check_secret(secret, &path.display().to_string())?;
            let mode = fs::metadata(path)?.permissions().mode();
            if mode & 0o077 != 0 {
                warn!(file = %path.display(), "the webhook secret file is readable by other users; chmod 600 it");
            }
            Ok((SecretString::from(secret.to_owned()), false))
        }
    }
}

/// Telegram accepts only these secrets; a bad one would make `setWebhook` fail later.
pub fn check_secret(secret: &str, origin: &str) -> anyhow::Result<()> {
    let valid = (1..=256).contains(&secret.len())
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !valid {
        bail!(
            "the webhook secret in {origin} must be 1–256 characters of A–Z, a–z, 0–9, '_' or '-'"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_secret_is_kept_with_mode_0600_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested").join(SECRET_FILE);
        let (first, created) = load_or_create_secret(&path).unwrap();
        assert!(created);
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let (second, created_again) = load_or_create_secret(&path).unwrap();
        assert!(!created_again);
        assert_eq!(first.expose_secret(), second.expose_secret());
        assert_eq!(first.expose_secret().len(), 48);
    }

    #[test]
    fn local_mode_defaults_the_bot_id_and_reads_the_functions_variables() {
        let dir = tempfile::tempdir().unwrap();
        let vars = Vars::from_pairs([("TGQ_MAX_ATTEMPTS", "3"), ("TGQ_WEBHOOK_SECRET", "s3cret")]);
        let settings = LocalSettings::from_vars(&vars, dir.path()).unwrap();
        assert_eq!(settings.bot_id.as_str(), "local");
        assert_eq!(settings.worker.retry.max_attempts, 3);
        assert_eq!(settings.secret_origin, SecretOrigin::Environment);
        assert!(settings.token.is_none());
        assert!(!dir.path().join(SECRET_FILE).exists());
        assert_eq!(settings.record_ttl, tgq_core::defaults::RECORD_TTL);
        assert_eq!(settings.purge_every, DEFAULT_PURGE_INTERVAL);
    }

    #[test]
    fn retention_reads_the_record_ttl_and_the_purge_interval() {
        let dir = tempfile::tempdir().unwrap();
        let vars = Vars::from_pairs([
            ("TGQ_WEBHOOK_SECRET", "s3cret"),
            ("TGQ_RECORD_TTL_SECS", "10"),
            ("TGQ_PURGE_INTERVAL_SECS", "5"),
        ]);
        let settings = LocalSettings::from_vars(&vars, dir.path()).unwrap();
        assert_eq!(settings.record_ttl, Duration::from_secs(10));
        assert_eq!(settings.purge_every, Duration::from_secs(5));
        let vars = Vars::from_pairs([
            ("TGQ_WEBHOOK_SECRET", "s3cret"),
            ("TGQ_PURGE_INTERVAL_SECS", "0"),
        ]);
        let error = LocalSettings::from_vars(&vars, dir.path()).unwrap_err();
        assert!(
            error.to_string().contains("TGQ_PURGE_INTERVAL_SECS"),
            "{error}"
        );
    }

    #[test]
    fn worker_loops_default_to_a_hundred_and_twenty_eight_and_zero_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let secret = ("TGQ_WEBHOOK_SECRET", "s3cret");
        let settings = LocalSettings::from_vars(&Vars::from_pairs([secret]), dir.path()).unwrap();
        assert_eq!(settings.worker_loops, 128);
        let vars = Vars::from_pairs([secret, ("TGQ_WORKER_LOOPS", "8")]);
        let settings = LocalSettings::from_vars(&vars, dir.path()).unwrap();
        assert_eq!(settings.worker_loops, 8);
        for bad in ["0", "many", "5000"] {
            let vars = Vars::from_pairs([secret, ("TGQ_WORKER_LOOPS", bad)]);
            let error = LocalSettings::from_vars(&vars, dir.path()).unwrap_err();
            assert!(error.to_string().contains("TGQ_WORKER_LOOPS"), "{error}");
        }
    }

    #[test]
    fn a_loop_receives_five_messages_unless_told_up_to_sqs_s_ten() {
        let dir = tempfile::tempdir().unwrap();
        let secret = ("TGQ_WEBHOOK_SECRET", "s3cret");
        let settings = LocalSettings::from_vars(&Vars::from_pairs([secret]), dir.path()).unwrap();
        assert_eq!(settings.worker_batch, 5);
        let vars = Vars::from_pairs([secret, ("TGQ_WORKER_BATCH", "10")]);
        let settings = LocalSettings::from_vars(&vars, dir.path()).unwrap();
        assert_eq!(settings.worker_batch, 10);
        for bad in ["0", "eleven", "11"] {
            let vars = Vars::from_pairs([secret, ("TGQ_WORKER_BATCH", bad)]);
            let error = LocalSettings::from_vars(&vars, dir.path()).unwrap_err();
            assert!(error.to_string().contains("TGQ_WORKER_BATCH"), "{error}");
            assert!(error.to_string().contains("from 1 to 10"), "{error}");
        }
    }

    #[test]
    fn an_ssm_parameter_for_the_token_is_refused_with_a_hint() {
        let vars = Vars::from_pairs([("TELEGRAM_BOT_TOKEN_PARAM", "/tgq/token")]);
        let error = bot_token(&vars).unwrap_err().to_string();
        assert!(error.contains("set TELEGRAM_BOT_TOKEN"), "{error}");
    }
}
