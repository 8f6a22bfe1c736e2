//! The sidecar's answers to the builtin agent's `_agentos/*` requests.
//!
//! A session of the builtin agent is a Seed session: its link names the
//! agent, the agent's definition names its provider (one of the owner's),
//! and the provider's `secretRefs.apiKey` names the sealed key. `context`
//! assembles the turn from those and from the log; `provider_key` opens the
//! key at call time and hands it only to this route's agent; `verb` runs a
//! tool call as the agent.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentos_adapters::builtin::provider::{
    Endpoint, Message, ModelInfo, ModelRequest, Provider, ProviderError, ProviderKind,
    ProviderOptions, StreamEvent,
};
use agentos_adapters::RpcError;
use agentos_protocol::agent_ext::{
    self, ContextParams, HeldTranscript, ProviderKey, ProviderRef, TurnContext, VerbParams,
};
use agentos_protocol::host::Actor;
use agentos_protocol::seed::vocab::AuthMode;
use agentos_protocol::seed::{cbor, AgentDefinition, ModelProviderConfig};
use serde_json::Value;

use super::conversations::Conversations;
use super::oauth::CredentialError;
use super::prompt;
use super::resolved::unservable;
use super::transcript;
use super::verbs::{VerbScope, Verbs};
use crate::control::store::{AGENTS, PROVIDERS, SECRET_REFS};
use crate::control::{Control, ControlError};
use crate::sessions::{AgentHost, SessionStore, TurnScope};
use agentos_storage::watch::Memo;

pub use super::resolved::{Resolved, UNSERVABLE};

/// Stored documents are ours and bounded; this only guards the decoder.
const MAX_DOCUMENT_BYTES: usize = 16 * 1024 * 1024;
/// Output tokens per model call (the reference's fixed value).
const MAX_TOKENS: u32 = 16_384;
/// How long a model listing may take.
const LISTING_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);
/// Output tokens a title call may spend.
const TITLE_TOKENS: u32 = 256;
/// Bytes a title call's answer may stream, in all and in one event.
const TITLE_STREAM_BYTES: usize = 64 * 1024;
/// The endpoint of a local Ollama when its provider names none.
const OLLAMA_DEFAULT: &str = "http://127.0.0.1:11434/v1";

/// Endpoints the operator pins per provider type instead of the public
/// ones (a proxy, or a scripted provider in tests). Signed clients can name
/// an endpoint only for the types without a public one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProviderEndpoints {
    pub pinned: BTreeMap<String, String>,
    /// A client's endpoint may lead to private addresses.
    pub allow_private: bool,
    /// `builtin.providerRetries`, passed to the agent with each turn.
    pub provider_retries: u32,
}

impl ProviderEndpoints {
    /// Where a provider of `provider_type` is called, and whether that is a
    /// client's choice that must lead to a public address.
    pub fn resolve(&self, config: &ModelProviderConfig) -> Result<(String, bool), RpcError> {
        let kind = ProviderKind::from_type(&config.provider_type);
        if let Some(pinned) = self.pinned.get(&config.provider_type) {
            return Ok((pinned.clone(), false));
        }
        if let Some(default) = kind.default_base_url() {
            return Ok((default.to_owned(), false));
        }
        let public_only = !self.allow_private;
        match (&config.base_url, config.provider_type.as_str()) {
            (Some(url), _) if !url.is_empty() => {
                Ok((url.trim_end_matches('/').to_owned(), public_only))
            }
            (_, "ollama") => Ok((OLLAMA_DEFAULT.to_owned(), public_only)),
            _ => Err(unservable(
                "provider_unconfigured",
                format!("provider type {:?} needs a baseUrl", config.provider_type),
            )),
        }
    }
}

/// Why a model listing failed.
#[derive(Debug)]
pub enum ListModelsError {
    NotFound,
    /// The control plane's storage failed or holds a damaged record.
    Storage(String),
    /// The sidecar could not make the call (no endpoint, no key, storage).
    Refused(RpcError),
    /// The provider answered with a failure.
    Provider(ProviderError),
}

pub struct Host {
    control: Control,
    store: SessionStore,
    /// The builtin sessions' conversations kept between turns.
    conversations: Conversations,
    verbs: Verbs,
    endpoints: ProviderEndpoints,
    /// The provider client, for model listings made by the sidecar itself.
    provider: Provider,
    /// The provider client for session titles, bounded to what a title is.
    titler: Provider,
    /// Subscription credentials (a provider signed in with ChatGPT).
    oauth: Arc<super::oauth::OAuth>,
    /// Agents resolved (their definitions and providers decoded), kept
    /// while the tables they came from are unwritten.
    resolved: Option<Memo<String, Arc<Resolved>>>,
}

