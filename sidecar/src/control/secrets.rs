//! Secrets at rest: AES-256-GCM under a key that lives outside the
//! database (a key file, or `AGENTOS_SECRETS_KEY`).
//!
//! Each value is sealed with a fresh random 12-byte nonce and stored as
//! `nonce ‖ ciphertext+tag`, with the id of its key (the first 8 bytes of
//! the key's SHA-256, in hex) beside it. The associated data binds the
//! ciphertext to its row's account and name, so a value copied into
//! another row does not open. Keys and plaintexts are zeroized on drop and
//! their `Debug` shows no bytes. [`rotate`] re-seals every secret under a
//! new key in one transaction: all or nothing.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};
use zeroize::{Zeroize, Zeroizing};

use super::error::ControlError;
use super::store::Reseal;
use super::Control;
use agentos_base::private::create_private_dir;

/// Largest secret value, in bytes.
pub const MAX_SECRET_BYTES: usize = 64 * 1024;
/// Bytes of a secrets key.
pub const KEY_BYTES: usize = 32;
const NONCE_BYTES: usize = 12;
/// Distinguishes this use of the key from any other it might get.
const AAD_LABEL: &[u8] = b"agentos-secret-v1";

/// A 32-byte AES-256 key. Never printed; zeroized on drop.
pub struct SecretKey {
    bytes: Zeroizing<[u8; KEY_BYTES]>,
    id: String,
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

fn key_error(message: impl Into<String>) -> ControlError {
    ControlError::SecretKey(message.into())
}

impl SecretKey {
    pub fn from_bytes(bytes: [u8; KEY_BYTES]) -> SecretKey {
        let bytes = Zeroizing::new(bytes);
        let digest = Sha256::digest(&bytes[..]);
        let id = hex::encode(&digest[..8]);
        SecretKey { bytes, id }
    }

    /// A fresh key from the operating system's random source.
    pub fn generate() -> SecretKey {
        let mut bytes = Zeroizing::new([0u8; KEY_BYTES]);
        rand::rngs::OsRng.fill_bytes(&mut bytes[..]);
        SecretKey::from_bytes(*bytes)
    }

    /// The key's id: hex of the first 8 bytes of its SHA-256.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Reads the key file, or creates it (32 random bytes, mode 0600, its
    /// missing directories 0700) when it does not exist. A file of another
    /// length, or one that group or others may access, is refused.
    pub fn load_or_create(path: &Path) -> Result<SecretKey, ControlError> {
        match File::open(path) {
            Ok(file) => read_key_file(file, path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => create_key_file(path),
            Err(e) => Err(key_error(format!(
                "cannot open the key file {}: {e}",
                path.display()
            ))),
        }
    }

    /// A key given as text (`AGENTOS_SECRETS_KEY`): 64 hex digits, or the
    /// base64 of 32 bytes. The error never repeats the value.
    pub fn from_env_value(value: &str) -> Result<SecretKey, ControlError> {
        let text = value.trim();
        let decoded: Option<Zeroizing<Vec<u8>>> =
            if text.len() == 2 * KEY_BYTES && text.bytes().all(|b| b.is_ascii_hexdigit()) {
                hex::decode(text).ok().map(Zeroizing::new)
            } else {
                use base64::engine::general_purpose::{
                    STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD,
                };
                [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
                    .iter()
                    .find_map(|engine| engine.decode(text).ok())
                    .map(Zeroizing::new)
            };
        let mut bytes = decoded
            .as_deref()
            .and_then(|d| <[u8; KEY_BYTES]>::try_from(d.as_slice()).ok())
            .ok_or_else(|| {
                key_error(format!(
                    "the secrets key must be {KEY_BYTES} bytes written as 64 hex digits or base64"
                ))
            })?;
        let key = SecretKey::from_bytes(bytes);
        // The key holds its own copy.
        bytes.zeroize();
        Ok(key)
    }
}

fn read_key_file(mut file: File, path: &Path) -> Result<SecretKey, ControlError> {
    let shown = path.display();
    let metadata = file
        .metadata()
        .map_err(|e| key_error(format!("cannot inspect the key file {shown}: {e}")))?;
    if !metadata.is_file() {
        return Err(key_error(format!("{shown} is not a regular file")));
    }
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(key_error(format!(
            "the key file {shown} has mode {mode:04o}: group or others may access it; \
             make it 0600"
        )));
    }
    if metadata.len() != KEY_BYTES as u64 {
        return Err(key_error(format!(
            "the key file {shown} holds {} bytes; a secrets key file holds exactly {KEY_BYTES}",
            metadata.len()
        )));
    }
    let mut bytes = Zeroizing::new([0u8; KEY_BYTES]);
    file.read_exact(&mut bytes[..])
        .map_err(|e| key_error(format!("cannot read the key file {shown}: {e}")))?;
    Ok(SecretKey::from_bytes(*bytes))
}

/// Writes a fresh key to a private temporary file beside `path` and links
/// it into place, so the key file appears whole or not at all, and a key
/// file made meanwhile by someone else is kept (and read).
fn create_key_file(path: &Path) -> Result<SecretKey, ControlError> {
    let shown = path.display();
    let io = |what: &str, e: std::io::Error| key_error(format!("cannot {what} {shown}: {e}"));
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    create_private_dir(parent).map_err(|e| io("create the directory of", e))?;
    let key = SecretKey::generate();
    match agentos_base::private::create_private_file(path, &key.bytes[..]) {
        Ok(()) => Ok(key),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let file = File::open(path).map_err(|e| io("open the key file", e))?;
            read_key_file(file, path)
        }
        Err(e) => Err(io("create the key file", e)),
    }
}

/// A secret value in memory: zeroized on drop, never printed.
pub struct SecretPlaintext(Zeroizing<Vec<u8>>);

impl SecretPlaintext {
    pub fn new(bytes: Vec<u8>) -> SecretPlaintext {
        SecretPlaintext(Zeroizing::new(bytes))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<Vec<u8>> for SecretPlaintext {
    fn from(bytes: Vec<u8>) -> Self {
        SecretPlaintext::new(bytes)
    }
}

impl std::fmt::Debug for SecretPlaintext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretPlaintext(<{} bytes redacted>)", self.0.len())
    }
}

/// Seals and opens secret values under one key, or is locked: a VM
/// started without a secrets key serves everything else, and every seal
/// or open answers `vault_locked`.
pub struct SecretBox {
    key: Option<SecretKey>,
}

impl std::fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretBox")
            .field("key_id", &self.key_id())
            .finish()
    }
}

