//! All SQL of hypermedia drafts (`agentos_core_hm_drafts`): documents an
//! agent writes locally, one row each per owner account and agent, kept
//! until `draft.publish` publishes them (and after, marked published with
//! what publishing made). At most [`MAX_DRAFTS_PER_AGENT`] per agent; a
//! deleted draft is gone.

use agentos_schema::row::Row;
use agentos_schema::{DbError, SharedDatabase, SqlValue, Statement};
use serde_json::Value;

const DRAFTS: &str = "agentos_core_hm_drafts";

/// Drafts one agent keeps at most.
pub const MAX_DRAFTS_PER_AGENT: u64 = 200;

const COLUMNS: &str = "draft_id, title, content_json, metadata_json, edit_target, \
     location_target, path_name, visibility, status, created_at_ms, updated_at_ms";
const WIDTH: usize = 11;

/// A draft as kept.
#[derive(Clone, Debug, PartialEq)]
pub struct Draft {
    pub draft_id: String,
    pub title: String,
    /// Block nodes.
    pub content: Vec<Value>,
    /// `(key, value)` in the order they were set.
    pub metadata: Vec<(String, Value)>,
    pub edit_target: Option<String>,
    pub location_target: Option<String>,
    pub path_name: Option<String>,
    pub visibility: Option<String>,
    /// `idle` or `published`.
    pub status: String,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// Where a draft goes, each kept when not given on an update.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Placement {
    pub edit_target: Option<String>,
    pub location_target: Option<String>,
    pub path_name: Option<String>,
    pub visibility: Option<String>,
}

fn opt(value: &Option<String>) -> SqlValue {
    value.as_deref().map_or(SqlValue::Null, SqlValue::from)
}

/// Whose a draft is and which: the agent's owner, the agent, the draft.
#[derive(Clone, Copy)]
pub struct DraftKey<'a> {
    pub account_id: &'a str,
    pub agent_id: &'a str,
    pub draft_id: &'a str,
}

/// What a draft says: its title, its blocks and its metadata.
#[derive(Clone, Copy)]
pub struct DraftText<'a> {
    pub title: &'a str,
    pub content: &'a [Value],
    pub metadata: &'a [(String, Value)],
}

/// `?1`…`?11` of a draft's INSERT and UPDATE: the key, the text, the
/// placement and the time.
fn row_params(key: DraftKey, text: DraftText, placement: &Placement, now: i64) -> Vec<SqlValue> {
    vec![
        key.draft_id.into(),
        key.account_id.into(),
        key.agent_id.into(),
        text.title.into(),
        Value::Array(text.content.to_vec()).to_string().into(),
        pairs_text(text.metadata).into(),
        opt(&placement.edit_target),
        opt(&placement.location_target),
        opt(&placement.path_name),
        opt(&placement.visibility),
        now.into(),
    ]
}

fn pairs_text(metadata: &[(String, Value)]) -> String {
    let list: Vec<Value> = metadata
        .iter()
        .map(|(k, v)| Value::Array(vec![Value::String(k.clone()), v.clone()]))
        .collect();
    Value::Array(list).to_string()
}

fn decode(mut row: Row) -> Result<Draft, DbError> {
    let content: Vec<Value> = serde_json::from_str(&row.text(2)?).unwrap_or_default();
    let pairs: Vec<(String, Value)> = serde_json::from_str(&row.text(3)?).unwrap_or_default();
    Ok(Draft {
        draft_id: row.text(0)?,
        title: row.text(1)?,
        content,
        metadata: pairs,
        edit_target: row.opt_text(4)?,
        location_target: row.opt_text(5)?,
        path_name: row.opt_text(6)?,
        visibility: row.opt_text(7)?,
        status: row.text(8)?,
        created_at_ms: row.int(9)?,
        updated_at_ms: row.int(10)?,
    })
}

/// The statement that deletes an agent's drafts, for the transaction that
/// deletes the agent.
pub(crate) fn delete_agent_drafts_statement(agent_id: &str) -> Statement {
    Statement::new(
        format!("DELETE FROM {DRAFTS} WHERE agent_id = ?1"),
        vec![agent_id.into()],
    )
}

/// The drafts table.
#[derive(Clone)]
pub struct DraftStore {
    db: SharedDatabase,
}

impl DraftStore {
    pub fn new(db: SharedDatabase) -> DraftStore {
        DraftStore { db }
    }

