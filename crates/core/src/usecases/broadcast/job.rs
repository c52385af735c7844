//! A job: its id, its state and the changes that move it, its counts.

use super::*;

/// A broadcast's id: the store's sequence number.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BroadcastId(pub u64);

impl fmt::Display for BroadcastId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Where a job is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum JobState {
    /// Sending, or waiting for its next recipient.
    Running,
    /// Held by an operator, or by tgq with the reason (a payload Telegram refuses).
    Paused {
        /// Why tgq paused it; `None` when an operator did.
        reason: Option<String>,
    },
    /// Stopped for good; the recipients not yet sent to are skipped.
    Cancelled,
    /// Every recipient has an outcome.
    Done,
}

impl JobState {
    /// The word `tgq broadcast` shows.
    pub fn as_str(&self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Paused { .. } => "paused",
            JobState::Cancelled => "cancelled",
            JobState::Done => "done",
        }
    }

    /// Whether nothing more happens to the job.
    pub fn is_final(&self) -> bool {
        matches!(self, JobState::Cancelled | JobState::Done)
    }
}

/// What an operator (or the runner) asks of a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Hold it.
    Pause,
    /// Let a paused job go on.
    Resume,
    /// Stop it for good.
    Cancel,
    /// Hold it with a reason (the runner, on a refused payload).
    PauseBecause(String),
    /// Every recipient has an outcome (the runner).
    Finish,
}

/// The answer to a [`Change`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Changed {
    /// Done; the job as it is now.
    Changed {
        /// The job.
        job: BroadcastJob,
    },
    /// The job is in a state the change does not apply to (resuming a running job, pausing a
    /// finished one); nothing changed.
    Refused {
        /// The job as it is.
        job: BroadcastJob,
    },
    /// No such job.
    NotFound,
}

/// How many recipients are where.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Recipients in all.
    pub total: u64,
    /// Sent, with a message id.
    pub sent: u64,
    /// Blocked the bot, deleted their account, or left the chat: not retried.
    pub gone: u64,
    /// Failed for good (the job's dead letters).
    pub failed: u64,
    /// Their send began and never ended (a crash): not sent again, maybe delivered.
    pub uncertain: u64,
    /// Waiting for another try after a passing failure.
    pub retrying: u64,
}

impl Counts {
    /// Recipients with no outcome yet (retrying ones included).
    pub fn pending(&self) -> u64 {
        self.total
            .saturating_sub(self.sent + self.gone + self.failed + self.uncertain)
    }
}

/// A broadcast job as the store keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BroadcastJob {
    /// Its id.
    pub id: BroadcastId,
    /// What it sends.
    pub spec: BroadcastSpec,
    /// Where it is.
    pub state: JobState,
    /// Its recipients' outcomes.
    pub counts: Counts,
    /// When it was created.
    pub created_at: Timestamp,
    /// When its first and its latest message were sent.
    pub first_sent_at: Option<Timestamp>,
    /// The latest.
    pub last_sent_at: Option<Timestamp>,
    /// When it ended (done or cancelled).
    pub ended_at: Option<Timestamp>,
    /// Refusals of the message before any recipient took it (toward [`REFUSALS_BEFORE_PAUSE`]).
    pub refusals: u32,
    /// The last error a recipient's send met (never message text).
    pub last_error: Option<String>,
    /// Whether its audience is still being written as recipients, by its own runs
    /// ([`BroadcastStore::expand`]): `counts.total` is what is written so far, and nothing is
    /// sent until all are.
    #[serde(default)]
    pub expanding: bool,
}

impl BroadcastJob {
    /// A new running job of `total` recipients.
    pub fn new(id: BroadcastId, spec: BroadcastSpec, total: u64, now: Timestamp) -> Self {
        Self {
            id,
            spec,
            state: JobState::Running,
            counts: Counts {
                total,
                ..Counts::default()
            },
            created_at: now,
            first_sent_at: None,
            last_sent_at: None,
            ended_at: None,
            refusals: 0,
            last_error: None,
            expanding: false,
        }
    }

