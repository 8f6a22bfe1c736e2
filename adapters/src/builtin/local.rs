//! The builtin agent under a plain ACP client (an editor, the example
//! client) rather than the sidecar: its provider comes from the command
//! line, the key from a file read at each call (never argv or the
//! environment), the conversation is kept in memory, and its only tools are
//! `read` and `write` on the client's files through ACP `fs/*`, offered
//! only when the client says it serves them.

use std::path::{Path, PathBuf};

use agentos_protocol::acp::methods;
use agentos_protocol::agent_ext::VerbResult;
use serde_json::{json, Value};

use super::peer::Peer;
use super::provider::{ProviderKind, ToolCall, ToolSpec};

/// The longest key file read.
const MAX_KEY_FILE_BYTES: u64 = 64 * 1024;

/// What `agentos-sidecar agent` was started with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalConfig {
    /// Seed's provider `type` (`openai`, `anthropic`, `google`, `custom`, …).
    pub provider_type: String,
    pub base_url: String,
    pub model: String,
    /// A file holding the API key; `None` for a local endpoint without one.
    pub key_file: Option<PathBuf>,
    pub instructions: String,
}

impl LocalConfig {
    /// The endpoint defaults to the provider type's own; a type without one
    /// (a custom endpoint) must name it.
    pub fn new(
        provider_type: &str,
        base_url: Option<String>,
        model: &str,
        key_file: Option<PathBuf>,
        instructions: Option<String>,
    ) -> Result<LocalConfig, String> {
        let base_url = match base_url {
            Some(url) => url,
            None => ProviderKind::from_type(provider_type)
                .default_base_url()
                .map(str::to_owned)
                .ok_or_else(|| {
                    format!(
                        "provider type {provider_type:?} has no default endpoint: pass --base-url"
                    )
                })?,
        };
        if model.is_empty() {
            return Err("--model must not be empty".into());
        }
        Ok(LocalConfig {
            provider_type: provider_type.to_owned(),
            base_url,
            model: model.to_owned(),
            key_file,
            instructions: instructions.unwrap_or_default(),
        })
    }

    pub(super) fn system_prompt(&self) -> String {
        let mut prompt = self.instructions.clone();
        if !prompt.is_empty() {
            prompt.push_str("\n\n");
        }
        prompt.push_str(
            "You are a helpful assistant running inside an editor. When tools are offered, \
             `read` reads a file and `write` writes one; addresses are paths, relative to the \
             session's working directory unless absolute.",
        );
        prompt
    }

    /// Reads the key file now, so a rotated key is used at the next call.
    pub(super) fn read_key(&self) -> Result<Option<String>, String> {
        let Some(path) = &self.key_file else {
            return Ok(None);
        };
        let size = std::fs::metadata(path)
            .map_err(|e| format!("cannot read the key file {}: {e}", path.display()))?
            .len();
        if size > MAX_KEY_FILE_BYTES {
            return Err(format!("the key file {} is too large", path.display()));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the key file {}: {e}", path.display()))?;
        Ok(Some(text.trim().to_owned()))
    }
}

/// The tools offered under a plain client, given whether it serves
/// `fs/read_text_file` and `fs/write_text_file`.
pub(super) fn tools((read, write): (bool, bool)) -> Vec<ToolSpec> {
    let mut tools = Vec::new();
    if read {
        tools.push(ToolSpec {
            name: "read".into(),
            description: "Reads a text file of the workspace.".into(),
            parameters: json!({
                "type": "object",
                "properties": {"address": {"type": "string", "description": "A file path."}},
                "required": ["address"],
            }),
        });
    }
    if write {
        tools.push(ToolSpec {
            name: "write".into(),
            description: "Writes a whole text file of the workspace.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "address": {"type": "string", "description": "A file path."},
                    "content": {"type": "string"},
                },
                "required": ["address", "content"],
            }),
        });
    }
    tools
}

fn resolve(cwd: Option<&Path>, address: &str) -> String {
    let path = Path::new(address);
    match cwd {
        Some(cwd) if !path.is_absolute() => cwd.join(path).display().to_string(),
        _ => address.to_owned(),
    }
}

fn error(message: String) -> VerbResult {
    VerbResult {
        output: Value::String(message),
        is_error: true,
        ends_turn: false,
        parked: false,
        images: Vec::new(),
    }
}

/// Runs `read` or `write` through the client's `fs/*`, relative paths
/// under `cwd`, the session's working directory.
pub(super) async fn run_verb(
    peer: &Peer,
    cwd: Option<&Path>,
    session: &str,
    call: &ToolCall,
) -> VerbResult {
    let Some(address) = call.arguments["address"].as_str() else {
        return error("`address` must be a string".into());
    };
    let path = resolve(cwd, address);
    let (method, params) = match call.name.as_str() {
        "read" => (
            methods::FS_READ_TEXT_FILE,
            json!({"sessionId": session, "path": path}),
        ),
        "write" => {
            let Some(content) = call.arguments["content"].as_str() else {
                return error("`content` must be a string".into());
            };
            (
                methods::FS_WRITE_TEXT_FILE,
                json!({"sessionId": session, "path": path, "content": content}),
            )
        }
        other => return error(format!("no tool named {other:?}")),
    };
    match peer.request(method, params).await {
        Ok(answer) if call.name == "read" => VerbResult {
            output: answer["content"].clone(),
            is_error: false,
            ends_turn: false,
            parked: false,
            images: Vec::new(),
        },
        Ok(_) => VerbResult {
            output: Value::String(format!("wrote {path}")),
            is_error: false,
            ends_turn: false,
            parked: false,
            images: Vec::new(),
        },
        Err(e) => error(format!("{method} failed: {}", e.message)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_custom_endpoint_must_be_named() {
        assert!(LocalConfig::new("custom", None, "m", None, None).is_err());
        let openai = LocalConfig::new("openai", None, "gpt", None, None).unwrap();
        assert!(openai.base_url.starts_with("https://"));
        assert!(LocalConfig::new("openai", None, "", None, None).is_err());
    }

    #[test]
    fn relative_addresses_live_in_the_session_directory() {
        assert_eq!(resolve(Some(Path::new("/w")), "a/b"), "/w/a/b");
        assert_eq!(resolve(Some(Path::new("/w")), "/x"), "/x");
        assert_eq!(resolve(None, "a"), "a");
    }

    #[test]
    fn the_key_file_is_read_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        std::fs::write(&file, "sk-test\n").unwrap();
        let config = LocalConfig::new("openai", None, "gpt", Some(file.clone()), None).unwrap();
        assert_eq!(config.read_key().unwrap().as_deref(), Some("sk-test"));
        std::fs::remove_file(&file).unwrap();
        assert!(config.read_key().is_err());
    }
}
