//! `ScriptError`: the one error enum of the script engine. Every way a script
//! run can fail ends here, with a stable snake_case `code()`; where the
//! failure came from the script itself it also carries the `workflow.js:LINE`
//! stack and, for an effect error the script did not catch, the tool and the
//! `callSeq` it belonged to. Nothing here knows the runs queue or HTTP.

use std::fmt;

/// Where in the script a failure happened, as far as the engine knows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FailureSite {
    /// The script's stack frames only (`at f (workflow.js:LINE:COL)`), one a
    /// line; the engine's own prelude frames are left out.
    pub stack: Option<String>,
    /// The tool of an effect error that reached the top uncaught.
    pub tool: Option<String>,
    /// The `callSeq` of that effect.
    pub call_seq: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ScriptError {
    /// The source breaks the module rules: too large, not a module, a syntax
    /// error, an import, or not exactly one default async function export.
    #[error("invalid script: {0}")]
    InvalidScript(String),
    /// The script threw (or its default function rejected) and nothing
    /// caught it. `thrown_code` is the thrown object's string `code`, kept
    /// apart from `code()` so a script cannot pass itself off as an engine
    /// failure.
    #[error("{message}")]
    Thrown {
        message: String,
        thrown_code: Option<String>,
        site: FailureSite,
    },
    /// Continuous JavaScript execution between two awaits outlasted the
    /// budget (`compute_between_awaits`).
    #[error("the script computed for more than {limit_ms} ms without awaiting an effect")]
    FuelExhausted { limit_ms: u128, site: FailureSite },
    /// The realm's memory cap was reached.
    #[error("the script ran out of memory ({limit} bytes)")]
    MemoryLimit { limit: usize, site: FailureSite },
    /// The realm's stack cap was reached (usually unbounded recursion).
    #[error("the script overflowed its stack ({limit} bytes)")]
    StackLimit { limit: usize, site: FailureSite },
    /// The run's journal would grow past `setting` (`limit`).
    #[error("the run's journal would exceed {setting} ({limit})")]
    JournalCap { setting: &'static str, limit: u64 },
    /// The host could not append to the journal; the run cannot go on
    /// durably and is rerun from what was committed.
    #[error("journaling failed: {code}: {message}")]
    JournalFailed { code: String, message: String },
    /// The script awaits something nothing will ever settle (no effect is in
    /// flight and none is ready).
    #[error("the script is waiting on a promise that nothing will settle")]
    Stalled { site: FailureSite },
    /// A host future panicked while running an effect.
    #[error("the host panicked while running an effect: {0}")]
    HostPanic(String),
    /// The script's thread panicked (a bug, in the engine or in a host method
    /// the engine calls on that thread).
    #[error("the script engine panicked: {0}")]
    EnginePanic(String),
    /// The engine could not be set up or broke an invariant of its own.
    #[error("script engine failure: {0}")]
    Engine(String),
}

impl ScriptError {
    pub fn code(&self) -> &'static str {
        match self {
            ScriptError::InvalidScript(_) => "invalid_script",
            ScriptError::Thrown { .. } => "script_error",
            ScriptError::FuelExhausted { .. } => "fuel_exhausted",
            ScriptError::MemoryLimit { .. } => "memory_limit",
            ScriptError::StackLimit { .. } => "stack_limit",
            ScriptError::JournalCap { .. } => "journal_cap",
            ScriptError::JournalFailed { .. } => "journal_failed",
            ScriptError::Stalled { .. } => "script_stalled",
            ScriptError::HostPanic(_) => "host_panic",
            ScriptError::EnginePanic(_) => "engine_panic",
            ScriptError::Engine(_) => "engine",
        }
    }

    /// The limit setting a cap error names (as `ScriptLimits` spells it).
    pub fn setting(&self) -> Option<&'static str> {
        match self {
            ScriptError::FuelExhausted { .. } => Some("compute_between_awaits"),
            ScriptError::MemoryLimit { .. } => Some("memory_bytes"),
            ScriptError::StackLimit { .. } => Some("stack_bytes"),
            ScriptError::JournalCap { setting, .. } => Some(setting),
            _ => None,
        }
    }

    /// Where in the script it failed, when the failure came from running it.
    pub fn site(&self) -> Option<&FailureSite> {
        match self {
            ScriptError::Thrown { site, .. }
            | ScriptError::FuelExhausted { site, .. }
            | ScriptError::MemoryLimit { site, .. }
            | ScriptError::StackLimit { site, .. }
            | ScriptError::Stalled { site } => Some(site),
            _ => None,
        }
    }

    pub fn stack(&self) -> Option<&str> {
        self.site().and_then(|s| s.stack.as_deref())
    }

    pub fn tool(&self) -> Option<&str> {
        self.site().and_then(|s| s.tool.as_deref())
    }

    pub fn call_seq(&self) -> Option<u64> {
        self.site().and_then(|s| s.call_seq)
    }

    pub(crate) fn invalid(message: impl Into<String>) -> ScriptError {
        ScriptError::InvalidScript(message.into())
    }

    pub(crate) fn engine(message: impl fmt::Display) -> ScriptError {
        ScriptError::Engine(message.to_string())
    }
}

/// An effect's failure as the host reports it; the script sees it as a thrown
/// `Error` whose `.code` and `.message` are these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EffectError {
    pub code: String,
    pub message: String,
}

impl EffectError {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> EffectError {
        EffectError {
            code: code.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for EffectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for EffectError {}
