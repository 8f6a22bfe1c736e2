//! A client of the signed control plane (the Seed Agents API): it holds a
//! signing identity, signs each action into an envelope with the current
//! time, posts it as canonical DAG-CBOR, and decodes the DAG-CBOR answer;
//! over `/agents/ws` it subscribes with signed frames and reads the JSON
//! events. The `keys`, `call` and `subscribe` commands are built on it, and
//! tests use it to drive a real server. The wire forms come from
//! `agentos_protocol::seed`; this module only moves and signs them.

pub mod cli;
pub mod dag_json;
mod error;
mod identity;
mod transport;
mod ws;

use std::sync::Arc;

use agentos_protocol::seed::{cbor, Action, ActionMap, Envelope, Ipld, Principal};

pub use error::ClientError;
pub use identity::Identity;
pub use transport::Transport;
pub use ws::Subscription;

use self::transport::{RawRequest, RawResponse};

/// Where signed actions are posted.
pub const MESSAGE_PATH: &str = "/api/message";
/// Where the server's health is read.
pub const HEALTH_PATH: &str = "/api/health";
/// The WebSocket endpoint.
pub const WS_PATH: &str = "/agents/ws";
/// The content type of a signed action and of its answer.
pub const CBOR_CONTENT_TYPE: &str = "application/cbor";

/// Default bound on an answer's body. An answer can hold a session's whole
/// history, so it is larger than the server's bound on requests.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// What the server answered to a signed action: the HTTP status and the
/// decoded body, `{_: "<Action>Response", …}` or `{_: "Error", message,
/// code}`.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    pub status: u16,
    pub body: Ipld,
}

impl Reply {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body's `_`.
    pub fn kind(&self) -> Option<&str> {
        self.field_str("_")
    }

    /// `(code, message)` of an `{_: "Error"}` answer.
    pub fn error(&self) -> Option<(Option<&str>, &str)> {
        if self.kind() != Some("Error") {
            return None;
        }
        Some((
            self.field_str("code"),
            self.field_str("message").unwrap_or(""),
        ))
    }

    /// A string field of the body.
    pub fn field_str(&self, name: &str) -> Option<&str> {
        match &self.body {
            Ipld::Map(map) => match map.get(name) {
                Some(Ipld::String(text)) => Some(text),
                _ => None,
            },
            _ => None,
        }
    }
}

/// Signs as one identity for one account and sends over one transport.
#[derive(Clone, Debug)]
pub struct SeedClient {
    transport: Transport,
    identity: Arc<Identity>,
    account: Principal,
    protocol: Option<u64>,
    max_response_bytes: usize,
}

