//! An agent's Space: the content it works with besides its conversations.
//! `~/tools` is its tool documents (`tools.rs`: builtin contracts from
//! `registry.rs`, and lambdas it or its owner authored, checked against
//! the JSON Schema subset of `schema.rs`); `~/memory` is its files
//! (`memory.rs`, in the VM's file system). Both are reached by the signed
//! API's Space actions and by the agent's verbs, through [`Space`]. The
//! files users give its sessions are `attachments.rs` (beside memory, in
//! the VM's file system, with the Seed service's rules and words).
//!
//! This layer knows no HTTP, CBOR framing or JSON-RPC: it takes and answers
//! domain values, with [`SpaceError`] (`error.rs`) for every refusal. Who
//! may touch which agent's Space is decided before, by `control::authz`.

pub mod attachments;
pub mod error;
pub mod memory;
pub mod registry;
pub mod schema;
pub mod tools;
pub mod uploads;

use agentos_schema::SharedDatabase;

pub use attachments::{AttachmentError, AttachmentInfo, SessionAttachments};
pub use error::SpaceError;
pub use memory::{AgentMemory, MemoryEntry, MemoryFile};
pub use tools::{LambdaInput, ToolDocuments, ToolRecord};

use crate::config::ControlLimits;
use agentos_vfs::Vfs;

/// Why an account's view changed, when a Space changes (the change feed's
/// `{reason}` on `account/<id>`, beside the agent on `agents/<id>`).
pub mod reason {
    pub const MEMORY_CHANGED: &str = "agent-memory-changed";
    pub const TOOLS_CHANGED: &str = "agent-tools-changed";
}

/// Every agent's tools and memory. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Space {
    pub tools: ToolDocuments,
    pub memory: AgentMemory,
    /// Files users give sessions.
    pub attachments: SessionAttachments,
    /// Large files sent in chunks, to attachments or memory.
    pub uploads: uploads::Uploads,
}

impl Space {
    pub fn new(db: SharedDatabase, vfs: &Vfs, limits: &ControlLimits) -> Result<Space, SpaceError> {
        let attachments = SessionAttachments::new(
            vfs,
            limits.max_attachment_bytes,
            limits.max_attachments_per_session,
        );
        Ok(Space {
            tools: ToolDocuments::new(db, limits.max_tools_per_agent)?,
            memory: AgentMemory::new(vfs),
            attachments: attachments.clone(),
            uploads: uploads::Uploads::new(vfs, attachments, AgentMemory::new(vfs), limits),
        })
    }

    /// The Space keeping agents' tool documents in memory while the VM's
    /// handle counts no write to their table (`versions`).
    pub fn keeping(
        mut self,
        versions: std::sync::Arc<agentos_storage::watch::TableVersions>,
    ) -> Space {
        self.tools = self.tools.keeping(versions);
        self
    }
}
