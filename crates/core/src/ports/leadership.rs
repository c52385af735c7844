//! Leadership among pollers (docs/design/fleet.md §1): a lease that lets exactly one of several
//! pollers call getUpdates for a bot, a fencing token that grows with every acquisition, and the
//! getUpdates offset checkpoint stored with that token.
//!
//! This is not the worker's [`Lease`](crate::ports::Lease), which fences one run of one update.
//! Here the port is [`PollerLease`]; the rule every store applies is [`LeaseState`]'s, which the
//! in-process stores run on the whole state under one lock or transaction and DynamoDB states as
//! conditions.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::PortError;
use crate::record::Timestamp;

/// How long an acquired or renewed lease lasts unless it is renewed again.
pub const LEASE_TTL: Duration = Duration::from_secs(15);
/// How often the leader renews: three renewals fit in one TTL, so one late or failed renewal
/// leaves time for the next.
pub const RENEW_EVERY: Duration = Duration::from_secs(5);
/// How long before its lease ends a leader's getUpdates must be over at Telegram: it covers the
/// way to Telegram and the clocks of two pollers disagreeing. A poll is never asked to wait past
/// the lease's end less this.
pub(crate) const POLL_GUARD: Duration = Duration::from_secs(2);
/// How long a poller that lost the lease (other than by releasing it) waits before it contends
/// again, so that a poller with a flaky way to the store does not take the lease back and forth.
pub const COOLDOWN: Duration = Duration::from_secs(30);
/// Two takeovers closer than this are flapping: the second is logged as an alert and counted.
pub const FLAP_WINDOW: Duration = Duration::from_secs(60);

/// One contender for the lease: unique per process (`{host}:{pid}:{random}` by default), so a
/// restarted poller is a new contender and never mistakes its predecessor's term for its own.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HolderId(String);

/// Why a string cannot be a [`HolderId`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("a poller id must be 1–128 printable ASCII characters without spaces (got {0:?})")]
pub struct InvalidHolderId(pub String);

impl HolderId {
    /// Accepts 1–128 printable ASCII characters without whitespace: safe in logs and any store.
    pub fn new(id: impl Into<String>) -> Result<Self, InvalidHolderId> {
        let id = id.into();
        let valid = !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_graphic());
        if valid {
            Ok(Self(id))
        } else {
            Err(InvalidHolderId(id))
        }
    }

    /// `{host}:{pid}:{six random letters}`: unique per process, and says where it runs.
    pub fn generate(host: &str) -> Self {
        use rand::distr::{Alphanumeric, SampleString as _};
        let host: String = host
            .chars()
            .filter(char::is_ascii_graphic)
            .take(64)
            .collect();
        let host = if host.is_empty() { "host".into() } else { host };
        let suffix = Alphanumeric.sample_string(&mut rand::rng(), 6);
        Self(format!("{host}:{}:{suffix}", std::process::id()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for HolderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A term of leadership: what the holder presents to renew, checkpoint and release. The token is
/// the fencing token: every acquisition stores a higher one, so a term whose token is no longer
/// the lease's was overtaken, whatever its holder believes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    /// Who holds it.
    pub holder: HolderId,
    /// The fencing token of this acquisition.
    pub token: u64,
    /// When the lease ends unless renewed, by the clock of the poller that wrote it.
    pub until: Timestamp,
}

/// A lease someone else holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    /// The holder.
    pub holder: HolderId,
    /// Its token.
    pub token: u64,
    /// When its lease ends unless renewed.
    pub until: Timestamp,
}

/// The lease was taken over from a holder whose lease had lapsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TakeOver {
    /// The holder whose lease lapsed.
    pub from: HolderId,
    /// Its token.
    pub from_token: u64,
    /// The previous takeover was less than [`FLAP_WINDOW`] ago.
    pub flapping: bool,
}

/// An acquisition that won.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Won {
    /// The new term.
    pub term: Term,
    /// The offset checkpoint to resume getUpdates from, if any leader stored one.
    pub offset: Option<i64>,
    /// Set when the lease was taken from a holder that had not released it.
    pub took_over: Option<TakeOver>,
}

/// The outcome of [`PollerLease::acquire`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acquired {
    /// The lease is ours: poll.
    Won(Won),
    /// Another poller holds an unexpired lease: stand by.
    Held(Holding),
}

