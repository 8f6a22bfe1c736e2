//! JSON for people and scripts, IPLD for the wire: the DAG-JSON conventions
//! the CLI reads actions in and prints responses with.
//!
//! Everything maps naturally except what JSON has no type for: bytes are
//! `{"/": {"bytes": "<base64, no padding>"}}` and a link is `{"/": "<CID>"}`.
//! An object whose only key is `/` is reserved for those two forms, so any
//! other value under a lone `/` is refused rather than guessed at. JSON
//! integers stay integers (an action's integer field must not be signed as
//! a float), and a number with a fraction or exponent is a float.

use std::collections::BTreeMap;

use agentos_protocol::seed::cbor::MAX_DEPTH;
use agentos_protocol::seed::Ipld;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use ipld_core::cid::Cid;
use serde_json::{Map, Number, Value};

use super::ClientError;

/// Standard base64 as DAG-JSON writes it (no padding); reading also takes
/// padded input, which some encoders produce.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// JSON (as DAG-JSON) to IPLD. Nesting is bounded as the server bounds it.
pub fn json_to_ipld(value: &Value) -> Result<Ipld, ClientError> {
    to_ipld(value, 0)
}

/// IPLD to JSON (as DAG-JSON). Fails only for an integer beyond what JSON
/// numbers here carry (below `i64::MIN` or above `u64::MAX`).
pub fn ipld_to_json(value: &Ipld) -> Result<Value, ClientError> {
    to_json(value, 0)
}

