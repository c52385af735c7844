//! The table's reads and writes a job's changes are made of: its items read one at a time or in
//! batches, recipients written in pages, the transactions that move a recipient and the job's
//! counts at once, and the mark where the jobs not ended begin.

use super::*;

impl DynamoBroadcasts {
    /// The jobs' ids and where the ones not ended begin.
    pub(super) async fn open_mark(&self) -> Result<OpenMark, PortError> {
        let item = self.get(SEQ_PK.into()).await?;
        let read = |name| item.as_ref().and_then(|item| read_num(item, name));
        Ok(OpenMark {
            last: read("last").unwrap_or(0),
            first: read(FIRST_OPEN).unwrap_or(1),
            version: read(OPEN_VERSION).unwrap_or(0),
        })
    }

    /// Sets the oldest job that may not have ended to `first`, unless the mark moved since it
    /// was read as `mark` (a job that ended ran again meanwhile): the next look moves it then.
    pub(super) async fn move_mark(&self, mark: &OpenMark, first: u64) -> Result<(), PortError> {
        let moved = self.mark_update(mark, first)?;
        // Refused when the mark moved: nothing to do.
        self.transact(vec![TransactWriteItem::builder().update(moved).build()])
            .await?;
        Ok(())
    }

    /// The write that sets the mark read as `mark` to `first`, on the condition that it is still
    /// as read.
    pub(super) fn mark_update(&self, mark: &OpenMark, first: u64) -> Result<Update, PortError> {
        let update = Update::builder()
            .table_name(&self.table)
            .set_key(Some(key_of(SEQ_PK.into())))
            .update_expression("SET #first = :first, #version = :next")
            .expression_attribute_names("#first", FIRST_OPEN)
            .expression_attribute_names("#version", OPEN_VERSION)
            .expression_attribute_values(":first", number(first))
            .expression_attribute_values(":next", number(mark.version + 1));
        let update = match mark.version {
            0 => update.condition_expression("attribute_not_exists(#version)"),
            seen => update
                .condition_expression("#version = :seen")
                .expression_attribute_values(":seen", number(seen)),
        };
        update.build().map_err(|e| PortError::rejected(UPDATE, e))
    }

    /// The latest step of job `id`'s chain claimed; 0 when none was.
    pub(super) async fn claimed(&self, id: u64) -> Result<u64, PortError> {
        Ok(self
            .get(job_pk(id))
            .await?
            .and_then(|item| read_num(&item, CHAIN_STEP))
            .unwrap_or(0))
    }

