//! The transport to a Seed hypermedia server, as Seed's own client speaks
//! it: a query is `GET {server}/api/<Key>` with its input in the query
//! string (an id in `id=` or `targetId=`, a primitive in `__value=`, other
//! fields one parameter each, non-strings JSON-encoded, form-encoded as a
//! browser's `URLSearchParams` does). The answer is superjson, decoded to
//! plain JSON. A non-2xx answer reads as the reference words it (`HTTP 500
//! from Resource: Internal Server Error: <error>`). Every request has the
//! configured deadline and a bound on the answer's bytes, at most
//! [`MAX_IN_FLIGHT`] run at once in the VM, and nothing is retried. The one
//! action, `PublishBlobs`, is a `POST` of its DAG-CBOR input.

use std::time::Duration;

use agentos_protocol::seed::blobs::{self, PublishEntry};
use agentos_protocol::seed::superjson;
use futures_util::StreamExt;
use serde_json::Value;

use super::HmError;
use crate::config::hypermedia::HypermediaConfig;

/// Bytes of a failed answer's body kept for its message.
const ERROR_BODY_BYTES: usize = 4 * 1024;

/// The input of a query, as it goes into the URL.
pub enum QueryInput {
    /// Nothing: no query string.
    None,
    /// A known id, as `id=<id>` (Resource, Account).
    Id(String),
    /// A target id, as `targetId=<id>` (ListChanges, ListCapabilities).
    TargetId(String),
    /// A primitive input, as `__value=<value>`.
    Value(String),
    /// An object input: each field in the schema's order; absent fields
    /// are left out.
    Fields(Vec<(&'static str, Param)>),
}

/// One field of an object input.
pub enum Param {
    /// A string, number or boolean, as its text.
    Text(String),
    /// Anything else, as JSON text with its keys in the schema's order.
    Json(String),
    Absent,
}

impl QueryInput {
    fn query_string(&self) -> String {
        let mut query = url::form_urlencoded::Serializer::new(String::new());
        match self {
            QueryInput::None => {}
            QueryInput::Id(id) => {
                query.append_pair("id", id);
            }
            QueryInput::TargetId(id) => {
                query.append_pair("targetId", id);
            }
            QueryInput::Value(value) => {
                query.append_pair("__value", value);
            }
            QueryInput::Fields(fields) => {
                for (key, value) in fields {
                    match value {
                        Param::Absent => {}
                        Param::Text(text) | Param::Json(text) => {
                            query.append_pair(key, text);
                        }
                    }
                }
            }
        }
        let query = query.finish();
        if query.is_empty() {
            query
        } else {
            format!("?{query}")
        }
    }
}

/// One hypermedia server's client: cheap to clone (its connections are
/// pooled and shared).
#[derive(Clone)]
pub struct HmClient {
    base: String,
    http: reqwest::Client,
    deadline: Duration,
    max_bytes: usize,
    /// Requests in flight in the whole VM: what their answers hold at once
    /// is at most this many times `max_bytes`.
    in_flight: std::sync::Arc<tokio::sync::Semaphore>,
}

/// Requests to the hypermedia server in flight at once, in the whole VM;
/// more wait for a turn within their own deadline.
pub const MAX_IN_FLIGHT: usize = 16;

/// A 2xx answer's plain value. One that is not a superjson envelope is
/// malformed (Seed's client fails its schema there too); an `{error}` body
/// keeps the server's words.
fn decode_answer(key: &str, answer: &[u8]) -> Result<Value, HmError> {
    let malformed = |message: String| HmError::Malformed {
        key: key.to_owned(),
        message,
    };
    let json: Value = serde_json::from_slice(answer)
        .map_err(|e| malformed(format!("the answer is not JSON: {e}")))?;
    let said = json
        .get("error")
        .filter(|_| json.get("json").is_none())
        .and_then(Value::as_str)
        .map(|error| error.chars().take(512).collect::<String>());
    superjson::decode(json).map_err(|e| match said {
        Some(error) => malformed(format!("the server answered an error: {error}")),
        None => malformed(e.to_string()),
    })
}

impl HmClient {
    pub fn new(config: &HypermediaConfig) -> Result<HmClient, HmError> {
        let deadline = Duration::from_millis(config.read_timeout_ms);
        let http = reqwest::Client::builder()
            .timeout(deadline)
            .redirect(reqwest::redirect::Policy::limited(5))
            .build()
            .map_err(|e| HmError::Unreachable {
                key: "client".into(),
                message: e.to_string(),
            })?;
        Ok(HmClient {
            base: config.server(),
            http,
            deadline,
            max_bytes: usize::try_from(config.max_response_bytes).unwrap_or(usize::MAX),
            in_flight: std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
        })
    }

    /// The server's base URL, without a trailing slash.
    pub fn server(&self) -> &str {
        &self.base
    }

    /// `GET {server}/api/<key>?…`, its answer decoded.
    pub async fn query(&self, key: &str, input: &QueryInput) -> Result<Value, HmError> {
        let url = format!("{}/api/{key}{}", self.base, input.query_string());
        let fetch = async {
            // The semaphore is never closed; a turn is waited for within
            // the deadline.
            let _turn = self.in_flight.acquire().await.ok();
            self.fetch(key, self.http.get(&url)).await
        };
        let answer = tokio::time::timeout(self.deadline, fetch)
            .await
            .map_err(|_| HmError::Timeout {
                key: key.to_owned(),
                after_ms: self.deadline.as_millis() as u64,
            })??;
        decode_answer(key, &answer)
    }

    /// `POST {server}/api/PublishBlobs` with `entries` as its DAG-CBOR
    /// body; answers the CIDs the server stored. Sent once: a write is
    /// never retried.
    pub async fn publish(&self, entries: &[PublishEntry]) -> Result<Vec<String>, HmError> {
        const KEY: &str = "PublishBlobs";
        let body = blobs::publish_body(entries).map_err(|e| HmError::Malformed {
            key: KEY.to_owned(),
            message: e.to_string(),
        })?;
        let url = format!("{}/api/{KEY}", self.base);
        let fetch = async {
            let _turn = self.in_flight.acquire().await.ok();
            let request = self
                .http
                .post(&url)
                .header(reqwest::header::CONTENT_TYPE, "application/cbor")
                .body(body);
            self.fetch(KEY, request).await
        };
        let answer = tokio::time::timeout(self.deadline, fetch)
            .await
            .map_err(|_| HmError::Timeout {
                key: KEY.to_owned(),
                after_ms: self.deadline.as_millis() as u64,
            })??;
        let malformed = |message: String| HmError::Malformed {
            key: KEY.to_owned(),
            message,
        };
        decode_answer(KEY, &answer)?
            .get("cids")
            .and_then(Value::as_array)
            .and_then(|cids| {
                cids.iter()
                    .map(|c| c.as_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
            })
            .ok_or_else(|| malformed("expected {cids: string[]}".into()))
    }

    async fn fetch(&self, key: &str, request: reqwest::RequestBuilder) -> Result<Vec<u8>, HmError> {
        let unreachable = |e: reqwest::Error| {
            if e.is_timeout() {
                HmError::Timeout {
                    key: key.to_owned(),
                    after_ms: self.deadline.as_millis() as u64,
                }
            } else {
                HmError::Unreachable {
                    key: key.to_owned(),
                    message: crate::builtin::fetch::chain(&e),
                }
            }
        };
        let response = request
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(unreachable)?;
        let status = response.status();
        if !status.is_success() {
            let body = read_bounded(response, ERROR_BODY_BYTES, true)
                .await
                .unwrap_or_default();
            return Err(HmError::Status {
                key: key.to_owned(),
                status: status.as_u16(),
                message: http_error_message(
                    key,
                    status.as_u16(),
                    status.canonical_reason().unwrap_or(""),
                    &String::from_utf8_lossy(&body),
                ),
            });
        }
        if response
            .content_length()
            .is_some_and(|n| n > self.max_bytes as u64)
        {
            return Err(HmError::TooLarge {
                key: key.to_owned(),
                limit: self.max_bytes,
            });
        }
        match read_bounded(response, self.max_bytes, false).await {
            Ok(body) => Ok(body),
            Err(ReadError::TooLarge) => Err(HmError::TooLarge {
                key: key.to_owned(),
                limit: self.max_bytes,
            }),
            Err(ReadError::Network(e)) => Err(unreachable(e)),
        }
    }
}

enum ReadError {
    TooLarge,
    Network(reqwest::Error),
}

/// The body, up to `max` bytes: past it, cut there (`cut`) or refused.
async fn read_bounded(
    response: reqwest::Response,
    max: usize,
    cut: bool,
) -> Result<Vec<u8>, ReadError> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(ReadError::Network)?;
        if body.len() + chunk.len() > max {
            if cut {
                body.extend_from_slice(&chunk[..max - body.len()]);
                return Ok(body);
            }
            return Err(ReadError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The reference's `formatHTTPErrorMessage`: the status line, then the
/// body's `error` when it is JSON with one, else the trimmed body.
pub fn http_error_message(key: &str, status: u16, reason: &str, body: &str) -> String {
    let base = format!("HTTP {status} from {key}: {reason}");
    let error = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_owned))
        .filter(|e| !e.trim().is_empty());
    match error {
        Some(error) => format!("{base}: {error}"),
        None if !body.trim().is_empty() => format!("{base}: {}", body.trim()),
        None => base,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_body_in_a_2xx_answer_keeps_the_servers_words() {
        let said = decode_answer("Resource", br#"{"error":"no such document"}"#);
        match said {
            Err(HmError::Malformed { key, message }) => {
                assert_eq!(key, "Resource");
                assert_eq!(message, "the server answered an error: no such document");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            decode_answer("Resource", br#"{"value":1}"#),
            Err(HmError::Malformed { message, .. }) if message == "the answer is not a superjson object"
        ));
        assert_eq!(
            decode_answer("Resource", br#"{"json":{"a":1}}"#).ok(),
            Some(serde_json::json!({"a": 1}))
        );
    }

    #[test]
    fn query_strings_are_built_as_seeds_client_builds_them() {
        assert_eq!(
            QueryInput::Id("hm://z6Mkabc/foo bar/baz?v=bafy1.bafy2#blk[1:3]".into()).query_string(),
            "?id=hm%3A%2F%2Fz6Mkabc%2Ffoo+bar%2Fbaz%3Fv%3Dbafy1.bafy2%23blk%5B1%3A3%5D"
        );
        assert_eq!(
            QueryInput::TargetId("hm://z6Mkabc".into()).query_string(),
            "?targetId=hm%3A%2F%2Fz6Mkabc"
        );
        assert_eq!(
            QueryInput::Value("z6Mkabc/zTSID".into()).query_string(),
            "?__value=z6Mkabc%2FzTSID"
        );
        assert_eq!(QueryInput::None.query_string(), "");
        assert_eq!(
            QueryInput::Fields(vec![
                (
                    "includes",
                    Param::Json(r#"[{"space":"site","path":"/","mode":"Children"}]"#.into())
                ),
                (
                    "sort",
                    Param::Json(r#"[{"reverse":true,"term":"UpdateTime"}]"#.into())
                ),
                ("limit", Param::Text("10".into())),
                ("pageToken", Param::Absent),
            ])
            .query_string(),
            "?includes=%5B%7B%22space%22%3A%22site%22%2C%22path%22%3A%22%2F%22%2C%22mode%22%3A%22Children%22%7D%5D\
             &sort=%5B%7B%22reverse%22%3Atrue%2C%22term%22%3A%22UpdateTime%22%7D%5D&limit=10"
        );
        assert_eq!(
            QueryInput::Fields(vec![
                ("query", Param::Text("hello world".into())),
                ("includeBody", Param::Text("false".into())),
                ("tilde", Param::Text("~*-._".into()))
            ])
            .query_string(),
            "?query=hello+world&includeBody=false&tilde=%7E*-._"
        );
    }

    #[test]
    fn failed_answers_read_as_the_reference_words_them() {
        let message = |status, reason, body| http_error_message("Resource", status, reason, body);
        assert_eq!(
            message(500, "Internal Server Error", r#"{"error":"grpc exploded"}"#),
            "HTTP 500 from Resource: Internal Server Error: grpc exploded"
        );
        assert_eq!(
            message(404, "Not Found", ""),
            "HTTP 404 from Resource: Not Found"
        );
        assert_eq!(
            message(503, "Service Unavailable", " plain text body \n"),
            "HTTP 503 from Resource: Service Unavailable: plain text body"
        );
        assert_eq!(
            message(500, "Internal Server Error", r#"{"error":"  "}"#),
            r#"HTTP 500 from Resource: Internal Server Error: {"error":"  "}"#
        );
    }
}
