//! JavaScript numbers: how the client prints them, and metadata values given JavaScript's number semantics.

use super::*;

/// `Number.prototype.toString()` (radix 10).
pub(super) fn js_number_to_string(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x == 0.0 {
        return "0".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if x < 0.0 {
        return format!("-{}", js_number_to_string(-x));
    }
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i64 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let k = digits.len() as i64;
    let n = exp + 1;
    if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        let (a, b) = digits.split_at(n as usize);
        format!("{a}.{b}")
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat((-n) as usize))
    } else {
        let e = n - 1;
        let sign = if e >= 0 { '+' } else { '-' };
        let (first, tail) = digits.split_at(1);
        if tail.is_empty() {
            format!("{first}e{sign}{}", e.abs())
        } else {
            format!("{first}.{tail}e{sign}{}", e.abs())
        }
    }
}

/// A JavaScript number as the JSON value `JSON.stringify` would make of it,
/// read back (`null` for NaN and the infinities).
pub(super) fn js_number_value(x: f64) -> Value {
    if !x.is_finite() {
        return Value::Null;
    }
    serde_json::from_str(&js_number_to_string(x)).unwrap_or(Value::Null)
}

/// Numbers as JavaScript holds them after `JSON.parse` (doubles).
pub(super) fn js_numbers(v: Value) -> Value {
    match v {
        Value::Number(n) => js_number_value(n.as_f64().unwrap_or(f64::NAN)),
        Value::Array(items) => Value::Array(items.into_iter().map(js_numbers).collect()),
        Value::Object(map) => Value::Object(js_numbers_map(map)),
        other => other,
    }
}

pub(super) fn js_numbers_map(map: Map<String, Value>) -> Map<String, Value> {
    map.into_iter().map(|(k, v)| (k, js_numbers(v))).collect()
}
