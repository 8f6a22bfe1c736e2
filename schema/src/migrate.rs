//! The migration runner shared by the three schema owners.
//!
//! Each owner keeps a STRICT singleton version table `<owner>_schema_version`
//! and an append-only ladder of migrations numbered contiguously from 1. Every
//! pending migration runs in one transaction together with a compare-and-set
//! of the version row, so schema and version always advance together. A stored
//! version newer than the ladder fails closed and touches nothing. There is no
//! shared version table and no `PRAGMA user_version`.
//!
//! Before any ladder runs, the handle's `sqlite_version()` is read: with
//! `actor_uds` the SQL runs on the host's SQLite, whose version we do not
//! choose. Below [`MIN_SQLITE_VERSION`] (STRICT tables, 3.37) or without the
//! JSON functions the ladders' CHECKs use, opening fails closed with
//! `sqlite_version_unsupported`. The ladders and the stores keep to what that
//! minimum offers (no `unixepoch()`, `->>`, `octet_length()`, …).

use crate::db::{Database, DbError, SqlValue, Statement};
use crate::ladders;

/// One independent owner of tables in the shared database.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Owner {
    Filesystem,
    Core,
    Actor,
}

impl Owner {
    pub const ALL: [Owner; 3] = [Owner::Filesystem, Owner::Core, Owner::Actor];

    pub fn as_str(self) -> &'static str {
        match self {
            Owner::Filesystem => "filesystem",
            Owner::Core => "core",
            Owner::Actor => "actor",
        }
    }

    /// Every identifier this owner creates starts with this prefix.
    pub fn prefix(self) -> &'static str {
        match self {
            Owner::Filesystem => "agentos_fs_",
            Owner::Core => "agentos_core_",
            Owner::Actor => "agentos_actor_",
        }
    }

    pub fn version_table(self) -> &'static str {
        match self {
            Owner::Filesystem => "agentos_fs_schema_version",
            Owner::Core => "agentos_core_schema_version",
            Owner::Actor => "agentos_actor_schema_version",
        }
    }

    /// The ladder this binary ships for the owner.
    pub fn ladder(self) -> &'static [Migration] {
        match self {
            Owner::Filesystem => ladders::fs::MIGRATIONS,
            Owner::Core => ladders::core::MIGRATIONS,
            Owner::Actor => ladders::actor::MIGRATIONS,
        }
    }
}

/// One rung of a ladder: its version and the DDL/DML statements that reach it.
#[derive(Clone, Copy, Debug)]
pub struct Migration {
    pub version: u32,
    pub statements: &'static [&'static str],
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrationOutcome {
    pub owner: Owner,
    pub from: u32,
    pub to: u32,
}

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum MigrationError {
    #[error("invalid_migration_ladder: {owner}: {reason}")]
    InvalidLadder { owner: &'static str, reason: String },
    #[error(
        "future_schema: {owner} schema version {stored} is newer than this binary's {supported}"
    )]
    FutureSchema {
        owner: &'static str,
        stored: u32,
        supported: u32,
    },
    #[error("sqlite_version_unsupported: the database runs SQLite {found}; {required} or newer is required{detail}")]
    UnsupportedSqlite {
        found: String,
        required: String,
        detail: String,
    },
    #[error("migration_failed: {owner} migration {version}: {source}")]
    Database {
        owner: &'static str,
        version: u32,
        source: DbError,
    },
}

impl MigrationError {
    pub fn code(&self) -> &'static str {
        match self {
            MigrationError::InvalidLadder { .. } => "invalid_migration_ladder",
            MigrationError::FutureSchema { .. } => "future_schema",
            MigrationError::UnsupportedSqlite { .. } => "sqlite_version_unsupported",
            MigrationError::Database { .. } => "migration_failed",
        }
    }
}

/// The oldest SQLite the ladders and stores run on: STRICT tables arrived in
/// 3.37.0.
pub const MIN_SQLITE_VERSION: (u32, u32, u32) = (3, 37, 0);

