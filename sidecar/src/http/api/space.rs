//! An agent's Space over the signed API: `ListAgentTools` (its tool
//! documents, then the tools of the MCP servers it may use, with each
//! server's state),
//! `SaveAgentTool`, `DeleteAgentTool`, `ListAgentMemory`,
//! `ReadAgentMemoryFile`, `WriteAgentMemoryFile`, `DeleteAgentMemoryFile`,
//! and `UploadAgentMemoryFileToIpfs` (the file as IPFS blocks, published to
//! the hypermedia server).
//!
//! Reading needs read access to the agent, changing needs write access; an
//! agent the caller cannot read is `not_found`, like one that does not
//! exist. The rows and files are the agent owner's, whoever acts. After a
//! change the agent's `agents/<id>` subscribers hear the agent and its
//! accounts hear why (`agent-tools-changed`, `agent-memory-changed`).

use agentos_protocol::seed::response::{
    DeleteAgentMemoryFileResponse, DeleteAgentToolResponse, ListAgentMemoryResponse,
    ListAgentToolsResponse, ReadAgentMemoryFileResponse, SaveAgentToolResponse,
    UploadAgentMemoryFileToIpfsResponse, WriteAgentMemoryFileResponse,
};
use agentos_protocol::seed::{Action, ApiCode};

use super::{ok, render, ApiError, Caller, SignedApi};
use crate::control::authz;
use crate::space::{memory, reason, LambdaInput};

/// The largest memory file published to IPFS in one request.
pub const MAX_IPFS_UPLOAD_BYTES: u64 = 64 << 20;

impl SignedApi {
    pub(super) async fn space_action(
        &self,
        caller: &Caller,
        action: Action,
    ) -> Result<Vec<u8>, ApiError> {
        let account = caller.account.as_str();
        let control = &self.control;
        let space = &self.space;
        match action {
            Action::ListAgentTools { agent_id } => {
                let access = authz::require_read(control, account, &agent_id).await?;
                let definition = render::definition(&access.agent.definition)?;
                let tools = space
                    .tools
                    .list(
                        &access.agent.account_id,
                        &agent_id,
                        definition.tools.as_deref(),
                    )
                    .await?;
                let mut tools: Vec<_> = tools.iter().map(render::tool).collect();
                let servers = self
                    .mcp
                    .servers_for(
                        &access.agent.account_id,
                        definition.mcp_servers.as_deref().unwrap_or_default(),
                    )
                    .await;
                for server in &servers {
                    tools.extend(
                        server
                            .tools
                            .iter()
                            .map(|tool| render::mcp_tool(server, tool)),
                    );
                }
                ok(&ListAgentToolsResponse {
                    agent_id,
                    tools,
                    mcp_servers: servers.into_iter().map(|s| s.view).collect(),
                })
            }
            Action::SaveAgentTool {
                agent_id,
                tool,
                previous_name,
            } => {
                let access = authz::require_write(control, account, &agent_id).await?;
                let record = space
                    .tools
                    .save_lambda(
                        &access.agent.account_id,
                        &agent_id,
                        LambdaInput::from(tool),
                        previous_name.as_deref(),
                    )
                    .await?;
                self.announce_agent(&agent_id, reason::TOOLS_CHANGED, &[])
                    .await;
                ok(&SaveAgentToolResponse {
                    agent_id,
                    tool: render::tool(&record),
                })
            }
            Action::DeleteAgentTool { agent_id, name } => {
                let access = authz::require_write(control, account, &agent_id).await?;
                let deleted = space
                    .tools
                    .delete_lambda(&access.agent.account_id, &agent_id, &name)
                    .await?;
                if deleted {
                    self.announce_agent(&agent_id, reason::TOOLS_CHANGED, &[])
                        .await;
                }
                ok(&DeleteAgentToolResponse {
                    agent_id,
                    name,
                    deleted,
                })
            }
            Action::ListAgentMemory { agent_id } => {
                authz::require_read(control, account, &agent_id).await?;
                let entries = space.memory.list(&agent_id).await?;
                let total_bytes = entries.iter().filter(|e| !e.is_dir).map(|e| e.size).sum();
                ok(&ListAgentMemoryResponse {
                    agent_id,
                    entries: entries.iter().map(render::memory_entry).collect(),
                    total_bytes,
                })
            }
            Action::ReadAgentMemoryFile { agent_id, path } => {
                authz::require_read(control, account, &agent_id).await?;
                // What one request may carry in is what one answer carries
                // out.
                let file = space
                    .memory
                    .read(&agent_id, &path, self.config.max_body_bytes)
                    .await?;
                ok(&ReadAgentMemoryFileResponse {
                    agent_id,
                    file: render::memory_file(file),
                })
            }
            Action::WriteAgentMemoryFile {
                agent_id,
                path,
                content,
            } => {
                authz::require_write(control, account, &agent_id).await?;
                let entry = space
                    .memory
                    .write(&agent_id, &path, &content.into_bytes())
                    .await?;
                self.announce_agent(&agent_id, reason::MEMORY_CHANGED, &[])
                    .await;
                ok(&WriteAgentMemoryFileResponse {
                    agent_id,
                    entry: render::memory_entry(&entry),
                })
            }
            Action::UploadAgentMemoryFileToIpfs { agent_id, path } => {
                authz::require_write(control, account, &agent_id).await?;
                let file = space
                    .memory
                    .read(&agent_id, &path, MAX_IPFS_UPLOAD_BYTES)
                    .await?;
                let hypermedia = self.hypermedia()?;
                let cid = hypermedia.publish_file(&file.data).await.map_err(|e| {
                    ApiError::new(
                        502,
                        ApiCode::PublishFailed,
                        format!("Failed to publish {} to IPFS: {e}", file.path),
                    )
                })?;
                ok(&UploadAgentMemoryFileToIpfsResponse {
                    agent_id,
                    mime_type: memory::mime_type(&file.path).map(str::to_owned),
                    path: file.path,
                    url: format!("ipfs://{cid}"),
                    cid,
                    size: file.size,
                })
            }
            Action::DeleteAgentMemoryFile { agent_id, path } => {
                authz::require_write(control, account, &agent_id).await?;
                let path = memory::normalize(&path)?;
                let deleted = space.memory.delete(&agent_id, &path).await?;
                if deleted {
                    self.announce_agent(&agent_id, reason::MEMORY_CHANGED, &[])
                        .await;
                }
                ok(&DeleteAgentMemoryFileResponse {
                    agent_id,
                    path,
                    deleted,
                })
            }
            other => Err(ApiError::bad_request(
                ApiCode::UnsupportedAction,
                format!(
                    "the action {} is not supported by this server",
                    other.name()
                ),
            )),
        }
    }
}
