//! Firing: the schedule monitor's look, run-completed firings with their
//! loop guard and catch-up, and each firing's claim with what it starts (a
//! new thread's session, words and run; a wake's delivery).

use super::*;

impl Triggers {
    /// Looks at every enabled schedule trigger at `now` and fires what is
    /// due.
    pub async fn tick_at(&self, now: i64) -> Result<TickReport, TriggerError> {
        let _one = self.inner.ticking.lock().await;
        let store = &self.inner.store;
        let rows = store.enabled("schedule", None).await?;
        let mut report = TickReport {
            checked: rows.len() as u64,
            ..TickReport::default()
        };
        store.checked("schedule", None, now).await?;
        for row in rows {
            let plan = match validate::schedule(Some(&row.source["schedule"])) {
                Ok(plan) => plan,
                Err(e) => {
                    tracing::warn!(trigger = %row.trigger_id, error = %e, "a stored schedule no longer reads");
                    report.errors += 1;
                    continue;
                }
            };
            let state = ScheduleState {
                trigger_created_at: row.created_at_ms,
                last_fired_at: row.last_fired_at_ms,
            };
            let Some(due) = schedule::due(&row.trigger_id, &plan, state, now) else {
                continue;
            };
            report.matched += 1;
            let activity = Activity {
                key: due.activity_key,
                value: due.activity,
                summary: due.summary,
                fired_at: now.max(due.scheduled_at),
                disable: plan.kind() == "once",
            };
            match self.fire(&row, activity).await {
                Ok(Fired::Done) => report.fired += 1,
                Ok(Fired::Skipped) => report.skipped += 1,
                Ok(Fired::Failed(_)) => report.errors += 1,
                Err(e) => {
                    tracing::warn!(trigger = %row.trigger_id, error = %e, "a schedule firing failed");
                    report.errors += 1;
                }
            }
        }
        Ok(report)
    }

