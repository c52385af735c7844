//! Broadcast jobs in memory, with the chats' states an audience is chosen from.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::Value;
use tgq_core::broadcast::chain::StepClaim;
use tgq_core::broadcast::{
    BroadcastId, BroadcastJob, BroadcastSpec, BroadcastStore, Change, Changed, Created, Indexes,
    Outcome, Recipient, RecipientState, Retried, StateFilter,
};
use tgq_core::error::PortError;
use tgq_core::ids::{BotId, GroupKey, StateKey};
use tgq_core::record::Timestamp;
use tgq_core::state::StoredState;

use crate::{MemoryStore, Outage};

/// Jobs by id, each with its recipients in list order; the chats' states are a [`MemoryStore`]'s.
#[derive(Default)]
pub struct MemoryBroadcasts {
    jobs: Mutex<BTreeMap<u64, Job>>,
    states: Arc<MemoryStore>,
    /// Fails every call while set.
    pub outage: Outage,
    /// How long each begin takes, in turn (none: at once): a store slow by moments.
    begin_times: Mutex<(Vec<Duration>, usize)>,
    /// When each recipient's latest begin was written (tokio's time), by its index.
    begun_at: Mutex<BTreeMap<u64, tokio::time::Instant>>,
}

struct Job {
    job: BroadcastJob,
    recipients: Vec<Recipient>,
    /// The latest step of its chain claimed, and the message that holds it.
    chain: Option<(u64, String)>,
}

impl MemoryBroadcasts {
    /// No jobs, no states.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes each begin take the next of `times`, in turn, from the first again after the last:
    /// a store whose writes are slow by moments, and not all alike.
    pub fn slow_begins(&self, times: Vec<Duration>) {
        *self.begin_times.lock() = (times, 0);
    }

    /// How many begins were asked for, written or not.
    pub fn begins(&self) -> usize {
        self.begin_times.lock().1
    }

    /// When the latest begin of the recipient at `index` (of any job) was written, on tokio's
    /// clock: with the moment its call arrived, how long the call waited after its intent.
    pub fn begun_at(&self, index: u64) -> Option<tokio::time::Instant> {
        self.begun_at.lock().get(&index).copied()
    }

    /// No jobs; the audiences are chosen from the states `store` keeps.
    pub fn over(store: Arc<MemoryStore>) -> Self {
        Self {
            states: store,
            ..Self::default()
        }
    }

    /// Keeps a chat's state of `format` for [`BroadcastStore::chats_matching`].
    pub fn put_state(&self, bot: &BotId, chat: i64, format: &str, json: Value) {
        let key = StateKey::new(bot.clone(), GroupKey::new(chat.to_string()));
        let state = StoredState {
            format: format.to_owned(),
            json: json.to_string(),
            version: 1,
            time: None,
        };
        self.states.put_state(key, state);
    }

    /// Every recipient of a job, in list order.
    pub fn recipients(&self, id: &BroadcastId) -> Vec<Recipient> {
        self.jobs
            .lock()
            .get(&id.0)
            .map(|job| job.recipients.clone())
            .unwrap_or_default()
    }
}

#[async_trait]
impl BroadcastStore for MemoryBroadcasts {
    async fn create(
        &self,
        spec: &BroadcastSpec,
        chats: &[i64],
        now: Timestamp,
    ) -> Result<Created, PortError> {
        self.outage.check("broadcast create")?;
        let mut jobs = self.jobs.lock();
        if spec.origin != "cli" {
            if let Some(job) = jobs.values().find(|j| j.job.spec.origin == spec.origin) {
                return Ok(Created::Existing {
                    job: job.job.clone(),
                });
            }
        }
        let id = BroadcastId(jobs.keys().next_back().map_or(1, |last| last + 1));
        let job = BroadcastJob::new(id.clone(), spec.clone(), chats.len() as u64, now);
        let recipients = chats
            .iter()
            .enumerate()
            .map(|(index, chat)| Recipient {
                index: index as u64,
                chat: *chat,
                attempts: 0,
                state: RecipientState::Pending,
            })
            .collect();
        jobs.insert(
            id.0,
            Job {
                job: job.clone(),
                recipients,
                chain: None,
            },
        );
        Ok(Created::New { job })
    }

