//! MCP servers over the signed API: `ListMcpServers`, `SetMcpServer`,
//! `DeleteMcpServer`, `ListMcpServerTools` (the reference's later actions)
//! and `RefreshMcpServer` (ours: discovery again, the record back). They
//! belong to the acting account, like model providers; no answer ever
//! holds a header's value. `SetMcpServer` connects at once: a failed
//! discovery still saves the record and `server.error` says why;
//! `ListMcpServerTools` answers 502 with the reference's words when the
//! server cannot be reached. Deleting a server also drops its name from
//! the account's agents (`agent-updated` to their subscribers).

use agentos_protocol::seed::response::{
    DeleteMcpServerResponse, ListMcpServerToolsResponse, ListMcpServersResponse,
    RefreshMcpServerResponse, SetMcpServerResponse,
};
use agentos_protocol::seed::Action;

use super::{ok, render, ApiError, Caller, SignedApi};
use crate::http::ws::reason;
use crate::mcp::{self, McpError};

impl SignedApi {
    /// Drops a deleted server from the `mcpServers` of every agent the
    /// account owns, as the reference does, and tells their subscribers.
    async fn scrub_agents(&self, account: &str, name: &str) -> Result<(), ApiError> {
        for access in self.control.list_agents_for(account).await? {
            if access.access_role != crate::control::AccessRole::Owner {
                continue;
            }
            let mut definition = render::definition(&access.agent.definition)?;
            let Some(servers) = &mut definition.mcp_servers else {
                continue;
            };
            if !servers.iter().any(|s| s == name) {
                continue;
            }
            servers.retain(|s| s != name);
            let agent_id = access.agent.agent_id.clone();
            let new = self.new_agent(&definition)?;
            self.control.update_agent(&agent_id, new).await?;
            self.announce_agent(&agent_id, reason::AGENT_UPDATED, &[])
                .await;
        }
        Ok(())
    }

    pub(super) async fn mcp_action(
        &self,
        caller: &Caller,
        action: Action,
    ) -> Result<Vec<u8>, ApiError> {
        let account = caller.account.as_str();
        match action {
            Action::ListMcpServers => ok(&ListMcpServersResponse {
                servers: self.mcp.list(account).await?,
            }),
            Action::SetMcpServer { name, config } => {
                let server = self.mcp.set(account, &name, config).await?;
                ok(&SetMcpServerResponse { server })
            }
            Action::RefreshMcpServer { name } => {
                let server = self.mcp.refresh(account, &name).await?;
                ok(&RefreshMcpServerResponse { server })
            }
            Action::DeleteMcpServer { name } => {
                self.mcp.delete(account, &name).await?;
                self.scrub_agents(account, &name).await?;
                ok(&DeleteMcpServerResponse { name })
            }
            Action::ListMcpServerTools { name } => {
                match self.mcp.fresh_tools(account, &name).await {
                    Ok(tools) => ok(&ListMcpServerToolsResponse {
                        tools: mcp::tool_infos(&name, &tools),
                        name,
                    }),
                    Err(
                        e @ (McpError::NotFound(_) | McpError::Storage(_) | McpError::Busy(..)),
                    ) => Err(e.into()),
                    Err(e) => Err(ApiError {
                        status: 502,
                        code: e.code().to_owned(),
                        message: format!("Could not list tools from MCP server \"{name}\": {e}"),
                    }),
                }
            }
            other => Err(ApiError::bad_request(
                agentos_protocol::seed::ApiCode::BadRequest,
                format!("{} is not an MCP action", other.name()),
            )),
        }
    }
}