/// What the resolved agents kept in memory may cost (decoded documents
/// take about three times their stored bytes).
const KEPT_RESOLVED_BYTES: usize = 8 << 20;

impl Host {
    pub fn new(
        control: Control,
        store: SessionStore,
        verbs: Verbs,
        endpoints: ProviderEndpoints,
        oauth: Arc<super::oauth::OAuth>,
    ) -> Result<Host, ProviderError> {
        let resolved = control.versions().map(|versions| {
            Memo::new(
                versions,
                &[AGENTS, PROVIDERS, SECRET_REFS],
                KEPT_RESOLVED_BYTES,
                |agent_id: &String, resolved: &Arc<Resolved>| {
                    agent_id.len() + resolved.agent.definition.len().saturating_mul(3) + 1024
                },
            )
        });
        Ok(Host {
            resolved,
            control,
            store,
            conversations: Conversations::default(),
            verbs,
            endpoints,
            oauth,
            // Listings answer a signed request: they may not take long.
            provider: Provider::new(ProviderOptions {
                idle_timeout: LISTING_DEADLINE,
                call_deadline: LISTING_DEADLINE,
                ..ProviderOptions::default()
            })?,
            // A title is two lines: what a provider streams past these
            // bounds is refused, however it floods.
            titler: Provider::new(ProviderOptions {
                idle_timeout: LISTING_DEADLINE,
                call_deadline: LISTING_DEADLINE,
                max_event_bytes: TITLE_STREAM_BYTES,
                max_response_bytes: TITLE_STREAM_BYTES,
                max_stream_bytes: TITLE_STREAM_BYTES,
                ..ProviderOptions::default()
            })?,
        })
    }

    /// The models of one of `account`'s providers, listed by the provider
    /// with its key, opened for this call only.
    pub async fn list_models(
        &self,
        account: &str,
        provider_name: &str,
    ) -> Result<Vec<ModelInfo>, ListModelsError> {
        let record = self
            .control
            .get_provider(account, provider_name)
            .await
            .map_err(|e| ListModelsError::Storage(e.code().to_owned()))?
            .ok_or(ListModelsError::NotFound)?;
        let config: ModelProviderConfig = cbor::from_slice(&record.config, MAX_DOCUMENT_BYTES)
            .map_err(|_| ListModelsError::Storage("corrupt_row".into()))?;
        let endpoint = self
            .endpoint(account, &config)
            .await
            .map_err(ListModelsError::Refused)?;
        self.provider
            .list_models(&endpoint)
            .await
            .map_err(ListModelsError::Provider)
    }

    /// Where `account`'s provider is called from the sidecar itself, with
    /// its key opened for this call only.
    async fn endpoint(
        &self,
        account: &str,
        config: &ModelProviderConfig,
    ) -> Result<Endpoint, RpcError> {
        let (provider_type, base_url, public_only) = self.route(config)?;
        let key = self.open_key(account, config).await?;
        Ok(Endpoint {
            kind: ProviderKind::from_type(&provider_type),
            base_url,
            api_key: key.api_key,
            public_only,
            account_id: key.account_id,
        })
    }

    /// One short call to the agent's own model, with no tools, asking it
    /// under `instructions` for a title and a description of the
    /// conversation `digest` shows (`titles.rs`); answers the model's text,
    /// at most 4 KiB of it.
    pub async fn ask_for_title(
        &self,
        resolved: &Resolved,
        instructions: &str,
        digest: &str,
    ) -> Result<String, String> {
        let provider = resolved.provider().map_err(|e| e.message)?;
        let endpoint = self
            .endpoint(&resolved.agent.account_id, provider)
            .await
            .map_err(|e| e.message)?;
        let request = ModelRequest {
            model: resolved.definition.model.clone(),
            system: instructions.to_owned(),
            messages: vec![Message::User {
                text: digest.to_owned(),
            }],
            tools: Vec::new(),
            max_tokens: TITLE_TOKENS,
            cache_key: None,
            rendered: Default::default(),
        };
        let mut text = String::new();
        let mut sink = |event: StreamEvent| {
            if let StreamEvent::TextDelta(delta) = event {
                if text.len() + delta.len() <= 4096 {
                    text.push_str(&delta);
                }
            }
        };
        self.titler
            .stream(&endpoint, &request, &mut sink)
            .await
            .map_err(|e| e.to_string())?;
        Ok(text)
    }

