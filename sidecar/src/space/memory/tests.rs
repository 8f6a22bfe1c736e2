use agentos_schema::migrate_all;

use super::*;
use crate::config::FsLimits;
use agentos_storage::testing::{sqlite_file, TestDb};
use agentos_vfs::VfsPolicy;

/// A VM whose sessions may touch only `/work` (and `/work/ro` read-only):
/// memory is reached anyway, through the reserved view.
async fn memory_with(limits: FsLimits) -> (TestDb, Vfs, AgentMemory) {
    let test = sqlite_file().await;
    migrate_all(test.db.as_ref()).await.expect("migrate");
    let policy = VfsPolicy {
        roots: vec!["/work".into()],
        read_only: vec!["/.agentos".into()],
    };
    let vfs = Vfs::open(test.db.clone(), limits.validated().expect("limits"), policy)
        .await
        .expect("vfs");
    let memory = AgentMemory::new(&vfs);
    (test, vfs, memory)
}

async fn memory() -> (TestDb, Vfs, AgentMemory) {
    memory_with(FsLimits::default()).await
}

#[test]
fn paths_are_relative_normalised_and_bounded() {
    assert_eq!(normalize("notes//today.md").unwrap(), "notes/today.md");
    assert_eq!(normalize("./a/./b/").unwrap(), "a/b");
    assert_eq!(normalize("").unwrap(), "");
    // As the reference: a leading `/` is dropped, `\` separates.
    assert_eq!(normalize("/etc/passwd").unwrap(), "etc/passwd");
    assert_eq!(normalize("a\\b.md").unwrap(), "a/b.md");
    let deep = vec!["d"; MAX_PATH_DEPTH + 1].join("/");
    let long = "x".repeat(MAX_PATH_BYTES + 1);
    let segment = "y".repeat(256);
    for (bad, words) in [
        ("a/../../b", "Memory path cannot contain \"..\""),
        ("..", "Memory path cannot contain \"..\""),
        ("a\0b", "Memory path contains an invalid character"),
        (deep.as_str(), "Memory path is nested too deeply"),
        (long.as_str(), "Memory path is too long"),
        (segment.as_str(), "Memory path is too long"),
    ] {
        let error = normalize(bad).unwrap_err();
        assert_eq!(error.code(), "invalid_path", "{bad}");
        assert_eq!(error.to_string(), words, "{bad}");
    }
    assert!(normalize(&vec!["d"; MAX_PATH_DEPTH].join("/")).is_ok());
    assert_eq!(
        entry_path("./").unwrap_err().to_string(),
        "Memory path is required"
    );
    assert_eq!(
        AgentMemory::root("../x").unwrap_err().code(),
        "invalid_argument"
    );
    assert_eq!(
        AgentMemory::root("a-1").unwrap(),
        "/.agentos/agents/a-1/memory"
    );
}

#[test]
fn known_extensions_have_mime_types() {
    assert_eq!(mime_type("notes/today.MD"), Some("text/markdown"));
    assert_eq!(mime_type("pic.png"), Some("image/png"));
    assert_eq!(mime_type("noext"), None);
    assert_eq!(mime_type("dir.d/file"), None);
    assert_eq!(mime_type("archive.unknown"), None);
}

