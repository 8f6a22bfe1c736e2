//! What a client hears when `/agents/ws` refuses one of its frames or ends
//! one of its subscriptions: `{_:"error", message, code}`, the socket
//! staying open. Envelope failures keep the signed API's own codes, so a
//! replayed or tampered frame reads exactly as it would over HTTP.

use agentos_protocol::seed::ws::WsEvent;

use crate::http::common::ApiError;

/// One refusal on a socket, with a stable snake_case code.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WsError {
    /// The envelope did not decode or verify, or its action is malformed
    /// (the signed API's code: `bad_cbor`, `replayed`, `bad_request`, …).
    #[error("{}", .0.message)]
    Api(ApiError),
    #[error("a frame is a binary signed envelope or a text JSON array of byte values")]
    BadFrame,
    #[error("a socket cannot switch accounts: this one acts for {0}")]
    AccountMismatch(String),
    #[error("{0}")]
    UnsupportedAction(String),
    #[error("{0:?} is not a subscription key (account/<id>, agents/<id> or sessions/<id>)")]
    BadKey(String),
    #[error("{0}: a socket may subscribe only to its own account")]
    ForeignAccount(String),
    /// Not found and not readable are the same answer: existence never
    /// leaks.
    #[error("{0} not found")]
    NotFound(String),
    #[error("a socket holds at most http.ws.maxSubscriptionsPerSocket ({0}) subscriptions")]
    SubscriptionsLimit(u32),
    #[error("an account may have at most http.ws.maxSocketsPerAccount ({0}) sockets open")]
    AccountSocketsLimit(u32),
    #[error("{0}: the session was deleted")]
    SessionDeleted(String),
    #[error("{0}: the agent was deleted")]
    AgentDeleted(String),
    #[error("{0}: the account may no longer read this agent")]
    AccessRevoked(String),
    /// The session's committed rows could not be read back for delivery.
    #[error("{0}: the subscription ended ({1}); subscribe again with afterSeq")]
    Ended(String, String),
}

impl WsError {
    pub fn code(&self) -> &str {
        match self {
            WsError::Api(e) => &e.code,
            WsError::BadFrame => "bad_frame",
            WsError::AccountMismatch(_) => "account_mismatch",
            WsError::UnsupportedAction(_) => "unsupported_action",
            WsError::BadKey(_) => "bad_key",
            WsError::ForeignAccount(_) => "forbidden",
            WsError::NotFound(_) => "not_found",
            WsError::SubscriptionsLimit(_) => "socket_subscriptions_limit",
            WsError::AccountSocketsLimit(_) => "account_sockets_limit",
            WsError::SessionDeleted(_) => "session_deleted",
            WsError::AgentDeleted(_) => "agent_deleted",
            WsError::AccessRevoked(_) => "access_revoked",
            WsError::Ended(..) => "subscription_ended",
        }
    }

    /// The error frame's JSON text.
    pub fn frame(&self) -> String {
        WsEvent::Error {
            message: self.to_string(),
            code: Some(self.code().to_owned()),
        }
        .to_json()
    }

    /// How the hub's reason for ending a session subscription reads here.
    pub fn ended(key: &str, reason: &str) -> WsError {
        match reason {
            "session_deleted" => WsError::SessionDeleted(key.to_owned()),
            other => WsError::Ended(key.to_owned(), other.to_owned()),
        }
    }
}

impl From<ApiError> for WsError {
    fn from(e: ApiError) -> Self {
        WsError::Api(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_carry_the_code_and_message() {
        let frame: serde_json::Value =
            serde_json::from_str(&WsError::SubscriptionsLimit(2).frame()).unwrap();
        assert_eq!(frame["_"], "error");
        assert_eq!(frame["code"], "socket_subscriptions_limit");
        assert!(frame["message"]
            .as_str()
            .unwrap()
            .contains("http.ws.maxSubscriptionsPerSocket"));
        let api = WsError::from(ApiError::unauthorized(
            agentos_protocol::seed::ApiCode::Replayed,
            "again",
        ));
        assert_eq!(api.code(), "replayed");
        assert_eq!(api.to_string(), "again");
        assert_eq!(
            WsError::ended("sessions/s", "session_deleted").code(),
            "session_deleted"
        );
        assert_eq!(
            WsError::ended("sessions/s", "storage_error").code(),
            "subscription_ended"
        );
    }
}
