//! Typed actions: the verified envelope's action map read into one variant
//! per action this server implements.
//!
//! Decoding is strict: a missing required field, a field of the wrong type
//! or a field nobody knows is [`SeedError::BadAction`] (`bad_request`),
//! naming the field. `_` (the name) and `ts` belong to the envelope and are
//! consumed, not fields. An action of the reference service that this
//! server does not implement (signing identities, IPFS publishing, …),
//! and a name
//! nobody knows, read as [`Action::Unsupported`], which the server answers
//! with `unsupported_action`.
//!
//! Encoding ([`Action::to_map`]) leaves absent fields out rather than
//! writing nulls, because a null would be signed.

pub(crate) mod fields;
mod space;
mod types;

use ipld_core::ipld::Ipld;
use serde::{Serialize, Serializer};

use self::fields::Fields;
pub use self::space::{AgentToolInput, MemoryContent};
pub use self::types::{
    AgentDefinition, ContentPart, FileUploadTarget, McpServerConfig, ModelProviderConfig,
    SessionListCursor, SystemPrompt,
};
use super::envelope::ActionMap;
use super::vocab::{CollaboratorRole, ToolVerb};
use super::{Principal, Role, SeedError};

/// One decoded action. Field names are Seed's, in snake case.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "_", rename_all_fields = "camelCase")]
pub enum Action {
    // --- Collaboration ---------------------------------------------------
    ListAgentInvites,
    ListAgentCollaborators {
        agent_id: String,
    },
    InviteAgentCollaborator {
        agent_id: String,
        account_id: String,
        role: CollaboratorRole,
    },
    RemoveAgentCollaborator {
        agent_id: String,
        account_id: String,
    },
    SetAgentPublicRead {
        agent_id: String,
        public_read: bool,
    },
    AcceptAgentInvite {
        agent_id: String,
    },
    DeclineAgentInvite {
        agent_id: String,
    },

    // --- Agents ----------------------------------------------------------
    ListAgents,
    CreateAgent {
        definition: AgentDefinition,
        #[serde(skip_serializing_if = "Option::is_none")]
        client_request_id: Option<String>,
    },
    GetAgent {
        agent_id: String,
    },
    UpdateAgent {
        agent_id: String,
        definition: AgentDefinition,
    },
    DeleteAgent {
        agent_id: String,
    },

    // --- An agent's Space: its tools and memory -----------------------------
    ListAgentTools {
        agent_id: String,
    },
    SaveAgentTool {
        agent_id: String,
        tool: AgentToolInput,
        /// The tool's name before this save, when it is renamed.
        #[serde(skip_serializing_if = "Option::is_none")]
        previous_name: Option<String>,
    },
    DeleteAgentTool {
        agent_id: String,
        name: String,
    },
    ListAgentMemory {
        agent_id: String,
    },
    ReadAgentMemoryFile {
        agent_id: String,
        path: String,
    },
    WriteAgentMemoryFile {
        agent_id: String,
        path: String,
        content: MemoryContent,
    },
    DeleteAgentMemoryFile {
        agent_id: String,
        path: String,
    },

    // --- Secrets and providers -------------------------------------------
    SetSecret {
        name: String,
        #[serde(serialize_with = "serialize_bytes")]
        value: Vec<u8>,
        /// A map, kept as sent.
        #[serde(skip_serializing_if = "Option::is_none")]
        metadata: Option<Ipld>,
    },
    ListSecrets,
    DeleteSecret {
        name: String,
    },
    // --- Signing identities (hypermedia account keys) ---------------------
    ListSigningIdentities {
        #[serde(skip_serializing_if = "Option::is_none")]
        agent_id: Option<String>,
    },
    ImportSigningIdentity {
        /// The 32-byte Ed25519 seed, checked by the service (any other
        /// value is refused with the reference's words).
        seed: Option<Ipld>,
        #[serde(skip_serializing_if = "Option::is_none")]
        label: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        client_request_id: Option<String>,
    },
    DeleteSigningIdentity {
        name: String,
    },
    CreateSigningIdentity {
        #[serde(skip_serializing_if = "Option::is_none")]
        label: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        client_request_id: Option<String>,
    },
    UpdateSigningIdentity {
        name: String,
        /// Required by the service, with the reference's words when absent.
        #[serde(skip_serializing_if = "Option::is_none")]
        label: Option<String>,
        /// `{data: bytes, mimeType?, fileName?}`, checked by the service.
        #[serde(skip_serializing_if = "Option::is_none")]
        icon: Option<Ipld>,
    },
    UploadAgentMemoryFileToIpfs {
        agent_id: String,
        path: String,
    },
    SetModelProvider {
        name: String,
        provider: ModelProviderConfig,
    },
    ListModelProviders {
        #[serde(skip_serializing_if = "Option::is_none")]
        agent_id: Option<String>,
    },
    DeleteModelProvider {
        name: String,
    },
    ListProviderModels {
        provider: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        agent_id: Option<String>,
    },

