//! A comment's body as Seed publishes it: hypermedia block nodes (the
//! `{block, children}` JSON documents and comments are read as) turned into
//! the publishable blocks a `Comment` blob carries. Each kept block has its
//! attributes spread into it and its children inline (`children: []` for a
//! leaf); an empty paragraph with no children and no list type is dropped;
//! annotations keep only their wire fields; a block or annotation type Seed
//! cannot publish in a comment is refused with Seed's own message.
//! [`trim_trailing_empty`] drops the empty paragraphs and headings an editor
//! leaves at the end, as Seed does before publishing. Pure.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;
use serde_json::{Map, Value};

use super::{json_to_ipld, JsonForm, SeedError};

/// Annotation types of which two with different values may not overlap.
const EXCLUSIVE: [&str; 4] = ["TextColor", "BackgroundColor", "TextSize", "TextFamily"];

fn block_of(node: &Value) -> Option<&Map<String, Value>> {
    node.get("block").and_then(Value::as_object)
}

fn children_of(node: &Value) -> &[Value] {
    node.get("children")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn text_of(block: &Map<String, Value>) -> &str {
    block.get("text").and_then(Value::as_str).unwrap_or("")
}

/// `nodes` without the childless paragraphs and headings of blank text at
/// their end.
pub fn trim_trailing_empty(nodes: &[Value]) -> &[Value] {
    let mut end = nodes.len();
    while end > 0 {
        let node = &nodes[end - 1];
        let empty = children_of(node).is_empty()
            && block_of(node).is_some_and(|block| {
                matches!(
                    block.get("type").and_then(Value::as_str),
                    Some("Paragraph" | "Heading")
                ) && text_of(block).trim().is_empty()
            });
        if !empty {
            break;
        }
        end -= 1;
    }
    &nodes[..end]
}

fn ipld(value: &Value) -> Result<Ipld, SeedError> {
    json_to_ipld(value, JsonForm::Plain).map_err(|e| SeedError::bad_action(e.to_string()))
}

fn spans(annotation: &Map<String, Value>) -> Vec<(i64, i64)> {
    let list = |key: &str| -> Vec<i64> {
        annotation
            .get(key)
            .and_then(Value::as_array)
            .map(|items| items.iter().filter_map(Value::as_i64).collect())
            .unwrap_or_default()
    };
    list("starts").into_iter().zip(list("ends")).collect()
}

fn check_exclusive(annotations: &[&Map<String, Value>]) -> Result<(), SeedError> {
    for kind in EXCLUSIVE {
        let of_kind: Vec<_> = annotations
            .iter()
            .filter(|a| a.get("type").and_then(Value::as_str) == Some(kind))
            .collect();
        for (i, a) in of_kind.iter().enumerate() {
            for b in &of_kind[i + 1..] {
                let value = |x: &Map<String, Value>| {
                    x.get("attributes")
                        .and_then(|v| v.get("value"))
                        .and_then(Value::as_str)
                        .filter(|v| !v.is_empty())
                        .map(str::to_owned)
                };
                if value(a).is_some() && value(a) == value(b) {
                    continue;
                }
                let overlap = spans(a)
                    .iter()
                    .any(|(s1, e1)| spans(b).iter().any(|(s2, e2)| s1 < e2 && s2 < e1));
                if overlap {
                    return Err(SeedError::bad_action(format!(
                        "{kind} annotations with different values have overlapping ranges"
                    )));
                }
            }
        }
    }
    Ok(())
}

fn annotations(block: &Map<String, Value>) -> Result<Ipld, SeedError> {
    let list: Vec<&Map<String, Value>> = block
        .get("annotations")
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(Value::as_object).collect())
        .unwrap_or_default();
    check_exclusive(&list)?;
    let mut out = Vec::with_capacity(list.len());
    for annotation in list {
        let kind = annotation.get("type").and_then(Value::as_str).unwrap_or("");
        let mut fields = BTreeMap::from([("type".to_owned(), Ipld::String(kind.to_owned()))]);
        for key in ["starts", "ends"] {
            if let Some(value) = annotation.get(key) {
                fields.insert(key.to_owned(), ipld(value)?);
            }
        }
        match kind {
            "Bold" | "Italic" | "Underline" | "Strike" | "Code" => {}
            "Link" | "Embed" => {
                let link = annotation.get("link").and_then(Value::as_str).unwrap_or("");
                fields.insert("link".into(), Ipld::String(link.to_owned()));
            }
            "TextColor" | "BackgroundColor" | "TextSize" | "TextFamily" => {
                let value = annotation
                    .get("attributes")
                    .and_then(|a| a.get("value"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                fields.insert(
                    "attributes".into(),
                    Ipld::Map(BTreeMap::from([(
                        "value".to_owned(),
                        Ipld::String(value.to_owned()),
                    )])),
                );
            }
            other => {
                return Err(SeedError::bad_action(format!(
                    "Unsupported annotation type: {other}"
                )))
            }
        }
        out.push(Ipld::Map(fields));
    }
    Ok(Ipld::List(out))
}

/// One node as a publishable block; `None` when Seed drops it.
fn publishable(node: &Value) -> Result<Option<Ipld>, SeedError> {
    let Some(block) = block_of(node) else {
        return Err(SeedError::bad_action("a block node has no block"));
    };
    let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
    let children = children_of(node);
    let text = || Ipld::String(text_of(block).to_owned());
    let mut fields = BTreeMap::new();
    let (has_text, has_link, has_annotations) = match kind {
        "Paragraph" => {
            let list = block
                .get("attributes")
                .and_then(|a| a.get("childrenType"))
                .is_some_and(|t| !t.is_null());
            if text_of(block).is_empty() && children.is_empty() && !list {
                return Ok(None);
            }
            (true, false, true)
        }
        "Heading" | "Math" | "Code" => (true, false, true),
        "Image" => (true, true, true),
        "Video" => {
            fields.insert("text".to_owned(), Ipld::String(String::new()));
            (false, true, false)
        }
        "Button" => (true, true, false),
        "File" | "Embed" | "WebEmbed" => (false, true, false),
        other => {
            return Err(SeedError::bad_action(format!(
                "Unsupported block type: {other}"
            )))
        }
    };
    if let Some(id) = block.get("id") {
        fields.insert("id".to_owned(), ipld(id)?);
    }
    fields.insert("type".to_owned(), Ipld::String(kind.to_owned()));
    if has_text {
        fields.insert("text".to_owned(), text());
    }
    if has_link {
        if let Some(link) = block.get("link") {
            fields.insert("link".to_owned(), ipld(link)?);
        }
    }
    if has_annotations {
        fields.insert("annotations".to_owned(), annotations(block)?);
    }
    if let Some(attributes) = block.get("attributes").and_then(Value::as_object) {
        for (key, value) in attributes {
            fields.insert(key.clone(), ipld(value)?);
        }
    }
    fields.insert("children".to_owned(), Ipld::List(blocks(children)?));
    Ok(Some(Ipld::Map(fields)))
}

/// Block nodes as a comment's publishable body.
pub fn blocks(nodes: &[Value]) -> Result<Vec<Ipld>, SeedError> {
    let mut out = Vec::with_capacity(nodes.len());
    for node in nodes {
        if let Some(block) = publishable(node)? {
            out.push(block);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn attributes_are_spread_children_inlined_and_empty_paragraphs_dropped() {
        let nodes = vec![
            json!({"block": {"id": "a", "type": "Heading", "text": "T", "annotations": [],
                             "attributes": {"childrenType": "Group"}},
                   "children": [{"block": {"id": "b", "type": "Paragraph", "text": ""}}]}),
            json!({"block": {"id": "c", "type": "Paragraph", "text": " "}}),
        ];
        let trimmed = trim_trailing_empty(&nodes);
        assert_eq!(trimmed.len(), 1);
        let body = blocks(trimmed).unwrap();
        let Ipld::Map(heading) = &body[0] else {
            panic!("a map")
        };
        assert_eq!(
            heading.get("childrenType"),
            Some(&Ipld::String("Group".into()))
        );
        assert_eq!(heading.get("children"), Some(&Ipld::List(vec![])));
    }

    #[test]
    fn what_seed_cannot_publish_is_refused_in_its_words() {
        let table = vec![json!({"block": {"id": "t", "type": "Table"}})];
        assert_eq!(
            blocks(&table).unwrap_err().to_string(),
            "Unsupported block type: Table"
        );
        let colors = vec![
            json!({"block": {"id": "p", "type": "Paragraph", "text": "abcdef",
            "annotations": [
                {"type": "TextColor", "starts": [0], "ends": [4], "attributes": {"value": "red"}},
                {"type": "TextColor", "starts": [2], "ends": [6], "attributes": {"value": "blue"}}
            ]}}),
        ];
        assert_eq!(
            blocks(&colors).unwrap_err().to_string(),
            "TextColor annotations with different values have overlapping ranges"
        );
    }
}
