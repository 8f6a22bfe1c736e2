//! The one conversion between JSON values and the IPLD data model, with the
//! one number rule: the one Seed's JavaScript clients follow when they
//! encode a JavaScript value as DAG-CBOR. Everything that turns JSON into
//! IPLD for the wire (event payloads, tool schemas, a CLI's action fields,
//! a test's actions) or IPLD into JSON (a tool's schema, a verb's input, a
//! response printed for a person) goes through here, so a value has the
//! same bytes, and the same CID, whichever door it came through.
//!
//! JSON to IPLD, a number:
//!
//! - written as an integer that fits 64 bits (`i64` or `u64`): that exact
//!   integer. Up to 2^53 − 1 in magnitude this is what a JavaScript client
//!   writes. Beyond it, `JSON.parse` would already have rounded the value
//!   to a double (which the client then writes as a float); we keep the
//!   exact integer instead, which is what a JavaScript client holding the
//!   value as a `BigInt` writes. An integer is never silently rounded.
//! - any other number (a fraction, an exponent, or an integer beyond 64
//!   bits, which the parser holds as a double): an integer when the double
//!   is a whole number of at most 2^53 − 1 in magnitude (`1.0`, `1e3`, `-0`
//!   all are, and `-0` is the integer 0), as `Number.isSafeInteger` decides
//!   in the client's encoder; otherwise a 64-bit float.
//! - never NaN or an infinity: JSON text cannot spell them and the parser
//!   refuses a literal out of range (`1e400`), so a value that somehow holds
//!   one is refused ([`IpldJsonError::NotFinite`]).
//!
//! IPLD to JSON: an integer within `i64` or `u64` is a JSON integer; one
//! outside (CBOR reaches −2^64) is refused rather than rounded
//! ([`IpldJsonError::IntegerOutOfRange`]; a JavaScript client would hold it
//! as a `BigInt`, which `JSON.stringify` refuses too). A float is a JSON
//! number (a whole float such as 1.0 is written `1.0`, and reads back as
//! the integer 1, as it does in JavaScript); NaN and infinities, which
//! DAG-CBOR forbids, are refused ([`IpldJsonError::NotFinite`]).
//!
//! Bytes and links depend on the [`JsonForm`]: plain JSON has neither (IPLD
//! holding one is refused, naming where), DAG-JSON writes them under a lone
//! `/` key. Nesting is bounded both ways by [`MAX_DEPTH`], the decoder's own
//! bound, so a hostile document cannot overflow the stack and everything
//! converted here decodes again. JSON the process stored itself (an
//! adapter's event payload) is rendered by [`json_to_ipld_clipped`], which
//! never fails and puts null where it is nested deeper than [`CLIP_DEPTH`].
//!
//! Every error names where it happened as a JSON Pointer. The errors are
//! their own enum, not [`super::SeedError`]: a conversion is not a refusal
//! of wire bytes, and each caller (a server answer, the CLI, a tool's
//! checks) maps it at its own boundary.
//!
//! The rule is only as exact as the parse before it: the workspace parses
//! JSON floats correctly rounded (serde_json's `float_roundtrip`), as
//! `JSON.parse` does, so the same text is the same double on both sides.

use std::collections::BTreeMap;

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use ipld_core::cid::Cid;
use ipld_core::ipld::Ipld;
use serde_json::{Map, Number, Value};

pub use super::cbor::MAX_DEPTH;
use super::error::bounded;

/// The largest integer a JavaScript number holds exactly and its client
/// writes as a CBOR integer (`Number.MAX_SAFE_INTEGER`, 2^53 − 1).
pub const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// How bytes and links appear in JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JsonForm {
    /// Plain JSON data: no bytes, no links. IPLD holding either has no JSON
    /// form; every JSON object is a map, `{"/": …}` included.
    Plain,
    /// DAG-JSON: bytes are `{"/": {"bytes": "<base64, no padding>"}}` (padded
    /// base64 is read too) and a link is `{"/": "<CID>"}`. An object whose
    /// only key is `/` is reserved for those two forms: any other value
    /// there is refused rather than guessed at.
    DagJson,
}

/// Why a value could not be converted. Every variant names where, as a JSON
/// Pointer (`/` for the whole value).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IpldJsonError {
    /// More than [`MAX_DEPTH`] arrays and maps inside one another.
    #[error("{at}: nested deeper than {limit} levels")]
    TooDeep { at: String, limit: usize },
    /// An IPLD integer below `i64::MIN` or above `u64::MAX`.
    #[error("{at}: integer out of range")]
    IntegerOutOfRange { at: String },
    /// NaN or an infinity.
    #[error("{at}: not a finite number")]
    NotFinite { at: String },
    /// Bytes, in plain JSON.
    #[error("{at}: bytes have no JSON form")]
    Bytes { at: String },
    /// A link, in plain JSON.
    #[error("{at}: a link has no JSON form")]
    Link { at: String },
    /// DAG-JSON: an object whose only key is `/` that is neither bytes nor
    /// a link, or whose base64 or CID does not parse.
    #[error("{at}: {message}")]
    BadReservedForm { at: String, message: String },
}