    pub(super) async fn get(&self, pk: String) -> Result<Option<Item>, PortError> {
        let answer = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key_of(pk)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| port_error(GET, e))?;
        Ok(answer.item)
    }

    /// The items of `keys`, strongly consistent, in any order; keys with no item are left out.
    pub(super) async fn batch_get(&self, keys: Vec<String>) -> Result<Vec<Item>, PortError> {
        let mut found = Vec::new();
        for chunk in keys.chunks(BATCH_GET_KEYS) {
            let mut wanted: Vec<Item> = chunk.iter().cloned().map(key_of).collect();
            while !wanted.is_empty() {
                let request = KeysAndAttributes::builder()
                    .set_keys(Some(wanted))
                    .consistent_read(true)
                    .build()
                    .map_err(|e| PortError::rejected(BATCH_GET, e))?;
                let answer = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, request)
                    .send()
                    .await
                    .map_err(|e| port_error(BATCH_GET, e))?;
                if let Some(mut items) = answer.responses {
                    found.extend(items.remove(&self.table).unwrap_or_default());
                }
                wanted = answer
                    .unprocessed_keys
                    .and_then(|mut left| left.remove(&self.table))
                    .map(|left| left.keys)
                    .unwrap_or_default();
            }
        }
        Ok(found)
    }

    /// The recipients of job `id` at `indexes`, in index order.
    pub(super) async fn recipients_at(
        &self,
        id: u64,
        indexes: impl Iterator<Item = u64>,
    ) -> Result<Vec<Recipient>, PortError> {
        let keys = indexes.map(|index| recipient_pk(id, index)).collect();
        let mut recipients = Vec::new();
        for item in self.batch_get(keys).await? {
            let index = index_of(&item).ok_or_else(|| {
                PortError::rejected(BATCH_GET, Malformed("a recipient".into(), "pk"))
            })?;
            recipients.push(recipient_of(id, index, &item)?);
        }
        recipients.sort_by_key(|r| r.index);
        Ok(recipients)
    }

    /// The recipients of job `id` in `span` (of `total`), in index order, a page of
    /// [`BATCH_GET_KEYS`] at a time, until `each` says enough. [`PAGES_AT_ONCE`] pages are read
    /// at a time: a chunk is read between its sends, which wait for it.
    pub(super) async fn for_each_page(
        &self,
        id: u64,
        (span, total): (&Indexes, u64),
        mut each: impl FnMut(Vec<Recipient>) -> bool,
    ) -> Result<(), PortError> {
        let end = span.end.min(total);
        let pages = (span.start..end)
            .step_by(BATCH_GET_KEYS)
            .map(|from| self.recipients_at(id, from..(from + BATCH_GET_KEYS as u64).min(end)));
        let mut pages = futures::stream::iter(pages).buffered(PAGES_AT_ONCE);
        while let Some(page) = pages.next().await {
            if !each(page?) {
                break;
            }
        }
        Ok(())
    }

    /// Writes `chats` as job `id`'s recipients, in their order.
    pub(super) async fn write_recipients(&self, id: u64, chats: &[i64]) -> Result<(), PortError> {
        self.write_recipients_from(id, 0, chats).await
    }

    /// Writes `chats` as job `id`'s pending recipients from index `first` on, a few batches at a
    /// time.
    pub(super) async fn write_recipients_from(
        &self,
        id: u64,
        first: u64,
        chats: &[i64],
    ) -> Result<(), PortError> {
        let items: Vec<WriteRequest> = chats
            .iter()
            .zip(first..)
            .map(|(chat, index)| {
                let state = RecipientState::Pending;
                let item = HashMap::from([
                    ("pk".to_owned(), string(recipient_pk(id, index))),
                    (KIND.to_owned(), string("broadcast_recipient")),
                    (CHAT.to_owned(), number(chat)),
                    (ATTEMPTS.to_owned(), number(0)),
                    (TAG.to_owned(), string(tag(&state))),
                    (STATE.to_owned(), json(&state)),
                ]);
                let put = PutRequest::builder()
                    .set_item(Some(item))
                    .build()
                    .map_err(|e| PortError::rejected(BATCH_WRITE, e))?;
                Ok(WriteRequest::builder().put_request(put).build())
            })
            .collect::<Result<_, PortError>>()?;
        let batches: Vec<Vec<WriteRequest>> =
            items.chunks(BATCH_WRITE_ITEMS).map(<[_]>::to_vec).collect();
        let batches = batches.into_iter().map(|batch| self.batch_write(batch));
        let mut batches = futures::stream::iter(batches).buffer_unordered(WRITES_AT_ONCE);
        while let Some(written) = batches.next().await {
            written?;
        }
        Ok(())
    }

    /// Writes `items`, again those DynamoDB left unprocessed, until all are.
    pub(super) async fn batch_write(&self, items: Vec<WriteRequest>) -> Result<(), PortError> {
        let (mut left, mut pause) = (items, std::time::Duration::from_millis(50));
        while !left.is_empty() {
            let answer = self
                .client
                .batch_write_item()
                .request_items(&self.table, left)
                .send()
                .await
                .map_err(|e| port_error(BATCH_WRITE, e))?;
            left = answer
                .unprocessed_items
                .and_then(|mut items| items.remove(&self.table))
                .unwrap_or_default();
            // Left over when the table's capacity ran short: written again after a pause.
            if !left.is_empty() {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_secs(1));
            }
        }
        Ok(())
    }

    /// An update of job `id`'s counts and times for `outcome`, as [`BroadcastJob::count`] makes
    /// them, to go in one transaction with the recipient's write.
    pub(super) fn count_update(
        &self,
        id: u64,
        outcome: &Outcome,
        now: Timestamp,
    ) -> Result<Update, PortError> {
        let mut values: Item = HashMap::from([(":one".to_owned(), number(1))]);
        let expression = match outcome {
            Outcome::Sent { .. } => {
                values.insert(":now".into(), number(now.0));
                values.insert(":zero".into(), number(0));
                "ADD sent :one SET first_sent_at = if_not_exists(first_sent_at, :now), \
                 last_sent_at = :now, refusals = :zero"
            }
            Outcome::Gone { .. } => "ADD gone :one",
            Outcome::Failed { error } => {
                values.insert(":error".into(), string(error.clone()));
                "ADD failed :one SET last_error = :error"
            }
            Outcome::Uncertain { .. } => "ADD uncertain :one",
            Outcome::Retry { error, .. } => {
                values.insert(":error".into(), string(error.clone()));
                "ADD retrying :one SET last_error = :error"
            }
            Outcome::Refused { error } => {
                values.insert(":error".into(), string(error.clone()));
                "ADD retrying :one, refusals :one SET last_error = :error"
            }
            Outcome::Held { .. } => "ADD retrying :one",
            Outcome::Unsent { error, .. } | Outcome::Halted { error } => {
                values.insert(":error".into(), string(error.clone()));
                "ADD retrying :one SET last_error = :error"
            }
        };
        Update::builder()
            .table_name(&self.table)
            .set_key(Some(key_of(job_pk(id))))
            .update_expression(expression)
            .set_expression_attribute_values(Some(values))
            .build()
            .map_err(|e| PortError::rejected(TRANSACT, e))
    }

    /// Runs `items` as one transaction; `false` when a condition refused it. A transaction
    /// cancelled because another one held the job item at that moment is run again.
    pub(super) async fn transact(&self, items: Vec<TransactWriteItem>) -> Result<bool, PortError> {
        let mut pause = std::time::Duration::from_millis(10);
        let mut tries = 0;
        loop {
            let err = match self
                .client
                .transact_write_items()
                .set_transact_items(Some(items.clone()))
                .send()
                .await
            {
                Ok(_) => return Ok(true),
                Err(err) => err,
            };
            let reasons = match err.as_service_error() {
                Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) => {
                    cancelled.cancellation_reasons().to_vec()
                }
                _ => return Err(port_error(TRANSACT, err)),
            };
            if reasons
                .iter()
                .any(|r| r.code() == Some("ConditionalCheckFailed"))
            {
                return Ok(false);
            }
            tries += 1;
            let conflict = reasons
                .iter()
                .any(|r| r.code() == Some("TransactionConflict"));
            if !conflict || tries >= 8 {
                return Err(port_error(TRANSACT, err));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_millis(500));
        }
    }

    /// Puts `recipient` (failed or uncertain, as read) back on the list, due at `now` with no
    /// attempt spent, and counts it on the job, in one transaction; `false` when it was no longer
    /// as read.
    pub(super) async fn put_back(
        &self,
        id: u64,
        recipient: &Recipient,
        now: Timestamp,
    ) -> Result<bool, PortError> {
        let again = RecipientState::Retrying { due: now.0 };
        let was = tag(&recipient.state);
        let item = Update::builder()
            .table_name(&self.table)
            .set_key(Some(key_of(recipient_pk(id, recipient.index))))
            .update_expression(
                "SET #state = :state, #tag = :to, #attempts = :zero REMOVE expires_at",
            )
            .condition_expression("#tag = :from")
            .expression_attribute_names("#state", STATE)
            .expression_attribute_names("#tag", TAG)
            .expression_attribute_names("#attempts", ATTEMPTS)
            .expression_attribute_values(":state", json(&again))
            .expression_attribute_values(":to", string(tag(&again)))
            .expression_attribute_values(":from", string(was))
            .expression_attribute_values(":zero", number(0))
            .build()
            .map_err(|e| PortError::rejected(TRANSACT, e))?;
        let job = Update::builder()
            .table_name(&self.table)
            .set_key(Some(key_of(job_pk(id))))
            .update_expression(format!("ADD {was} :less, retrying :one"))
            .expression_attribute_values(":less", number(-1))
            .expression_attribute_values(":one", number(1))
            .build()
            .map_err(|e| PortError::rejected(TRANSACT, e))?;
        self.transact(vec![
            TransactWriteItem::builder().update(item).build(),
            TransactWriteItem::builder().update(job).build(),
        ])
        .await
    }

    /// Moves recipient `index` from the state tagged `from` to `to`, counting `outcome` on the
    /// job, in one transaction; `false` when the recipient was not in `from`. A recipient given
    /// its outcome is `kept` until then, for DynamoDB's TTL.
    pub(super) async fn move_recipient(
        &self,
        id: u64,
        index: u64,
        from: &str,
        (to, attempts): (&RecipientState, u32),
        (job, kept): (Update, Option<Timestamp>),
    ) -> Result<bool, PortError> {
        let mut set =
            "SET #state = :state, #tag = :to, #attempts = #attempts + :attempts".to_owned();
        let mut recipient = Update::builder();
        if let Some(until) = kept {
            set.push_str(", expires_at = :expires");
            recipient = recipient.expression_attribute_values(":expires", expiry_secs(until));
        }
        let recipient = recipient
            .table_name(&self.table)
            .set_key(Some(key_of(recipient_pk(id, index))))
            .update_expression(set)
            .condition_expression("#tag = :from")
            .expression_attribute_names("#state", STATE)
            .expression_attribute_names("#tag", TAG)
            .expression_attribute_names("#attempts", ATTEMPTS)
            .expression_attribute_values(":state", json(to))
            .expression_attribute_values(":to", string(tag(to)))
            .expression_attribute_values(":from", string(from))
            .expression_attribute_values(":attempts", number(attempts))
            .build()
            .map_err(|e| PortError::rejected(TRANSACT, e))?;
        self.transact(vec![
            TransactWriteItem::builder().update(recipient).build(),
            TransactWriteItem::builder().update(job).build(),
        ])
        .await
    }
}
