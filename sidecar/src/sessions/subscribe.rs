//! Subscriptions: replay of committed events after a cursor, then live
//! delivery from the hub, with no gap and no duplicate. The replay runs on
//! its own task in bounded pages; the hub holds live items back until the
//! replay has caught up.

use std::sync::Arc;

use agentos_protocol::ErrorCode;
use tokio::sync::oneshot;

use super::{Item, SessionError, Sessions, Sink};

/// Rows per replay query when a subscription catches up.
const REPLAY_PAGE: u64 = 2048;

impl Sessions {
    /// Subscribes `sink` to a session: replay after `after` (default: the
    /// latest committed event, i.e. live only), then live, no gap, no
    /// duplicate.
    ///
    /// Nothing is delivered until `start` fires, so a front door can answer
    /// the subscribe call before the first event reaches the same client.
    /// `sink` may hold at most `max_per_sink` subscriptions
    /// (`limits.host.maxSubscriptionsPerConnection` for a host connection).
    pub async fn subscribe(
        &self,
        session_id: &str,
        after: Option<u64>,
        sink: Arc<dyn Sink>,
        start: oneshot::Receiver<()>,
        max_per_sink: u64,
    ) -> Result<String, SessionError> {
        let row = self.row(session_id).await?;
        let after = after.unwrap_or(row.latest_sequence);
        if after.saturating_add(1) < row.oldest_retained_sequence {
            return Err(SessionError::HistoryCursorExpired {
                earliest: row.oldest_retained_sequence,
            });
        }
        let id = uuid::Uuid::new_v4().to_string();
        let (sub, upto) = self
            .shared
            .hub
            .register(
                id.clone(),
                session_id,
                row.latest_sequence,
                sink.clone(),
                max_per_sink,
            )
            .map_err(|full| SessionError::Limit {
                code: ErrorCode::SubscriptionsLimit,
                setting: "limits.host.maxSubscriptionsPerConnection",
                used: full.held,
                limit: max_per_sink,
            })?;
        let store = self.shared.store.clone();
        let hub = self.shared.hub.clone();
        let session = session_id.to_owned();
        tokio::spawn(async move {
            if start.await.is_err() {
                hub.unsubscribe(&sub.id);
                return;
            }
            let mut cursor = after;
            while cursor < upto {
                let page = match store
                    .events_between(&session, cursor, upto, REPLAY_PAGE)
                    .await
                {
                    Ok(page) => page,
                    Err(e) => {
                        tracing::warn!(session = %session, error = %e, "subscription replay failed");
                        hub.unsubscribe(&sub.id);
                        sink.ended(&sub.id, &session, "storage_error", cursor);
                        return;
                    }
                };
                let Some(last) = page.last().map(|e| e.sequence) else {
                    break;
                };
                for event in page {
                    let item = Item::durable(event);
                    if sink.deliver(&sub.id, &item).is_err() {
                        hub.unsubscribe(&sub.id);
                        sink.ended(&sub.id, &session, "overflow", cursor);
                        return;
                    }
                }
                cursor = last;
            }
            hub.go_live(&sub, cursor.max(after));
        });
        Ok(id)
    }
}
