//! All SQL of triggers (`agentos_core_triggers`) and their firings
//! (`agentos_core_trigger_firings`).
//!
//! A firing is claimed by its insert: the row is unique on (account,
//! trigger, activity key), and [`claim_statement`] expects to change one
//! row, so a key seen before fails the claiming transaction with nothing
//! written. The claim commits with what the firing starts (the caller adds
//! those statements), which is what makes a firing happen once and never be
//! lost half-way.

use agentos_schema::row::Row;
use agentos_schema::{DbError, SharedDatabase, SqlValue, Statement};
use serde_json::Value;

pub(crate) const TRIGGERS: &str = "agentos_core_triggers";
pub(crate) const FIRINGS: &str = "agentos_core_trigger_firings";
const WATERMARKS: &str = "agentos_core_activity_watermarks";

const COLUMNS: &str = "trigger_id, account_id, agent_id, name, enabled, source_json, prompt_json, \
     continuation_json, created_at_ms, updated_at_ms, last_checked_at_ms, last_fired_at_ms, \
     last_error";
const WIDTH: usize = 13;

/// A trigger as stored: its parts are the normalized JSON of
/// `validate.rs`, its prompt the stored form of `prompt.rs`.
#[derive(Clone, Debug, PartialEq)]
pub struct TriggerRow {
    pub trigger_id: String,
    /// The agent owner's account.
    pub account_id: String,
    pub agent_id: String,
    pub name: String,
    pub enabled: bool,
    pub source: Value,
    /// `{"type":"seed-prompt-blocks","blocks":[…]}` as text.
    pub prompt: String,
    /// Absent: a new thread.
    pub continuation: Option<Value>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub last_checked_at_ms: Option<i64>,
    pub last_fired_at_ms: Option<i64>,
    pub last_error: Option<String>,
}

impl TriggerRow {
    /// The source's `type`.
    pub fn source_type(&self) -> &str {
        self.source["type"].as_str().unwrap_or_default()
    }
}

fn decode(mut r: Row) -> Result<TriggerRow, DbError> {
    Ok(TriggerRow {
        trigger_id: r.text(0)?,
        account_id: r.text(1)?,
        agent_id: r.text(2)?,
        name: r.text(3)?,
        enabled: r.flag(4)?,
        source: r.json(5)?,
        prompt: r.text(6)?,
        continuation: r.opt_json(7)?,
        created_at_ms: r.int(8)?,
        updated_at_ms: r.int(9)?,
        last_checked_at_ms: r.opt_int(10)?,
        last_fired_at_ms: r.opt_int(11)?,
        last_error: r.opt_text(12)?,
    })
}

/// One part of a trigger a patch replaces, checked.
#[derive(Clone, Debug, PartialEq)]
pub enum Part {
    Name(String),
    Enabled(bool),
    Source(Value),
    /// The stored form of the prompt's blocks.
    Prompt(String),
    Continuation(Value),
}

/// What a firing is, as the claim writes it.
#[derive(Clone, Debug, PartialEq)]
pub struct NewFiring {
    pub firing_id: String,
    pub account_id: String,
    pub agent_id: String,
    pub trigger_id: String,
    pub activity_key: String,
    /// The session it starts (a new thread's), written with the claim.
    pub session_id: Option<String>,
    pub activity: Value,
    pub created_at_ms: i64,
}

/// A firing as read back, with its trigger's current name, source and
/// prompt (what a session's trigger context shows).
#[derive(Clone, Debug, PartialEq)]
pub struct FiringRow {
    pub firing_id: String,
    pub trigger_id: String,
    pub activity_key: String,
    pub session_id: Option<String>,
    pub activity: Value,
    pub status: String,
    pub error: Option<String>,
    pub created_at_ms: i64,
    pub trigger_name: String,
    pub source: Value,
    pub prompt: String,
}

const FIRING_COLUMNS: &str = "f.firing_id, f.trigger_id, f.activity_key, f.session_id, \
     f.activity_json, f.status, f.error, f.created_at_ms, t.name, t.source_json, t.prompt_json";
