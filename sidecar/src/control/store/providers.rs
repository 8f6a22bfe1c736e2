//! Model provider rows and the secret names each one refers to. The config
//! is opaque CBOR, so the caller names the referenced secrets; they are
//! kept in their own table so that deleting a provider can take exactly
//! the secrets no other provider of the account still uses.

use agentos_schema::{DbError, SqlValue, Statement};

use super::decode::{count, texts, Row};
use super::{bound, guarded, now_ms, nth, ControlStore, Guarded, PROVIDERS, SECRET_REFS};
use crate::control::types::{AuthMode, NewProvider, ProviderRecord, RedactedProvider};

/// `has_secrets` is computed from the reference rows.
const REDACTED_COLUMNS: &str = "p.provider_id, p.name, p.type, \
    EXISTS (SELECT 1 FROM agentos_core_provider_secret_refs r \
            WHERE r.provider_id = p.provider_id), \
    p.auth_mode, p.created_at_ms, p.updated_at_ms";
const REDACTED_WIDTH: usize = 7;

/// The provider id of `(?1 account, ?2 name)`.
const PROVIDER_ID: &str = "(SELECT provider_id FROM agentos_core_model_providers \
     WHERE account_id = ?1 AND name = ?2)";

fn decode_redacted(r: &mut Row) -> Result<RedactedProvider, DbError> {
    Ok(RedactedProvider {
        id: r.text(0)?,
        name: r.text(1)?,
        provider_type: r.text(2)?,
        has_secrets: r.flag(3)?,
        auth_mode: r.opt_parse(4, AuthMode::parse)?,
        created_at_ms: r.int(5)?,
        updated_at_ms: r.int(6)?,
    })
}

fn select_redacted(account: &str, name: &str) -> Statement {
    Statement::new(
        format!(
            "SELECT {REDACTED_COLUMNS} FROM agentos_core_model_providers p \
             WHERE p.account_id = ?1 AND p.name = ?2"
        ),
        vec![account.into(), name.into()],
    )
}

/// The account's secrets referred to by provider `?2` and by no other
/// provider of the account.
fn unshared_secrets(select: &str) -> String {
    format!(
        "{select} FROM agentos_core_secrets \
         WHERE account_id = ?1 \
           AND name IN (SELECT secret_name FROM agentos_core_provider_secret_refs \
                        WHERE provider_id = {PROVIDER_ID}) \
           AND NOT EXISTS (SELECT 1 FROM agentos_core_provider_secret_refs r \
                           WHERE r.account_id = ?1 \
                             AND r.secret_name = agentos_core_secrets.name \
                             AND r.provider_id <> {PROVIDER_ID})"
    )
}

impl ControlStore {
    /// Creates or replaces the named provider (keeping its id and creation
    /// time) and its secret references. A new name needs room under `max`.
    pub async fn upsert_provider(
        &self,
        account: &str,
        new_id: &str,
        provider: &NewProvider,
        max: u64,
    ) -> Result<Guarded<RedactedProvider>, DbError> {
        let mut statements = vec![
            Statement::new(
                "INSERT INTO agentos_core_model_providers (provider_id, account_id, name, type, \
                   config, auth_mode, created_at_ms, updated_at_ms) \
                 SELECT ?3, ?1, ?2, ?4, ?5, ?6, ?7, ?7 \
                 WHERE (SELECT COUNT(*) FROM agentos_core_model_providers \
                        WHERE account_id = ?1) < ?8 \
                    OR EXISTS (SELECT 1 FROM agentos_core_model_providers \
                               WHERE account_id = ?1 AND name = ?2) \
                 ON CONFLICT (account_id, name) DO UPDATE SET type = excluded.type, \
                   config = excluded.config, auth_mode = excluded.auth_mode, \
                   updated_at_ms = max(updated_at_ms, excluded.updated_at_ms)",
                vec![
                    account.into(),
                    provider.name.as_str().into(),
                    new_id.into(),
                    provider.provider_type.as_str().into(),
                    SqlValue::Blob(provider.config.clone()),
                    provider.auth_mode.map(AuthMode::as_str).into(),
                    now_ms().into(),
                    bound(max),
                ],
            )
            .expect_changes(1),
            Statement::new(
                format!(
                    "DELETE FROM agentos_core_provider_secret_refs WHERE provider_id = {PROVIDER_ID}"
                ),
                vec![account.into(), provider.name.as_str().into()],
            ),
        ];
        for secret in &provider.secret_refs {
            statements.push(Statement::new(
                "INSERT INTO agentos_core_provider_secret_refs \
                   (provider_id, account_id, secret_name) \
                 SELECT provider_id, account_id, ?3 FROM agentos_core_model_providers \
                 WHERE account_id = ?1 AND name = ?2",
                vec![
                    account.into(),
                    provider.name.as_str().into(),
                    secret.as_str().into(),
                ],
            ));
        }
        let read_back = statements.len();
        statements.push(select_redacted(account, &provider.name));
        statements.push(Statement::new(
            "SELECT COUNT(*) FROM agentos_core_model_providers WHERE account_id = ?1",
            vec![account.into()],
        ));
        let Some(mut results) = guarded(&self.db, statements, 0).await? else {
            return Ok(Guarded::Refused);
        };
        let mut row = Row::first(
            nth(&mut results, read_back, PROVIDERS)?,
            PROVIDERS,
            REDACTED_WIDTH,
        )?;
        let value = decode_redacted(&mut row)?;
        let count = count(nth(&mut results, read_back + 1, PROVIDERS)?, PROVIDERS)?;
        Ok(Guarded::Done { value, count })
    }

