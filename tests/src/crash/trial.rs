//! One trial: choose a fresh or a reused database, start the processes,
//! drive traffic, kill at a random moment (the sidecar, or the socket
//! server first), check the file, restart, and hand over to the
//! protocol-side checks in `verify`.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::checks::{check_store, delivered_markers, open_ro, row_key};
use super::drive::{lock, session_worker, Outcome, Record};
use super::process::{drain_group, signal, start_ars, start_sidecar, stop, Proc};
use super::{Backend, BackendState, CrashOptions, Summary, Violation, MAX_REUSE_CHAIN, PATIENCE};
use crate::rivet::{snapshot, RivetRuntime};

pub(super) enum KillPlan {
    Sidecar,
    /// Kill the socket server, then the sidecar `grace_ms` later.
    SocketServer {
        grace_ms: u64,
    },
}

pub(super) struct Trial<'a> {
    pub(super) options: &'a CrashOptions,
    pub(super) state: &'a mut BackendState,
    pub(super) number: u32,
    pub(super) rng: StdRng,
    pub(super) violations: Vec<Violation>,
    pub(super) line: String,
}

impl<'a> Trial<'a> {
    pub(super) fn new(
        options: &'a CrashOptions,
        state: &'a mut BackendState,
        number: u32,
        seed: u64,
    ) -> Self {
        Trial {
            options,
            state,
            number,
            rng: StdRng::seed_from_u64(seed),
            violations: Vec::new(),
            line: String::new(),
        }
    }

    pub(super) fn violation(&mut self, check: &'static str, detail: impl Into<String>) {
        self.violations.push(Violation {
            backend: self.state.backend,
            trial: self.number,
            check,
            detail: detail.into(),
        });
    }

    pub(super) fn progress_line(&self) -> String {
        format!(
            "[{} {}/{}] {} violations: {}",
            self.state.backend.name(),
            self.number,
            self.options.trials,
            self.line,
            self.violations.len()
        )
    }

