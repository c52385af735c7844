//! The runner: a job's recipients taken from the store and sent at the lane's pace, each send booked in the bot's budget with its intent written at the wire.

use super::*;

/// Runs broadcast jobs: one [`BroadcastRunner::run`] per running job, in the process that holds
/// the store.
pub struct BroadcastRunner {
    /// The jobs.
    pub store: Arc<dyn BroadcastStore>,
    /// The bot's budget, shared with the worker's runs.
    pub budget: Arc<dyn SendBudget>,
    /// The bot-wide rate the budget holds (`None`: no limit).
    pub bot_rate: Option<u32>,
    /// Tells the time.
    pub clock: Arc<dyn Clock>,
    /// The backoff between a recipient's tries (its attempts are [`MAX_ATTEMPTS`]).
    pub retry: RetryPolicy,
}

/// How a run of a job ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunEnd {
    /// Every recipient has an outcome.
    Done,
    /// The job was paused (by an operator, or because Telegram refused its message) or cancelled.
    Stopped(JobState),
    /// The process is stopping (or, on a stack, the invocation's time is up).
    ShutDown,
    /// A span's run that does not wait ([`Waits::No`]): nothing of the span can be sent before
    /// this time, when a recipient's next try is due.
    Later(Timestamp),
    /// A span's run that does not wait: every recipient of the span has an outcome, and some of
    /// the job's others have not.
    SpanDone,
}

/// Whether a run waits for its recipients' next tries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waits {
    /// The process that runs the whole job waits for them.
    Yes,
    /// A run on a stack hands the wait to its queue ([`RunEnd::Later`]) and ends.
    No,
}

/// The running job of `job`'s bot that sends before it, if any: a bot's broadcasts go one at a
/// time, the oldest running one first, so two of them neither take the reserve the bot's replies
/// keep nor pass the paid lane's rate together (docs/design/broadcast-runs.md). `None` when `job`
/// is the one to send.
pub fn ahead_of(jobs: &[BroadcastJob], job: &BroadcastJob) -> Option<BroadcastId> {
    jobs.iter()
        .filter(|j| j.state == JobState::Running && j.spec.bot == job.spec.bot && j.id < job.id)
        .map(|j| j.id.clone())
        .min()
}

/// The jobs a process that runs them itself (`tgq local`) starts now: each bot's oldest running
/// job ([`ahead_of`]), unless a job of that bot runs there already (`bots_running`).
pub fn startable<'j>(jobs: &'j [BroadcastJob], bots_running: &[BotId]) -> Vec<&'j BroadcastJob> {
    jobs.iter()
        .filter(|job| job.state == JobState::Running && ahead_of(jobs, job).is_none())
        .filter(|job| !bots_running.contains(&job.spec.bot))
        .collect()
}

/// Of the jobs a process runs (`running`), those an older running job of their bot now goes
/// before: one resumed while they sent. Each stops, as at a shutdown, and runs again after it.
pub fn overtaken(jobs: &[BroadcastJob], running: impl Iterator<Item = u64>) -> Vec<u64> {
    running
        .filter(|id| {
            jobs.iter()
                .find(|job| job.id.0 == *id)
                .is_some_and(|job| ahead_of(jobs, job).is_some())
        })
        .collect()
}

impl BroadcastRunner {
    /// Sends job `id` with `api` until it is done, paused or cancelled, or `stop` turns true.
    /// Recipients whose send an earlier process began and never ended are marked uncertain first.
    pub async fn run(
        &self,
        id: &BroadcastId,
        api: Arc<dyn BotApi>,
        stop: watch::Receiver<bool>,
    ) -> Result<RunEnd, PortError> {
        // The audience a handler named is written before anything is sent.
        while !self.store.expand(id, EXPAND_CHUNK).await? {
            if *stop.borrow() {
                return Ok(RunEnd::ShutDown);
            }
        }
        self.run_span(id, &EVERY, Waits::Yes, api, stop).await
    }

