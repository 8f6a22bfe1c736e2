//! The small JSON Schema subset tool contracts are written in. Schemas
//! travel as IPLD and are checked as JSON; the conversion between the two
//! is the protocol's one ([`agentos_protocol::seed::ipld_json`]).
//!
//! A tool's `input` and `output` schemas are checked for shape when a tool
//! is saved ([`shape_check`]): a map whose root type is `object`, only the
//! keywords below, values of the right kinds, at most [`MAX_SCHEMA_DEPTH`]
//! nested schemas. Anything else is refused rather than ignored, so a
//! contract never claims a rule nobody enforces. [`validate`] checks a
//! value against such a schema and reports every error as
//! `"/pointer: message"` (a JSON Pointer to the offending value), which is
//! what a model needs to fix its call.
//!
//! Keywords: `type` (a name or a list of names), `properties`, `required`,
//! `items`, `enum`, `minimum`, `maximum`, `minLength`, `maxLength`,
//! `additionalProperties` (a boolean or a schema); annotations that change
//! nothing: `description`, `default`, `title`, `format`.

use serde_json::{Map, Value};

/// Deepest nesting of schemas inside one another.
pub const MAX_SCHEMA_DEPTH: usize = 16;

/// Errors reported by one [`validate`] call at most; the rest are counted.
pub const MAX_REPORTED_ERRORS: usize = 64;

const KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "items",
    "enum",
    "description",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "additionalProperties",
    "default",
    "title",
    "format",
];

const TYPES: &[&str] = &[
    "string", "number", "integer", "boolean", "object", "array", "null",
];

