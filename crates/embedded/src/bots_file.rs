//! Local mode's bot registry (docs/design/fleet.md §2): `bots.json` in the data directory, the
//! same fields as the SSM parameters, readable by its owner only (it holds tokens and secrets).
//! `tgq bots add|remove` write it whole (a temporary file renamed over it); `tgq local` reads it
//! through a [`Registry`](tgq_core::registry::Registry), so a change is picked up without a restart.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use secrecy::{ExposeSecret as _, SecretString};
use serde::{Deserialize, Serialize};
use tgq_core::ids::BotId;
use tgq_core::registry::{format_allowed_updates, parse_allowed_updates, BotEntry, BotSource};
use tgq_core::PortError;

/// The file's name in the data directory.
pub const BOTS_FILE: &str = "bots.json";

const READ: &str = "reading bots.json";
const WRITE: &str = "writing bots.json";

/// `bots.json` in a data directory.
#[derive(Clone, Debug)]
pub struct BotsFile {
    path: PathBuf,
}

/// One bot as the file keeps it.
#[derive(Serialize, Deserialize)]
struct StoredBot {
    id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    secret: Option<String>,
    handler: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    allowed_updates: String,
}

#[derive(Serialize, Deserialize, Default)]
struct Stored {
    bots: Vec<StoredBot>,
}

impl BotsFile {
    /// The registry file of the data directory `dir`.
    pub fn in_dir(dir: &Path) -> Self {
        Self {
            path: dir.join(BOTS_FILE),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every bot of the file, in the order they were added; no file: none. A file that does not
    /// read is an error naming it, never an empty registry.
    pub fn read(&self) -> Result<Vec<BotEntry>, PortError> {
        let text = match std::fs::read(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(PortError::unavailable(READ, e)),
        };
        let stored: Stored = serde_json::from_slice(&text).map_err(|e| {
            PortError::misconfigured(READ, format!("{} does not parse: {e}", self.path.display()))
        })?;
        stored
            .bots
            .into_iter()
            .map(|bot| {
                let id = BotId::new(bot.id).map_err(|e| PortError::misconfigured(READ, e))?;
                let allowed_updates = parse_allowed_updates(&bot.allowed_updates)
                    .map_err(|e| PortError::misconfigured(READ, e))?;
                Ok(BotEntry {
                    id,
                    token: bot.token.map(SecretString::from),
                    // An empty secret is none: it must never authenticate an empty header.
                    secret: bot.secret.filter(|s| !s.is_empty()).map(SecretString::from),
                    handler: bot.handler,
                    allowed_updates,
                })
            })
            .collect()
    }

    /// Writes `bots` as the whole registry, readable by its owner only, written whole
    /// ([`crate::files::write_whole`]): a reader sees the old file or the new.
    pub fn write(&self, bots: &[BotEntry]) -> Result<(), PortError> {
        let stored = Stored {
            bots: bots
                .iter()
                .map(|bot| StoredBot {
                    id: bot.id.to_string(),
                    token: bot.token.as_ref().map(|t| t.expose_secret().to_owned()),
                    secret: bot.secret.as_ref().map(|s| s.expose_secret().to_owned()),
                    handler: bot.handler.clone(),
                    allowed_updates: format_allowed_updates(&bot.allowed_updates),
                })
                .collect(),
        };
        let text = serde_json::to_vec_pretty(&stored).map_err(|e| PortError::rejected(WRITE, e))?;
        crate::files::write_whole(&self.path, &text, crate::files::PRIVATE)
            .map_err(|e| PortError::unavailable(WRITE, e))
    }
}

#[async_trait]
impl BotSource for BotsFile {
    async fn load(&self) -> Result<Vec<BotEntry>, PortError> {
        let file = self.clone();
        tokio::task::spawn_blocking(move || file.read())
            .await
            .map_err(|e| PortError::unavailable(READ, e))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use teloxide_core::types::AllowedUpdate;

    fn entry(id: &str, token: Option<&str>) -> BotEntry {
        BotEntry {
            id: BotId::new(id).unwrap(),
            token: token.map(|t| SecretString::from(t.to_owned())),
            secret: Some(SecretString::from(format!("secret-of-{id}"))),
            handler: "echo".to_owned(),
            allowed_updates: vec![AllowedUpdate::Message],
        }
    }

    #[test]
    fn bots_written_are_read_back_and_no_file_is_no_bot() {
        let dir = tempfile::tempdir().unwrap();
        let file = BotsFile::in_dir(dir.path());
        assert!(file.read().unwrap().is_empty());
        file.write(&[entry("shop", Some("1:a")), entry("news", None)])
            .unwrap();
        let read = file.read().unwrap();
        let ids: Vec<&str> = read.iter().map(|bot| bot.id.as_str()).collect();
        assert_eq!(ids, ["shop", "news"]);
        assert_eq!(read[0].token.as_ref().unwrap().expose_secret(), "1:a");
        assert!(read[1].token.is_none());
        assert_eq!(
            read[1].secret.as_ref().unwrap().expose_secret(),
            "secret-of-news"
        );
        assert_eq!(read[0].allowed_updates, vec![AllowedUpdate::Message]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(file.path()).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "readable by its owner only");
        }
    }

    #[test]
    fn a_file_that_does_not_parse_is_an_error_not_an_empty_registry() {
        let dir = tempfile::tempdir().unwrap();
        let file = BotsFile::in_dir(dir.path());
        std::fs::write(file.path(), b"{\"bots\": [{\"id\": \"bad id\"").unwrap();
        let error = file.read().unwrap_err();
        assert_eq!(error.cause(), PortError::misconfigured(READ, "x").cause());
    }
}
