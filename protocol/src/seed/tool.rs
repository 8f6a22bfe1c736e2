//! Tool documents: every tool an agent holds, as a content-addressed
//! document in its Space (`~/tools/<name>`).
//!
//! A document is `{name, kind, summary, description, input, output?,
//! source?, runtime?, binding?}`, the reference's field names, written as
//! canonical DAG-CBOR with absent fields left out. Its CID is that
//! encoding's CIDv1 (dag-cbor, sha2-256) in base32 (`b…`), computed by the
//! same code that names Capability blobs ([`cid_of`]), so "what exactly can
//! this agent run" has one answer, and an edit always changes it.
//!
//! A builtin's implementation is a binding to code the server ships
//! (`binding`); a lambda carries its `source` and `runtime`. The schemas
//! (`input`, `output`) are JSON Schema kept as sent; this module does not
//! judge them.

use ipld_core::ipld::Ipld;
use serde::Serialize;

use super::action::fields::{wrong_type, Fields, FromField};
use super::vocab::ToolKind;
use super::{cbor, cid_of, SeedError};

/// Largest encoded tool document: a lambda's source (at most 256 KiB), its
/// description (16 KiB) and its schemas fit well within it.
pub const MAX_TOOL_DOCUMENT_BYTES: usize = 512 * 1024;

/// One tool document.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolDocument {
    pub name: String,
    pub kind: ToolKind,
    /// One line, for listings and the Space index.
    pub summary: String,
    /// The full model-facing instructions.
    pub description: String,
    /// JSON Schema of the tool's input (a map).
    pub input: Ipld,
    /// JSON Schema of what the tool returns, when it declares one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Ipld>,
    /// A lambda's source, exactly as authored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// A lambda's source language (`typescript` or `python`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// A builtin's executor, by name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binding: Option<String>,
}

impl ToolDocument {
    /// The canonical DAG-CBOR bytes (what the CID names).
    pub fn encode(&self) -> Result<Vec<u8>, SeedError> {
        cbor::to_canonical(self)
    }

    /// The CIDv1 (dag-cbor, sha2-256) of [`ToolDocument::encode`], in
    /// base32. Fails only as encoding does (a schema holding a float DAG-CBOR
    /// cannot carry).
    pub fn cid(&self) -> Result<String, SeedError> {
        Ok(cid_of(&self.encode()?))
    }

    /// Reads a document back from its bytes, strictly: a missing, unknown
    /// or mistyped field is refused, naming it.
    pub fn decode(bytes: &[u8]) -> Result<ToolDocument, SeedError> {
        let value: Ipld = cbor::from_slice(bytes, MAX_TOOL_DOCUMENT_BYTES)?;
        ToolDocument::from_field(value, "document")
    }
}

impl FromField for ToolDocument {
    fn from_field(value: Ipld, path: &str) -> Result<Self, SeedError> {
        let mut f = Fields::nested(value, path)?;
        let document = ToolDocument {
            name: f.req("name")?,
            kind: f.req("kind")?,
            summary: f.req("summary")?,
            description: f.req("description")?,
            input: req_map(&mut f, "input")?,
            output: f.opt_map("output")?,
            source: f.opt("source")?,
            runtime: f.opt("runtime")?,
            binding: f.opt("binding")?,
        };
        f.finish()?;
        Ok(document)
    }
}