    // --- MCP servers (the reference's later actions, and our refresh) ----
    ListMcpServers,
    SetMcpServer {
        name: String,
        config: McpServerConfig,
    },
    DeleteMcpServer {
        name: String,
    },
    RefreshMcpServer {
        name: String,
    },
    ListMcpServerTools {
        name: String,
    },
    // Subscription sign-in. Fields are kept as sent: the server words a
    // missing or non-string one as the reference does (`Login id is
    // required`).
    StartProviderOAuth {
        #[serde(skip_serializing_if = "Option::is_none")]
        provider_type: Option<Ipld>,
    },
    SubmitProviderOAuthCode {
        #[serde(skip_serializing_if = "Option::is_none")]
        login_id: Option<Ipld>,
        #[serde(skip_serializing_if = "Option::is_none")]
        code: Option<Ipld>,
    },
    GetProviderOAuthStatus {
        #[serde(skip_serializing_if = "Option::is_none")]
        login_id: Option<Ipld>,
    },
    CancelProviderOAuth {
        #[serde(skip_serializing_if = "Option::is_none")]
        login_id: Option<Ipld>,
    },

    // --- Sessions --------------------------------------------------------
    CreateSession {
        agent_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        client_request_id: Option<String>,
    },
    ListSessions {
        #[serde(skip_serializing_if = "Option::is_none")]
        agent_id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        limit: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cursor: Option<SessionListCursor>,
        #[serde(skip_serializing_if = "Option::is_none")]
        parent_session_id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        include_children: Option<bool>,
    },
    GetSession {
        session_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        after_seq: Option<u64>,
    },
    UpdateSession {
        session_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        /// Absent: leave the override alone. `Some(Ipld::Null)`: clear it,
        /// back to the agent's model. `Some(map)`: `{provider, model,
        /// reasoningLevel?}`, kept as sent.
        #[serde(skip_serializing_if = "Option::is_none")]
        model_override: Option<Ipld>,
    },
    DeleteSession {
        session_id: String,
    },
    MessageSession {
        session_id: String,
        content: Vec<ContentPart>,
        #[serde(skip_serializing_if = "Option::is_none")]
        client_message_id: Option<String>,
    },
    StopSession {
        session_id: String,
    },
    RetrySession {
        session_id: String,
    },
    /// Runs one verb as the user on the session's log.
    InvokeSessionTool {
        session_id: String,
        verb: ToolVerb,
        /// The verb's input, any value, kept as sent.
        input: Ipld,
    },

    // --- Runs ------------------------------------------------------------
    GetRun {
        run_id: String,
    },
    /// Exactly one of `root_run_id`, `session_id` and `agent_id`.
    ListRuns {
        #[serde(skip_serializing_if = "Option::is_none")]
        root_run_id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        session_id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        agent_id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        status: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        limit: Option<u64>,
    },
    CancelRun {
        run_id: String,
    },
    SignalRun {
        run_id: String,
        signal: String,
        /// Any value, kept as sent.
        #[serde(skip_serializing_if = "Option::is_none")]
        payload: Option<Ipld>,
    },
    GetRunJournal {
        run_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        after_seq: Option<u64>,
    },

