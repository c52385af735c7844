//! A job's start and its audience: a new id (or the job of a start made before), the job's item
//! and its audience in one transaction, the audience written as recipients a chunk at a time, and
//! a change of the job's state.

use super::*;

impl DynamoBroadcasts {
    /// The id a new job of `spec` takes, or the job of its origin (`Err`) when a start of that
    /// origin wrote one already.
    pub(super) async fn new_id(
        &self,
        spec: &BroadcastSpec,
        now: Timestamp,
    ) -> Result<Result<u64, Created>, PortError> {
        let origin_pk = format!("broadcast#origin#{}", spec.origin);
        let by_origin = spec.origin != "cli";
        let known = match by_origin {
            true => self
                .get(origin_pk.clone())
                .await?
                .and_then(|item| read_num(&item, "job")),
            false => None,
        };
        if let Some(id) = known {
            if let Some(job) = self.job(&BroadcastId(id)).await? {
                return Ok(Err(Created::Existing { job }));
            }
        }
        Ok(Ok(match known {
            // A start that died after taking its id: it goes on with it.
            Some(id) => id,
            None => {
                let answer = self
                    .client
                    .update_item()
                    .table_name(&self.table)
                    .set_key(Some(key_of(SEQ_PK.into())))
                    .update_expression("ADD #last :one SET #kind = :kind")
                    .expression_attribute_names("#last", "last")
                    .expression_attribute_names("#kind", KIND)
                    .expression_attribute_values(":one", number(1))
                    .expression_attribute_values(":kind", string("broadcast_seq"))
                    .return_values(ReturnValue::UpdatedNew)
                    .send()
                    .await
                    .map_err(|e| port_error(UPDATE, e))?;
                let id = answer
                    .attributes
                    .as_ref()
                    .and_then(|item| read_num(item, "last"))
                    .ok_or_else(|| PortError::rejected(UPDATE, Malformed(SEQ_PK.into(), "last")))?;
                if by_origin {
                    let put = self
                        .client
                        .put_item()
                        .table_name(&self.table)
                        .item("pk", string(origin_pk.clone()))
                        .item(KIND, string("broadcast_origin"))
                        .item("job", number(id))
                        // A handler's retried start comes within its update's life, well
                        // inside the time an ended job is kept.
                        .item("expires_at", expiry_secs(now.plus(KEEP_ENDED)))
                        .condition_expression("attribute_not_exists(pk)")
                        .send()
                        .await;
                    if let Err(err) = put {
                        let taken = err
                            .as_service_error()
                            .is_some_and(|e| e.is_conditional_check_failed_exception());
                        if !taken {
                            return Err(port_error(PUT, err));
                        }
                        // Another start of the same origin won: its job is the one. Until that
                        // start has written its job, writing its recipients here could undo sends
                        // it has begun, so this start is told to try again.
                        let item = self.get(origin_pk).await?;
                        let other = item.and_then(|item| read_num(&item, "job"));
                        if let Some(job) = match other {
                            Some(other) => self.job(&BroadcastId(other)).await?,
                            None => None,
                        } {
                            return Ok(Err(Created::Existing { job }));
                        }
                        return Err(PortError::unavailable(
                            PUT,
                            Malformed(
                                format!("broadcast#origin#{}", spec.origin),
                                "another start of this origin is still writing its job",
                            ),
                        ));
                    }
                }
                id
            }
        }))
    }

