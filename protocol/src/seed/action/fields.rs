//! Reading the fields of a decoded map strictly, with errors that name the
//! field.
//!
//! Typed actions are read by hand rather than through a serde derive: a
//! derived decoder cannot say which field had the wrong type, cannot tell
//! an absent `modelOverride` from a null one, and would quietly accept
//! integers where Seed's types say strings. Every reader here consumes the
//! fields it knows; [`Fields::finish`] then refuses whatever is left.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;

use crate::seed::{Principal, SeedError};

/// A value that can be read from one decoded field. `path` names the field
/// in error messages (`definition.tools[2]`).
pub(crate) trait FromField: Sized {
    fn from_field(value: Ipld, path: &str) -> Result<Self, SeedError>;
}

/// The fields of one map, consumed as they are read.
pub(crate) struct Fields {
    /// Prefix of every path read from this map: empty at the top level,
    /// `definition.` inside a definition.
    prefix: String,
    map: BTreeMap<String, Ipld>,
}

impl Fields {
    pub(crate) fn new(map: BTreeMap<String, Ipld>) -> Self {
        Fields {
            prefix: String::new(),
            map,
        }
    }

    /// The fields of the map held by the field at `path`.
    pub(crate) fn nested(value: Ipld, path: &str) -> Result<Self, SeedError> {
        match value {
            Ipld::Map(map) => Ok(Fields {
                prefix: format!("{path}."),
                map,
            }),
            _ => Err(wrong_type(path, "a map")),
        }
    }

    pub(crate) fn path(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// A required field; null counts as missing.
    pub(crate) fn req<T: FromField>(&mut self, key: &str) -> Result<T, SeedError> {
        let path = self.path(key);
        match self.map.remove(key) {
            None | Some(Ipld::Null) => {
                Err(SeedError::bad_action(format!("missing field `{path}`")))
            }
            Some(value) => T::from_field(value, &path),
        }
    }

    /// An optional field. Null reads as absent: Seed's encoder writes an
    /// `undefined` as null, so a client that forgot to omit one still means
    /// "absent".
    pub(crate) fn opt<T: FromField>(&mut self, key: &str) -> Result<Option<T>, SeedError> {
        let path = self.path(key);
        match self.map.remove(key) {
            None | Some(Ipld::Null) => Ok(None),
            Some(value) => T::from_field(value, &path).map(Some),
        }
    }

    /// A required field of any value, null included (Seed's `unknown`):
    /// only an absent field is missing.
    pub(crate) fn req_any(&mut self, key: &str) -> Result<Ipld, SeedError> {
        let path = self.path(key);
        self.map
            .remove(key)
            .ok_or_else(|| SeedError::bad_action(format!("missing field `{path}`")))
    }

    /// An optional field of any value; absent and null are `None`.
    pub(crate) fn opt_any(&mut self, key: &str) -> Result<Option<Ipld>, SeedError> {
        Ok(match self.map.remove(key) {
            None | Some(Ipld::Null) => None,
            Some(value) => Some(value),
        })
    }

    /// A required byte string.
    pub(crate) fn req_bytes(&mut self, key: &str) -> Result<Vec<u8>, SeedError> {
        let path = self.path(key);
        match self.map.remove(key) {
            None | Some(Ipld::Null) => {
                Err(SeedError::bad_action(format!("missing field `{path}`")))
            }
            Some(Ipld::Bytes(bytes)) => Ok(bytes),
            Some(_) => Err(wrong_type(&path, "bytes")),
        }
    }

    /// An optional map kept opaque; null reads as absent.
    pub(crate) fn opt_map(&mut self, key: &str) -> Result<Option<Ipld>, SeedError> {
        let path = self.path(key);
        match self.map.remove(key) {
            None | Some(Ipld::Null) => Ok(None),
            Some(map @ Ipld::Map(_)) => Ok(Some(map)),
            Some(_) => Err(wrong_type(&path, "a map")),
        }
    }

    /// An optional field where null means something (clear it): absent is
    /// `None`, null is `Some(Ipld::Null)`, a map is `Some(map)`.
    pub(crate) fn nullable_map(&mut self, key: &str) -> Result<Option<Ipld>, SeedError> {
        let path = self.path(key);
        match self.map.remove(key) {
            None => Ok(None),
            Some(value @ (Ipld::Null | Ipld::Map(_))) => Ok(Some(value)),
            Some(_) => Err(wrong_type(&path, "a map or null")),
        }
    }

    /// Refuses the fields nobody read.
    pub(crate) fn finish(self) -> Result<(), SeedError> {
        match self.map.keys().next() {
            None => Ok(()),
            Some(key) => Err(SeedError::bad_action(format!(
                "unknown field `{}{key}`",
                self.prefix
            ))),
        }
    }
}

pub(crate) fn wrong_type(path: &str, expected: &str) -> SeedError {
    SeedError::bad_action(format!("`{path}` must be {expected}"))
}

impl FromField for String {
    fn from_field(value: Ipld, path: &str) -> Result<Self, SeedError> {
        match value {
            Ipld::String(text) => Ok(text),
            _ => Err(wrong_type(path, "a string")),
        }
    }
}

impl FromField for bool {
    fn from_field(value: Ipld, path: &str) -> Result<Self, SeedError> {
        match value {
            Ipld::Bool(flag) => Ok(flag),
            _ => Err(wrong_type(path, "a boolean")),
        }
    }
}

impl FromField for u64 {
    fn from_field(value: Ipld, path: &str) -> Result<Self, SeedError> {
        match value {
            Ipld::Integer(number) => {
                u64::try_from(number).map_err(|_| wrong_type(path, "a non-negative integer"))
            }
            _ => Err(wrong_type(path, "a non-negative integer")),
        }
    }
}

impl FromField for i64 {
    fn from_field(value: Ipld, path: &str) -> Result<Self, SeedError> {
        match value {
            Ipld::Integer(number) => {
                i64::try_from(number).map_err(|_| wrong_type(path, "an integer"))
            }
            _ => Err(wrong_type(path, "an integer")),
        }
    }
}

/// Any value, kept as decoded (prompt blocks, metadata, model defaults).
impl FromField for Ipld {
    fn from_field(value: Ipld, _path: &str) -> Result<Self, SeedError> {
        Ok(value)
    }
}

impl<T: FromField> FromField for Vec<T> {
    fn from_field(value: Ipld, path: &str) -> Result<Self, SeedError> {
        match value {
            Ipld::List(items) => items
                .into_iter()
                .enumerate()
                .map(|(index, item)| T::from_field(item, &format!("{path}[{index}]")))
                .collect(),
            _ => Err(wrong_type(path, "a list")),
        }
    }
}

impl FromField for BTreeMap<String, String> {
    fn from_field(value: Ipld, path: &str) -> Result<Self, SeedError> {
        match value {
            Ipld::Map(map) => map
                .into_iter()
                .map(|(key, value)| {
                    let value = String::from_field(value, &format!("{path}.{key}"))?;
                    Ok((key, value))
                })
                .collect(),
            _ => Err(wrong_type(path, "a map of strings")),
        }
    }
}

/// A principal written as its string form (`z6Mk…`), as account ids are.
impl FromField for Principal {
    fn from_field(value: Ipld, path: &str) -> Result<Self, SeedError> {
        let text = String::from_field(value, path)?;
        text.parse()
            .map_err(|error: SeedError| SeedError::bad_action(format!("`{path}`: {error}")))
    }
}
