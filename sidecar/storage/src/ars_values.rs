//! The one conversion between the handle's values (`agentos_schema::SqlValue`)
//! and Actor Runtime Socket wire values (`ars::SqlValue`). The client
//! (`actor_uds`) and the reference server (`ars_server`) both use it, so the
//! two sides of the socket can never disagree on how a value maps.

use agentos_protocol::ars;
use agentos_schema::SqlValue;

/// The handle's value as a wire value.
pub fn to_wire(value: SqlValue) -> ars::SqlValue {
    match value {
        SqlValue::Null => ars::SqlValue::SqlNull,
        SqlValue::Integer(v) => ars::SqlValue::SqlInteger(v),
        SqlValue::Real(v) => ars::SqlValue::SqlReal(v),
        SqlValue::Text(v) => ars::SqlValue::SqlText(v),
        SqlValue::Blob(v) => ars::SqlValue::SqlBlob(v),
    }
}

/// A wire value as the handle's value.
pub fn from_wire(value: ars::SqlValue) -> SqlValue {
    match value {
        ars::SqlValue::SqlNull => SqlValue::Null,
        ars::SqlValue::SqlInteger(v) => SqlValue::Integer(v),
        ars::SqlValue::SqlReal(v) => SqlValue::Real(v),
        ars::SqlValue::SqlText(v) => SqlValue::Text(v),
        ars::SqlValue::SqlBlob(v) => SqlValue::Blob(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_round_trips() {
        let values = [
            SqlValue::Null,
            SqlValue::Integer(-7),
            SqlValue::Real(1.5),
            SqlValue::Text("é".into()),
            SqlValue::Blob(vec![0, 255]),
        ];
        for value in values {
            assert_eq!(from_wire(to_wire(value.clone())), value);
        }
    }
}
