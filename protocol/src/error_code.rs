//! Every application error code the sidecar answers with, in one list.
//!
//! A code is the stable machine-readable reason of a failure: the host door
//! sends it as `data.code` of a -32000 error, stored prompt failures keep it
//! in their error object, and the signed API answers a session failure with
//! the same code (its own envelope and access codes are listed beside these
//! in ARCHITECTURE.md, "Signed API codes"). The
//! list is closed: a layer's error enum maps each variant to one of these,
//! and a code read back from storage that is not in the list is refused as
//! corrupt rather than passed on. ARCHITECTURE.md documents every code; a
//! test checks that it does.

macro_rules! error_codes {
    ($($(#[doc = $doc:literal])* $variant:ident => $text:literal,)*) => {
        /// A stable application error code. See the module documentation.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ErrorCode {
            $($(#[doc = $doc])* $variant,)*
        }

        impl ErrorCode {
            /// Every code, in declaration order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The code as it appears on the wire.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $text,)*
                }
            }

            /// The code for its wire text, if it is one of ours.
            pub fn parse(text: &str) -> Option<ErrorCode> {
                match text {
                    $($text => Some(ErrorCode::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

error_codes! {
    // --- Protocol -----------------------------------------------------------
    /// The client asked for a host protocol version this sidecar does not speak.
    UnsupportedProtocolVersion => "unsupported_protocol_version",
    /// A frame's declared length exceeds `limits.host.maxFrameBytes`.
    FrameTooLarge => "frame_too_large",
    /// A params member is missing, of the wrong type or out of range.
    InvalidArgument => "invalid_argument",

    // --- Sessions -----------------------------------------------------------
    /// No session has this id.
    SessionNotFound => "session_not_found",
    /// An open named an existing session with different settings.
    SessionConflict => "session_conflict",
    /// The agent id is not in the VM's agent registry.
    AgentNotFound => "agent_not_found",
    /// The session's agent is `builtin`, the builtin model agent, which this
    /// sidecar does not run yet.
    BuiltinAgentUnavailable => "builtin_agent_unavailable",
    /// A retry found no failed latest prompt whose input is still retained.
    NothingToRetry => "nothing_to_retry",
    /// The session already runs a prompt.
    SessionBusy => "session_busy",
    /// A prompt with this idempotency key is still running.
    PromptInProgress => "prompt_in_progress",
    /// An idempotency key was reused with different content.
    IdempotencyConflict => "idempotency_conflict",
    /// An idempotency key is empty or longer than 256 bytes.
    InvalidIdempotencyKey => "invalid_idempotency_key",
    /// A prompt content block is malformed, or the prompt is empty.
    InvalidContentBlock => "invalid_content_block",
    /// `before` and `after` were both given.
    InvalidHistoryCursor => "invalid_history_cursor",
    /// The history cursor points before the oldest retained event.
    HistoryCursorExpired => "history_cursor_expired",
    /// A permission answer named an option that was not offered.
    InvalidPermissionOption => "invalid_permission_option",
    /// The restore ladder could not start the session's adapter.
    SessionRestoreFailed => "session_restore_failed",
    /// The turn failed; its stored error says why (a generic fallback).
    PromptFailed => "prompt_failed",
    /// A prompt may have reached the adapter before a crash or a lost commit;
    /// it is never resent. Retryable by the host's decision.
    PromptDeliveryUncertain => "prompt_delivery_uncertain",
    /// The adapter stopped answering mid-turn without a stop reason.
    PromptInterrupted => "prompt_interrupted",
    /// The agent answered `session/prompt` with a stop reason ACP does not name.
    InvalidStopReason => "invalid_stop_reason",
    /// A turn's history could not be committed.
    HistoryCommitFailed => "history_commit_failed",
    /// The session was deleted while the request was pending.
    SessionDeleted => "session_deleted",
    /// The sidecar is shutting down.
    VmShutdown => "vm_shutdown",
    /// A turn exceeded a bound on what an agent may produce.
    ResourceLimit => "resource_limit",

    // --- Limits (each names its setting in `data.setting`) -------------------
    /// `limits.acp.maxSessionsPerVm`.
    AcpSessionsLimit => "acp_sessions_limit",
    /// `limits.acp.maxPromptBlocks`.
    AcpPromptBlocksLimit => "acp_prompt_blocks_limit",
    /// `limits.acp.maxPromptBytes`.
    AcpPromptBytesLimit => "acp_prompt_bytes_limit",
    /// `limits.acp.maxPromptsPerSession`.
    AcpPromptsPerSessionLimit => "acp_prompts_per_session_limit",
    /// `limits.acp.maxPromptsPerVm`.
    AcpPromptsPerVmLimit => "acp_prompts_per_vm_limit",
    /// `limits.acp.maxPendingPermissionsPerSession`.
    AcpPendingPermissionsPerSessionLimit => "acp_pending_permissions_per_session_limit",
    /// `limits.acp.maxPendingPermissionsPerVm`.
    AcpPendingPermissionsPerVmLimit => "acp_pending_permissions_per_vm_limit",
    /// `limits.acp.maxSessionHistoryEvents` (one turn cannot fit).
    AcpHistoryEventsLimit => "acp_history_events_limit",
    /// `limits.acp.maxSessionHistoryBytes` (one turn cannot fit).
    AcpHistoryBytesLimit => "acp_history_bytes_limit",
    /// `limits.acp.maxSessionListEntries`.
    SessionListLimit => "session_list_limit",
    /// `limits.acp.maxHistoryPageEntries`.
    HistoryLimit => "history_limit",
    /// `limits.host.maxSubscriptionsPerConnection`.
    SubscriptionsLimit => "subscriptions_limit",
    /// `limits.host.maxInboundBytes`: the requests being served hold all of
    /// it; a small request is refused rather than waited for.
    HostInboundLimit => "host_inbound_limit",

    // --- Control plane (agents, collaborators, signers, secrets) -------------
    /// A control-plane collection is full; `data.setting` names the limit
    /// (`limits.control.*`).
    ControlLimit => "control_limit",
    /// The control-plane record named (an account's agent, collaborator,
    /// session link) does not exist, or the caller may not know it does.
    ControlNotFound => "control_not_found",
    /// The control plane refused the operation (for example a delegation
    /// shown by a signer the account revoked).
    ControlForbidden => "control_forbidden",
    /// A duplicate control-plane record, or an idempotency key reused with a
    /// different request.
    ControlConflict => "control_conflict",
    /// The secrets key cannot be loaded or does not open a stored secret.
    SecretsKeyError => "secrets_key_error",
    /// The VM was started without a secrets key: nothing can be sealed or
    /// opened until `secrets.keyFile` names one (`data.setting`).
    VaultLocked => "vault_locked",
    /// The control plane's storage failed (a damaged row is `corrupt_row`).
    ControlStorageError => "control_storage_error",

    // --- Runs ---------------------------------------------------------------
    /// No run has this id.
    RunNotFound => "run_not_found",
    /// A run tree is at one of its bounds; `data.setting` names the limit
    /// (`limits.runs.*`).
    RunLimit => "run_limit",
    /// A run's journal would pass its caps; `data.setting` names the cap.
    JournalCap => "journal_cap",
    /// The runs' storage failed (a damaged row is `corrupt_row`).
    RunStorageError => "run_storage_error",

    // --- Adapters -----------------------------------------------------------
    /// The adapter process could not be started.
    AdapterSpawnFailed => "adapter_spawn_failed",
    /// Reading from or writing to the adapter failed.
    AdapterIo => "adapter_io",
    /// The adapter answered a request with a JSON-RPC error.
    AdapterRpcError => "adapter_rpc_error",
    /// The adapter did not answer in time.
    AdapterTimeout => "adapter_timeout",
    /// The adapter process exited.
    AdapterExited => "adapter_exited",
    /// The adapter wrote a line over `limits.acp.maxReadLineBytes`.
    AdapterLineTooLong => "adapter_line_too_long",
    /// The adapter wrote a line that is not JSON.
    AdapterInvalidJson => "adapter_invalid_json",
    /// The connection to the adapter was closed by the sidecar.
    AdapterClosed => "adapter_closed",
    /// The adapter broke the ACP protocol (missing or malformed members).
    AcpProtocolError => "acp_protocol_error",
    /// The request reached a route as it ended; the service retries it on a
    /// new one and it is seen only when that fails too.
    AdapterRouteEnded => "adapter_route_ended",

    // --- Storage --------------------------------------------------------------
    /// A result exceeded `limits.sqlite.maxResultBytes`.
    SqliteResultLimit => "sqlite_result_limit",
    /// The database handle is closed.
    SessionStorageUnavailable => "session_storage_unavailable",
    /// The connection was lost after a commit was sent; retrying with the same
    /// idempotency key tells whether it landed.
    CommitOutcomeUnknown => "commit_outcome_unknown",
    /// A row read back does not have the shape its table guarantees.
    CorruptRow => "corrupt_row",
    /// Any other storage failure.
    SessionStorageError => "session_storage_error",

    // --- File system (errno names) ------------------------------------------
    /// No such file or directory.
    Enoent => "ENOENT",
    /// The name exists already.
    Eexist => "EEXIST",
    /// A path component is not a directory.
    Enotdir => "ENOTDIR",
    /// The path is a directory.
    Eisdir => "EISDIR",
    /// The directory is not empty.
    Enotempty => "ENOTEMPTY",
    /// An invalid argument (for example a rename into its own subtree).
    Einval => "EINVAL",
    /// Too many symbolic links.
    Eloop => "ELOOP",
    /// A name or path is too long.
    Enametoolong => "ENAMETOOLONG",
    /// A rename across roots.
    Exdev => "EXDEV",
    /// The path is in a read-only subtree.
    Erofs => "EROFS",
    /// The path is outside what the caller may reach.
    Eacces => "EACCES",
    /// The operation is not permitted on this entry.
    Eperm => "EPERM",
    /// A file exceeds `limits.fs.maxFileBytes`.
    Efbig => "EFBIG",
    /// The file system is at one of its `limits.fs` bounds.
    Enospc => "ENOSPC",
    /// A concurrent change won; try again.
    Eagain => "EAGAIN",
    /// Storage failed or a stored file is damaged.
    Eio => "EIO",
    /// The configuration is invalid.
    InvalidConfig => "invalid_config",
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_code_is_unique_and_round_trips() {
        let mut seen = HashSet::new();
        for code in ErrorCode::ALL {
            let text = code.as_str();
            assert!(seen.insert(text), "{text} is listed twice");
            assert_eq!(ErrorCode::parse(text), Some(*code));
            let errno = text.starts_with('E') && text.bytes().all(|b| b.is_ascii_uppercase());
            let snake = text
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            assert!(
                errno || snake,
                "{text} is neither snake_case nor an errno name"
            );
        }
        assert_eq!(ErrorCode::parse("no_such_code"), None);
    }

    #[test]
    fn architecture_documents_every_code() {
        let doc = include_str!("../../ARCHITECTURE.md");
        let missing: Vec<&str> = ErrorCode::ALL
            .iter()
            .map(|c| c.as_str())
            .filter(|text| !doc.contains(&format!("`{text}`")))
            .collect();
        assert!(
            missing.is_empty(),
            "ARCHITECTURE.md does not document: {missing:?}"
        );
    }
}
