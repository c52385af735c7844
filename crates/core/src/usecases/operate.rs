//! The operator's use cases on dead letters (docs/design/operate.md): list, show, replay and
//! purge, the same on AWS and on the embedded store, every replay and purge audited.
//!
//! A replay restarts the update's record (a fresh budget; only if it is `DEAD` or never finished,
//! so a letter replayed twice or a stray one cannot run an update that has run since), then sends
//! the update to the updates queue with a new deduplication id (SQS FIFO would drop the original id
//! for five minutes), and deletes the letter only once that send succeeded.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crate::audit::{AuditAction, AuditEntry, AuditLog};
use crate::clock::Clock;
use crate::error::{error_chain, PortError};
use crate::ids::{MessageGroupId, RecordKey, UpdateId};
use crate::ports::{
    DeadLetter, DeadLetterStore, HeldLetter, LetterHandle, OutgoingMessage, RecordReader, Reset,
    ResetRequest, ResetRule, UpdateQueue, UpdateReset,
};
use crate::record::{Status, Timestamp};

/// Letters held per round trip (SQS's most per receive).
const BATCH: usize = 10;
/// How long listing and showing hold letters; they are released before the command ends, and this
/// bounds how long they stay hidden if it dies first.
const LOOK_HOLD: Duration = Duration::from_secs(30);
/// How long a replay or purge holds a batch: long enough for a batch's writes and sends.
const ACT_HOLD: Duration = Duration::from_secs(120);

/// Who the operator is and how long audit entries are kept.
#[derive(Clone, Debug)]
pub struct OperatorSettings {
    /// The caller's identity, written into every audit entry.
    pub principal: String,
    /// How long audit entries are kept: as long as records.
    pub audit_ttl: Duration,
}

/// The ports the operator's tool uses.
#[derive(Clone)]
pub struct OperatorPorts {
    /// The dead-letter queue.
    pub dead: Arc<dyn DeadLetterStore>,
    /// Reads records, for a dry run.
    pub records: Arc<dyn RecordReader>,
    /// Restarts records.
    pub reset: Arc<dyn UpdateReset>,
    /// The updates queue a replay sends to.
    pub queue: Arc<dyn UpdateQueue>,
    /// Where replays and purges are audited.
    pub audit: Arc<dyn AuditLog>,
    /// Tells the time.
    pub clock: Arc<dyn Clock>,
}

/// Which letters a replay or purge acts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    /// Every letter the queue gives.
    All,
    /// The letters with these ids.
    Ids(BTreeSet<String>),
}

impl Selection {
    fn includes(&self, id: &str) -> bool {
        match self {
            Selection::All => true,
            Selection::Ids(ids) => ids.contains(id),
        }
    }
}

/// A letter as an operator sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedLetter {
    /// Its id in the queue.
    pub id: String,
    /// When it was dead-lettered, when known.
    pub sent_at: Option<Timestamp>,
    /// The letter.
    pub letter: DeadLetter,
}

impl From<HeldLetter> for ListedLetter {
    fn from(held: HeldLetter) -> Self {
        Self {
            id: held.id,
            sent_at: held.sent_at,
            letter: held.letter,
        }
    }
}

/// A letter a replay or purge acted on (or, in a dry run, would act on).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acted {
    /// The letter's id.
    pub id: String,
    /// Its update, when it had one.
    pub update_id: Option<UpdateId>,
    /// What was done, in words.
    pub detail: String,
}

/// A letter a replay or purge could not act on, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// The letter's id.
    pub id: String,
    /// Its update, when known.
    pub update_id: Option<UpdateId>,
    /// Why, in words.
    pub why: String,
}

/// What a replay or purge came to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// What was done.
    pub acted: Vec<Acted>,
    /// What could not be done, and why.
    pub skipped: Vec<Skipped>,
    /// Set when the queue itself failed and the walk stopped early.
    pub stopped: Option<String>,
    /// Letters dead-lettered after the walk began (a replayed update that failed again comes back
    /// under a new id), left for the next run.
    pub later: u64,
}

/// How far a replay or purge has come, for a progress bar.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Letters acted on.
    pub acted: u64,
    /// Letters skipped.
    pub skipped: u64,
}

