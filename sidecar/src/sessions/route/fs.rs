//! Requests from the agent: ACP `fs/*`, served through the file system
//! bridge narrowed to the session's directories (without a bridge they are
//! unknown methods; a read answers at most `limits.acp.maxReadTextFileBytes`;
//! the session's attachments are readable too),
//! and, for the builtin agent only, `_agentos/*`, answered by the agent host.

use agentos_adapters::RpcError;
use agentos_protocol::acp::{self, methods};
use serde_json::Value;

use super::Route;

impl Route {
    /// Answers an agent→client request other than a permission request.
    pub(super) async fn serve_request(
        &self,
        method: &str,
        params: Value,
    ) -> Result<Value, RpcError> {
        if method.starts_with("_agentos/") {
            let host = self.shared.builtin.get().filter(|_| self.builtin);
            let Some(agent) = host else {
                return Err(RpcError::method_not_found(method));
            };
            let scope = crate::sessions::TurnScope {
                session_id: &self.session_id,
                input_floor: self.input_floor.map(|(floor, _)| floor),
                retry: self.input_floor.is_some_and(|(_, retry)| retry),
                run_id: self.turn_run.as_deref(),
                resume: self.resume,
            };
            return agent.host.serve(scope, method, params).await;
        }
        match (method, &self.shared.fs) {
            (methods::FS_READ_TEXT_FILE, Some(fs)) => {
                let path = params
                    .get("path")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let line = params.get("line").and_then(Value::as_u64);
                let limit = params.get("limit").and_then(Value::as_u64);
                let max = self.shared.limits.max_read_text_file_bytes;
                // The session's own attachments are readable, never
                // writable, wherever its roots are.
                let attachments = agentos_vfs::session_attachments_dir(&self.session_id);
                let read = if path
                    .strip_prefix(attachments.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
                {
                    fs.read_reserved_text_file(&attachments, path, line, limit, max)
                        .await
                } else {
                    fs.read_text_file(&self.roots, path, line, limit, max).await
                };
                read.map(|content| acp::to_params(&acp::ReadTextFileResult { content }))
            }
            (methods::FS_WRITE_TEXT_FILE, Some(fs)) => {
                let path = params
                    .get("path")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let Some(content) = params.get("content").and_then(Value::as_str) else {
                    return Err(RpcError::invalid_params("content must be a string"));
                };
                fs.write_text_file(&self.roots, path, content)
                    .await
                    .map(|()| acp::to_params(&acp::WriteTextFileResult {}))
            }
            _ => Err(RpcError::method_not_found(method)),
        }
    }
}