impl IpldJsonError {
    /// The stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            IpldJsonError::TooDeep { .. } => "too_deep",
            IpldJsonError::IntegerOutOfRange { .. } => "integer_out_of_range",
            IpldJsonError::NotFinite { .. } => "not_finite",
            IpldJsonError::Bytes { .. } | IpldJsonError::Link { .. } => "no_json_form",
            IpldJsonError::BadReservedForm { .. } => "bad_dag_json",
        }
    }

    /// Where, as a JSON Pointer.
    pub fn at(&self) -> &str {
        match self {
            IpldJsonError::TooDeep { at, .. }
            | IpldJsonError::IntegerOutOfRange { at }
            | IpldJsonError::NotFinite { at }
            | IpldJsonError::Bytes { at }
            | IpldJsonError::Link { at }
            | IpldJsonError::BadReservedForm { at, .. } => at,
        }
    }
}

/// JSON to IPLD.
pub fn json_to_ipld(value: &Value, form: JsonForm) -> Result<Ipld, IpldJsonError> {
    let reading = Reading { form, clip: false };
    reading.ipld(value, 0).map_err(Failure::into_error)
}

/// How deep [`json_to_ipld_clipped`] keeps JSON: the decoder's bound less
/// eight levels for the answer that carries the value (an answer holds an
/// event's payload inside the event, inside a list, inside its own map:
/// four levels today).
pub const CLIP_DEPTH: usize = MAX_DEPTH - 8;

/// JSON this process holds (stored event payloads, plans, run journals) as
/// IPLD for an answer, never failing: plain JSON, where an array or map
/// nested deeper than [`CLIP_DEPTH`] becomes null in its place (the rest of
/// the value is kept), so the answer that carries it stays within what a
/// decoder accepts.
pub fn json_to_ipld_clipped(value: &Value) -> Ipld {
    let reading = Reading {
        form: JsonForm::Plain,
        clip: true,
    };
    // A clipping reading of plain JSON has nothing left to fail on.
    reading.ipld(value, 0).unwrap_or(Ipld::Null)
}

/// IPLD to JSON.
pub fn ipld_to_json(value: &Ipld, form: JsonForm) -> Result<Value, IpldJsonError> {
    json(value, form, 0).map_err(Failure::into_error)
}

/// Standard base64 as DAG-JSON writes it (no padding); reading also takes
/// padded input, which some encoders produce.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// What went wrong, before the pointer is known.
enum Problem {
    TooDeep,
    IntegerOutOfRange,
    NotFinite,
    Bytes,
    Link,
    BadReservedForm(String),
}

/// A problem and the path to it, innermost step first: the pointer is only
/// built when something fails.
struct Failure {
    problem: Problem,
    path: Vec<String>,
}

impl Failure {
    fn new(problem: Problem) -> Self {
        Failure {
            problem,
            path: Vec::new(),
        }
    }

    /// The same failure, one step further out: inside `key`.
    fn within(mut self, key: &str) -> Self {
        self.path.push(key.replace('~', "~0").replace('/', "~1"));
        self
    }

    fn at_index(mut self, index: usize) -> Self {
        self.path.push(index.to_string());
        self
    }

    fn into_error(self) -> IpldJsonError {
        let at = if self.path.is_empty() {
            "/".to_owned()
        } else {
            bounded(
                self.path
                    .iter()
                    .rev()
                    .flat_map(|token| ["/", token.as_str()])
                    .collect(),
            )
        };
        match self.problem {
            Problem::TooDeep => IpldJsonError::TooDeep {
                at,
                limit: MAX_DEPTH,
            },
            Problem::IntegerOutOfRange => IpldJsonError::IntegerOutOfRange { at },
            Problem::NotFinite => IpldJsonError::NotFinite { at },
            Problem::Bytes => IpldJsonError::Bytes { at },
            Problem::Link => IpldJsonError::Link { at },
            Problem::BadReservedForm(message) => IpldJsonError::BadReservedForm {
                at,
                message: bounded(message),
            },
        }
    }
}

/// How JSON is read: its form, and whether what cannot be carried becomes
/// null instead of failing.
#[derive(Clone, Copy)]
struct Reading {
    form: JsonForm,
    clip: bool,
}

impl Reading {
    /// `depth` is how many arrays and maps hold `value`.
    fn ipld(self, value: &Value, depth: usize) -> Result<Ipld, Failure> {
        Ok(match value {
            Value::Null => Ipld::Null,
            Value::Bool(b) => Ipld::Bool(*b),
            Value::Number(number) => match number_to_ipld(number) {
                Some(ipld) => ipld,
                None if self.clip => Ipld::Null,
                None => return Err(Failure::new(Problem::NotFinite)),
            },
            Value::String(text) => Ipld::String(text.clone()),
            Value::Array(items) => {
                if depth >= self.limit() {
                    return self.too_deep();
                }
                Ipld::List(
                    items
                        .iter()
                        .enumerate()
                        .map(|(i, item)| self.ipld(item, depth + 1).map_err(|f| f.at_index(i)))
                        .collect::<Result<_, _>>()?,
                )
            }
            Value::Object(map) => {
                if self.form == JsonForm::DagJson {
                    if let Some(special) = reserved(map)? {
                        return Ok(special);
                    }
                }
                if depth >= self.limit() {
                    return self.too_deep();
                }
                Ipld::Map(
                    map.iter()
                        .map(|(key, item)| {
                            let item = self.ipld(item, depth + 1).map_err(|f| f.within(key))?;
                            Ok((key.clone(), item))
                        })
                        .collect::<Result<BTreeMap<_, _>, Failure>>()?,
                )
            }
        })
    }