    /// A run ended: the run-completed triggers of its account that match
    /// fire, and a firing's own run that failed marks its firing.
    pub async fn run_finished(&self, run: &Run) {
        if !run.status.is_terminal() {
            return;
        }
        if let Err(e) = self.settle_firing_run(run).await {
            tracing::warn!(run = %run.run_id, error = %e, "a firing's failed run was not recorded");
        }
        let Some(account) = run.account_id.as_deref() else {
            return;
        };
        let rows = match self
            .inner
            .store
            .enabled("run-completed", Some(account))
            .await
        {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(run = %run.run_id, error = %e, "run-completed triggers not read");
                return;
            }
        };
        if rows.is_empty() {
            return;
        }
        for row in &rows {
            self.consider(row, run).await;
        }
        let ids: Vec<String> = rows.into_iter().map(|r| r.trigger_id).collect();
        let looked = run.finished_at_ms.unwrap_or_else(now_ms);
        if let Err(e) = self.inner.store.looked_up_to(&ids, looked).await {
            tracing::warn!(error = %e, "run-completed triggers' last look not recorded");
        }
    }

    /// Looks at the runs that ended since each run-completed trigger last
    /// looked (a process that stopped, or a listener that fell behind),
    /// page by page, with a margin for runs published out of their order
    /// (a key that fired before is not fired again), but never before the
    /// trigger was last edited or enabled; and marks the firings whose run
    /// failed while nobody listened (at start, the runs a kill cut short).
    pub async fn catch_up(&self) {
        if let Err(e) = self.settle_unsettled().await {
            tracing::warn!(error = %e, "failed firing runs not recorded at catch-up");
        }
        let rows = match self.inner.store.enabled("run-completed", None).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "run-completed triggers not read for catch-up");
                return;
            }
        };
        for row in rows {
            if let Err(e) = self.catch_up_one(&row).await {
                tracing::warn!(trigger = %row.trigger_id, error = %e, "catch-up failed");
            }
        }
    }

    async fn catch_up_one(&self, row: &TriggerRow) -> Result<(), TriggerError> {
        let mut since = catch_up_from(row);
        loop {
            let page = self
                .inner
                .runs
                .store()
                .ended_since(&row.account_id, &since, CATCH_UP_RUNS)
                .await?;
            for run in &page {
                self.consider(row, run).await;
            }
            let Some(last) = page.last() else {
                return Ok(());
            };
            since = (last.finished_at_ms.unwrap_or(since.0), last.run_id.clone());
            self.inner
                .store
                .looked_up_to(std::slice::from_ref(&row.trigger_id), since.0)
                .await?;
            if (page.len() as u64) < CATCH_UP_RUNS {
                return Ok(());
            }
        }
    }

    /// Firings still `created` whose run failed for good.
    async fn settle_unsettled(&self) -> Result<(), TriggerError> {
        for run_id in self.inner.store.failed_firing_runs().await? {
            if let Some(run) = self.inner.runs.store().get(&run_id).await? {
                self.settle_firing_run(&run).await?;
            }
        }
        Ok(())
    }

    /// Fires `row` on `run` if it matches and is not its own chain.
    async fn consider(&self, row: &TriggerRow, run: &Run) {
        if !matches_run(&row.source, run) {
            return;
        }
        match self.in_chain(run, &row.trigger_id).await {
            Ok(false) => {}
            Ok(true) => {
                tracing::info!(trigger = %row.trigger_id, run = %run.run_id, "a trigger does not fire on a run its own firing led to");
                return;
            }
            Err(e) => {
                tracing::warn!(trigger = %row.trigger_id, error = %e, "the trigger chain could not be walked");
                return;
            }
        }
        let mut value = Map::new();
        value.insert("type".into(), json!("run-completed"));
        value.insert("runId".into(), json!(run.run_id));
        value.insert(
            "runTitle".into(),
            json!(run.title.clone().unwrap_or_default()),
        );
        value.insert("runStatus".into(), json!(run.status.as_str()));
        value.insert(
            "agentId".into(),
            json!(run.agent_id.clone().unwrap_or_default()),
        );
        if let Some(session) = &run.session_id {
            value.insert("sessionId".into(), json!(session));
        }
        let value = Value::Object(value);
        let now = now_ms();
        let activity = Activity {
            key: format!("run:{}", run.run_id),
            summary: activity_summary(&value),
            value,
            fired_at: now,
            disable: false,
        };
        if let Err(e) = self.fire(row, activity).await {
            tracing::warn!(trigger = %row.trigger_id, run = %run.run_id, error = %e, "a run-completed firing failed");
        }
    }

    /// Whether `run` was led to by a firing of `trigger_id`, walking back
    /// through run-completed firings at most eight hops (still
    /// trigger-caused after that counts as a loop).
    async fn in_chain(&self, run: &Run, trigger_id: &str) -> Result<bool, TriggerError> {
        let mut firing = run.trigger_firing_id.clone();
        for _ in 0..CHAIN_MAX_HOPS {
            let Some(firing_id) = firing.take() else {
                return Ok(false);
            };
            let Some((fired_by, activity)) = self.inner.store.firing_origin(&firing_id).await?
            else {
                return Ok(false);
            };
            if fired_by == trigger_id {
                return Ok(true);
            }
            let Some(source_run) = activity["runId"].as_str() else {
                return Ok(false);
            };
            firing = match self.inner.runs.store().get(source_run).await? {
                Some(earlier) if earlier.account_id == run.account_id => earlier.trigger_firing_id,
                _ => None,
            };
        }
        Ok(firing.is_some())
    }

    /// A firing's own run failed for good: its firing and trigger say why.
    async fn settle_firing_run(&self, run: &Run) -> Result<(), TriggerError> {
        let (Some(firing_id), RunStatus::Failed) = (&run.trigger_firing_id, run.status) else {
            return Ok(());
        };
        let message = run
            .error
            .as_ref()
            .and_then(|e| e["message"].as_str())
            .unwrap_or("Trigger session run failed")
            .to_owned();
        if let Some((trigger_id, _)) = self.inner.store.firing_origin(firing_id).await? {
            self.inner
                .store
                .failed(firing_id, &trigger_id, &message)
                .await?;
        }
        Ok(())
    }

    /// Claims and carries out one firing of `row` on `activity`. What it
    /// writes is stamped with the sidecar's clock (a look as of another
    /// instant only decides what is due).
    pub(super) async fn fire(
        &self,
        row: &TriggerRow,
        activity: Activity,
    ) -> Result<Fired, TriggerError> {
        let now = now_ms();
        let firing = NewFiring {
            firing_id: uuid::Uuid::new_v4().to_string(),
            account_id: row.account_id.clone(),
            agent_id: row.agent_id.clone(),
            trigger_id: row.trigger_id.clone(),
            activity_key: activity.key.clone(),
            session_id: None,
            activity: activity.value.clone(),
            created_at_ms: now,
        };
        if continuation_kind(row) == "wake" {
            return self.wake(row, firing).await;
        }
        self.new_thread(row, firing, activity).await
    }

    /// A new thread: the session, its words and its queued run, claimed in
    /// one transaction.
    async fn new_thread(
        &self,
        row: &TriggerRow,
        mut firing: NewFiring,
        activity: Activity,
    ) -> Result<Fired, TriggerError> {
        let Some(agent) = self.inner.control.get_agent(&row.agent_id).await? else {
            return Ok(Fired::Skipped);
        };
        let title = format!("{} — {}", row.name, activity.summary);
        if title.len() > MAX_TITLE_BYTES {
            return self
                .claim_failed(&firing, row, "Session title is too large")
                .await;
        }
        let prompt = self
            .inner
            .hypermedia
            .prompt_markdown(&prompt::from_stored(&row.prompt))
            .await;
        let text = first_words(&prompt, row, &firing, &activity.value);
        // As the reference: a message too large still opens the session and
        // counts as the trigger's firing; the firing records why no turn ran.
        let too_large = text.len() > MAX_MESSAGE_BYTES;
        let session_id = uuid::Uuid::new_v4().to_string();
        firing.session_id = Some(session_id.clone());
        let content = if too_large {
            Vec::new()
        } else {
            vec![json!({"type": "text", "text": text})]
        };
        let now = firing.created_at_ms;
        let open = OpenSession {
            session_id: Some(session_id.clone()),
            agent: agent.adapter.clone(),
            title: Some(title),
            ..OpenSession::default()
        };
        let actor = Actor::User {
            account: Some(row.account_id.clone()),
            signer: None,
        };
        let session_statements = match self
            .inner
            .sessions
            .open_with_words_statements(&open, &content, &actor, now)
        {
            Ok(statements) => statements,
            Err(e) => return self.claim_failed(&firing, row, &e.to_string()).await,
        };
        let mut run = NewRun::root(
            RunKind::Agent,
            Origin::Trigger,
            Queue::Background,
            json!({
                "content": content,
                "inputHash": hex::encode(input_hash(&content)),
                "inputAt": 1,
            }),
        );
        run.run_id = format!("firing-{}", firing.firing_id);
        run.session_id = Some(session_id.clone());
        run.account_id = Some(row.account_id.clone());
        run.agent_id = Some(row.agent_id.clone());
        run.title = Some(title_from_words(&text));
        run.max_attempts = FIRING_ATTEMPTS;
        run.trigger_firing_id = Some(firing.firing_id.clone());
        let mut statements = vec![store::claim_statement(&firing)];
        let sessions_guard = statements.len();
        statements.extend(session_statements);
        statements.push(crate::control::store::link_statement(
            &session_id,
            &row.agent_id,
            now,
        ));
        if too_large {
            statements.push(store::failed_firing_statement(
                &firing.firing_id,
                "Message content is too large",
            ));
        } else {
            statements.extend(RunStore::insert_statements(
                &run,
                RunStatus::Queued,
                None,
                now,
            ));
        }
        let trigger_guard = statements.len();
        statements.push(store::fired_statement(
            &row.trigger_id,
            activity.fired_at,
            activity.disable,
            true,
        ));
        if too_large {
            // Written after the firing, which clears the last error.
            statements.push(store::trigger_error_statement(
                &row.trigger_id,
                "Message content is too large",
            ));
        }
        statements.push(store::prune_statement(
            &row.trigger_id,
            self.inner.max_firings,
        ));
        match self.inner.store.db().transaction(statements).await {
            Ok(_) => {}
            Err(DbError::ExpectedChanges {
                statement_index, ..
            }) => {
                let index = statement_index as usize;
                if index == 0 || index == trigger_guard {
                    // Fired before, or the trigger went or was disabled.
                    return Ok(Fired::Skipped);
                }
                if index == sessions_guard {
                    let full = self.inner.sessions.sessions_full();
                    return self.claim_failed(&firing, row, &full.to_string()).await;
                }
                // The agent went meanwhile.
                return Ok(Fired::Skipped);
            }
            Err(e) => return Err(e.into()),
        }
        let _ = self.inner.opened.send(SessionOpened {
            agent_id: row.agent_id.clone(),
            session_id,
        });
        if too_large {
            return Ok(Fired::Failed("Message content is too large".into()));
        }
        if let Ok(run) = self.inner.runs.get(&run.run_id).await {
            self.inner.runs.publish(run);
        }
        self.inner.runs.wake();
        Ok(Fired::Done)
    }

    /// Claims a firing that cannot start anything, recorded as failed.
    async fn claim_failed(
        &self,
        firing: &NewFiring,
        row: &TriggerRow,
        message: &str,
    ) -> Result<Fired, TriggerError> {
        let mut firing = firing.clone();
        firing.session_id = None;
        let statements = vec![
            store::claim_statement(&firing),
            store::enabled_guard_statement(&row.trigger_id),
            store::failed_firing_statement(&firing.firing_id, message),
            store::trigger_error_statement(&row.trigger_id, message),
            store::prune_statement(&row.trigger_id, self.inner.max_firings),
        ];
        match self.inner.store.db().transaction(statements).await {
            Ok(_) => Ok(Fired::Failed(message.to_owned())),
            Err(DbError::ExpectedChanges { .. }) => Ok(Fired::Skipped),
            Err(e) => Err(e.into()),
        }
    }

    /// A wake: the signal goes to one waiting run (the named one, or the
    /// account's oldest wait on it), or the firing is `no-listener` and the
    /// trigger is left as it was. The claim commits with the delivery (its
    /// journal entry, the requeue, the trigger's `lastFiredAt`) or with
    /// `no-listener`, never alone, so a process killed at any moment
    /// neither loses the wake nor delivers it twice.
    async fn wake(&self, row: &TriggerRow, firing: NewFiring) -> Result<Fired, TriggerError> {
        let continuation = row.continuation.clone().unwrap_or(Value::Null);
        let signal = continuation["signal"].as_str().unwrap_or_default();
        let payload = match continuation.get("payload") {
            Some(payload) => payload.clone(),
            None => firing.activity.clone(),
        };
        if let Err(e) = check_signal(signal, &payload) {
            return self.claim_failed(&firing, row, &e.to_string()).await;
        }
        let runs = &self.inner.runs;
        let candidates = match continuation["runId"].as_str() {
            Some(run_id) => vec![run_id.to_owned()],
            None => runs.store().waiting_on(&row.account_id, signal).await?,
        };
        let db = self.inner.store.db();
        for run_id in candidates {
            match runs.store().get(&run_id).await? {
                Some(run) if run.account_id.as_deref() == Some(row.account_id.as_str()) => {}
                _ => continue,
            }
            let now = now_ms();
            let mut statements = vec![
                store::claim_statement(&firing),
                store::fired_statement(&row.trigger_id, now, false, true),
            ];
            let delivery = statements.len();
            let mut signals =
                RunStore::signal_statements(&run_id, signal, &payload, Some("trigger"), true, now);
            if let Some(first) = signals.first_mut() {
                *first = first.clone().expect_changes(1);
            }
            statements.extend(signals);
            statements.push(store::firing_status_statement(
                &firing.firing_id,
                "delivered",
            ));
            statements.push(store::prune_statement(
                &row.trigger_id,
                self.inner.max_firings,
            ));
            match db.transaction(statements).await {
                Ok(_) => {
                    if let Err(e) = runs.delivered(&run_id).await {
                        tracing::warn!(run = %run_id, error = %e, "a woken run was not announced");
                    }
                    return Ok(Fired::Done);
                }
                // This run no longer waits on it: the next one.
                Err(DbError::ExpectedChanges {
                    statement_index, ..
                }) if statement_index as usize == delivery => continue,
                // Fired before, or the trigger went or was disabled.
                Err(DbError::ExpectedChanges { .. }) => return Ok(Fired::Skipped),
                Err(e) => return Err(e.into()),
            }
        }
        let statements = vec![
            store::claim_statement(&firing),
            store::enabled_guard_statement(&row.trigger_id),
            store::firing_status_statement(&firing.firing_id, "no-listener"),
            store::prune_statement(&row.trigger_id, self.inner.max_firings),
        ];
        match db.transaction(statements).await {
            Ok(_) | Err(DbError::ExpectedChanges { .. }) => Ok(Fired::Skipped),
            Err(e) => Err(e.into()),
        }
    }
}