const FIRING_WIDTH: usize = 11;

fn decode_firing(mut r: Row) -> Result<FiringRow, DbError> {
    Ok(FiringRow {
        firing_id: r.text(0)?,
        trigger_id: r.text(1)?,
        activity_key: r.text(2)?,
        session_id: r.opt_text(3)?,
        activity: r.json(4)?,
        status: r.text(5)?,
        error: r.opt_text(6)?,
        created_at_ms: r.int(7)?,
        trigger_name: r.text(8)?,
        source: r.json(9)?,
        prompt: r.text(10)?,
    })
}

fn json_text(v: &Value) -> SqlValue {
    SqlValue::Text(v.to_string())
}

fn limit(n: u64) -> SqlValue {
    SqlValue::Integer(i64::try_from(n).unwrap_or(i64::MAX))
}

/// Claims a firing: changes one row, or fails its transaction (at this
/// statement's index) when the key fired before.
pub fn claim_statement(firing: &NewFiring) -> Statement {
    Statement::new(
        format!(
            "INSERT INTO {FIRINGS} (firing_id, account_id, agent_id, trigger_id, activity_key, \
               session_id, activity_json, status, created_at_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'created', ?8) \
             ON CONFLICT (account_id, trigger_id, activity_key) DO NOTHING"
        ),
        vec![
            firing.firing_id.as_str().into(),
            firing.account_id.as_str().into(),
            firing.agent_id.as_str().into(),
            firing.trigger_id.as_str().into(),
            firing.activity_key.as_str().into(),
            firing.session_id.clone().into(),
            json_text(&firing.activity),
            firing.created_at_ms.into(),
        ],
    )
    .expect_changes(1)
}

/// Keeps the newest `keep` firings of a trigger, and every firing whose
/// run has not ended (the loop guard walks back through it).
pub fn prune_statement(trigger_id: &str, keep: u64) -> Statement {
    Statement::new(
        format!(
            "DELETE FROM {FIRINGS} WHERE trigger_id = ?1 AND firing_id NOT IN \
               (SELECT firing_id FROM {FIRINGS} WHERE trigger_id = ?1 \
                ORDER BY created_at_ms DESC, firing_id DESC LIMIT ?2) \
             AND NOT EXISTS (SELECT 1 FROM agentos_core_runs r \
               WHERE r.trigger_firing_id = {FIRINGS}.firing_id \
                 AND r.status NOT IN ('succeeded', 'failed', 'canceled'))"
        ),
        vec![trigger_id.into(), limit(keep)],
    )
}

/// A trigger fired at `at` (a once schedule is disabled with it). With
/// `guard`, it changes nothing, failing its transaction, unless the
/// trigger still exists and is enabled.
pub fn fired_statement(trigger_id: &str, at: i64, disable: bool, guard: bool) -> Statement {
    let statement = Statement::new(
        format!(
            "UPDATE {TRIGGERS} SET last_fired_at_ms = ?2, last_error = NULL, \
               enabled = CASE WHEN ?3 THEN 0 ELSE enabled END \
             WHERE trigger_id = ?1 AND (?4 = 0 OR enabled = 1)"
        ),
        vec![
            trigger_id.into(),
            at.into(),
            i64::from(disable).into(),
            i64::from(guard).into(),
        ],
    );
    if guard {
        statement.expect_changes(1)
    } else {
        statement
    }
}

/// Changes nothing and fails its transaction unless the trigger still
/// exists and is enabled (what a claim that updates nothing else of the
/// trigger commits with).
pub fn enabled_guard_statement(trigger_id: &str) -> Statement {
    Statement::new(
        format!("UPDATE {TRIGGERS} SET enabled = 1 WHERE trigger_id = ?1 AND enabled = 1"),
        vec![trigger_id.into()],
    )
    .expect_changes(1)
}

/// Firings no longer name a deleted session.
pub fn forget_session_statement(session_id: &str) -> Statement {
    Statement::new(
        format!("UPDATE {FIRINGS} SET session_id = NULL WHERE session_id = ?1"),
        vec![session_id.into()],
    )
}

