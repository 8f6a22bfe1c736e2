//! Host `runs/*` methods → the runs service: `get`, `list` (exactly one of
//! a tree, a session or an agent), `cancel`, `signal` and `journal`, with
//! the signed door's bounds. The host socket is trusted, so no account is
//! checked; a run that does not exist is `run_not_found`.

use agentos_protocol::host::{
    self as wire, methods, ErrorObject, ListRunsParams, RunIdParams, RunJournalParams,
    SignalRunParams,
};
use serde_json::{value::RawValue, Value};

use super::codec::{params, reply};
use super::render::{self, run_error_object};
use crate::runs::{JournalPage, Named, RunError, RunScope, Runs};

fn runs_error(e: RunError) -> ErrorObject {
    run_error_object(&e)
}

/// A request that breaks a runs rule, named after its method.
fn refused(method: &'static str) -> impl Fn(RunError) -> ErrorObject {
    move |e| match e {
        RunError::InvalidArgument(message) => {
            ErrorObject::invalid_params(format!("{method}: {message}"))
        }
        other => runs_error(other),
    }
}

/// The listing's scope (`RunScope::named`); the host socket is trusted, so
/// nothing is authorized.
async fn scope(runs: &Runs, p: &ListRunsParams) -> Result<RunScope, ErrorObject> {
    let named = RunScope::named(
        p.root_run_id.clone(),
        p.session_id.clone(),
        p.agent_id.clone(),
    )
    .map_err(refused(methods::RUNS_LIST))?;
    Ok(match named {
        Named::Tree(run_id) => RunScope::tree_of(&runs.get(&run_id).await.map_err(runs_error)?),
        Named::Session(session_id) => RunScope::Session(session_id),
        Named::Agent(agent_id) => RunScope::Agent(agent_id),
    })
}

pub(super) async fn dispatch(
    runs: &Runs,
    method: &str,
    raw: Value,
) -> Result<Box<RawValue>, ErrorObject> {
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
            let status =
                RunScope::status(p.status.as_deref()).map_err(refused(methods::RUNS_LIST))?;
            let scope = scope(runs, &p).await?;
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
            let page =
                JournalPage::new(p.after_seq, p.limit).map_err(refused(methods::RUNS_JOURNAL))?;
            let run = runs.get(&p.run_id).await.map_err(runs_error)?;
            let entries = runs.journal_page(&run, page).await.map_err(runs_error)?;
            reply(&wire::RunJournalResult {
                run_id: p.run_id,
                entries: entries.iter().map(render::journal_entry).collect(),
            })
        }
        other => Err(ErrorObject::method_not_found(other)),
    }
}
