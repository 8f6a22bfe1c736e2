use serde_json::json;

use super::*;
use crate::seed::cbor;

fn read(text: &str) -> Ipld {
    let value: Value = serde_json::from_str(text).expect("test JSON parses");
    json_to_ipld(&value, JsonForm::Plain).expect("converts")
}

fn map(entries: &[(&str, Ipld)]) -> Ipld {
    Ipld::Map(
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    )
}

/// `depth` lists inside one another around `inner`.
fn nested_ipld(depth: usize, inner: Ipld) -> Ipld {
    (0..depth).fold(inner, |value, _| Ipld::List(vec![value]))
}

fn nested_json(depth: usize, inner: Value) -> Value {
    (0..depth).fold(inner, |value, _| Value::Array(vec![value]))
}

#[test]
fn numbers_follow_the_javascript_encoders_rule() {
    const TWO_53: i128 = 1 << 53;
    let table: &[(&str, Ipld)] = &[
        ("0", Ipld::Integer(0)),
        ("-1", Ipld::Integer(-1)),
        ("30000", Ipld::Integer(30000)),
        // Whole numbers however they are spelled, as `Number.isInteger`.
        ("1.0", Ipld::Integer(1)),
        ("1e3", Ipld::Integer(1000)),
        ("-2.0E1", Ipld::Integer(-20)),
        ("-0", Ipld::Integer(0)),
        ("-0.0", Ipld::Integer(0)),
        // The safe range's ends.
        ("9007199254740991", Ipld::Integer(TWO_53 - 1)),
        ("-9007199254740991", Ipld::Integer(1 - TWO_53)),
        ("9007199254740991.0", Ipld::Integer(TWO_53 - 1)),
        // Past it, a double is a float, as the client writes it...
        ("9007199254740992.0", Ipld::Float(9007199254740992.0)),
        ("1e20", Ipld::Float(1e20)),
        ("18446744073709551616", Ipld::Float(18446744073709551616.0)),
        ("-9223372036854775809", Ipld::Float(-9223372036854775808.0)),
        // ...but an integer literal within 64 bits stays exact.
        ("9007199254740992", Ipld::Integer(TWO_53)),
        ("9007199254740993", Ipld::Integer(TWO_53 + 1)),
        ("-9007199254740993", Ipld::Integer(-TWO_53 - 1)),
        ("18446744073709551615", Ipld::Integer(i128::from(u64::MAX))),
        ("-9223372036854775808", Ipld::Integer(i128::from(i64::MIN))),
        // Fractions are floats.
        ("0.1", Ipld::Float(0.1)),
        ("2.5", Ipld::Float(2.5)),
        ("-2e-3", Ipld::Float(-2e-3)),
        ("1e300", Ipld::Float(1e300)),
        ("5e-324", Ipld::Float(5e-324)),
    ];
    for (text, expected) in table {
        assert_eq!(&read(text), expected, "{text}");
    }
    // -0 is the integer 0, one byte.
    assert_eq!(cbor::to_canonical(&read("-0")).unwrap(), [0x00]);
    // JSON text cannot spell what is not finite; the parser refuses it.
    assert!(serde_json::from_str::<Value>("1e400").is_err());
}

#[test]
fn ipld_and_json_convert_both_ways() {
    let value =
        json!({"a": [1, -2, 2.5, 3.0, null, true, "s"], "b": {"c": 18446744073709551615u64}});
    let ipld = json_to_ipld(&value, JsonForm::Plain).unwrap();
    let Ipld::Map(map) = &ipld else {
        panic!("a map")
    };
    let Some(Ipld::List(items)) = map.get("a") else {
        panic!("a list")
    };
    assert_eq!(items[3], Ipld::Integer(3));
    assert_eq!(items[2], Ipld::Float(2.5));
    let back = ipld_to_json(&ipld, JsonForm::Plain).unwrap();
    assert_eq!(back["a"][3], json!(3));
    assert_eq!(back["b"]["c"], value["b"]["c"]);
    let bytes = Ipld::Map(BTreeMap::from([("x".to_owned(), Ipld::Bytes(vec![1]))]));
    assert_eq!(
        ipld_to_json(&bytes, JsonForm::Plain)
            .unwrap_err()
            .to_string(),
        "/x: bytes have no JSON form"
    );
    assert_eq!(
        ipld_to_json(&Ipld::Integer(i128::MAX), JsonForm::Plain)
            .unwrap_err()
            .to_string(),
        "/: integer out of range"
    );
}

