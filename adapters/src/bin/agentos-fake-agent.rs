//! A scripted ACP agent for tests: the text of a prompt selects what it does,
//! so tests can drive every protocol path deterministically with real pipes.
//!
//! Speaks ACP v1 (newline-delimited JSON-RPC) on stdin/stdout and exits 0
//! when stdin closes. Each prompt runs on its own thread, so a prompt waiting
//! for a cancel or a permission answer never blocks other sessions.
//!
//! Flags:
//! - `--load-session`: advertise `loadSession` and implement `session/load`,
//!   which replays the session's stored updates before answering.
//! - `--resume`: advertise `sessionCapabilities.resume` and implement
//!   `session/resume` (no replay).
//! - `--state-dir DIR`: persist sessions (and, with `--load-session`, their
//!   updates) in DIR so load/resume work across restarts.
//! - `--restore-error`: answer load/resume with a generic -32603 error that is
//!   not an unknown-session error.
//! - `--unknown-session-error FORM`: answer every load/resume as for a
//!   session this agent does not know, in one of the two forms ACP agents
//!   use: `resource-not-found` (-32002) or `not-found-error` (-32603 with
//!   `data.details == "NotFoundError"`).
//! - `--resume-replays`: `session/resume` replays the stored updates as
//!   `session/load` does (implies `--load-session`'s update recording).
//! - `--agent-name NAME`: the `agentInfo.name` to report.
//! - `--prompt-capabilities LIST`: advertise these `promptCapabilities`
//!   (comma-separated, e.g. `image,embeddedContext`).
//!
//! Environment: `AGENTOS_FAKE_AGENT_LOG=FILE` appends one JSON line
//! `{pid, sessionId, prompt}` per received `session/prompt`;
//! `AGENTOS_FAKE_AGENT_SETUP_LOG=FILE` one `{pid, setup: <method>, params}`
//! per `session/new`, `session/load` and `session/resume` (so tests see the
//! `mcpServers` it was handed).
//!
//! The command is the last text block of the prompt:
//! - `echo <text>` (and any unrecognised text): one `agent_message_chunk`
//!   with `<text>` (the whole text when unrecognised), then `end_turn`.
//! - `stream <n>`: n chunks "c0 ", "c1 ", … sharing one `messageId`.
//! - `thought <text>`: an `agent_thought_chunk`, then a message chunk.
//! - `tools`: `tool_call` (pending), `tool_call_update` (in_progress),
//!   `tool_call_update` (completed, text content), a chunk.
//! - `plan`: two `plan` updates, the second completing an entry.
//! - `permission`: a `tool_call`, then `session/request_permission` with
//!   `allow` (allow_once), `allow-always` (allow_always), `reject`
//!   (reject_once); a selected option gives a `tool_call_update` (completed,
//!   or failed for reject) and a chunk "chose <optionId>"; a cancelled
//!   outcome ends the turn with `cancelled`.
//! - `wait_for_cancel`: a chunk "waiting", then `cancelled` once
//!   `session/cancel` arrives for the session.
//! - `exit_mid_turn`: a chunk, then exit code 3 without answering.
//! - `garbage`: a non-JSON stdout line, then a chunk and `end_turn`.
//! - `oversize <bytes>`: one valid notification line of that many bytes.
//! - `never_answer`: no answer until `session/cancel`, then `cancelled`.
//! - `flood <n>`: n `tool_call_update`s (toolCallId "flood", ~200-byte
//!   distinct payloads) as fast as possible.
//! - `flood_chunks <n>`: n message chunks as fast as possible.
//! - `sleep <ms>`: waits, then a chunk "slept".
//! - `fail`: answers the prompt with error -32603.
//! - `fail_once TEXT`: fails so the first time in the process, then echoes TEXT.
//! - `bad_stop`: answers with the invalid stopReason "exploded".
//! - `fs_read <path>`: asks the client `fs/read_text_file` and echoes the
//!   content (or the error message).
//! - `fs_write <path> <content>`: asks `fs/write_text_file`, echoes "wrote"
//!   (or the error message).
//! - `inspect`: a chunk holding the JSON of the whole prompt array.
//! - `client_request <method>`: sends the client `<method>` with
//!   `{sessionId}` and echoes `ok <result>` or `error <code>: <message>`.
//!
//! Probes of what the agent process itself can reach (the confinement
//! tests play a hostile agent with them):
//! - `env`: a chunk holding the JSON object of its environment.
//! - `cwd`: a chunk holding its working directory.
//! - `background`: starts `sleep 1000` in the background (not waited for)
//!   and answers a chunk "background <pid>".
//! - `host_read <path>`: reads a host file directly; a chunk with its content
//!   or "error: <reason>".
//! - `host_write <path> <content>`: writes a host file directly; "wrote" or
//!   "error: <reason>".
//! - `host_connect <path>`: connects to a Unix socket; "connected" or
//!   "error: <reason>".
//!
//! Hostile modes (the memory-bound tests):
//! - `fs_flood <n> <path>`: stops reading stdin, then sends n
//!   `fs/read_text_file` requests for `path` without waiting for answers,
//!   and never answers the prompt.
//! - `stderr_flood <mib>`: writes that many MiB of 1000-byte stderr lines,
//!   then a chunk "flooded" and `end_turn`.
//! - `deep <depth>`: a `tool_call` whose `rawInput` nests `depth` arrays,
//!   then a chunk and `end_turn`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::{self, OpenOptions};
use std::io::{self, BufRead, BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use agentos_protocol::acp::{self, error_codes, methods, AcpMessage, RpcError};
use serde_json::{json, Value};

const MODE_VALUES: [(&str, &str); 2] = [("fast", "Fast"), ("careful", "Careful")];

#[derive(Default)]
struct Flags {
    load_session: bool,
    resume: bool,
    state_dir: Option<PathBuf>,
    restore_error: bool,
    unknown_session_error: Option<UnknownSessionForm>,
    resume_replays: bool,
    agent_name: String,
    /// `promptCapabilities` to advertise (`image`, `embeddedContext`).
    prompt_capabilities: Vec<String>,
}

/// How an agent says it does not know a session.
#[derive(Clone, Copy)]
enum UnknownSessionForm {
    /// The standard -32002 "Resource not found".
    ResourceNotFound,
    /// A generic -32603 whose `data.details` is "NotFoundError".
    NotFoundError,
}

impl UnknownSessionForm {
    fn error(self, session_id: &str) -> RpcError {
        match self {
            UnknownSessionForm::ResourceNotFound => not_found(session_id),
            UnknownSessionForm::NotFoundError => {
                RpcError::internal("Internal error").with_data(json!({"details": "NotFoundError"}))
            }
        }
    }
}

fn parse_flags() -> Result<Flags, String> {
    let mut flags = Flags {
        agent_name: "agentos-fake-agent".to_owned(),
        ..Flags::default()
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--load-session" => flags.load_session = true,
            "--resume" => flags.resume = true,
            "--restore-error" => flags.restore_error = true,
            "--resume-replays" => flags.resume_replays = true,
            "--unknown-session-error" => {
                let form = args.next().ok_or("--unknown-session-error needs a form")?;
                flags.unknown_session_error = Some(match form.as_str() {
                    "resource-not-found" => UnknownSessionForm::ResourceNotFound,
                    "not-found-error" => UnknownSessionForm::NotFoundError,
                    other => return Err(format!("unknown --unknown-session-error form {other}")),
                });
            }
            "--state-dir" => {
                let dir = args.next().ok_or("--state-dir needs a directory")?;
                flags.state_dir = Some(PathBuf::from(dir));
            }
            "--agent-name" => flags.agent_name = args.next().ok_or("--agent-name needs a name")?,
            "--prompt-capabilities" => {
                let list = args.next().ok_or("--prompt-capabilities needs a list")?;
                flags.prompt_capabilities = list.split(',').map(str::to_owned).collect();
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(flags)
}

/// Per-session cancel signal: set by `session/cancel`, cleared when a new
/// prompt starts.
#[derive(Default)]
struct CancelSignal {
    cancelled: Mutex<bool>,
    changed: Condvar,
}

impl CancelSignal {
    fn reset(&self) {
        *relock(&self.cancelled) = false;
    }

    fn cancel(&self) {
        *relock(&self.cancelled) = true;
        self.changed.notify_all();
    }

    fn is_cancelled(&self) -> bool {
        *relock(&self.cancelled)
    }

    fn wait(&self) {
        let mut cancelled = relock(&self.cancelled);
        while !*cancelled {
            cancelled = self
                .changed
                .wait(cancelled)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }
}

struct Session {
    mode: String,
    cancel: Arc<CancelSignal>,
    /// Updates kept for `session/load` replay when there is no state dir.
    updates: Vec<String>,
}

struct Agent {
    flags: Flags,
    out: Mutex<BufWriter<io::Stdout>>,
    sessions: Mutex<HashMap<String, Session>>,
    next_request_id: AtomicU64,
    waiting: Mutex<HashMap<u64, mpsc::Sender<Result<Value, RpcError>>>>,
    prompt_log: Option<Mutex<fs::File>>,
    setup_log: Option<Mutex<fs::File>>,
    /// Set by `fs_flood`: the main loop stops reading stdin for good.
    deaf: AtomicBool,
}

fn relock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Agent {
    /// Writes lines and flushes once, so a burst reaches the client together.
    fn write_lines<I: IntoIterator<Item = String>>(&self, lines: I) {
        let mut out = relock(&self.out);
        for line in lines {
            if out.write_all(line.as_bytes()).is_err() {
                return;
            }
        }
        let _ = out.flush();
    }

    fn write(&self, line: String) {
        self.write_lines([line]);
    }

    fn respond(&self, id: &Value, result: Result<Value, RpcError>) {
        self.write(acp::encode_response(id, &result));
    }

    fn session_file(&self, session_id: &str) -> Option<PathBuf> {
        let dir = self.flags.state_dir.as_ref()?;
        // Session ids are our own hex strings; anything else cannot name a
        // stored session and must not escape the directory.
        if session_id.is_empty() || !session_id.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return None;
        }
        Some(dir.join(format!("{session_id}.jsonl")))
    }

    /// Records an update for replay (only needed when load is advertised).
    fn record(&self, session_id: &str, update_line: &str) {
        if !self.keeps_updates() {
            return;
        }
        if let Some(path) = self.session_file(session_id) {
            if let Ok(mut file) = OpenOptions::new().append(true).open(path) {
                let _ = writeln!(file, "{update_line}");
            }
        } else if let Some(session) = relock(&self.sessions).get_mut(session_id) {
            session.updates.push(update_line.to_owned());
        }
    }

    /// Whether updates are kept for a replay (`session/load`, or a resume
    /// that replays).
    fn keeps_updates(&self) -> bool {
        self.flags.load_session || self.flags.resume_replays
    }

    fn update_line(&self, session_id: &str, update: &Value) -> String {
        let line = acp::encode_notification(
            methods::SESSION_UPDATE,
            &json!({"sessionId": session_id, "update": update}),
        );
        if self.keeps_updates() {
            self.record(session_id, &update.to_string());
        }
        line
    }

    fn send_update(&self, session_id: &str, update: Value) {
        let line = self.update_line(session_id, &update);
        self.write(line);
    }

    fn chunk(&self, session_id: &str, text: &str) {
        self.send_update(
            session_id,
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}),
        );
    }

    /// Sends a request to the client and blocks this prompt's thread until
    /// the main loop routes the answer back.
    fn call_client(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let id = self.next_request_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        relock(&self.waiting).insert(id, tx);
        self.write(acp::encode_request_u64(id, method, &params));
        rx.recv()
            .unwrap_or_else(|_| Err(RpcError::internal("client went away")))
    }

    fn config_options(mode: &str) -> Value {
        let options: Vec<Value> = MODE_VALUES
            .iter()
            .map(|(value, name)| json!({"value": value, "name": name}))
            .collect();
        json!([{
            "id": "mode",
            "name": "Mode",
            "category": "mode",
            "type": "select",
            "currentValue": mode,
            "options": options,
        }])
    }

    fn initialize(&self) -> Result<Value, RpcError> {
        let mut caps = json!({"loadSession": self.flags.load_session});
        if self.flags.resume {
            caps["sessionCapabilities"] = json!({"resume": {}});
        }
        for name in &self.flags.prompt_capabilities {
            caps["promptCapabilities"][name] = json!(true);
        }
        Ok(json!({
            "protocolVersion": acp::PROTOCOL_VERSION,
            "agentCapabilities": caps,
            "agentInfo": {"name": self.flags.agent_name, "version": env!("CARGO_PKG_VERSION")},
            "authMethods": [],
        }))
    }

    fn new_session(&self) -> Result<Value, RpcError> {
        let session_id = uuid::Uuid::new_v4().simple().to_string();
        if let Some(path) = self.session_file(&session_id) {
            fs::write(&path, "")
                .map_err(|e| RpcError::internal(format!("cannot store session: {e}")))?;
        }
        relock(&self.sessions).insert(
            session_id.clone(),
            Session {
                mode: "fast".to_owned(),
                cancel: Arc::default(),
                updates: Vec::new(),
            },
        );
        Ok(json!({"sessionId": session_id, "configOptions": Self::config_options("fast")}))
    }

    fn set_config_option(&self, params: &Value) -> Result<Value, RpcError> {
        let session_id = str_param(params, "sessionId")?;
        let config_id = str_param(params, "configId")?;
        let value = str_param(params, "value")?;
        if config_id != "mode" {
            return Err(RpcError::invalid_params(format!(
                "unknown config option {config_id}"
            )));
        }
        if !MODE_VALUES.iter().any(|(known, _)| *known == value) {
            return Err(RpcError::invalid_params(format!("unknown mode {value}")));
        }
        let mut sessions = relock(&self.sessions);
        let session = sessions
            .get_mut(session_id)
            .ok_or_else(|| not_found(session_id))?;
        session.mode = value.to_owned();
        Ok(json!({"configOptions": Self::config_options(value)}))
    }

    /// `session/load` (with replay) and `session/resume` (without).
    fn restore(&self, params: &Value, replay: bool) -> Result<Value, RpcError> {
        if self.flags.restore_error {
            return Err(RpcError::internal("Internal error")
                .with_data(json!({"details": "simulated restore failure"})));
        }
        let session_id = str_param(params, "sessionId")?;
        if let Some(form) = self.flags.unknown_session_error {
            return Err(form.error(session_id));
        }
        let stored = match self.session_file(session_id) {
            Some(path) => match fs::read_to_string(&path) {
                Ok(text) => Some(text.lines().map(str::to_owned).collect::<Vec<_>>()),
                Err(_) => None,
            },
            None => relock(&self.sessions)
                .get(session_id)
                .map(|session| session.updates.clone()),
        };
        let Some(updates) = stored else {
            return Err(not_found(session_id));
        };
        let mode = {
            let mut sessions = relock(&self.sessions);
            let session = sessions
                .entry(session_id.to_owned())
                .or_insert_with(|| Session {
                    mode: "fast".to_owned(),
                    cancel: Arc::default(),
                    updates: Vec::new(),
                });
            session.mode.clone()
        };
        if replay {
            let lines = updates.iter().filter_map(|raw| {
                let update: Value = serde_json::from_str(raw).ok()?;
                Some(acp::encode_notification(
                    methods::SESSION_UPDATE,
                    &json!({"sessionId": session_id, "update": update}),
                ))
            });
            self.write_lines(lines);
        }
        Ok(json!({"configOptions": Self::config_options(&mode)}))
    }

    fn cancel(&self, params: &Value) {
        let Some(session_id) = params.get("sessionId").and_then(Value::as_str) else {
            return;
        };
        if let Some(session) = relock(&self.sessions).get(session_id) {
            session.cancel.cancel();
        }
    }

    fn log_prompt(&self, session_id: &str, prompt: &Value) {
        let line = json!({"pid": std::process::id(), "sessionId": session_id, "prompt": prompt});
        Self::log_line(self.prompt_log.as_ref(), line);
    }

    fn log_setup(&self, method: &str, params: &Value) {
        let line = json!({"pid": std::process::id(), "setup": method, "params": params});
        Self::log_line(self.setup_log.as_ref(), line);
    }

    fn log_line(log: Option<&Mutex<fs::File>>, line: Value) {
        if let Some(log) = log {
            // One write per line: several adapter processes append to the
            // same file, and `writeln!` on a `File` may issue a write per
            // formatted piece, interleaving lines.
            let mut bytes = line.to_string().into_bytes();
            bytes.push(b'\n');
            let _ = relock(log).write_all(&bytes);
        }
    }

    /// Validates a prompt on the main thread (so a cancel that follows it is
    /// never lost), then runs it on its own thread.
    fn start_prompt(self: &Arc<Self>, id: Value, params: Value) {
        let session_id = match str_param(&params, "sessionId") {
            Ok(session_id) => session_id.to_owned(),
            Err(error) => return self.respond(&id, Err(error)),
        };
        let Some(prompt) = params.get("prompt").and_then(Value::as_array).cloned() else {
            return self.respond(
                &id,
                Err(RpcError::invalid_params("prompt must be an array")),
            );
        };
        let cancel = match relock(&self.sessions).get(&session_id) {
            Some(session) => session.cancel.clone(),
            None => return self.respond(&id, Err(not_found(&session_id))),
        };
        cancel.reset();
        self.log_prompt(&session_id, &Value::Array(prompt.clone()));
        for block in &prompt {
            self.record(
                &session_id,
                &json!({"sessionUpdate": "user_message_chunk", "content": block}).to_string(),
            );
        }
        let agent = self.clone();
        thread::spawn(move || {
            if let Some(result) = agent.run_prompt(&session_id, &prompt, &cancel) {
                agent.respond(&id, result);
            }
        });
    }

    /// Runs one scripted turn; `None` means the prompt is never answered.
    fn run_prompt(
        &self,
        session_id: &str,
        prompt: &[Value],
        cancel: &CancelSignal,
    ) -> Option<Result<Value, RpcError>> {
        let text = prompt
            .iter()
            .rev()
            .find(|block| block.get("type").and_then(Value::as_str) == Some("text"))
            .and_then(|block| block.get("text"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .trim();
        let (command, rest) = text.split_once(' ').unwrap_or((text, ""));
        let count = || rest.trim().parse::<u64>().unwrap_or(0);
        let end_turn = Some(Ok(json!({"stopReason": "end_turn"})));
        let cancelled = Some(Ok(json!({"stopReason": "cancelled"})));
        match command {
            "echo" => self.chunk(session_id, rest),
            "stream" => {
                let message_id = uuid::Uuid::new_v4().to_string();
                for i in 0..count() {
                    self.send_update(
                        session_id,
                        json!({
                            "sessionUpdate": "agent_message_chunk",
                            "messageId": message_id,
                            "content": {"type": "text", "text": format!("c{i} ")},
                        }),
                    );
                }
            }
            "thought" => {
                self.send_update(
                    session_id,
                    json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": rest}}),
                );
                self.chunk(session_id, rest);
            }
            "tools" => self.tools(session_id),
            "plan" => self.plan(session_id),
            "permission" => return Some(self.permission(session_id)),
            "wait_for_cancel" => {
                self.chunk(session_id, "waiting");
                cancel.wait();
                return cancelled;
            }
            "never_answer" => {
                cancel.wait();
                return cancelled;
            }
            "exit_mid_turn" => {
                self.chunk(session_id, "about to exit");
                std::process::exit(3);
            }
            "garbage" => {
                self.write("this is {not json\n".to_owned());
                self.chunk(session_id, "after garbage");
            }
            "oversize" => self.oversize(session_id, count()),
            "flood" => self.flood(session_id, count(), true),
            "interleave" => {
                // A stored update, then a live chunk of a message of its
                // own, `count` times: live updates between commits.
                for i in 0..count() {
                    self.send_update(
                        session_id,
                        json!({
                            "sessionUpdate": "tool_call_update",
                            "toolCallId": "interleave",
                            "status": "in_progress",
                            "content": [{"type": "content", "content": {"type": "text", "text": format!("t{i}")}}],
                        }),
                    );
                    self.send_update(
                        session_id,
                        json!({
                            "sessionUpdate": "agent_message_chunk",
                            "messageId": format!("m{i}"),
                            "content": {"type": "text", "text": format!("c{i}")},
                        }),
                    );
                }
            }
            "flood_chunks" => self.flood(session_id, count(), false),
            "sleep" => {
                thread::sleep(Duration::from_millis(count()));
                if cancel.is_cancelled() {
                    return cancelled;
                }
                self.chunk(session_id, "slept");
            }
            "fail" => {
                return Some(Err(RpcError::internal("Internal error")
                    .with_data(json!({"details": "scripted failure"}))))
            }
            // Fails the first time in this process, then echoes the rest:
            // what a retry of the same input meets after a transient error.
            "fail_once" => {
                static FAILED: AtomicBool = AtomicBool::new(false);
                if !FAILED.swap(true, Ordering::SeqCst) {
                    return Some(Err(RpcError::internal("Internal error")
                        .with_data(json!({"details": "scripted transient failure"}))));
                }
                self.chunk(session_id, rest);
            }
            "bad_stop" => return Some(Ok(json!({"stopReason": "exploded"}))),
            "fs_read" => {
                let path = rest.trim();
                let answer = self.call_client(
                    methods::FS_READ_TEXT_FILE,
                    json!({"sessionId": session_id, "path": path}),
                );
                let text = match answer {
                    Ok(result) => result
                        .get("content")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                    Err(error) => error.message,
                };
                self.chunk(session_id, &text);
            }
            "fs_write" => {
                let (path, content) = rest.split_once(' ').unwrap_or((rest, ""));
                let answer = self.call_client(
                    methods::FS_WRITE_TEXT_FILE,
                    json!({"sessionId": session_id, "path": path, "content": content}),
                );
                match answer {
                    Ok(_) => self.chunk(session_id, "wrote"),
                    Err(error) => self.chunk(session_id, &error.message),
                }
            }
            "env" => {
                let vars: serde_json::Map<String, Value> = std::env::vars_os()
                    .map(|(k, v)| {
                        (
                            k.to_string_lossy().into_owned(),
                            Value::String(v.to_string_lossy().into_owned()),
                        )
                    })
                    .collect();
                self.chunk(session_id, &Value::Object(vars).to_string());
            }
            "cwd" => {
                let cwd = std::env::current_dir()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|e| format!("error: {e}"));
                self.chunk(session_id, &cwd);
            }
            "background" => {
                let started = std::process::Command::new("sleep")
                    .arg("1000")
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn();
                let text = match started {
                    // Deliberately never waited for: it must not outlive us.
                    Ok(child) => format!("background {}", child.id()),
                    Err(e) => format!("error: {e}"),
                };
                self.chunk(session_id, &text);
            }
            "host_read" => {
                let text =
                    fs::read_to_string(rest.trim()).unwrap_or_else(|e| format!("error: {e}"));
                self.chunk(session_id, &text);
            }
            "host_write" => {
                let (path, content) = rest.split_once(' ').unwrap_or((rest, ""));
                let text = match fs::write(path, content) {
                    Ok(()) => "wrote".to_owned(),
                    Err(e) => format!("error: {e}"),
                };
                self.chunk(session_id, &text);
            }
            "host_connect" => {
                let text = match std::os::unix::net::UnixStream::connect(rest.trim()) {
                    Ok(_) => "connected".to_owned(),
                    Err(e) => format!("error: {e}"),
                };
                self.chunk(session_id, &text);
            }
            "inspect" => {
                self.chunk(session_id, &Value::Array(prompt.to_vec()).to_string());
            }
            "client_request" => {
                let answer = self.call_client(rest.trim(), json!({"sessionId": session_id}));
                let text = match answer {
                    Ok(result) => format!("ok {result}"),
                    Err(error) => format!("error {}: {}", error.code, error.message),
                };
                self.chunk(session_id, &text);
            }
            "fs_flood" => {
                let (n, path) = rest.trim().split_once(' ').unwrap_or((rest, ""));
                let n = n.parse::<u64>().unwrap_or(0);
                self.deaf.store(true, Ordering::SeqCst);
                let mut out = relock(&self.out);
                for _ in 0..n {
                    let id = self.next_request_id.fetch_add(1, Ordering::Relaxed);
                    let line = acp::encode_request_u64(
                        id,
                        methods::FS_READ_TEXT_FILE,
                        &json!({"sessionId": session_id, "path": path}),
                    );
                    if out.write_all(line.as_bytes()).is_err() {
                        break;
                    }
                }
                let _ = out.flush();
                return None;
            }
            "stderr_flood" => {
                let line = format!("{}\n", "e".repeat(999));
                let mut err = io::stderr().lock();
                for _ in 0..count() * 1024 * 1024 / 1000 {
                    if err.write_all(line.as_bytes()).is_err() {
                        break;
                    }
                }
                let _ = err.flush();
                self.chunk(session_id, "flooded");
            }
            "deep" => {
                let depth = count() as usize;
                let raw = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
                let line = format!(
                    r#"{{"jsonrpc":"2.0","method":"{}","params":{{"sessionId":{},"update":{{"sessionUpdate":"tool_call","toolCallId":"deep","title":"deep","rawInput":{raw}}}}}}}"#,
                    methods::SESSION_UPDATE,
                    Value::from(session_id)
                );
                self.write(format!("{line}\n"));
                self.chunk(session_id, "after deep");
            }
            _ => self.chunk(session_id, text),
        }
        end_turn
    }

    fn tools(&self, session_id: &str) {
        self.send_update(
            session_id,
            json!({"sessionUpdate": "tool_call", "toolCallId": "call_1", "title": "Reading notes",
                   "kind": "read", "status": "pending", "locations": [{"path": "/notes.md"}],
                   "rawInput": {"path": "/notes.md"}}),
        );
        self.send_update(
            session_id,
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "status": "in_progress"}),
        );
        self.send_update(
            session_id,
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "status": "completed",
                   "content": [{"type": "content", "content": {"type": "text", "text": "notes read"}}]}),
        );
        self.chunk(session_id, "tools done");
    }

    fn plan(&self, session_id: &str) {
        let plan = |first: &str| {
            json!({"sessionUpdate": "plan", "entries": [
                {"content": "Look around", "priority": "high", "status": first},
                {"content": "Report back", "priority": "medium", "status": "pending"},
            ]})
        };
        self.send_update(session_id, plan("in_progress"));
        self.send_update(session_id, plan("completed"));
    }

    fn permission(&self, session_id: &str) -> Result<Value, RpcError> {
        let tool_call = json!({"toolCallId": "perm_1", "title": "Editing settings", "kind": "edit",
                               "status": "pending", "locations": [{"path": "/settings.json"}]});
        let mut announce = tool_call.clone();
        announce["sessionUpdate"] = json!("tool_call");
        self.send_update(session_id, announce);
        let answer = self.call_client(
            methods::SESSION_REQUEST_PERMISSION,
            json!({
                "sessionId": session_id,
                "toolCall": tool_call,
                "options": [
                    {"optionId": "allow", "name": "Allow once", "kind": "allow_once"},
                    {"optionId": "allow-always", "name": "Always allow", "kind": "allow_always"},
                    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
                ],
            }),
        )?;
        let outcome = answer.get("outcome").cloned().unwrap_or(Value::Null);
        match outcome.get("outcome").and_then(Value::as_str) {
            Some("cancelled") => Ok(json!({"stopReason": "cancelled"})),
            Some("selected") => {
                let option = outcome
                    .get("optionId")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let status = match option {
                    "allow" | "allow-always" => "completed",
                    "reject" => "failed",
                    other => {
                        return Err(RpcError::invalid_params(format!(
                            "unknown permission option {other}"
                        )))
                    }
                };
                self.send_update(
                    session_id,
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": "perm_1", "status": status}),
                );
                self.chunk(session_id, &format!("chose {option}"));
                Ok(json!({"stopReason": "end_turn"}))
            }
            _ => Err(RpcError::invalid_params("malformed permission outcome")),
        }
    }

    fn oversize(&self, session_id: &str, bytes: u64) {
        let empty = acp::encode_notification(
            methods::SESSION_UPDATE,
            &json!({"sessionId": session_id, "update": {"sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": ""}}}),
        );
        // `bytes` counts the whole line without its newline.
        let pad = usize::try_from(bytes)
            .unwrap_or(usize::MAX)
            .saturating_sub(empty.len() - 1);
        let text = "x".repeat(pad);
        self.send_update(
            session_id,
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}),
        );
    }

    /// Formats lines directly instead of building `Value`s: the payload is
    /// plain ASCII that needs no escaping, and this path must push 100,000
    /// updates through the pipe quickly.
    fn flood(&self, session_id: &str, n: u64, tool_updates: bool) {
        let filler = "f".repeat(160);
        let sid = Value::from(session_id).to_string();
        let mut out = relock(&self.out);
        let mut update = String::with_capacity(512);
        let mut line = String::with_capacity(512);
        for i in 0..n {
            update.clear();
            if tool_updates {
                let _ = write!(
                    update,
                    r#"{{"sessionUpdate":"tool_call_update","toolCallId":"flood","status":"in_progress","content":[{{"type":"content","content":{{"type":"text","text":"{i:08} {filler}"}}}}]}}"#
                );
            } else {
                let _ = write!(
                    update,
                    r#"{{"sessionUpdate":"agent_message_chunk","content":{{"type":"text","text":"{i} "}}}}"#
                );
            }
            line.clear();
            let _ = writeln!(
                line,
                r#"{{"jsonrpc":"2.0","method":"{method}","params":{{"sessionId":{sid},"update":{update}}}}}"#,
                method = methods::SESSION_UPDATE,
            );
            self.record(session_id, &update);
            if out.write_all(line.as_bytes()).is_err() {
                return;
            }
        }
        let _ = out.flush();
    }

    fn handle_line(self: &Arc<Self>, line: &[u8]) {
        let message = match acp::decode_line(line) {
            Ok(message) => message,
            Err(error) => {
                return self.respond(&Value::Null, Err(RpcError::parse_error(error.to_string())));
            }
        };
        match message {
            AcpMessage::Response { id, result } => {
                let waiter = id.as_u64().and_then(|id| relock(&self.waiting).remove(&id));
                if let Some(waiter) = waiter {
                    let _ = waiter.send(result);
                }
            }
            AcpMessage::Notification { method, params } => {
                if method == methods::SESSION_CANCEL {
                    self.cancel(&params);
                }
            }
            AcpMessage::Request { id, method, params } => {
                if matches!(
                    method.as_str(),
                    methods::SESSION_NEW | methods::SESSION_LOAD | methods::SESSION_RESUME
                ) {
                    self.log_setup(&method, &params);
                }
                let result = match method.as_str() {
                    methods::INITIALIZE => self.initialize(),
                    methods::SESSION_NEW => self.new_session(),
                    methods::SESSION_SET_CONFIG_OPTION => self.set_config_option(&params),
                    methods::SESSION_LOAD if self.flags.load_session => self.restore(&params, true),
                    methods::SESSION_RESUME if self.flags.resume => {
                        self.restore(&params, self.flags.resume_replays)
                    }
                    methods::SESSION_PROMPT => return self.start_prompt(id, params),
                    _ => Err(RpcError::method_not_found(&method)),
                };
                self.respond(&id, result);
            }
        }
    }
}

