//! The activity monitor: every `hypermedia.activityPollIntervalMs`, each
//! account with an enabled hypermedia trigger has its feed read (newest
//! first, up to `activityMaxPages` pages of `activityPageSize`, stopping
//! at a page that holds an event already seen), and each event not seen
//! before is taken oldest first: the account's triggers it matches fire
//! under its firing key (a key that fired before is skipped, so an event
//! seen twice, or a mention seen as a comment and as a citation, fires
//! once). Runs waiting for activity whose criteria the event matches take
//! it first. Where the feed was last seen is kept per account and server in
//! the database and moves after every event taken, so a restart neither
//! fires again nor skips. On a first poll only events no older than the
//! account's oldest hypermedia trigger fire. Each request has 20 s, each
//! cycle 60 s.

use std::time::Duration;

use super::*;
use crate::triggers::activity;

/// One poll cycle, at most.
const CYCLE_DEADLINE: Duration = Duration::from_secs(60);

/// What one poll did, for logs and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollReport {
    pub accounts: u64,
    pub events: u64,
    pub fired: u64,
    pub errors: u64,
}

impl Triggers {
    /// Polls every account's feed once (the monitor's cycle).
    pub async fn poll_activity(&self) -> PollReport {
        let _one = self.inner.polling.lock().await;
        let mut report = PollReport::default();
        match tokio::time::timeout(CYCLE_DEADLINE, self.poll_accounts(&mut report)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the activity monitor could not read its triggers");
                report.errors += 1;
            }
            Err(_) => {
                tracing::warn!("an activity poll ran out of its 60 s");
                report.errors += 1;
            }
        }
        report
    }

    async fn poll_accounts(&self, report: &mut PollReport) -> Result<(), TriggerError> {
        let rows = self.inner.store.enabled_activity(None).await?;
        let mut accounts: Vec<String> = Vec::new();
        for row in &rows {
            if !accounts.contains(&row.account_id) {
                accounts.push(row.account_id.clone());
            }
        }
        for account in accounts {
            report.accounts += 1;
            let oldest = rows
                .iter()
                .filter(|r| r.account_id == account)
                .map(|r| r.created_at_ms)
                .min()
                .unwrap_or(i64::MAX);
            if let Err(e) = self.poll_account(&account, oldest, report).await {
                report.errors += 1;
                tracing::warn!(account = %account, error = %e, "an activity poll failed");
            }
        }
        Ok(())
    }

    async fn poll_account(
        &self,
        account: &str,
        oldest_trigger: i64,
        report: &mut PollReport,
    ) -> Result<(), TriggerError> {
        let hypermedia = &self.inner.hypermedia;
        let server = hypermedia.server().to_owned();
        let pace = hypermedia.activity_pace();
        let keep = usize::try_from(pace.page_size).unwrap_or(usize::MAX);
        let started = now_ms();
        let store = &self.inner.store;
        let previous = store.watermark(account, &server).await?;
        let mut fetched = Vec::new();
        let mut token: Option<String> = None;
        for _ in 0..pace.max_pages {
            let page = match hypermedia.feed_page(account, token.as_deref()).await {
                Ok(page) => page,
                Err(e) => {
                    store
                        .watermark_error(account, &server, started, &e.to_string())
                        .await?;
                    report.errors += 1;
                    return Ok(());
                }
            };
            let (events, next) = page;
            let seen_here = previous.as_ref().is_some_and(|seen| {
                events
                    .iter()
                    .any(|e| activity::event_key(e).is_some_and(|k| seen.contains(&k)))
            });
            fetched.extend(events);
            token = next;
            if token.is_none() || seen_here {
                break;
            }
        }
        let Some(seen) = previous else {
            // A first poll: what is there now is seen; only what is not
            // older than the account's triggers fires.
            let mut keys: Vec<String> = Vec::new();
            for key in fetched.iter().filter_map(activity::event_key) {
                if !keys.contains(&key) && keys.len() < keep {
                    keys.push(key);
                }
            }
            for event in fetched.iter().rev() {
                let recent =
                    activity::event_time_ms(event).is_some_and(|at| at >= oldest_trigger as f64);
                if recent {
                    self.take_event(account, event, report).await?;
                }
            }
            store
                .set_watermark(account, &server, &keys, started, now_ms())
                .await?;
            return Ok(());
        };
        let fresh: Vec<&Value> = fetched
            .iter()
            .filter(|e| activity::event_key(e).is_some_and(|k| !seen.contains(&k)))
            .collect();
        if fresh.is_empty() {
            return Ok(store
                .set_watermark(account, &server, &seen, started, now_ms())
                .await?);
        }
        let mut cursor = seen;
        for event in fresh.into_iter().rev() {
            self.take_event(account, event, report).await?;
            if let Some(key) = activity::event_key(event) {
                cursor.retain(|k| *k != key);
                cursor.insert(0, key);
                cursor.truncate(keep);
            }
            store
                .set_watermark(account, &server, &cursor, started, now_ms())
                .await?;
        }
        Ok(())
    }

    /// One event of `account`'s feed: its enabled hypermedia triggers that
    /// match fire under the event's firing key.
    async fn take_event(
        &self,
        account: &str,
        event: &Value,
        report: &mut PollReport,
    ) -> Result<(), TriggerError> {
        report.events += 1;
        // Runs waiting for activity hear of it first (every time it is
        // seen, as the reference delivers it).
        let waits = self
            .inner
            .runs
            .deliver_activity(account, event, |criteria| {
                activity::matches_criteria(criteria, event)
            })
            .await;
        if let Err(e) = waits {
            tracing::warn!(account = %account, error = %e, "activity could not reach a waiting run");
        }
        let Some(key) = activity::firing_key(event) else {
            return Ok(());
        };
        let rows = self.inner.store.enabled_activity(Some(account)).await?;
        for row in rows {
            if !activity::matches_source(&row.source, event) {
                continue;
            }
            let now = now_ms();
            let fired = Activity {
                key: key.clone(),
                value: event.clone(),
                summary: activity_summary(event),
                fired_at: now,
                disable: false,
            };
            match self.fire(&row, fired).await {
                Ok(Fired::Done) => report.fired += 1,
                Ok(Fired::Skipped) => {}
                Ok(Fired::Failed(_)) => report.errors += 1,
                Err(e) => {
                    report.errors += 1;
                    tracing::warn!(trigger = %row.trigger_id, error = %e, "an activity firing failed");
                }
            }
        }
        Ok(())
    }
}
