//! The session service's and the runs service's domain values and errors,
//! and the control plane's errors, in the host protocol's wire form
//! (`protocol::host`). The only place the host door turns a domain value or
//! error into its wire shape.

use agentos_protocol::host::{self as wire, rfc3339_ms, ErrorObject};
use agentos_protocol::ErrorCode;
use serde_json::{json, Map};

use crate::control::ControlError;
use crate::doors::runs;
use crate::runs::{JournalRow, Run, RunError};
use crate::sessions::{
    LimitUse, PermissionAnswer, PromptOutcome, SessionError, SessionInfo, SessionPage,
    SessionState, Usage, VmStatus,
};
use agentos_vfs::FsError;

pub(super) fn session_info(info: &SessionInfo) -> wire::SessionInfo {
    wire::SessionInfo {
        session_id: info.session_id.clone(),
        agent: info.agent.clone(),
        cwd: info.cwd.clone(),
        additional_directories: info.additional_directories.clone(),
        permission_policy: info.permission_policy,
        state: session_state(&info.state),
        latest_sequence: info.latest_sequence,
        oldest_retained_sequence: info.oldest_retained_sequence,
        retained_events: info.retained_event_count,
        retained_bytes: info.retained_event_bytes,
        title: info.title.clone(),
        metadata: info.metadata.clone(),
        created_at: rfc3339_ms(info.created_at_ms),
        updated_at: rfc3339_ms(info.updated_at_ms),
    }
}

fn session_state(state: &SessionState) -> wire::SessionState {
    match state {
        SessionState::Idle => wire::SessionState::Idle,
        SessionState::Running {
            prompt_id,
            started_at_ms,
        } => wire::SessionState::Running {
            prompt_id: prompt_id.clone(),
            started_at: started_at_ms.map(rfc3339_ms),
        },
        SessionState::Waiting {
            prompt_id,
            since_ms,
            requests,
        } => wire::SessionState::Waiting {
            prompt_id: prompt_id.clone(),
            waiting_since: since_ms.map(rfc3339_ms),
            requests: requests.clone(),
        },
        SessionState::Failed { error } => wire::SessionState::Failed {
            error: error.clone(),
        },
    }
}

pub(super) fn session_page(page: &SessionPage) -> wire::SessionPage {
    wire::SessionPage {
        sessions: page.sessions.iter().map(session_info).collect(),
        next_cursor: page.next_cursor.clone(),
    }
}

pub(super) fn prompt_result(outcome: PromptOutcome) -> wire::PromptResult {
    wire::PromptResult {
        stop_reason: outcome.stop_reason,
        message: wire::AgentMessage {
            id: outcome.message.id,
            role: outcome.message.role,
            content: outcome.message.content,
        },
        session_id: outcome.session_id,
        prompt_id: outcome.prompt_id,
    }
}

pub(super) fn permission_answer(answer: PermissionAnswer) -> wire::RespondPermissionResult {
    match answer {
        PermissionAnswer::Accepted => wire::RespondPermissionResult::Accepted,
        PermissionAnswer::NotPending(reason) => {
            wire::RespondPermissionResult::NotPending { reason }
        }
    }
}

fn usage(usage: &Usage) -> wire::Usage {
    wire::Usage {
        used: usage.used,
        limit: usage.limit,
        setting: usage.setting.to_owned(),
        near_limit: usage.near_limit(),
    }
}

fn limit_status(limit: &LimitUse) -> wire::LimitStatus {
    wire::LimitStatus {
        setting: limit.setting.to_owned(),
        limit: limit.limit,
        used: limit.used,
        near_limit: limit.near_limit(),
    }
}

/// `vm/status`: the session domain's status plus `others`, the limits
/// outside `limits.acp` (with the file system's use where known).
pub(super) fn vm_status(
    status: &VmStatus,
    others: &[LimitUse],
    database: &str,
    uptime_ms: u64,
    confinement: wire::ConfinementInfo,
    vault_locked: bool,
) -> wire::VmStatus {
    wire::VmStatus {
        limits: status
            .limits
            .iter()
            .chain(others)
            .map(limit_status)
            .collect(),
        sessions: usage(&status.sessions),
        prompts: usage(&status.prompts),
        pending_permissions: usage(&status.pending_permissions),
        permission_outcomes: usage(&status.permission_outcomes),
        live_adapters: status.live_adapters,
        keep_awake_holders: status.keep_awake_holders,
        database: wire::DatabaseInfo {
            kind: database.to_owned(),
        },
        uptime_ms,
        confinement,
        memory: wire::MemoryStatus {
            host_queued_bytes: status.memory.host_queued_bytes,
            host_notices_dropped: status.memory.host_notices_dropped,
            host_connections_closed_stalled: status.memory.host_connections_closed_stalled,
            agent_stderr_dropped_bytes: status.memory.agent_stderr_dropped_bytes,
        },
        secrets: wire::SecretsStatus {
            locked: vault_locked,
            setting: "secrets.keyFile".into(),
        },
    }
}