    /// Keeps a new draft; `false` when the agent has as many as it may.
    pub async fn create(
        &self,
        key: DraftKey<'_>,
        text: DraftText<'_>,
        placement: &Placement,
        now: i64,
    ) -> Result<bool, DbError> {
        let mut params = row_params(key, text, placement, now);
        params.push((MAX_DRAFTS_PER_AGENT as i64).into());
        let rows = self
            .db
            .transaction(vec![Statement::new(
                format!(
                    "INSERT INTO {DRAFTS} (draft_id, account_id, agent_id, title, content_json, \
                       metadata_json, edit_target, location_target, path_name, visibility, \
                       status, created_at_ms, updated_at_ms) \
                     SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 'idle', ?11, ?11 \
                     WHERE (SELECT COUNT(*) FROM {DRAFTS} \
                            WHERE account_id = ?2 AND agent_id = ?3) < ?12"
                ),
                params,
            )])
            .await?;
        Ok(rows.first().map(|r| r.changes) == Some(1))
    }

    pub async fn get(
        &self,
        account_id: &str,
        agent_id: &str,
        draft_id: &str,
    ) -> Result<Option<Draft>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM {DRAFTS} \
                     WHERE draft_id = ?1 AND account_id = ?2 AND agent_id = ?3"
                ),
                vec![draft_id.into(), account_id.into(), agent_id.into()],
            )
            .await?;
        Row::optional(rows, DRAFTS, WIDTH)?.map(decode).transpose()
    }

    /// Replaces a draft's title, content and metadata; its placement only
    /// where `placement` gives one.
    pub async fn update(
        &self,
        key: DraftKey<'_>,
        text: DraftText<'_>,
        placement: &Placement,
        now: i64,
    ) -> Result<bool, DbError> {
        let params = row_params(key, text, placement, now);
        let rows = self
            .db
            .transaction(vec![Statement::new(
                format!(
                    "UPDATE {DRAFTS} SET title = ?4, content_json = ?5, metadata_json = ?6, \
                       edit_target = COALESCE(?7, edit_target), \
                       location_target = COALESCE(?8, location_target), \
                       path_name = COALESCE(?9, path_name), \
                       visibility = COALESCE(?10, visibility), \
                       updated_at_ms = max(updated_at_ms, ?11) \
                     WHERE draft_id = ?1 AND account_id = ?2 AND agent_id = ?3"
                ),
                params,
            )])
            .await?;
        Ok(rows.first().map(|r| r.changes) == Some(1))
    }

    /// The agent's drafts, most recently changed first.
    pub async fn list(
        &self,
        account_id: &str,
        agent_id: &str,
        limit: u64,
    ) -> Result<Vec<Draft>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM {DRAFTS} WHERE account_id = ?1 AND agent_id = ?2 \
                     ORDER BY updated_at_ms DESC, draft_id LIMIT ?3"
                ),
                vec![account_id.into(), agent_id.into(), (limit as i64).into()],
            )
            .await?;
        Row::all(rows, DRAFTS, WIDTH, decode)
    }

    /// `false` when there was no such draft.
    pub async fn delete(
        &self,
        account_id: &str,
        agent_id: &str,
        draft_id: &str,
    ) -> Result<bool, DbError> {
        let rows = self
            .db
            .transaction(vec![Statement::new(
                format!(
                    "DELETE FROM {DRAFTS} WHERE draft_id = ?1 AND account_id = ?2 AND agent_id = ?3"
                ),
                vec![draft_id.into(), account_id.into(), agent_id.into()],
            )])
            .await?;
        Ok(rows.first().map(|r| r.changes) == Some(1))
    }

    /// Marks a draft published, with the document and version it made.
    pub async fn published(
        &self,
        draft_id: &str,
        id: Option<&str>,
        version: Option<&str>,
        now: i64,
    ) -> Result<(), DbError> {
        self.db
            .transaction(vec![Statement::new(
                format!(
                    "UPDATE {DRAFTS} SET status = 'published', published_at_ms = ?2, \
                       published_id = ?3, published_version = ?4 WHERE draft_id = ?1"
                ),
                vec![
                    draft_id.into(),
                    now.into(),
                    id.map_or(SqlValue::Null, SqlValue::from),
                    version.map_or(SqlValue::Null, SqlValue::from),
                ],
            )])
            .await
            .map(drop)
    }
}
