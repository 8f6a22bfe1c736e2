//! Secrets and providers on both backends: sealed values round trip, are
//! bound to their row, need their key, re-seal under a new key all at
//! once or not at all, and never reach the database file in plaintext;
//! the key file is private; deleting a provider takes only the secrets no
//! other provider uses.

mod control_common;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use control_common::*;

const MARKER: &[u8] = b"MARKER-plaintext-7f3a91c2";

fn value(bytes: &[u8]) -> SecretPlaintext {
    SecretPlaintext::new(bytes.to_vec())
}

async fn plaintext(control: &Control, account: &str, name: &str) -> Result<Vec<u8>, ControlError> {
    control
        .secret_plaintext(account, name)
        .await
        .map(|p| p.map(|p| p.as_bytes().to_vec()).unwrap_or_default())
}

async fn key_ids(db: &SharedDatabase) -> Vec<String> {
    let rows = db
        .query(
            "SELECT DISTINCT key_id FROM agentos_core_secrets ORDER BY key_id",
            vec![],
        )
        .await
        .expect("key ids");
    rows.rows
        .into_iter()
        .map(|r| match r.into_iter().next() {
            Some(SqlValue::Text(t)) => t,
            other => panic!("key id {other:?}"),
        })
        .collect()
}

/// Moves row `from`'s ciphertext into row `to` (same key id).
async fn copy_ciphertext(db: &SharedDatabase, account: &str, from: &str, to: &str) {
    db.transaction(vec![Statement::new(
        "UPDATE agentos_core_secrets SET ciphertext = \
           (SELECT ciphertext FROM agentos_core_secrets WHERE account_id = ?1 AND name = ?2) \
         WHERE account_id = ?1 AND name = ?3",
        vec![account.into(), from.into(), to.into()],
    )
    .expect_changes(1)])
        .await
        .expect("copy ciphertext");
}

#[tokio::test]
async fn secrets_round_trip_redacted_and_never_in_the_file() {
    for env in envs().await {
        let c = &env.control;
        let account = principal(1);
        let stored = c
            .set_secret(&account, "openai", value(MARKER), Some(b"meta".to_vec()))
            .await
            .expect("set");
        assert_eq!(stored.name, "openai");
        assert_eq!(stored.metadata.as_deref(), Some(&b"meta"[..]));
        assert_eq!(
            plaintext(c, &account, "openai").await.expect("open"),
            MARKER
        );
        assert_eq!(
            c.list_secrets(&account).await.expect("list"),
            std::slice::from_ref(&stored)
        );
        assert!(!format!("{:?}", c.list_secrets(&account).await).contains("MARKER"));

        // Replacing keeps the id and the creation time.
        let replaced = c
            .set_secret(&account, "openai", value(b"second"), None)
            .await
            .expect("replace");
        assert_eq!(replaced.id, stored.id);
        assert_eq!(replaced.created_at_ms, stored.created_at_ms);
        assert_eq!(replaced.metadata, None);
        assert_eq!(
            plaintext(c, &account, "openai").await.expect("open"),
            b"second"
        );
        c.set_secret(&account, "marker", value(MARKER), None)
            .await
            .expect("marker");

        // Neither the file nor its WAL holds the plaintext, though they
        // do hold the row (its name is stored as it is).
        let mut stored_bytes = std::fs::read(&env.backend.file).expect("database file");
        let mut wal = env.backend.file.as_os_str().to_owned();
        wal.push("-wal");
        stored_bytes.extend(std::fs::read(&wal).unwrap_or_default());
        let holds = |needle: &[u8]| stored_bytes.windows(needle.len()).any(|w| w == needle);
        assert!(
            holds(b"marker"),
            "{}: the row is not in the files",
            env.name()
        );
        assert!(!holds(MARKER), "{}: plaintext in the files", env.name());

        assert_eq!(
            c.secret_plaintext(&account, "missing")
                .await
                .expect("none")
                .map(|p| p.len()),
            None
        );
        c.delete_secret(&account, "marker").await.expect("delete");
        assert_eq!(
            c.delete_secret(&account, "marker")
                .await
                .expect_err("twice")
                .code(),
            "not_found"
        );
        // Size bound: 64 KiB fits, one byte more is `secret_too_large`.
        c.set_secret(&account, "big", value(&vec![7; MAX_SECRET_BYTES]), None)
            .await
            .expect("64 KiB");
        let err = c
            .set_secret(
                &account,
                "bigger",
                value(&vec![7; MAX_SECRET_BYTES + 1]),
                None,
            )
            .await
            .expect_err("too large");
        assert_eq!(err.code(), "secret_too_large");
        assert_eq!(
            c.set_secret(&account, "", value(b"v"), None)
                .await
                .expect_err("name")
                .code(),
            "invalid_argument"
        );
        env.done().await;
    }
}

