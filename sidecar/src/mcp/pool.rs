//! Connections to MCP servers: the target of a server (its URL and
//! headers, secrets opened, or the operator's command), opening and
//! initializing a connection over the right transport, the pool of live
//! connections per account and server (bounded by `mcp.maxConnections`,
//! the longest idle closed to make room, an idle one closed after
//! `mcp.idleMs`), and scrubbing secret values from what a server says.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use agentos_adapters::builtin::net;
use agentos_protocol::mcp::{self as wire, methods};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::records::config_of;
use super::transport::{header_map, LegacySse, Stdio, StreamableHttp, Transport};
use super::{lock, Inner, Mcp, McpError};
use crate::config::AgentSpec;

/// Where a server is and how to reach it, with its secrets opened.
pub(super) enum Target {
    Remote {
        url: reqwest::Url,
        transport: Option<String>,
        headers: Vec<(String, String)>,
        /// The values of `headers` that are secrets.
        secrets: Vec<String>,
    },
    Command(AgentSpec),
}

/// A live, initialized connection.
pub(super) struct Conn {
    pub(super) transport: Box<dyn Transport>,
    /// The header values that came from secrets: scrubbed from whatever
    /// the server says before anyone reads it (a server may echo them).
    pub(super) secrets: Vec<String>,
}

impl Conn {
    pub(super) fn scrub(&self, text: &str) -> String {
        scrub(text, &self.secrets)
    }
}

/// `text` with every secret value replaced, and the credential of an
/// `<scheme> <credential>` value (`Bearer …`) on its own too.
pub(super) fn scrub(text: &str, secrets: &[String]) -> String {
    let mut text = text.to_owned();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        text = text.replace(secret.as_str(), "[redacted]");
        if let Some((_, credential)) = secret.rsplit_once(' ') {
            if credential.len() >= 8 {
                text = text.replace(credential, "[redacted]");
            }
        }
    }
    text
}

pub(super) struct Pooled {
    conn: Arc<Conn>,
    /// What the connection was opened with (config and secrets, hashed):
    /// a change opens another.
    fingerprint: String,
    last_used: Instant,
}

#[derive(Default)]
pub(super) struct Pool {
    open: HashMap<(String, String), Pooled>,
    /// Connections being opened, counted against the bound.
    opening: usize,
}

/// How long closing every connection at shutdown may take.
const CLOSE_ALL: Duration = Duration::from_secs(5);

/// Takes a connection out of service: closed in the background when
/// nobody else holds it; otherwise its last holder's drop ends it (a
/// command server's process is killed then; see `transport::Stdio`).
pub(super) fn retire(conn: Arc<Conn>) {
    if Arc::strong_count(&conn) == 1 {
        tokio::spawn(async move { conn.transport.close().await });
    }
}

/// One connection being opened, counted against `mcp.maxConnections`
/// until it is settled in the pool or dropped.
struct Opening<'a> {
    inner: &'a Inner,
    counted: bool,
}

impl Opening<'_> {
    /// No longer opening (under the pool's lock, with the insert).
    fn settle(mut self, pool: &mut Pool) {
        pool.opening = pool.opening.saturating_sub(1);
        self.counted = false;
    }
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        if self.counted {
            let mut pool = lock(&self.inner.pool);
            pool.opening = pool.opening.saturating_sub(1);
        }
    }
}

impl Mcp {
    /// Drops the pooled connection of a server (only `conn` when given: a
    /// newer one stays), closing it in the background.
    pub(super) fn forget(&self, account: &str, name: &str, conn: Option<&Arc<Conn>>) {
        let key = (account.to_owned(), name.to_owned());
        let removed = {
            let mut pool = lock(&self.inner.pool);
            match (pool.open.get(&key), conn) {
                (Some(pooled), Some(conn)) if !Arc::ptr_eq(&pooled.conn, conn) => None,
                (Some(_), _) => pool.open.remove(&key),
                (None, _) => None,
            }
        };
        if let Some(pooled) = removed {
            retire(pooled.conn);
        }
    }

    /// Closes every connection (the VM is stopping).
    pub async fn close_all(&self) {
        let all: Vec<Pooled> = lock(&self.inner.pool)
            .open
            .drain()
            .map(|(_, p)| p)
            .collect();
        let closing = all.into_iter().map(|pooled| async move {
            pooled.conn.transport.close().await;
        });
        // Each close is bounded by its transport; all of them together by
        // the shutdown's patience.
        let _ = tokio::time::timeout(CLOSE_ALL, futures_util::future::join_all(closing)).await;
    }

