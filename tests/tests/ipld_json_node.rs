//! Cross-implementation: a JSON value becomes the same DAG-CBOR bytes
//! through our one JSON-to-IPLD conversion (`agentos_protocol::seed::
//! ipld_json`) and our canonical encoder as through Seed's JavaScript
//! client, which encodes `JSON.parse(text)` with `@ipld/dag-cbor` (driven
//! through `protocol/tests/node/seed-sign.mjs encode`).
//!
//! What JavaScript cannot hold is the documented rest: an integer literal
//! beyond 2^53 − 1 in magnitude that fits 64 bits, which `JSON.parse`
//! rounds to a double (written as a float) while we keep it exact, as a
//! client holding it as a `BigInt` writes it; those cases are compared
//! with `encode(BigInt(text))`, and the float JavaScript's `JSON.parse`
//! makes of them is checked to be the difference. A lone surrogate (JSON
//! can escape one, `JSON.parse` keeps it and the encoder writes U+FFFD) and
//! a literal out of the double range (`1e400`, which `JSON.parse` makes
//! Infinity and the encoder refuses) never reach the conversion: our JSON
//! parser refuses both.
//!
//! Needs node and the peers `scripts/install-peers` puts in `.peers/`;
//! without them the test prints a note and passes (CI installs the peers
//! first, so it runs there).

mod common;

use agentos_protocol::seed::{cbor, json_to_ipld, JsonForm};
use common::{node_peers_present, seed_sign, unhex};
use serde_json::{json, Value};

/// Node's bytes for each item (`{"json": text}` or `{"bigint": text}`).
fn node_encode(items: &[Value]) -> Vec<Vec<u8>> {
    let output = seed_sign("encode", &Value::Array(items.to_vec()));
    let hexes: Vec<String> = serde_json::from_str(&output).expect("a list of hex");
    hexes.iter().map(|h| unhex(h)).collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Our bytes for a JSON text, in both forms (no reserved forms here, so
/// they agree).
fn ours(text: &str) -> Vec<u8> {
    let value: Value = serde_json::from_str(text).expect("the case parses");
    let plain = json_to_ipld(&value, JsonForm::Plain).expect("converts");
    let dag = json_to_ipld(&value, JsonForm::DagJson).expect("converts");
    assert_eq!(plain, dag, "{text}");
    cbor::to_canonical(&plain).expect("encodes")
}

/// JSON texts JavaScript represents: our bytes must be Node's.
fn same_as_javascript() -> Vec<String> {
    let mut texts: Vec<String> = [
        // Integers at every CBOR length boundary, and the safe range's ends.
        "0",
        "1",
        "-1",
        "23",
        "24",
        "255",
        "256",
        "65535",
        "65536",
        "4294967295",
        "4294967296",
        "-24",
        "-25",
        "-256",
        "-257",
        "-65537",
        "-4294967296",
        "-4294967297",
        "9007199254740991",
        "-9007199254740991",
        // Whole numbers however spelled are integers; -0 is 0.
        "1.0",
        "-0",
        "-0.0",
        "0.0",
        "1e3",
        "1E+2",
        "-2.0e1",
        "9007199254740991.0",
        // Floats: fractions, extremes, subnormals, long mantissas, and
        // whole doubles past the safe range.
        "0.1",
        "0.5",
        "-1.5",
        "4.35",
        "0.30000000000000004",
        "3.141592653589793238462643383279",
        "1e300",
        "-1e-300",
        "5e-324",
        "2.2250738585072014e-308",
        "1.7976931348623157e308",
        "9007199254740992.0",
        "9007199254740993.5",
        "1e20",
        "18446744073709551616",
        "-9223372036854775809",
        "123456789012345678901234567890",
        // Strings.
        r#""""#,
        r#""héllo wörld""#,
        r#""日本語のテキスト""#,
        r#""😀 \ud83d\ude00""#,
        r#""\u0000\n\t\"\\/""#,
        // Lists and maps: empty, nested, keys unsorted and of every
        // length (canonical order is by encoded length, then bytes).
        "[]",
        "{}",
        "[1,[2,[3,[]]],{}]",
        r#"{"b":1,"a":2,"aa":3,"":4,"é":5,"z":6,"ab":[{"y":null,"x":true}]}"#,
        r#"{"nested":{"deeper":{"deepest":[1.0,0.5,"s",false,null,-0]}}}"#,
        r#"{"ü":1,"u":2,"日":3,"zz":4,"😀":5,"~":6}"#,
    ]
    .iter()
    .map(|t| t.to_string())
    .collect();
    // Length headers past one and two bytes.
    texts.push(Value::String("x".repeat(300)).to_string());
    texts.push(Value::String("é".repeat(40_000)).to_string());
    texts.push(json!((0..30).collect::<Vec<i32>>()).to_string());
    let keys: serde_json::Map<String, Value> = (0..30)
        .map(|i| (format!("k{}", 30 - i), json!(i as f64 / 4.0)))
        .collect();
    texts.push(Value::Object(keys).to_string());
    // As deep as the conversion goes.
    let deepest =
        (0..agentos_protocol::seed::ipld_json::MAX_DEPTH).fold(json!(1.5), |v, _| json!([v]));
    texts.push(deepest.to_string());
    texts
}

/// Integer literals JavaScript's `JSON.parse` rounds: we keep them exact,
/// as a `BigInt` is written.
const EXACT_PAST_JAVASCRIPT: [&str; 7] = [
    "9007199254740992",
    "9007199254740993",
    "-9007199254740992",
    "-9007199254740993",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551615",
];

#[test]
fn json_values_encode_as_seeds_javascript_client_encodes_them() {
    if !node_peers_present("the Node encoding check") {
        return;
    }
    let texts = same_as_javascript();
    let mut items: Vec<Value> = texts.iter().map(|t| json!({"json": t})).collect();
    for text in EXACT_PAST_JAVASCRIPT {
        items.push(json!({"bigint": text}));
        items.push(json!({"json": text}));
    }
    let node = node_encode(&items);
    assert_eq!(node.len(), items.len());

    for (text, theirs) in texts.iter().zip(&node) {
        let ours = ours(text);
        assert_eq!(
            hex(&ours),
            hex(theirs),
            "{}",
            text.chars().take(80).collect::<String>()
        );
    }

    let past = &node[texts.len()..];
    for (text, pair) in EXACT_PAST_JAVASCRIPT.iter().zip(past.chunks(2)) {
        let (as_bigint, as_parsed) = (&pair[0], &pair[1]);
        assert_eq!(hex(&ours(text)), hex(as_bigint), "{text}");
        // What JSON.parse makes of it: a rounded double, a 64-bit float.
        assert_eq!(as_parsed.len(), 9, "{text}");
        assert_eq!(as_parsed[0], 0xfb, "{text}");
        assert_ne!(as_parsed, as_bigint, "{text}");
    }

    // Never reaching the conversion: what our parser refuses.
    for refused in [r#""\ud800""#, "1e400", "-1e400"] {
        assert!(serde_json::from_str::<Value>(refused).is_err(), "{refused}");
    }
}
