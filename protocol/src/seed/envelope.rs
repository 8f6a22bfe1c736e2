//! The signed action envelope that carries every request of the control
//! plane, over HTTP and as a WebSocket `Subscribe`.
//!
//! On the wire it is one DAG-CBOR map, `{type: "AgentsAction", signer, sig,
//! account, action, protocol?, capability?, capabilityBlob?}`. The signature
//! is Ed25519 over the canonical DAG-CBOR of that whole map with `sig`
//! replaced by 64 zero bytes (kept, not removed). A verifier does what Seed's
//! server does: decode, rebuild with the zeroed `sig`, re-encode, verify. So
//! a signer must emit canonical bytes and must not sign null placeholders
//! for absent fields.
//!
//! The action stays an untyped map here: decoding and verifying an envelope
//! never depend on the action's fields, which [`super::Action`] reads later.

use std::collections::BTreeMap;

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use ipld_core::ipld::Ipld;

use super::{cbor, Action, Principal, SeedError};

/// An action as it was signed: `_` (the name), its fields, and `ts`.
pub type ActionMap = BTreeMap<String, Ipld>;

/// The value of the envelope's `type` key.
pub const ENVELOPE_TYPE: &str = "AgentsAction";

/// Bytes in an Ed25519 signature.
pub const SIGNATURE_LEN: usize = 64;

const KEYS: [&str; 8] = [
    "type",
    "signer",
    "sig",
    "account",
    "action",
    "protocol",
    "capability",
    "capabilityBlob",
];

/// A decoded signed action envelope. Decoding checks its shape only;
/// [`Envelope::verify_signature`] checks the signature and
/// [`Envelope::ts_ms`] reads the timestamp.
#[derive(Clone, Debug, PartialEq)]
pub struct Envelope {
    /// The key that signed.
    pub signer: Principal,
    pub sig: [u8; SIGNATURE_LEN],
    /// The account the action runs as; the signer itself or a delegate of it.
    pub account: Principal,
    pub action: ActionMap,
    /// The client's protocol version; absent means 1.
    pub protocol: Option<u64>,
    /// CID (string form) of the Capability blob by which `account`
    /// delegated to `signer`.
    pub capability: Option<String>,
    /// The raw bytes of that Capability blob.
    pub capability_blob: Option<Vec<u8>>,
}

impl Envelope {
    /// Decodes an envelope of at most `max_bytes` bytes and checks its
    /// shape: exactly the known keys, `type` is `"AgentsAction"`, both
    /// principals are Ed25519, `sig` is 64 bytes, `action` is a map whose
    /// `_` is a string.
    pub fn decode(bytes: &[u8], max_bytes: usize) -> Result<Envelope, SeedError> {
        match cbor::from_slice::<Ipld>(bytes, max_bytes)? {
            Ipld::Map(map) => Self::from_map(map),
            _ => Err(SeedError::bad_envelope("the envelope must be a map")),
        }
    }