/// A required field that must be a map, kept as sent.
pub(crate) fn req_map(f: &mut Fields, key: &str) -> Result<Ipld, SeedError> {
    let path = f.path(key);
    match f.req::<Ipld>(key)? {
        map @ Ipld::Map(_) => Ok(map),
        _ => Err(wrong_type(&path, "a map")),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn s(text: &str) -> Ipld {
        Ipld::String(text.to_owned())
    }

    fn schema() -> Ipld {
        let query = Ipld::Map(BTreeMap::from([("type".to_owned(), s("string"))]));
        Ipld::Map(BTreeMap::from([
            ("type".to_owned(), s("object")),
            (
                "properties".to_owned(),
                Ipld::Map(BTreeMap::from([("query".to_owned(), query)])),
            ),
            ("required".to_owned(), Ipld::List(vec![s("query")])),
        ]))
    }

    fn lambda() -> ToolDocument {
        ToolDocument {
            name: "word_count".into(),
            kind: ToolKind::Lambda,
            summary: "Counts words.".into(),
            description: "Counts the words of `query`.".into(),
            input: schema(),
            output: None,
            source: Some("export default (input) => input.query.split(' ').length".into()),
            runtime: Some("typescript".into()),
            binding: None,
        }
    }

    #[test]
    fn the_cid_of_a_document_is_pinned() {
        // A vector: this document's canonical bytes and CID must never
        // change, or every stored tool would look edited. The value was
        // also derived by a separate hand-written canonical encoder.
        let document = lambda();
        let bytes = document.encode().unwrap();
        assert_eq!(
            document.cid().unwrap(),
            "bafyreicd5yad4hdhrkfd4hhx7mw2leu4xfa2toloxnrk5i6cuhpu65su7u"
        );
        assert_eq!(document.cid().unwrap(), cid_of(&bytes));
        // Keys are sorted length first; absent fields are left out.
        let decoded: Ipld = cbor::from_slice(&bytes, MAX_TOOL_DOCUMENT_BYTES).unwrap();
        let Ipld::Map(map) = decoded else {
            panic!("a map")
        };
        let keys: Vec<&str> = map.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "description",
                "input",
                "kind",
                "name",
                "runtime",
                "source",
                "summary"
            ]
        );
        assert_eq!(&bytes[..2], &[0xa7, 0x64]);
        assert_eq!(&bytes[2..6], b"kind");
    }

    #[test]
    fn an_edit_changes_the_cid_and_nothing_else_does() {
        let original = lambda();
        assert_eq!(original.cid().unwrap(), lambda().cid().unwrap());
        let mut edited = lambda();
        edited.source = Some("export default () => 0".into());
        assert_ne!(original.cid().unwrap(), edited.cid().unwrap());
    }

    #[test]
    fn documents_round_trip_and_decode_strictly() {
        let builtin = ToolDocument {
            name: "search".into(),
            kind: ToolKind::Builtin,
            summary: "Search.".into(),
            description: "Searches.".into(),
            input: schema(),
            output: Some(schema()),
            source: None,
            runtime: None,
            binding: Some("search".into()),
        };
        for document in [lambda(), builtin] {
            let bytes = document.encode().unwrap();
            assert_eq!(ToolDocument::decode(&bytes).unwrap(), document);
        }
        let mut extra = match ipld_core::serde::to_ipld(lambda()).unwrap() {
            Ipld::Map(map) => map,
            _ => panic!("a map"),
        };
        extra.insert("author".into(), s("me"));
        let bytes = cbor::to_canonical(&extra).unwrap();
        let error = ToolDocument::decode(&bytes).unwrap_err();
        assert_eq!(error.to_string(), "unknown field `document.author`");
        extra.remove("author");
        extra.insert("kind".into(), s("macro"));
        let bytes = cbor::to_canonical(&extra).unwrap();
        let error = ToolDocument::decode(&bytes).unwrap_err();
        assert_eq!(
            error.to_string(),
            "`document.kind` must be one of \"builtin\", \"lambda\", \"mcp\""
        );
        extra.insert("kind".into(), s("lambda"));
        extra.insert("input".into(), s("{}"));
        let bytes = cbor::to_canonical(&extra).unwrap();
        let error = ToolDocument::decode(&bytes).unwrap_err();
        assert_eq!(error.to_string(), "`document.input` must be a map");
        assert_eq!(
            ToolDocument::decode(b"\xff").unwrap_err().code(),
            "bad_cbor"
        );
    }
}