impl Report {
    fn tally(&self) -> Tally {
        Tally {
            acted: self.acted.len() as u64,
            skipped: self.skipped.len() as u64,
        }
    }
}

/// What a walk over the letters does to each selected one.
#[derive(Clone, Copy, Debug)]
enum Job {
    Replay(Replay),
    Purge,
}

/// How a replay goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replay {
    /// Check each letter against its record as a replay would, and change nothing.
    pub dry_run: bool,
    /// Replay a letter whose record is gone too (expired, or deleted): the sends and steps the
    /// update recorded went with it, so its run may repeat what it did before it died.
    pub force: bool,
}

/// The operator's use cases.
#[derive(Clone)]
pub struct Operator {
    settings: OperatorSettings,
    ports: OperatorPorts,
}

impl Operator {
    /// An operator with these settings and ports.
    pub fn new(settings: OperatorSettings, ports: OperatorPorts) -> Self {
        Self { settings, ports }
    }

    /// Up to `max` letters, oldest first, left in the queue.
    pub async fn list(&self, max: usize) -> Result<Vec<ListedLetter>, PortError> {
        let mut seen = HashSet::new();
        let mut held: Vec<HeldLetter> = Vec::new();
        let mut outcome = Ok(());
        while held.len() < max {
            let batch = match self
                .ports
                .dead
                .hold(BATCH.min(max - held.len()), LOOK_HOLD)
                .await
            {
                Ok(batch) => batch,
                Err(error) => {
                    outcome = Err(error);
                    break;
                }
            };
            let before = held.len();
            for letter in batch {
                if seen.insert(letter.id.clone()) {
                    held.push(letter);
                } else {
                    self.release(&letter.handle).await;
                }
            }
            if held.len() == before {
                break;
            }
        }
        for letter in &held {
            self.release(&letter.handle).await;
        }
        outcome?;
        held.sort_by_key(|letter| letter.sent_at.unwrap_or(Timestamp(u64::MAX)));
        Ok(held.into_iter().take(max).map(ListedLetter::from).collect())
    }

    /// The letter with this id, left in the queue; `None` when the queue does not give it.
    pub async fn show(&self, id: &str) -> Result<Option<ListedLetter>, PortError> {
        let letters = self.list(usize::MAX).await?;
        Ok(letters.into_iter().find(|letter| letter.id == id))
    }

    /// About how many letters the queue holds.
    pub async fn depth(&self) -> Result<u64, PortError> {
        self.ports.dead.depth().await
    }

    /// Replays the selected letters, oldest first. In a dry run nothing is written; each letter is
    /// checked against its record as a replay would check it. A letter whose record is gone is
    /// left in the queue unless `force`.
    pub async fn replay(
        &self,
        selection: &Selection,
        how: Replay,
        progress: &(dyn Fn(Tally) + Send + Sync),
    ) -> Report {
        self.walk(selection, Job::Replay(how), progress).await
    }

    /// Deletes the selected letters, each audited.
    pub async fn purge(
        &self,
        selection: &Selection,
        progress: &(dyn Fn(Tally) + Send + Sync),
    ) -> Report {
        self.walk(selection, Job::Purge, progress).await
    }