    /// [`BroadcastRunner::run`] over the recipients of `span` alone; with [`Waits::No`] it ends
    /// when nothing of the span can be sent now, rather than wait.
    pub async fn run_span(
        &self,
        id: &BroadcastId,
        span: &Indexes,
        waits: Waits,
        api: Arc<dyn BotApi>,
        mut stop: watch::Receiver<bool>,
    ) -> Result<RunEnd, PortError> {
        let abandoned = self.store.abandon_begun(id, span, self.clock.now()).await?;
        if abandoned > 0 {
            warn!(broadcast = %id, recipients = abandoned, "sends an earlier process began and never ended are uncertain: not sent again");
        }
        let Some(job) = self.store.job(id).await? else {
            return Ok(RunEnd::Stopped(JobState::Cancelled));
        };
        let mut sends: JoinSet<()> = JoinSet::new();
        let ended = self
            .sending(&job, (span, waits), api, &mut stop, &mut sends)
            .await;
        // Whatever ended the run, a send under way lands and is recorded: dropping its task
        // could leave a message Telegram took counted uncertain.
        drain(&mut sends).await;
        ended
    }

    /// The body of [`BroadcastRunner::run_span`], with its sends in `sends`.
    async fn sending(
        &self,
        job: &BroadcastJob,
        (span, waits): (&Indexes, Waits),
        api: Arc<dyn BotApi>,
        stop: &mut watch::Receiver<bool>,
        sends: &mut JoinSet<()>,
    ) -> Result<RunEnd, PortError> {
        let id = &job.id;
        let paced = api.paced();
        let rate = job.spec.lane_rate(self.bot_rate).filter(|_| paced);
        let in_flight = rate.map_or(UNPACED_IN_FLIGHT, |r| {
            (r as usize / 4).clamp(IN_FLIGHT.0, IN_FLIGHT.1)
        });
        let mut lane = Lane::pacer(rate);
        let gate = Arc::new(LaneGate::new(rate));
        let left = Arc::new(LeftBehind::default());
        // Whether the span may hold recipients to send now that the last batch did not: the
        // first time, and after a batch that left some, ended early or took all it could.
        let mut look = true;
        loop {
            let Some(mut job) = self.running(id).await? else {
                drain(sends).await;
                return self.stopped(id).await;
            };
            if *stop.borrow() {
                return Ok(RunEnd::ShutDown);
            }
            let batch = match look {
                true => self.store.next(id, span, self.clock.now(), TAKE).await?,
                false => Vec::new(),
            };
            look = true;
            if batch.is_empty() {
                drain(sends).await;
                let Some(job) = self.running(id).await? else {
                    return self.stopped(id).await;
                };
                if job.counts.pending() == 0 {
                    let Changed::Changed { job } = self
                        .store
                        .change(id, Change::Finish, self.clock.now())
                        .await?
                    else {
                        // Paused or cancelled in the meantime.
                        return self.stopped(id).await;
                    };
                    let c = job.counts;
                    info!(broadcast = %id, sent = c.sent, gone = c.gone, failed = c.failed, uncertain = c.uncertain, "broadcast done");
                    return Ok(RunEnd::Done);
                }
                let wait = match self.store.next_retry(id, span).await? {
                    Some(due) if waits == Waits::No => return Ok(RunEnd::Later(due)),
                    Some(due) => due
                        .since(self.clock.now())
                        .clamp(Duration::from_millis(1), LOOK_EVERY),
                    None => {
                        // Nothing waits and nothing of this run is in flight, yet some have no
                        // outcome: their sends began and could not be recorded (a settle that
                        // gave up). They are uncertain. Only a send of this run can have left
                        // one: the run began by marking those of earlier runs.
                        let stuck = match left.doubt.swap(false, Ordering::SeqCst) {
                            true => self.store.abandon_begun(id, span, self.clock.now()).await?,
                            false => 0,
                        };
                        if stuck > 0 {
                            warn!(broadcast = %id, recipients = stuck, "sends whose outcome could not be recorded are uncertain: not sent again");
                            continue;
                        }
                        // Every recipient of the span has its outcome; the others are
                        // another run's.
                        if waits == Waits::No {
                            return Ok(RunEnd::SpanDone);
                        }
                        LOOK_EVERY
                    }
                };
                if wait_or_stop(wait, stop).await {
                    return Ok(RunEnd::ShutDown);
                }
                continue;
            }
            // Until a recipient took the message, sends go one at a time: a message Telegram
            // refuses for everyone pauses the job after a few refusals, not a batch of them.
            let mut probing = job.counts.sent == 0;
            let mut looked = self.clock.now();
            let taken = batch.len();
            let mut begun_all = true;
            for recipient in batch {
                let failure = left.failed.lock().take();
                if let Some(error) = failure {
                    drain(sends).await;
                    return Err(error);
                }
                // What was taken and not begun stays where it was for the next run.
                if *stop.borrow() {
                    break;
                }
                if probing || self.clock.now().since(looked) >= LOOK_EVERY {
                    looked = self.clock.now();
                    drain_if(probing, sends).await;
                    match self.running(id).await? {
                        Some(now) => {
                            probing = now.counts.sent == 0;
                            job = now;
                        }
                        // What was taken and not begun stays where it was.
                        None => {
                            begun_all = false;
                            break;
                        }
                    }
                }
                let halted = left.halted.lock().take();
                if let Some(reason) = halted {
                    drain(sends).await;
                    return self.halt(id, reason).await;
                }
                // Telegram is down: the lane holds, longer while it stays so.
                let held = left.outage.wait(tokio::time::Instant::now());
                if !held.is_zero() && wait_or_stop(held, stop).await {
                    drain(sends).await;
                    return Ok(RunEnd::ShutDown);
                }
                let wait = lane.take(tokio::time::Instant::now());
                if !wait.is_zero() && wait_or_stop(wait, stop).await {
                    drain(sends).await;
                    return Ok(RunEnd::ShutDown);
                }
                while sends.len() >= in_flight {
                    sends.join_next().await;
                }
                // Each send books its own slot: a booking slowed by the store holds up no other,
                // and the bookings under way at once share a write of the bot's budget.
                let send = RecipientSend {
                    store: self.store.clone(),
                    api: api.clone(),
                    budget: self.budget.clone(),
                    clock: self.clock.clone(),
                    job: job.clone(),
                    recipient,
                    retry: self.retry,
                    gate: gate.clone(),
                    paced,
                    passed: None,
                    stop: stop.clone(),
                    left: left.clone(),
                };
                sends.spawn(send.go());
            }
            // Every send of the batch began (or failed to) before the next batch is taken: a
            // recipient whose begin is still on its way must not be taken twice.
            drain(sends).await;
            let failure = left.failed.lock().take();
            if let Some(error) = failure {
                return Err(error);
            }
            let halted = left.halted.lock().take();
            if let Some(reason) = halted {
                return self.halt(id, reason).await;
            }
            // A batch whose every recipient has its outcome now, none to be tried again, and that
            // held every recipient the span could still send to (fewer than it could take, or
            // the whole span), left nothing to send now: the span is not read again to learn it
            // (a chunk's thousand recipients are ten reads on DynamoDB).
            let retries = left.retries.swap(false, Ordering::SeqCst);
            let whole = taken < TAKE || span.end.saturating_sub(span.start) <= taken as u64;
            look = retries || !begun_all || !whole || left.doubt.load(Ordering::SeqCst);
        }
    }