    pub(super) fn check_url(&self, url: &str) -> Result<reqwest::Url, McpError> {
        let parsed = reqwest::Url::parse(url)
            .map_err(|_| McpError::Invalid("MCP server URL is invalid".into()))?;
        if !self.inner.config.allow_private_urls {
            net::check_url(&parsed).map_err(McpError::Refused)?;
        }
        Ok(parsed)
    }

    /// The server's target and its fingerprint, secrets opened.
    pub(super) async fn target(
        &self,
        account: &str,
        name: &str,
    ) -> Result<(Target, String), McpError> {
        if let Some(spec) = self.operator(name) {
            return Ok((Target::Command(spec.clone()), "stdio".to_owned()));
        }
        let Some(row) = self.inner.store.get(account, name).await? else {
            return Err(McpError::NotFound(format!(
                "MCP server \"{name}\" is enabled for this agent but no longer exists."
            )));
        };
        let config = config_of(&row)?;
        let url = self.check_url(&config.url)?;
        let mut headers: BTreeMap<String, String> = config.headers.clone().unwrap_or_default();
        let mut secrets = Vec::new();
        let mut hash = Sha256::new();
        hash.update(row.config.to_string().as_bytes());
        for (header, secret) in config.secret_refs.iter().flatten() {
            let value = self
                .inner
                .control
                .secret_plaintext(account, secret)
                .await
                .map_err(|e| McpError::Secret(format!("MCP server \"{name}\": {e}")))?
                .ok_or_else(|| {
                    McpError::Secret(format!(
                        "MCP server \"{name}\": the secret {secret:?} of header {header:?} does not exist"
                    ))
                })?;
            let value = String::from_utf8(value.as_bytes().to_vec()).map_err(|_| {
                McpError::Secret(format!(
                    "MCP server \"{name}\": the secret {secret:?} of header {header:?} is not text"
                ))
            })?;
            hash.update(header.as_bytes());
            hash.update([0]);
            hash.update(value.as_bytes());
            hash.update([0]);
            secrets.push(value.clone());
            headers.insert(header.clone(), value);
        }
        let fingerprint = hex::encode(hash.finalize());
        Ok((
            Target::Remote {
                url,
                transport: config.transport,
                headers: headers.into_iter().collect(),
                secrets,
            },
            fingerprint,
        ))
    }

    /// A pooled connection to the server, opened when there is none.
    pub(super) async fn connection(
        &self,
        account: &str,
        name: &str,
    ) -> Result<Arc<Conn>, McpError> {
        let (target, fingerprint) = self.target(account, name).await?;
        let key = (account.to_owned(), name.to_owned());
        let max = self.inner.config.max_connections;
        let stale = {
            let mut pool = lock(&self.inner.pool);
            if let Some(pooled) = pool.open.get_mut(&key) {
                if pooled.fingerprint == fingerprint && pooled.conn.transport.is_alive() {
                    pooled.last_used = Instant::now();
                    return Ok(pooled.conn.clone());
                }
            }
            let mut stale: Vec<Pooled> = pool.open.remove(&key).into_iter().collect();
            let mut room = ((pool.open.len() + pool.opening) as u64) < max;
            if !room {
                // Room from the connection idle the longest.
                let idle = pool
                    .open
                    .iter()
                    .filter(|(_, p)| Arc::strong_count(&p.conn) == 1)
                    .min_by_key(|(_, p)| p.last_used)
                    .map(|(k, _)| k.clone());
                if let Some(evicted) = idle.and_then(|k| pool.open.remove(&k)) {
                    stale.push(evicted);
                    room = true;
                }
            }
            if room {
                pool.opening += 1;
            }
            (stale, room)
        };
        let (stale, room) = stale;
        for pooled in stale {
            retire(pooled.conn);
        }
        if !room {
            return Err(McpError::Busy("connections", max, "maxConnections"));
        }
        // Counted until the open ends, however it ends (a cancelled call
        // drops this future mid-open).
        let opening = Opening {
            inner: &self.inner,
            counted: true,
        };
        let deadline = Duration::from_millis(self.inner.config.connect_timeout_ms);
        let opened = tokio::time::timeout(deadline, self.open(account, name, target))
            .await
            .unwrap_or(Err(McpError::Timeout(self.inner.config.connect_timeout_ms)));
        let mut pool = lock(&self.inner.pool);
        opening.settle(&mut pool);
        let conn = Arc::new(opened?);
        // Another call opened one meanwhile: the first stays (calls may be
        // using it) and this one is closed.
        if let Some(pooled) = pool.open.get_mut(&key) {
            if pooled.fingerprint == fingerprint && pooled.conn.transport.is_alive() {
                pooled.last_used = Instant::now();
                let kept = pooled.conn.clone();
                drop(pool);
                retire(conn);
                return Ok(kept);
            }
        }
        let replaced = pool.open.insert(
            key,
            Pooled {
                conn: conn.clone(),
                fingerprint,
                last_used: Instant::now(),
            },
        );
        drop(pool);
        if let Some(replaced) = replaced {
            retire(replaced.conn);
        }
        Ok(conn)
    }