    // --- Session attachments ---------------------------------------------
    UploadSessionAttachment {
        session_id: String,
        /// Normalized by the server (absent: `file`).
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        #[serde(serialize_with = "serialize_bytes")]
        content: Vec<u8>,
    },
    ReadSessionAttachment {
        session_id: String,
        attachment_id: String,
    },
    BeginFileUpload {
        target: FileUploadTarget,
        size: i64,
    },
    DownloadAgentMemoryFile {
        agent_id: String,
        url: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        path: Option<String>,
    },
    AppendFileUploadChunk {
        upload_id: String,
        offset: i64,
        #[serde(serialize_with = "serialize_bytes")]
        content: Vec<u8>,
    },
    CommitFileUpload {
        upload_id: String,
    },
    AbortFileUpload {
        upload_id: String,
    },

    // --- Triggers --------------------------------------------------------
    ListAgentTriggers {
        agent_id: String,
    },
    GetAgentTrigger {
        trigger_id: String,
    },
    /// `trigger` is checked by the server with the reference's rules and
    /// words (an absent one reads as null).
    CreateAgentTrigger {
        agent_id: String,
        trigger: Ipld,
        #[serde(skip_serializing_if = "Option::is_none")]
        client_request_id: Option<String>,
    },
    UpdateAgentTrigger {
        trigger_id: String,
        patch: Ipld,
    },
    DeleteAgentTrigger {
        trigger_id: String,
    },

    // --- Subscriptions (WebSocket only) ----------------------------------
    Subscribe {
        /// `account/<id>`, `agents/<id>` or `sessions/<id>`.
        key: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        after_seq: Option<u64>,
    },
    Unsubscribe {
        key: String,
    },

    // --- Signers (ours) --------------------------------------------------
    /// The account authorizes another key to sign as it.
    AuthorizeSigner {
        #[serde(serialize_with = "serialize_principal_text")]
        signer: Principal,
        role: Role,
    },
    RevokeSigner {
        #[serde(serialize_with = "serialize_principal_text")]
        signer: Principal,
    },
    /// The reference's: the envelope's signer registers itself as a
    /// delegated signer of the account whose Capability blob (its canonical
    /// DAG-CBOR bytes, role `AGENT` or `WRITER`) delegates to it.
    RegisterSigner {
        #[serde(serialize_with = "serialize_bytes")]
        capability: Vec<u8>,
    },
    ListSigners,

    /// An action this server does not implement, by name.
    #[serde(skip)]
    Unsupported(String),
}

impl Action {
    /// Reads an action map (`_`, fields, `ts`) into a typed action.
    pub fn from_map(map: &ActionMap) -> Result<Action, SeedError> {
        let mut map = map.clone();
        let name = match map.remove("_") {
            Some(Ipld::String(name)) => name,
            _ => {
                return Err(SeedError::bad_action(
                    "`_` must be the action name, a string",
                ))
            }
        };
        map.remove("ts");
        decode_named(name.clone(), Fields::new(map)).map_err(|error| match error {
            SeedError::BadAction { message } => SeedError::bad_action(format!("{name}: {message}")),
            other => other,
        })
    }