fn to_ipld(value: &Value, depth: usize) -> Result<Ipld, ClientError> {
    if depth > MAX_DEPTH {
        return Err(ClientError::InvalidJson(format!(
            "nested deeper than {MAX_DEPTH} levels"
        )));
    }
    Ok(match value {
        Value::Null => Ipld::Null,
        Value::Bool(b) => Ipld::Bool(*b),
        Value::Number(number) => number_to_ipld(number)?,
        Value::String(text) => Ipld::String(text.clone()),
        Value::Array(items) => Ipld::List(
            items
                .iter()
                .map(|item| to_ipld(item, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => match reserved(map)? {
            Some(special) => special,
            None => Ipld::Map(
                map.iter()
                    .map(|(key, item)| Ok((key.clone(), to_ipld(item, depth + 1)?)))
                    .collect::<Result<BTreeMap<_, _>, ClientError>>()?,
            ),
        },
    })
}

fn number_to_ipld(number: &Number) -> Result<Ipld, ClientError> {
    if let Some(value) = number.as_i64() {
        return Ok(Ipld::Integer(i128::from(value)));
    }
    if let Some(value) = number.as_u64() {
        return Ok(Ipld::Integer(i128::from(value)));
    }
    match number.as_f64() {
        Some(value) if value.is_finite() => Ok(Ipld::Float(value)),
        _ => Err(ClientError::InvalidJson(format!(
            "{number} is not a finite number"
        ))),
    }
}

/// The two DAG-JSON forms under a lone `/` key, or `None` for a plain map.
fn reserved(map: &Map<String, Value>) -> Result<Option<Ipld>, ClientError> {
    let inner = match map.get("/") {
        Some(inner) if map.len() == 1 => inner,
        _ => return Ok(None),
    };
    match inner {
        Value::String(text) => Cid::try_from(text.as_str())
            .map(|cid| Some(Ipld::Link(cid)))
            .map_err(|e| {
                ClientError::InvalidJson(format!("{{\"/\": {text:?}}} is not a CID: {e}"))
            }),
        Value::Object(bytes) if bytes.len() == 1 => match bytes.get("bytes") {
            Some(Value::String(text)) => BASE64
                .decode(text)
                .map(|decoded| Some(Ipld::Bytes(decoded)))
                .map_err(|e| {
                    ClientError::InvalidJson(format!(
                        "{{\"/\": {{\"bytes\": …}}}} is not base64: {e}"
                    ))
                }),
            _ => Err(reserved_error()),
        },
        _ => Err(reserved_error()),
    }
}

fn reserved_error() -> ClientError {
    ClientError::InvalidJson(
        "an object whose only key is \"/\" must be {\"/\": {\"bytes\": \"<base64>\"}} \
         or {\"/\": \"<CID>\"}"
            .to_string(),
    )
}

fn to_json(value: &Ipld, depth: usize) -> Result<Value, ClientError> {
    if depth > MAX_DEPTH {
        return Err(ClientError::BadResponse(format!(
            "nested deeper than {MAX_DEPTH} levels"
        )));
    }
    Ok(match value {
        Ipld::Null => Value::Null,
        Ipld::Bool(b) => Value::Bool(*b),
        Ipld::Integer(n) => {
            if let Ok(small) = i64::try_from(*n) {
                Value::from(small)
            } else if let Ok(large) = u64::try_from(*n) {
                Value::from(large)
            } else {
                return Err(ClientError::BadResponse(format!(
                    "the integer {n} does not fit a JSON number"
                )));
            }
        }
        Ipld::Float(f) => Number::from_f64(*f)
            .map(Value::Number)
            .ok_or_else(|| ClientError::BadResponse(format!("{f} is not a finite number")))?,
        Ipld::String(text) => Value::String(text.clone()),
        Ipld::Bytes(bytes) => {
            serde_json::json!({"/": {"bytes": BASE64.encode(bytes)}})
        }
        Ipld::List(items) => Value::Array(
            items
                .iter()
                .map(|item| to_json(item, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
        Ipld::Map(map) => Value::Object(
            map.iter()
                .map(|(key, item)| Ok((key.clone(), to_json(item, depth + 1)?)))
                .collect::<Result<Map<_, _>, ClientError>>()?,
        ),
        Ipld::Link(cid) => serde_json::json!({"/": cid.to_string()}),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn map(entries: &[(&str, Ipld)]) -> Ipld {
        Ipld::Map(
            entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )
    }

    #[test]
    fn bytes_both_ways() {
        let value = json!({"value": {"/": {"bytes": "AQID/w"}}});
        let ipld = json_to_ipld(&value).unwrap();
        assert_eq!(ipld, map(&[("value", Ipld::Bytes(vec![1, 2, 3, 255]))]));
        assert_eq!(ipld_to_json(&ipld).unwrap(), value);
        // Padded input is read too; output is never padded.
        let padded = json_to_ipld(&json!({"/": {"bytes": "AQID/w=="}})).unwrap();
        assert_eq!(padded, Ipld::Bytes(vec![1, 2, 3, 255]));
        assert_eq!(
            ipld_to_json(&Ipld::Bytes(Vec::new())).unwrap(),
            json!({"/": {"bytes": ""}})
        );
    }

    #[test]
    fn integers_stay_integers() {
        let value = json!({"a": 0, "b": -1, "c": i64::MIN, "d": u64::MAX, "e": 30000});
        let ipld = json_to_ipld(&value).unwrap();
        assert_eq!(
            ipld,
            map(&[
                ("a", Ipld::Integer(0)),
                ("b", Ipld::Integer(-1)),
                ("c", Ipld::Integer(i128::from(i64::MIN))),
                ("d", Ipld::Integer(i128::from(u64::MAX))),
                ("e", Ipld::Integer(30000)),
            ])
        );
        assert_eq!(ipld_to_json(&ipld).unwrap(), value);
        // CBOR reaches -2^64, which JSON numbers here do not.
        let too_small = Ipld::Integer(i128::from(i64::MIN) - 1);
        assert_eq!(ipld_to_json(&too_small).unwrap_err().code(), "bad_response");
    }

    #[test]
    fn floats_are_floats_and_must_be_finite() {
        let ipld = json_to_ipld(&json!([1.5, 1.0, -2e-3])).unwrap();
        assert_eq!(
            ipld,
            Ipld::List(vec![Ipld::Float(1.5), Ipld::Float(1.0), Ipld::Float(-2e-3)])
        );
        assert_eq!(ipld_to_json(&ipld).unwrap(), json!([1.5, 1.0, -2e-3]));
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(
                ipld_to_json(&Ipld::Float(bad)).unwrap_err().code(),
                "bad_response"
            );
        }
        // JSON text cannot spell a non-finite number; one out of range is
        // refused by the parser before it gets here.
        assert!(serde_json::from_str::<Value>("1e400").is_err());
    }

    #[test]
    fn nested_values_and_links_round_trip() {
        let cid = "bafyreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy";
        let value = json!({
            "definition": {
                "name": "helper",
                "tools": ["read", "write"],
                "metadata": {"k": [null, true, {"deep": {"/": {"bytes": "AA"}}}]},
            },
            "link": {"/": cid},
            "notReserved": {"/": 1, "other": 2},
        });
        let ipld = json_to_ipld(&value).unwrap();
        let Ipld::Map(top) = &ipld else {
            panic!("not a map: {ipld:?}")
        };
        assert!(matches!(top.get("link"), Some(Ipld::Link(_))));
        assert_eq!(
            top.get("notReserved"),
            Some(&map(&[
                ("/", Ipld::Integer(1)),
                ("other", Ipld::Integer(2))
            ]))
        );
        assert_eq!(ipld_to_json(&ipld).unwrap(), value);
    }

    #[test]
    fn malformed_reserved_forms_are_invalid_json() {
        for bad in [
            json!({"/": {"bytes": "***"}}),
            json!({"/": {"bytes": 1}}),
            json!({"/": {"bytes": "AA", "x": 1}}),
            json!({"/": {}}),
            json!({"/": 5}),
            json!({"/": "not a cid"}),
        ] {
            assert_eq!(
                json_to_ipld(&bad).unwrap_err().code(),
                "invalid_json",
                "{bad}"
            );
        }
    }

    #[test]
    fn nesting_is_bounded() {
        let mut value = json!(0);
        for _ in 0..=MAX_DEPTH {
            value = json!([value]);
        }
        assert_eq!(json_to_ipld(&value).unwrap_err().code(), "invalid_json");
        let mut ipld = Ipld::Null;
        for _ in 0..=MAX_DEPTH {
            ipld = Ipld::List(vec![ipld]);
        }
        assert_eq!(ipld_to_json(&ipld).unwrap_err().code(), "bad_response");
    }
}
