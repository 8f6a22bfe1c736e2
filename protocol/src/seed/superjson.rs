//! The superjson envelope a Seed hypermedia server answers in:
//! `{"json": …, "meta": {"values": …}}`, where `meta.values` annotates the
//! paths whose JSON stands for something JSON cannot carry. Decoding gives
//! plain JSON as the agents' tool output shows it: a bigint is its decimal
//! string, a Date its ISO string, bytes an array of numbers, an `undefined`
//! member is absent (a `null` in an array). `referentialEqualities` only
//! restores object identity; the data is already at every path, so it is
//! ignored. An unknown annotation is an error, as it is for the reference.

use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SuperjsonError {
    #[error("the answer is not a superjson object")]
    NotAnEnvelope,
    #[error("Unknown transformation: {0}")]
    UnknownTransformation(String),
    #[error("malformed superjson annotations: {0}")]
    Malformed(&'static str),
}

/// The plain value of a superjson answer.
pub fn decode(mut answer: Value) -> Result<Value, SuperjsonError> {
    let Value::Object(envelope) = &mut answer else {
        return Err(SuperjsonError::NotAnEnvelope);
    };
    // An answer with no `json` member (an `{error}` body) is `undefined`.
    let Some(mut json) = envelope.remove("json") else {
        return Err(SuperjsonError::NotAnEnvelope);
    };
    let values = envelope
        .get_mut("meta")
        .and_then(|meta| meta.get_mut("values"))
        .map(Value::take);
    if let Some(tree) = values {
        apply_tree(&mut json, &tree, &mut Vec::new())?;
    }
    Ok(json)
}

/// A tree is either a map from paths to subtrees or a node
/// `[annotation, children?]`, whose children are applied first.
fn apply_tree(
    root: &mut Value,
    tree: &Value,
    origin: &mut Vec<String>,
) -> Result<(), SuperjsonError> {
    match tree {
        Value::Object(map) => {
            for (key, subtree) in map {
                let depth = origin.len();
                origin.extend(parse_path(key));
                apply_tree(root, subtree, origin)?;
                origin.truncate(depth);
            }
            Ok(())
        }
        Value::Array(node) => {
            let (annotation, children) = match node.as_slice() {
                [annotation] => (annotation, None),
                [annotation, children] => (annotation, Some(children)),
                _ => return Err(SuperjsonError::Malformed("a node has one or two members")),
            };
            if let Some(children) = children {
                if !children.is_object() {
                    return Err(SuperjsonError::Malformed("a node's children are a map"));
                }
                apply_tree(root, children, origin)?;
            }
            apply(root, origin, annotation)
        }
        _ => Err(SuperjsonError::Malformed(
            "an annotation tree is a map or a node",
        )),
    }
}

/// Splits a path on `.`, except `\.`, which is a literal dot.
fn parse_path(path: &str) -> Vec<String> {
    let mut segments = Vec::new();
    let mut current = String::new();
    let mut chars = path.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'.') => {
                current.push('.');
                chars.next();
            }
            '.' => segments.push(std::mem::take(&mut current)),
            c => current.push(c),
        }
    }
    segments.push(current);
    segments
}

/// What one annotation turns its value into.
enum Untransform {
    Remove,
    Replace(Value),
    Keep,
}

fn untransform(annotation: &Value, value: &Value) -> Result<Untransform, SuperjsonError> {
    let name = match annotation {
        Value::String(name) => name.as_str(),
        Value::Array(parts) => match parts.first().and_then(Value::as_str) {
            Some("typed-array") => return Ok(Untransform::Keep),
            Some(other) => return Err(SuperjsonError::UnknownTransformation(other.to_owned())),
            None => return Err(SuperjsonError::Malformed("an annotation is a name")),
        },
        _ => return Err(SuperjsonError::Malformed("an annotation is a name")),
    };
    Ok(match name {
        "undefined" => Untransform::Remove,
        "bigint" => match value {
            Value::String(digits) if is_integer(digits) => Untransform::Keep,
            Value::Number(n) if n.is_i64() || n.is_u64() => {
                Untransform::Replace(Value::String(n.to_string()))
            }
            _ => return Err(SuperjsonError::Malformed("a bigint is a decimal string")),
        },
        "Date" => match value {
            Value::String(_) => Untransform::Keep,
            _ => return Err(SuperjsonError::Malformed("a Date is an ISO string")),
        },
        // NaN and the infinities have no JSON; -0 is 0.
        "number" => Untransform::Replace(match value.as_str() {
            Some("-0") => Value::from(0),
            _ => Value::Null,
        }),
        "regexp" | "URL" | "set" | "map" | "Error" => Untransform::Keep,
        other => return Err(SuperjsonError::UnknownTransformation(other.to_owned())),
    })
}