#[tokio::test]
async fn a_ciphertext_moved_to_another_row_or_opened_with_another_key_fails_typed() {
    for env in envs().await {
        let c = &env.control;
        let (a, b) = (principal(2), principal(3));
        c.set_secret(&a, "one", value(b"first"), None)
            .await
            .expect("one");
        c.set_secret(&a, "two", value(b"second"), None)
            .await
            .expect("two");
        c.set_secret(&b, "one", value(b"other"), None)
            .await
            .expect("b one");

        copy_ciphertext(env.db(), &a, "one", "two").await;
        let err = plaintext(c, &a, "two").await.expect_err("moved");
        assert_eq!(err.code(), "secret_unreadable", "{}", env.name());
        assert_eq!(plaintext(c, &a, "one").await.expect("untouched"), b"first");

        // The same name of another account is another row.
        env.db()
            .transaction(vec![Statement::new(
                "UPDATE agentos_core_secrets SET ciphertext = \
                   (SELECT ciphertext FROM agentos_core_secrets WHERE account_id = ?1 AND name = 'one') \
                 WHERE account_id = ?2 AND name = 'one'",
                vec![a.as_str().into(), b.as_str().into()],
            )])
            .await
            .expect("swap accounts");
        assert_eq!(
            plaintext(c, &b, "one").await.expect_err("moved").code(),
            "secret_unreadable"
        );

        // A restart with another key cannot open what the first sealed.
        let other = env.reopen(key(9));
        let err = plaintext(&other, &a, "one").await.expect_err("wrong key");
        assert_eq!(err.code(), "secret_key");
        assert!(err.to_string().contains(key(1).id()), "{err}");
        assert_eq!(
            other
                .list_secrets(&a)
                .await
                .expect("listing needs no key")
                .len(),
            2
        );
        env.done().await;
    }
}

#[tokio::test]
async fn rotation_re_seals_everything_and_retires_the_old_key() {
    for env in envs().await {
        let c = &env.control;
        let (a, b) = (principal(4), principal(5));
        let secrets = [(&a, "x", &b"ax"[..]), (&a, "y", b"ay"), (&b, "x", b"bx")];
        for (account, name, bytes) in secrets {
            c.set_secret(account, name, value(bytes), None)
                .await
                .expect("set");
        }
        let before = env
            .db()
            .query(
                "SELECT ciphertext FROM agentos_core_secrets ORDER BY secret_id",
                vec![],
            )
            .await
            .expect("before");
        assert_eq!(c.rotate_secrets_key(key(2)).await.expect("rotate"), 3);
        assert_eq!(c.secrets_key_id().await.as_deref(), Some(key(2).id()));
        assert_eq!(
            key_ids(env.db()).await,
            [key(2).id().to_owned()],
            "{}",
            env.name()
        );
        let after = env
            .db()
            .query(
                "SELECT ciphertext FROM agentos_core_secrets ORDER BY secret_id",
                vec![],
            )
            .await
            .expect("after");
        for (old, new) in before.rows.iter().zip(&after.rows) {
            assert_ne!(old, new, "every ciphertext is new");
        }
        for (account, name, bytes) in secrets {
            assert_eq!(plaintext(c, account, name).await.expect("open"), bytes);
            let restarted = env.reopen(key(2));
            assert_eq!(
                plaintext(&restarted, account, name).await.expect("new key"),
                bytes
            );
            let old = env.reopen(key(1));
            assert_eq!(
                plaintext(&old, account, name)
                    .await
                    .expect_err("old key")
                    .code(),
                "secret_key"
            );
        }
        // New writes use the new key.
        c.set_secret(&a, "z", value(b"az"), None)
            .await
            .expect("after rotation");
        assert_eq!(key_ids(env.db()).await, [key(2).id().to_owned()]);
        env.done().await;
    }
}