    /// Opens and initializes a connection.
    pub(super) async fn open(
        &self,
        account: &str,
        name: &str,
        target: Target,
    ) -> Result<Conn, McpError> {
        let max_message =
            usize::try_from(self.inner.config.max_message_bytes).unwrap_or(usize::MAX);
        match target {
            Target::Remote {
                url,
                transport,
                headers,
                secrets,
            } => {
                let headers = header_map(&headers)?;
                let opened = self
                    .open_remote(url, transport.as_deref(), headers, max_message)
                    .await;
                match opened {
                    Ok(mut conn) => {
                        conn.secrets = secrets;
                        Ok(conn)
                    }
                    Err(e) => Err(e.scrubbed(&secrets)),
                }
            }
            Target::Command(spec) => {
                let command = self
                    .inner
                    .launcher
                    .command_for(&format!("mcp\0{name}\0{account}"), &spec, spec.env.clone())
                    .map_err(McpError::Unreachable)?;
                let stdio = Stdio::spawn(&command, max_message).await?;
                initialize(Box::new(stdio)).await
            }
        }
    }

    /// Opens a remote server: Streamable HTTP, the legacy SSE transport,
    /// or (no transport named) the first, then the second.
    pub(super) async fn open_remote(
        &self,
        url: reqwest::Url,
        transport: Option<&str>,
        headers: reqwest::header::HeaderMap,
        max_message: usize,
    ) -> Result<Conn, McpError> {
        let client = self.inner.client.clone();
        let http = || -> Box<dyn Transport> {
            Box::new(StreamableHttp::new(
                client.clone(),
                url.clone(),
                headers.clone(),
                max_message,
            ))
        };
        match transport {
            Some("sse") => {
                let sse =
                    LegacySse::connect(client.clone(), url.clone(), headers.clone(), max_message)
                        .await?;
                initialize(Box::new(sse)).await
            }
            Some(_) => initialize(http()).await,
            None => match initialize(http()).await {
                Ok(conn) => Ok(conn),
                Err(first) => {
                    let sse = LegacySse::connect(
                        client.clone(),
                        url.clone(),
                        headers.clone(),
                        max_message,
                    )
                    .await;
                    match sse {
                        Ok(sse) => initialize(Box::new(sse)).await.map_err(|_| first),
                        Err(_) => Err(first),
                    }
                }
            },
        }
    }
}

/// `initialize`, then `notifications/initialized`.
pub(super) async fn initialize(transport: Box<dyn Transport>) -> Result<Conn, McpError> {
    let result = transport
        .request(
            methods::INITIALIZE,
            wire::initialize_params("agentos-sidecar", env!("CARGO_PKG_VERSION")),
        )
        .await;
    let result = match result {
        Ok(result) => result,
        Err(e) => {
            transport.close().await;
            return Err(e);
        }
    };
    if !result.is_object() {
        transport.close().await;
        return Err(McpError::Protocol("initialize answered no object".into()));
    }
    if let Err(e) = transport.notify(methods::INITIALIZED, json!({})).await {
        transport.close().await;
        return Err(e);
    }
    Ok(Conn {
        transport,
        secrets: Vec::new(),
    })
}

/// Closes connections idle past `mcp.idleMs`, until the service is gone.
pub(super) async fn reap_idle(inner: Weak<Inner>) {
    loop {
        let idle = match inner.upgrade() {
            Some(inner) => Duration::from_millis(inner.config.idle_ms),
            None => return,
        };
        tokio::time::sleep((idle / 2).max(Duration::from_millis(50))).await;
        let Some(inner) = inner.upgrade() else { return };
        let expired: Vec<Pooled> = {
            let mut pool = lock(&inner.pool);
            let keys: Vec<_> = pool
                .open
                .iter()
                .filter(|(_, p)| Arc::strong_count(&p.conn) == 1 && p.last_used.elapsed() >= idle)
                .map(|(k, _)| k.clone())
                .collect();
            keys.iter().filter_map(|k| pool.open.remove(k)).collect()
        };
        drop(inner);
        for pooled in expired {
            retire(pooled.conn);
        }
    }
}