fn is_integer(digits: &str) -> bool {
    let unsigned = digits.strip_prefix('-').unwrap_or(digits);
    !unsigned.is_empty() && unsigned.bytes().all(|b| b.is_ascii_digit())
}

/// Applies `annotation` at `path`; a path that leads nowhere changes
/// nothing.
fn apply(root: &mut Value, path: &[String], annotation: &Value) -> Result<(), SuperjsonError> {
    let Some((last, parents)) = path.split_last() else {
        // The root itself: `undefined` at the root is no value at all.
        return match untransform(annotation, root)? {
            Untransform::Remove => Err(SuperjsonError::NotAnEnvelope),
            Untransform::Replace(value) => {
                *root = value;
                Ok(())
            }
            Untransform::Keep => Ok(()),
        };
    };
    let mut parent = root;
    for segment in parents {
        parent = match parent {
            Value::Object(map) => match map.get_mut(segment) {
                Some(child) => child,
                None => return Ok(()),
            },
            Value::Array(items) => {
                match segment.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                    Some(child) => child,
                    None => return Ok(()),
                }
            }
            _ => return Ok(()),
        };
    }
    match parent {
        Value::Object(map) => {
            let Some(value) = map.get(last) else {
                return Ok(());
            };
            match untransform(annotation, value)? {
                Untransform::Remove => {
                    map.remove(last);
                }
                Untransform::Replace(new) => {
                    map.insert(last.clone(), new);
                }
                Untransform::Keep => {}
            }
        }
        Value::Array(items) => {
            let Some(value) = last.parse::<usize>().ok().and_then(|i| items.get_mut(i)) else {
                return Ok(());
            };
            match untransform(annotation, value)? {
                Untransform::Remove => *value = Value::Null,
                Untransform::Replace(new) => *value = new,
                Untransform::Keep => {}
            }
        }
        _ => {}
    }
    Ok(())
}

/// An answer as a server would send it with no annotations: for tests and
/// scripted servers.
pub fn plain(json: Value) -> Value {
    let mut envelope = Map::new();
    envelope.insert("json".into(), json);
    Value::Object(envelope)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn annotations_become_plain_json() {
        let answer = json!({
            "json": {"document": {"generationInfo": {"generation": "1767225600000"}},
                     "u": null, "x": 1, "list": [null, "5"], "when": "2026-03-01T10:00:00.000Z",
                     "bytes": [1, 2, 3], "nan": "NaN", "dotted": {"a.b": {"c": "7"}}},
            "meta": {"values": {
                "document.generationInfo.generation": ["bigint"],
                "u": ["undefined"],
                "list.0": ["undefined"], "list.1": ["bigint"],
                "when": ["Date"],
                "bytes": [["typed-array", "Uint8Array"]],
                "nan": ["number"],
                "dotted.a\\.b.c": ["bigint"],
                "missing.path": ["bigint"]
            }, "referentialEqualities": {"x": ["y"]}}
        });
        assert_eq!(
            decode(answer).unwrap(),
            json!({"document": {"generationInfo": {"generation": "1767225600000"}},
                   "x": 1, "list": [null, "5"], "when": "2026-03-01T10:00:00.000Z",
                   "bytes": [1, 2, 3], "nan": null, "dotted": {"a.b": {"c": "7"}}})
        );
    }

    #[test]
    fn a_root_annotation_and_nested_children_apply() {
        assert_eq!(
            decode(json!({"json": "5", "meta": {"values": ["bigint"]}})).unwrap(),
            json!("5")
        );
        let map = json!({"json": {"m": [["k", "1"]]},
                         "meta": {"values": {"m": ["map", {"0.1": ["bigint"]}]}}});
        assert_eq!(decode(map).unwrap(), json!({"m": [["k", "1"]]}));
        assert_eq!(decode(plain(json!([1]))).unwrap(), json!([1]));
    }

    #[test]
    fn bad_envelopes_and_unknown_annotations_are_errors() {
        assert_eq!(
            decode(json!({"error": "boom"})),
            Err(SuperjsonError::NotAnEnvelope)
        );
        assert_eq!(decode(json!([1])), Err(SuperjsonError::NotAnEnvelope));
        assert_eq!(
            decode(json!({"json": {"a": 1}, "meta": {"values": {"a": [["class", "X"]]}}})),
            Err(SuperjsonError::UnknownTransformation("class".into()))
        );
        assert_eq!(
            decode(json!({"json": {"a": "x"}, "meta": {"values": {"a": ["bigint"]}}})),
            Err(SuperjsonError::Malformed("a bigint is a decimal string"))
        );
        assert_eq!(
            decode(json!({"json": {"a": 1}, "meta": {"values": {"a": ["symbol", "X"]}}})),
            Err(SuperjsonError::Malformed("a node's children are a map"))
        );
        assert!(decode(json!({"json": {"a": 1}, "meta": {"values": {"a": [1, 2, 3]}}})).is_err());
    }
}