/// The associated data: a label, then the account and the name, each
/// length-prefixed so that no two (account, name) pairs share it.
fn associated_data(account: &str, name: &str) -> Vec<u8> {
    let mut aad = Vec::with_capacity(AAD_LABEL.len() + 8 + account.len() + name.len());
    aad.extend_from_slice(AAD_LABEL);
    for part in [account, name] {
        aad.extend_from_slice(&u32::try_from(part.len()).unwrap_or(u32::MAX).to_be_bytes());
        aad.extend_from_slice(part.as_bytes());
    }
    aad
}

impl SecretBox {
    pub fn new(key: SecretKey) -> SecretBox {
        SecretBox { key: Some(key) }
    }

    /// A vault with no key: nothing can be sealed or opened.
    pub fn locked() -> SecretBox {
        SecretBox { key: None }
    }

    /// The id of the key in use; `None` when locked.
    pub fn key_id(&self) -> Option<&str> {
        self.key.as_ref().map(|key| key.id.as_str())
    }

    fn key(&self) -> Result<&SecretKey, ControlError> {
        self.key.as_ref().ok_or(ControlError::VaultLocked)
    }

    fn cipher(&self) -> Result<Aes256Gcm, ControlError> {
        Aes256Gcm::new_from_slice(&self.key()?.bytes[..])
            .map_err(|_| key_error("the secrets key has the wrong length"))
    }

    /// `nonce ‖ ciphertext+tag` of the value for the row (account, name).
    pub fn seal(
        &self,
        account: &str,
        name: &str,
        plaintext: &SecretPlaintext,
    ) -> Result<Vec<u8>, ControlError> {
        if plaintext.len() > MAX_SECRET_BYTES {
            return Err(ControlError::SecretTooLarge {
                size: plaintext.len(),
                limit: MAX_SECRET_BYTES,
            });
        }
        let mut nonce = [0u8; NONCE_BYTES];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let aad = associated_data(account, name);
        let sealed = self
            .cipher()?
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: plaintext.as_bytes(),
                    aad: &aad,
                },
            )
            .map_err(|_| key_error("sealing a secret failed"))?;
        let mut stored = Vec::with_capacity(NONCE_BYTES + sealed.len());
        stored.extend_from_slice(&nonce);
        stored.extend_from_slice(&sealed);
        Ok(stored)
    }

    /// Opens a stored value of the row (account, name), sealed under the
    /// key `key_id`.
    pub fn open(
        &self,
        account: &str,
        name: &str,
        key_id: &str,
        stored: &[u8],
    ) -> Result<SecretPlaintext, ControlError> {
        let loaded = self.key()?;
        if key_id != loaded.id {
            return Err(key_error(format!(
                "secret {name:?} was sealed with key {key_id}; the loaded key is {}",
                loaded.id
            )));
        }
        if stored.len() < NONCE_BYTES {
            return Err(ControlError::SecretUnreadable(name.to_owned()));
        }
        let (nonce, sealed) = stored.split_at(NONCE_BYTES);
        let aad = associated_data(account, name);
        self.cipher()?
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: sealed,
                    aad: &aad,
                },
            )
            .map(SecretPlaintext::new)
            .map_err(|_| ControlError::SecretUnreadable(name.to_owned()))
    }
}