    fn from_map(mut map: BTreeMap<String, Ipld>) -> Result<Envelope, SeedError> {
        if let Some(unknown) = map.keys().find(|key| !KEYS.contains(&key.as_str())) {
            return Err(SeedError::bad_envelope(format!("unknown key `{unknown}`")));
        }
        match map.remove("type") {
            Some(Ipld::String(kind)) if kind == ENVELOPE_TYPE => {}
            Some(_) => {
                return Err(SeedError::bad_envelope(format!(
                    "`type` must be \"{ENVELOPE_TYPE}\""
                )))
            }
            None => return Err(SeedError::bad_envelope("missing `type`")),
        }
        let signer = principal_field(&mut map, "signer")?;
        let account = principal_field(&mut map, "account")?;
        let sig = match map.remove("sig") {
            Some(Ipld::Bytes(bytes)) => {
                <[u8; SIGNATURE_LEN]>::try_from(bytes.as_slice()).map_err(|_| {
                    SeedError::bad_envelope(format!(
                        "`sig` must be {SIGNATURE_LEN} bytes, got {}",
                        bytes.len()
                    ))
                })?
            }
            Some(_) => return Err(SeedError::bad_envelope("`sig` must be bytes")),
            None => return Err(SeedError::bad_envelope("missing `sig`")),
        };
        let action = match map.remove("action") {
            Some(Ipld::Map(action)) => action,
            Some(_) => return Err(SeedError::bad_envelope("`action` must be a map")),
            None => return Err(SeedError::bad_envelope("missing `action`")),
        };
        if !matches!(action.get("_"), Some(Ipld::String(_))) {
            return Err(SeedError::bad_envelope("`action._` must be a string"));
        }
        let protocol = match map.remove("protocol") {
            None => None,
            Some(Ipld::Integer(value)) => Some(u64::try_from(value).map_err(|_| {
                SeedError::bad_envelope("`protocol` must be a non-negative integer")
            })?),
            Some(_) => {
                return Err(SeedError::bad_envelope(
                    "`protocol` must be a non-negative integer",
                ))
            }
        };
        let capability = match map.remove("capability") {
            None => None,
            Some(Ipld::String(cid)) => Some(cid),
            Some(_) => return Err(SeedError::bad_envelope("`capability` must be a string")),
        };
        let capability_blob = match map.remove("capabilityBlob") {
            None => None,
            Some(Ipld::Bytes(blob)) => Some(blob),
            Some(_) => return Err(SeedError::bad_envelope("`capabilityBlob` must be bytes")),
        };
        Ok(Envelope {
            signer,
            sig,
            account,
            action,
            protocol,
            capability,
            capability_blob,
        })
    }

    /// An envelope for `action` (its `ts` set to `ts_ms`) with a zero
    /// signature, for a caller that sets `protocol` or a capability before
    /// [`Envelope::sign_with`].
    pub fn unsigned(
        mut action: ActionMap,
        account: Principal,
        signer: Principal,
        ts_ms: i64,
    ) -> Envelope {
        action.insert("ts".to_string(), Ipld::Integer(i128::from(ts_ms)));
        Envelope {
            signer,
            sig: [0; SIGNATURE_LEN],
            account,
            action,
            protocol: None,
            capability: None,
            capability_blob: None,
        }
    }

    /// Signs `action` (which must hold its name under `_`) as `account` with
    /// `key`, at `ts_ms`. Fails only when the action holds a value DAG-CBOR
    /// cannot carry (a NaN or infinite float, an integer beyond 64 bits).
    pub fn sign(
        action: ActionMap,
        account: Principal,
        key: &SigningKey,
        ts_ms: i64,
    ) -> Result<Envelope, SeedError> {
        let mut envelope = Envelope::unsigned(action, account, Principal::of_key(key), ts_ms);
        envelope.sign_with(key)?;
        Ok(envelope)
    }

    /// Signs a typed action; see [`Envelope::sign`].
    pub fn sign_action(
        action: &Action,
        account: Principal,
        key: &SigningKey,
        ts_ms: i64,
    ) -> Result<Envelope, SeedError> {
        Envelope::sign(action.to_map()?, account, key, ts_ms)
    }

    /// Makes `key` the signer and signs the envelope as it now stands.
    pub fn sign_with(&mut self, key: &SigningKey) -> Result<(), SeedError> {
        self.signer = Principal::of_key(key);
        let bytes = self.signing_bytes()?;
        self.sig = key.sign(&bytes).to_bytes();
        Ok(())
    }

    /// The bytes the signature covers: the canonical encoding of the whole
    /// envelope with `sig` set to 64 zero bytes.
    pub fn signing_bytes(&self) -> Result<Vec<u8>, SeedError> {
        cbor::to_canonical(&self.to_ipld(&[0; SIGNATURE_LEN]))
    }

    /// The canonical wire bytes.
    pub fn encode(&self) -> Result<Vec<u8>, SeedError> {
        cbor::to_canonical(&self.to_ipld(&self.sig))
    }

