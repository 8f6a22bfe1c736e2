//! The VFS as ACP `fs/*` for adapters: each request is served through a view
//! narrowed to the session's cwd and additional directories, and a refused or
//! failed path is a JSON-RPC error for that request, never a crash. The
//! session's attachments are readable too, from the sidecar's own tree,
//! and never writable.
//! `FsBridge` is the interface the session routes call; it lives here, beside
//! its one implementation.

use agentos_adapters::RpcError;
use async_trait::async_trait;
use serde_json::json;

use agentos_vfs::{FsError, Vfs};

/// ACP's "resource not found".
const RESOURCE_NOT_FOUND: i64 = -32002;

/// How adapters reach the VFS through ACP `fs/*`. Implemented by the file
/// system domain; the error is a JSON-RPC error for the adapter.
#[async_trait]
pub trait FsBridge: Send + Sync {
    /// At most `max_bytes` of text (`limits.acp.maxReadTextFileBytes`).
    async fn read_text_file(
        &self,
        roots: &[String],
        path: &str,
        line: Option<u64>,
        limit: Option<u64>,
        max_bytes: u64,
    ) -> Result<String, RpcError>;
    async fn write_text_file(
        &self,
        roots: &[String],
        path: &str,
        content: &str,
    ) -> Result<(), RpcError>;
    /// Makes sure a session's directories exist before its agent starts.
    async fn prepare_roots(&self, roots: &[String]);
    /// `fs/read_text_file` of a file in `dir`, a directory of the sidecar's
    /// own tree the session may read but never write (its attachments).
    async fn read_reserved_text_file(
        &self,
        dir: &str,
        path: &str,
        line: Option<u64>,
        limit: Option<u64>,
        max_bytes: u64,
    ) -> Result<String, RpcError>;
    /// The bytes of such a file, refused past `max_bytes`.
    async fn read_reserved(
        &self,
        dir: &str,
        path: &str,
        max_bytes: u64,
    ) -> Result<Vec<u8>, RpcError>;
}

/// Serves `fs/read_text_file` and `fs/write_text_file` from the VFS.
pub struct AcpFs {
    vfs: Vfs,
}

impl AcpFs {
    pub fn new(vfs: Vfs) -> AcpFs {
        AcpFs { vfs }
    }
}

impl AcpFs {
    /// The reserved tree narrowed to `dir`.
    fn reserved(&self, dir: &str) -> Result<Vfs, RpcError> {
        self.vfs
            .reserved_view()
            .scoped(&[dir.to_owned()])
            .map_err(|e| rpc_error(&e))
    }
}

fn rpc_error(e: &FsError) -> RpcError {
    let code = match e {
        FsError::NotFound { .. } => RESOURCE_NOT_FOUND,
        FsError::Corrupt { .. } | FsError::Host { .. } | FsError::Db(_) => -32603,
        _ => -32602,
    };
    RpcError {
        code,
        message: e.to_string(),
        data: Some(json!({"code": e.code().as_str(), "setting": e.setting()})),
    }
}

#[async_trait]
impl FsBridge for AcpFs {
    async fn read_text_file(
        &self,
        roots: &[String],
        path: &str,
        line: Option<u64>,
        limit: Option<u64>,
        max_bytes: u64,
    ) -> Result<String, RpcError> {
        let view = self.vfs.scoped(roots).map_err(|e| rpc_error(&e))?;
        view.read_text_file(path, line, limit, max_bytes)
            .await
            .map_err(|e| rpc_error(&e))
    }

    async fn write_text_file(
        &self,
        roots: &[String],
        path: &str,
        content: &str,
    ) -> Result<(), RpcError> {
        let view = self.vfs.scoped(roots).map_err(|e| rpc_error(&e))?;
        view.write_text_file(path, content)
            .await
            .map_err(|e| rpc_error(&e))
    }

    async fn read_reserved_text_file(
        &self,
        dir: &str,
        path: &str,
        line: Option<u64>,
        limit: Option<u64>,
        max_bytes: u64,
    ) -> Result<String, RpcError> {
        let view = self.reserved(dir)?;
        view.read_text_file(path, line, limit, max_bytes)
            .await
            .map_err(|e| rpc_error(&e))
    }

    async fn read_reserved(
        &self,
        dir: &str,
        path: &str,
        max_bytes: u64,
    ) -> Result<Vec<u8>, RpcError> {
        let view = self.reserved(dir)?;
        let data = view
            .read(path, 0, max_bytes.saturating_add(1))
            .await
            .map_err(|e| rpc_error(&e))?;
        if data.len() as u64 > max_bytes {
            return Err(RpcError::invalid_params(format!(
                "{path} is larger than {max_bytes} bytes"
            )));
        }
        Ok(data)
    }

    async fn prepare_roots(&self, roots: &[String]) {
        for root in roots {
            if let Err(e) = self.vfs.mkdir_p(root, 0o755).await {
                tracing::debug!(root = %root, error = %e, "session directory not created");
            }
        }
    }
}
