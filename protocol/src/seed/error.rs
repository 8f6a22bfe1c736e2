//! The one error enum of the Seed wire layer.
//!
//! Every way a signed request, a capability blob or a typed action can be
//! refused while it is still bytes ends here, with a stable snake_case code.
//! How a code becomes an HTTP status is the server's business, not this
//! layer's: the same error may be a 400 over HTTP and an `error` frame on a
//! WebSocket.

/// Why bytes from a Seed client were refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SeedError {
    /// Not well-formed DAG-CBOR (truncated, indefinite lengths, a tag other
    /// than 42, duplicate or non-string map keys, trailing bytes, …).
    #[error("bad CBOR: {message}")]
    BadCbor { message: String },
    /// Nesting deeper than the decoder accepts.
    #[error("CBOR nesting deeper than {limit} levels")]
    TooDeep { limit: usize },
    /// More bytes than the caller allowed, or more items (scalars, strings,
    /// arrays, maps, keys) than one decoded document may hold; `unit` says
    /// which (`"bytes"` or `"items"`).
    #[error("{size} {unit} exceed the limit of {limit}")]
    TooLarge {
        size: usize,
        limit: usize,
        unit: &'static str,
    },
    /// The envelope map has the wrong shape: a missing or unknown key, a
    /// wrong type, a signature that is not 64 bytes, an action that is not a
    /// map or has no string `_`.
    #[error("bad envelope: {message}")]
    BadEnvelope { message: String },
    /// A principal is not `0xed 0x01` followed by a 32-byte Ed25519 key, or
    /// its string form is not base58btc multibase.
    #[error("bad principal: {message}")]
    BadPrincipal { message: String },
    /// The envelope's own `signer` or `account` is not an Ed25519 principal
    /// (another key type's prefix, a wrong length): the envelope cannot be
    /// verified. Same code as [`SeedError::BadPrincipal`]; a server answers
    /// it as a verification failure, as the reference does.
    #[error("bad principal: {message}")]
    UnverifiablePrincipal { message: String },
    /// The Ed25519 signature does not verify over the signing bytes.
    #[error("invalid signature")]
    BadSignature,
    /// The action's `ts` is missing or not an integer number of milliseconds.
    #[error("bad timestamp: {message}")]
    BadTimestamp { message: String },
    /// A typed action is missing a field, has an unknown one, or a field of
    /// the wrong type.
    #[error("{message}")]
    BadAction { message: String },
    /// A Capability blob is malformed or its own signature does not verify.
    #[error("bad capability: {message}")]
    BadCapability { message: String },
    /// A value could not be written as DAG-CBOR (a NaN or infinite float).
    #[error("cannot encode: {message}")]
    Encode { message: String },
}

impl SeedError {
    /// The stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            SeedError::BadCbor { .. } => "bad_cbor",
            SeedError::TooDeep { .. } => "too_deep",
            SeedError::TooLarge { .. } => "too_large",
            SeedError::BadEnvelope { .. } => "bad_envelope",
            SeedError::BadPrincipal { .. } | SeedError::UnverifiablePrincipal { .. } => {
                "bad_principal"
            }
            SeedError::BadSignature => "bad_signature",
            SeedError::BadTimestamp { .. } => "bad_timestamp",
            SeedError::BadAction { .. } => "bad_request",
            SeedError::BadCapability { .. } => "bad_capability",
            SeedError::Encode { .. } => "encode_failed",
        }
    }

    pub(crate) fn bad_cbor(message: impl Into<String>) -> Self {
        SeedError::BadCbor {
            message: bounded(message.into()),
        }
    }

    pub(crate) fn bad_envelope(message: impl Into<String>) -> Self {
        SeedError::BadEnvelope {
            message: bounded(message.into()),
        }
    }

    pub(crate) fn bad_principal(message: impl Into<String>) -> Self {
        SeedError::BadPrincipal {
            message: bounded(message.into()),
        }
    }

    pub(crate) fn bad_action(message: impl Into<String>) -> Self {
        SeedError::BadAction {
            message: bounded(message.into()),
        }
    }

    pub(crate) fn bad_capability(message: impl Into<String>) -> Self {
        SeedError::BadCapability {
            message: bounded(message.into()),
        }
    }
}

/// Longest message an error carries. Decoder messages can quote the input,
/// and an error answer must stay small whatever the request was.
const MAX_MESSAGE_BYTES: usize = 300;

pub(crate) fn bounded(mut message: String) -> String {
    if message.len() > MAX_MESSAGE_BYTES {
        let mut cut = MAX_MESSAGE_BYTES;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push('…');
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        let error = SeedError::bad_action("é".repeat(400));
        let SeedError::BadAction { message } = error else {
            panic!("wrong variant");
        };
        assert!(message.len() <= MAX_MESSAGE_BYTES + '…'.len_utf8());
        assert!(message.ends_with('…'));
    }

    #[test]
    fn codes_are_stable() {
        assert_eq!(SeedError::BadSignature.code(), "bad_signature");
        assert_eq!(SeedError::bad_action("x").code(), "bad_request");
        assert_eq!(SeedError::TooDeep { limit: 64 }.code(), "too_deep");
    }
}