    /// Checks the Ed25519 signature (strict verification: no small-order
    /// keys, no malleable signatures).
    pub fn verify_signature(&self) -> Result<(), SeedError> {
        let key = VerifyingKey::from_bytes(&self.signer.public_key())
            .map_err(|_| SeedError::BadSignature)?;
        self.verify_signature_with(&key)
    }

    /// As [`Envelope::verify_signature`], with the signer's key already
    /// decompressed (a server keeps the keys it sees often, since
    /// decompressing one costs a good part of a verification). `key` must
    /// be the signer's: any other fails.
    pub fn verify_signature_with(&self, key: &VerifyingKey) -> Result<(), SeedError> {
        if key.as_bytes() != &self.signer.public_key() {
            return Err(SeedError::BadSignature);
        }
        let bytes = self.signing_bytes()?;
        key.verify_strict(&bytes, &Signature::from_bytes(&self.sig))
            .map_err(|_| SeedError::BadSignature)
    }

    /// The action's name (`action._`); empty when a hand-built envelope has
    /// none (a decoded one always has one).
    pub fn action_name(&self) -> &str {
        match self.action.get("_") {
            Some(Ipld::String(name)) => name,
            _ => "",
        }
    }

    /// The action's timestamp in Unix epoch milliseconds. It must be an
    /// integer: Seed's encoder writes whole numbers as integers, so a float
    /// here is a client bug, and a missing one cannot be checked against
    /// the clock.
    pub fn ts_ms(&self) -> Result<i64, SeedError> {
        let message = match self.action.get("ts") {
            Some(Ipld::Integer(ts)) => match i64::try_from(*ts) {
                Ok(ts) => return Ok(ts),
                Err(_) => "`ts` is out of range",
            },
            Some(Ipld::Float(_)) => "`ts` must be an integer number of milliseconds, not a float",
            Some(_) => "`ts` must be an integer number of milliseconds",
            None => "missing `ts`",
        };
        Err(SeedError::BadTimestamp {
            message: message.to_string(),
        })
    }

    /// The action, typed.
    pub fn typed_action(&self) -> Result<Action, SeedError> {
        Action::from_map(&self.action)
    }

    fn to_ipld(&self, sig: &[u8]) -> Ipld {
        let mut map = BTreeMap::new();
        map.insert("type".to_string(), Ipld::String(ENVELOPE_TYPE.to_string()));
        map.insert(
            "signer".to_string(),
            Ipld::Bytes(self.signer.as_bytes().to_vec()),
        );
        map.insert("sig".to_string(), Ipld::Bytes(sig.to_vec()));
        map.insert(
            "account".to_string(),
            Ipld::Bytes(self.account.as_bytes().to_vec()),
        );
        map.insert("action".to_string(), Ipld::Map(self.action.clone()));
        if let Some(protocol) = self.protocol {
            map.insert("protocol".to_string(), Ipld::Integer(i128::from(protocol)));
        }
        if let Some(capability) = &self.capability {
            map.insert("capability".to_string(), Ipld::String(capability.clone()));
        }
        if let Some(blob) = &self.capability_blob {
            map.insert("capabilityBlob".to_string(), Ipld::Bytes(blob.clone()));
        }
        Ipld::Map(map)
    }
}

fn principal_field(map: &mut BTreeMap<String, Ipld>, key: &str) -> Result<Principal, SeedError> {
    match map.remove(key) {
        Some(Ipld::Bytes(bytes)) => Principal::from_bytes(&bytes).map_err(|error| match error {
            SeedError::BadPrincipal { message } => SeedError::UnverifiablePrincipal {
                message: format!("`{key}`: {message}"),
            },
            other => other,
        }),
        Some(_) => Err(SeedError::bad_principal(format!("`{key}` must be bytes"))),
        None => Err(SeedError::bad_envelope(format!("missing `{key}`"))),
    }
}

/// A fresh Ed25519 signing key from the operating system's randomness.
pub fn generate_signing_key() -> SigningKey {
    SigningKey::generate(&mut rand::rngs::OsRng)
}