#[tokio::test]
async fn a_failed_rotation_changes_nothing() {
    for env in envs().await {
        let faulty = FaultyDatabase::new(env.db().clone());
        let c = Control::new(
            faulty.clone(),
            ControlLimits::default(),
            SecretBox::new(key(1)),
        );
        let account = principal(6);
        for name in ["p", "q", "r"] {
            c.set_secret(&account, name, value(name.as_bytes()), None)
                .await
                .expect("set");
        }
        // The transaction fails: nothing moved, the old key stays in use.
        faulty.fail_nth_transaction(1);
        let err = c.rotate_secrets_key(key(2)).await.expect_err("injected");
        assert!(faulty.fired());
        assert_eq!(err.code(), "storage", "{}", env.name());
        assert_eq!(c.secrets_key_id().await.as_deref(), Some(key(1).id()));
        assert_eq!(key_ids(env.db()).await, [key(1).id().to_owned()]);
        for name in ["p", "q", "r"] {
            assert_eq!(
                plaintext(&c, &account, name).await.expect("old key"),
                name.as_bytes()
            );
        }
        // One value does not open: refused before anything is written.
        copy_ciphertext(env.db(), &account, "p", "q").await;
        let err = c.rotate_secrets_key(key(2)).await.expect_err("unreadable");
        assert_eq!(err.code(), "secret_unreadable");
        assert_eq!(key_ids(env.db()).await, [key(1).id().to_owned()]);
        assert_eq!(plaintext(&c, &account, "r").await.expect("old key"), b"r");
        // Repaired, it goes through.
        c.set_secret(&account, "q", value(b"q"), None)
            .await
            .expect("repair");
        assert_eq!(c.rotate_secrets_key(key(2)).await.expect("rotate"), 3);
        assert_eq!(key_ids(env.db()).await, [key(2).id().to_owned()]);
        env.done().await;
    }
}

#[tokio::test]
async fn deleting_a_provider_takes_only_its_unshared_secrets() {
    for env in envs().await {
        let c = &env.control;
        let (a, b) = (principal(7), principal(8));
        for account in [&a, &b] {
            for name in ["k1", "k2", "k3"] {
                c.set_secret(account, name, value(b"v"), None)
                    .await
                    .expect("secret");
            }
        }
        let provider = |name: &str, refs: &[&str]| NewProvider {
            name: name.into(),
            provider_type: "openai".into(),
            config: format!("config of {name}").into_bytes(),
            auth_mode: Some(AuthMode::ApiKey),
            secret_refs: refs.iter().map(|s| s.to_string()).collect(),
        };
        let first = c
            .set_provider(&a, provider("first", &["k1", "k2", "missing", "k1"]))
            .await
            .expect("first");
        assert!(first.has_secrets);
        assert_eq!(first.auth_mode, Some(AuthMode::ApiKey));
        c.set_provider(&a, provider("second", &["k2"]))
            .await
            .expect("second");
        c.set_provider(&a, provider("bare", &[]))
            .await
            .expect("bare");
        c.set_provider(&b, provider("first", &["k1", "k2"]))
            .await
            .expect("b first");

        let listed = c.list_providers(&a).await.expect("list");
        assert_eq!(
            listed
                .iter()
                .map(|p| (p.name.as_str(), p.has_secrets))
                .collect::<Vec<_>>(),
            [("bare", false), ("first", true), ("second", true)],
            "{}",
            env.name()
        );
        let full = c
            .get_provider(&a, "first")
            .await
            .expect("get")
            .expect("some");
        assert_eq!(full.config, b"config of first");
        assert_eq!(full.secret_refs, ["k1", "k2", "missing"]);
        assert_eq!(full.redacted, first);

        // Replacing keeps the id and takes the new references.
        let replaced = c
            .set_provider(&a, provider("first", &["k1", "k2"]))
            .await
            .expect("replace");
        assert_eq!(replaced.id, first.id);

        let deleted = c.delete_provider(&a, "first").await.expect("delete");
        assert_eq!(
            deleted.deleted_secrets,
            ["k1"],
            "{}: k2 is shared",
            env.name()
        );
        let names =
            |list: Vec<RedactedSecret>| list.into_iter().map(|s| s.name).collect::<Vec<_>>();
        assert_eq!(names(c.list_secrets(&a).await.expect("a")), ["k2", "k3"]);
        assert_eq!(
            names(c.list_secrets(&b).await.expect("b")),
            ["k1", "k2", "k3"]
        );
        let deleted = c.delete_provider(&a, "second").await.expect("second");
        assert_eq!(deleted.deleted_secrets, ["k2"]);
        assert_eq!(names(c.list_secrets(&a).await.expect("a")), ["k3"]);
        assert_eq!(
            c.delete_provider(&a, "second")
                .await
                .expect_err("twice")
                .code(),
            "not_found"
        );
        assert_eq!(
            count_rows(
                env.db(),
                "agentos_core_provider_secret_refs",
                "account_id = ?1",
                vec![a.as_str().into()]
            )
            .await,
            0
        );
        let mut bad = provider("bad", &[]);
        bad.secret_refs = (0..40).map(|n| format!("s{n}")).collect();
        assert_eq!(
            c.set_provider(&a, bad).await.expect_err("refs").code(),
            "invalid_argument"
        );
        env.done().await;
    }
}