/// Whether a run-completed source matches `run`: the exact agent and
/// status when named, the title containing `titleMatch` (any case).
fn matches_run(source: &Value, run: &Run) -> bool {
    if let Some(agent) = source["agentId"].as_str() {
        if run.agent_id.as_deref() != Some(agent) {
            return false;
        }
    }
    if let Some(status) = source["status"].as_str() {
        if run.status.as_str() != status {
            return false;
        }
    }
    if let Some(needle) = source["titleMatch"].as_str() {
        let title = run.title.clone().unwrap_or_default().to_lowercase();
        if !title.contains(&needle.to_lowercase()) {
            return false;
        }
    }
    true
}

/// A new thread's first words: the prompt (resolved on the hypermedia
/// server), then the trigger's context and instructions, as the reference
/// writes them.
fn first_words(prompt: &str, row: &TriggerRow, firing: &NewFiring, activity: &Value) -> String {
    let fields = [
        ("triggerId", json!(row.trigger_id)),
        ("firingId", json!(firing.firing_id)),
        // The reference's activity-event key: none for schedules and runs.
        (
            "activityKey",
            match activity["type"].as_str() {
                Some("schedule" | "run-completed") => Value::Null,
                _ => json!(super::super::activity::event_key(activity)),
            },
        ),
        ("activitySummary", json!(activity_summary(activity))),
    ];
    let mut context = String::from("{\n");
    for (key, value) in &fields {
        context.push_str(&format!("  \"{key}\": {},\n", pretty(value, &[], 1)));
    }
    context.push_str(&format!(
        "  \"activity\": {}\n}}",
        pretty(activity, ACTIVITY_ORDER, 1)
    ));
    let text = [
        prompt,
        "",
        "<trigger_context>",
        context.as_str(),
        "</trigger_context>",
        "",
        "<trigger_instructions>",
        INSTRUCTIONS,
        "</trigger_instructions>",
    ]
    .join("\n");
    validate::js_trim(&text).to_owned()
}

