//! What each action answers: one struct per response, written as canonical
//! DAG-CBOR with its name under `_` (`{_: "ListAgentsResponse", agents}`)
//! and absent fields left out. Errors are [`ErrorResponse`], `{_: "Error",
//! message, code}`.
//!
//! Reading a response back does not check `_`; a client tells an error from
//! a success by the HTTP status, then decodes the type it expects.

mod mcp;
mod runs;
mod shapes;
mod space;

use ipld_core::ipld::Ipld;
use serde::{Deserialize, Serialize};

pub use self::mcp::{McpToolInfo, RedactedMcpServer};
pub use self::runs::{RunErrorInfo, RunInfo, RunJournalEntryInfo, RunWaitInfo};
pub use self::shapes::{
    AgentCollaboratorInfo, AgentInfo, AgentInviteInfo, ProviderModelInfo, RedactedModelProvider,
    RedactedSecret, SessionEvent, SessionInfo, SignerInfo, SigningIdentity,
};
pub use self::space::{AgentMemoryEntry, AgentMemoryFile, AgentToolInfo, SessionAttachmentInfo};
use super::action::SessionListCursor;
use super::vocab::OAuthLoginStatus;
use super::{cbor, Role, SeedError};

/// A byte field as a CBOR byte string, not a list of numbers.
mod serde_bytes_vec {
    use ipld_core::ipld::Ipld;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(data: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(data)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        match Ipld::deserialize(deserializer)? {
            Ipld::Bytes(bytes) => Ok(bytes),
            _ => Err(serde::de::Error::custom("expected bytes")),
        }
    }
}

/// Encodes a response as canonical DAG-CBOR. A value DAG-CBOR cannot carry
/// (a NaN float inside an opaque field) turns into an encoded
/// [`ErrorResponse`] with code `encode_failed`, so an answer always goes out.
pub fn encode_response<T: Serialize>(response: &T) -> Vec<u8> {
    try_encode_response(response).unwrap_or_else(|_| ENCODE_FAILED_RESPONSE.to_vec())
}

/// Encodes a response as canonical DAG-CBOR, or says why it cannot.
pub fn try_encode_response<T: Serialize>(response: &T) -> Result<Vec<u8>, SeedError> {
    cbor::to_canonical(response)
}

/// The canonical bytes of `{_: "Error", code: "encode_failed", message:
/// "response could not be encoded"}`, spelled out so the fallback itself
/// cannot fail. A test checks them against the encoder.
const ENCODE_FAILED_RESPONSE: &[u8] =
    b"\xa3\x61_\x65Error\x64code\x6dencode_failed\x67message\x78\x1dresponse could not be encoded";

/// Declares response structs: the name under `_` and camelCase fields.
macro_rules! responses {
    ($(
        $(#[doc = $doc:literal])*
        $name:ident => $tag:literal {
            $($(#[$fmeta:meta])* $field:ident: $ty:ty,)*
        }
    )+) => {$(
        $(#[doc = $doc])*
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "_", rename = $tag, rename_all = "camelCase")]
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty,)*
        }
    )+};
}