    pub(super) async fn create_job(
        &self,
        spec: &BroadcastSpec,
        chats: &[i64],
        now: Timestamp,
    ) -> Result<Created, PortError> {
        let id = match self.new_id(spec, now).await? {
            Ok(id) => id,
            Err(existing) => return Ok(existing),
        };
        self.write_recipients(id, chats).await?;
        let job = BroadcastJob::new(BroadcastId(id), spec.clone(), chats.len() as u64, now);
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(job_item(&job)))
            .send()
            .await
            .map_err(|e| port_error(PUT, e))?;
        Ok(Created::New { job })
    }

    /// Writes job `id` with `audience` and no recipients yet, in one transaction: the job, and
    /// the listed chats in parts.
    pub(super) async fn write_expanding(
        &self,
        id: u64,
        spec: &BroadcastSpec,
        audience: &Audience,
        now: Timestamp,
    ) -> Result<Created, PortError> {
        let job = BroadcastJob {
            expanding: true,
            ..BroadcastJob::new(BroadcastId(id), spec.clone(), 0, now)
        };
        let mut item = job_item(&job);
        item.insert(EXPANDED.to_owned(), number(0));
        let mut parts = Vec::new();
        match audience {
            Audience::Chats { chats } => {
                item.insert(LISTED.to_owned(), number(chats.len()));
                for (part, chats) in chats.chunks(PART_CHATS).enumerate() {
                    let bytes: Vec<u8> = chats.iter().flat_map(|chat| chat.to_le_bytes()).collect();
                    parts.push(HashMap::from([
                        ("pk".to_owned(), string(part_pk(id, part))),
                        (KIND.to_owned(), string("broadcast_audience")),
                        (CHATS.to_owned(), AttributeValue::B(Blob::new(bytes))),
                    ]));
                }
            }
            Audience::States { filter } => {
                item.insert(FILTER.to_owned(), json(filter));
            }
        }
        let puts = std::iter::once(item)
            .chain(parts)
            .map(|item| {
                let put = Put::builder()
                    .table_name(&self.table)
                    .set_item(Some(item))
                    .build()
                    .map_err(|e| PortError::rejected(TRANSACT, e))?;
                Ok(TransactWriteItem::builder().put(put).build())
            })
            .collect::<Result<Vec<_>, PortError>>()?;
        self.transact(puts).await?;
        Ok(Created::New { job })
    }

    /// Writes the next `limit` listed chats of job `item` (the job's item, read) as recipients,
    /// and moves its count on; `true` when every one is written.
    pub(super) async fn expand_listed(
        &self,
        id: u64,
        item: &Item,
        limit: u64,
    ) -> Result<bool, PortError> {
        let (from, listed) = (
            read_num(item, EXPANDED).unwrap_or(0),
            read_num(item, LISTED).unwrap_or(0),
        );
        let to = from.saturating_add(limit).min(listed);
        let mut chats = Vec::new();
        let parts = (from as usize / PART_CHATS)..(to as usize).div_ceil(PART_CHATS);
        for part in parts.clone() {
            let pk = part_pk(id, part);
            let stored = self.get(pk.clone()).await?;
            let Some(AttributeValue::B(bytes)) = stored.as_ref().and_then(|i| i.get(CHATS)) else {
                return Err(PortError::rejected(GET, Malformed(pk, CHATS)));
            };
            chats.extend(
                bytes
                    .as_ref()
                    .chunks_exact(8)
                    .map(|b| i64::from_le_bytes(b.try_into().unwrap_or_default())),
            );
        }
        let skip = from as usize - parts.start * PART_CHATS;
        let chats = chats
            .get(skip..skip + (to - from) as usize)
            .ok_or_else(|| PortError::rejected(GET, Malformed(part_pk(id, parts.start), CHATS)))?;
        self.write_recipients_from(id, from, chats).await?;
        let done = to >= listed;
        if !self.expanded_to(id, from, to, None, done).await? || !done {
            return Ok(done);
        }
        // Written: the parts are kept no longer.
        self.drop_parts(id, listed).await;
        Ok(true)
    }

    /// Deletes the parts of job `id`'s list of `listed` chats; one that stays is logged, and
    /// never read again.
    pub(super) async fn drop_parts(&self, id: u64, listed: u64) {
        for part in 0..(listed as usize).div_ceil(PART_CHATS) {
            let deleted = self
                .client
                .delete_item()
                .table_name(&self.table)
                .set_key(Some(key_of(part_pk(id, part))))
                .send()
                .await;
            if let Err(error) = deleted {
                tracing::warn!(broadcast = id, error = %tgq_core::error::error_chain(&port_error(DELETE, error)), "a part of a broadcast's audience was not deleted; it is kept, unread");
            }
        }
    }

    /// Ends the writing of cancelled job `id`'s audience (its item `item`, read): the rest of it
    /// is never written.
    pub(super) async fn drop_audience(&self, id: u64, item: &Item) -> Result<(), PortError> {
        if !matches!(item.get(EXPANDING), Some(AttributeValue::Bool(true))) {
            return Ok(());
        }
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key_of(job_pk(id))))
            .update_expression("SET #expanding = :no REMOVE #scan")
            .expression_attribute_names("#expanding", EXPANDING)
            .expression_attribute_names("#scan", SCAN_FROM)
            .expression_attribute_values(":no", AttributeValue::Bool(false))
            .send()
            .await
            .map_err(|e| port_error(UPDATE, e))?;
        if let Some(listed) = read_num(item, LISTED) {
            self.drop_parts(id, listed).await;
        }
        Ok(())
    }

    /// Writes the chats a page of the states' scan takes for job `item` (the job's item, read),
    /// of about `limit` states, as recipients, and moves its count and its scan on; `true` when
    /// the scan is through.
    pub(super) async fn expand_states(
        &self,
        id: u64,
        item: &Item,
        limit: u64,
    ) -> Result<bool, PortError> {
        let pk = job_pk(id);
        let spec: BroadcastSpec = read_json(item, SPEC, &pk)?;
        let filter: StateFilter = read_json(item, FILTER, &pk)?;
        let from = read_num(item, EXPANDED).unwrap_or(0);
        let start = item
            .get(SCAN_FROM)
            .and_then(|v| v.as_s().ok())
            .map(|at| key_of(at.clone()));
        let (chats, next) = self
            .matching_page(
                &spec.bot,
                &filter,
                start,
                i32::try_from(limit).unwrap_or(i32::MAX),
            )
            .await?;
        let to = from + chats.len() as u64;
        self.write_recipients_from(id, from, &chats).await?;
        let done = next.is_none();
        self.expanded_to(id, from, to, next, done).await?;
        Ok(done)
    }

    /// Moves job `id`'s written count from `from` to `to` (its total with it), and its scan on to
    /// `scan_from`; `done` ends the writing. `false` when another run moved it first.
    pub(super) async fn expanded_to(
        &self,
        id: u64,
        from: u64,
        to: u64,
        scan_from: Option<String>,
        done: bool,
    ) -> Result<bool, PortError> {
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key_of(job_pk(id))))
            .condition_expression("#expanded = :from AND #expanding = :yes")
            .expression_attribute_names("#expanded", EXPANDED)
            .expression_attribute_names("#expanding", EXPANDING)
            .expression_attribute_names("#total", "total")
            .expression_attribute_values(":from", number(from))
            .expression_attribute_values(":to", number(to))
            .expression_attribute_values(":yes", AttributeValue::Bool(true));
        let mut set = "SET #expanded = :to, #total = :to".to_owned();
        if done {
            set.push_str(", #expanding = :no");
            update = update.expression_attribute_values(":no", AttributeValue::Bool(false));
        }
        update = match scan_from {
            Some(at) => {
                set.push_str(", #scan = :scan");
                update.expression_attribute_values(":scan", string(at))
            }
            None => {
                set.push_str(" REMOVE #scan");
                update
            }
        }
        .expression_attribute_names("#scan", SCAN_FROM);
        match update.update_expression(set).send().await {
            Ok(_) => Ok(true),
            Err(err) if update_condition_failed(&err).is_some() => Ok(false),
            Err(err) => Err(port_error(UPDATE, err)),
        }
    }

    /// The chats of `bot` whose state `filter` takes among about `limit` items of the table's
    /// scan from `start` (from its beginning when `None`), and the key the scan goes on from
    /// (`None`: it is through).
    pub(super) async fn matching_page(
        &self,
        bot: &BotId,
        filter: &StateFilter,
        start: Option<Item>,
        limit: i32,
    ) -> Result<(Vec<i64>, Option<String>), PortError> {
        // The chats' states are items keyed `{bot}#state#{group}`; a scan finds them. A broadcast
        // starts now and then, so a scan's cost is paid then, not on any update's path.
        let prefix = format!("{bot}#state#");
        let answer = self
            .client
            .scan()
            .table_name(&self.table)
            .filter_expression("begins_with(pk, :prefix)")
            .expression_attribute_values(":prefix", string(prefix))
            .set_exclusive_start_key(start)
            .limit(limit.max(1))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| port_error(SCAN, e))?;
        let chats = answer
            .items
            .unwrap_or_default()
            .into_iter()
            .filter_map(|item| {
                let pk = item.get("pk").and_then(|pk| pk.as_s().ok())?;
                let chat = StateKey::split_pk(pk)?.1.parse::<i64>().ok()?;
                let state = crate::item::Item(item.clone()).state().ok()?;
                let value = serde_json::from_str(&state.json).unwrap_or(serde_json::Value::Null);
                filter.matches(&state.format, &value).then_some(chat)
            })
            .collect();
        let next = answer
            .last_evaluated_key
            .and_then(|key| key.get("pk").and_then(|pk| pk.as_s().ok()).cloned());
        Ok((chats, next))
    }

    /// [`BroadcastStore::change`]: the job's state, compared as it was read.
    pub(super) async fn change_job(
        &self,
        id: &BroadcastId,
        change: Change,
        now: Timestamp,
    ) -> Result<Changed, PortError> {
        // The state is compared as it was read: a change another writer made first refuses this
        // one, which reads again.
        loop {
            let Some(mut job) = self.job(id).await? else {
                return Ok(Changed::NotFound);
            };
            let was = serde_json::to_string(&job.state).unwrap_or_default();
            if !job.apply(&change, now) {
                return Ok(Changed::Refused { job });
            }
            let mut update = self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(key_of(job_pk(id.0))))
                .condition_expression("#state = :was")
                .expression_attribute_names("#state", STATE)
                .expression_attribute_values(":was", string(was))
                .expression_attribute_values(":state", json(&job.state))
                .expression_attribute_values(":refusals", number(job.refusals));
            update = match job.ended_at {
                // An ended job is kept `KEEP_ENDED` from then, for DynamoDB's TTL.
                Some(ended) => update
                    .update_expression(
                        "SET #state = :state, refusals = :refusals, ended_at = :ended, expires_at = :expires",
                    )
                    .expression_attribute_values(":ended", number(ended.0))
                    .expression_attribute_values(":expires", expiry_secs(ended.plus(KEEP_ENDED))),
                None => update.update_expression("SET #state = :state, refusals = :refusals"),
            };
            match update.send().await {
                Ok(_) => return Ok(Changed::Changed { job }),
                Err(err) if update_condition_failed(&err).is_some() => continue,
                Err(err) => return Err(port_error(UPDATE, err)),
            }
        }
    }
}
