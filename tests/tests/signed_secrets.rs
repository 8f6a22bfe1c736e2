//! Secrets never leak, end to end. Every secret value is a unique marker;
//! after every action that touches secrets, providers, agents and sessions
//! (as the owner and as a collaborator), the marker is looked for in every
//! response body, in every frame of a WebSocket subscribed to the account's,
//! the agent's and the session's keys, in the sidecar's debug log, and in
//! every file of the data
//! directory (the database, its WAL, the key file, adapters' directories),
//! as text, hex, base64 and a byte list. It is never there.
//!
//! Also: a value over 64 KiB is 413 `secret_too_large`; the key file beside
//! the database is created 0600; a restart with the same key still lists
//! the secrets (redacted); `DeleteModelProvider` removes the secrets no
//! other provider of the account refers to and keeps a shared one.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use agentos_protocol::seed::Ipld;
use agentos_tests::http::Target;
use agentos_tests::seed::{bytes, call, field, Answer, Signer};
use base64::Engine;
use common::{Backend, Options, Sidecar};
use serde_json::{json, Value};

fn options() -> Options {
    Options {
        // Providers point at a closed loopback port: a listing never leaves
        // the machine, and fails as unreachable.
        config: json!({
            "http": {"listen": "127.0.0.1:0"},
            "builtin": {"providerEndpoints": {
                "openai": "http://127.0.0.1:1/v1",
                "anthropic": "http://127.0.0.1:1",
            }},
        }),
        env: vec![("AGENTOS_LOG".into(), "debug".into())],
        ..Options::default()
    }
}

/// Every secret value written, and each answer seen, for the final search.
#[derive(Default)]
struct Watch {
    markers: Vec<String>,
    bodies: Vec<Vec<u8>>,
}

impl Watch {
    fn marker(&mut self, what: &str) -> String {
        let marker = format!("mk-{what}-{}", uuid::Uuid::new_v4().simple());
        self.markers.push(marker.clone());
        marker
    }

    async fn send(&mut self, t: &Target, who: &Signer, action: Value) -> Answer {
        let answer = call(t, who, action).await;
        self.bodies.push(answer.raw.body.clone());
        answer
    }

    async fn ok(&mut self, t: &Target, who: &Signer, action: Value) -> Answer {
        let answer = self.send(t, who, action.clone()).await;
        assert_eq!(answer.status, 200, "{action}: {:?}", answer.body);
        answer
    }

    /// The ways a value could show up in bytes.
    fn forms(&self) -> Vec<(String, Vec<u8>)> {
        let mut forms = Vec::new();
        for marker in &self.markers {
            let bytes = marker.as_bytes();
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            let list = bytes[..8]
                .iter()
                .map(u8::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
            forms.push((format!("{marker} as text"), bytes.to_vec()));
            forms.push((format!("{marker} as hex"), hex.clone().into_bytes()));
            forms.push((
                format!("{marker} as HEX"),
                hex.to_ascii_uppercase().into_bytes(),
            ));
            // The first 24 characters do not depend on what follows.
            forms.push((format!("{marker} as base64"), b64.as_bytes()[..24].to_vec()));
            forms.push((format!("{marker} as a byte list"), list.into_bytes()));
        }
        forms
    }

    /// The first form of a marker that `haystack` holds.
    fn found(&self, haystack: &[u8]) -> Option<String> {
        self.forms()
            .into_iter()
            .find(|(_, needle)| {
                haystack
                    .windows(needle.len())
                    .any(|w| w == needle.as_slice())
            })
            .map(|(form, _)| form)
    }

    fn assert_absent(&self, what: &str, haystack: &[u8]) {
        if let Some(form) = self.found(haystack) {
            panic!("{form} found in {what}");
        }
    }

    /// Searches every answer so far and every file under `dir`.
    fn assert_nowhere(&self, dir: &Path) {
        for (i, body) in self.bodies.iter().enumerate() {
            self.assert_absent(&format!("answer {i}"), body);
        }
        let mut files = 0;
        let mut stack = vec![dir.to_path_buf()];
        while let Some(path) = stack.pop() {
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                for entry in std::fs::read_dir(&path).expect("read dir") {
                    stack.push(entry.expect("entry").path());
                }
            } else if meta.is_file() {
                let bytes = std::fs::read(&path).expect("read file");
                self.assert_absent(&path.display().to_string(), &bytes);
                files += 1;
            }
        }
        assert!(dir.join("sidecar.stderr").is_file(), "the log was searched");
        let db = std::fs::metadata(dir.join("vm.sqlite")).expect("the database");
        assert!(db.len() > 0 && files >= 4, "{files} files searched");
    }
}