/// The order the reference writes an activity's fields in.
const ACTIVITY_ORDER: &[&str] = &[
    "type",
    "scheduleKind",
    "scheduledAt",
    "firedAt",
    "timezone",
    "runId",
    "runTitle",
    "runStatus",
    "agentId",
    "sessionId",
];

/// JSON with two-space indentation (as `JSON.stringify(v, null, 2)`), an
/// object's fields in `order` first and the rest after them.
fn pretty(value: &Value, order: &[&str], depth: usize) -> String {
    let Value::Object(map) = value else {
        let text = serde_json::to_string_pretty(value).unwrap_or_default();
        return text.replace('\n', &format!("\n{}", "  ".repeat(depth)));
    };
    if map.is_empty() {
        return "{}".to_owned();
    }
    let mut keys: Vec<&String> = order
        .iter()
        .filter_map(|k| map.get_key_value(*k).map(|(k, _)| k))
        .collect();
    keys.extend(map.keys().filter(|k| !order.contains(&k.as_str())));
    let inner = "  ".repeat(depth + 1);
    let fields: Vec<String> = keys
        .into_iter()
        .map(|k| {
            format!(
                "{inner}{}: {}",
                Value::String(k.clone()),
                pretty(&map[k], &[], depth + 1)
            )
        })
        .collect();
    format!("{{\n{}\n{}}}", fields.join(",\n"), "  ".repeat(depth))
}

