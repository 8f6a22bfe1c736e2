//! JavaScript's idea of white space, truthiness, numbers and slices, as the
//! reference's code relies on them.

use super::*;

// ─── JavaScript semantics ───────────────────────────────────────────────────

/// White space as JavaScript's `trim` and `\s` know it: Unicode's spaces and
/// line terminators and the byte-order mark, but not NEL (U+0085).
pub(super) use agentos_protocol::seed::text::{is_js_space, js_trim};

pub(super) fn is_js_space_unit(unit: u16) -> bool {
    char::from_u32(u32::from(unit)).is_some_and(is_js_space)
}

/// What a regex `.` doesn't match.
pub(super) fn is_line_terminator(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}')
}

pub(super) fn js_trim_start(text: &str) -> &str {
    text.trim_start_matches(is_js_space)
}

pub(super) fn js_trim_end(text: &str) -> &str {
    text.trim_end_matches(is_js_space)
}

/// Whether JavaScript would take the value (absent = `undefined`) as true.
pub(super) fn js_truthy(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(_) | Value::Object(_)) => true,
    }
}

/// `String(value)`, with an absent value being `undefined`.
pub(super) fn js_display(value: Option<&Value>) -> String {
    value.map_or_else(|| "undefined".to_owned(), |v| js_string(v, 0))
}

/// `value || ''` as a template literal prints it.
pub(super) fn js_or_empty(value: Option<&Value>) -> String {
    if js_truthy(value) {
        js_display(value)
    } else {
        String::new()
    }
}

/// `String(value)` for JSON. Arrays nested deeper than `MAX_NESTING` print
/// as nothing.
pub(super) fn js_string(value: &Value, depth: usize) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.as_f64().map_or_else(|| n.to_string(), js_number),
        Value::String(s) => s.clone(),
        Value::Array(items) if depth < MAX_NESTING => items
            .iter()
            .map(|item| match item {
                Value::Null => String::new(),
                item => js_string(item, depth + 1),
            })
            .collect::<Vec<_>>()
            .join(","),
        Value::Array(_) => String::new(),
        Value::Object(_) => "[object Object]".to_owned(),
    }
}

/// `Number.prototype.toString()`: the shortest round-trip digits, written
/// out between 1e-7 and 1e21 and in exponent form beyond.
pub(super) fn js_number(value: f64) -> String {
    if value.is_nan() {
        return "NaN".to_owned();
    }
    if value == 0.0 {
        return "0".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    if value < 0.0 {
        return format!("-{}", js_number(-value));
    }
    let scientific = format!("{value:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let count = digits.len() as i64;
    let point = exponent.parse::<i64>().unwrap_or(0) + 1;
    if count <= point && point <= 21 {
        format!("{digits}{}", "0".repeat((point - count) as usize))
    } else if 0 < point && point <= 21 {
        let (whole, fraction) = digits
            .split_at_checked(point as usize)
            .unwrap_or((&digits, ""));
        format!("{whole}.{fraction}")
    } else if -6 < point && point <= 0 {
        format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
    } else {
        let (first, rest) = digits.split_at_checked(1).unwrap_or((&digits, ""));
        let sign = if point > 0 { '+' } else { '-' };
        let exponent = (point - 1).unsigned_abs();
        if rest.is_empty() {
            format!("{first}e{sign}{exponent}")
        } else {
            format!("{first}.{rest}e{sign}{exponent}")
        }
    }
}

/// `text.slice(start, end)` on UTF-16 units: positions are truncated toward
/// zero, negative ones count from the end, and everything is clamped.
pub(super) fn js_slice(units: &[u16], start: f64, end: f64) -> &[u16] {
    let index = |position: f64| {
        let length = units.len() as f64;
        let position = if position.is_nan() {
            0.0
        } else {
            position.trunc()
        };
        let position = if position < 0.0 {
            (length + position).max(0.0)
        } else {
            position.min(length)
        };
        position as usize
    };
    units.get(index(start)..index(end)).unwrap_or_default()
}
