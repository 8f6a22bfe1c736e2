//! A client's signing identity and its key file.
//!
//! The key file is JSON, `{"principal": "z6Mk…", "seed": "<64 hex>"}`: the
//! 32-byte Ed25519 seed and, for a human reading it and as a check on the
//! seed, the principal it yields. It is created 0600 and never overwritten
//! (a second `keys new` to the same path must not destroy the account's
//! only key), and it is refused when group or others may read it, because
//! anyone who reads it can act as the account.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use agentos_protocol::seed::{generate_signing_key, Principal, SigningKey};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use super::ClientError;

/// A key file is a few dozen bytes; anything much larger is not one.
const MAX_KEY_FILE_BYTES: u64 = 4096;

const SEED_BYTES: usize = 32;

/// A signing key and the principal it signs as.
pub struct Identity {
    key: SigningKey,
    principal: Principal,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    principal: String,
    seed: String,
}

impl Identity {
    /// A fresh identity from the operating system's randomness.
    pub fn generate() -> Identity {
        Identity::from_key(generate_signing_key())
    }

    pub fn from_key(key: SigningKey) -> Identity {
        let principal = Principal::of_key(&key);
        Identity { key, principal }
    }

    pub fn principal(&self) -> Principal {
        self.principal
    }

    pub fn signing_key(&self) -> &SigningKey {
        &self.key
    }

