//! The values inside the Space actions (an agent's tools and memory): an
//! authored tool as a client sends it, and a memory file's content.
//!
//! Read strictly like every action value (unknown fields refused, errors
//! naming the field) and written with absent fields left out.

use ipld_core::ipld::Ipld;
use serde::{Serialize, Serializer};

use super::fields::{wrong_type, Fields, FromField};
use crate::seed::tool::req_map;
use crate::seed::SeedError;

/// An authored (lambda) tool as `SaveAgentTool` carries it. The server
/// makes it a tool document: the name is checked, the schemas are
/// shape-checked, and an absent summary comes from the description.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentToolInput {
    pub name: String,
    /// One line for listings; the description's first sentence when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    pub description: String,
    /// JSON Schema of the input, a map.
    pub input: Ipld,
    /// JSON Schema of the result, a map.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Ipld>,
    pub source: String,
    /// `typescript` (the default) or `python`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// Absent: a new tool is enabled and an edit keeps what was set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

impl FromField for AgentToolInput {
    fn from_field(value: Ipld, path: &str) -> Result<Self, SeedError> {
        let mut f = Fields::nested(value, path)?;
        let tool = AgentToolInput {
            name: f.req("name")?,
            summary: f.opt("summary")?,
            description: f.req("description")?,
            input: req_map(&mut f, "input")?,
            output: f.opt_map("output")?,
            source: f.req("source")?,
            runtime: f.opt("runtime")?,
            enabled: f.opt("enabled")?,
        };
        f.finish()?;
        Ok(tool)
    }
}

/// What `WriteAgentMemoryFile` stores: text (kept as UTF-8) or bytes (kept
/// verbatim).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemoryContent {
    Text(String),
    Bytes(Vec<u8>),
}

impl MemoryContent {
    /// The bytes to store.
    pub fn into_bytes(self) -> Vec<u8> {
        match self {
            MemoryContent::Text(text) => text.into_bytes(),
            MemoryContent::Bytes(bytes) => bytes,
        }
    }
}

impl FromField for MemoryContent {
    fn from_field(value: Ipld, path: &str) -> Result<Self, SeedError> {
        match value {
            Ipld::String(text) => Ok(MemoryContent::Text(text)),
            Ipld::Bytes(bytes) => Ok(MemoryContent::Bytes(bytes)),
            _ => Err(wrong_type(path, "a string or bytes")),
        }
    }
}

impl Serialize for MemoryContent {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            MemoryContent::Text(text) => serializer.serialize_str(text),
            MemoryContent::Bytes(bytes) => serializer.serialize_bytes(bytes),
        }
    }
}