impl SeedClient {
    /// A client signing as `identity` for `account` (by default the
    /// identity's own account). Envelopes carry `protocol` =
    /// [`agentos_protocol::seed::PROTOCOL_VERSION`].
    pub fn new(transport: Transport, identity: Identity, account: Option<Principal>) -> SeedClient {
        let account = account.unwrap_or_else(|| identity.principal());
        SeedClient {
            transport,
            identity: Arc::new(identity),
            account,
            protocol: Some(agentos_protocol::seed::PROTOCOL_VERSION),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }

    /// The envelope's `protocol`; `None` leaves it out (a version 1 client).
    pub fn with_protocol(mut self, protocol: Option<u64>) -> SeedClient {
        self.protocol = protocol;
        self
    }

    /// The largest answer body read (and WebSocket message accepted).
    pub fn with_max_response_bytes(mut self, limit: usize) -> SeedClient {
        self.max_response_bytes = limit;
        self
    }

    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    pub fn account(&self) -> Principal {
        self.account
    }

    pub fn signer(&self) -> Principal {
        self.identity.principal()
    }

    /// The signed wire bytes of `action` (its name under `_`), stamped now.
    pub fn sign(&self, action: ActionMap) -> Result<Vec<u8>, ClientError> {
        let mut envelope =
            Envelope::unsigned(action, self.account, self.identity.principal(), now_ms());
        envelope.protocol = self.protocol;
        envelope
            .sign_with(self.identity.signing_key())
            .map_err(ClientError::Sign)?;
        envelope.encode().map_err(ClientError::Sign)
    }

    /// Signs `action` (`_` and its fields) and posts it.
    pub async fn call(&self, action: ActionMap) -> Result<Reply, ClientError> {
        if !matches!(action.get("_"), Some(Ipld::String(_))) {
            return Err(ClientError::InvalidJson(
                "an action needs its name, a string, under `_`".to_string(),
            ));
        }
        let body = self.sign(action)?;
        let response = transport::send(
            &self.transport,
            RawRequest {
                method: "POST",
                path: MESSAGE_PATH,
                headers: &[
                    ("content-type", CBOR_CONTENT_TYPE),
                    ("accept", CBOR_CONTENT_TYPE),
                ],
                body,
            },
            self.max_response_bytes,
        )
        .await?;
        self.decode_reply(response)
    }

    /// Signs and posts a typed action.
    pub async fn call_action(&self, action: &Action) -> Result<Reply, ClientError> {
        self.call(action.to_map().map_err(ClientError::Sign)?).await
    }

    /// Signs and posts the action `name` whose fields are the JSON object
    /// `fields` (DAG-JSON: see [`dag_json`]); `null` means no fields.
    pub async fn call_json(
        &self,
        name: &str,
        fields: &serde_json::Value,
    ) -> Result<Reply, ClientError> {
        self.call(action_from_json(name, fields)?).await
    }

    /// `GET /api/health`, as JSON.
    pub async fn health(&self) -> Result<(u16, serde_json::Value), ClientError> {
        let response = transport::send(
            &self.transport,
            RawRequest {
                method: "GET",
                path: HEALTH_PATH,
                headers: &[("accept", "application/json")],
                body: Vec::new(),
            },
            self.max_response_bytes,
        )
        .await?;
        let value = serde_json::from_slice(&response.body).map_err(|e| {
            ClientError::BadResponse(format!(
                "status {}: the health answer is not JSON: {e}",
                response.status
            ))
        })?;
        Ok((response.status, value))
    }

    /// Opens `/agents/ws` and subscribes to `key` (`account/<id>`,
    /// `agents/<id>`, `sessions/<id>`), replaying past `after_seq`.
    pub async fn subscribe(
        &self,
        key: &str,
        after_seq: Option<u64>,
    ) -> Result<Subscription, ClientError> {
        let mut subscription = Subscription::open(self.clone()).await?;
        subscription.subscribe(key, after_seq).await?;
        Ok(subscription)
    }

    pub(crate) fn max_response_bytes(&self) -> usize {
        self.max_response_bytes
    }

    fn decode_reply(&self, response: RawResponse) -> Result<Reply, ClientError> {
        let is_cbor = response.content_type.as_deref().is_some_and(|value| {
            value
                .split(';')
                .next()
                .is_some_and(|kind| kind.trim().eq_ignore_ascii_case(CBOR_CONTENT_TYPE))
        });
        if !is_cbor {
            return Err(ClientError::BadResponse(format!(
                "status {}: expected {CBOR_CONTENT_TYPE}, got {} ({})",
                response.status,
                response
                    .content_type
                    .as_deref()
                    .unwrap_or("no content type"),
                excerpt(&response.body)
            )));
        }
        let body =
            cbor::from_slice::<Ipld>(&response.body, self.max_response_bytes).map_err(|e| {
                ClientError::BadResponse(format!(
                    "status {}: the body is not DAG-CBOR: {e}",
                    response.status
                ))
            })?;
        Ok(Reply {
            status: response.status,
            body,
        })
    }
}

/// The action map for `name` with the fields of a JSON object.
pub fn action_from_json(name: &str, fields: &serde_json::Value) -> Result<ActionMap, ClientError> {
    if name.is_empty() {
        return Err(ClientError::InvalidJson(
            "the action name is empty".to_string(),
        ));
    }
    let mut action = match fields {
        serde_json::Value::Null => ActionMap::new(),
        serde_json::Value::Object(_) => match dag_json::json_to_ipld(fields)? {
            Ipld::Map(map) => map,
            _ => {
                return Err(ClientError::InvalidJson(
                    "the action's fields must be a JSON object".to_string(),
                ))
            }
        },
        _ => {
            return Err(ClientError::InvalidJson(
                "the action's fields must be a JSON object".to_string(),
            ))
        }
    };
    for reserved in ["_", "ts"] {
        if action.contains_key(reserved) {
            return Err(ClientError::InvalidJson(format!(
                "`{reserved}` is set by the client, not in the fields"
            )));
        }
    }
    action.insert("_".to_string(), Ipld::String(name.to_string()));
    Ok(action)
}

/// The envelope's `ts`: Unix milliseconds (0 before the epoch).
fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The start of a body that is not what was expected, for the error.
fn excerpt(body: &[u8]) -> String {
    const SHOWN: usize = 200;
    let text = String::from_utf8_lossy(&body[..body.len().min(SHOWN)]).into_owned();
    if body.len() > SHOWN {
        format!("{text}…")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn actions_from_json() {
        let action = action_from_json("GetAgent", &json!({"agentId": "a1"})).unwrap();
        assert_eq!(action.get("_"), Some(&Ipld::String("GetAgent".into())));
        assert_eq!(action.get("agentId"), Some(&Ipld::String("a1".into())));
        assert_eq!(
            action_from_json("ListAgents", &serde_json::Value::Null)
                .unwrap()
                .len(),
            1
        );
        for (name, fields) in [
            ("", json!({})),
            ("X", json!([1])),
            ("X", json!("text")),
            ("X", json!({"ts": 1})),
            ("X", json!({"_": "Y"})),
        ] {
            assert_eq!(
                action_from_json(name, &fields).unwrap_err().code(),
                "invalid_json",
                "{name} {fields}"
            );
        }
    }

    #[test]
    fn signed_bytes_verify_and_carry_the_account() {
        let identity = Identity::generate();
        let signer = identity.principal();
        let account = Identity::generate().principal();
        let client = SeedClient::new(
            Transport::Http {
                addr: "127.0.0.1:9".into(),
            },
            identity,
            Some(account),
        );
        let bytes = client
            .sign(action_from_json("ListAgents", &serde_json::Value::Null).unwrap())
            .unwrap();
        let envelope = Envelope::decode(&bytes, bytes.len()).unwrap();
        envelope.verify_signature().unwrap();
        assert_eq!(envelope.signer, signer);
        assert_eq!(envelope.account, account);
        assert_eq!(
            envelope.protocol,
            Some(agentos_protocol::seed::PROTOCOL_VERSION)
        );
        assert!(envelope.ts_ms().unwrap() > 1_600_000_000_000);
        // The bytes are canonical: re-encoding changes nothing.
        assert_eq!(envelope.encode().unwrap(), bytes);
    }

    #[test]
    fn replies_read_errors() {
        let mut map = ActionMap::new();
        map.insert("_".into(), Ipld::String("Error".into()));
        map.insert("message".into(), Ipld::String("no such agent".into()));
        map.insert("code".into(), Ipld::String("not_found".into()));
        let reply = Reply {
            status: 404,
            body: Ipld::Map(map),
        };
        assert!(!reply.is_success());
        assert_eq!(reply.error(), Some((Some("not_found"), "no such agent")));
        let ok = Reply {
            status: 200,
            body: Ipld::Null,
        };
        assert!(ok.is_success());
        assert_eq!(ok.error(), None);
        assert_eq!(ok.kind(), None);
    }
}