    /// Writes the key file at `path`: mode 0600 whatever the umask, complete
    /// or absent (written beside it, then linked into place), and never over
    /// an existing file.
    pub fn save(&self, path: &Path) -> Result<(), ClientError> {
        let shown = path.display();
        let fail = |what: &str, e: std::io::Error| {
            ClientError::KeyFile(format!("cannot {what} {shown}: {e}"))
        };
        if path.symlink_metadata().is_ok() {
            return Err(ClientError::KeyFile(format!(
                "{shown} exists; a key file is never overwritten"
            )));
        }
        let seed_hex = Zeroizing::new(hex::encode(self.key.to_bytes()));
        let text = Zeroizing::new(
            serde_json::to_string(&KeyFile {
                principal: self.principal.to_string(),
                seed: seed_hex.to_string(),
            })
            .map_err(|e| ClientError::KeyFile(format!("cannot render the key file: {e}")))?,
        );
        let mut bytes = Zeroizing::new(text.as_bytes().to_vec());
        bytes.push(b'\n');
        // A file made meanwhile by someone else is kept.
        match agentos_base::private::create_private_file(path, &bytes) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(ClientError::KeyFile(
                format!("{shown} exists; a key file is never overwritten"),
            )),
            Err(e) => Err(fail("create", e)),
        }
    }

    /// Reads a key file written by [`Identity::save`], refusing one that
    /// group or others may access, and one whose principal is not its
    /// seed's.
    pub fn load(path: &Path) -> Result<Identity, ClientError> {
        let shown = path.display();
        let mut file = File::open(path)
            .map_err(|e| ClientError::KeyFile(format!("cannot open {shown}: {e}")))?;
        let metadata = file
            .metadata()
            .map_err(|e| ClientError::KeyFile(format!("cannot inspect {shown}: {e}")))?;
        if !metadata.is_file() {
            return Err(ClientError::KeyFile(format!(
                "{shown} is not a regular file"
            )));
        }
        let mode = metadata.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(ClientError::KeyFile(format!(
                "{shown} has mode {mode:04o}: group or others may read the key; \
                 make it 0600 (chmod 600)"
            )));
        }
        if metadata.len() > MAX_KEY_FILE_BYTES {
            return Err(ClientError::KeyFile(format!(
                "{shown} holds {} bytes, too many for a key file",
                metadata.len()
            )));
        }
        let mut text = Zeroizing::new(String::new());
        Read::take(&mut file, MAX_KEY_FILE_BYTES)
            .read_to_string(&mut text)
            .map_err(|e| ClientError::KeyFile(format!("cannot read {shown}: {e}")))?;
        let parsed: KeyFile = serde_json::from_str(&text).map_err(|e| {
            ClientError::KeyFile(format!(
                "{shown} is not a key file ({{\"principal\", \"seed\"}}): {e}"
            ))
        })?;
        let seed_hex = Zeroizing::new(parsed.seed);
        let mut seed = Zeroizing::new([0u8; SEED_BYTES]);
        hex::decode_to_slice(seed_hex.as_bytes(), &mut seed[..]).map_err(|_| {
            ClientError::KeyFile(format!(
                "{shown}: `seed` must be {} hex digits",
                SEED_BYTES * 2
            ))
        })?;
        let identity = Identity::from_key(SigningKey::from_bytes(&seed));
        let claimed: Principal = parsed.principal.parse().map_err(|e| {
            ClientError::KeyFile(format!("{shown}: `principal` is not a principal: {e}"))
        })?;
        if claimed != identity.principal {
            return Err(ClientError::KeyFile(format!(
                "{shown}: `principal` {claimed} is not the principal of the seed ({})",
                identity.principal
            )));
        }
        Ok(identity)
    }
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key stays out of logs.
        write!(f, "Identity({})", self.principal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_path(dir: &tempfile::TempDir) -> std::path::PathBuf {
        dir.path().join("id.key")
    }

    #[test]
    fn saved_file_is_0600_and_loads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = key_path(&dir);
        let identity = Identity::generate();
        identity.save(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let text = std::fs::read_to_string(&path).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["principal"], identity.principal().to_string());
        assert_eq!(value["seed"].as_str().unwrap().len(), 64);
        let loaded = Identity::load(&path).unwrap();
        assert_eq!(loaded.principal(), identity.principal());
        assert_eq!(
            loaded.signing_key().to_bytes(),
            identity.signing_key().to_bytes()
        );
        // Nothing else is left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn save_refuses_to_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let path = key_path(&dir);
        let first = Identity::generate();
        first.save(&path).unwrap();
        let error = Identity::generate().save(&path).unwrap_err();
        assert_eq!(error.code(), "key_file");
        assert!(error.to_string().contains("never overwritten"), "{error}");
        assert_eq!(
            Identity::load(&path).unwrap().principal(),
            first.principal()
        );
    }

    #[test]
    fn load_refuses_a_file_others_may_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = key_path(&dir);
        Identity::generate().save(&path).unwrap();
        for mode in [0o644, 0o640, 0o604] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let error = Identity::load(&path).unwrap_err();
            assert_eq!(error.code(), "key_file");
            assert!(error.to_string().contains("chmod 600"), "{error}");
        }
    }

    fn write_private(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }

    #[test]
    fn load_detects_a_principal_that_is_not_the_seeds() {
        let dir = tempfile::tempdir().unwrap();
        let path = key_path(&dir);
        let key = Identity::generate();
        let other = Identity::generate();
        let text = serde_json::json!({
            "principal": other.principal().to_string(),
            "seed": hex::encode(key.signing_key().to_bytes()),
        })
        .to_string();
        write_private(&path, &text);
        let error = Identity::load(&path).unwrap_err();
        assert_eq!(error.code(), "key_file");
        assert!(
            error.to_string().contains("is not the principal"),
            "{error}"
        );
    }

    #[test]
    fn load_refuses_malformed_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = key_path(&dir);
        let good = Identity::generate();
        let principal = good.principal().to_string();
        let cases = [
            "".to_string(),
            "not json".to_string(),
            serde_json::json!({"principal": principal}).to_string(),
            serde_json::json!({"principal": principal, "seed": "abcd"}).to_string(),
            serde_json::json!({"principal": principal, "seed": "zz".repeat(32)}).to_string(),
            serde_json::json!({"principal": "z123", "seed": "00".repeat(32)}).to_string(),
            serde_json::json!({"principal": principal, "seed": "00".repeat(32), "x": 1})
                .to_string(),
            "x".repeat(5000),
        ];
        for text in cases {
            write_private(&path, &text);
            let error = Identity::load(&path).unwrap_err();
            assert_eq!(error.code(), "key_file", "{text}");
        }
        assert_eq!(
            Identity::load(&dir.path().join("missing"))
                .unwrap_err()
                .code(),
            "key_file"
        );
        assert_eq!(Identity::load(dir.path()).unwrap_err().code(), "key_file");
    }

    #[test]
    fn debug_shows_no_key() {
        let identity = Identity::generate();
        let shown = format!("{identity:?}");
        assert!(!shown.contains(&hex::encode(identity.signing_key().to_bytes())));
        assert!(shown.contains(&identity.principal().to_string()));
    }
}
