//! Host `runs/*` methods → the runs service: `get`, `list` (exactly one of
//! a tree, a session or an agent), `cancel`, `signal` and `journal`, with
//! the signed door's bounds. The host socket is trusted, so no account is
//! checked; a run that does not exist is `run_not_found`.

use std::sync::Arc;

use agentos_protocol::host::{
    self as wire, methods, ErrorObject, ListRunsParams, RunIdParams, RunJournalParams,
    SignalRunParams,
};
use serde_json::{value::RawValue, Value};

use super::codec::{params, reply};
use super::render::{self, run_error_object};
use crate::runs::{RunError, RunScope, RunStatus};
use crate::vm::Vm;

/// Journal entries one `runs/journal` answers at most (and by default).
pub(super) const JOURNAL_PAGE: u64 = 1_000;

fn runs_error(e: RunError) -> ErrorObject {
    run_error_object(&e)
}

fn invalid(message: impl Into<String>) -> ErrorObject {
    ErrorObject::invalid_params(message)
}

/// The listing's scope: exactly one member names it. A tree may be named
/// by any of its runs.
async fn scope(vm: &Vm, p: &ListRunsParams) -> Result<RunScope, ErrorObject> {
    match (&p.root_run_id, &p.session_id, &p.agent_id) {
        (Some(root), None, None) => {
            let run = vm.runs.get(root).await.map_err(runs_error)?;
            Ok(RunScope::Root(run.root_run_id))
        }
        (None, Some(session_id), None) => Ok(RunScope::Session(session_id.clone())),
        (None, None, Some(agent_id)) => Ok(RunScope::Agent(agent_id.clone())),
        _ => Err(invalid(
            "runs/list: give exactly one of rootRunId, sessionId and agentId",
        )),
    }
}

pub(super) async fn dispatch(
    vm: &Arc<Vm>,
    method: &str,
    raw: Value,
) -> Result<Box<RawValue>, ErrorObject> {
    let runs = &vm.runs;
    match method {
        methods::RUNS_GET => {
            let p: RunIdParams = params(raw)?;
            let run = runs.get(&p.run_id).await.map_err(runs_error)?;
            reply(&wire::GetRunResult {
                run: render::run(&run),
            })
        }
        methods::RUNS_LIST => {
            let p: ListRunsParams = params(raw)?;
            let status = match p.status.as_deref() {
                None => None,
                Some(text) => Some(RunStatus::parse(text).ok_or_else(|| {
                    invalid(format!("runs/list: status {text:?} is not a run status"))
                })?),
            };
            let scope = scope(vm, &p).await?;
            let found = runs
                .list(&scope, status, p.limit)
                .await
                .map_err(runs_error)?;
            reply(&wire::ListRunsResult {
                runs: found.iter().map(render::run).collect(),
            })
        }
        methods::RUNS_CANCEL => {
            let p: RunIdParams = params(raw)?;
            let canceled = runs.cancel(&p.run_id).await.map_err(runs_error)?;
            reply(&wire::CancelRunResult {
                run_id: p.run_id,
                canceled,
            })
        }
        methods::RUNS_SIGNAL => {
            let p: SignalRunParams = params(raw)?;
            let payload = p.payload.unwrap_or(Value::Null);
            let delivered = runs
                .signal(&p.run_id, &p.signal, &payload)
                .await
                .map_err(runs_error)?;
            reply(&wire::SignalRunResult {
                run_id: p.run_id,
                delivered,
            })
        }
        methods::RUNS_JOURNAL => {
            let p: RunJournalParams = params(raw)?;
            let limit = match p.limit {
                Some(0) => return Err(invalid("runs/journal: limit must be at least 1")),
                Some(n) => n.min(JOURNAL_PAGE),
                None => JOURNAL_PAGE,
            };
            // The journal of a run that does not exist is not empty: it is
            // not found.
            runs.get(&p.run_id).await.map_err(runs_error)?;
            let entries = runs
                .journal(&p.run_id, p.after_seq.unwrap_or(0), limit)
                .await
                .map_err(runs_error)?;
            reply(&wire::RunJournalResult {
                run_id: p.run_id,
                entries: entries.iter().map(render::journal_entry).collect(),
            })
        }
        other => Err(ErrorObject::method_not_found(other)),
    }
}