/// Where a catch-up starts, as the `(finished_at_ms, run_id)` after which
/// runs are looked at: where the trigger last looked, less the margin; but
/// never a run that ended before the trigger was made, last edited or
/// enabled, nor one that ended in that same millisecond (which came first
/// is not recorded, and a run that ended after it was seen live).
fn catch_up_from(row: &TriggerRow) -> (i64, String) {
    let looked = row
        .last_checked_at_ms
        .map(|at| at.saturating_sub(CATCH_UP_MARGIN_MS));
    let edited = row.created_at_ms.max(row.updated_at_ms);
    match looked {
        Some(at) if at > edited => (at, String::new()),
        // `run_id > ''` holds for every run of the next millisecond on.
        _ => (edited.saturating_add(1), String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_catch_up_starts_after_the_millisecond_the_trigger_was_edited() {
        let row = |created: i64, updated: i64, checked: Option<i64>| TriggerRow {
            trigger_id: "t".into(),
            account_id: "a".into(),
            agent_id: "g".into(),
            name: "n".into(),
            enabled: true,
            source: serde_json::json!({"type": "run-completed"}),
            prompt: String::new(),
            continuation: None,
            created_at_ms: created,
            updated_at_ms: updated,
            last_checked_at_ms: checked,
            last_fired_at_ms: None,
            last_error: None,
        };
        // Never looked: after the millisecond it was enabled, so a run that
        // ended in that millisecond is not caught up on.
        assert_eq!(catch_up_from(&row(100, 200, None)), (201, String::new()));
        // Looked before it was enabled again: the same.
        assert_eq!(
            catch_up_from(&row(100, 1_000_000, Some(1_000_000 + CATCH_UP_MARGIN_MS))),
            (1_000_001, String::new())
        );
        // Looked since: from there, less the margin, that millisecond
        // included.
        let checked = 10_000_000;
        assert_eq!(
            catch_up_from(&row(100, 200, Some(checked))),
            (checked - CATCH_UP_MARGIN_MS, String::new())
        );
    }

    #[test]
    fn titles_from_words_are_the_first_line_collapsed_and_bounded() {
        assert_eq!(
            title_from_words("  Check   the\tnews \nmore"),
            "Check the news"
        );
        assert_eq!(title_from_words("\n"), "Agent-started session");
        let long = "x".repeat(100);
        let title = title_from_words(&long);
        assert_eq!(title.encode_utf16().count(), 80);
        assert!(title.ends_with('…'));
    }

    #[test]
    fn run_completed_summaries_name_the_run() {
        let a =
            json!({"type": "run-completed", "runTitle": "Nightly crawl", "runStatus": "succeeded"});
        assert_eq!(activity_summary(&a), "Nightly crawl succeeded");
        let b = json!({"type": "run-completed", "runTitle": "", "runStatus": "failed"});
        assert_eq!(activity_summary(&b), "A run failed");
    }

    #[test]
    fn context_json_keeps_the_references_field_order() {
        let activity = json!({"type": "schedule", "scheduleKind": "once", "scheduledAt": 5,
            "firedAt": 6, "nested": {"b": [1, {"c": null}], "a": "x"}});
        assert_eq!(
            pretty(&activity, ACTIVITY_ORDER, 1),
            "{\n    \"type\": \"schedule\",\n    \"scheduleKind\": \"once\",\n    \"scheduledAt\": 5,\n    \"firedAt\": 6,\n    \"nested\": {\n      \"a\": \"x\",\n      \"b\": [\n        1,\n        {\n          \"c\": null\n        }\n      ]\n    }\n  }"
        );
        let parsed: Value = serde_json::from_str(&pretty(&activity, ACTIVITY_ORDER, 1)).unwrap();
        assert_eq!(parsed, activity);
    }
}