#[test]
fn the_key_file_is_created_private_and_a_loose_one_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("keys/deeper/secrets.key");
    let created = SecretKey::load_or_create(&path).expect("create");
    let metadata = std::fs::metadata(&path).expect("file");
    assert_eq!(metadata.permissions().mode() & 0o777, 0o600);
    assert_eq!(metadata.len(), KEY_BYTES as u64);
    for made in ["keys", "keys/deeper"] {
        let mode = std::fs::metadata(dir.path().join(made))
            .expect("dir")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700, "{made}");
    }
    // No temporary file is left beside it.
    let entries = std::fs::read_dir(dir.path().join("keys/deeper"))
        .expect("list")
        .count();
    assert_eq!(entries, 1);
    let loaded = SecretKey::load_or_create(&path).expect("load");
    assert_eq!(loaded.id(), created.id());

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let err = SecretKey::load_or_create(&path).expect_err("0644");
    assert_eq!(err.code(), "secret_key");
    assert!(err.to_string().contains("0644"), "{err}");

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::write(&path, [1u8; 31]).expect("short");
    let err = SecretKey::load_or_create(&path).expect_err("short");
    assert!(err.to_string().contains("31 bytes"), "{err}");

    let not_a_file = dir.path().join("keys");
    let err = SecretKey::load_or_create(&not_a_file).expect_err("directory");
    assert_eq!(err.code(), "secret_key");
    // An existing shared directory is used as it is.
    let beside = dir.path().join("top.key");
    SecretKey::load_or_create(&beside).expect("in an existing directory");
    assert_eq!(
        std::fs::metadata(&beside)
            .expect("file")
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
}

/// A vault with no key (a VM launched with its database descriptor alone)
/// refuses to seal, open or rotate with `vault_locked`, naming
/// `secrets.keyFile`, and stays out of the way of everything else: what
/// was sealed before is kept, and opens again once the key is back.
#[tokio::test]
async fn a_locked_vault_refuses_secrets_and_keeps_what_is_stored() {
    for env in envs().await {
        let account = principal(9);
        env.control
            .set_secret(&account, "kept", value(b"sealed before"), None)
            .await
            .expect("set with a key");
        let locked = env.reopen_with(SecretBox::locked());
        assert_eq!(locked.secrets_key_id().await, None);
        let refusals = [
            locked
                .set_secret(&account, "new", value(b"v"), None)
                .await
                .map(|_| ()),
            plaintext(&locked, &account, "kept").await.map(|_| ()),
            plaintext(&locked, &account, "absent").await.map(|_| ()),
            locked.rotate_secrets_key(key(2)).await.map(|_| ()),
        ];
        for refused in refusals {
            let e = refused.expect_err("a locked vault refuses");
            assert_eq!(e.code(), "vault_locked", "{}", env.name());
            assert_eq!(e.setting(), Some("secrets.keyFile"));
            assert!(e.to_string().contains("secrets.keyFile"), "{e}");
        }
        // The rest of the control plane is served, and nothing was lost.
        let listed = locked.list_secrets(&account).await.expect("list");
        assert_eq!(listed.len(), 1, "{}", env.name());
        assert_eq!(
            plaintext(&env.reopen(key(1)), &account, "kept")
                .await
                .expect("open"),
            b"sealed before"
        );
        env.done().await;
    }
}

/// On a handle that counts writes, a secret is kept as stored (sealed) and
/// opened at each call: a second open reads nothing, and every write to the
/// secrets is seen by the next open, the service's own (a replaced value)
/// and one made on the handle directly (a ciphertext moved from another
/// row, which then fails to open as it must).
#[tokio::test]
async fn kept_secrets_are_read_again_after_any_write() {
    for env in envs().await {
        let counting = agentos_storage::testing::CountingDatabase::new(env.db().clone());
        let watched = Arc::new(
            agentos_storage::watch::Watched::new(counting.clone(), WATCHED).expect("watched"),
        );
        let versions = watched.versions();
        let db: SharedDatabase = watched;
        let c = Control::keeping(
            db.clone(),
            ControlLimits::default(),
            SecretBox::new(key(1)),
            versions,
        );
        let account = principal(1);
        c.set_secret(&account, "k", value(b"first"), None)
            .await
            .expect("set");
        assert_eq!(plaintext(&c, &account, "k").await.expect("open"), b"first");
        counting.take();
        assert_eq!(plaintext(&c, &account, "k").await.expect("open"), b"first");
        assert_eq!(counting.take().queries, 0, "{}: kept", env.name());

        c.set_secret(&account, "k", value(b"second"), None)
            .await
            .expect("replace");
        assert_eq!(
            plaintext(&c, &account, "k").await.expect("open"),
            b"second",
            "{}",
            env.name()
        );

        c.set_secret(&account, "other", value(b"third"), None)
            .await
            .expect("other");
        copy_ciphertext(&db, &account, "other", "k").await;
        assert!(
            plaintext(&c, &account, "k").await.is_err(),
            "{}: the moved ciphertext is read, and refused",
            env.name()
        );
        env.done().await;
    }
}