    /// The job, when it is running; a job that enough of its first recipients refused is paused
    /// here, with Telegram's words.
    async fn running(&self, id: &BroadcastId) -> Result<Option<BroadcastJob>, PortError> {
        let Some(job) = self.store.job(id).await? else {
            return Ok(None);
        };
        if job.state != JobState::Running {
            return Ok(None);
        }
        if job.counts.sent == 0 && job.refusals >= REFUSALS_BEFORE_PAUSE {
            let reason = format!(
                "Telegram refused the message for the first {} recipients: {}",
                job.refusals,
                job.last_error.as_deref().unwrap_or("no reason given")
            );
            warn!(broadcast = %id, "{reason}");
            self.store
                .change(id, Change::PauseBecause(reason), self.clock.now())
                .await?;
            return Ok(None);
        }
        Ok(Some(job))
    }

    /// Pauses job `id`: Telegram refused its message or its bot, as it would for every recipient
    /// left. An operator resumes it once the cause is fixed.
    async fn halt(&self, id: &BroadcastId, reason: String) -> Result<RunEnd, PortError> {
        let reason = format!("Telegram refused the message or the bot: {reason}");
        warn!(broadcast = %id, "{reason}; the job is paused");
        self.store
            .change(id, Change::PauseBecause(reason), self.clock.now())
            .await?;
        self.stopped(id).await
    }

    async fn stopped(&self, id: &BroadcastId) -> Result<RunEnd, PortError> {
        Ok(RunEnd::Stopped(
            self.store
                .job(id)
                .await?
                .map_or(JobState::Cancelled, |job| job.state),
        ))
    }
}

/// One recipient's send, in a task of its own.
struct RecipientSend {
    store: Arc<dyn BroadcastStore>,
    api: Arc<dyn BotApi>,
    budget: Arc<dyn SendBudget>,
    clock: Arc<dyn Clock>,
    job: BroadcastJob,
    recipient: Recipient,
    retry: RetryPolicy,
    gate: Arc<LaneGate>,
    /// Whether the send books its slot in the bot's budget.
    paced: bool,
    /// When the paid lane's gate counted the call as leaving, to count it again if it leaves late.
    passed: Option<tokio::time::Instant>,
    stop: watch::Receiver<bool>,
    left: Arc<LeftBehind>,
}