    /// Applies `change`, as every store does: `false` when it does not apply.
    pub fn apply(&mut self, change: &Change, now: Timestamp) -> bool {
        let next = match (&self.state, change) {
            (JobState::Running, Change::Pause) => JobState::Paused { reason: None },
            (JobState::Running, Change::PauseBecause(reason)) => JobState::Paused {
                reason: Some(reason.clone()),
            },
            (JobState::Paused { .. }, Change::Resume) => {
                self.refusals = 0;
                JobState::Running
            }
            (JobState::Running | JobState::Paused { .. }, Change::Cancel) => JobState::Cancelled,
            (JobState::Running, Change::Finish) => JobState::Done,
            _ => return false,
        };
        if next.is_final() {
            self.ended_at = Some(now);
        }
        self.state = next;
        true
    }

    /// Whether [`BroadcastStore::retry`] may put its recipients back: it is done or paused.
    pub fn takes_retry(&self) -> bool {
        matches!(self.state, JobState::Done | JobState::Paused { .. })
    }

    /// Counts that a recipient in state `was` is on the list again ([`BroadcastStore::retry`]);
    /// a job that was done runs again.
    pub fn retried(&mut self, was: &RecipientState) {
        let c = &mut self.counts;
        match was {
            RecipientState::Failed { .. } => c.failed = c.failed.saturating_sub(1),
            RecipientState::Uncertain { .. } => c.uncertain = c.uncertain.saturating_sub(1),
            _ => return,
        }
        c.retrying += 1;
        if self.state == JobState::Done {
            self.state = JobState::Running;
            self.ended_at = None;
        }
    }

    /// Counts that a recipient in state `was` began its send.
    pub fn began(&mut self, was: &RecipientState) {
        if matches!(was, RecipientState::Retrying { .. }) {
            self.counts.retrying = self.counts.retrying.saturating_sub(1);
        }
    }

    /// Counts a begun send's outcome.
    pub fn count(&mut self, outcome: &Outcome, at: Timestamp) {
        let c = &mut self.counts;
        match outcome {
            Outcome::Sent { .. } => {
                c.sent += 1;
                self.first_sent_at.get_or_insert(at);
                self.last_sent_at = Some(at);
                self.refusals = 0;
            }
            Outcome::Gone { .. } => c.gone += 1,
            Outcome::Failed { error } => {
                c.failed += 1;
                self.last_error = Some(error.clone());
            }
            Outcome::Uncertain { .. } => c.uncertain += 1,
            Outcome::Retry { error, .. } => {
                c.retrying += 1;
                self.last_error = Some(error.clone());
            }
            Outcome::Refused { error } => {
                c.retrying += 1;
                self.refusals += 1;
                self.last_error = Some(error.clone());
            }
            Outcome::Held { .. } => c.retrying += 1,
            Outcome::Unsent { error, .. } | Outcome::Halted { error } => {
                c.retrying += 1;
                self.last_error = Some(error.clone());
            }
        }
    }

    /// The job's rate so far, messages a second from its first send to its latest.
    pub fn rate(&self) -> Option<f64> {
        let (first, last) = (self.first_sent_at?, self.last_sent_at?);
        let secs = last.since(first).as_secs_f64();
        (self.counts.sent > 1 && secs > 0.0).then(|| (self.counts.sent - 1) as f64 / secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_moves_only_along_its_states() {
        let now = Timestamp(0);
        let mut job = BroadcastJob::new(BroadcastId(1), super::spec::tests::spec(), 1, now);
        assert!(!job.apply(&Change::Resume, now));
        assert!(job.apply(&Change::Pause, now));
        assert!(!job.apply(&Change::Pause, now));
        assert!(!job.apply(&Change::Finish, now));
        assert!(job.apply(&Change::Resume, now));
        assert!(job.apply(&Change::Cancel, now));
        assert_eq!(job.ended_at, Some(now));
        for change in [
            Change::Pause,
            Change::Resume,
            Change::Cancel,
            Change::Finish,
        ] {
            assert!(!job.apply(&change, now), "{change:?} after a cancel");
        }
    }
}