/// The JSON-RPC error for a session-layer error.
pub fn error_object(e: &SessionError) -> ErrorObject {
    let mut extra = Map::new();
    if let Some(setting) = e.setting() {
        extra.insert("setting".into(), json!(setting));
    }
    match e {
        SessionError::HistoryCursorExpired { earliest } => {
            extra.insert("earliestAvailableSequence".into(), json!(earliest));
        }
        SessionError::Limit { used, limit, .. } => {
            extra.insert("used".into(), json!(used));
            extra.insert("limit".into(), json!(limit));
        }
        SessionError::PromptFailed { error } => {
            if let Some(obj) = error.as_object() {
                for (k, v) in obj {
                    if k != "code" {
                        extra.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        SessionError::InvalidArgument(_) => {
            return ErrorObject::invalid_params(e.to_string());
        }
        _ => {}
    }
    ErrorObject::application(e.code(), e.to_string(), extra)
}

/// The JSON-RPC error for a file-system error: `data.code` is the errno name.
pub fn fs_error_object(e: &FsError) -> ErrorObject {
    let mut extra = Map::new();
    if let Some(setting) = e.setting() {
        extra.insert("setting".into(), json!(setting));
    }
    ErrorObject::application(e.code(), e.to_string(), extra)
}

/// The JSON-RPC error for a control-plane error (the `signers/*` methods).
/// A bad argument is `invalid_params`, as for every other method.
pub fn control_error_object(e: &ControlError) -> ErrorObject {
    let mut extra = Map::new();
    let code = match e {
        ControlError::InvalidArgument(_) | ControlError::SecretTooLarge { .. } => {
            return ErrorObject::invalid_params(e.to_string());
        }
        ControlError::Limit { setting, limit } => {
            extra.insert("setting".into(), json!(setting));
            extra.insert("limit".into(), json!(limit));
            ErrorCode::ControlLimit
        }
        ControlError::NotFound(_) => ErrorCode::ControlNotFound,
        ControlError::Forbidden(_) => ErrorCode::ControlForbidden,
        ControlError::Conflict(_) => ErrorCode::ControlConflict,
        ControlError::SecretKey(_) | ControlError::SecretUnreadable(_) => {
            ErrorCode::SecretsKeyError
        }
        ControlError::VaultLocked => {
            extra.insert("setting".into(), json!("secrets.keyFile"));
            ErrorCode::VaultLocked
        }
        ControlError::CorruptRow { .. } => ErrorCode::CorruptRow,
        ControlError::Storage(_) => ErrorCode::ControlStorageError,
    };
    ErrorObject::application(code, e.to_string(), extra)
}

/// A run row as the host sees it: the fields both doors show
/// (`doors::runs`) with RFC 3339 times, and the row's queue, attempts,
/// input, output and whole stored error besides (the socket is trusted).
pub(super) fn run(run: &Run) -> wire::RunInfo {
    let f = runs::fields(run, rfc3339_ms);
    wire::RunInfo {
        id: f.id,
        account: f.account,
        root_run_id: f.root_run_id,
        parent_run_id: f.parent_run_id,
        parent_tool_call_id: f.parent_tool_call_id,
        continued_from_run_id: f.continued_from_run_id,
        depth: f.depth,
        kind: f.kind.as_str().to_owned(),
        agent_id: f.agent_id,
        session_id: f.session_id,
        origin: f.origin,
        title: f.title,
        queue: run.queue.as_str().to_owned(),
        status: f.status,
        attempt: run.attempt,
        max_attempts: run.max_attempts,
        wait: f.wait.map(|w| wire::RunWaitInfo {
            reason: w.reason,
            wake_at: w.wake_at,
            pending_children: w.pending_children,
            tool_call_ids: w.tool_call_ids,
            wait_id: w.wait_id,
            label: w.label,
            answer_with: w.answer_with,
        }),
        error: run.error.clone(),
        output: run.output.clone(),
        input: (!run.input.is_null()).then(|| run.input.clone()),
        usage: f.usage,
        plan: f.plan,
        child_run_count: f.child_run_count,
        created_at: f.created_at,
        started_at: f.started_at,
        finished_at: f.finished_at,
        updated_at: f.updated_at,
    }
}

pub(super) fn journal_entry(row: &JournalRow) -> wire::RunJournalEntry {
    wire::RunJournalEntry {
        run_id: row.run_id.clone(),
        seq: row.seq,
        entry: row.entry.clone(),
        created_at: rfc3339_ms(row.created_at_ms),
    }
}

/// The JSON-RPC error for a runs-layer error. A bad argument is
/// `invalid_params`, as for every other method.
pub fn run_error_object(e: &RunError) -> ErrorObject {
    let mut extra = Map::new();
    let code = match e {
        RunError::InvalidArgument(_) => return ErrorObject::invalid_params(e.to_string()),
        RunError::NotFound(_) => ErrorCode::RunNotFound,
        RunError::Limit { setting, limit } => {
            extra.insert("setting".into(), json!(setting));
            extra.insert("limit".into(), json!(limit));
            ErrorCode::RunLimit
        }
        RunError::JournalCap { setting } => {
            extra.insert("setting".into(), json!(setting));
            ErrorCode::JournalCap
        }
        RunError::Storage(agentos_schema::DbError::CorruptRow { .. }) => ErrorCode::CorruptRow,
        RunError::Storage(_) => ErrorCode::RunStorageError,
    };
    ErrorObject::application(code, e.to_string(), extra)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data_code(e: &ControlError) -> Option<String> {
        let object = control_error_object(e);
        let data = object.data?;
        data["code"].as_str().map(str::to_owned)
    }

    #[test]
    fn control_errors_get_control_codes() {
        let limit = control_error_object(&ControlError::Limit {
            setting: "limits.control.maxSignersPerAccount",
            limit: 4,
        });
        let data = limit.data.unwrap();
        assert_eq!(data["code"], "control_limit");
        assert_eq!(data["setting"], "limits.control.maxSignersPerAccount");
        assert_eq!(data["limit"], 4);
        let cases = [
            (ControlError::NotFound("signer".into()), "control_not_found"),
            (
                ControlError::Forbidden("revoked".into()),
                "control_forbidden",
            ),
            (ControlError::Conflict("twice".into()), "control_conflict"),
            (ControlError::SecretKey("gone".into()), "secrets_key_error"),
            (ControlError::VaultLocked, "vault_locked"),
            (
                ControlError::CorruptRow {
                    table: "t".into(),
                    message: "m".into(),
                },
                "corrupt_row",
            ),
            (
                ControlError::Storage(agentos_schema::DbError::Closed),
                "control_storage_error",
            ),
        ];
        for (e, code) in cases {
            assert_eq!(data_code(&e).as_deref(), Some(code), "{e}");
        }
        let bad = control_error_object(&ControlError::InvalidArgument("signer".into()));
        assert_eq!(bad.code, agentos_protocol::host::codes::INVALID_PARAMS);
        assert_eq!(bad.data, None);
    }

    #[test]
    fn run_errors_keep_the_runs_codes() {
        let cases = [
            RunError::NotFound("r".into()),
            RunError::Limit {
                setting: "limits.runs.maxDepth",
                limit: 3,
            },
            RunError::JournalCap {
                setting: "limits.runs.maxJournalEntries",
            },
            RunError::Storage(agentos_schema::DbError::Closed),
        ];
        for e in cases {
            let object = run_error_object(&e);
            assert_eq!(object.data_code(), Some(e.code()), "{e}");
            if let Some(setting) = e.setting() {
                let data = object.data.clone().unwrap();
                assert_eq!(data["setting"], setting);
            }
        }
        let bad = run_error_object(&RunError::InvalidArgument("scope".into()));
        assert_eq!(bad.code, agentos_protocol::host::codes::INVALID_PARAMS);
        assert_eq!(bad.data, None);
    }

    /// The host's `RunInfo` is a public wire shape: these are its bytes.
    #[test]
    fn runs_keep_their_wire_shape() {
        let expected = [
            r#"{"id":"r2","account":"z6Mk","rootRunId":"r1","parentRunId":"r1","parentToolCallId":"t1","continuedFromRunId":"r0","depth":1,"kind":"agent","agentId":"a1","sessionId":"s1","origin":"agent","title":"child","queue":"background","status":"waiting","attempt":2,"maxAttempts":3,"wait":{"reason":"children","wakeAt":"2023-11-14T22:15:23.456Z","pendingChildren":2,"toolCallIds":["t2","t3"],"waitId":"w1","label":"children","answerWith":"go"},"error":{"code":"boom","message":"it broke","retryable":true},"output":{"text":"done"},"input":{"words":"go"},"usage":{"input":10,"output":2},"plan":{"steps":[{"id":"p1","status":"pending"}]},"childRunCount":2,"createdAt":"2023-11-14T22:13:20.000Z","startedAt":"2023-11-14T22:13:20.500Z","finishedAt":"2023-11-14T22:13:21.000Z","updatedAt":"2023-11-14T22:13:22.000Z"}"#,
            r#"{"id":"r3","rootRunId":"r3","depth":0,"kind":"script","origin":"system","queue":"interactive","status":"queued","attempt":0,"maxAttempts":1,"childRunCount":0,"createdAt":"1970-01-01T00:00:00.000Z","updatedAt":"1970-01-01T00:00:00.001Z"}"#,
            r#"{"id":"r2","account":"z6Mk","rootRunId":"r1","parentRunId":"r1","parentToolCallId":"t1","continuedFromRunId":"r0","depth":1,"kind":"script","agentId":"a1","sessionId":"s1","origin":"agent","title":"child","queue":"background","status":"failed","attempt":2,"maxAttempts":3,"wait":{"reason":"children","wakeAt":"2023-11-14T22:15:23.456Z","pendingChildren":2,"toolCallIds":["t2","t3"],"waitId":"w1","label":"children","answerWith":"go"},"error":{"code":"boom","message":"it broke","retryable":true},"output":{"text":"done"},"input":{"words":"go"},"usage":{"input":10,"output":2},"plan":{"steps":[{"id":"p1","status":"pending"}]},"childRunCount":2,"createdAt":"2023-11-14T22:13:20.000Z","startedAt":"2023-11-14T22:13:20.500Z","finishedAt":"2023-11-14T22:13:21.000Z","updatedAt":"2023-11-14T22:13:22.000Z"}"#,
            r#"{"id":"r2","account":"z6Mk","rootRunId":"r1","parentRunId":"r1","parentToolCallId":"t1","continuedFromRunId":"r0","depth":1,"kind":"agent","agentId":"a1","sessionId":"s1","origin":"agent","title":"child","queue":"background","status":"waiting","attempt":2,"maxAttempts":3,"wait":{"reason":"timer","toolCallIds":["t2","t3"],"waitId":"w1","label":"children","answerWith":"go"},"error":{"code":"boom","message":"it broke","retryable":true},"output":{"text":"done"},"input":{"words":"go"},"usage":{"input":10,"output":2},"plan":{"steps":[{"id":"p1","status":"pending"}]},"childRunCount":2,"createdAt":"2023-11-14T22:13:20.000Z","startedAt":"2023-11-14T22:13:20.500Z","finishedAt":"2023-11-14T22:13:21.000Z","updatedAt":"2023-11-14T22:13:22.000Z"}"#,
            r#"{"id":"r2","account":"z6Mk","rootRunId":"r1","parentRunId":"r1","parentToolCallId":"t1","continuedFromRunId":"r0","depth":1,"kind":"agent","agentId":"a1","sessionId":"s1","origin":"agent","title":"child","queue":"background","status":"waiting","attempt":2,"maxAttempts":3,"wait":{"reason":"event","toolCallIds":["t2","t3"],"waitId":"w1","label":"children","answerWith":"go"},"error":{"code":"boom","message":"it broke","retryable":true},"output":{"text":"done"},"input":{"words":"go"},"usage":{"input":10,"output":2},"plan":{"steps":[{"id":"p1","status":"pending"}]},"childRunCount":2,"createdAt":"2023-11-14T22:13:20.000Z","startedAt":"2023-11-14T22:13:20.500Z","finishedAt":"2023-11-14T22:13:21.000Z","updatedAt":"2023-11-14T22:13:22.000Z"}"#,
            r#"{"id":"r2","account":"z6Mk","rootRunId":"r1","parentRunId":"r1","parentToolCallId":"t1","continuedFromRunId":"r0","depth":1,"kind":"agent","agentId":"a1","sessionId":"s1","origin":"agent","title":"child","queue":"background","status":"waiting","attempt":2,"maxAttempts":3,"wait":{"reason":"budget-pause","toolCallIds":["t2","t3"],"waitId":"w1","label":"children","answerWith":"go"},"error":{"code":"boom","message":"it broke","retryable":true},"output":{"text":"done"},"input":{"words":"go"},"usage":{"input":10,"output":2},"plan":{"steps":[{"id":"p1","status":"pending"}]},"childRunCount":2,"createdAt":"2023-11-14T22:13:20.000Z","startedAt":"2023-11-14T22:13:20.500Z","finishedAt":"2023-11-14T22:13:21.000Z","updatedAt":"2023-11-14T22:13:22.000Z"}"#,
        ];
        let samples = crate::doors::runs::samples();
        assert_eq!(samples.len(), expected.len());
        for (run, expected) in samples.iter().zip(expected) {
            assert_eq!(serde_json::to_string(&super::run(run)).unwrap(), expected);
        }
    }
}