/// What the sends of a run left for it to look at again.
#[derive(Default)]
struct LeftBehind {
    /// A send ended with a recipient to try again, or without beginning its send.
    retries: AtomicBool,
    /// A send may have left its recipient begun with no outcome: its begin's answer was lost,
    /// its settle gave up, or its task ended before it settled.
    doubt: AtomicBool,
    /// A booking the budget's store refused: the run ends with the error, as it would had it
    /// booked the send itself.
    failed: parking_lot::Mutex<Option<PortError>>,
    /// Telegram refused the message or the bot: the run pauses the job with these words.
    halted: parking_lot::Mutex<Option<String>>,
    /// How long the lane holds for Telegram's outage.
    outage: outage::Outage,
}

/// Where a send stands once booked.
enum Turn {
    /// Its slot is booked and waited for: its intent is written next, then it is cleared.
    Booked(Slot),
    /// Nothing paces the Bot API it calls: its turn in the lane was all.
    Unpaced,
    /// The process is stopping; nothing was booked.
    Stopping,
}

/// Set while a send is begun and not settled: a task that ends in between leaves a doubt.
struct Begun<'a>(Option<&'a LeftBehind>);

impl Drop for Begun<'_> {
    fn drop(&mut self) {
        if let Some(left) = self.0 {
            left.doubt.store(true, Ordering::SeqCst);
        }
    }
}

impl RecipientSend {
    /// Books a send to `chat` in the bot's budget and waits for its slot; `None` when the process
    /// is stopping.
    async fn booked(&mut self, chat: i64) -> Result<Option<Slot>, PortError> {
        let bot = &self.job.spec.bot;
        // The paid lane is apart from the bot's rate; a flood wait holds it all the same, one
        // that any process of the bot heard: it books no slot, so it looks for one.
        let counted = (self.job.spec.lane == Lane::Standard).then_some(chat);
        if counted.is_none() {
            self.budget.look_again(bot).await?;
        }
        loop {
            let slot = match self.budget.reserve(bot, counted, BOOK_WITHIN).await? {
                Reserved::Booked(slot) => slot,
                Reserved::Later(wait) => {
                    if wait_or_stop(wait.min(BOOK_WITHIN), &mut self.stop).await {
                        return Ok(None);
                    }
                    continue;
                }
            };
            if !slot.wait.is_zero() && wait_or_stop(slot.wait, &mut self.stop).await {
                return Ok(None);
            }
            return Ok(Some(slot));
        }
    }

    /// Whether the booked `slot` may go now (after a short wait the budget names): `false` when
    /// a flood wait began meanwhile or the slot went by, so the send is booked again.
    async fn cleared(&self, slot: &mut Slot) -> Result<bool, PortError> {
        let (clear, _) = self
            .budget
            .wait_until_clear(&self.job.spec.bot, slot)
            .await?;
        Ok(clear)
    }

    /// Books a send to `chat` and waits for the lane and for the slot: the moment to write the
    /// send's intent, which the slot's lead leaves time for.
    async fn turn(&mut self, chat: i64) -> Result<Turn, PortError> {
        if !self.paced {
            self.gate.pass().await;
            return Ok(Turn::Unpaced);
        }
        // A send the bot's budget counts is booked after its turn in the lane: the budget counts
        // it at its slot, and a call held at the gate past that slot could share a second with
        // the calls booked after it. The paid lane books no slot, so its gate comes last.
        let counted = self.job.spec.lane == Lane::Standard;
        if counted {
            self.gate.pass().await;
        }
        loop {
            let Some(mut slot) = self.booked(chat).await? else {
                return Ok(Turn::Stopping);
            };
            if !counted {
                self.passed = Some(self.gate.pass().await);
            }
            // What the budget must learn before the call (a flood wait another process heard)
            // it learns now, before the intent: after it, only the call.
            match self.budget.ready(&self.job.spec.bot, &mut slot).await? {
                Clear::Go | Clear::After(_) => return Ok(Turn::Booked(slot)),
                Clear::Held(_) | Clear::Late => continue,
            }
        }
    }

