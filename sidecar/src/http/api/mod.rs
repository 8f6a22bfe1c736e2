//! `POST /api/message`: one signed action in, one DAG-CBOR response out.
//!
//! bytes → [`Verifier::open`] (bounded decoding, bad CBOR or shape is
//! 400; signature, window, signer, replay: 401) → the typed action
//! (missing, extra or mistyped fields are 400) → one handler per domain
//! (`agents.rs`, `vault.rs`, `sessions.rs`, `signers.rs`, `space.rs`,
//! `runs.rs`, `triggers.rs`, `attachments.rs`), each authorizing with `control::authz` and calling a
//! service → a response struct rendered by `http::common::render`. After
//! a write, the handlers tell the live feed (`notify.rs`, through
//! `ws::Sockets`); the feed never calls back into this module. Actions of
//! the reference that this sidecar does not offer answer 400
//! `unsupported_action`.

mod agents;
mod attachments;
mod identities;
mod invoke;
mod mcp;
mod notify;
mod oauth;
mod runs;
mod sessions;
mod signers;
mod space;
mod triggers;
mod vault;

use agentos_protocol::seed::ApiCode;
use std::collections::BTreeSet;
use std::sync::Arc;

use agentos_protocol::seed::{cbor, try_encode_response, Action, Ipld};
use serde::Serialize;

pub(crate) use super::common::render;
pub use super::common::{ApiError, Caller};

use super::common::Verifier;
use super::ws::Sockets;
use crate::config::HttpConfig;
use crate::control::{Control, IdempotencyKey};
use crate::sessions::Sessions;
use crate::space::Space;
use crate::triggers::Triggers;
use crate::work::Turns;

/// What the signed API serves, and nothing else of the VM: the
/// composition root builds it.
pub struct SignedServices {
    pub control: Control,
    pub sessions: Sessions,
    /// Turns as runs, and the runs the signed API shows.
    pub turns: Turns,
    /// Agents' tools and memory.
    pub space: Space,
    /// The builtin agent's host and verbs, for `InvokeSessionTool` and
    /// model listings; absent, both are refused.
    pub builtin: Option<crate::builtin::Services>,
    /// Agents' triggers.
    pub triggers: Triggers,
    /// `DownloadAgentMemoryFile`'s client.
    pub downloader: crate::builtin::download::Downloader,
    /// MCP servers.
    pub mcp: crate::mcp::Mcp,
}

/// The signed API over its services.
pub struct SignedApi {
    control: Control,
    sessions: Sessions,
    /// Turns as runs, and the runs the signed API shows.
    turns: Turns,
    config: HttpConfig,
    /// The envelope check, shared with `/agents/ws`.
    verifier: Arc<Verifier>,
    /// Adapter ids a definition may name besides `builtin`: the VM config's
    /// agent registry. A signed client never names a command.
    adapters: BTreeSet<String>,
    /// The open `/agents/ws` sockets, which the handlers tell of changes.
    sockets: Arc<Sockets>,
    /// Agents' tools and memory.
    space: Space,
    /// The builtin agent's host and verbs, for `InvokeSessionTool` and
    /// model listings; absent, both are refused.
    builtin: Option<crate::builtin::Services>,
    triggers: Triggers,
    downloader: crate::builtin::download::Downloader,
    mcp: crate::mcp::Mcp,
}

/// A response: the HTTP status and the DAG-CBOR body.
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

/// A success answer's bytes; one that cannot be encoded is a 500, never a
/// 200 carrying an error (nor a stored idempotent answer).
fn ok<T: Serialize>(response: &T) -> Result<Vec<u8>, ApiError> {
    Ok(try_encode_response(response)?)
}

impl SignedApi {
    pub fn new(services: SignedServices, config: HttpConfig) -> SignedApi {
        let SignedServices {
            control,
            sessions,
            turns,
            space,
            builtin,
            triggers,
            downloader,
            mcp,
        } = services;
        let adapters = sessions.agents().keys().cloned().collect();
        SignedApi {
            verifier: Arc::new(Verifier::new(control.clone(), &config)),
            sockets: Arc::new(Sockets::new(config.ws.clone(), sessions.clone())),
            control,
            sessions,
            turns,
            config,
            adapters,
            space,
            builtin,
            triggers,
            downloader,
            mcp,
        }
    }

    pub fn control(&self) -> &Control {
        &self.control
    }

    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    pub fn space(&self) -> &Space {
        &self.space
    }

    /// The open `/agents/ws` sockets (closed at shutdown).
    pub fn sockets(&self) -> &Arc<Sockets> {
        &self.sockets
    }

    /// The envelope check (which `/agents/ws` shares).
    pub fn verifier(&self) -> &Arc<Verifier> {
        &self.verifier
    }

    /// Handles one request body.
    pub async fn message(&self, body: &[u8]) -> Answer {
        match self.message_inner(body).await {
            Ok(body) => Answer { status: 200, body },
            Err(e) => Answer {
                status: e.status,
                body: e.body(),
            },
        }
    }