    async fn jobs(&self) -> Result<Vec<BroadcastJob>, PortError> {
        self.outage.check("broadcast jobs")?;
        Ok(self
            .jobs
            .lock()
            .values()
            .rev()
            .map(|j| j.job.clone())
            .collect())
    }

    async fn open_jobs(&self) -> Result<Vec<BroadcastJob>, PortError> {
        let mut open = self.jobs().await?;
        open.retain(|job| !job.state.is_final());
        Ok(open)
    }

    async fn job(&self, id: &BroadcastId) -> Result<Option<BroadcastJob>, PortError> {
        self.outage.check("broadcast job")?;
        Ok(self.jobs.lock().get(&id.0).map(|j| j.job.clone()))
    }

    async fn change(
        &self,
        id: &BroadcastId,
        change: Change,
        now: Timestamp,
    ) -> Result<Changed, PortError> {
        self.outage.check("broadcast change")?;
        let mut jobs = self.jobs.lock();
        let Some(job) = jobs.get_mut(&id.0) else {
            return Ok(Changed::NotFound);
        };
        Ok(match job.job.apply(&change, now) {
            true => Changed::Changed {
                job: job.job.clone(),
            },
            false => Changed::Refused {
                job: job.job.clone(),
            },
        })
    }

    async fn next(
        &self,
        id: &BroadcastId,
        span: &Indexes,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Recipient>, PortError> {
        self.outage.check("broadcast next")?;
        let jobs = self.jobs.lock();
        let Some(job) = jobs.get(&id.0) else {
            return Ok(Vec::new());
        };
        let in_span = || job.recipients.iter().filter(|r| span.contains(&r.index));
        let mut due: Vec<&Recipient> = in_span()
            .filter(|r| matches!(r.state, RecipientState::Retrying { due } if due <= now.0))
            .collect();
        // The earliest due first, as the stores that index them by due time give them.
        due.sort_by_key(|r| match r.state {
            RecipientState::Retrying { due } => (due, r.index),
            _ => (0, r.index),
        });
        let fresh = in_span().filter(|r| r.state == RecipientState::Pending);
        Ok(due.into_iter().chain(fresh).take(limit).cloned().collect())
    }

    async fn next_retry(
        &self,
        id: &BroadcastId,
        span: &Indexes,
    ) -> Result<Option<Timestamp>, PortError> {
        self.outage.check("broadcast next retry")?;
        let jobs = self.jobs.lock();
        Ok(jobs.get(&id.0).and_then(|job| {
            job.recipients
                .iter()
                .filter(|r| span.contains(&r.index))
                .filter_map(|r| match r.state {
                    RecipientState::Retrying { due } => Some(Timestamp(due)),
                    _ => None,
                })
                .min()
        }))
    }

    async fn begin(&self, id: &BroadcastId, index: u64) -> Result<(), PortError> {
        let took = {
            let mut times = self.begin_times.lock();
            let (times, next) = &mut *times;
            let took = times.get(*next % times.len().max(1)).copied();
            *next += 1;
            took
        };
        if let Some(took) = took {
            tokio::time::sleep(took).await;
        }
        self.outage.check("broadcast begin")?;
        let mut jobs = self.jobs.lock();
        let refused = |why: &str| {
            Err(PortError::rejected(
                "broadcast begin",
                format!("recipient {index} of broadcast {id} {why}"),
            ))
        };
        let Some(job) = jobs.get_mut(&id.0) else {
            return refused("has no job");
        };
        let Some(recipient) = job.recipients.get_mut(index as usize) else {
            return refused("does not exist");
        };
        // Begun or ended already: a second begin would be a second send.
        if !matches!(
            recipient.state,
            RecipientState::Pending | RecipientState::Retrying { .. }
        ) {
            return refused("is not waiting to be sent to");
        }
        job.job.began(&recipient.state);
        recipient.state = RecipientState::Sending;
        self.begun_at
            .lock()
            .insert(index, tokio::time::Instant::now());
        Ok(())
    }

    async fn settle(
        &self,
        id: &BroadcastId,
        index: u64,
        outcome: Outcome,
        now: Timestamp,
    ) -> Result<(), PortError> {
        self.outage.check("broadcast settle")?;
        let mut jobs = self.jobs.lock();
        let Some(job) = jobs.get_mut(&id.0) else {
            return Ok(());
        };
        let Some(recipient) = job.recipients.get_mut(index as usize) else {
            return Ok(());
        };
        // Only a begun send settles: a settle repeated after it was recorded changes nothing.
        if recipient.state != RecipientState::Sending {
            return Ok(());
        }
        recipient.attempts += u32::from(outcome.spends_attempt());
        recipient.state = outcome.state(now);
        job.job.count(&outcome, now);
        Ok(())
    }

    async fn abandon_begun(
        &self,
        id: &BroadcastId,
        span: &Indexes,
        now: Timestamp,
    ) -> Result<u64, PortError> {
        self.outage.check("broadcast abandon")?;
        let mut jobs = self.jobs.lock();
        let Some(job) = jobs.get_mut(&id.0) else {
            return Ok(0);
        };
        let (mut abandoned, outcome) = (0, Outcome::abandoned());
        for recipient in &mut job.recipients {
            if recipient.state == RecipientState::Sending && span.contains(&recipient.index) {
                recipient.state = outcome.state(now);
                job.job.count(&outcome, now);
                abandoned += 1;
            }
        }
        Ok(abandoned)
    }

    async fn undelivered(
        &self,
        id: &BroadcastId,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Recipient>, PortError> {
        self.outage.check("broadcast undelivered")?;
        let jobs = self.jobs.lock();
        Ok(jobs
            .get(&id.0)
            .map(|job| {
                job.recipients
                    .iter()
                    .filter(|r| after.is_none_or(|after| r.index > after))
                    .filter(|r| r.state.is_undelivered())
                    .take(limit)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn retry(
        &self,
        id: &BroadcastId,
        uncertain: bool,
        now: Timestamp,
    ) -> Result<Retried, PortError> {
        self.outage.check("broadcast retry")?;
        let mut jobs = self.jobs.lock();
        let Some(job) = jobs.get_mut(&id.0) else {
            return Ok(Retried::NotFound);
        };
        if !job.job.takes_retry() {
            return Ok(Retried::Refused {
                job: job.job.clone(),
            });
        }
        let mut recipients = 0;
        for recipient in &mut job.recipients {
            if recipient.state.is_retried(uncertain) {
                job.job.retried(&recipient.state);
                recipient.state = RecipientState::Retrying { due: now.0 };
                recipient.attempts = 0;
                recipients += 1;
            }
        }
        let job = job.job.clone();
        Ok(match recipients {
            0 => Retried::Nothing { job },
            recipients => Retried::Retried { recipients, job },
        })
    }

    async fn claim_step(
        &self,
        id: &BroadcastId,
        step: u64,
        holder: &str,
    ) -> Result<StepClaim, PortError> {
        self.outage.check("broadcast claim_step")?;
        let mut jobs = self.jobs.lock();
        let Some(job) = jobs.get_mut(&id.0) else {
            return Ok(StepClaim::NotFound);
        };
        let last = job.chain.as_ref().map(|(last, by)| (*last, by.as_str()));
        let claim = StepClaim::decide(last, step, holder);
        if claim == StepClaim::Granted {
            job.chain = Some((step, holder.to_owned()));
        }
        Ok(claim)
    }

    async fn claimed_step(&self, id: &BroadcastId) -> Result<u64, PortError> {
        self.outage.check("broadcast claimed_step")?;
        Ok(self
            .jobs
            .lock()
            .get(&id.0)
            .and_then(|job| job.chain.as_ref().map(|(step, _)| *step))
            .unwrap_or(0))
    }

    async fn chats_matching(
        &self,
        bot: &BotId,
        filter: &StateFilter,
    ) -> Result<Vec<i64>, PortError> {
        self.outage.check("broadcast audience")?;
        let mut chats: Vec<i64> = self
            .states
            .states()
            .into_iter()
            .filter(|(key, _)| key.bot_id == *bot)
            .filter_map(|(key, state)| {
                let chat = key.group.as_str().parse::<i64>().ok()?;
                let json = serde_json::from_str(&state.json).unwrap_or(Value::Null);
                filter.matches(&state.format, &json).then_some(chat)
            })
            .collect();
        chats.sort_unstable();
        chats.dedup();
        Ok(chats)
    }
}
