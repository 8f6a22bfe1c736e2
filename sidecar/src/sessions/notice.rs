//! What the session domain tells every front door outside any subscription:
//! agent stderr lines, adapter exits, and keep-awake holds (one per prompt
//! from dispatch through its terminal commit).

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::broadcast;

/// VM-wide notifications for every host connection.
#[derive(Clone, Debug, PartialEq)]
pub enum Notice {
    AgentStderr {
        session_id: String,
        line: String,
    },
    AgentExited {
        session_id: String,
        code: Option<i32>,
        signal: Option<i32>,
    },
    KeepAwake {
        held: bool,
        holders: u64,
        session_id: String,
        prompt_id: String,
    },
}

/// Keep-awake holders: one per prompt from dispatch through its terminal
/// commit.
#[derive(Default)]
pub struct KeepAwake {
    holders: AtomicU64,
}

pub(crate) struct KeepAwakeGuard<'a> {
    owner: &'a KeepAwake,
    notices: broadcast::Sender<Notice>,
    session_id: String,
    prompt_id: String,
}

impl KeepAwake {
    pub fn holders(&self) -> u64 {
        self.holders.load(Ordering::SeqCst)
    }

    pub(crate) fn hold<'a>(
        &'a self,
        notices: &broadcast::Sender<Notice>,
        session_id: &str,
        prompt_id: &str,
    ) -> KeepAwakeGuard<'a> {
        let holders = self.holders.fetch_add(1, Ordering::SeqCst) + 1;
        let _ = notices.send(Notice::KeepAwake {
            held: true,
            holders,
            session_id: session_id.to_owned(),
            prompt_id: prompt_id.to_owned(),
        });
        KeepAwakeGuard {
            owner: self,
            notices: notices.clone(),
            session_id: session_id.to_owned(),
            prompt_id: prompt_id.to_owned(),
        }
    }
}

impl Drop for KeepAwakeGuard<'_> {
    fn drop(&mut self) {
        let holders = self.owner.holders.fetch_sub(1, Ordering::SeqCst) - 1;
        let _ = self.notices.send(Notice::KeepAwake {
            held: holders > 0,
            holders,
            session_id: std::mem::take(&mut self.session_id),
            prompt_id: std::mem::take(&mut self.prompt_id),
        });
    }
}
