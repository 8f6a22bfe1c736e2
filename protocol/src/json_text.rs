//! Reading the top-level members out of JSON object text that is already
//! known to be valid (checked by a strict parser on the way in, or
//! rendered by serde), without building values or checking the grammar
//! again: one forward pass that jumps over strings with a
//! vectorised search. Anything it does not expect (a key with an escape,
//! text that is not an object) answers `None`, and the caller takes its
//! exact, slower path; it never reads out of bounds on any input.

/// The top-level members of the object `text`, in order, as (key, raw
/// value text). `None` when `text` is not an object or a key holds an
/// escape (its text is then not the key itself).
pub fn object_members(text: &str) -> Option<Vec<(&str, &str)>> {
    let mut members = Vec::with_capacity(8);
    let bytes = text.as_bytes();
    let mut at = skip_ws(bytes, 0);
    if bytes.get(at) != Some(&b'{') {
        return None;
    }
    at = skip_ws(bytes, at + 1);
    if bytes.get(at) == Some(&b'}') {
        return (skip_ws(bytes, at + 1) == bytes.len()).then_some(members);
    }
    loop {
        if bytes.get(at) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(bytes, at)?;
        let key = text.get(at + 1..key_end - 1)?;
        if key.contains('\\') {
            return None;
        }
        at = skip_ws(bytes, key_end);
        if bytes.get(at) != Some(&b':') {
            return None;
        }
        let start = skip_ws(bytes, at + 1);
        let end = value_end(bytes, start)?;
        members.push((key, text.get(start..end)?));
        at = skip_ws(bytes, end);
        match bytes.get(at) {
            Some(b',') => at = skip_ws(bytes, at + 1),
            Some(b'}') => {
                return (skip_ws(bytes, at + 1) == bytes.len()).then_some(members);
            }
            _ => return None,
        }
    }
}

/// The text of a JSON string value with no escapes, without its quotes;
/// `None` for any other value (which the caller then decodes exactly).
pub fn plain_string(raw: &str) -> Option<&str> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    (!inner.contains(['\\', '"'])).then_some(inner)
}

fn skip_ws(bytes: &[u8], mut at: usize) -> usize {
    while matches!(bytes.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// The index just past the string that opens at `at` (a `"`).
fn string_end(bytes: &[u8], at: usize) -> Option<usize> {
    let mut at = at + 1;
    loop {
        let i = memchr::memchr2(b'"', b'\\', bytes.get(at..)?)?;
        if bytes[at + i] == b'\\' {
            at += i + 2;
        } else {
            return Some(at + i + 1);
        }
    }
}

/// The index just past the value that starts at `at`.
fn value_end(bytes: &[u8], at: usize) -> Option<usize> {
    match bytes.get(at)? {
        b'"' => string_end(bytes, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut at = at;
            loop {
                match bytes.get(at)? {
                    b'"' => {
                        at = string_end(bytes, at)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(at + 1);
                        }
                    }
                    _ => {}
                }
                at += 1;
            }
        }
        b'}' | b']' | b',' | b':' => None,
        _ => {
            // A number or a literal: up to the next separator.
            let mut end = at;
            while !matches!(
                bytes.get(end),
                None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            ) {
                end += 1;
            }
            Some(end)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a strict parser finds, for comparison, sorted by key.
    fn exact(text: &str) -> Vec<(String, String)> {
        let map: serde_json::Map<String, serde_json::Value> = serde_json::from_str(text).unwrap();
        let mut out: Vec<(String, String)> =
            map.into_iter().map(|(k, v)| (k, v.to_string())).collect();
        out.sort();
        out
    }

    fn normalised(members: Vec<(&str, &str)>) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = members
            .into_iter()
            .map(|(k, v)| {
                let v: serde_json::Value = serde_json::from_str(v).unwrap();
                (k.to_owned(), v.to_string())
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn members_are_the_raw_texts_a_strict_parser_sees() {
        for text in [
            r#"{}"#,
            r#" { } "#,
            r#"{"a":1}"#,
            r#"{"sessionUpdate":"plan","entries":[{"x":"]}\"{"},[],{}],"n":-1.5e3,"t":true,"f":false,"z":null}"#,
            "{ \"a\" :\n\"b\\\"c\" , \"d\" : { \"e\" : [ 1 , 2 ] } }",
            r#"{"s":"é ☃ 𝄞","u":"\u00e9\ud834\udd1e"}"#,
        ] {
            let ours = object_members(text).unwrap_or_else(|| panic!("{text}"));
            assert_eq!(normalised(ours), exact(text), "{text}");
        }
        let raw = object_members(r#"{"a" : [1, {"b":"}"}] ,"c":"d"}"#).unwrap();
        assert_eq!(raw, [("a", r#"[1, {"b":"}"}]"#), ("c", r#""d""#)]);
    }

    #[test]
    fn what_it_does_not_expect_takes_the_exact_path() {
        for text in [
            "",
            "[]",
            "\"x\"",
            "{",
            "{\"a\"}",
            "{\"a\":}",
            "{\"a\":1,}",
            "{\"a\":1} x",
            "{\"a\\u0062\":1}",
            "{\"a\":\"unterminated}",
            "{\"a\":[1,2}",
            "{\"a\":1 \"b\":2}",
        ] {
            assert_eq!(object_members(text), None, "{text}");
        }
    }

    #[test]
    fn only_plain_strings_are_read_as_they_are() {
        assert_eq!(plain_string(r#""plan""#), Some("plan"));
        assert_eq!(plain_string(r#""""#), Some(""));
        assert_eq!(plain_string(r#""a\nb""#), None);
        assert_eq!(plain_string("null"), None);
        assert_eq!(plain_string("1"), None);
        assert_eq!(plain_string("\""), None);
    }
}
