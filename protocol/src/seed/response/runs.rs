//! The runs' records as a Seed client reads them: `RunInfo` (a run of the
//! tree, its wait, error and usage), journal entries, and the five run
//! responses. Opaque documents (a plan, usage, an entry) travel as IPLD.

use ipld_core::ipld::Ipld;
use serde::{Deserialize, Serialize};

/// Why a run waits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunWaitInfo {
    /// `children`, `timer`, `event` or `budget-pause`.
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_children: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_with: Option<String>,
}

/// A failed run's error.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunErrorInfo {
    pub code: String,
    pub message: String,
}

/// One run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunInfo {
    pub id: String,
    pub account: String,
    pub root_run_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continued_from_run_id: Option<String>,
    pub depth: u32,
    /// `agent` or `workflow`.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// `user`, `trigger`, `agent`, `workflow` or `system`.
    pub origin: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_step_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_run_count: Option<u64>,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<RunWaitInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<Ipld>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunErrorInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unmet_obligations: Option<Ipld>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Ipld>,
    pub created_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<i64>,
    pub updated_at: i64,
}

/// One durable entry of a run's journal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunJournalEntryInfo {
    pub run_id: String,
    pub seq: u64,
    pub entry: Ipld,
    pub created_at: i64,
}
