//! Offline maintenance of a VM's store: `secrets rotate-key`. Runs while no
//! sidecar serves the store (it takes the same store lock), so nothing
//! reads a secret while it is re-sealed.

use std::path::{Path, PathBuf};

use agentos_schema::migrate_all;
use serde_json::{json, Value};

use crate::config::{Config, ConfigError};
use crate::control::{Control, SecretBox, SecretKey};
use crate::vm::{secrets_key_source, KeySource, VmError, SECRETS_KEY_ENV};
use agentos_base::private::StoreLock;

/// The key file a VM uses. A key given in the environment is not a file
/// and cannot be rotated here.
fn key_file(config: &Config) -> Result<PathBuf, VmError> {
    match secrets_key_source(config) {
        Some(KeySource::File(path)) => Ok(path),
        Some(KeySource::Env(_)) => Err(VmError::Config(ConfigError::new(
            "secrets.keyFile",
            format!("the key comes from {SECRETS_KEY_ENV}; rotate it by re-sealing with a key file (set secrets.keyFile)"),
        ))),
        None => Err(VmError::Config(ConfigError::new(
            "secrets.keyFile",
            "this VM has no secrets key (its vault is locked), so there is none to rotate; name the key file with secrets.keyFile",
        ))),
    }
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Re-seals every secret under a fresh key in one transaction, then puts
/// the new key in place of the old, which is kept as `<keyFile>.old` until
/// the operator removes it. The new key is written (0600) before the
/// transaction: a crash before the renames leaves `<keyFile>.next`, the key
/// the database is then sealed with.
pub async fn rotate_secrets_key(config: &Config) -> Result<Value, VmError> {
    config.validate()?;
    let path = key_file(config)?;
    let next = with_suffix(&path, ".next");
    let old = with_suffix(&path, ".old");
    if next.exists() {
        return Err(VmError::Io(format!(
            "{} exists: an earlier rotation did not finish; the database is sealed with the key that file holds or with {} (each stored secret names its key id, the first 16 hex digits of the key's SHA-256) and the right one must be put in place by hand",
            next.display(),
            path.display()
        )));
    }
    let _lock = StoreLock::acquire(config.database.path())
        .map_err(|e| VmError::Io(format!("{}: {e}", e.code())))?;
    let current = SecretKey::load_or_create(&path)?;
    let db = agentos_storage::open(&config.database, &config.limits.sqlite).await?;
    migrate_all(&*db).await?;
    let control = Control::new(
        db.clone(),
        config.limits.control.clone(),
        SecretBox::new(current),
    );
    let old_id = control.secrets_key_id().await;
    let fresh = SecretKey::load_or_create(&next)?;
    let new_id = fresh.id().to_owned();
    let resealed = match control.rotate_secrets_key(fresh).await {
        Ok(count) => count,
        Err(e) => {
            // Nothing changed in the database: the new key is not needed.
            let _ = std::fs::remove_file(&next);
            db.close().await;
            return Err(e.into());
        }
    };
    db.close().await;
    std::fs::rename(&path, &old)
        .and_then(|()| std::fs::rename(&next, &path))
        .map_err(|e| {
            VmError::Io(format!(
                "the secrets were re-sealed with the key in {}, but it could not be moved to {}: {e}",
                next.display(),
                path.display()
            ))
        })?;
    Ok(json!({
        "resealed": resealed,
        "oldKeyId": old_id,
        "newKeyId": new_id,
        "keyFile": path,
        "oldKeyFile": old,
    }))
}
