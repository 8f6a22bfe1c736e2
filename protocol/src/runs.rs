//! The runs vocabulary both doors and the clients share: a run's status as
//! the wire spells it, and the longest page a runs listing answers.

/// The most runs one listing answers.
pub const MAX_LIST: u64 = 200;

/// Where a run stands. `queued → claimed → running →` a terminal status or
/// `waiting`, and back to `queued` for a retry or a wake.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunStatus {
    Queued,
    Claimed,
    Running,
    Waiting,
    Succeeded,
    Failed,
    Canceled,
}

impl RunStatus {
    pub const ALL: [RunStatus; 7] = [
        RunStatus::Queued,
        RunStatus::Claimed,
        RunStatus::Running,
        RunStatus::Waiting,
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::Canceled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Claimed => "claimed",
            RunStatus::Running => "running",
            RunStatus::Waiting => "waiting",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Canceled => "canceled",
        }
    }

    pub fn parse(text: &str) -> Option<RunStatus> {
        RunStatus::ALL.into_iter().find(|s| s.as_str() == text)
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Succeeded | RunStatus::Failed | RunStatus::Canceled
        )
    }

    /// Holds a slot and a lease.
    pub fn is_live(self) -> bool {
        matches!(self, RunStatus::Claimed | RunStatus::Running)
    }
}
