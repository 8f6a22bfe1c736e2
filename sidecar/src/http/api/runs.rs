//! Seed runs: `GetRun`, `ListRuns` (exactly one of a tree, a session or an
//! agent), `CancelRun`, `SignalRun` and `GetRunJournal`. A run is reached
//! through its agent (read access to look, write access to cancel or
//! signal) or, for a run of no agent, by being its account; anything else
//! is `not_found`, like a run that does not exist.

use agentos_protocol::seed::response::{
    CancelRunResponse, GetRunJournalResponse, GetRunResponse, ListRunsResponse,
    RunJournalEntryInfo, SignalRunResponse,
};
use agentos_protocol::seed::{ipld_to_json, json_to_ipld_clipped, JsonForm};
use agentos_protocol::seed::{Action, ApiCode};
use serde_json::Value;

use super::{ok, render, ApiError, Caller, SignedApi};
use crate::control::{authz, AccessRole};
use crate::runs::{JournalPage, Named, Run, RunError, RunScope};

/// A request that breaks a runs rule, named after its action.
fn refused(action: &'static str) -> impl Fn(RunError) -> ApiError {
    move |e| match e {
        RunError::InvalidArgument(message) => {
            ApiError::bad_request(ApiCode::BadRequest, format!("{action}: {message}"))
        }
        other => other.into(),
    }
}

impl SignedApi {
    /// The run, when `caller` has `needed` access to it.
    async fn authorized_run(
        &self,
        caller: &Caller,
        run_id: &str,
        needed: AccessRole,
    ) -> Result<Run, ApiError> {
        let run = self.turns.runs().get(run_id).await?;
        authz::require_run(
            &self.control,
            &caller.account,
            run_id,
            run.agent_id.as_deref(),
            run.account_id.as_deref(),
            needed,
        )
        .await?;
        Ok(run)
    }

    pub(super) async fn run_action(
        &self,
        caller: &Caller,
        action: Action,
    ) -> Result<Vec<u8>, ApiError> {
        let runs = self.turns.runs();
        match action {
            Action::GetRun { run_id } => {
                let run = self
                    .authorized_run(caller, &run_id, AccessRole::Reader)
                    .await?;
                ok(&GetRunResponse {
                    run: render::run(&run),
                })
            }
            Action::ListRuns {
                root_run_id,
                session_id,
                agent_id,
                status,
                limit,
            } => {
                let status = RunScope::status(status.as_deref()).map_err(refused("ListRuns"))?;
                // Each scope is reached through what it names: the tree
                // through its run, a session or an agent with read access.
                let named = RunScope::named(root_run_id, session_id, agent_id)
                    .map_err(refused("ListRuns"))?;
                let scope = match named {
                    Named::Tree(run_id) => RunScope::tree_of(
                        &self
                            .authorized_run(caller, &run_id, AccessRole::Reader)
                            .await?,
                    ),
                    Named::Session(session_id) => {
                        authz::require_session(
                            &self.control,
                            &caller.account,
                            &session_id,
                            AccessRole::Reader,
                        )
                        .await?;
                        RunScope::Session(session_id)
                    }
                    Named::Agent(agent_id) => {
                        authz::require_read(&self.control, &caller.account, &agent_id).await?;
                        RunScope::Agent(agent_id)
                    }
                };
                let found = runs.list(&scope, status, limit).await?;
                ok(&ListRunsResponse {
                    runs: found.iter().map(render::run).collect(),
                })
            }
            Action::CancelRun { run_id } => {
                self.authorized_run(caller, &run_id, AccessRole::Writer)
                    .await?;
                let canceled = runs.cancel(&run_id).await?;
                ok(&CancelRunResponse { run_id, canceled })
            }
            Action::SignalRun {
                run_id,
                signal,
                payload,
            } => {
                let payload = match &payload {
                    Some(ipld) => ipld_to_json(ipld, JsonForm::Plain).map_err(|e| {
                        ApiError::bad_request(
                            ApiCode::BadRequest,
                            format!("SignalRun: the payload cannot be kept as JSON: {e}"),
                        )
                    })?,
                    None => Value::Null,
                };
                self.authorized_run(caller, &run_id, AccessRole::Writer)
                    .await?;
                let delivered = runs.signal(&run_id, &signal, &payload).await?;
                ok(&SignalRunResponse { run_id, delivered })
            }
            Action::GetRunJournal { run_id, after_seq } => {
                let page = JournalPage::new(after_seq, None).map_err(refused("GetRunJournal"))?;
                let run = self
                    .authorized_run(caller, &run_id, AccessRole::Reader)
                    .await?;
                let entries = runs.journal_page(&run, page).await?;
                ok(&GetRunJournalResponse {
                    run_id,
                    entries: entries
                        .iter()
                        .map(|e| RunJournalEntryInfo {
                            run_id: e.run_id.clone(),
                            seq: e.seq,
                            entry: json_to_ipld_clipped(&e.entry),
                            created_at: e.created_at_ms,
                        })
                        .collect(),
                })
            }
            other => Err(ApiError::bad_request(
                ApiCode::UnsupportedAction,
                format!("the action {} is not a run action", other.name()),
            )),
        }
    }
}