fn names(answer: &Answer, list: &str) -> Vec<String> {
    let Ipld::List(items) = answer.field(list) else {
        panic!("{list}: {:?}", answer.body)
    };
    let mut names: Vec<String> = items
        .iter()
        .map(|item| match field(item, "name") {
            Ipld::String(name) => name.clone(),
            other => panic!("name: {other:?}"),
        })
        .collect();
    names.sort();
    names
}

async fn secrets_never_leak(backend: Backend) {
    let sc = Sidecar::start_with(backend, options()).await;
    let t = sc.api();
    let owner = Signer::new();
    let mut w = Watch::default();

    // The key file beside the database: created at start, 0600, 32 bytes.
    let key_path = sc.dir.path().join("secrets.key");
    let key_meta = std::fs::metadata(&key_path).expect("the key file exists");
    assert_eq!(key_meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(key_meta.len(), 32);
    let key_before = std::fs::read(&key_path).expect("key");

    let own = w.marker("own");
    let shared = w.marker("shared");
    let kept = w.marker("kept");
    for (name, value) in [("own-key", &own), ("shared-key", &shared), ("kept", &kept)] {
        let set = w
            .ok(
                &t,
                &owner,
                json!({"_": "SetSecret", "name": name, "value": bytes(value),
                       "metadata": {"label": name}}),
            )
            .await;
        let secret = set.field("secret");
        assert_eq!(field(secret, "hasValue"), &Ipld::Bool(true));
        assert_eq!(field(secret, "name"), &Ipld::String(name.into()));
        assert_eq!(field(secret, "value"), &Ipld::Null);
    }
    // The search finds what it looks for: the request itself holds it.
    let request = owner.sign(&json!({"_": "SetSecret", "name": "n", "value": bytes(&own)}));
    assert!(w.found(&request).is_some());
    // Replacing a value leaves one secret of that name.
    let replaced = w.marker("replaced");
    w.ok(
        &t,
        &owner,
        json!({"_": "SetSecret", "name": "own-key", "value": bytes(&replaced)}),
    )
    .await;
    let too_big = w.marker("too-big").repeat(64 * 1024 / 40 + 2);
    assert!(too_big.len() > 64 * 1024);
    let refused = w
        .send(
            &t,
            &owner,
            json!({"_": "SetSecret", "name": "big", "value": bytes(&too_big)}),
        )
        .await;
    assert_eq!(
        (refused.status, refused.code()),
        (413, "secret_too_large".into())
    );
    let exactly = "x".repeat(64 * 1024);
    w.ok(
        &t,
        &owner,
        json!({"_": "SetSecret", "name": "big", "value": bytes(&exactly)}),
    )
    .await;

    for (name, kind, secret) in [
        ("openai", "openai", "own-key"),
        ("anthropic", "anthropic", "shared-key"),
        ("local", "custom", "shared-key"),
    ] {
        let set = w
            .ok(
                &t,
                &owner,
                json!({"_": "SetModelProvider", "name": name,
                       "provider": {"type": kind, "secretRefs": {"apiKey": secret},
                                    "baseUrl": "http://127.0.0.1:9/v1"}}),
            )
            .await;
        let provider = set.field("provider");
        assert_eq!(field(provider, "hasSecrets"), &Ipld::Bool(true));
        assert_eq!(field(provider, "secretRefs"), &Ipld::Null);
    }
    let listed = w.ok(&t, &owner, json!({"_": "ListSecrets"})).await;
    assert_eq!(
        names(&listed, "secrets"),
        ["big", "kept", "own-key", "shared-key"]
    );
    let listed = w.ok(&t, &owner, json!({"_": "ListModelProviders"})).await;
    assert_eq!(
        names(&listed, "providers"),
        ["anthropic", "local", "openai"]
    );
    // Listing models is a call to the provider, which cannot be reached.
    let models = w
        .send(
            &t,
            &owner,
            json!({"_": "ListProviderModels", "provider": "openai"}),
        )
        .await;
    assert_eq!(
        (models.status, models.code()),
        (502, "provider_unreachable".into())
    );
    let models = w
        .send(
            &t,
            &owner,
            json!({"_": "ListProviderModels", "provider": "nope"}),
        )
        .await;
    assert_eq!(models.status, 404);

    // An agent on that provider, its sessions and a turn that prints the
    // adapter's whole environment.
    let agent = w
        .ok(
            &t,
            &owner,
            json!({"_": "CreateAgent", "definition": {"name": "Keyed", "systemPrompt": "p",
                   "modelProvider": "openai", "model": "gpt-5-mini", "adapter": "echo"}}),
        )
        .await
        .text("agentId");
    let writer = Signer::new();
    w.ok(
        &t,
        &owner,
        json!({"_": "InviteAgentCollaborator", "agentId": agent,
               "accountId": writer.id(), "role": "writer"}),
    )
    .await;
    w.ok(
        &t,
        &writer,
        json!({"_": "AcceptAgentInvite", "agentId": agent}),
    )
    .await;
    w.ok(&t, &owner, json!({"_": "GetAgent", "agentId": agent}))
        .await;
    let session = w
        .ok(&t, &owner, json!({"_": "CreateSession", "agentId": agent}))
        .await
        .text("sessionId");
    // Every WebSocket key of this account sees the rest: its frames are
    // searched too.
    let frames = Frames::collect(
        &t,
        &owner,
        &[
            format!("account/{}", owner.id()),
            format!("agents/{agent}"),
            format!("sessions/{session}"),
        ],
        // The turns below append six events; the sixth comes last.
        |f| f.contains("\"append\"") && f.contains("\"seq\":6"),
    )
    .await;
    for (who, text) in [(&owner, "env"), (&writer, "cwd"), (&writer, "echo hello")] {
        w.ok(
            &t,
            who,
            json!({"_": "MessageSession", "sessionId": session,
                   "content": [{"type": "text", "text": text}]}),
        )
        .await;
    }
    let got = w
        .ok(&t, &owner, json!({"_": "GetSession", "sessionId": session}))
        .await;
    let Ipld::List(events) = got.field("events") else {
        panic!("events")
    };
    assert_eq!(events.len(), 6, "{:?}", got.body);
    w.ok(&t, &owner, json!({"_": "ListSessions"})).await;
    w.ok(&t, &owner, json!({"_": "ListAgents"})).await;
    // A collaborator sees the owner's providers for the agent, redacted.
    let theirs = w
        .ok(
            &t,
            &writer,
            json!({"_": "ListModelProviders", "agentId": agent}),
        )
        .await;
    assert_eq!(
        names(&theirs, "providers"),
        ["anthropic", "local", "openai"]
    );
    let mine = w.ok(&t, &writer, json!({"_": "ListModelProviders"})).await;
    assert!(names(&mine, "providers").is_empty());
    let theirs = w
        .send(
            &t,
            &writer,
            json!({"_": "ListProviderModels", "provider": "openai", "agentId": agent}),
        )
        .await;
    assert_eq!(theirs.status, 502);
    // Nobody else's secrets are listed to the writer.
    let none = w.ok(&t, &writer, json!({"_": "ListSecrets"})).await;
    assert!(names(&none, "secrets").is_empty());

    // Deleting a provider removes the secrets only it used.
    let gone = w
        .ok(
            &t,
            &owner,
            json!({"_": "DeleteModelProvider", "name": "openai"}),
        )
        .await;
    assert_eq!(gone.text("name"), "openai");
    let listed = w.ok(&t, &owner, json!({"_": "ListSecrets"})).await;
    assert_eq!(names(&listed, "secrets"), ["big", "kept", "shared-key"]);
    w.ok(
        &t,
        &owner,
        json!({"_": "DeleteModelProvider", "name": "anthropic"}),
    )
    .await;
    let listed = w.ok(&t, &owner, json!({"_": "ListSecrets"})).await;
    assert_eq!(names(&listed, "secrets"), ["big", "kept", "shared-key"]);
    w.ok(
        &t,
        &owner,
        json!({"_": "DeleteModelProvider", "name": "local"}),
    )
    .await;
    let listed = w.ok(&t, &owner, json!({"_": "ListSecrets"})).await;
    assert_eq!(names(&listed, "secrets"), ["big", "kept"]);
    let again = w
        .send(
            &t,
            &owner,
            json!({"_": "DeleteModelProvider", "name": "local"}),
        )
        .await;
    assert_eq!(again.status, 404);
    w.ok(&t, &owner, json!({"_": "DeleteSecret", "name": "big"}))
        .await;
    let again = w
        .send(&t, &owner, json!({"_": "DeleteSecret", "name": "big"}))
        .await;
    assert_eq!(again.status, 404);

    // Nothing so far holds a value, in any answer, frame or file (the WAL
    // is still there while the sidecar runs).
    let frames = frames.finish().await;
    assert!(
        frames.iter().any(|f| f.contains("\"append\"")),
        "the session's events came: {frames:?}"
    );
    for frame in &frames {
        w.assert_absent("a WebSocket frame", frame.as_bytes());
    }
    w.assert_nowhere(sc.dir.path());

    // A restart with the same key file still has the secret, redacted.
    let sc = sc.restart(options()).await;
    let t = sc.api();
    assert_eq!(std::fs::read(&key_path).expect("key"), key_before);
    let listed = w.ok(&t, &owner, json!({"_": "ListSecrets"})).await;
    assert_eq!(names(&listed, "secrets"), ["kept"]);
    let Ipld::List(items) = listed.field("secrets") else {
        panic!()
    };
    assert_eq!(field(&items[0], "hasValue"), &Ipld::Bool(true));
    assert_eq!(
        field(&items[0], "metadata"),
        &Ipld::Map([("label".to_owned(), Ipld::String("kept".into()))].into())
    );
    w.ok(
        &t,
        &owner,
        json!({"_": "SetModelProvider", "name": "again",
               "provider": {"type": "openai", "secretRefs": {"apiKey": "kept"}}}),
    )
    .await;
    w.assert_nowhere(sc.dir.path());
}

/// Frames of one WebSocket subscribed to some keys, read until the frame
/// known to come last.
struct Frames {
    task: tokio::task::JoinHandle<Vec<String>>,
}

impl Frames {
    async fn collect(
        t: &Target,
        signer: &Signer,
        keys: &[String],
        last: impl Fn(&str) -> bool + Send + 'static,
    ) -> Frames {
        use futures_util::{SinkExt, StreamExt};
        use tokio_tungstenite::tungstenite::Message;
        let Target::Tcp(addr) = t else {
            panic!("a TCP listener")
        };
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/agents/ws"))
            .await
            .expect("connect");
        let mut frames = Vec::new();
        for key in keys {
            let envelope = signer.sign(&json!({"_": "Subscribe", "key": key}));
            ws.send(Message::Binary(envelope.into()))
                .await
                .expect("send");
            loop {
                let Some(Ok(Message::Text(text))) = ws.next().await else {
                    panic!("the socket ended")
                };
                let text = text.to_string();
                let done = text.contains("\"subscribed\"");
                frames.push(text);
                if done {
                    break;
                }
            }
        }
        let task = tokio::spawn(async move {
            while let Some(message) = ws.next().await {
                match message {
                    Ok(Message::Text(text)) => {
                        let text = text.to_string();
                        let done = last(&text);
                        frames.push(text);
                        if done {
                            break;
                        }
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            frames
        });
        Frames { task }
    }

    async fn finish(self) -> Vec<String> {
        tokio::time::timeout(common::PATIENCE, self.task)
            .await
            .expect("the last frame came in time")
            .expect("frames")
    }
}

both_backends!(secrets_never_leak);