fn version_text((major, minor, patch): (u32, u32, u32)) -> String {
    format!("{major}.{minor}.{patch}")
}

/// Parses `sqlite_version()`'s "3.40.1" (a fourth part, if any, is ignored).
fn parse_sqlite_version(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text.trim().split('.').map(|p| p.parse::<u32>().ok());
    let major = parts.next()??;
    let minor = parts.next()??;
    let patch = parts.next().unwrap_or(Some(0))?;
    Some((major, minor, patch))
}

/// Reads the handle's SQLite version and fails closed below
/// [`MIN_SQLITE_VERSION`] or without the JSON functions. Returns the version.
pub async fn check_sqlite_version(db: &dyn Database) -> Result<String, MigrationError> {
    let wrap = |source| MigrationError::Database {
        owner: "sqlite",
        version: 0,
        source,
    };
    let required = version_text(MIN_SQLITE_VERSION);
    let rows = db
        .query("SELECT sqlite_version()", vec![])
        .await
        .map_err(wrap)?;
    let found = rows
        .scalar()
        .and_then(SqlValue::as_str)
        .unwrap_or_default()
        .to_owned();
    let unsupported = |found: String, detail: String| MigrationError::UnsupportedSqlite {
        found,
        required: required.clone(),
        detail,
    };
    match parse_sqlite_version(&found) {
        Some(version) if version >= MIN_SQLITE_VERSION => {}
        Some(_) => return Err(unsupported(found, String::new())),
        None => {
            let shown = if found.is_empty() {
                "of an unknown version".to_owned()
            } else {
                found
            };
            return Err(unsupported(shown, String::new()));
        }
    }
    // Built in since 3.38; before that an extension most builds include.
    if let Err(error) = db.query("SELECT json_valid('[]')", vec![]).await {
        return Err(unsupported(
            found,
            format!(" with the JSON functions ({error})"),
        ));
    }
    Ok(found)
}

/// Checks the SQLite version, then runs every owner's shipped ladder,
/// filesystem first, then core, then actor.
pub async fn migrate_all(db: &dyn Database) -> Result<Vec<MigrationOutcome>, MigrationError> {
    check_sqlite_version(db).await?;
    let mut outcomes = Vec::with_capacity(Owner::ALL.len());
    for owner in Owner::ALL {
        outcomes.push(migrate(db, owner, owner.ladder()).await?);
    }
    Ok(outcomes)
}

/// Brings `owner`'s schema up to the top of `ladder`.
pub async fn migrate(
    db: &dyn Database,
    owner: Owner,
    ladder: &[Migration],
) -> Result<MigrationOutcome, MigrationError> {
    validate_ladder(owner, ladder)?;
    let supported = ladder.last().map_or(0, |m| m.version);
    let stored = stored_version(db, owner).await?;
    if stored > supported {
        return Err(MigrationError::FutureSchema {
            owner: owner.as_str(),
            stored,
            supported,
        });
    }
    for migration in ladder.iter().filter(|m| m.version > stored) {
        let mut statements = Vec::with_capacity(migration.statements.len() + 2);
        statements.push(Statement::new(version_table_ddl(owner), vec![]));
        statements.extend(
            migration
                .statements
                .iter()
                .map(|sql| Statement::new(*sql, vec![])),
        );
        // Compare-and-set: the row moves from exactly the version we read.
        statements.push(
            Statement::new(
                format!(
                    "INSERT INTO {t} (singleton, schema_version) VALUES (1, ?1) \
                     ON CONFLICT (singleton) DO UPDATE SET schema_version = excluded.schema_version \
                     WHERE schema_version = ?2",
                    t = owner.version_table()
                ),
                vec![
                    SqlValue::from(migration.version),
                    SqlValue::from(migration.version - 1),
                ],
            )
            .expect_changes(1),
        );
        db.transaction(statements)
            .await
            .map_err(|source| MigrationError::Database {
                owner: owner.as_str(),
                version: migration.version,
                source,
            })?;
    }
    Ok(MigrationOutcome {
        owner,
        from: stored,
        to: supported.max(stored),
    })
}