/// Checks that `schema` is a schema of the subset, rooted at an object.
/// The error names every problem found, `"/pointer: message"`, joined by
/// `"; "`.
pub fn shape_check(schema: &Value) -> Result<(), String> {
    let mut errors = Vec::new();
    if let Value::Object(map) = schema {
        match map.get("type") {
            None => {}
            Some(Value::String(kind)) if kind == "object" => {}
            Some(_) => errors.push(
                "/type: the root must be of type \"object\" (wrap other values in a property)"
                    .to_owned(),
            ),
        }
    }
    shape(schema, "", 1, &mut errors);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

fn at(pointer: &str) -> &str {
    if pointer.is_empty() {
        "/"
    } else {
        pointer
    }
}

/// A JSON Pointer reference token (`~` and `/` escaped).
fn token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn shape(schema: &Value, pointer: &str, depth: usize, errors: &mut Vec<String>) {
    let Value::Object(map) = schema else {
        errors.push(format!("{}: a schema must be an object", at(pointer)));
        return;
    };
    if depth > MAX_SCHEMA_DEPTH {
        errors.push(format!(
            "{}: schemas nest deeper than {MAX_SCHEMA_DEPTH} levels",
            at(pointer)
        ));
        return;
    }
    for (key, value) in map {
        let here = format!("{pointer}/{}", token(key));
        match key.as_str() {
            "type" => check_type(value, &here, errors),
            "properties" => match value {
                Value::Object(properties) => {
                    for (name, child) in properties {
                        shape(child, &format!("{here}/{}", token(name)), depth + 1, errors);
                    }
                }
                _ => errors.push(format!("{here}: must be an object of schemas")),
            },
            "required" => {
                let names = value
                    .as_array()
                    .filter(|names| names.iter().all(Value::is_string));
                if names.is_none() {
                    errors.push(format!("{here}: must be a list of property names"));
                }
            }
            "items" => shape(value, &here, depth + 1, errors),
            "additionalProperties" => match value {
                Value::Bool(_) => {}
                Value::Object(_) => shape(value, &here, depth + 1, errors),
                _ => errors.push(format!("{here}: must be a boolean or a schema")),
            },
            "enum" => {
                if value.as_array().is_none_or(Vec::is_empty) {
                    errors.push(format!("{here}: must be a non-empty list"));
                }
            }
            "minimum" | "maximum" => {
                if !value.is_number() {
                    errors.push(format!("{here}: must be a number"));
                }
            }
            "minLength" | "maxLength" => {
                if value.as_u64().is_none() {
                    errors.push(format!("{here}: must be a non-negative integer"));
                }
            }
            "description" | "title" | "format" => {
                if !value.is_string() {
                    errors.push(format!("{here}: must be a string"));
                }
            }
            "default" => {}
            _ => errors.push(format!(
                "{here}: unsupported keyword (supported: {})",
                KEYWORDS.join(", ")
            )),
        }
    }
}

fn check_type(value: &Value, pointer: &str, errors: &mut Vec<String>) {
    let names: Vec<&Value> = match value {
        Value::Array(names) if !names.is_empty() => names.iter().collect(),
        Value::Array(_) => {
            errors.push(format!("{pointer}: must name at least one type"));
            return;
        }
        other => vec![other],
    };
    for name in names {
        match name.as_str() {
            Some(name) if TYPES.contains(&name) => {}
            _ => errors.push(format!(
                "{pointer}: unknown type {name} (one of {})",
                TYPES.join(", ")
            )),
        }
    }
}

/// Checks `value` against `schema` (assumed to have passed
/// [`shape_check`]; unknown keywords are ignored here). Every error is
/// `"/pointer: message"`; an empty list means the value is valid. At most
/// [`MAX_REPORTED_ERRORS`] are listed, then one line says how many more.
pub fn validate(schema: &Value, value: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    let mut more = 0usize;
    check(schema, value, "", 1, &mut errors, &mut more);
    if more > 0 {
        errors.push(format!("/: and {more} more errors"));
    }
    errors
}

fn push(errors: &mut Vec<String>, more: &mut usize, error: String) {
    if errors.len() < MAX_REPORTED_ERRORS {
        errors.push(error);
    } else {
        *more += 1;
    }
}

fn check(
    schema: &Value,
    value: &Value,
    pointer: &str,
    depth: usize,
    errors: &mut Vec<String>,
    more: &mut usize,
) {
    let Value::Object(schema) = schema else {
        return;
    };
    // A schema deeper than shape_check allows was never accepted; stop
    // rather than recurse without bound.
    if depth > MAX_SCHEMA_DEPTH {
        return;
    }
    if let Some(types) = schema.get("type") {
        let names: Vec<&str> = match types {
            Value::Array(names) => names.iter().filter_map(Value::as_str).collect(),
            Value::String(name) => vec![name.as_str()],
            _ => Vec::new(),
        };
        if !names.is_empty() && !names.iter().any(|name| is_type(name, value)) {
            let error = format!(
                "{}: expected {}, got {}",
                at(pointer),
                names.join(" or "),
                type_of(value)
            );
            push(errors, more, error);
            return;
        }
    }
    if let Some(Value::Array(allowed)) = schema.get("enum") {
        if !allowed.iter().any(|candidate| same(candidate, value)) {
            let listed: Vec<String> = allowed.iter().map(Value::to_string).collect();
            let error = format!("{}: must be one of {}", at(pointer), listed.join(", "));
            push(errors, more, error);
            return;
        }
    }
    match value {
        Value::String(text) => {
            let length = text.chars().count() as u64;
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64) {
                if length < min {
                    let error = format!("{}: shorter than {min} characters", at(pointer));
                    push(errors, more, error);
                }
            }
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64) {
                if length > max {
                    let error = format!("{}: longer than {max} characters", at(pointer));
                    push(errors, more, error);
                }
            }
        }
        Value::Number(number) => {
            let Some(n) = number.as_f64() else { return };
            if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
                if n < min {
                    push(
                        errors,
                        more,
                        format!("{}: below the minimum {min}", at(pointer)),
                    );
                }
            }
            if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
                if n > max {
                    push(
                        errors,
                        more,
                        format!("{}: above the maximum {max}", at(pointer)),
                    );
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter().enumerate() {
                    let here = format!("{pointer}/{index}");
                    check(item_schema, item, &here, depth + 1, errors, more);
                }
            }
        }
        Value::Object(fields) => check_object(schema, fields, pointer, depth, errors, more),
        Value::Null | Value::Bool(_) => {}
    }
}