    /// The action's name as it travels in `_`.
    pub fn name(&self) -> &str {
        match self {
            Action::ListAgentInvites => "ListAgentInvites",
            Action::ListAgentCollaborators { .. } => "ListAgentCollaborators",
            Action::InviteAgentCollaborator { .. } => "InviteAgentCollaborator",
            Action::RemoveAgentCollaborator { .. } => "RemoveAgentCollaborator",
            Action::SetAgentPublicRead { .. } => "SetAgentPublicRead",
            Action::AcceptAgentInvite { .. } => "AcceptAgentInvite",
            Action::DeclineAgentInvite { .. } => "DeclineAgentInvite",
            Action::ListAgents => "ListAgents",
            Action::CreateAgent { .. } => "CreateAgent",
            Action::GetAgent { .. } => "GetAgent",
            Action::UpdateAgent { .. } => "UpdateAgent",
            Action::DeleteAgent { .. } => "DeleteAgent",
            Action::ListAgentTools { .. } => "ListAgentTools",
            Action::SaveAgentTool { .. } => "SaveAgentTool",
            Action::DeleteAgentTool { .. } => "DeleteAgentTool",
            Action::ListAgentMemory { .. } => "ListAgentMemory",
            Action::ReadAgentMemoryFile { .. } => "ReadAgentMemoryFile",
            Action::WriteAgentMemoryFile { .. } => "WriteAgentMemoryFile",
            Action::DeleteAgentMemoryFile { .. } => "DeleteAgentMemoryFile",
            Action::SetSecret { .. } => "SetSecret",
            Action::ListSecrets => "ListSecrets",
            Action::DeleteSecret { .. } => "DeleteSecret",
            Action::ListSigningIdentities { .. } => "ListSigningIdentities",
            Action::ImportSigningIdentity { .. } => "ImportSigningIdentity",
            Action::DeleteSigningIdentity { .. } => "DeleteSigningIdentity",
            Action::CreateSigningIdentity { .. } => "CreateSigningIdentity",
            Action::UpdateSigningIdentity { .. } => "UpdateSigningIdentity",
            Action::UploadAgentMemoryFileToIpfs { .. } => "UploadAgentMemoryFileToIpfs",
            Action::SetModelProvider { .. } => "SetModelProvider",
            Action::ListModelProviders { .. } => "ListModelProviders",
            Action::DeleteModelProvider { .. } => "DeleteModelProvider",
            Action::ListProviderModels { .. } => "ListProviderModels",
            Action::ListMcpServers => "ListMcpServers",
            Action::SetMcpServer { .. } => "SetMcpServer",
            Action::DeleteMcpServer { .. } => "DeleteMcpServer",
            Action::RefreshMcpServer { .. } => "RefreshMcpServer",
            Action::ListMcpServerTools { .. } => "ListMcpServerTools",
            Action::StartProviderOAuth { .. } => "StartProviderOAuth",
            Action::SubmitProviderOAuthCode { .. } => "SubmitProviderOAuthCode",
            Action::GetProviderOAuthStatus { .. } => "GetProviderOAuthStatus",
            Action::CancelProviderOAuth { .. } => "CancelProviderOAuth",
            Action::CreateSession { .. } => "CreateSession",
            Action::ListSessions { .. } => "ListSessions",
            Action::GetSession { .. } => "GetSession",
            Action::UpdateSession { .. } => "UpdateSession",
            Action::DeleteSession { .. } => "DeleteSession",
            Action::MessageSession { .. } => "MessageSession",
            Action::StopSession { .. } => "StopSession",
            Action::RetrySession { .. } => "RetrySession",
            Action::InvokeSessionTool { .. } => "InvokeSessionTool",
            Action::GetRun { .. } => "GetRun",
            Action::ListRuns { .. } => "ListRuns",
            Action::CancelRun { .. } => "CancelRun",
            Action::SignalRun { .. } => "SignalRun",
            Action::GetRunJournal { .. } => "GetRunJournal",
            Action::UploadSessionAttachment { .. } => "UploadSessionAttachment",
            Action::ReadSessionAttachment { .. } => "ReadSessionAttachment",
            Action::BeginFileUpload { .. } => "BeginFileUpload",
            Action::DownloadAgentMemoryFile { .. } => "DownloadAgentMemoryFile",
            Action::AppendFileUploadChunk { .. } => "AppendFileUploadChunk",
            Action::CommitFileUpload { .. } => "CommitFileUpload",
            Action::AbortFileUpload { .. } => "AbortFileUpload",
            Action::ListAgentTriggers { .. } => "ListAgentTriggers",
            Action::GetAgentTrigger { .. } => "GetAgentTrigger",
            Action::CreateAgentTrigger { .. } => "CreateAgentTrigger",
            Action::UpdateAgentTrigger { .. } => "UpdateAgentTrigger",
            Action::DeleteAgentTrigger { .. } => "DeleteAgentTrigger",
            Action::Subscribe { .. } => "Subscribe",
            Action::Unsubscribe { .. } => "Unsubscribe",
            Action::AuthorizeSigner { .. } => "AuthorizeSigner",
            Action::RevokeSigner { .. } => "RevokeSigner",
            Action::RegisterSigner { .. } => "RegisterSigner",
            Action::ListSigners => "ListSigners",
            Action::Unsupported(name) => name,
        }
    }