    /// The session's agent, its definition and its provider.
    pub async fn resolve(&self, session_id: &str) -> Result<Arc<Resolved>, RpcError> {
        let storage = |e: crate::control::ControlError| {
            RpcError::internal(format!("control-plane storage: {}", e.code()))
        };
        let link = self
            .control
            .session_agent(session_id)
            .await
            .map_err(storage)?
            .ok_or_else(|| {
                unservable(
                    "not_a_seed_session",
                    "this session belongs to no agent: sessions of the builtin agent are \
                     created with the signed API's CreateSession",
                )
            })?;
        self.resolve_agent(&link.agent_id).await
    }

    /// What a delegated child's session was given: its own instructions
    /// and the tools it may use (`{instructions?, tools?}` in the session's
    /// metadata).
    async fn delegated(&self, session_id: &str) -> Result<Value, RpcError> {
        let metadata = self
            .store
            .metadata(session_id)
            .await
            .map_err(|e| RpcError::internal(format!("reading the session: {}", e.code())))?;
        Ok(delegate_of(metadata.flatten()))
    }

    /// The signing identities the agent's definition names that its
    /// owner holds, as `(name, public key)`; none read when it names none.
    async fn signing_identities(
        &self,
        resolved: &Resolved,
    ) -> Result<Vec<(String, String)>, RpcError> {
        let definition = &resolved.definition;
        let named = definition
            .signing_keys
            .clone()
            .or_else(|| definition.signing_key.clone().map(|key| vec![key]))
            .unwrap_or_default();
        if named.is_empty() {
            return Ok(Vec::new());
        }
        let secrets = self
            .control
            .list_secrets(&resolved.agent.account_id)
            .await
            .map_err(|e| RpcError::internal(e.to_string()))?;
        Ok(named
            .iter()
            .filter_map(|name| secrets.iter().find(|secret| secret.name == *name))
            .filter_map(crate::control::identities::identity)
            .map(|identity| {
                let key = identity.account_id.unwrap_or_else(|| identity.name.clone());
                (identity.label.unwrap_or(identity.name), key)
            })
            .collect())
    }

    /// The verbs' scope of a session's turn: its run and call, and the
    /// grants narrowed to what a delegated child was given.
    pub async fn verb_scope(
        &self,
        resolved: &Resolved,
        session_id: &str,
        actor: Actor,
        run_id: Option<&str>,
        tool_call_id: Option<&str>,
    ) -> Result<VerbScope, RpcError> {
        let delegated = self.delegated(session_id).await?;
        Ok(scope_of(
            resolved,
            session_id,
            actor,
            run_id,
            tool_call_id,
            &delegated,
        ))
    }

    /// An agent's definition and provider, read for one turn or call (or
    /// kept from the last read while nothing it came from was written).
    pub async fn resolve_agent(&self, agent_id: &str) -> Result<Arc<Resolved>, RpcError> {
        let read = || async { self.read_agent(agent_id).await.map(Arc::new) };
        match &self.resolved {
            Some(kept) => kept.get_or_read(&agent_id.to_owned(), read).await,
            None => read().await,
        }
    }

    async fn read_agent(&self, agent_id: &str) -> Result<Resolved, RpcError> {
        let storage = |e: crate::control::ControlError| {
            RpcError::internal(format!("control-plane storage: {}", e.code()))
        };
        let agent = self
            .control
            .get_agent(agent_id)
            .await
            .map_err(storage)?
            .ok_or_else(|| unservable("agent_not_found", "the session's agent was deleted"))?;
        let definition: AgentDefinition =
            cbor::from_slice(&agent.definition, MAX_DOCUMENT_BYTES)
                .map_err(|_| RpcError::internal("the agent's stored definition does not decode"))?;
        let provider = match self
            .control
            .get_provider(&agent.account_id, &definition.model_provider)
            .await
            .map_err(storage)?
        {
            Some(record) => Some(
                cbor::from_slice::<ModelProviderConfig>(&record.config, MAX_DOCUMENT_BYTES)
                    .map_err(|_| {
                        RpcError::internal("the provider's stored config does not decode")
                    })?,
            ),
            None => None,
        };
        Ok(Resolved {
            provider_name: definition.model_provider.clone(),
            agent,
            definition,
            provider,
        })
    }