#[tokio::test]
async fn files_are_written_listed_read_and_deleted() {
    let (_test, vfs, memory) = memory().await;
    assert_eq!(memory.list("a1").await.unwrap(), Vec::new());
    assert_eq!(memory.total_bytes("a1").await.unwrap(), 0);
    assert!(!memory.delete("a1", "nothing").await.unwrap());

    let entry = memory
        .write("a1", "notes/today.md", b"# Today\n")
        .await
        .unwrap();
    assert_eq!(entry.path, "notes/today.md");
    assert!(!entry.is_dir);
    assert_eq!(entry.size, 8);
    memory
        .write("a1", "pic.bin", &[0, 159, 146, 150])
        .await
        .unwrap();
    memory
        .write("a1", "notes/deep/er/x.txt", b"x")
        .await
        .unwrap();

    let listed = memory.list("a1").await.unwrap();
    let paths: Vec<(&str, bool)> = listed.iter().map(|e| (e.path.as_str(), e.is_dir)).collect();
    assert_eq!(
        paths,
        [
            ("notes", true),
            ("notes/deep", true),
            ("notes/deep/er", true),
            ("notes/deep/er/x.txt", false),
            ("notes/today.md", false),
            ("pic.bin", false),
        ]
    );
    assert_eq!(memory.total_bytes("a1").await.unwrap(), 13);
    let top: Vec<String> = memory
        .list_dir("a1", "")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.path)
        .collect();
    assert_eq!(top, ["notes", "pic.bin"]);
    let inner = memory.list_dir("a1", "notes/").await.unwrap();
    assert_eq!(inner.len(), 2);
    assert_eq!(
        memory.list_dir("a1", "missing").await.unwrap_err().code(),
        "not_found"
    );

    let file = memory.read("a1", "./notes/today.md", 1024).await.unwrap();
    assert_eq!(
        (file.path.as_str(), file.data.as_slice()),
        ("notes/today.md", &b"# Today\n"[..])
    );
    let too_large = memory.read("a1", "pic.bin", 3).await.unwrap_err();
    assert_eq!(too_large.code(), "too_large");
    let dir = memory.read("a1", "notes", 1024).await.unwrap_err();
    assert_eq!(dir.code(), "conflict");
    let missing = memory.read("a1", "notes/none.md", 1024).await.unwrap_err();
    assert_eq!(missing.code(), "not_found");
    assert_eq!(missing.to_string(), "notes/none.md not found");

    // Replacing is whole; a file where a directory is needed is a conflict.
    memory.write("a1", "notes/today.md", b"new").await.unwrap();
    assert_eq!(
        memory.read("a1", "notes/today.md", 9).await.unwrap().data,
        b"new"
    );
    let over_file = memory.write("a1", "pic.bin/inner", b"x").await.unwrap_err();
    assert_eq!(over_file.code(), "conflict");
    assert!(!over_file.to_string().contains(".agentos"), "{over_file}");

    // Memory is a private subtree: agents are apart, and it is where the
    // file system says.
    assert_eq!(memory.list("a2").await.unwrap(), Vec::new());
    let raw = vfs
        .reserved_view()
        .read_all("/.agentos/agents/a1/memory/pic.bin")
        .await
        .unwrap();
    assert_eq!(raw, [0, 159, 146, 150]);
    assert_eq!(
        vfs.stat("/.agentos/agents/a1/memory")
            .await
            .unwrap_err()
            .code()
            .as_str(),
        "EACCES"
    );

    assert!(memory.delete("a1", "notes").await.unwrap());
    assert!(!memory.delete("a1", "notes").await.unwrap());
    assert_eq!(memory.list("a1").await.unwrap().len(), 1);
    assert!(memory.delete_agent("a1").await.unwrap());
    assert!(!memory.delete_agent("a1").await.unwrap());
    assert_eq!(memory.list("a1").await.unwrap(), Vec::new());
}

#[tokio::test]
async fn a_link_cannot_lead_out_of_an_agents_memory() {
    let (_test, vfs, memory) = memory().await;
    memory.write("a1", "secret.md", b"mine").await.unwrap();
    memory.write("a2", "readme.md", b"yours").await.unwrap();
    vfs.reserved_view()
        .symlink(
            "/.agentos/agents/a1/memory/secret.md",
            "/.agentos/agents/a2/memory/link.md",
        )
        .await
        .unwrap();
    let error = memory.read("a2", "link.md", 1024).await.unwrap_err();
    assert_eq!(error.code(), "invalid_path", "{error}");
    let error = memory
        .write("a2", "link.md", b"overwrite")
        .await
        .unwrap_err();
    assert_eq!(error.code(), "invalid_path", "{error}");
    assert_eq!(
        memory.read("a1", "secret.md", 9).await.unwrap().data,
        b"mine"
    );
    // Links are not memory entries.
    let listed: Vec<String> = memory
        .list("a2")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.path)
        .collect();
    assert_eq!(listed, ["readme.md"]);
}

#[tokio::test]
async fn the_file_systems_bounds_apply_and_name_their_setting() {
    let limits = FsLimits {
        max_file_bytes: 16,
        ..FsLimits::default()
    };
    let (_test, _vfs, memory) = memory_with(limits).await;
    let error = memory.write("a1", "big.bin", &[0; 17]).await.unwrap_err();
    assert_eq!(error.code(), "limit");
    assert_eq!(error.setting(), Some("limits.fs.maxFileBytes"));
}
