//! The records of an agent's Space in responses: its tool documents as the
//! owner's transparency view (`AgentToolInfo`), and its memory's entries
//! and files.

use ipld_core::ipld::Ipld;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::seed::vocab::{MemoryEncoding, MemoryEntryType, ToolKind};

/// One tool document of an agent's `~/tools`, with its state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentToolInfo {
    pub name: String,
    pub kind: ToolKind,
    pub summary: String,
    pub description: String,
    /// JSON Schema of the input.
    pub input: Ipld,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Ipld>,
    /// A lambda's source, exactly as authored; builtins carry none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// The document's CID; it changes on every edit.
    pub cid: String,
    pub enabled: bool,
    /// A builtin: whether the agent's grants offer it. Always true for a
    /// lambda.
    pub granted: bool,
    pub created_at: i64,
    pub updated_at: i64,
}

/// One file or directory of an agent's memory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentMemoryEntry {
    /// Relative to the memory root, `/`-separated.
    pub path: String,
    #[serde(rename = "type")]
    pub entry_type: MemoryEntryType,
    /// Bytes of a file; 0 for a directory.
    pub size: u64,
    pub updated_at: i64,
    /// From the file name's extension, when it is a known one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

/// One memory file's content: clean UTF-8 text in `content`, anything else
/// in `data`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentMemoryFile {
    pub path: String,
    pub size: u64,
    pub updated_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    pub encoding: MemoryEncoding,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "bytes::serialize",
        deserialize_with = "bytes::deserialize"
    )]
    pub data: Option<Vec<u8>>,
}

/// One file a user gave a session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionAttachmentInfo {
    /// The lower-case SHA-256 hex of its bytes.
    pub id: String,
    pub session_id: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    pub size: u64,
    pub created_at: i64,
}

/// `data` as a CBOR byte string, not a list of numbers.
mod bytes {
    use super::*;

    pub fn serialize<S: Serializer>(
        data: &Option<Vec<u8>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match data {
            Some(bytes) => serializer.serialize_bytes(bytes),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Vec<u8>>, D::Error> {
        match Ipld::deserialize(deserializer)? {
            Ipld::Bytes(bytes) => Ok(Some(bytes)),
            Ipld::Null => Ok(None),
            _ => Err(serde::de::Error::custom("`data` must be bytes")),
        }
    }
}