/// Why a holder's call was refused.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The term presented is no longer the lease's: a newer acquisition (a higher token) or a
    /// release came since. The caller must stop polling and may not write its offset.
    #[error("the poller lease is no longer held with token {token} (the lease's token is {})", .current.map_or_else(|| "unknown".to_owned(), |t| t.to_string()))]
    Lost {
        /// The token presented.
        token: u64,
        /// The lease's token now, when the store said.
        current: Option<u64>,
    },
    /// The store could not answer or refused the request for another reason.
    #[error(transparent)]
    Store(#[from] PortError),
}

/// The stored lease, as the in-process stores keep it and operations read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseState {
    /// The current holder; `None` once it released the lease.
    pub holder: Option<HolderId>,
    /// The fencing token of the last acquisition.
    pub token: u64,
    /// When the lease ends unless renewed.
    pub until: Timestamp,
    /// When the last acquisition happened.
    pub acquired_at: Timestamp,
    /// When the last takeover (an acquisition from a holder whose lease lapsed) happened.
    pub last_takeover_at: Option<Timestamp>,
    /// Takeovers so far.
    pub takeovers: u64,
    /// Takeovers that came within [`FLAP_WINDOW`] of the previous one.
    pub flaps: u64,
    /// The getUpdates offset the last checkpoint stored: every update below it is durable.
    pub offset: Option<i64>,
    /// The token of the term that stored [`LeaseState::offset`].
    pub offset_token: Option<u64>,
}

impl LeaseState {
    /// Whether `term` is this lease's current term.
    pub fn holds(&self, term: &Term) -> bool {
        self.holder.as_ref() == Some(&term.holder) && self.token == term.token
    }

    /// Who holds an unexpired lease at `now`; `None` when it is free (released or lapsed).
    pub fn held_at(&self, now: Timestamp) -> Option<Holding> {
        match &self.holder {
            Some(holder) if self.until > now => Some(Holding {
                holder: holder.clone(),
                token: self.token,
                until: self.until,
            }),
            _ => None,
        }
    }

    /// The acquisition rule: a missing or released lease is taken; a lapsed one is taken over; an
    /// unexpired one is left to its holder. Every acquisition stores the next token. Returns the
    /// outcome and, when it won, the state to store.
    pub fn acquire(
        stored: Option<&LeaseState>,
        holder: &HolderId,
        now: Timestamp,
        ttl: Duration,
    ) -> (Acquired, Option<LeaseState>) {
        let Some(stored) = stored else {
            let fresh = LeaseState {
                holder: Some(holder.clone()),
                token: 1,
                until: now.plus(ttl),
                acquired_at: now,
                last_takeover_at: None,
                takeovers: 0,
                flaps: 0,
                offset: None,
                offset_token: None,
            };
            return (Acquired::Won(fresh.won(holder, None)), Some(fresh));
        };
        if let Some(holding) = stored.held_at(now) {
            return (Acquired::Held(holding), None);
        }
        let mut next = LeaseState {
            holder: Some(holder.clone()),
            token: stored.token + 1,
            until: now.plus(ttl),
            acquired_at: now,
            ..stored.clone()
        };
        let took_over = stored.holder.as_ref().map(|from| {
            let flapping = stored
                .last_takeover_at
                .is_some_and(|at| now.since(at) < FLAP_WINDOW);
            next.last_takeover_at = Some(now);
            next.takeovers += 1;
            next.flaps += u64::from(flapping);
            TakeOver {
                from: from.clone(),
                from_token: stored.token,
                flapping,
            }
        });
        (Acquired::Won(next.won(holder, took_over)), Some(next))
    }

    fn won(&self, holder: &HolderId, took_over: Option<TakeOver>) -> Won {
        Won {
            term: Term {
                holder: holder.clone(),
                token: self.token,
                until: self.until,
            },
            offset: self.offset,
            took_over,
        }
    }

    /// The renewal rule: only the current term is renewed, to `now + ttl`. A holder whose lease
    /// lapsed while nobody took it still holds the token, and may renew.
    pub fn renew(
        stored: Option<&LeaseState>,
        term: &Term,
        now: Timestamp,
        ttl: Duration,
    ) -> Result<(Term, LeaseState), LeaseError> {
        let mut next = Self::held_by(stored, term)?;
        next.until = now.plus(ttl);
        let renewed = Term {
            until: next.until,
            ..term.clone()
        };
        Ok((renewed, next))
    }

    /// The checkpoint rule: only the current term stores an offset, with its token.
    pub fn checkpoint(
        stored: Option<&LeaseState>,
        term: &Term,
        offset: i64,
    ) -> Result<LeaseState, LeaseError> {
        let mut next = Self::held_by(stored, term)?;
        next.offset = Some(offset);
        next.offset_token = Some(term.token);
        Ok(next)
    }