    /// The action as a map ready to sign (`_` and the fields; the signer
    /// adds `ts`). Absent fields are left out.
    pub fn to_map(&self) -> Result<ActionMap, SeedError> {
        if let Action::Unsupported(name) = self {
            return Err(SeedError::bad_action(format!(
                "{name}: an unsupported action cannot be encoded"
            )));
        }
        match ipld_core::serde::to_ipld(self) {
            Ok(Ipld::Map(map)) => Ok(map),
            Ok(_) => Err(SeedError::Encode {
                message: "an action must encode as a map".to_string(),
            }),
            Err(error) => Err(SeedError::Encode {
                message: error.to_string(),
            }),
        }
    }
}

fn decode_named(name: String, mut f: Fields) -> Result<Action, SeedError> {
    let action = match name.as_str() {
        "ListAgentInvites" => Action::ListAgentInvites,
        "ListAgentCollaborators" => Action::ListAgentCollaborators {
            agent_id: f.req("agentId")?,
        },
        "InviteAgentCollaborator" => Action::InviteAgentCollaborator {
            agent_id: f.req("agentId")?,
            account_id: f.req("accountId")?,
            role: f.req("role")?,
        },
        "RemoveAgentCollaborator" => Action::RemoveAgentCollaborator {
            agent_id: f.req("agentId")?,
            account_id: f.req("accountId")?,
        },
        "SetAgentPublicRead" => Action::SetAgentPublicRead {
            agent_id: f.req("agentId")?,
            public_read: f.req("publicRead")?,
        },
        "AcceptAgentInvite" => Action::AcceptAgentInvite {
            agent_id: f.req("agentId")?,
        },
        "DeclineAgentInvite" => Action::DeclineAgentInvite {
            agent_id: f.req("agentId")?,
        },
        "ListAgents" => Action::ListAgents,
        "CreateAgent" => Action::CreateAgent {
            definition: f.req("definition")?,
            client_request_id: f.opt("clientRequestId")?,
        },
        "GetAgent" => Action::GetAgent {
            agent_id: f.req("agentId")?,
        },
        "UpdateAgent" => Action::UpdateAgent {
            agent_id: f.req("agentId")?,
            definition: f.req("definition")?,
        },
        "DeleteAgent" => Action::DeleteAgent {
            agent_id: f.req("agentId")?,
        },
        "ListAgentTools" => Action::ListAgentTools {
            agent_id: f.req("agentId")?,
        },
        "SaveAgentTool" => Action::SaveAgentTool {
            agent_id: f.req("agentId")?,
            tool: f.req("tool")?,
            previous_name: f.opt("previousName")?,
        },
        "DeleteAgentTool" => Action::DeleteAgentTool {
            agent_id: f.req("agentId")?,
            name: f.req("name")?,
        },
        "ListAgentMemory" => Action::ListAgentMemory {
            agent_id: f.req("agentId")?,
        },
        "ReadAgentMemoryFile" => Action::ReadAgentMemoryFile {
            agent_id: f.req("agentId")?,
            path: f.req("path")?,
        },
        "WriteAgentMemoryFile" => Action::WriteAgentMemoryFile {
            agent_id: f.req("agentId")?,
            path: f.req("path")?,
            content: f.req("content")?,
        },
        "DeleteAgentMemoryFile" => Action::DeleteAgentMemoryFile {
            agent_id: f.req("agentId")?,
            path: f.req("path")?,
        },
        "SetSecret" => Action::SetSecret {
            name: f.req("name")?,
            value: f.req_bytes("value")?,
            metadata: f.opt_map("metadata")?,
        },
        "ListSecrets" => Action::ListSecrets,
        "DeleteSecret" => Action::DeleteSecret {
            name: f.req("name")?,
        },
        "ListSigningIdentities" => Action::ListSigningIdentities {
            agent_id: f.opt("agentId")?,
        },
        "ImportSigningIdentity" => Action::ImportSigningIdentity {
            seed: f.opt_any("seed")?,
            label: f.opt("label")?,
            client_request_id: f.opt("clientRequestId")?,
        },
        "DeleteSigningIdentity" => Action::DeleteSigningIdentity {
            name: f.req("name")?,
        },
        "CreateSigningIdentity" => Action::CreateSigningIdentity {
            label: f.opt("label")?,
            client_request_id: f.opt("clientRequestId")?,
        },
        "UpdateSigningIdentity" => Action::UpdateSigningIdentity {
            name: f.req("name")?,
            label: f.opt("label")?,
            icon: f.opt_any("icon")?,
        },
        "UploadAgentMemoryFileToIpfs" => Action::UploadAgentMemoryFileToIpfs {
            agent_id: f.req("agentId")?,
            path: f.req("path")?,
        },
        "SetModelProvider" => Action::SetModelProvider {
            name: f.req("name")?,
            provider: f.req("provider")?,
        },
        "ListModelProviders" => Action::ListModelProviders {
            agent_id: f.opt("agentId")?,
        },
        "DeleteModelProvider" => Action::DeleteModelProvider {
            name: f.req("name")?,
        },
        "ListProviderModels" => Action::ListProviderModels {
            provider: f.req("provider")?,
            agent_id: f.opt("agentId")?,
        },
        "ListMcpServers" => Action::ListMcpServers,
        "SetMcpServer" => Action::SetMcpServer {
            name: f.req("name")?,
            config: f.req("config")?,
        },
        "DeleteMcpServer" => Action::DeleteMcpServer {
            name: f.req("name")?,
        },
        "RefreshMcpServer" => Action::RefreshMcpServer {
            name: f.req("name")?,
        },
        "ListMcpServerTools" => Action::ListMcpServerTools {
            name: f.req("name")?,
        },
        "StartProviderOAuth" => Action::StartProviderOAuth {
            provider_type: f.opt_any("providerType")?,
        },
        "SubmitProviderOAuthCode" => Action::SubmitProviderOAuthCode {
            login_id: f.opt_any("loginId")?,
            code: f.opt_any("code")?,
        },
        "GetProviderOAuthStatus" => Action::GetProviderOAuthStatus {
            login_id: f.opt_any("loginId")?,
        },
        "CancelProviderOAuth" => Action::CancelProviderOAuth {
            login_id: f.opt_any("loginId")?,
        },
        "CreateSession" => Action::CreateSession {
            agent_id: f.req("agentId")?,
            title: f.opt("title")?,
            client_request_id: f.opt("clientRequestId")?,
        },
        "ListSessions" => Action::ListSessions {
            agent_id: f.opt("agentId")?,
            limit: f.opt("limit")?,
            cursor: f.opt("cursor")?,
            parent_session_id: f.opt("parentSessionId")?,
            include_children: f.opt("includeChildren")?,
        },
        "GetSession" => Action::GetSession {
            session_id: f.req("sessionId")?,
            after_seq: f.opt("afterSeq")?,
        },
        "UpdateSession" => Action::UpdateSession {
            session_id: f.req("sessionId")?,
            title: f.opt("title")?,
            model_override: f.nullable_map("modelOverride")?,
        },
        "DeleteSession" => Action::DeleteSession {
            session_id: f.req("sessionId")?,
        },
        "MessageSession" => Action::MessageSession {
            session_id: f.req("sessionId")?,
            content: f.req("content")?,
            client_message_id: f.opt("clientMessageId")?,
        },
        "StopSession" => Action::StopSession {
            session_id: f.req("sessionId")?,
        },
        "RetrySession" => Action::RetrySession {
            session_id: f.req("sessionId")?,
        },
        "InvokeSessionTool" => Action::InvokeSessionTool {
            session_id: f.req("sessionId")?,
            verb: f.req("verb")?,
            input: f.req_any("input")?,
        },
        "GetRun" => Action::GetRun {
            run_id: f.req("runId")?,
        },
        "ListRuns" => Action::ListRuns {
            root_run_id: f.opt("rootRunId")?,
            session_id: f.opt("sessionId")?,
            agent_id: f.opt("agentId")?,
            status: f.opt("status")?,
            limit: f.opt("limit")?,
        },
        "CancelRun" => Action::CancelRun {
            run_id: f.req("runId")?,
        },
        "SignalRun" => Action::SignalRun {
            run_id: f.req("runId")?,
            signal: f.req("signal")?,
            payload: f.opt_any("payload")?,
        },
        "GetRunJournal" => Action::GetRunJournal {
            run_id: f.req("runId")?,
            after_seq: f.opt("afterSeq")?,
        },
        "UploadSessionAttachment" => Action::UploadSessionAttachment {
            session_id: f.req("sessionId")?,
            name: f.opt("name")?,
            mime_type: f.opt("mimeType")?,
            content: f.req_bytes("content")?,
        },
        "ReadSessionAttachment" => Action::ReadSessionAttachment {
            session_id: f.req("sessionId")?,
            attachment_id: f.req("attachmentId")?,
        },
        "BeginFileUpload" => Action::BeginFileUpload {
            target: f.req("target")?,
            size: f.req("size")?,
        },
        "DownloadAgentMemoryFile" => Action::DownloadAgentMemoryFile {
            agent_id: f.req("agentId")?,
            url: f.req("url")?,
            path: f.opt("path")?,
        },
        "AppendFileUploadChunk" => Action::AppendFileUploadChunk {
            upload_id: f.req("uploadId")?,
            offset: f.req("offset")?,
            content: f.req_bytes("content")?,
        },
        "CommitFileUpload" => Action::CommitFileUpload {
            upload_id: f.req("uploadId")?,
        },
        "AbortFileUpload" => Action::AbortFileUpload {
            upload_id: f.req("uploadId")?,
        },
        "ListAgentTriggers" => Action::ListAgentTriggers {
            agent_id: f.req("agentId")?,
        },
        "GetAgentTrigger" => Action::GetAgentTrigger {
            trigger_id: f.req("triggerId")?,
        },
        "CreateAgentTrigger" => Action::CreateAgentTrigger {
            agent_id: f.req("agentId")?,
            trigger: f.opt_any("trigger")?.unwrap_or(Ipld::Null),
            client_request_id: f.opt("clientRequestId")?,
        },
        "UpdateAgentTrigger" => Action::UpdateAgentTrigger {
            trigger_id: f.req("triggerId")?,
            patch: f.opt_any("patch")?.unwrap_or(Ipld::Null),
        },
        "DeleteAgentTrigger" => Action::DeleteAgentTrigger {
            trigger_id: f.req("triggerId")?,
        },
        "Subscribe" => Action::Subscribe {
            key: f.req("key")?,
            after_seq: f.opt("afterSeq")?,
        },
        "Unsubscribe" => Action::Unsubscribe { key: f.req("key")? },
        "AuthorizeSigner" => Action::AuthorizeSigner {
            signer: f.req("signer")?,
            role: role(&mut f)?,
        },
        "RevokeSigner" => Action::RevokeSigner {
            signer: f.req("signer")?,
        },
        "ListSigners" => Action::ListSigners,
        "RegisterSigner" => Action::RegisterSigner {
            capability: f.req_bytes("capability")?,
        },
        // Fields of an action we do not implement are not read: the answer
        // is `unsupported_action` whatever they hold.
        _ => return Ok(Action::Unsupported(name)),
    };
    f.finish()?;
    Ok(action)
}

fn role(f: &mut Fields) -> Result<Role, SeedError> {
    let text: String = f.req("role")?;
    Ok(Role::parse(&text))
}

fn serialize_bytes<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_bytes(bytes)
}

fn serialize_principal_text<S: Serializer>(
    principal: &Principal,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_str(principal)
}

#[cfg(test)]
mod tests;