    async fn context(
        &self,
        turn: TurnScope<'_>,
        held: Option<&HeldTranscript>,
    ) -> Result<TurnContext, RpcError> {
        let resolved = self.resolve(turn.session_id).await?;
        let provider = resolved.provider()?.clone();
        let (provider_type, base_url, public_only) = self.route(&provider)?;
        // A resumed turn's conversation is the whole log: its words were
        // answered by the turn that delegated, and the children's results
        // follow that turn's calls.
        let floor = transcript::Floor {
            at: turn.input_floor.filter(|_| !turn.resume),
            retry: turn.retry && !turn.resume,
            attempt_from: None,
        };
        let reading = |e: agentos_schema::DbError| {
            RpcError::internal(format!("reading the session: {}", e.code()))
        };
        // Where the log starts and what a delegated child was given, in one
        // read: the metadata serves the scope and the instructions below.
        let (oldest, metadata) = match self
            .store
            .floor_and_metadata(turn.session_id)
            .await
            .map_err(reading)?
        {
            Some((oldest, metadata)) => (Some(oldest), metadata),
            None => (None, None),
        };
        let mut transcript = transcript::rebuild_at(
            &self.store,
            &self.conversations,
            turn.session_id,
            floor,
            held,
            oldest,
        )
        .await
        .map_err(|e| RpcError::internal(format!("reading the session's log: {}", e.code())))?;
        let delegated = delegate_of(metadata);
        let scope = scope_of(
            &resolved,
            turn.session_id,
            Actor::Agent,
            turn.run_id,
            None,
            &delegated,
        );
        let promoted = std::mem::take(&mut transcript.promoted);
        let tools = self
            .verbs
            .provider_tools(&scope, &promoted)
            .await
            .map_err(|e| RpcError::internal(e.to_string()))?;
        let index = self.verbs.space_index(&scope).await;
        let instructions = prompt::instructions(
            &resolved.definition.system_prompt,
            self.verbs.hypermedia.as_ref(),
        )
        .await;
        let mut system_prompt = prompt::system_prompt(&instructions, &index);
        system_prompt.push_str(&prompt::signing_identities(
            &self.signing_identities(&resolved).await?,
        ));
        system_prompt.push_str(&self.conversation_members(&resolved).await?);
        if let Some(instructions) = delegated["instructions"].as_str() {
            system_prompt.push_str("\n\n<instructions>\n");
            system_prompt.push_str(instructions);
            system_prompt.push_str("\n</instructions>");
        }
        let floor_actor = transcript.floor_actor.clone();
        let (transcript, basis) = transcript.for_agent();
        let prompt_sender = match (turn.input_floor.filter(|_| !turn.resume), floor_actor) {
            (Some(_), Some(actor)) => signed_sender(actor),
            (Some(at), None) => self.prompt_sender(turn.session_id, at).await,
            (None, _) => None,
        };
        Ok(TurnContext {
            agent_id: resolved.agent.agent_id.clone(),
            system_prompt,
            provider: ProviderRef {
                name: resolved.provider_name.clone(),
                provider_type,
                base_url,
                model: resolved.definition.model.clone(),
                public_only,
            },
            tools,
            transcript,
            basis,
            max_tokens: MAX_TOKENS,
            resume: turn.resume,
            provider_retries: Some(self.endpoints.provider_retries),
            prompt_sender,
        })
    }

    /// The reference's `<conversation_members>` block, for an agent with
    /// accepted collaborators (none: nothing, and no lookups): its owner
    /// and them, oldest first, with their display names when the
    /// hypermedia server knows them.
    async fn conversation_members(&self, resolved: &Resolved) -> Result<String, RpcError> {
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Member {
            account_id: String,
            role: &'static str,
            #[serde(skip_serializing_if = "Option::is_none")]
            display_name: Option<String>,
        }
        let mut collaborators: Vec<_> = self
            .control
            .list_collaborators(&resolved.agent.agent_id)
            .await
            .map_err(|e| RpcError::internal(e.to_string()))?
            .into_iter()
            .filter(|c| c.status == crate::control::CollaboratorStatus::Accepted)
            .collect();
        if collaborators.is_empty() {
            return Ok(String::new());
        }
        collaborators.sort_by_key(|c| c.created_at_ms);
        let mut members = vec![Member {
            account_id: resolved.agent.account_id.clone(),
            role: "owner",
            display_name: None,
        }];
        members.extend(collaborators.into_iter().map(|c| Member {
            account_id: c.account_id,
            role: c.role.as_str(),
            display_name: None,
        }));
        if let Some(hypermedia) = self.verbs.hypermedia.as_ref() {
            let names = futures_util::future::join_all(
                members
                    .iter()
                    .map(|m| hypermedia.display_name(&m.account_id)),
            )
            .await;
            for (member, name) in members.iter_mut().zip(names) {
                member.display_name = name;
            }
        }
        let listed = serde_json::to_string_pretty(&members)
            .map_err(|e| RpcError::internal(e.to_string()))?;
        Ok(format!(
            "{}\n<conversation_members>\n{listed}\n</conversation_members>",
            prompt::CONVERSATION_MEMBERS
        ))
    }