    /// The release rule: the current term gives the lease up at `now`; the token stays, so the
    /// next acquisition stores a higher one.
    pub fn release(
        stored: Option<&LeaseState>,
        term: &Term,
        now: Timestamp,
    ) -> Result<LeaseState, LeaseError> {
        let mut next = Self::held_by(stored, term)?;
        next.holder = None;
        next.until = now;
        Ok(next)
    }

    fn held_by(stored: Option<&LeaseState>, term: &Term) -> Result<LeaseState, LeaseError> {
        match stored {
            Some(state) if state.holds(term) => Ok(state.clone()),
            _ => Err(LeaseError::Lost {
                token: term.token,
                current: stored.map(|s| s.token),
            }),
        }
    }
}

/// The poller lease of one bot, in the store the pollers share. Every call names the time it
/// is made at by the caller's clock, so the rule is the same for every store and testable without
/// sleeping.
#[async_trait]
pub trait PollerLease: Send + Sync {
    /// Takes the lease when it is missing, released or lapsed at `now`, for `ttl`, with the next
    /// fencing token; otherwise says who holds it.
    async fn acquire(
        &self,
        holder: &HolderId,
        now: Timestamp,
        ttl: Duration,
    ) -> Result<Acquired, LeaseError>;

    /// Extends the current term to `now + ttl`; [`LeaseError::Lost`] when `term` is not current.
    async fn renew(&self, term: &Term, now: Timestamp, ttl: Duration) -> Result<Term, LeaseError>;

    /// Stores the getUpdates offset below which every update is durable, with the term's token;
    /// [`LeaseError::Lost`] when `term` is not current (a stale leader never overwrites its
    /// successor's progress).
    async fn checkpoint(&self, term: &Term, offset: i64) -> Result<(), LeaseError>;

    /// Gives the lease up at once (a clean shutdown); [`LeaseError::Lost`] when `term` is not
    /// current, and then nothing changes.
    async fn release(&self, term: &Term, now: Timestamp) -> Result<(), LeaseError>;

    /// The lease as stored, for operations and standbys; `None` before any poller acquired it.
    async fn read(&self) -> Result<Option<LeaseState>, PortError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str) -> HolderId {
        HolderId::new(name).unwrap()
    }

    const TTL: Duration = Duration::from_secs(15);

    fn won(outcome: (Acquired, Option<LeaseState>)) -> (Won, LeaseState) {
        match outcome {
            (Acquired::Won(won), Some(state)) => (won, state),
            other => panic!("expected a win, got {other:?}"),
        }
    }

    #[test]
    fn a_takeover_within_a_minute_of_the_previous_one_is_flapping() {
        let t0 = Timestamp(1_000_000);
        let (_, first) = won(LeaseState::acquire(None, &id("a"), t0, TTL));
        let at = |s: u64| t0.plus(Duration::from_secs(s));
        let (second, state) = won(LeaseState::acquire(Some(&first), &id("b"), at(16), TTL));
        assert_eq!(second.took_over.as_ref().map(|t| t.flapping), Some(false));
        let (third, state) = won(LeaseState::acquire(Some(&state), &id("c"), at(32), TTL));
        assert_eq!(third.took_over.as_ref().map(|t| t.flapping), Some(true));
        let (fourth, state) = won(LeaseState::acquire(Some(&state), &id("a"), at(200), TTL));
        assert_eq!(fourth.took_over.map(|t| t.flapping), Some(false));
        assert_eq!((state.takeovers, state.flaps, state.token), (3, 1, 4));
    }

    #[test]
    fn a_released_lease_is_handed_over_without_counting_a_takeover() {
        let t0 = Timestamp(1_000_000);
        let (first, state) = won(LeaseState::acquire(None, &id("a"), t0, TTL));
        let released = LeaseState::release(Some(&state), &first.term, t0).unwrap();
        let (second, state) = won(LeaseState::acquire(Some(&released), &id("b"), t0, TTL));
        assert_eq!((second.term.token, second.took_over), (2, None));
        assert_eq!(state.takeovers, 0);
    }

    #[test]
    fn holder_ids_are_printable_and_generated_ones_differ() {
        assert!(HolderId::new("a b").is_err());
        assert!(HolderId::new("").is_err());
        let (one, two) = (HolderId::generate("box"), HolderId::generate("box"));
        assert_ne!(one, two);
        assert!(one.as_str().starts_with("box:"), "{one}");
    }
}