fn check_object(
    schema: &Map<String, Value>,
    fields: &Map<String, Value>,
    pointer: &str,
    depth: usize,
    errors: &mut Vec<String>,
    more: &mut usize,
) {
    if let Some(Value::Array(required)) = schema.get("required") {
        for name in required.iter().filter_map(Value::as_str) {
            if !fields.contains_key(name) {
                let error = format!("{pointer}/{}: is required", token(name));
                push(errors, more, error);
            }
        }
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    for (name, field) in fields {
        let here = format!("{pointer}/{}", token(name));
        match properties.and_then(|p| p.get(name)) {
            Some(field_schema) => check(field_schema, field, &here, depth + 1, errors, more),
            None => match schema.get("additionalProperties") {
                Some(Value::Bool(false)) => {
                    push(errors, more, format!("{here}: is not an allowed property"))
                }
                Some(extra @ Value::Object(_)) => {
                    check(extra, field, &here, depth + 1, errors, more)
                }
                _ => {}
            },
        }
    }
}

fn is_type(name: &str, value: &Value) -> bool {
    match name {
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => match value {
            Value::Number(n) => {
                n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
            }
            _ => false,
        },
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "null" => value.is_null(),
        _ => false,
    }
}

fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// JSON equality where `1` and `1.0` are the same number.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn search() -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "description": "What to find."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
                "kind": {"enum": ["memory", "session"]},
                "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}},
                "a/b": {"type": "boolean"}
            },
            "required": ["query"],
            "additionalProperties": false
        })
    }

    #[test]
    fn a_schema_of_the_subset_passes() {
        assert_eq!(shape_check(&search()), Ok(()));
        assert_eq!(shape_check(&json!({})), Ok(()));
        assert_eq!(
            shape_check(&json!({"type": "object", "title": "t", "format": "f",
                "additionalProperties": {"type": ["string", "null"]}})),
            Ok(())
        );
    }

    #[test]
    fn shape_errors_name_every_problem_by_pointer() {
        let error = shape_check(&json!([1])).unwrap_err();
        assert_eq!(error, "/: a schema must be an object");
        let error =
            shape_check(&json!({"type": "array", "items": {"type": "string"}})).unwrap_err();
        assert!(
            error.starts_with("/type: the root must be of type \"object\""),
            "{error}"
        );
        let error = shape_check(&json!({
            "type": "object",
            "properties": {
                "a": {"type": "strng"},
                "b": {"oneOf": []},
                "c": {"minLength": -1, "required": "c"},
                "d": "string"
            },
            "additionalProperties": 3
        }))
        .unwrap_err();
        let parts: Vec<&str> = error.split("; ").collect();
        assert!(
            parts.contains(&"/additionalProperties: must be a boolean or a schema"),
            "{error}"
        );
        assert!(
            parts
                .iter()
                .any(|p| p.starts_with("/properties/a/type: unknown type \"strng\"")),
            "{error}"
        );
        assert!(
            parts
                .iter()
                .any(|p| p.starts_with("/properties/b/oneOf: unsupported keyword")),
            "{error}"
        );
        assert!(
            parts.contains(&"/properties/c/minLength: must be a non-negative integer"),
            "{error}"
        );
        assert!(
            parts.contains(&"/properties/c/required: must be a list of property names"),
            "{error}"
        );
        assert!(
            parts.contains(&"/properties/d: a schema must be an object"),
            "{error}"
        );
        assert_eq!(parts.len(), 6, "{error}");
    }

    #[test]
    fn deep_schemas_are_refused() {
        let mut schema = json!({"type": "string"});
        for _ in 0..MAX_SCHEMA_DEPTH {
            schema = json!({"type": "array", "items": schema});
        }
        let rooted = json!({"type": "object", "properties": {"x": schema}});
        let error = shape_check(&rooted).unwrap_err();
        assert!(error.contains("deeper than 16 levels"), "{error}");
        let mut ok = json!({"type": "string"});
        for _ in 0..(MAX_SCHEMA_DEPTH - 2) {
            ok = json!({"type": "array", "items": ok});
        }
        assert_eq!(shape_check(&json!({"properties": {"x": ok}})), Ok(()));
    }

    #[test]
    fn a_valid_value_has_no_errors() {
        let value =
            json!({"query": "notes", "limit": 5, "kind": "memory", "tags": ["a"], "a/b": true});
        assert_eq!(validate(&search(), &value), Vec::<String>::new());
        // 5.0 is an integer.
        assert_eq!(
            validate(&search(), &json!({"query": "q", "limit": 5.0})),
            Vec::<String>::new()
        );
    }

    #[test]
    fn every_error_is_reported_with_its_pointer() {
        let value =
            json!({"limit": 0, "kind": "web", "tags": ["abcd", 7], "extra": 1, "a/b": "no"});
        let mut errors = validate(&search(), &value);
        errors.sort();
        assert_eq!(
            errors,
            [
                "/a~1b: expected boolean, got string",
                "/extra: is not an allowed property",
                "/kind: must be one of \"memory\", \"session\"",
                "/limit: below the minimum 1",
                "/query: is required",
                "/tags/0: longer than 3 characters",
                "/tags/1: expected string, got integer",
            ]
        );
        assert_eq!(
            validate(&search(), &json!("q")),
            ["/: expected object, got string"]
        );
        assert_eq!(
            validate(&search(), &json!({"query": "", "limit": 51.5})),
            [
                "/limit: expected integer, got number",
                "/query: shorter than 1 characters"
            ]
        );
    }

    #[test]
    fn errors_are_bounded() {
        let schema = json!({"type": "object", "additionalProperties": false});
        let value: Map<String, Value> = (0..100).map(|i| (format!("k{i:03}"), json!(i))).collect();
        let errors = validate(&schema, &Value::Object(value));
        assert_eq!(errors.len(), MAX_REPORTED_ERRORS + 1);
        assert_eq!(
            errors.last().map(String::as_str),
            Some("/: and 36 more errors")
        );
    }
}