    /// The signed account whose words open the running prompt (the event
    /// at its input floor), if a signed account sent them.
    async fn prompt_sender(&self, session_id: &str, at: u64) -> Option<String> {
        let events = self
            .store
            .events_between(session_id, at.saturating_sub(1), at, 1)
            .await
            .ok()?;
        signed_sender(events.into_iter().find(|e| e.sequence == at)?.actor)
    }

    async fn provider_key(&self, session_id: &str) -> Result<ProviderKey, RpcError> {
        let resolved = self.resolve(session_id).await?;
        self.open_key(&resolved.agent.account_id, resolved.provider()?)
            .await
    }

    /// For an agent on a subscription provider, its sign-in resolved (and
    /// refreshed) before a message is taken, as the reference does; other
    /// agents pass.
    pub async fn check_subscription(&self, agent_id: &str) -> Result<(), CredentialError> {
        let Ok(resolved) = self.resolve_agent(agent_id).await else {
            // What cannot be resolved fails the turn with its own words.
            return Ok(());
        };
        match &resolved.provider {
            Some(provider) if provider.auth_mode == Some(AuthMode::Subscription) => self
                .oauth
                .credentials(
                    &resolved.agent.account_id,
                    provider,
                    agentos_base::clock::unix_ms,
                )
                .await
                .map(drop),
            _ => Ok(()),
        }
    }

    /// Which API a provider's calls speak and where: a subscription's go to
    /// the Codex backend (`openai-codex`), the operator's address.
    fn route(&self, provider: &ModelProviderConfig) -> Result<(String, String, bool), RpcError> {
        if provider.auth_mode == Some(AuthMode::Subscription) {
            let base = self
                .oauth
                .endpoints()
                .codex
                .trim_end_matches('/')
                .to_owned();
            return Ok(("openai-codex".to_owned(), base, false));
        }
        // A record from before the names were reserved is not served.
        if super::oauth::RESERVED_TYPES.contains(&provider.provider_type.as_str()) {
            return Err(unservable(
                "provider_unconfigured",
                format!(
                    "provider type {:?} is reserved for subscription sign-in",
                    provider.provider_type
                ),
            ));
        }
        let (base_url, public_only) = self.endpoints.resolve(provider)?;
        Ok((provider.provider_type.clone(), base_url, public_only))
    }

    /// The provider's `secretRefs.apiKey`, opened; for a subscription, its
    /// access token (refreshed when it has expired) and ChatGPT account.
    async fn open_key(
        &self,
        account: &str,
        provider: &ModelProviderConfig,
    ) -> Result<ProviderKey, RpcError> {
        if provider.auth_mode == Some(AuthMode::Subscription) {
            let tokens = self
                .oauth
                .credentials(account, provider, agentos_base::clock::unix_ms)
                .await
                .map_err(|e| match e {
                    CredentialError::NeedsLogin => {
                        unservable("provider_needs_login", e.to_string())
                    }
                    CredentialError::Unconfigured(_) => {
                        unservable("provider_unconfigured", e.to_string())
                    }
                    CredentialError::Storage(_) => RpcError::internal(e.to_string()),
                })?;
            return Ok(ProviderKey {
                api_key: Some(tokens.access),
                account_id: Some(tokens.account_id),
            });
        }
        let Some(name) = provider
            .secret_refs
            .as_ref()
            .and_then(|refs| refs.get("apiKey"))
        else {
            return Ok(ProviderKey {
                api_key: None,
                account_id: None,
            });
        };
        let secret = self
            .control
            .secret_plaintext(account, name)
            .await
            .map_err(|e| match e {
                ControlError::VaultLocked => unservable(e.code(), e.to_string()),
                _ => unservable(e.code(), "the provider's key cannot be opened"),
            })?
            .ok_or_else(|| {
                unservable(
                    "secret_not_found",
                    format!("the provider's key secret {name:?} does not exist"),
                )
            })?;
        let key = std::str::from_utf8(secret.as_bytes())
            .map_err(|_| unservable("secret_not_text", "the provider's key is not UTF-8 text"))?;
        Ok(ProviderKey {
            api_key: Some(key.trim().to_owned()),
            account_id: None,
        })
    }
}