    pub async fn list_providers(&self, account: &str) -> Result<Vec<RedactedProvider>, DbError> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT {REDACTED_COLUMNS} FROM agentos_core_model_providers p \
                     WHERE p.account_id = ?1 ORDER BY p.name"
                ),
                vec![account.into()],
            )
            .await?;
        Row::all(rows, PROVIDERS, REDACTED_WIDTH, |mut r| {
            decode_redacted(&mut r)
        })
    }

    /// The provider with its config and references, read together.
    pub async fn get_provider(
        &self,
        account: &str,
        name: &str,
    ) -> Result<Option<ProviderRecord>, DbError> {
        let mut results = self
            .db
            .transaction(vec![
                Statement::new(
                    format!(
                        "SELECT {REDACTED_COLUMNS}, p.config FROM agentos_core_model_providers p \
                         WHERE p.account_id = ?1 AND p.name = ?2"
                    ),
                    vec![account.into(), name.into()],
                ),
                Statement::new(
                    format!(
                        "SELECT secret_name FROM agentos_core_provider_secret_refs \
                         WHERE provider_id = {PROVIDER_ID} ORDER BY secret_name"
                    ),
                    vec![account.into(), name.into()],
                ),
            ])
            .await?;
        let Some(mut row) = Row::optional(
            nth(&mut results, 0, PROVIDERS)?,
            PROVIDERS,
            REDACTED_WIDTH + 1,
        )?
        else {
            return Ok(None);
        };
        let redacted = decode_redacted(&mut row)?;
        let config = row.blob(REDACTED_WIDTH)?;
        let secret_refs = texts(nth(&mut results, 1, SECRET_REFS)?, SECRET_REFS)?;
        Ok(Some(ProviderRecord {
            redacted,
            config,
            secret_refs,
        }))
    }

    /// Deletes the provider, its references, and the secrets it referred
    /// to that no other provider of the account uses, in one transaction.
    /// Answers the deleted secret names, or `None` when there was no such
    /// provider.
    pub async fn delete_provider(
        &self,
        account: &str,
        name: &str,
    ) -> Result<Option<Vec<String>>, DbError> {
        let params = || vec![SqlValue::from(account), SqlValue::from(name)];
        let statements = vec![
            Statement::new(
                format!("{} ORDER BY name", unshared_secrets("SELECT name")),
                params(),
            ),
            Statement::new(unshared_secrets("DELETE"), params()),
            Statement::new(
                format!(
                    "DELETE FROM agentos_core_provider_secret_refs WHERE provider_id = {PROVIDER_ID}"
                ),
                params(),
            ),
            Statement::new(
                "DELETE FROM agentos_core_model_providers WHERE account_id = ?1 AND name = ?2",
                params(),
            )
            .expect_changes(1),
        ];
        let Some(mut results) = guarded(&self.db, statements, 3).await? else {
            return Ok(None);
        };
        texts(nth(&mut results, 0, PROVIDERS)?, PROVIDERS).map(Some)
    }

    pub async fn provider_count(&self, account: &str) -> Result<u64, DbError> {
        let rows = self
            .db
            .query(
                "SELECT COUNT(*) FROM agentos_core_model_providers WHERE account_id = ?1",
                vec![account.into()],
            )
            .await?;
        count(rows, PROVIDERS)
    }
}
