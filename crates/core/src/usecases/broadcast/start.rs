//! Starting a job: its audience checked and fixed, or left to its runs when a handler starts it.

use super::*;

/// Who a broadcast goes to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Audience {
    /// These chats (from a recipients file, or the handler).
    Chats {
        /// The chat ids.
        chats: Vec<i64>,
    },
    /// The bot's chats whose state the filter takes, as they are when the job starts.
    States {
        /// Which states.
        filter: StateFilter,
    },
}

/// Why a broadcast did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// What was asked for cannot be sent; nothing was stored.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The store did not answer.
    #[error(transparent)]
    Store(#[from] PortError),
}

/// Starts a broadcast: checks the spec, fixes its audience (without repeats) and stores the job,
/// which the process running broadcasts picks up. A job of the same origin is found, not made
/// again.
pub async fn start(
    store: &dyn BroadcastStore,
    spec: &BroadcastSpec,
    audience: &Audience,
    now: Timestamp,
) -> Result<Created, StartError> {
    spec.check()?;
    let chats = match audience {
        Audience::Chats { chats } => distinct(chats)?,
        Audience::States { filter } => store.chats_matching(&spec.bot, filter).await?,
    };
    if chats.is_empty() {
        return Err(SpecError::EmptyAudience.into());
    }
    Ok(store.create(spec, &chats, now).await?)
}

/// Starts a broadcast from a handler's run ([`BroadcastStore::create_expanding`]): checks the spec
/// and a list of chats (no chat 0, at most [`MAX_LISTED`], repeats dropped), and stores the job
/// with its audience, whose recipients its runs write. A state audience that takes nobody makes a
/// job of no recipients, which ends done.
pub async fn start_expanding(
    store: &dyn BroadcastStore,
    spec: &BroadcastSpec,
    audience: &Audience,
    now: Timestamp,
) -> Result<Created, StartError> {
    spec.check()?;
    let audience = match audience {
        Audience::Chats { chats } => {
            let chats = distinct(chats)?;
            if chats.is_empty() {
                return Err(SpecError::EmptyAudience.into());
            }
            if chats.len() > MAX_LISTED {
                return Err(SpecError::TooManyListed(chats.len()).into());
            }
            Audience::Chats { chats }
        }
        states @ Audience::States { .. } => states.clone(),
    };
    Ok(store.create_expanding(spec, &audience, now).await?)
}

/// `chats` without repeats, in their order; refused when one is 0.
fn distinct(chats: &[i64]) -> Result<Vec<i64>, SpecError> {
    let mut seen = HashSet::new();
    let chats: Vec<i64> = chats.iter().copied().filter(|c| seen.insert(*c)).collect();
    if let Some(index) = chats.iter().position(|c| *c == 0) {
        return Err(SpecError::BadLine {
            line: index + 1,
            text: "0".into(),
        });
    }
    Ok(chats)
}
