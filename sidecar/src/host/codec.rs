//! Params in, answers out: a method's params decoded into its type (a
//! mismatch is -32602) and its answer serialized once, so the connection
//! splices it into the response frame.

use agentos_protocol::host::{codes, ErrorObject};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

/// A method's answer, serialized once.
pub(super) fn reply(value: &impl Serialize) -> Result<Box<RawValue>, ErrorObject> {
    serde_json::value::to_raw_value(value)
        .map_err(|e| ErrorObject::new(codes::INTERNAL_ERROR, e.to_string()))
}

pub(super) fn params<T: DeserializeOwned>(value: Value) -> Result<T, ErrorObject> {
    let value = if value.is_null() { json!({}) } else { value };
    serde_json::from_value(value).map_err(|e| ErrorObject::invalid_params(e.to_string()))
}