#[test]
fn integers_out_of_json_range_are_refused_where_they_are() {
    for fits in [i128::from(i64::MIN), -1, 0, i128::from(u64::MAX)] {
        let json = ipld_to_json(&Ipld::Integer(fits), JsonForm::Plain).unwrap();
        assert_eq!(
            json_to_ipld(&json, JsonForm::Plain),
            Ok(Ipld::Integer(fits))
        );
    }
    // CBOR reaches -2^64; JSON numbers here do not.
    for beyond in [i128::from(i64::MIN) - 1, i128::from(u64::MAX) + 1] {
        let ipld = map(&[("n", Ipld::List(vec![Ipld::Integer(beyond)]))]);
        let error = ipld_to_json(&ipld, JsonForm::DagJson).unwrap_err();
        assert_eq!(error.code(), "integer_out_of_range");
        assert_eq!(error.at(), "/n/0");
    }
}

#[test]
fn floats_are_json_numbers_and_must_be_finite() {
    let ipld = Ipld::List(vec![Ipld::Float(1.5), Ipld::Float(1.0), Ipld::Float(-2e-3)]);
    let json = ipld_to_json(&ipld, JsonForm::Plain).unwrap();
    assert_eq!(json, json!([1.5, 1.0, -2e-3]));
    assert!(json[1].is_f64());
    // A whole float reads back as the integer a JavaScript client would
    // write for it.
    assert_eq!(
        json_to_ipld(&json, JsonForm::Plain).unwrap(),
        Ipld::List(vec![Ipld::Float(1.5), Ipld::Integer(1), Ipld::Float(-2e-3)])
    );
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let error = ipld_to_json(&map(&[("f", Ipld::Float(bad))]), JsonForm::DagJson).unwrap_err();
        assert_eq!(error.code(), "not_finite");
        assert_eq!(error.to_string(), "/f: not a finite number");
    }
}

#[test]
fn dag_json_bytes_and_links_both_ways() {
    let cid = "bafyreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy";
    let value = json!({
        "value": {"/": {"bytes": "AQID/w"}},
        "empty": {"/": {"bytes": ""}},
        "link": {"/": cid},
        "deep": [null, true, {"k": {"/": {"bytes": "AA"}}}],
        "notReserved": {"/": 1, "other": 2},
    });
    let ipld = json_to_ipld(&value, JsonForm::DagJson).unwrap();
    let Ipld::Map(top) = &ipld else {
        panic!("not a map: {ipld:?}")
    };
    assert_eq!(top.get("value"), Some(&Ipld::Bytes(vec![1, 2, 3, 255])));
    assert_eq!(top.get("empty"), Some(&Ipld::Bytes(Vec::new())));
    assert!(matches!(top.get("link"), Some(Ipld::Link(c)) if c.to_string() == cid));
    assert_eq!(
        top.get("notReserved"),
        Some(&map(&[
            ("/", Ipld::Integer(1)),
            ("other", Ipld::Integer(2))
        ]))
    );
    assert_eq!(ipld_to_json(&ipld, JsonForm::DagJson).unwrap(), value);
    // Padded input is read too; output is never padded.
    let padded = json_to_ipld(&json!({"/": {"bytes": "AQID/w=="}}), JsonForm::DagJson).unwrap();
    assert_eq!(padded, Ipld::Bytes(vec![1, 2, 3, 255]));
    // Plain JSON has neither: the same objects are maps, and IPLD bytes
    // or links are refused, naming where.
    let plain = json_to_ipld(&value, JsonForm::Plain).unwrap();
    let Ipld::Map(top) = &plain else {
        panic!("not a map: {plain:?}")
    };
    assert_eq!(
        top.get("link"),
        Some(&map(&[("/", Ipld::String(cid.into()))]))
    );
    let error = ipld_to_json(&ipld, JsonForm::Plain).unwrap_err();
    assert_eq!(error.code(), "no_json_form");
    assert_eq!(error.to_string(), "/deep/2/k: bytes have no JSON form");
    let link = map(&[("link", top_link(&ipld))]);
    assert_eq!(
        ipld_to_json(&link, JsonForm::Plain)
            .unwrap_err()
            .to_string(),
        "/link: a link has no JSON form"
    );
}

fn top_link(ipld: &Ipld) -> Ipld {
    match ipld {
        Ipld::Map(map) => map.get("link").cloned().unwrap_or(Ipld::Null),
        _ => Ipld::Null,
    }
}

#[test]
fn malformed_reserved_forms_are_refused() {
    for bad in [
        json!({"/": {"bytes": "***"}}),
        json!({"/": {"bytes": 1}}),
        json!({"/": {"bytes": "AA", "x": 1}}),
        json!({"/": {}}),
        json!({"/": 5}),
        json!({"/": "not a cid"}),
    ] {
        let error = json_to_ipld(&json!({"a~b": [bad.clone()]}), JsonForm::DagJson).unwrap_err();
        assert_eq!(error.code(), "bad_dag_json", "{bad}");
        assert_eq!(error.at(), "/a~0b/0", "{bad}");
        // Plain JSON takes them as maps.
        assert!(json_to_ipld(&bad, JsonForm::Plain).is_ok());
    }
}