    /// How many arrays and maps may hold a value.
    fn limit(self) -> usize {
        if self.clip {
            CLIP_DEPTH
        } else {
            MAX_DEPTH
        }
    }

    fn too_deep(self) -> Result<Ipld, Failure> {
        if self.clip {
            Ok(Ipld::Null)
        } else {
            Err(Failure::new(Problem::TooDeep))
        }
    }
}

/// The number rule (see the module's description); `None` for a number
/// that is not finite.
fn number_to_ipld(number: &Number) -> Option<Ipld> {
    if let Some(integer) = number.as_i64() {
        return Some(Ipld::Integer(i128::from(integer)));
    }
    if let Some(integer) = number.as_u64() {
        return Some(Ipld::Integer(i128::from(integer)));
    }
    let float = number.as_f64().filter(|f| f.is_finite())?;
    if float.fract() == 0.0 && float.abs() <= MAX_SAFE_INTEGER as f64 {
        // Exact: a whole double of at most 53 bits (and -0 is 0).
        Some(Ipld::Integer(float as i128))
    } else {
        Some(Ipld::Float(float))
    }
}

/// DAG-JSON's two forms under a lone `/` key, or `None` for a plain map.
fn reserved(map: &Map<String, Value>) -> Result<Option<Ipld>, Failure> {
    let inner = match map.get("/") {
        Some(inner) if map.len() == 1 => inner,
        _ => return Ok(None),
    };
    let bad = |message: String| Failure::new(Problem::BadReservedForm(message));
    match inner {
        Value::String(text) => Cid::try_from(text.as_str())
            .map(|cid| Some(Ipld::Link(cid)))
            .map_err(|e| bad(format!("{text:?} is not a CID: {e}"))),
        Value::Object(bytes) if bytes.len() == 1 => match bytes.get("bytes") {
            Some(Value::String(text)) => BASE64
                .decode(text)
                .map(|decoded| Some(Ipld::Bytes(decoded)))
                .map_err(|e| bad(format!("bytes that are not base64: {e}"))),
            _ => Err(bad(RESERVED.to_owned())),
        },
        _ => Err(bad(RESERVED.to_owned())),
    }
}

const RESERVED: &str =
    "an object whose only key is \"/\" must be {\"/\": {\"bytes\": \"<base64>\"}} or {\"/\": \"<CID>\"}";

/// IPLD to JSON; `depth` is how many lists and maps hold `value`.
fn json(value: &Ipld, form: JsonForm, depth: usize) -> Result<Value, Failure> {
    Ok(match value {
        Ipld::Null => Value::Null,
        Ipld::Bool(b) => Value::Bool(*b),
        Ipld::Integer(integer) => {
            if let Ok(small) = i64::try_from(*integer) {
                Value::from(small)
            } else if let Ok(large) = u64::try_from(*integer) {
                Value::from(large)
            } else {
                return Err(Failure::new(Problem::IntegerOutOfRange));
            }
        }
        Ipld::Float(float) => Number::from_f64(*float)
            .map(Value::Number)
            .ok_or_else(|| Failure::new(Problem::NotFinite))?,
        Ipld::String(text) => Value::String(text.clone()),
        Ipld::Bytes(bytes) => match form {
            JsonForm::Plain => return Err(Failure::new(Problem::Bytes)),
            JsonForm::DagJson => {
                let inner =
                    Map::from_iter([("bytes".to_owned(), Value::String(BASE64.encode(bytes)))]);
                Value::Object(Map::from_iter([("/".to_owned(), Value::Object(inner))]))
            }
        },
        Ipld::Link(cid) => match form {
            JsonForm::Plain => return Err(Failure::new(Problem::Link)),
            JsonForm::DagJson => Value::Object(Map::from_iter([(
                "/".to_owned(),
                Value::String(cid.to_string()),
            )])),
        },
        Ipld::List(items) => {
            if depth >= MAX_DEPTH {
                return Err(Failure::new(Problem::TooDeep));
            }
            Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| json(item, form, depth + 1).map_err(|f| f.at_index(i)))
                    .collect::<Result<_, _>>()?,
            )
        }
        Ipld::Map(map) => {
            if depth >= MAX_DEPTH {
                return Err(Failure::new(Problem::TooDeep));
            }
            Value::Object(
                map.iter()
                    .map(|(key, item)| {
                        let item = json(item, form, depth + 1).map_err(|f| f.within(key))?;
                        Ok((key.clone(), item))
                    })
                    .collect::<Result<Map<_, _>, Failure>>()?,
            )
        }
    })
}

#[cfg(test)]
mod tests;
