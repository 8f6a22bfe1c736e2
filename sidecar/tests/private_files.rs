//! Files are private whatever the umask: the data directory, the database
//! with its WAL and SHM, and the `ars-serve` database; and a regular file at
//! a socket path is refused, never replaced.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use agentos_sidecar::config::Config;
use agentos_sidecar::host::HostServer;
use agentos_sidecar::vm::Vm;
use agentos_storage::ars_server::{self, ArsServerOptions};
use serde_json::json;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// The permissive umask the reproduction ran under.
fn permissive_umask() {
    // SAFETY: umask(2) only swaps the process's file-creation mask.
    unsafe { libc::umask(0o022) };
}

fn config(db: &Path, socket: &Path) -> Config {
    Config::from_json(
        &json!({
            "database": {"type": "sqlite_file", "path": db},
            "socket": socket,
        })
        .to_string(),
    )
    .expect("config")
}

#[tokio::test]
async fn the_data_directory_and_database_files_are_private() {
    permissive_umask();
    let root = tempfile::tempdir().expect("temp dir");
    let data = root.path().join("data");
    let db = data.join("vm.sqlite");
    let vm = Vm::open(config(&db, &data.join("h.sock")))
        .await
        .expect("open");
    // Something written, so the WAL and SHM exist.
    vm.sessions
        .open(agentos_sidecar::sessions::OpenSession {
            agent: "none".into(),
            ..Default::default()
        })
        .await
        .expect_err("no such agent, but the database is open");
    assert_eq!(mode(&data), 0o700);
    for file in agentos_base::private::database_files(&db) {
        if file.exists() {
            assert_eq!(mode(&file), 0o600, "{}", file.display());
        }
    }
    assert_eq!(mode(&db), 0o600);
    vm.db.close().await;
}

#[tokio::test]
async fn a_database_left_world_readable_is_made_private() {
    permissive_umask();
    let root = tempfile::tempdir().expect("temp dir");
    let db = root.path().join("vm.sqlite");
    std::fs::write(&db, b"").expect("empty db");
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let vm = Vm::open(config(&db, &root.path().join("h.sock")))
        .await
        .expect("open");
    assert_eq!(mode(&db), 0o600);
    vm.db.close().await;
}

#[tokio::test]
async fn ars_serve_keeps_its_database_and_socket_private() {
    permissive_umask();
    let root = tempfile::tempdir().expect("temp dir");
    let db = root.path().join("ars.sqlite");
    let socket = root.path().join("ars.sock");
    let handle = ars_server::bind(&db, &socket, ArsServerOptions::default())
        .await
        .expect("bind");
    assert_eq!(mode(&db), 0o600);
    assert_eq!(mode(&socket), 0o600);
    handle.shutdown().await;
}

#[tokio::test]
async fn a_regular_file_at_the_socket_path_is_never_replaced() {
    let root = tempfile::tempdir().expect("temp dir");
    let precious = root.path().join("precious.sock");
    std::fs::write(&precious, "keep me").expect("file");
    // ars-serve.
    let err = ars_server::bind(
        &root.path().join("ars.sqlite"),
        &precious,
        ArsServerOptions::default(),
    )
    .await
    .err()
    .expect("refused");
    assert!(err.to_string().contains("not a socket"), "{err}");
    assert_eq!(std::fs::read_to_string(&precious).expect("kept"), "keep me");
    // The host socket.
    let vm: Arc<Vm> = Vm::open(config(&root.path().join("vm.sqlite"), &precious))
        .await
        .expect("open");
    let err = HostServer::bind(&precious, vm.host_services(), Default::default())
        .err()
        .expect("refused");
    assert!(err.to_string().contains("not a socket"), "{err}");
    assert_eq!(std::fs::read_to_string(&precious).expect("kept"), "keep me");
    // The process is fine: the store still answers.
    vm.sessions.status().await.expect("status");
    vm.db.close().await;
}
