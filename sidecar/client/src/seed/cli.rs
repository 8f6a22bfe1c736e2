//! The signed-API commands (`keys new`, `call`, `subscribe`) behind the
//! command line: `main.rs` parses the arguments into these options, and
//! everything they do is here, so it can be tested without a process.
//!
//! Output is JSON on standard output, one value per line, for scripts: a
//! result, or `{"error": {"code", "message"}}` when no answer was had. The
//! exit status is 0 only for a 2xx answer (or a subscription that ended
//! normally).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use agentos_protocol::seed::Principal;
use serde_json::{json, Value};

use super::{dag_json, ClientError, Identity, SeedClient, Transport};

/// Largest `--json -` read from standard input.
const MAX_STDIN_JSON_BYTES: u64 = 64 * 1024 * 1024;

/// Where the signed API is: `--url` or `--socket`.
#[derive(Clone, Debug)]
pub enum Target {
    Url(String),
    Socket(PathBuf),
}

/// `call ACTION`.
#[derive(Clone, Debug)]
pub struct CallOptions {
    pub action: String,
    pub key_file: PathBuf,
    pub target: Target,
    pub account: Option<String>,
    /// The action's fields as a JSON object; `-` reads it from standard
    /// input; absent means none.
    pub json: Option<String>,
}

/// `subscribe KEY`.
#[derive(Clone, Debug)]
pub struct SubscribeOptions {
    pub key: String,
    pub key_file: PathBuf,
    pub url: String,
    pub account: Option<String>,
    pub after_seq: Option<u64>,
    /// Stop after this many events.
    pub count: Option<u64>,
}

/// `keys new --out FILE`: `{"principal", "path"}`.
pub fn keys_new(out: &Path) -> Result<Value, ClientError> {
    let identity = Identity::generate();
    identity.save(out)?;
    Ok(json!({
        "principal": identity.principal().to_string(),
        "path": out.display().to_string(),
    }))
}

/// `call`: `{"status", "response"}` and whether the status was 2xx.
pub async fn call(options: &CallOptions) -> Result<(Value, bool), ClientError> {
    let fields = match options.json.as_deref() {
        None => Value::Null,
        Some("-") => {
            let mut text = String::new();
            std::io::stdin()
                .take(MAX_STDIN_JSON_BYTES)
                .read_to_string(&mut text)
                .map_err(|e| ClientError::io("cannot read standard input", e))?;
            parse_json(&text)?
        }
        Some(text) => parse_json(text)?,
    };
    let transport = match &options.target {
        Target::Url(url) => Transport::from_url(url)?,
        Target::Socket(path) => Transport::HostSocket { path: path.clone() },
    };
    let client = client(transport, &options.key_file, options.account.as_deref())?;
    let reply = client.call_json(&options.action, &fields).await?;
    let output = json!({
        "status": reply.status,
        "response": dag_json::ipld_to_json(&reply.body)?,
    });
    Ok((output, reply.is_success()))
}

/// `subscribe`: writes each event as a JSON line to `out`. Ends when the
/// server closes the socket, after `count` events, or at an `error` event
/// (the subscription was refused or broke), which is an error.
pub async fn subscribe(
    options: &SubscribeOptions,
    out: &mut impl Write,
) -> Result<(), ClientError> {
    let transport = Transport::from_url(&options.url)?;
    let client = client(transport, &options.key_file, options.account.as_deref())?;
    let mut subscription = client.subscribe(&options.key, options.after_seq).await?;
    let mut seen = 0u64;
    while options.count.is_none_or(|count| seen < count) {
        let Some(event) = subscription.next_event().await? else {
            return Ok(());
        };
        seen += 1;
        writeln!(out, "{event}")
            .and_then(|()| out.flush())
            .map_err(|e| ClientError::io("cannot write standard output", e))?;
        if event.get("_").and_then(Value::as_str) == Some("error") {
            let message = event
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("the server reported an error");
            return Err(ClientError::Server {
                code: event.get("code").and_then(Value::as_str).map(str::to_owned),
                message: message.to_string(),
            });
        }
    }
    subscription.close().await
}

/// The JSON line printed when a command fails before it has an answer.
pub fn error_json(error: &ClientError) -> Value {
    json!({"error": {"code": error.code(), "message": error.to_string()}})
}

fn parse_json(text: &str) -> Result<Value, ClientError> {
    serde_json::from_str(text).map_err(|e| ClientError::InvalidJson(e.to_string()))
}

fn client(
    transport: Transport,
    key_file: &Path,
    account: Option<&str>,
) -> Result<SeedClient, ClientError> {
    let identity = Identity::load(key_file)?;
    let account = account
        .map(|text| {
            text.parse::<Principal>()
                .map_err(|e| ClientError::InvalidArgument(format!("--account: {e}")))
        })
        .transpose()?;
    Ok(SeedClient::new(transport, identity, account))
}
