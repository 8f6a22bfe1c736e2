//! Runs an action once per (account, action, client request id).
//!
//! A record keeps the request's hash and the response bytes: the same key
//! with the same hash replays the response, with another hash it is a
//! `conflict`. Requests with one key are serialized in process (the
//! sidecar is the store's only writer, under the store lock), so
//! concurrent duplicates run the action once and the later ones replay.
//! An action that fails leaves no record, so a retry runs it again.
//!
//! Where an action is a pure store write (`create_agent_idempotent`), its
//! rows and the record commit in one transaction; so do a new session's
//! link and its record (`link_session_recorded`, after the sessions
//! service made the session); a generic action (one that calls another
//! service) is recorded right after it succeeds.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use super::error::ControlError;
use super::store::{now_ms, record_statements};
use super::types::{IdempotencyKey, Idempotent};
use super::{validate, Control};

type Slot = Arc<tokio::sync::Mutex<()>>;
type KeyParts = (String, String, String);

/// The keys with an action in flight. An entry lives while someone holds
/// or waits for it.
#[derive(Default)]
pub(super) struct InFlight(Mutex<HashMap<KeyParts, Slot>>);

/// Held while one request of a key runs; dropping it lets the next in.
pub struct InFlightGuard<'a> {
    owner: &'a InFlight,
    key: KeyParts,
    held: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl InFlight {
    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<KeyParts, Slot>> {
        match self.0.lock() {
            Ok(slots) => slots,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    pub(super) async fn enter(&self, key: &IdempotencyKey) -> InFlightGuard<'_> {
        self.enter_parts((
            key.account_id.clone(),
            key.action.clone(),
            key.client_id.clone(),
        ))
        .await
    }

    async fn enter_parts(&self, parts: KeyParts) -> InFlightGuard<'_> {
        let slot = self.slots().entry(parts.clone()).or_default().clone();
        let held = slot.lock_owned().await;
        InFlightGuard {
            owner: self,
            key: parts,
            held: Some(held),
        }
    }

    /// Keys in flight (for tests of the bound).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.slots().len()
    }
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        drop(self.held.take());
        let mut slots = self.owner.slots();
        // Only the map holds it: nobody waits, so the entry can go.
        if slots
            .get(&self.key)
            .is_some_and(|slot| Arc::strong_count(slot) == 1)
        {
            slots.remove(&self.key);
        }
    }
}

pub(super) fn check_key(key: &IdempotencyKey) -> Result<(), ControlError> {
    validate::principal("account", &key.account_id)?;
    validate::name("action", &key.action, 64)?;
    validate::name(
        "clientRequestId",
        &key.client_id,
        validate::MAX_CLIENT_ID_BYTES,
    )?;
    validate::bytes(
        "request hash",
        &key.request_hash,
        1,
        validate::MAX_REQUEST_HASH_BYTES,
    )
}

impl Control {
    pub(super) async fn enter_idempotent(&self, key: &IdempotencyKey) -> InFlightGuard<'_> {
        self.inner.inflight.enter(key).await
    }

    /// Waits until no other request with this (account, action, client id)
    /// runs, and holds that turn while the guard lives. For an action
    /// whose record is written elsewhere (a session's prompt record, or a
    /// session link's transaction): a concurrent duplicate waits for the
    /// first to finish, then finds its record instead of running too.
    pub async fn one_at_a_time(
        &self,
        account: &str,
        action: &str,
        client_id: &str,
    ) -> Result<InFlightGuard<'_>, ControlError> {
        validate::principal("account", account)?;
        validate::name("action", action, 64)?;
        validate::name("client id", client_id, validate::MAX_CLIENT_ID_BYTES)?;
        let parts = (account.to_owned(), action.to_owned(), client_id.to_owned());
        Ok(self.inner.inflight.enter_parts(parts).await)
    }

    /// The answer recorded for `key`, if any; `conflict` when it was
    /// recorded for a different request. For callers that record with
    /// their own transaction, holding the key's turn.
    pub async fn stored_answer(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Option<Vec<u8>>, ControlError> {
        check_key(key)?;
        Ok(self.replay(key).await?.map(Idempotent::into_response))
    }

    /// The stored answer for `key`: a replay when the hash matches, a
    /// conflict when it does not, `None` when the key is new.
    pub(super) async fn replay(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Option<Idempotent>, ControlError> {
        let record = self
            .store()
            .idempotency_record(&key.account_id, &key.action, &key.client_id)
            .await?;
        match record {
            None => Ok(None),
            Some(r) if r.request_hash == key.request_hash => {
                Ok(Some(Idempotent::Replayed(r.response)))
            }
            Some(_) => Err(ControlError::Conflict(format!(
                "client request id {:?} of {} was used with a different request",
                key.client_id, key.action
            ))),
        }
    }

    /// The statements that record `response` for `key`, for a caller that
    /// commits them with its own write (holding the key's turn,
    /// [`Control::one_at_a_time`], after [`Control::stored_answer`] found
    /// none).
    pub(crate) fn idempotency_statements(
        &self,
        key: &IdempotencyKey,
        response: &[u8],
    ) -> Vec<agentos_schema::Statement> {
        record_statements(
            key,
            response,
            now_ms(),
            self.inner.limits.max_idempotency_records,
        )
    }

    /// Runs `run` once for `key`. The same key and hash replays the stored
    /// response; another hash is `conflict`; concurrent duplicates wait and
    /// replay. A failed run records nothing.
    pub async fn idempotent<F, Fut, E>(&self, key: IdempotencyKey, run: F) -> Result<Idempotent, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<u8>, E>>,
        E: From<ControlError>,
    {
        check_key(&key)?;
        let _turn = self.enter_idempotent(&key).await;
        if let Some(replayed) = self.replay(&key).await? {
            return Ok(replayed);
        }
        let response = run().await?;
        if response.len() > validate::MAX_RECORDED_RESPONSE_BYTES {
            // Recording it would let clients fill the table with large rows.
            tracing::warn!(
                action = key.action.as_str(),
                bytes = response.len(),
                "an idempotent response is too large to record; a retry runs again"
            );
            return Ok(Idempotent::Fresh(response));
        }
        let recorded = self
            .store()
            .record_idempotent(&key, &response, self.inner.limits.max_idempotency_records)
            .await;
        match recorded {
            Ok(()) => Ok(Idempotent::Fresh(response)),
            // Recorded by another writer meanwhile: its answer stands.
            Err(e) if e.is_constraint() => match self.replay(&key).await? {
                Some(replayed) => Ok(replayed),
                None => Err(ControlError::from(e).into()),
            },
            Err(e) => Err(ControlError::from(e).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(client: &str) -> IdempotencyKey {
        IdempotencyKey {
            account_id: "zA".into(),
            action: "CreateAgent".into(),
            client_id: client.into(),
            request_hash: vec![1],
        }
    }

    #[tokio::test]
    async fn in_flight_entries_go_when_nobody_holds_them() {
        let inflight = Arc::new(InFlight::default());
        {
            let first = inflight.enter(&key("a")).await;
            let _other = inflight.enter(&key("b")).await;
            assert_eq!(inflight.len(), 2);
            let waiter = {
                let inflight = inflight.clone();
                tokio::spawn(async move {
                    let _second = inflight.enter(&key("a")).await;
                })
            };
            tokio::task::yield_now().await;
            drop(first);
            waiter.await.expect("waiter");
        }
        assert_eq!(inflight.len(), 0);
    }
}