    pub(super) fn config(&self, log: &Path) -> Value {
        let dir = &self.state.dir;
        let database = match self.state.backend {
            Backend::SqliteFile => json!({"type": "sqlite_file", "path": self.state.db_path()}),
            Backend::ActorUds => json!({"type": "actor_uds", "path": dir.join("a.sock")}),
            Backend::Rivet => json!({"type": "actor_uds", "path": self.state.actor_socket}),
        };
        // The confined agent may append to the log only if it exists when
        // the agent starts (Landlock rules name existing files).
        if let Err(e) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            eprintln!("cannot create the prompt log {}: {e}", log.display());
        }
        json!({
            "secrets": {"keyFile": dir.join("secrets.key")},
            "database": database,
            "socket": dir.join("h.sock"),
            "agents": {"echo": {
                "command": self.options.fake_agent,
                "args": [],
                "env": {"AGENTOS_FAKE_AGENT_LOG": log},
                "sandbox": {"writePaths": [log]},
            }},
        })
    }

    pub(super) async fn start_ars(&self) -> Result<Option<Proc>, String> {
        match self.state.backend {
            Backend::SqliteFile | Backend::Rivet => Ok(None),
            Backend::ActorUds => start_ars(
                &self.options.sidecar,
                &self.state.db_path(),
                &self.state.dir.join("a.sock"),
            )
            .await
            .map(Some),
        }
    }

    pub(super) async fn run(&mut self, summary: &mut Summary) {
        // The database: reuse the previous one sometimes.
        let reuse =
            self.state.has_db && self.state.chain < MAX_REUSE_CHAIN && self.rng.gen_bool(0.4);
        if reuse {
            self.state.chain += 1;
            summary.reused_databases += 1;
        } else {
            if self.state.has_db {
                self.state.remove_db();
            }
            self.state.db_serial += 1;
            self.state.chain = 0;
            self.state.has_db = true;
            if self.state.backend == Backend::Rivet {
                // A fresh store is a fresh actor.
                let key = format!("crash-{}", uuid::Uuid::new_v4());
                let socket = match RivetRuntime::shared() {
                    Ok(runtime) => runtime.provision_async(key).await,
                    Err(e) => Err(e),
                };
                match socket {
                    Ok(socket) => self.state.actor_socket = Some(socket),
                    Err(e) => {
                        self.violation("start_failed", format!("no rivet actor: {e}"));
                        self.state.has_db = false;
                        self.finish(summary, None);
                        return;
                    }
                }
            }
            let policies = ["ask", "allow_all", "ask", "reject_all", "ask"];
            let n = self.rng.gen_range(2..=5);
            self.state.sessions = (0..n).map(|i| (format!("s{i}"), policies[i])).collect();
        }
        let log = self.state.dir.join(format!("agent-{}.log", self.number));
        let config = self.config(&log);
        let stderr_first = self
            .state
            .dir
            .join(format!("sidecar-{}-a.err", self.number));
        let stderr_second = self
            .state
            .dir
            .join(format!("sidecar-{}-b.err", self.number));

        let mut ars = match self.start_ars().await {
            Ok(ars) => ars,
            Err(e) => {
                self.violation("start_failed", e);
                summary
                    .notes
                    .push(format!("trial {}: no socket server", self.number));
                self.finish(summary, None);
                return;
            }
        };
        let sidecar = match start_sidecar(&self.options.sidecar, &config, &stderr_first).await {
            Ok(p) => p,
            Err(e) => {
                self.violation("start_failed", e);
                if let Some(mut ars) = ars.take() {
                    let _ = stop(&mut ars, "socket server").await;
                }
                self.state.has_db = false;
                self.finish(summary, None);
                return;
            }
        };
        let mut sidecar = sidecar;

        // Drive, then kill.
        let record = Arc::new(Mutex::new(Record::default()));
        let socket = self.state.dir.join("h.sock");
        let mut workers = Vec::new();
        for (session, policy) in self.state.sessions.clone() {
            let rng = StdRng::seed_from_u64(self.rng.gen());
            workers.push(tokio::spawn(session_worker(
                socket.clone(),
                session,
                policy,
                rng,
                record.clone(),
            )));
        }
        let plan = if ars.is_some() && self.rng.gen_bool(0.35) {
            KillPlan::SocketServer {
                grace_ms: self.rng.gen_range(0..400),
            }
        } else {
            KillPlan::Sidecar
        };
        let delay = self.rng.gen_range(0..=self.options.max_kill_delay_ms);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        let mut ars_killed = false;
        match plan {
            KillPlan::Sidecar => {
                signal(sidecar.pid, libc::SIGKILL);
                summary.sidecar_kills += 1;
                self.line = format!("kill sidecar at {delay} ms;");
            }
            KillPlan::SocketServer { grace_ms } => {
                if let Some(ars) = ars.as_mut() {
                    signal(ars.pid, libc::SIGKILL);
                    let _ = ars.child.wait().await;
                    ars_killed = true;
                }
                summary.socket_server_kills += 1;
                tokio::time::sleep(Duration::from_millis(grace_ms)).await;
                signal(sidecar.pid, libc::SIGKILL);
                self.line =
                    format!("kill socket server at {delay} ms, sidecar {grace_ms} ms later;");
            }
        }
        let _ = sidecar.child.wait().await;
        for worker in workers {
            if tokio::time::timeout(PATIENCE, worker).await.is_err() {
                summary
                    .notes
                    .push(format!("trial {}: a client did not stop", self.number));
            }
        }
        drain_group(sidecar.pid, &mut summary.notes).await;
        if ars_killed {
            ars = None;
        }
        let record = std::mem::take(&mut *lock(&record));

        // The file as the crash left it.
        if let Some(conn) = self.store().await {
            match check_store(&conn, false) {
                Ok(found) => {
                    for (check, detail) in found {
                        self.violation(check, format!("after the kill: {detail}"));
                    }
                }
                Err(e) => self.violation("unreadable", format!("after the kill: {e}")),
            }
        }

        // Restart.
        if ars.is_none() && self.state.backend == Backend::ActorUds {
            match self.start_ars().await {
                Ok(p) => ars = p,
                Err(e) => {
                    self.violation("restart_failed", format!("socket server: {e}"));
                    self.state.has_db = false;
                    self.finish(summary, Some(&record));
                    return;
                }
            }
        }
        let mut restarted =
            match start_sidecar(&self.options.sidecar, &config, &stderr_second).await {
                Ok(p) => p,
                Err(e) => {
                    self.violation("restart_failed", e);
                    if let Some(mut ars) = ars.take() {
                        let _ = stop(&mut ars, "socket server").await;
                    }
                    self.state.has_db = false;
                    self.finish(summary, Some(&record));
                    return;
                }
            };
        let rows = self.verify_after_restart(&socket, &record, summary).await;
        if let Some(note) = stop(&mut restarted, "restarted sidecar").await {
            summary.notes.push(format!("trial {}: {note}", self.number));
        }
        drain_group(restarted.pid, &mut summary.notes).await;
        if let Some(conn) = self.store().await {
            match check_store(&conn, true) {
                Ok(found) => {
                    for (check, detail) in found {
                        self.violation(check, format!("after restart and stop: {detail}"));
                    }
                }
                Err(e) => self.violation("unreadable", format!("after restart: {e}")),
            }
        }
        if let Some(mut ars) = ars.take() {
            if let Some(note) = stop(&mut ars, "socket server").await {
                summary.notes.push(format!("trial {}: {note}", self.number));
            }
        }

        // Deliveries.
        let (delivered, unreadable) = delivered_markers(&log);
        for line in unreadable {
            self.violation("unreadable_prompt_log", line);
        }
        for (marker, n) in &delivered {
            if *n > 1 {
                self.violation(
                    "delivered_twice",
                    format!("prompt {marker} reached the adapter {n} times"),
                );
            }
        }
        if let Some(rows) = rows {
            for p in record.prompts.iter().filter(|p| !p.duplicate) {
                let row = rows.get(&row_key(&p.session, &p.key));
                let got = delivered.contains_key(&p.marker);
                match row {
                    None if got => self.violation(
                        "delivered_without_accept",
                        format!(
                            "{} ({}) reached the adapter without a prompt row",
                            p.key, p.command
                        ),
                    ),
                    Some(r)
                        if r.state == "completed"
                            && r.result
                                .as_ref()
                                .is_some_and(|v| v["stopReason"] == "end_turn")
                            && !got =>
                    {
                        self.violation(
                            "completed_without_delivery",
                            format!(
                                "{} ({}) is completed but the adapter never saw it",
                                p.key, p.command
                            ),
                        )
                    }
                    _ => {}
                }
            }
        }
        self.finish(summary, Some(&record));
        if self.violations.is_empty() {
            let _ = std::fs::remove_file(&log);
            let _ = std::fs::remove_file(&stderr_first);
            let _ = std::fs::remove_file(&stderr_second);
        }
    }

    /// The store as it is now, read-only. On Rivet, a copy of the actor's
    /// tables taken now (no sidecar may be running).
    pub(super) async fn store(&mut self) -> Option<rusqlite::Connection> {
        if self.state.backend == Backend::Rivet {
            let socket = self.state.actor_socket.clone()?;
            if let Err(e) = snapshot(&socket, &self.state.db_path()).await {
                self.violation("unreadable", format!("the actor's database: {e}"));
                return None;
            }
        }
        open_ro(&self.state.db_path())
    }

    pub(super) fn finish(&mut self, summary: &mut Summary, record: Option<&Record>) {
        if let Some(record) = record {
            let primary = record.prompts.iter().filter(|p| !p.duplicate);
            summary.prompts_sent += primary.clone().count() as u64;
            summary.answered_before_kill += primary
                .filter(|p| !matches!(p.outcome, Outcome::None))
                .count() as u64;
            summary.events_seen += record
                .seen
                .values()
                .map(|s| s.events.len() as u64)
                .sum::<u64>();
            summary.permissions_answered += record.permissions_answered;
            summary.cancels_sent += record.cancels;
            let _ = write!(
                self.line,
                " prompts {} events {}",
                record.prompts.len(),
                record.seen.values().map(|s| s.events.len()).sum::<usize>()
            );
        }
        summary.violations.append(&mut self.violations.clone());
    }
}
