//! A session's live route, as the service reaches it: finding it, starting
//! it (single flight per session, on the service's runtime whichever door
//! asks, after settling a turn an earlier route left unfinished), stopping
//! it, and sending it a command with the retries a route that ends as the
//! command arrives calls for.

use std::sync::atomic::Ordering;

use tokio::sync::oneshot;

use super::route::{Command, Route, RouteHandle, StopReason};
use super::store::SessionStatus;
use super::{lock, SessionError, SessionRow, Sessions};

impl Sessions {
    /// `NotFound` unless the session exists. A live route answers for its
    /// session without a read: a deleted session's route is stopped before
    /// its rows go, and a command that reaches a route as it ends starts a
    /// new one, which reads the row.
    pub(super) async fn known(&self, session_id: &str) -> Result<(), SessionError> {
        if self.route(session_id).is_some() {
            return Ok(());
        }
        self.row(session_id).await.map(drop)
    }

    pub(super) fn route(&self, session_id: &str) -> Option<RouteHandle> {
        lock(&self.shared.routes)
            .get(session_id)
            .filter(|r| r.is_alive())
            .cloned()
    }

    /// The live route of a session, restoring it if needed. Single flight.
    pub(super) async fn ensure_route(&self, session_id: &str) -> Result<RouteHandle, SessionError> {
        if let Some(route) = self.route(session_id) {
            return Ok(route);
        }
        // Starting a route is the rare path: boxed, so that every command's
        // future (each request in flight holds one) is sized for the common.
        Box::pin(self.start_route(session_id)).await
    }

    /// Starts the route on the service's runtime, where its tasks then
    /// run. The start is a task of its own there: a caller that stops
    /// waiting leaves it to finish and keep its route, so the session's
    /// start gate is never let go while a start is under way.
    pub(super) async fn start_route(&self, session_id: &str) -> Result<RouteHandle, SessionError> {
        let Some(runtime) = self.shared.runtime.clone() else {
            return self.start_route_here(session_id).await;
        };
        let sessions = self.clone();
        let session_id = session_id.to_owned();
        runtime
            .spawn(async move { sessions.start_route_here(&session_id).await })
            .await
            .unwrap_or_else(|e| {
                Err(if e.is_cancelled() {
                    SessionError::ShuttingDown
                } else {
                    SessionError::RestoreFailed("starting the route failed unexpectedly".into())
                })
            })
    }

    pub(super) async fn start_route_here(
        &self,
        session_id: &str,
    ) -> Result<RouteHandle, SessionError> {
        let gate = lock(&self.shared.starting)
            .entry(session_id.to_owned())
            .or_default()
            .clone();
        let _guard = gate.lock().await;
        if let Some(route) = self.route(session_id) {
            return Ok(route);
        }
        let row = self.settle_orphaned_turn(session_id).await?;
        let generation = self.shared.generation.fetch_add(1, Ordering::SeqCst);
        let handle = Route::start(self.shared.clone(), row, generation).await?;
        lock(&self.shared.routes).insert(session_id.to_owned(), handle.clone());
        Ok(handle)
    }

    /// The session's row, after settling a turn no route runs any more.
    /// Mid-turn without a route means an earlier route of this process ended
    /// without its terminal commit (storage failed, or a commit's outcome was
    /// lost): the turn is settled as a restart would settle it. Call with the
    /// session's start gate held.
    pub(super) async fn settle_orphaned_turn(
        &self,
        session_id: &str,
    ) -> Result<SessionRow, SessionError> {
        let row = self.row(session_id).await?;
        if row.state != SessionStatus::Running && row.state != SessionStatus::Waiting {
            return Ok(row);
        }
        if self.shared.store.reconcile_session(session_id).await? {
            tracing::warn!(session = %session_id, "a turn left unfinished by a storage failure was marked prompt_delivery_uncertain");
        }
        self.shared.refresh_vm_counts().await?;
        self.row(session_id).await
    }

    pub(super) async fn stop_route(&self, session_id: &str, reason: StopReason) {
        let route = lock(&self.shared.routes).remove(session_id);
        if let Some(route) = route {
            let (reply, done) = oneshot::channel();
            if route
                .commands
                .send(Command::Stop { reason, reply })
                .await
                .is_ok()
            {
                let _ = done.await;
            }
        }
    }

    /// Sends the command `command` builds to the session's route, starting
    /// one if needed, and waits for its answer; `dropped` is the answer when
    /// the route drops the reply. A route that ends as the command reaches
    /// it never started it (`RouteGone`): the command goes to a new route,
    /// three tries in all.
    pub(super) async fn send_to_route<T>(
        &self,
        session_id: &str,
        dropped: impl Fn() -> Result<T, SessionError>,
        mut command: impl FnMut(oneshot::Sender<Result<T, SessionError>>) -> Command,
    ) -> Result<T, SessionError> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let route = self.ensure_route(session_id).await?;
            let (reply, answer) = oneshot::channel();
            let result = match route.commands.send(command(reply)).await {
                Ok(()) => answer.await.unwrap_or_else(|_| dropped()),
                Err(_) => Err(SessionError::RouteGone),
            };
            match result {
                Err(SessionError::RouteGone) if attempts < 3 => continue,
                other => return other,
            }
        }
    }
}
