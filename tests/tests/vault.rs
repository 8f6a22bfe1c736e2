//! The host's launch contract: a VM launched with its one database
//! descriptor and nothing else starts and serves. On `actor_uds` it has no
//! secrets key (the key must not live with the host's database), so its
//! vault is locked: `vm/status` says so, start-up warns once, and what
//! needs a secret (`SetSecret`, `secrets rotate-key`) answers a typed error
//! naming `secrets.keyFile`, while sessions, the file system and every
//! signed action that needs no secret work. With a key given, the same
//! store seals secrets. A `sqlite_file` VM keeps its key beside its
//! database file, so its vault opens on its own.

mod common;

use agentos_tests::http::Target;
use agentos_tests::seed::{bytes, call, Signer};
use common::{Backend, Options, Sidecar};
use serde_json::json;

fn descriptor_only() -> Options {
    Options {
        config: json!({"http": {"listen": "127.0.0.1:0"}}),
        no_secrets_key: true,
        ..Options::default()
    }
}

fn set_secret(name: &str) -> serde_json::Value {
    json!({"_": "SetSecret", "name": name, "value": bytes("secret")})
}

fn warnings_about_the_vault(sc: &Sidecar) -> usize {
    std::fs::read_to_string(sc.dir.path().join("sidecar.stderr"))
        .expect("stderr")
        .lines()
        .filter(|line| line.contains("WARN") && line.contains("the vault is locked"))
        .count()
}

async fn launch_with_the_descriptor_alone(backend: Backend) {
    let locked = backend != Backend::SqliteFile;
    let sc = Sidecar::start_with(backend, descriptor_only()).await;
    let t = Target::from_ready(sc.ready["http"].as_str().expect("http"));

    // Sessions and the file system are served.
    sc.open("s", "echo").await;
    sc.prompt("s", "echo kept").await.expect("a turn");
    assert!(sc
        .history("s")
        .await
        .iter()
        .any(|e| common::text_of(e) == "kept"));
    sc.ok("fs/write", json!({"path": "/notes.txt", "data": "aGk="}))
        .await;
    let read = sc.ok("fs/read", json!({"path": "/notes.txt"})).await;
    assert_eq!(read["data"], "aGk=", "{read}");
    let status = sc.ok("vm/status", json!({})).await;
    assert_eq!(status["secrets"]["locked"], json!(locked), "{status}");
    assert_eq!(status["secrets"]["setting"], "secrets.keyFile");
    assert_eq!(warnings_about_the_vault(&sc), usize::from(locked));

    // A signed action that needs no secret works; one that does is refused
    // with the typed error, and the process stays up.
    let owner = Signer::new();
    let agent = call(
        &t,
        &owner,
        json!({"_": "CreateAgent", "definition": {"name": "Helper", "adapter": "echo",
               "systemPrompt": "Be brief.", "modelProvider": "openai", "model": "m"}}),
    )
    .await;
    assert_eq!(agent.status, 200, "{:?}", agent.body);
    let secret = call(&t, &owner, set_secret("k")).await;
    if locked {
        assert_eq!((secret.status, secret.code()), (503, "vault_locked".into()));
        assert!(
            secret.text("message").contains("secrets.keyFile"),
            "{:?}",
            secret.body
        );
    } else {
        assert_eq!(secret.status, 200, "{:?}", secret.body);
    }
    let listed = call(&t, &owner, json!({"_": "ListSecrets"})).await;
    assert_eq!(listed.status, 200, "{:?}", listed.body);
    assert!(sc.ok("vm/status", json!({})).await["uptimeMs"].is_u64());

    // Given a key, the same store seals secrets; what was served before is
    // all there.
    let sc = sc
        .restart(Options {
            config: json!({"http": {"listen": "127.0.0.1:0"}}),
            ..Options::default()
        })
        .await;
    let t = Target::from_ready(sc.ready["http"].as_str().expect("http"));
    assert_eq!(
        sc.ok("vm/status", json!({})).await["secrets"]["locked"],
        false
    );
    let secret = call(&t, &owner, set_secret("k2")).await;
    assert_eq!(secret.status, 200, "{:?}", secret.body);
    assert!(sc
        .history("s")
        .await
        .iter()
        .any(|e| common::text_of(e) == "kept"));
}

all_backends!(launch_with_the_descriptor_alone);

/// `secrets rotate-key` on an `actor_uds` VM without a key names the
/// setting instead of inventing a key beside the host's database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_a_locked_vault_names_the_setting() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("vm.json");
    std::fs::write(
        &config,
        json!({"database": {"type": "actor_uds", "path": dir.path().join("actor.sock")},
               "socket": dir.path().join("host.sock")})
        .to_string(),
    )
    .expect("config");
    let out = tokio::process::Command::new(common::binary("agentos-sidecar"))
        .args(["secrets", "rotate-key", "--config"])
        .arg(&config)
        .env_remove("AGENTOS_SECRETS_KEY")
        .output()
        .await
        .expect("run rotate-key");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid_config") && stderr.contains("secrets.keyFile"),
        "{stderr}"
    );
    assert!(
        std::fs::read_dir(dir.path()).expect("dir").all(|e| !e
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .contains("key")),
        "no key file was made"
    );
}
