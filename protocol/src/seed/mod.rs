//! The Seed Agents signed control plane, as bytes: canonical DAG-CBOR,
//! principals, the signed action envelope, Capability blobs, typed actions,
//! responses, WebSocket events and tool documents, and the one conversion
//! between JSON and IPLD ([`ipld_json`]). Pure: no I/O, no clock, no
//! storage.
//!
//! A request travels: bytes → [`Envelope::decode`] (bounded, shape only) →
//! [`Envelope::verify_signature`] and [`Envelope::ts_ms`] (the server checks
//! the window, replay and the signer's authority, using [`Capability`] when
//! the envelope carries one) → [`Envelope::typed_action`] → a service call →
//! a response struct → [`encode_response`].

pub mod action;
pub mod blobs;
pub mod block_diff;
pub mod capability;
pub mod cbor;
pub mod code;
mod envelope;
mod error;
pub mod event;
pub mod hm_id;
pub mod ipld_json;
pub mod markdown;
pub mod model;
mod principal;
pub mod publishable;
pub mod response;
pub mod superjson;
pub mod text;
pub mod tool;
pub mod unixfs;
pub mod vocab;
pub mod ws;

pub use action::{
    Action, AgentDefinition, AgentToolInput, ContentPart, FileUploadTarget, MemoryContent,
    ModelProviderConfig, SessionListCursor, SystemPrompt,
};
pub use capability::{cid_of, Capability, Role};
pub use code::ApiCode;
pub use ed25519_dalek::{SigningKey, VerifyingKey};
pub use envelope::{generate_signing_key, ActionMap, Envelope, ENVELOPE_TYPE, SIGNATURE_LEN};
pub use error::SeedError;
pub use ipld_core::ipld::Ipld;
pub use ipld_json::{ipld_to_json, json_to_ipld, json_to_ipld_clipped, IpldJsonError, JsonForm};
pub use principal::{Principal, ED25519_PREFIX, PRINCIPAL_LEN};
pub use response::{encode_response, try_encode_response, ErrorResponse};
pub use tool::{ToolDocument, MAX_TOOL_DOCUMENT_BYTES};

/// The Seed Agents protocol version spoken here (`X-Agents-Protocol`, and an
/// envelope's `protocol`).
pub const PROTOCOL_VERSION: u64 = 2;