    async fn message_inner(&self, body: &[u8]) -> Result<Vec<u8>, ApiError> {
        let (envelope, caller) = self.verifier.open(body).await?;
        let action = envelope.typed_action()?;
        self.dispatch(&caller, action).await
    }

    async fn dispatch(&self, caller: &Caller, action: Action) -> Result<Vec<u8>, ApiError> {
        match action {
            Action::Subscribe { .. } | Action::Unsubscribe { .. } => Err(ApiError::bad_request(
                ApiCode::WebsocketOnly,
                "Subscribe and Unsubscribe are sent on /agents/ws",
            )),
            Action::Unsupported(name) => Err(ApiError::bad_request(
                ApiCode::UnsupportedAction,
                format!("the action {name} is not supported by this server"),
            )),
            // Decoded, but running verbs as the user is not offered yet.
            Action::InvokeSessionTool { .. } => self.invoke_session_tool(caller, action).await,
            Action::AuthorizeSigner { .. } | Action::RevokeSigner { .. } | Action::ListSigners => {
                self.signers(caller, action).await
            }
            Action::RegisterSigner { capability } => {
                self.register_signer(caller, &capability).await
            }
            Action::SetSecret { .. }
            | Action::ListSecrets
            | Action::DeleteSecret { .. }
            | Action::SetModelProvider { .. }
            | Action::ListModelProviders { .. }
            | Action::DeleteModelProvider { .. }
            | Action::ListProviderModels { .. } => self.vault(caller, action).await,
            Action::ListSigningIdentities { .. }
            | Action::ImportSigningIdentity { .. }
            | Action::DeleteSigningIdentity { .. }
            | Action::CreateSigningIdentity { .. }
            | Action::UpdateSigningIdentity { .. } => self.identity_action(caller, action).await,
            Action::ListMcpServers
            | Action::SetMcpServer { .. }
            | Action::DeleteMcpServer { .. }
            | Action::RefreshMcpServer { .. }
            | Action::ListMcpServerTools { .. } => self.mcp_action(caller, action).await,
            Action::StartProviderOAuth { .. }
            | Action::SubmitProviderOAuthCode { .. }
            | Action::GetProviderOAuthStatus { .. }
            | Action::CancelProviderOAuth { .. } => self.provider_oauth(caller, action).await,
            Action::CreateSession { .. }
            | Action::ListSessions { .. }
            | Action::GetSession { .. }
            | Action::UpdateSession { .. }
            | Action::DeleteSession { .. }
            | Action::MessageSession { .. }
            | Action::StopSession { .. }
            | Action::RetrySession { .. } => self.session_action(caller, action).await,
            Action::GetRun { .. }
            | Action::ListRuns { .. }
            | Action::CancelRun { .. }
            | Action::SignalRun { .. }
            | Action::GetRunJournal { .. } => self.run_action(caller, action).await,
            Action::UploadSessionAttachment { .. }
            | Action::ReadSessionAttachment { .. }
            | Action::BeginFileUpload { .. }
            | Action::AppendFileUploadChunk { .. }
            | Action::CommitFileUpload { .. }
            | Action::AbortFileUpload { .. }
            | Action::DownloadAgentMemoryFile { .. } => {
                self.attachment_action(caller, action).await
            }
            Action::ListAgentTriggers { .. }
            | Action::GetAgentTrigger { .. }
            | Action::CreateAgentTrigger { .. }
            | Action::UpdateAgentTrigger { .. }
            | Action::DeleteAgentTrigger { .. } => self.trigger_action(caller, action).await,
            Action::ListAgentTools { .. }
            | Action::SaveAgentTool { .. }
            | Action::DeleteAgentTool { .. }
            | Action::ListAgentMemory { .. }
            | Action::ReadAgentMemoryFile { .. }
            | Action::WriteAgentMemoryFile { .. }
            | Action::DeleteAgentMemoryFile { .. }
            | Action::UploadAgentMemoryFileToIpfs { .. } => self.space_action(caller, action).await,
            other => self.agents(caller, other).await,
        }
    }

    /// The idempotency key of an action with a client id: the account, the
    /// action, the id, and a hash of the identifying fields (never `ts`).
    /// The hypermedia server identities are kept for.
    fn hypermedia_server(&self) -> String {
        self.builtin
            .as_ref()
            .and_then(|b| b.verbs.hypermedia.as_ref())
            .map_or_else(
                || crate::config::hypermedia::DEFAULT_SERVER_URL.to_owned(),
                |h| h.server().to_owned(),
            )
    }

    fn idempotency_key(
        caller: &Caller,
        action: &str,
        client_id: &str,
        fields: Ipld,
    ) -> Result<IdempotencyKey, ApiError> {
        use sha2::Digest;
        let bytes = cbor::to_canonical(&fields)?;
        Ok(IdempotencyKey {
            account_id: caller.account.clone(),
            action: action.to_owned(),
            client_id: client_id.to_owned(),
            request_hash: sha2::Sha256::digest(&bytes).to_vec(),
        })
    }
}