/// Re-seals every stored secret under `new_key` in one transaction, then
/// makes it the key in use. Secrets are opened with the key in use; if any
/// does not open, or the transaction fails, nothing changes and the old
/// key stays in use. Writers of secrets wait meanwhile. The caller keeps
/// the new key where the next start will load it before calling this.
pub async fn rotate(control: &Control, new_key: SecretKey) -> Result<u64, ControlError> {
    let inner = &control.inner;
    let mut in_use = inner.secret_box.write().await;
    // A locked vault is not opened by a rotation: it has no key to rotate.
    in_use.key()?;
    let fresh = SecretBox::new(new_key);
    let stored = inner.store.all_secrets().await?;
    let mut reseals = Vec::with_capacity(stored.len());
    for secret in stored {
        let plaintext = in_use.open(
            &secret.account_id,
            &secret.name,
            &secret.key_id,
            &secret.ciphertext,
        )?;
        let new_ciphertext = fresh.seal(&secret.account_id, &secret.name, &plaintext)?;
        reseals.push(Reseal {
            secret_id: secret.secret_id,
            old_ciphertext: secret.ciphertext,
            new_ciphertext,
        });
    }
    let count = reseals.len() as u64;
    let fresh_id = fresh.key()?.id.clone();
    inner.store.reseal_all(&fresh_id, reseals).await?;
    tracing::info!(
        secrets = count,
        key_id = fresh_id,
        "secrets re-sealed under a new key"
    );
    *in_use = fresh;
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealing_is_bound_to_the_row_and_the_key() {
        let sealer = SecretBox::new(SecretKey::from_bytes([7; KEY_BYTES]));
        let value = SecretPlaintext::new(b"hunter2".to_vec());
        let stored = sealer.seal("zA", "openai", &value).expect("seal");
        assert_eq!(stored.len(), NONCE_BYTES + value.len() + 16);
        let id = sealer.key_id().expect("a key").to_owned();
        let opened = sealer.open("zA", "openai", &id, &stored).expect("open");
        assert_eq!(opened.as_bytes(), b"hunter2");
        // Another row, another account, a split that moves a byte across.
        for (account, name) in [("zA", "other"), ("zB", "openai"), ("zAo", "penai")] {
            let err = sealer.open(account, name, &id, &stored).expect_err("moved");
            assert_eq!(err.code(), "secret_unreadable");
        }
        let other = SecretBox::new(SecretKey::from_bytes([8; KEY_BYTES]));
        assert_eq!(
            other
                .open("zA", "openai", &id, &stored)
                .expect_err("wrong key")
                .code(),
            "secret_key"
        );
        // Two seals of one value differ (fresh nonces).
        assert_ne!(stored, sealer.seal("zA", "openai", &value).expect("again"));
        assert_eq!(
            sealer
                .open("zA", "openai", &id, &stored[..5])
                .expect_err("short")
                .code(),
            "secret_unreadable"
        );
    }

    #[test]
    fn oversized_values_are_refused() {
        let sealer = SecretBox::new(SecretKey::generate());
        let value = SecretPlaintext::new(vec![0; MAX_SECRET_BYTES + 1]);
        let err = sealer.seal("zA", "n", &value).expect_err("too large");
        assert_eq!(err.code(), "secret_too_large");
        let fits = SecretPlaintext::new(vec![0; MAX_SECRET_BYTES]);
        sealer.seal("zA", "n", &fits).expect("fits");
    }

    #[test]
    fn debug_output_shows_no_bytes() {
        let key = SecretKey::from_bytes([0xAB; KEY_BYTES]);
        let shown = format!("{key:?}");
        assert!(!shown.to_ascii_lowercase().contains("abab"), "{shown}");
        assert!(shown.contains(key.id()), "{shown}");
        let value = SecretPlaintext::new(b"marker-value".to_vec());
        let shown = format!("{value:?}");
        assert!(!shown.contains("marker"), "{shown}");
        let sealer = SecretBox::new(key);
        assert!(!format!("{sealer:?}").to_ascii_lowercase().contains("abab"));
    }

    #[test]
    fn env_values_are_hex_or_base64_of_32_bytes() {
        let bytes = [0x5Au8; KEY_BYTES];
        let id = SecretKey::from_bytes(bytes).id().to_owned();
        let hex_text = hex::encode(bytes);
        let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
        let b64_bare = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        for text in [hex_text.clone(), format!(" {b64}\n"), b64_bare] {
            assert_eq!(SecretKey::from_env_value(&text).expect("key").id(), id);
        }
        for bad in ["", "zz", &hex_text[..62], "c2hvcnQ="] {
            let err = SecretKey::from_env_value(bad).expect_err("bad");
            assert_eq!(err.code(), "secret_key");
            if !bad.is_empty() {
                assert!(!err.to_string().contains(bad), "{err}");
            }
        }
    }
}