    /// Books a send to `chat`, waits for the lane, and clears it: the moment just before the
    /// call. `None` when the process is stopping first.
    async fn at_the_wire(&mut self, chat: i64) -> Result<Option<()>, PortError> {
        loop {
            match self.turn(chat).await? {
                Turn::Unpaced => return Ok(Some(())),
                Turn::Stopping => return Ok(None),
                Turn::Booked(mut slot) => {
                    if self.cleared(&mut slot).await? {
                        return Ok(Some(()));
                    }
                }
            }
        }
    }

    async fn go(mut self) {
        let chat = self.recipient.chat;
        // Booked and its turn in the lane come, the send writes its intent, is cleared, and
        // calls: the order replies keep, so the budget's lead covers the write and the call
        // leaves at the slot it was counted at. Not booked (stopping, or the budget's store
        // failed), it is not begun and stays for the next run.
        let mut slot = match self.turn(chat).await {
            Ok(Turn::Booked(slot)) => Some(slot),
            Ok(Turn::Unpaced) => None,
            Ok(Turn::Stopping) => {
                self.left.retries.store(true, Ordering::SeqCst);
                return;
            }
            Err(error) => {
                self.left.retries.store(true, Ordering::SeqCst);
                self.left.failed.lock().get_or_insert(error);
                return;
            }
        };
        // Until it settles, an end of this task leaves a doubt; so does a begin whose answer was
        // lost, which may have been written.
        let left = self.left.clone();
        let mut begun = Begun(Some(&*left));
        // The intent, durable before the call.
        if let Err(error) = self.store.begin(&self.job.id, self.recipient.index).await {
            self.left.retries.store(true, Ordering::SeqCst);
            warn!(broadcast = %self.job.id, error = %error_chain(&error), "recording a broadcast send's start failed; it is tried again");
            return;
        }
        let clear = match slot.as_mut() {
            Some(slot) => self.cleared(slot).await,
            None => Ok(true),
        };
        if !matches!(clear, Ok(true)) {
            // The slot went by while the intent was written, a flood wait began, or the budget's
            // store failed: the call never left, so the recipient goes back to the list with no
            // attempt spent.
            self.left.retries.store(true, Ordering::SeqCst);
            if let Err(error) = clear {
                self.left.failed.lock().get_or_insert(error);
            }
            let back = Outcome::Held {
                due: self.clock.now().0,
            };
            if self.settled(back).await {
                begun.0 = None;
            }
            return;
        }
        // The paid lane counted the call at its gate, before the intent: one the store held up
        // is counted again as it leaves.
        if let Some(passed) = self.passed.take() {
            self.gate.pass_again_if_late(passed).await;
        }
        let outcome = self.call(chat).await;
        match &outcome {
            Outcome::Unsent { .. } => self.left.outage.failed(tokio::time::Instant::now()),
            Outcome::Uncertain { .. } => {}
            _ => self.left.outage.answered(),
        }
        if let Outcome::Halted { error } = &outcome {
            self.left.halted.lock().get_or_insert_with(|| error.clone());
        }
        if matches!(
            outcome.state(self.clock.now()),
            RecipientState::Retrying { .. }
        ) {
            self.left.retries.store(true, Ordering::SeqCst);
        }
        if self.settled(outcome).await {
            begun.0 = None;
        }
    }

    /// Makes the call to `chat` and says how it ended; a group that became a supergroup is
    /// followed once, booked again as a send of its own.
    async fn call(&mut self, chat: i64) -> Outcome {
        let spec = self.job.spec.clone();
        let answer = self
            .api
            .call(&ApiCall::plain(&spec.method, &spec.params_for(chat)))
            .await;
        let error = match answer {
            Ok(result) => return sent(&result, None),
            // The store refused what the Bot API records itself: nothing was sent.
            Err(CallError::Store(error)) => {
                return Outcome::Retry {
                    due: self.clock.now().plus(Duration::from_secs(1)).0,
                    error: error_chain(&error),
                }
            }
            Err(CallError::Telegram(error)) => error,
        };
        let error = match error {
            TelegramError::MigrateToChat(to) => {
                info!(broadcast = %self.job.id, from = chat, to, "the group became a supergroup; following it once");
                match self.at_the_wire(to).await {
                    Ok(Some(())) => {}
                    // Stopping, or the budget failed: nothing went to the supergroup yet.
                    Ok(None) | Err(_) => {
                        return Outcome::Held {
                            due: self.clock.now().0,
                        }
                    }
                }
                match self
                    .api
                    .call(&ApiCall::plain(&spec.method, &spec.params_for(to)))
                    .await
                {
                    Ok(result) => return sent(&result, Some(to)),
                    Err(CallError::Telegram(error)) => error,
                    Err(CallError::Store(error)) => TelegramError::Network(error_chain(&error)),
                }
            }
            error => error,
        };
        if let TelegramError::RetryAfter(wait) = &error {
            if let Err(failed) = self.budget.pause(&spec.bot, *wait).await {
                warn!(error = %error_chain(&failed), "sharing a flood wait failed; this process holds its sends all the same");
            }
        }
        outcome_of(
            &error,
            (chat, self.recipient.attempts),
            &self.job,
            &self.retry,
            self.clock.now(),
        )
    }

