//! A document update as Seed's client computes it: the operations that
//! turn a document's current blocks into new ones, matched by block id.
//! A block whose id is new is replaced in; a known one only when its
//! content differs (type, text, link, annotations, list type, language,
//! other attributes); every level ends with one `MoveBlocks` putting its
//! blocks in order under their parent; blocks of the old document that
//! appear nowhere in the new one are deleted in one `DeleteBlocks`.
//! Both sides are hypermedia block nodes (`{block, children}` JSON, as
//! documents are read and as [`super::markdown`] makes them). Pure.
//!
//! Seed also re-derives table cell ids from their row and column when a
//! table is rewritten from markdown; here a table's blocks are matched by
//! their own ids like every other block.

use serde_json::{json, Map, Value};

fn block_of(node: &Value) -> &Map<String, Value> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    node.get("block")
        .and_then(Value::as_object)
        .unwrap_or_else(|| EMPTY.get_or_init(Map::new))
}

fn children_of(node: &Value) -> &[Value] {
    node.get("children")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn str_of<'a>(map: &'a Map<String, Value>, key: &str) -> &'a str {
    map.get(key).and_then(Value::as_str).unwrap_or("")
}

fn attributes(block: &Map<String, Value>) -> Map<String, Value> {
    block
        .get("attributes")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// Attributes other than the list type and the language.
fn extra(mut attributes: Map<String, Value>) -> Map<String, Value> {
    attributes.remove("childrenType");
    attributes.remove("language");
    attributes
}

/// Every old block by id, in document order (a block before its
/// children).
fn old_blocks<'a>(nodes: &'a [Value], out: &mut Vec<(&'a str, &'a Map<String, Value>)>) {
    for node in nodes {
        let block = block_of(node);
        let id = str_of(block, "id");
        if id.is_empty() {
            continue;
        }
        out.push((id, block));
        old_blocks(children_of(node), out);
    }
}

/// The new block as a `ReplaceBlock` carries it: attributes inlined.
fn replacement(block: &Map<String, Value>) -> Value {
    let attributes = attributes(block);
    let mut out = extra(attributes.clone());
    out.insert("type".into(), json!(str_of(block, "type")));
    out.insert("id".into(), json!(str_of(block, "id")));
    out.insert("text".into(), json!(str_of(block, "text")));
    out.insert(
        "annotations".into(),
        block.get("annotations").cloned().unwrap_or(json!([])),
    );
    for key in ["language", "childrenType"] {
        if let Some(value) = attributes.get(key).filter(|v| v.as_str() != Some("")) {
            out.insert(key.into(), value.clone());
        }
    }
    if let Some(link) = block.get("link").filter(|v| v.as_str() != Some("")) {
        out.insert("link".into(), link.clone());
    }
    Value::Object(out)
}

fn same_content(old: &Map<String, Value>, new: &Map<String, Value>) -> bool {
    let annotations = |b: &Map<String, Value>| b.get("annotations").cloned().unwrap_or(json!([]));
    let (old_attrs, new_attrs) = (attributes(old), attributes(new));
    let attr = |a: &Map<String, Value>, key: &str| str_of(a, key).to_owned();
    str_of(old, "type") == str_of(new, "type")
        && str_of(old, "text") == str_of(new, "text")
        && str_of(old, "link") == str_of(new, "link")
        && annotations(old) == annotations(new)
        && attr(&old_attrs, "childrenType") == attr(&new_attrs, "childrenType")
        && attr(&old_attrs, "language") == attr(&new_attrs, "language")
        && extra(old_attrs) == extra(new_attrs)
}

fn level(
    old: &[(&str, &Map<String, Value>)],
    nodes: &[Value],
    parent: &str,
    touched: &mut Vec<String>,
    ops: &mut Vec<Value>,
) {
    let mut ids = Vec::with_capacity(nodes.len());
    for node in nodes {
        let block = block_of(node);
        let id = str_of(block, "id").to_owned();
        touched.push(id.clone());
        ids.push(id.clone());
        let known = old.iter().find(|(old_id, _)| *old_id == id);
        if known.is_none_or(|(_, old_block)| !same_content(old_block, block)) {
            ops.push(json!({"type": "ReplaceBlock", "block": replacement(block)}));
        }
        let children = children_of(node);
        if !children.is_empty() {
            level(old, children, &id, touched, ops);
        }
    }
    if !ids.is_empty() {
        ops.push(json!({"type": "MoveBlocks", "blocks": ids, "parent": parent}));
    }
}

/// The operations that make `old` (a document's content) into `new`.
pub fn replace_ops(old: &[Value], new: &[Value]) -> Vec<Value> {
    let mut known = Vec::new();
    old_blocks(old, &mut known);
    let mut touched = Vec::new();
    let mut ops = Vec::new();
    level(&known, new, "", &mut touched, &mut ops);
    let mut deleted: Vec<&str> = Vec::new();
    for (id, _) in &known {
        if !touched.iter().any(|t| t == id) && !deleted.contains(id) {
            deleted.push(id);
        }
    }
    if !deleted.is_empty() {
        ops.push(json!({"type": "DeleteBlocks", "blocks": deleted}));
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paragraph(id: &str, text: &str) -> Value {
        json!({"block": {"type": "Paragraph", "id": id, "text": text, "annotations": [],
                         "attributes": {}}, "children": []})
    }

    #[test]
    fn only_what_changed_is_replaced_and_what_went_is_deleted() {
        let old = vec![
            json!({"block": {"type": "Heading", "id": "h", "text": "Title",
                             "attributes": {"childrenType": "Group"}},
                   "children": [paragraph("a", "one"), paragraph("b", "two")]}),
            paragraph("c", "three"),
        ];
        let new = vec![
            json!({"block": {"type": "Heading", "id": "h", "text": "Title", "annotations": [],
                             "attributes": {"childrenType": "Group"}},
                   "children": [paragraph("a", "one"), paragraph("n", "new")]}),
        ];
        assert_eq!(
            replace_ops(&old, &new),
            vec![
                json!({"type": "ReplaceBlock", "block": {"type": "Paragraph", "id": "n",
                       "text": "new", "annotations": []}}),
                json!({"type": "MoveBlocks", "blocks": ["a", "n"], "parent": "h"}),
                json!({"type": "MoveBlocks", "blocks": ["h"], "parent": ""}),
                json!({"type": "DeleteBlocks", "blocks": ["b", "c"]}),
            ]
        );
    }

    #[test]
    fn an_edited_block_is_replaced_with_its_attributes_inlined() {
        let old = vec![paragraph("a", "one")];
        let new = vec![json!({"block": {"type": "Code", "id": "a", "text": "x",
                                        "attributes": {"language": "rust", "width": 3}}})];
        assert_eq!(
            replace_ops(&old, &new)[0],
            json!({"type": "ReplaceBlock", "block": {"type": "Code", "id": "a", "text": "x",
                   "annotations": [], "language": "rust", "width": 3}})
        );
    }
}