/// Reads the owner's stored version; a missing table or row means 0.
pub async fn stored_version(db: &dyn Database, owner: Owner) -> Result<u32, MigrationError> {
    let wrap = |source| MigrationError::Database {
        owner: owner.as_str(),
        version: 0,
        source,
    };
    let exists = db
        .query(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
            vec![SqlValue::from(owner.version_table())],
        )
        .await
        .map_err(wrap)?;
    if exists.is_empty() {
        return Ok(0);
    }
    let rows = db
        .query(
            &format!(
                "SELECT schema_version FROM {} WHERE singleton = 1",
                owner.version_table()
            ),
            vec![],
        )
        .await
        .map_err(wrap)?;
    let version = rows.scalar_i64().unwrap_or(0);
    u32::try_from(version).map_err(|_| MigrationError::InvalidLadder {
        owner: owner.as_str(),
        reason: format!("stored version {version} is out of range"),
    })
}

fn version_table_ddl(owner: Owner) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (\
           singleton INTEGER PRIMARY KEY CHECK (singleton = 1), \
           schema_version INTEGER NOT NULL CHECK (schema_version >= 0)\
         ) STRICT",
        owner.version_table()
    )
}

/// Checks a ladder before anything runs: contiguous from 1, STRICT tables only,
/// no transaction control, no `user_version`, and no identifier of another owner.
pub fn validate_ladder(owner: Owner, ladder: &[Migration]) -> Result<(), MigrationError> {
    let invalid = |reason: String| MigrationError::InvalidLadder {
        owner: owner.as_str(),
        reason,
    };
    for (index, migration) in ladder.iter().enumerate() {
        let expected = index as u32 + 1;
        if migration.version != expected {
            return Err(invalid(format!(
                "migration {} found where {expected} was expected (ladders are contiguous from 1)",
                migration.version
            )));
        }
        for sql in migration.statements {
            let upper = sql.to_ascii_uppercase();
            let words: Vec<&str> = upper
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| !w.is_empty())
                .collect();
            if matches!(
                words.first().copied(),
                Some("BEGIN" | "COMMIT" | "ROLLBACK" | "END" | "SAVEPOINT" | "RELEASE")
            ) {
                return Err(invalid(format!(
                    "migration {expected} controls transactions itself"
                )));
            }
            if upper.contains("USER_VERSION") {
                return Err(invalid(format!(
                    "migration {expected} touches PRAGMA user_version"
                )));
            }
            let table_options = upper.rsplit(')').next().unwrap_or_default();
            if words.starts_with(&["CREATE", "TABLE"])
                && !table_options
                    .split(|c: char| !c.is_ascii_alphabetic())
                    .any(|w| w == "STRICT")
            {
                return Err(invalid(format!(
                    "migration {expected} creates a table that is not STRICT"
                )));
            }
            let prefix = owner.prefix().to_ascii_uppercase();
            if let Some(foreign) = words
                .iter()
                .find(|w| w.starts_with("AGENTOS_") && !w.starts_with(&prefix))
            {
                return Err(invalid(format!(
                    "migration {expected} names {} which another owner holds",
                    foreign.to_ascii_lowercase()
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &[Migration] = &[
        Migration {
            version: 1,
            statements: &["CREATE TABLE agentos_core_x (a INTEGER) STRICT"],
        },
        Migration {
            version: 2,
            statements: &["CREATE INDEX agentos_core_x_a ON agentos_core_x (a)"],
        },
    ];

    #[test]
    fn sqlite_versions_parse_and_compare() {
        assert_eq!(parse_sqlite_version("3.40.1"), Some((3, 40, 1)));
        assert_eq!(parse_sqlite_version("3.37"), Some((3, 37, 0)));
        assert_eq!(parse_sqlite_version("3.45.0.1"), Some((3, 45, 0)));
        assert_eq!(parse_sqlite_version("three"), None);
        assert!(parse_sqlite_version("3.36.9").unwrap() < MIN_SQLITE_VERSION);
        assert!(parse_sqlite_version("3.37.0").unwrap() >= MIN_SQLITE_VERSION);
        assert!(parse_sqlite_version("4.0.0").unwrap() >= MIN_SQLITE_VERSION);
    }

    /// A handle that answers `sqlite_version()` with a given text and fails
    /// anything else, so nothing past the check can run.
    struct OldSqlite(&'static str);

    #[async_trait::async_trait]
    impl Database for OldSqlite {
        fn kind(&self) -> crate::DatabaseKind {
            crate::DatabaseKind::SqliteFile
        }

        async fn query(&self, sql: &str, _: Vec<SqlValue>) -> Result<crate::Rows, DbError> {
            if sql == "SELECT sqlite_version()" {
                return Ok(crate::Rows {
                    columns: vec!["v".into()],
                    rows: vec![vec![SqlValue::from(self.0)]],
                    changes: 0,
                    last_insert_rowid: None,
                });
            }
            Err(DbError::Closed)
        }

        async fn transaction(&self, _: Vec<Statement>) -> Result<Vec<crate::Rows>, DbError> {
            Err(DbError::Closed)
        }

        async fn close(&self) {}
    }

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        // The fake answers at once: one poll with a no-op waker suffices.
        let mut future = std::pin::pin!(future);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match future.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(output) => output,
            std::task::Poll::Pending => panic!("the fake database never waits"),
        }
    }

    #[test]
    fn an_old_sqlite_fails_closed_naming_both_versions() {
        let err = block_on(migrate_all(&OldSqlite("3.36.0"))).unwrap_err();
        assert_eq!(err.code(), "sqlite_version_unsupported");
        let text = err.to_string();
        assert!(text.contains("3.36.0") && text.contains("3.37.0"), "{text}");
        let err = block_on(migrate_all(&OldSqlite(""))).unwrap_err();
        assert_eq!(err.code(), "sqlite_version_unsupported");
        // A new enough version passes the check and reaches the fake's
        // failing JSON probe: still the same code, saying why.
        let err = block_on(migrate_all(&OldSqlite("3.40.1"))).unwrap_err();
        assert_eq!(err.code(), "sqlite_version_unsupported");
        assert!(err.to_string().contains("JSON"), "{err}");
    }

    #[test]
    fn shipped_ladders_are_valid() {
        for owner in Owner::ALL {
            validate_ladder(owner, owner.ladder()).expect("shipped ladder");
        }
    }

    #[test]
    fn contiguous_ladder_passes() {
        validate_ladder(Owner::Core, GOOD).expect("valid");
    }

    #[test]
    fn gap_is_rejected() {
        let gap = &[GOOD[1]];
        let err = validate_ladder(Owner::Core, gap).unwrap_err();
        assert_eq!(err.code(), "invalid_migration_ladder");
    }

    #[test]
    fn non_strict_table_is_rejected() {
        let bad = &[Migration {
            version: 1,
            statements: &["CREATE TABLE agentos_core_y (a INTEGER)"],
        }];
        assert!(validate_ladder(Owner::Core, bad).is_err());
    }

    #[test]
    fn foreign_owner_identifier_is_rejected() {
        let bad = &[Migration {
            version: 1,
            statements: &[
                "CREATE TABLE agentos_core_y (a INTEGER REFERENCES agentos_fs_inodes(ino)) STRICT",
            ],
        }];
        let err = validate_ladder(Owner::Core, bad).unwrap_err();
        assert!(err.to_string().contains("agentos_fs_inodes"), "{err}");
    }

    #[test]
    fn transaction_control_is_rejected() {
        let bad = &[Migration {
            version: 1,
            statements: &["BEGIN IMMEDIATE"],
        }];
        assert!(validate_ladder(Owner::Core, bad).is_err());
    }
}