    /// Holds the queue's letters batch by batch and does `job` to each selected one. Letters it
    /// keeps are released at the end. Once a letter of a chat could not be replayed, the chat's
    /// later letters are left too: replaying them would overtake it.
    ///
    /// The walk acts only on the letters that were in the queue when it began (sent at or before
    /// its start): an update it replays that fails again comes back as a new letter, and taking
    /// those too would replay the same updates for as long as they fail. Each letter id is taken
    /// once, and the walk ends when a batch brings no letter it has not seen: every letter it sees
    /// is either one of the finite set it began with or one its own replays produced, so it ends.
    async fn walk(
        &self,
        selection: &Selection,
        job: Job,
        progress: &(dyn Fn(Tally) + Send + Sync),
    ) -> Report {
        let mut report = Report::default();
        let mut seen: HashSet<String> = HashSet::new();
        let mut keep: Vec<LetterHandle> = Vec::new();
        let mut blocked: HashSet<String> = HashSet::new();
        let began = self.ports.clock.now();
        loop {
            if let Selection::Ids(ids) = selection {
                if ids.iter().all(|id| seen.contains(id)) {
                    break;
                }
            }
            let batch = match self.ports.dead.hold(BATCH, ACT_HOLD).await {
                Ok(batch) => batch,
                Err(error) => {
                    report.stopped = Some(format!(
                        "the dead-letter queue failed: {}",
                        error_chain(&error)
                    ));
                    break;
                }
            };
            let mut fresh = Vec::new();
            for held in batch {
                if seen.insert(held.id.clone()) {
                    fresh.push(held);
                } else {
                    keep.push(held.handle);
                }
            }
            if fresh.is_empty() {
                break;
            }
            fresh.sort_by_key(|held| held.sent_at.unwrap_or(Timestamp(u64::MAX)));
            for held in fresh {
                if !selection.includes(&held.id) {
                    keep.push(held.handle);
                    continue;
                }
                if held.sent_at.is_some_and(|sent| sent > began) {
                    report.later += 1;
                    keep.push(held.handle);
                    continue;
                }
                let chat = held.letter.group_id();
                let done = match job {
                    Job::Replay(how) => self.replay_one(&held, how, &blocked).await,
                    Job::Purge => self.purge_one(&held).await,
                };
                match done {
                    Ok(acted) => {
                        if matches!(job, Job::Replay(Replay { dry_run: true, .. })) {
                            keep.push(held.handle);
                        }
                        report.acted.push(acted);
                    }
                    Err(why) => {
                        blocked.insert(chat);
                        keep.push(held.handle);
                        report.skipped.push(Skipped {
                            id: held.id,
                            update_id: held.letter.update_id,
                            why,
                        });
                    }
                }
                progress(report.tally());
            }
        }
        for handle in &keep {
            self.release(handle).await;
        }
        if let Selection::Ids(ids) = selection {
            for id in ids.iter().filter(|id| !seen.contains(*id)) {
                report.skipped.push(Skipped {
                    id: id.clone(),
                    update_id: None,
                    why: "not in the dead-letter queue, or behind ten earlier letters of its chat \
                          (a FIFO queue shows those first: replay or purge them first)"
                        .into(),
                });
            }
        }
        report
    }

    /// Replays one held letter; `Err` says why it was left in the queue.
    async fn replay_one(
        &self,
        held: &HeldLetter,
        how: Replay,
        blocked: &HashSet<String>,
    ) -> Result<Acted, String> {
        let letter = &held.letter;
        let Some(update_id) = letter.update_id else {
            return Err("not an update (poison): there is nothing to replay; purge it".into());
        };
        let Some(group) = &letter.group else {
            return Err("the letter does not name its chat, so its order cannot be kept".into());
        };
        if blocked.contains(&letter.group_id()) {
            return Err(
                "an earlier letter of its chat could not be replayed; this one would overtake it"
                    .into(),
            );
        }
        let key = RecordKey::new(letter.bot_id.clone(), update_id);
        let now = self.ports.clock.now();
        let request = ResetRequest {
            key: key.clone(),
            now,
            rule: ResetRule::DeadOrUnfinished,
        };
        let acted = |detail: String| Acted {
            id: held.id.clone(),
            update_id: Some(update_id),
            detail,
        };
        // Looked up before the reset, so a dry run or a refusal writes nothing: a gone record
        // stays gone.
        if how.dry_run || !how.force {
            let stored = self
                .ports
                .records
                .get(&key, now)
                .await
                .map_err(|e| format!("its record could not be read: {}", error_chain(&e)))?;
            if stored.is_none() && !how.force {
                if !how.dry_run {
                    self.audit(
                        AuditAction::Replay,
                        held,
                        &format!("refused: {RECORD_GONE}"),
                    )
                    .await;
                }
                return Err(RECORD_GONE.into());
            }
            if how.dry_run {
                return match request.apply(stored).0 {
                    Reset::Refused(status) => Err(refusal(status)),
                    reset => Ok(acted(format!("would replay: {}", restarted(reset)))),
                };
            }
        }
        let reset = match self.ports.reset.reset(&request).await {
            Ok(Reset::Refused(status)) => {
                self.audit(
                    AuditAction::Replay,
                    held,
                    &format!("refused: {}", refusal(status)),
                )
                .await;
                return Err(refusal(status));
            }
            Ok(reset) => reset,
            Err(error) => {
                return Err(format!(
                    "its record could not be restarted: {}",
                    error_chain(&error)
                ))
            }
        };
        let message = OutgoingMessage {
            group_id: MessageGroupId::new(&letter.bot_id, group),
            dedup_id: replay_dedup_id(&key, now),
            body: letter.body.clone(),
        };
        if let Err(error) = self.ports.queue.enqueue(&message).await {
            let why = format!(
                "its record was restarted, but the update could not be sent to the updates queue \
                 ({}); the letter is kept: replay it again",
                error_chain(&error)
            );
            self.audit(AuditAction::Replay, held, &format!("failed: {why}"))
                .await;
            return Err(why);
        }
        let mut detail = format!("sent to the updates queue; {}", restarted(reset));
        if let Err(error) = self.ports.dead.remove(&held.handle).await {
            detail.push_str(&format!(
                "; the letter could not be deleted ({}): purge it (a second replay is refused once \
                 the update has run)",
                error_chain(&error)
            ));
        }
        detail.push_str(&self.audit(AuditAction::Replay, held, &detail).await);
        Ok(acted(detail))
    }