/// A claimed firing that failed, with why.
pub fn failed_firing_statement(firing_id: &str, error: &str) -> Statement {
    Statement::new(
        format!("UPDATE {FIRINGS} SET status = 'error', error = ?2 WHERE firing_id = ?1"),
        vec![firing_id.into(), error.into()],
    )
}

/// A trigger's last error.
pub fn trigger_error_statement(trigger_id: &str, error: &str) -> Statement {
    Statement::new(
        format!("UPDATE {TRIGGERS} SET last_error = ?2 WHERE trigger_id = ?1"),
        vec![trigger_id.into(), error.into()],
    )
}

/// A firing's end as a wake: `delivered` or `no-listener`.
pub fn firing_status_statement(firing_id: &str, status: &str) -> Statement {
    Statement::new(
        format!("UPDATE {FIRINGS} SET status = ?2, session_id = NULL WHERE firing_id = ?1"),
        vec![firing_id.into(), status.into()],
    )
}

/// The triggers domain's handle on the one database.
#[derive(Clone)]
pub struct TriggerStore {
    db: SharedDatabase,
}

impl TriggerStore {
    pub fn new(db: SharedDatabase) -> TriggerStore {
        TriggerStore { db }
    }

    pub fn db(&self) -> &SharedDatabase {
        &self.db
    }

    /// Inserts a trigger while its agent exists and has fewer than `max`,
    /// with `with` in the same transaction; `false` (nothing written)
    /// otherwise.
    pub async fn insert(
        &self,
        row: &TriggerRow,
        max: u64,
        with: Vec<Statement>,
    ) -> Result<bool, DbError> {
        let mut statements = vec![Statement::new(
            format!(
                "INSERT INTO {TRIGGERS} ({COLUMNS}, source_type) \
                     SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, NULL, NULL, NULL, ?11 \
                     WHERE EXISTS (SELECT 1 FROM agentos_core_agents WHERE agent_id = ?3) \
                       AND (SELECT count(*) FROM {TRIGGERS} WHERE agent_id = ?3) < ?12"
            ),
            vec![
                row.trigger_id.as_str().into(),
                row.account_id.as_str().into(),
                row.agent_id.as_str().into(),
                row.name.as_str().into(),
                i64::from(row.enabled).into(),
                json_text(&row.source),
                row.prompt.as_str().into(),
                row.continuation.as_ref().map(json_text).into(),
                row.created_at_ms.into(),
                row.updated_at_ms.into(),
                row.source_type().into(),
                limit(max),
            ],
        )
        .expect_changes(1)];
        statements.extend(with);
        match self.db.transaction(statements).await {
            Ok(_) => Ok(true),
            Err(DbError::ExpectedChanges {
                statement_index: 0, ..
            }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// How many triggers an agent has.
    pub async fn count_for_agent(&self, agent_id: &str) -> Result<u64, DbError> {
        let rows = self
            .db
            .query(
                &format!("SELECT count(*) FROM {TRIGGERS} WHERE agent_id = ?1"),
                vec![agent_id.into()],
            )
            .await?;
        agentos_schema::row::count(rows, TRIGGERS)
    }

    pub async fn get(&self, trigger_id: &str) -> Result<Option<TriggerRow>, DbError> {
        let rows = self
            .db
            .query(
                &format!("SELECT {COLUMNS} FROM {TRIGGERS} WHERE trigger_id = ?1"),
                vec![trigger_id.into()],
            )
            .await?;
        Row::optional(rows, TRIGGERS, WIDTH)?
            .map(decode)
            .transpose()
    }

    /// An agent's triggers, the latest edited first.
    pub async fn list_for_agent(&self, agent_id: &str) -> Result<Vec<TriggerRow>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM {TRIGGERS} WHERE agent_id = ?1 \
                     ORDER BY updated_at_ms DESC, trigger_id"
                ),
                vec![agent_id.into()],
            )
            .await?;
        Row::all(rows, TRIGGERS, WIDTH, decode)
    }