fn str_param<'a>(params: &'a Value, key: &str) -> Result<&'a str, RpcError> {
    params
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params(format!("missing string parameter {key}")))
}

fn not_found(session_id: &str) -> RpcError {
    RpcError::new(error_codes::RESOURCE_NOT_FOUND, "Resource not found")
        .with_data(json!({"sessionId": session_id}))
}

fn main() {
    let flags = match parse_flags() {
        Ok(flags) => flags,
        Err(message) => {
            eprintln!("agentos-fake-agent: {message}");
            std::process::exit(2);
        }
    };
    if let Some(dir) = &flags.state_dir {
        if let Err(error) = fs::create_dir_all(dir) {
            eprintln!("agentos-fake-agent: cannot create state dir: {error}");
            std::process::exit(2);
        }
    }
    let open_log = |variable: &str| {
        std::env::var_os(variable).and_then(|path| {
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map(Mutex::new)
                .ok()
        })
    };
    let prompt_log = open_log("AGENTOS_FAKE_AGENT_LOG");
    let setup_log = open_log("AGENTOS_FAKE_AGENT_SETUP_LOG");
    let agent = Arc::new(Agent {
        flags,
        out: Mutex::new(BufWriter::with_capacity(64 * 1024, io::stdout())),
        sessions: Mutex::new(HashMap::new()),
        next_request_id: AtomicU64::new(0),
        waiting: Mutex::new(HashMap::new()),
        prompt_log,
        setup_log,
        deaf: AtomicBool::new(false),
    });
    let stdin = io::stdin();
    let mut input = stdin.lock();
    let mut line = Vec::new();
    loop {
        if agent.deaf.load(Ordering::SeqCst) {
            // A hostile agent: never read stdin again (the client's writes
            // back up), but stay alive until killed.
            loop {
                thread::park();
            }
        }
        line.clear();
        match input.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => {
                let trimmed = line.trim_ascii();
                if !trimmed.is_empty() {
                    agent.handle_line(trimmed);
                }
            }
            Err(error) => {
                eprintln!("agentos-fake-agent: stdin: {error}");
                break;
            }
        }
    }
    let _ = relock(&agent.out).flush();
    std::process::exit(0);
}