    /// Deletes one held letter; `Err` says why it is still there.
    async fn purge_one(&self, held: &HeldLetter) -> Result<Acted, String> {
        if let Err(error) = self.ports.dead.remove(&held.handle).await {
            return Err(format!(
                "the letter could not be deleted: {}",
                error_chain(&error)
            ));
        }
        let mut detail = "deleted".to_owned();
        detail.push_str(&self.audit(AuditAction::Purge, held, &detail).await);
        Ok(Acted {
            id: held.id.clone(),
            update_id: held.letter.update_id,
            detail,
        })
    }

    /// Appends an audit entry; returns a note for the report when it could not be written.
    async fn audit(&self, action: AuditAction, held: &HeldLetter, outcome: &str) -> String {
        let now = self.ports.clock.now();
        let entry = AuditEntry {
            at: now,
            principal: self.settings.principal.clone(),
            action,
            bot_id: held.letter.bot_id.clone(),
            update_id: held.letter.update_id,
            letter_id: Some(held.id.clone()),
            outcome: outcome.to_owned(),
            expires_at: now.plus(self.settings.audit_ttl),
        };
        match self.ports.audit.append(&entry).await {
            Ok(()) => String::new(),
            Err(error) => format!(" (not audited: {})", error_chain(&error)),
        }
    }

    async fn release(&self, handle: &LetterHandle) {
        if let Err(error) = self.ports.dead.release(handle).await {
            tracing::warn!(error = %error_chain(&error), "a held dead letter stays hidden until its hold ends");
        }
    }
}

/// A replayed update's deduplication id: a new one for every replay, so the queue never drops it
/// as a repeat of the original send or of an earlier replay.
pub(crate) fn replay_dedup_id(key: &RecordKey, now: Timestamp) -> String {
    format!(
        "{}:replay:{}:{:08x}",
        key.dedup_id(),
        now.0,
        rand::random::<u32>()
    )
}

/// Why a letter whose record is gone is not replayed without `--force`.
const RECORD_GONE: &str =
    "its record is gone (expired or deleted), and with it the sends and steps \
     the update recorded: a replay may repeat any of them; replay it with --force to run it anyway";

/// What a reset did, in words.
fn restarted(reset: Reset) -> String {
    match reset {
        Reset::Restarted(from) => {
            format!("its record was restarted from {from} with a fresh budget")
        }
        Reset::Absent => "replayed with --force: it had no record, so sends and steps it made \
                          before may be made again; its run creates a record with a fresh budget"
            .into(),
        Reset::Refused(status) => refusal(status),
    }
}

/// Why a record in `status` is not restarted, in words.
fn refusal(status: Status) -> String {
    match status {
        Status::Done => "the update was processed since (DONE): replaying it would run it twice; \
                         purge the letter"
            .into(),
        Status::Processing => "a worker is running the update right now".into(),
        other => format!("its record is {other}"),
    }
}
