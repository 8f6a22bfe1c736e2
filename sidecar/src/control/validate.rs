//! Checks on what callers hand the control plane, before any SQL: every
//! refusal is `invalid_argument` naming the field (or `limit` for a size
//! that has a setting). The wire codec has already decoded principals; the
//! check here keeps the store from holding text that is not one.

use super::error::ControlError;

/// Longest principal text accepted (an Ed25519 principal is 48).
const MAX_PRINCIPAL_CHARS: usize = 128;
/// Longest name of a provider or secret, in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Longest agent name, in bytes.
pub const MAX_AGENT_NAME_BYTES: usize = 1024;
/// Largest provider config, capability or secret metadata, in bytes.
pub const MAX_DOCUMENT_BYTES: usize = 64 * 1024;
/// Most secret names one provider may refer to.
pub const MAX_SECRET_REFS: usize = 32;
/// Longest idempotency request hash, in bytes.
pub const MAX_REQUEST_HASH_BYTES: usize = 64;
/// Longest client request id, in bytes.
pub const MAX_CLIENT_ID_BYTES: usize = 256;
/// Largest response an idempotency record keeps.
pub const MAX_RECORDED_RESPONSE_BYTES: usize = 64 * 1024;

/// A principal in its `z…` base58btc multibase text form.
pub fn principal(field: &str, text: &str) -> Result<(), ControlError> {
    // The wire layer decides what a principal is: an Ed25519 key with its
    // multicodec prefix, in base58btc text.
    let ok = text.len() <= MAX_PRINCIPAL_CHARS
        && text.parse::<agentos_protocol::seed::Principal>().is_ok();
    if ok {
        Ok(())
    } else {
        Err(ControlError::invalid(format!(
            "{field} is not an Ed25519 principal in base58btc text form (z6Mk…)"
        )))
    }
}

/// Text of 1..=`max` bytes without control characters.
pub fn name(field: &str, text: &str, max: usize) -> Result<(), ControlError> {
    if text.is_empty() || text.len() > max {
        return Err(ControlError::invalid(format!(
            "{field} must be 1 to {max} bytes"
        )));
    }
    if text.chars().any(char::is_control) {
        return Err(ControlError::invalid(format!(
            "{field} contains a control character"
        )));
    }
    Ok(())
}

/// Text of at most `max` bytes (possibly empty) without control
/// characters.
pub fn label(field: &str, text: &str, max: usize) -> Result<(), ControlError> {
    if text.is_empty() {
        return Ok(());
    }
    name(field, text, max)
}

/// Bytes of 1..=`max`.
pub fn bytes(field: &str, value: &[u8], min: usize, max: usize) -> Result<(), ControlError> {
    if value.len() < min || value.len() > max {
        return Err(ControlError::invalid(format!(
            "{field} must be {min} to {max} bytes, not {}",
            value.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principals_are_base58btc_text() {
        principal(
            "account",
            "z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK",
        )
        .expect("ok");
        for bad in [
            "",
            "z",
            "6Mkh",
            "z0OIl",
            "zabc def",
            &format!("z{}", "1".repeat(200)),
        ] {
            let err = principal("account", bad).expect_err(bad);
            assert_eq!(err.code(), "invalid_argument");
            assert!(err.to_string().contains("account"), "{err}");
        }
    }

    #[test]
    fn names_are_bounded_and_printable() {
        name("name", "openai", MAX_NAME_BYTES).expect("ok");
        assert!(name("name", "", MAX_NAME_BYTES).is_err());
        assert!(name("name", "a\nb", MAX_NAME_BYTES).is_err());
        assert!(name("name", &"x".repeat(MAX_NAME_BYTES + 1), MAX_NAME_BYTES).is_err());
        label("name", "", 4).expect("empty label");
        assert!(label("name", "abcde", 4).is_err());
        bytes("hash", &[1], 1, 2).expect("ok");
        assert!(bytes("hash", &[], 1, 2).is_err());
    }
}
