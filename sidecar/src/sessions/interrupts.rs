//! Cancelling what a session's turn is waiting on outside the route. A
//! verb runs inside the route's turn loop (an MCP call may take minutes),
//! so a `Cancel` command would wait behind it: [`Sessions::cancel`] fires
//! the session's interrupt first, and a long verb selects on it and gives
//! up. An interrupt watches only the cancels that come after it was taken.
//!
//! [`Sessions::cancel`]: super::Sessions::cancel

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::shared::lock;

/// Every session's interrupt that someone is watching.
#[derive(Default)]
pub struct Interrupts {
    watched: Arc<Mutex<HashMap<String, watch::Sender<u64>>>>,
}

impl Interrupts {
    /// Watches the session's next cancel.
    pub fn watch(&self, session_id: &str) -> Interrupt {
        let mut watched = lock(&self.watched);
        let sender = watched
            .entry(session_id.to_owned())
            .or_insert_with(|| watch::channel(0).0);
        Interrupt {
            receiver: Some(sender.subscribe()),
            session_id: session_id.to_owned(),
            watched: self.watched.clone(),
        }
    }

    /// Wakes whatever watches the session.
    pub fn fire(&self, session_id: &str) {
        if let Some(sender) = lock(&self.watched).get(session_id) {
            sender.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

/// One watch of a session's cancel.
pub struct Interrupt {
    receiver: Option<watch::Receiver<u64>>,
    session_id: String,
    watched: Arc<Mutex<HashMap<String, watch::Sender<u64>>>>,
}

impl Interrupt {
    /// Resolves when the session is cancelled (never otherwise).
    pub async fn fired(&mut self) {
        if let Some(receiver) = &mut self.receiver {
            if receiver.changed().await.is_ok() {
                return;
            }
        }
        std::future::pending::<()>().await;
    }
}

impl Drop for Interrupt {
    fn drop(&mut self) {
        drop(self.receiver.take());
        let mut watched = lock(&self.watched);
        if watched
            .get(&self.session_id)
            .is_some_and(|sender| sender.receiver_count() == 0)
        {
            watched.remove(&self.session_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_cancel_wakes_the_watches_taken_before_it() {
        let interrupts = Interrupts::default();
        let mut first = interrupts.watch("s1");
        let mut other = interrupts.watch("s2");
        interrupts.fire("s1");
        tokio::time::timeout(std::time::Duration::from_secs(5), first.fired())
            .await
            .expect("the watch fires");
        let idle = tokio::time::timeout(std::time::Duration::from_millis(20), other.fired()).await;
        assert!(idle.is_err(), "another session's watch stays quiet");
        drop((first, other));
        assert!(lock(&interrupts.watched).is_empty(), "no watch, no entry");
        // A cancel before the watch is not seen by it.
        interrupts.fire("s3");
        let mut late = interrupts.watch("s3");
        let quiet = tokio::time::timeout(std::time::Duration::from_millis(20), late.fired()).await;
        assert!(quiet.is_err());
    }
}