#[test]
fn nesting_is_bounded_both_ways() {
    // MAX_DEPTH arrays inside one another are fine, one more is not.
    let deepest = nested_json(MAX_DEPTH, json!(0));
    let ipld = json_to_ipld(&deepest, JsonForm::Plain).unwrap();
    assert_eq!(ipld, nested_ipld(MAX_DEPTH, Ipld::Integer(0)));
    assert_eq!(ipld_to_json(&ipld, JsonForm::Plain).unwrap(), deepest);
    // What we produce, our own decoder reads back.
    let bytes = cbor::to_canonical(&ipld).unwrap();
    assert_eq!(cbor::from_slice::<Ipld>(&bytes, 1 << 20).unwrap(), ipld);
    // DAG-JSON's byte form at the deepest level is bytes, not a map.
    let bytes_at_the_bottom = nested_json(MAX_DEPTH, json!({"/": {"bytes": "AA"}}));
    assert!(json_to_ipld(&bytes_at_the_bottom, JsonForm::DagJson).is_ok());

    let too_deep = nested_json(MAX_DEPTH + 1, json!(0));
    let error = json_to_ipld(&too_deep, JsonForm::Plain).unwrap_err();
    assert_eq!(error.code(), "too_deep");
    assert_eq!(error.at(), "/0".repeat(MAX_DEPTH));
    let error =
        ipld_to_json(&nested_ipld(MAX_DEPTH + 1, Ipld::Null), JsonForm::DagJson).unwrap_err();
    assert_eq!(error.code(), "too_deep");
    assert_eq!(
        error.to_string(),
        format!("{}: nested deeper than 64 levels", "/0".repeat(MAX_DEPTH))
    );
    let deep_map = (0..=MAX_DEPTH).fold(json!({}), |value, _| json!({"k": value}));
    assert_eq!(
        json_to_ipld(&deep_map, JsonForm::DagJson)
            .unwrap_err()
            .code(),
        "too_deep"
    );

    // A hostile depth is refused at the bound, not walked.
    let hostile = nested_json(1_000, Value::Null);
    assert_eq!(
        json_to_ipld(&hostile, JsonForm::Plain).unwrap_err().code(),
        "too_deep"
    );
}

#[test]
fn clipping_replaces_only_what_is_too_deep() {
    let value = json!({"kept": 1, "deep": nested_json(MAX_DEPTH + 3, json!("x"))});
    let clipped = json_to_ipld_clipped(&value);
    // The map is one level; the array past CLIP_DEPTH levels is null.
    assert_eq!(
        clipped,
        map(&[
            ("kept", Ipld::Integer(1)),
            ("deep", nested_ipld(CLIP_DEPTH - 1, Ipld::Null)),
        ])
    );
    // Exactly CLIP_DEPTH levels are kept whole.
    let deepest = nested_json(CLIP_DEPTH, json!(true));
    assert_eq!(
        json_to_ipld_clipped(&deepest),
        nested_ipld(CLIP_DEPTH, Ipld::Bool(true))
    );
    // Within the bound it is the plain conversion.
    let fine = json!({"a": [1.0, 0.5, {"/": {"bytes": "AA"}}]});
    assert_eq!(
        json_to_ipld_clipped(&fine),
        json_to_ipld(&fine, JsonForm::Plain).unwrap()
    );
}

#[test]
fn pointers_escape_keys_and_stay_short() {
    let ipld = map(&[("a/b~c", map(&[("", Ipld::Bytes(vec![]))]))]);
    assert_eq!(
        ipld_to_json(&ipld, JsonForm::Plain).unwrap_err().at(),
        "/a~1b~0c/"
    );
    let key = "k".repeat(100);
    let long = (0..MAX_DEPTH).fold(Ipld::Bytes(vec![]), |value, _| {
        Ipld::Map(BTreeMap::from([(key.clone(), value)]))
    });
    let error = ipld_to_json(&long, JsonForm::Plain).unwrap_err();
    assert!(error.at().len() <= 300 + '…'.len_utf8(), "{}", error.at());
    assert!(error.at().starts_with("/kkk"));
}

#[test]
fn codes_are_stable() {
    let at = || "/".to_owned();
    let errors = [
        (
            IpldJsonError::TooDeep {
                at: at(),
                limit: 64,
            },
            "too_deep",
        ),
        (
            IpldJsonError::IntegerOutOfRange { at: at() },
            "integer_out_of_range",
        ),
        (IpldJsonError::NotFinite { at: at() }, "not_finite"),
        (IpldJsonError::Bytes { at: at() }, "no_json_form"),
        (IpldJsonError::Link { at: at() }, "no_json_form"),
        (
            IpldJsonError::BadReservedForm {
                at: at(),
                message: "m".into(),
            },
            "bad_dag_json",
        ),
    ];
    for (error, code) in errors {
        assert_eq!(error.code(), code);
    }
}