responses! {
    /// Any failure.
    ErrorResponse => "Error" {
        message: String,
        /// A stable snake_case code; read as empty from a server that sends
        /// none.
        #[serde(default)]
        code: String,
    }

    /// `ListAgentInvites`.
    ListAgentInvitesResponse => "ListAgentInvitesResponse" {
        invites: Vec<AgentInviteInfo>,
    }
    /// `ListAgentCollaborators`: the owner first, then collaborators and
    /// pending invitations.
    ListAgentCollaboratorsResponse => "ListAgentCollaboratorsResponse" {
        agent_id: String,
        public_read: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        public_chat: Option<bool>,
        collaborators: Vec<AgentCollaboratorInfo>,
    }
    /// `InviteAgentCollaborator`.
    InviteAgentCollaboratorResponse => "InviteAgentCollaboratorResponse" {
        collaborator: AgentCollaboratorInfo,
    }
    /// `RemoveAgentCollaborator`.
    RemoveAgentCollaboratorResponse => "RemoveAgentCollaboratorResponse" {
        agent_id: String,
        account_id: String,
    }
    /// `SetAgentPublicRead`.
    SetAgentPublicReadResponse => "SetAgentPublicReadResponse" {
        agent: AgentInfo,
    }
    /// `AcceptAgentInvite`.
    AcceptAgentInviteResponse => "AcceptAgentInviteResponse" {
        agent: AgentInfo,
    }
    /// `DeclineAgentInvite`.
    DeclineAgentInviteResponse => "DeclineAgentInviteResponse" {
        agent_id: String,
    }

    /// `ListAgents`: owned agents and accepted collaborations.
    ListAgentsResponse => "ListAgentsResponse" {
        agents: Vec<AgentInfo>,
    }
    /// `CreateAgent`.
    CreateAgentResponse => "CreateAgentResponse" {
        agent_id: String,
    }
    /// `GetAgent` and `UpdateAgent`. Protocol 1 clients get `sessions`,
    /// protocol 2 clients `sessionCount`.
    GetAgentResponse => "GetAgentResponse" {
        agent: AgentInfo,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sessions: Option<Vec<SessionInfo>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session_count: Option<u64>,
    }
    /// `DeleteAgent`.
    DeleteAgentResponse => "DeleteAgentResponse" {
        agent_id: String,
    }

    /// `ListAgentTools`: builtins first, then authored tools, each by name.
    ListAgentToolsResponse => "ListAgentToolsResponse" {
        agent_id: String,
        tools: Vec<AgentToolInfo>,
        /// The MCP servers the agent may use, with what their last
        /// discovery found or why it failed (absent when it has none).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        mcp_servers: Vec<RedactedMcpServer>,
    }
    /// `SaveAgentTool`.
    SaveAgentToolResponse => "SaveAgentToolResponse" {
        agent_id: String,
        tool: AgentToolInfo,
    }
    /// `DeleteAgentTool`; `deleted` is false when there was no such tool.
    DeleteAgentToolResponse => "DeleteAgentToolResponse" {
        agent_id: String,
        name: String,
        deleted: bool,
    }
    /// `ListAgentMemory`: every file and directory, by path.
    ListAgentMemoryResponse => "ListAgentMemoryResponse" {
        agent_id: String,
        entries: Vec<AgentMemoryEntry>,
        /// Bytes of every file together.
        total_bytes: u64,
    }
    /// `ReadAgentMemoryFile`.
    ReadAgentMemoryFileResponse => "ReadAgentMemoryFileResponse" {
        agent_id: String,
        file: AgentMemoryFile,
    }
    /// `WriteAgentMemoryFile`.
    WriteAgentMemoryFileResponse => "WriteAgentMemoryFileResponse" {
        agent_id: String,
        entry: AgentMemoryEntry,
    }
    /// `DeleteAgentMemoryFile`; `deleted` is false when nothing was there.
    DeleteAgentMemoryFileResponse => "DeleteAgentMemoryFileResponse" {
        agent_id: String,
        path: String,
        deleted: bool,
    }

    /// `SetSecret`.
    SetSecretResponse => "SetSecretResponse" {
        secret: RedactedSecret,
    }
    /// `ListSecrets`.
    ListSecretsResponse => "ListSecretsResponse" {
        secrets: Vec<RedactedSecret>,
    }
    /// `DeleteSecret`.
    DeleteSecretResponse => "DeleteSecretResponse" {
        name: String,
    }
    /// `ListSigningIdentities`: newest first.
    ListSigningIdentitiesResponse => "ListSigningIdentitiesResponse" {
        identities: Vec<SigningIdentity>,
    }
    /// `ImportSigningIdentity`.
    ImportSigningIdentityResponse => "ImportSigningIdentityResponse" {
        identity: SigningIdentity,
    }
    /// `DeleteSigningIdentity`.
    DeleteSigningIdentityResponse => "DeleteSigningIdentityResponse" {
        name: String,
    }
    /// `CreateSigningIdentity`: the new account, published.
    CreateSigningIdentityResponse => "CreateSigningIdentityResponse" {
        identity: SigningIdentity,
    }
    /// `UpdateSigningIdentity`: its profile republished.
    UpdateSigningIdentityResponse => "UpdateSigningIdentityResponse" {
        identity: SigningIdentity,
    }
    /// `UploadAgentMemoryFileToIpfs`: the file's root CID and address.
    UploadAgentMemoryFileToIpfsResponse => "UploadAgentMemoryFileToIpfsResponse" {
        agent_id: String,
        path: String,
        cid: String,
        url: String,
        size: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    }
    /// `StartProviderOAuth`: where the user signs in, and until when.
    StartProviderOAuthResponse => "StartProviderOAuthResponse" {
        login_id: String,
        auth_url: String,
        expires_at: i64,
    }
    /// `SubmitProviderOAuthCode`: the code is taken; the status tells how
    /// the exchange went.
    SubmitProviderOAuthCodeResponse => "SubmitProviderOAuthCodeResponse" {
    }
    /// `GetProviderOAuthStatus`.
    ProviderOAuthStatusResponse => "ProviderOAuthStatusResponse" {
        login_id: String,
        status: OAuthLoginStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        secret_name: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    }
    /// `CancelProviderOAuth`.
    CancelProviderOAuthResponse => "CancelProviderOAuthResponse" {
        login_id: String,
    }
    /// `SetModelProvider`.
    SetModelProviderResponse => "SetModelProviderResponse" {
        provider: RedactedModelProvider,
    }
    /// `ListModelProviders`.
    ListModelProvidersResponse => "ListModelProvidersResponse" {
        providers: Vec<RedactedModelProvider>,
    }
    /// `DeleteModelProvider`.
    DeleteModelProviderResponse => "DeleteModelProviderResponse" {
        name: String,
    }
    /// `ListProviderModels`.
    ListProviderModelsResponse => "ListProviderModelsResponse" {
        models: Vec<ProviderModelInfo>,
    }
    /// `ListMcpServers`.
    ListMcpServersResponse => "ListMcpServersResponse" {
        servers: Vec<RedactedMcpServer>,
    }
    /// `SetMcpServer`: the record is saved even when discovery failed
    /// (`server.error` says why).
    SetMcpServerResponse => "SetMcpServerResponse" {
        server: RedactedMcpServer,
    }
    /// `DeleteMcpServer`.
    DeleteMcpServerResponse => "DeleteMcpServerResponse" {
        name: String,
    }
    /// `RefreshMcpServer`: discovery ran again.
    RefreshMcpServerResponse => "RefreshMcpServerResponse" {
        server: RedactedMcpServer,
    }
    /// `ListMcpServerTools`: what a fresh discovery found.
    ListMcpServerToolsResponse => "ListMcpServerToolsResponse" {
        name: String,
        tools: Vec<McpToolInfo>,
    }

    /// `CreateSession`.
    CreateSessionResponse => "CreateSessionResponse" {
        session_id: String,
    }
    /// `ListSessions`, newest first; `nextCursor` is absent on the last page.
    ListSessionsResponse => "ListSessionsResponse" {
        sessions: Vec<SessionInfo>,
        agents: Vec<AgentInfo>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        next_cursor: Option<SessionListCursor>,
    }
    /// `GetSession`: events after `afterSeq`.
    GetSessionResponse => "GetSessionResponse" {
        session: SessionInfo,
        events: Vec<SessionEvent>,
        system_prompt_markdown: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        has_more_before: Option<bool>,
        /// Ours: the answer holds one bounded page; more events follow the
        /// last `seq` (ask again with it as `afterSeq`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        has_more_after: Option<bool>,
        /// The firing that started the session: its trigger, activity,
        /// prompt and status.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trigger_context: Option<Ipld>,
    }
    /// `UpdateSession`.
    UpdateSessionResponse => "UpdateSessionResponse" {
        session: SessionInfo,
    }
    /// `DeleteSession`.
    DeleteSessionResponse => "DeleteSessionResponse" {
        session_id: String,
        agent_id: String,
    }
    /// `MessageSession`. `assistantEventId` is empty when the turn was
    /// queued; the rest streams over the WebSocket.
    MessageSessionResponse => "MessageSessionResponse" {
        session_id: String,
        assistant_event_id: String,
    }
    /// `StopSession`.
    StopSessionResponse => "StopSessionResponse" {
        session_id: String,
        stopped: bool,
    }
    /// `RetrySession`.
    RetrySessionResponse => "RetrySessionResponse" {
        session_id: String,
        assistant_event_id: String,
    }

    /// `GetRun`.
    GetRunResponse => "GetRunResponse" {
        run: RunInfo,
    }
    /// `ListRuns`: a tree oldest first, a session's or an agent's runs
    /// newest first.
    ListRunsResponse => "ListRunsResponse" {
        runs: Vec<RunInfo>,
    }
    /// `CancelRun`: false when nothing was left to cancel.
    CancelRunResponse => "CancelRunResponse" {
        run_id: String,
        canceled: bool,
    }
    /// `SignalRun`: false when the run was not waiting on that signal.
    SignalRunResponse => "SignalRunResponse" {
        run_id: String,
        delivered: bool,
    }
    /// `GetRunJournal`.
    GetRunJournalResponse => "GetRunJournalResponse" {
        run_id: String,
        entries: Vec<RunJournalEntryInfo>,
    }

    /// `UploadSessionAttachment`.
    UploadSessionAttachmentResponse => "UploadSessionAttachmentResponse" {
        attachment: SessionAttachmentInfo,
    }
    /// `ReadSessionAttachment`: the record and the bytes.
    ReadSessionAttachmentResponse => "ReadSessionAttachmentResponse" {
        attachment: SessionAttachmentInfo,
        #[serde(with = "serde_bytes_vec")]
        data: Vec<u8>,
    }

    /// `DownloadAgentMemoryFile`: the file saved, where it came from after
    /// redirects, and its type as the server said.
    DownloadAgentMemoryFileResponse => "DownloadAgentMemoryFileResponse" {
        agent_id: String,
        entry: AgentMemoryEntry,
        final_url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content_type: Option<String>,
    }
    /// `BeginFileUpload`.
    BeginFileUploadResponse => "BeginFileUploadResponse" {
        upload_id: String,
        max_chunk_bytes: u64,
    }
    /// `AppendFileUploadChunk`: the bytes received so far.
    AppendFileUploadChunkResponse => "AppendFileUploadChunkResponse" {
        upload_id: String,
        received: u64,
    }
    /// `CommitFileUpload`: the memory entry or the attachment it made.
    CommitFileUploadResponse => "CommitFileUploadResponse" {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        entry: Option<AgentMemoryEntry>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attachment: Option<SessionAttachmentInfo>,
    }
    /// `AbortFileUpload`.
    AbortFileUploadResponse => "AbortFileUploadResponse" {
        upload_id: String,
    }

    /// `ListAgentTriggers`: `AgentTriggerInfo` maps, the latest edited
    /// first.
    ListAgentTriggersResponse => "ListAgentTriggersResponse" {
        triggers: Vec<Ipld>,
    }
    /// `GetAgentTrigger`: the trigger and the sessions it started, the
    /// newest first.
    GetAgentTriggerResponse => "GetAgentTriggerResponse" {
        trigger: Ipld,
        sessions: Vec<SessionInfo>,
    }
    /// `CreateAgentTrigger`.
    CreateAgentTriggerResponse => "CreateAgentTriggerResponse" {
        trigger: Ipld,
    }
    /// `UpdateAgentTrigger`.
    UpdateAgentTriggerResponse => "UpdateAgentTriggerResponse" {
        trigger: Ipld,
    }
    /// `DeleteAgentTrigger`.
    DeleteAgentTriggerResponse => "DeleteAgentTriggerResponse" {
        trigger_id: String,
    }

    /// `InvokeSessionTool`: the durable id of the appended result, and the
    /// verb's output or its error.
    InvokeSessionToolResponse => "InvokeSessionToolResponse" {
        session_id: String,
        result_event_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<Ipld>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    }

    /// `AuthorizeSigner`.
    AuthorizeSignerResponse => "AuthorizeSignerResponse" {
        account_id: String,
        signer_id: String,
        role: Role,
    }
    /// `RevokeSigner`; `revoked` is false when the key was not authorized.
    RevokeSignerResponse => "RevokeSignerResponse" {
        account_id: String,
        signer_id: String,
        revoked: bool,
    }
    /// `ListSigners`.
    ListSignersResponse => "ListSignersResponse" {
        account_id: String,
        signers: Vec<SignerInfo>,
    }
    /// `RegisterSigner`: the delegating account the signer may now act
    /// as, and the signer.
    RegisterSignerResponse => "RegisterSignerResponse" {
        account_id: String,
        signer_id: String,
    }
}

impl ErrorResponse {
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        ErrorResponse {
            message: message.into(),
            code: code.to_string(),
        }
    }
}

impl From<&SeedError> for ErrorResponse {
    fn from(error: &SeedError) -> Self {
        ErrorResponse::new(error.code(), error.to_string())
    }
}

#[cfg(test)]
mod tests;
