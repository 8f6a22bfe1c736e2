//! `limits.runs`: the run queue's leases, concurrency caps, delegation
//! bounds, journal caps, retention and the scripts' wall budget, with their
//! defaults. Plain data and its
//! validation; the runs service takes it as its `RunsConfig`.

use serde::{Deserialize, Serialize};

use super::ConfigError;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct RunLimits {
    /// How long a claim holds a run without being renewed (renewed every
    /// third of it while the run is worked).
    pub lease_ms: u64,
    /// Turns this VM works at once.
    pub max_concurrent_agent_runs: u32,
    /// Scripts this VM works at once.
    pub max_concurrent_script_runs: u32,
    /// How deep a delegated child may be.
    pub max_depth: u32,
    /// Children one run may start.
    pub max_children_per_run: u32,
    /// Journal entries and bytes of one run.
    pub max_journal_entries: u64,
    pub max_journal_bytes: u64,
    /// Rows the runs table keeps: past it, the oldest finished trees go
    /// (with their journals). Live trees are never pruned.
    pub max_runs: u64,
    /// A script's wall-clock budget from its start: past it, the script
    /// pauses at its next new effect until someone signals it (which lifts
    /// the budget).
    pub max_script_wall_ms: u64,
}

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits {
            lease_ms: 60_000,
            max_concurrent_agent_runs: 8,
            max_concurrent_script_runs: 32,
            max_depth: 3,
            max_children_per_run: 10,
            max_journal_entries: 5_000,
            max_journal_bytes: 8 * 1024 * 1024,
            max_runs: 100_000,
            max_script_wall_ms: 3_600_000,
        }
    }
}

impl RunLimits {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = [
            ("limits.runs.leaseMs", self.lease_ms),
            (
                "limits.runs.maxConcurrentAgentRuns",
                u64::from(self.max_concurrent_agent_runs),
            ),
            (
                "limits.runs.maxConcurrentScriptRuns",
                u64::from(self.max_concurrent_script_runs),
            ),
            ("limits.runs.maxJournalEntries", self.max_journal_entries),
            ("limits.runs.maxJournalBytes", self.max_journal_bytes),
            ("limits.runs.maxRuns", self.max_runs),
            ("limits.runs.maxScriptWallMs", self.max_script_wall_ms),
        ];
        for (field, value) in positive {
            if value == 0 {
                return Err(ConfigError::new(field, "must be greater than 0"));
            }
        }
        if self.lease_ms < 30 || self.lease_ms > 86_400_000 {
            return Err(ConfigError::new(
                "limits.runs.leaseMs",
                "must be between 30 ms and a day",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_and_the_wall_budget_are_read_by_their_names_and_must_be_positive() {
        let limits: RunLimits =
            serde_json::from_value(serde_json::json!({"maxRuns": 10, "maxScriptWallMs": 500}))
                .expect("known fields");
        assert_eq!((limits.max_runs, limits.max_script_wall_ms), (10, 500));
        assert_eq!(limits.lease_ms, RunLimits::default().lease_ms);
        assert!(limits.validate().is_ok());
        for (limits, field) in [
            (
                RunLimits {
                    max_runs: 0,
                    ..RunLimits::default()
                },
                "limits.runs.maxRuns",
            ),
            (
                RunLimits {
                    max_script_wall_ms: 0,
                    ..RunLimits::default()
                },
                "limits.runs.maxScriptWallMs",
            ),
        ] {
            let e = limits.validate().expect_err("zero is refused");
            assert_eq!(e.field, field);
        }
    }
}