    /// Records the outcome; a settle the store refuses now is tried again for about a minute: a
    /// recipient left begun becomes uncertain, which loses no message but leaves a doubt.
    async fn settled(&self, outcome: Outcome) -> bool {
        let now = self.clock.now();
        let mut delay = Duration::from_millis(100);
        for _ in 0..40 {
            match self
                .store
                .settle(&self.job.id, self.recipient.index, outcome.clone(), now)
                .await
            {
                Ok(()) => return true,
                Err(error) => {
                    warn!(broadcast = %self.job.id, error = %error_chain(&error), "recording a broadcast send failed; trying again");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(2));
                }
            }
        }
        false
    }
}

/// A send Telegram took: its message id, and the supergroup it went to instead, if it did.
fn sent(result: &Value, migrated_to: Option<i64>) -> Outcome {
    Outcome::Sent {
        message_id: result
            .get("message_id")
            .and_then(Value::as_i64)
            .unwrap_or_default(),
        migrated_to,
    }
}

async fn drain(sends: &mut JoinSet<()>) {
    while sends.join_next().await.is_some() {}
}

async fn drain_if(wanted: bool, sends: &mut JoinSet<()>) {
    if wanted {
        drain(sends).await;
    }
}

/// Sleeps for `wait`; `true` when `stop` turned true first.
async fn wait_or_stop(wait: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    if *stop.borrow() {
        return true;
    }
    tokio::select! {
        () = tokio::time::sleep(wait) => *stop.borrow(),
        _ = stop.changed() => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job_of_bot(id: u64, bot: &str, state: JobState) -> BroadcastJob {
        let spec = BroadcastSpec::standard(
            BotId::new(bot).unwrap(),
            "sendMessage",
            json!({"text": "news"}),
            "cli",
        );
        let mut job = BroadcastJob::new(BroadcastId(id), spec, 10, Timestamp(0));
        job.state = state;
        job
    }

    fn ids_of(jobs: Vec<&BroadcastJob>) -> Vec<u64> {
        jobs.iter().map(|j| j.id.0).collect()
    }

    #[test]
    fn a_bot_sends_its_oldest_running_broadcast_and_one_at_a_time() {
        // Newest first, as the store lists them.
        let jobs = [
            job_of_bot(5, "shop", JobState::Running),
            job_of_bot(4, "news", JobState::Running),
            job_of_bot(3, "shop", JobState::Running),
            job_of_bot(2, "shop", JobState::Paused { reason: None }),
            job_of_bot(1, "news", JobState::Done),
        ];
        assert_eq!(ids_of(startable(&jobs, &[])), [4, 3]);
        // Job 3 ended and 5 is the shop's oldest, but a shop job still runs here (one stopping
        // for an older one, say): 5 waits for it.
        let mut jobs = jobs;
        jobs[2].state = JobState::Done;
        let shop = BotId::new("shop").unwrap();
        assert_eq!(ids_of(startable(&jobs, std::slice::from_ref(&shop))), [4]);
        assert_eq!(ids_of(startable(&jobs, &[])), [5, 4]);
    }

    #[test]
    fn a_broadcast_stops_for_an_older_one_of_its_bot_resumed_while_it_sends() {
        let mut jobs = [
            job_of_bot(3, "shop", JobState::Running),
            job_of_bot(2, "news", JobState::Running),
            job_of_bot(1, "shop", JobState::Paused { reason: None }),
        ];
        assert!(overtaken(&jobs, [3, 2].into_iter()).is_empty());
        jobs[2].state = JobState::Running;
        assert_eq!(overtaken(&jobs, [3, 2].into_iter()), [3]);
        // A run whose job is gone from the list stops by itself.
        assert!(overtaken(&jobs, [7].into_iter()).is_empty());
    }
}
