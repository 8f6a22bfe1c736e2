//! The sidecar's side of the builtin model agent: how it is started (this
//! same binary, `agentos-sidecar agent`, as any adapter is, confined the
//! same way), the answers to its `_agentos/*` requests (`host.rs`: the turn's
//! context, the provider key at call time, the verbs; what a session
//! resolves to is `resolved.rs`), the conversation
//! rebuilt from the log (`transcript.rs`) and kept between turns
//! (`conversations.rs`), the system prompt (`prompt.rs`)
//! with its `<space>` index (`index.rs`), the verbs shared by the agent and
//! the user (`verbs/`), what a script's `ctx.call` reaches
//! (`script_tools.rs`), bounded web reads (`fetch.rs`), and sessions named
//! after their first turn (`titles.rs`).

pub mod conversations;
pub mod download;
pub mod fetch;
pub mod host;
pub mod index;
pub mod oauth;
pub mod prompt;
pub mod resolved;
pub mod script_tools;
pub mod titles;
pub mod transcript;
pub mod verbs;

use std::sync::Arc;

use crate::config::{AgentSpec, SandboxSpec};

/// How the builtin agent is started: this executable with `agent`.
pub fn agent_spec() -> std::io::Result<AgentSpec> {
    let exe = std::env::current_exe()?;
    Ok(AgentSpec {
        command: exe.display().to_string(),
        args: vec!["agent".to_owned()],
        env: Default::default(),
        sandbox: SandboxSpec::default(),
    })
}

/// What the signed door needs of the builtin agent: the host (sessions'
/// agents and providers) and the verbs a user runs (`InvokeSessionTool`).
#[derive(Clone)]
pub struct Services {
    pub host: Arc<host::Host>,
    pub verbs: verbs::Verbs,
    /// Subscription sign-ins and their credentials.
    pub oauth: Arc<oauth::OAuth>,
}