/// The signed account of an event's actor, if a signed account sent it.
fn signed_sender(actor: Actor) -> Option<String> {
    match actor {
        Actor::User {
            account: Some(account),
            ..
        } => Some(account),
        _ => None,
    }
}

/// What a delegated child's session was given (`delegate` in its
/// metadata), or null.
fn delegate_of(metadata: Option<Value>) -> Value {
    metadata
        .map(|m| m["delegate"].clone())
        .unwrap_or(Value::Null)
}

/// The verbs' scope of a session's turn, given what a delegated child was
/// given (`delegated`, from the session's metadata).
fn scope_of(
    resolved: &Resolved,
    session_id: &str,
    actor: Actor,
    run_id: Option<&str>,
    tool_call_id: Option<&str>,
    delegated: &Value,
) -> VerbScope {
    let tools: Option<Vec<String>> = delegated["tools"].as_array().map(|items| {
        items
            .iter()
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect()
    });
    VerbScope::new(resolved, session_id, actor)
        .for_run(run_id, tool_call_id)
        .restricted(tools.as_deref())
}

fn encode<T: serde::Serialize>(value: Result<T, RpcError>) -> Result<Value, RpcError> {
    value.and_then(|v| serde_json::to_value(v).map_err(|e| RpcError::internal(e.to_string())))
}

fn params<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, RpcError> {
    serde_json::from_value(params).map_err(|e| RpcError::invalid_params(e.to_string()))
}

#[async_trait::async_trait]
impl AgentHost for Host {
    async fn serve(
        &self,
        turn: TurnScope<'_>,
        method: &str,
        value: Value,
    ) -> Result<Value, RpcError> {
        match method {
            agent_ext::methods::CONTEXT => {
                let context: ContextParams = params(value)?;
                encode(self.context(turn, context.held.as_ref()).await)
            }
            agent_ext::methods::PROVIDER_KEY => encode(self.provider_key(turn.session_id).await),
            agent_ext::methods::VERB => {
                let call: VerbParams = params(value)?;
                let resolved = self.resolve(turn.session_id).await?;
                let scope = self
                    .verb_scope(
                        &resolved,
                        turn.session_id,
                        Actor::Agent,
                        turn.run_id,
                        Some(&call.tool_call_id),
                    )
                    .await?;
                encode(Ok(self.verbs.run(&scope, &call.name, call.input).await))
            }
            other => Err(RpcError::method_not_found(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(provider_type: &str, base_url: Option<&str>) -> ModelProviderConfig {
        ModelProviderConfig {
            provider_type: provider_type.into(),
            model_defaults: None,
            secret_refs: None,
            base_url: base_url.map(str::to_owned),
            auth_mode: None,
        }
    }

    #[test]
    fn public_providers_are_pinned_and_custom_ones_named() {
        let none = ProviderEndpoints::default();
        assert_eq!(
            none.resolve(&config("openai", Some("http://evil.example")))
                .unwrap(),
            ("https://api.openai.com/v1".to_owned(), false)
        );
        // A client's endpoint must be public unless the operator allows more.
        assert_eq!(
            none.resolve(&config("custom", Some("http://127.0.0.1:9/v1/")))
                .unwrap(),
            ("http://127.0.0.1:9/v1".to_owned(), true)
        );
        assert_eq!(
            none.resolve(&config("ollama", None)).unwrap(),
            (OLLAMA_DEFAULT.to_owned(), true)
        );
        assert!(none.resolve(&config("custom", None)).is_err());
        let pinned = ProviderEndpoints {
            pinned: BTreeMap::from([("anthropic".to_owned(), "http://127.0.0.1:1".to_owned())]),
            allow_private: true,
            provider_retries: 0,
        };
        assert_eq!(
            pinned.resolve(&config("anthropic", None)).unwrap(),
            ("http://127.0.0.1:1".to_owned(), false)
        );
        assert_eq!(
            pinned.resolve(&config("ollama", None)).unwrap(),
            (OLLAMA_DEFAULT.to_owned(), false)
        );
    }
}