    /// Enabled triggers of a source type, oldest first, of one account or
    /// of every one.
    pub async fn enabled(
        &self,
        source_type: &str,
        account_id: Option<&str>,
    ) -> Result<Vec<TriggerRow>, DbError> {
        self.enabled_where("source_type = ?2", Some(source_type), account_id)
            .await
    }

    /// Enabled triggers of every hypermedia source type (anything but a
    /// schedule or a finished run) of one account or of every one, oldest
    /// first.
    pub async fn enabled_activity(
        &self,
        account_id: Option<&str>,
    ) -> Result<Vec<TriggerRow>, DbError> {
        self.enabled_where(
            "source_type NOT IN ('schedule', 'run-completed') AND ?2 IS NULL",
            None,
            account_id,
        )
        .await
    }

    /// Enabled triggers whose source type passes `filter` (with `?2` bound
    /// to `source_type`), of one account (`?1`) or of every one.
    async fn enabled_where(
        &self,
        filter: &str,
        source_type: Option<&str>,
        account_id: Option<&str>,
    ) -> Result<Vec<TriggerRow>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM {TRIGGERS} WHERE enabled = 1 AND {filter} \
                       AND (?1 IS NULL OR account_id = ?1) \
                     ORDER BY created_at_ms, trigger_id"
                ),
                vec![
                    account_id.map(str::to_owned).into(),
                    source_type.map(str::to_owned).into(),
                ],
            )
            .await?;
        Row::all(rows, TRIGGERS, WIDTH, decode)
    }

    /// The keys of the events last seen in `account_id`'s feed on
    /// `server`, newest first; `None` before its first poll that went
    /// through.
    pub async fn watermark(
        &self,
        account_id: &str,
        server: &str,
    ) -> Result<Option<Vec<String>>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT seen_keys_json FROM {WATERMARKS} \
                     WHERE account_id = ?1 AND server_url = ?2 \
                       AND last_success_at_ms IS NOT NULL"
                ),
                vec![account_id.into(), server.into()],
            )
            .await?;
        let Some(mut row) = Row::optional(rows, WATERMARKS, 1)? else {
            return Ok(None);
        };
        Ok(serde_json::from_str::<Vec<String>>(&row.text(0)?).ok())
    }

    /// A poll that went through: the keys seen, and when.
    pub async fn set_watermark(
        &self,
        account_id: &str,
        server: &str,
        seen: &[String],
        polled_at: i64,
        now: i64,
    ) -> Result<(), DbError> {
        self.db
            .transaction(vec![Statement::new(
                format!(
                    "INSERT INTO {WATERMARKS} (account_id, server_url, seen_keys_json, \
                       last_poll_at_ms, last_success_at_ms, last_error) \
                     VALUES (?1, ?2, ?3, ?4, ?5, NULL) \
                     ON CONFLICT (account_id, server_url) DO UPDATE SET \
                       seen_keys_json = excluded.seen_keys_json, \
                       last_poll_at_ms = excluded.last_poll_at_ms, \
                       last_success_at_ms = excluded.last_success_at_ms, last_error = NULL"
                ),
                vec![
                    account_id.into(),
                    server.into(),
                    json_text(&serde_json::json!(seen)),
                    polled_at.into(),
                    now.into(),
                ],
            )])
            .await
            .map(drop)
    }

    /// A poll that failed: why, and when; the keys seen stay. A first poll
    /// that fails leaves a row with no success, which [`Self::watermark`]
    /// does not count as a position: the next poll is still a cold start.
    /// (The reference records an empty position there, so its next poll
    /// fires everything on up to `activityMaxPages` pages, however old.)
    pub async fn watermark_error(
        &self,
        account_id: &str,
        server: &str,
        polled_at: i64,
        error: &str,
    ) -> Result<(), DbError> {
        self.db
            .transaction(vec![Statement::new(
                format!(
                    "INSERT INTO {WATERMARKS} (account_id, server_url, seen_keys_json, \
                       last_poll_at_ms, last_error) VALUES (?1, ?2, '[]', ?3, ?4) \
                     ON CONFLICT (account_id, server_url) DO UPDATE SET \
                       last_poll_at_ms = excluded.last_poll_at_ms, last_error = excluded.last_error"
                ),
                vec![
                    account_id.into(),
                    server.into(),
                    polled_at.into(),
                    error.into(),
                ],
            )])
            .await
            .map(drop)
    }

    /// Writes the parts a patch names; `updated_at_ms` moves (never back)
    /// and the last error clears. `false` when the trigger is gone.
    pub async fn update(
        &self,
        trigger_id: &str,
        parts: &[Part],
        now: i64,
    ) -> Result<bool, DbError> {
        let mut sets = Vec::new();
        let mut params: Vec<SqlValue> = vec![trigger_id.into(), now.into()];
        let mut set = |column: &str, value: SqlValue| {
            params.push(value);
            sets.push(format!("{column} = ?{}", params.len()));
        };
        for part in parts {
            match part {
                Part::Name(name) => set("name", name.as_str().into()),
                Part::Enabled(on) => set("enabled", i64::from(*on).into()),
                Part::Source(source) => {
                    set(
                        "source_type",
                        source["type"].as_str().unwrap_or_default().into(),
                    );
                    set("source_json", json_text(source));
                }
                Part::Prompt(prompt) => set("prompt_json", prompt.as_str().into()),
                Part::Continuation(c) => set("continuation_json", json_text(c)),
            }
        }
        let rows = self
            .db
            .transaction(vec![Statement::new(
                format!(
                    "UPDATE {TRIGGERS} SET {}, updated_at_ms = max(updated_at_ms, ?2), \
                       last_error = NULL WHERE trigger_id = ?1",
                    sets.join(", ")
                ),
                params,
            )])
            .await?;
        Ok(rows.first().map(|r| r.changes) == Some(1))
    }

    /// Deletes a trigger and its firings; the runs they started stay,
    /// without attribution. `false` when it was gone.
    pub async fn delete(&self, trigger_id: &str) -> Result<bool, DbError> {
        let rows = self.db.transaction(delete_statements(trigger_id)).await?;
        Ok(rows.last().map(|r| r.changes) == Some(1))
    }

    /// Sets `last_checked_at_ms` on the enabled triggers of a source type
    /// (of one account, or of every one): those a look just went over.
    pub async fn checked(
        &self,
        source_type: &str,
        account_id: Option<&str>,
        now: i64,
    ) -> Result<(), DbError> {
        self.db
            .transaction(vec![Statement::new(
                format!(
                    "UPDATE {TRIGGERS} SET last_checked_at_ms = ?3 \
                     WHERE source_type = ?1 AND enabled = 1 AND (?2 IS NULL OR account_id = ?2)"
                ),
                vec![
                    source_type.into(),
                    account_id.map(str::to_owned).into(),
                    now.into(),
                ],
            )])
            .await
            .map(drop)
    }

    /// Moves run-completed triggers' `last_checked_at_ms` up to `at` (the
    /// end of the latest run they looked at), never back.
    pub async fn looked_up_to(&self, trigger_ids: &[String], at: i64) -> Result<(), DbError> {
        let statements = trigger_ids
            .iter()
            .map(|id| {
                Statement::new(
                    format!(
                        "UPDATE {TRIGGERS} SET last_checked_at_ms = \
                           max(coalesce(last_checked_at_ms, 0), ?2) WHERE trigger_id = ?1"
                    ),
                    vec![id.as_str().into(), at.into()],
                )
            })
            .collect::<Vec<_>>();
        if statements.is_empty() {
            return Ok(());
        }
        self.db.transaction(statements).await.map(drop)
    }

    /// The runs of firings still `created` that failed for good.
    pub async fn failed_firing_runs(&self) -> Result<Vec<String>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT r.run_id FROM {FIRINGS} f \
                     JOIN agentos_core_runs r ON r.trigger_firing_id = f.firing_id \
                     WHERE f.status = 'created' AND r.status = 'failed'"
                ),
                vec![],
            )
            .await?;
        agentos_schema::row::texts(rows, FIRINGS)
    }

    /// Records a firing's failure on it and on its trigger.
    pub async fn failed(
        &self,
        firing_id: &str,
        trigger_id: &str,
        error: &str,
    ) -> Result<(), DbError> {
        self.db
            .transaction(vec![
                failed_firing_statement(firing_id, error),
                trigger_error_statement(trigger_id, error),
            ])
            .await
            .map(drop)
    }

    /// The trigger a firing belongs to and its activity (the loop guard's
    /// walk back).
    pub async fn firing_origin(&self, firing_id: &str) -> Result<Option<(String, Value)>, DbError> {
        let rows = self
            .db
            .query(
                &format!("SELECT trigger_id, activity_json FROM {FIRINGS} WHERE firing_id = ?1"),
                vec![firing_id.into()],
            )
            .await?;
        match Row::optional(rows, FIRINGS, 2)? {
            None => Ok(None),
            Some(mut r) => Ok(Some((r.text(0)?, r.json(1)?))),
        }
    }

    /// The firing that started a session, if its trigger still exists.
    pub async fn firing_of_session(&self, session_id: &str) -> Result<Option<FiringRow>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT {FIRING_COLUMNS} FROM {FIRINGS} f \
                     JOIN {TRIGGERS} t ON t.trigger_id = f.trigger_id \
                     WHERE f.session_id = ?1 ORDER BY f.created_at_ms LIMIT 1"
                ),
                vec![session_id.into()],
            )
            .await?;
        Row::optional(rows, FIRINGS, FIRING_WIDTH)?
            .map(decode_firing)
            .transpose()
    }

    /// The sessions a trigger's kept firings started, the newest first.
    pub async fn sessions_of(&self, trigger_id: &str) -> Result<Vec<String>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT f.session_id FROM {FIRINGS} f \
                     JOIN agentos_core_sessions s ON s.session_id = f.session_id \
                     WHERE f.trigger_id = ?1 ORDER BY f.created_at_ms DESC, f.firing_id DESC"
                ),
                vec![trigger_id.into()],
            )
            .await?;
        agentos_schema::row::texts(rows, FIRINGS)
    }

    /// A trigger's newest firings (what `~/triggers/<name>` shows).
    pub async fn recent_firings(
        &self,
        trigger_id: &str,
        n: u64,
    ) -> Result<Vec<FiringRow>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT {FIRING_COLUMNS} FROM {FIRINGS} f \
                     JOIN {TRIGGERS} t ON t.trigger_id = f.trigger_id \
                     WHERE f.trigger_id = ?1 \
                     ORDER BY f.created_at_ms DESC, f.firing_id DESC LIMIT ?2"
                ),
                vec![trigger_id.into(), limit(n)],
            )
            .await?;
        Row::all(rows, FIRINGS, FIRING_WIDTH, decode_firing)
    }
}

/// Deletes a trigger and its firings, detaching the runs they started;
/// the last statement deletes the trigger.
pub fn delete_statements(trigger_id: &str) -> Vec<Statement> {
    deleting("trigger_id", trigger_id)
}

/// Deletes every trigger of an agent and their firings (with the agent).
pub fn delete_agent_statements(agent_id: &str) -> Vec<Statement> {
    deleting("agent_id", agent_id)
}

/// The triggers whose `column` is `value`, their firings, and the runs'
/// links to those firings (the runs stay).
fn deleting(column: &str, value: &str) -> Vec<Statement> {
    vec![
        Statement::new(
            format!(
                "UPDATE agentos_core_runs SET trigger_firing_id = NULL WHERE trigger_firing_id IN \
                   (SELECT firing_id FROM {FIRINGS} WHERE {column} = ?1)"
            ),
            vec![value.into()],
        ),
        Statement::new(
            format!("DELETE FROM {FIRINGS} WHERE {column} = ?1"),
            vec![value.into()],
        ),
        Statement::new(
            format!("DELETE FROM {TRIGGERS} WHERE {column} = ?1"),
            vec![value.into()],
        ),
    ]
}
