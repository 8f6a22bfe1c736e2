//! JSON for people and scripts, IPLD for the wire: the CLI reads actions in
//! and prints responses as DAG-JSON, through the protocol's one conversion
//! ([`agentos_protocol::seed::ipld_json`], its DAG-JSON form) and its
//! number rule.
//!
//! Everything maps naturally except what JSON has no type for: bytes are
//! `{"/": {"bytes": "<base64, no padding>"}}` and a link is `{"/": "<CID>"}`.
//! An object whose only key is `/` is reserved for those two forms, so any
//! other value under a lone `/` is refused rather than guessed at. A number
//! becomes what Seed's JavaScript client writes for it: a whole number (`1`,
//! `1.0`) an integer, anything else a float; an integer literal beyond 2^53
//! that fits 64 bits stays that exact integer. Here a conversion's failure
//! becomes the client's error: `invalid_json` for what was read,
//! `bad_response` for what the server answered.

use agentos_protocol::seed::{self as protocol, Ipld, JsonForm};
use serde_json::Value;

use super::ClientError;

/// JSON (as DAG-JSON) to IPLD. Nesting is bounded as the server bounds it.
pub fn json_to_ipld(value: &Value) -> Result<Ipld, ClientError> {
    protocol::json_to_ipld(value, JsonForm::DagJson)
        .map_err(|e| ClientError::InvalidJson(e.to_string()))
}

/// IPLD to JSON (as DAG-JSON). Fails for an integer beyond what JSON
/// numbers here carry (below `i64::MIN` or above `u64::MAX`), a float that
/// is not finite, or nesting deeper than the server's bound.
pub fn ipld_to_json(value: &Ipld) -> Result<Value, ClientError> {
    protocol::ipld_to_json(value, JsonForm::DagJson)
        .map_err(|e| ClientError::BadResponse(e.to_string()))
}

#[cfg(test)]
mod tests {
    use agentos_protocol::seed::cbor::MAX_DEPTH;
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
        // A whole number is an integer however it is spelled, as Seed's
        // JavaScript client writes `1.0`.
        let ipld = json_to_ipld(&json!([1.5, 1.0, -2e-3])).unwrap();
        assert_eq!(
            ipld,
            Ipld::List(vec![Ipld::Float(1.5), Ipld::Integer(1), Ipld::Float(-2e-3)])
        );
        assert_eq!(ipld_to_json(&ipld).unwrap(), json!([1.5, 1, -2e-3]));
        let floats = Ipld::List(vec![Ipld::Float(1.5), Ipld::Float(1.0)]);
        assert_eq!(ipld_to_json(&floats).unwrap(), json!([1.5, 1.0]));
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
