//! A document's metadata as the reference's markdown frontmatter: the
//! known string keys in a fixed order (JSON-quoted), the two booleans, and
//! the theme's header layout; nothing else.

use serde_json::{Map, Value};

const STRING_KEYS: [&str; 14] = [
    "name",
    "summary",
    "displayAuthor",
    "displayPublishTime",
    "icon",
    "cover",
    "siteUrl",
    "layout",
    "seedExperimentalLogo",
    "seedExperimentalHomeOrder",
    "contentWidth",
    "childrenType",
    "importCategories",
    "importTags",
];

const BOOLEAN_KEYS: [&str; 2] = ["showOutline", "showActivity"];

pub(super) fn frontmatter(metadata: &Map<String, Value>) -> String {
    let mut lines = Vec::new();
    for key in STRING_KEYS {
        match metadata.get(key) {
            Some(Value::String(text)) if !text.is_empty() => {
                lines.push(format!("{key}: {}", js_json_string(text)));
            }
            Some(Value::Null) if key == "childrenType" => lines.push(format!("{key}: null")),
            _ => {}
        }
    }
    for key in BOOLEAN_KEYS {
        if let Some(Value::Bool(flag)) = metadata.get(key) {
            lines.push(format!("{key}: {flag}"));
        }
    }
    if let Some(layout) = metadata
        .get("theme")
        .and_then(|theme| theme.get("headerLayout"))
        .and_then(Value::as_str)
    {
        lines.push("theme:".to_owned());
        lines.push(format!("  headerLayout: {}", js_json_string(layout)));
    }
    if lines.is_empty() {
        "---\n---\n".to_owned()
    } else {
        format!("---\n{}\n---\n", lines.join("\n"))
    }
}

/// `JSON.stringify` of a string: serde_json escapes the same characters
/// (quotes, backslashes, control characters) and keeps the rest raw.
fn js_json_string(text: &str) -> String {
    Value::String(text.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_known_keys_in_order_and_nothing_else() {
        let metadata = json!({"summary": "S", "name": "My \"Doc\"", "showOutline": false,
                              "theme": {"headerLayout": "Center"}, "custom": "x", "cover": "",
                              "thumbnail": "ipfs://t"});
        assert_eq!(
            frontmatter(metadata.as_object().unwrap()),
            "---\nname: \"My \\\"Doc\\\"\"\nsummary: \"S\"\nshowOutline: false\ntheme:\n  headerLayout: \"Center\"\n---\n"
        );
        assert_eq!(frontmatter(&Map::new()), "---\n---\n");
    }
}
