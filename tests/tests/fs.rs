//! The VFS through every door, on both backends: adapters over ACP `fs/*`
//! (limited to the session's directories), the host `fs/*` methods with
//! their typed errors, and `ctl fs` including a whole-tree import/export.

mod common;

use common::{binary, data_code, Backend, Sidecar};
use serde_json::json;

const B64_HELLO: &str = "aGVsbG8="; // "hello"

async fn adapters_use_the_vfs_within_their_roots(backend: Backend) {
    let sc = Sidecar::start(backend).await;
    sc.ok(
        "sessions/open",
        json!({"sessionId": "fs", "agent": "echo", "cwd": "/home/agentos"}),
    )
    .await;
    let wrote = sc
        .prompt(
            "fs",
            "fs_write /home/agentos/notes/today.txt remember the walrus",
        )
        .await;
    // The parent directory does not exist yet: a typed error reaches the agent.
    let wrote = wrote.expect("turn");
    let text = wrote["message"]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    assert!(text.contains("ENOENT"), "{wrote}");
    let wrote = sc
        .prompt("fs", "fs_write /home/agentos/today.txt remember the walrus")
        .await
        .expect("turn");
    assert_eq!(wrote["message"]["content"][0]["text"], "wrote");
    // The host sees what the agent wrote.
    let read = sc
        .ok("fs/read", json!({"path": "/home/agentos/today.txt"}))
        .await;
    assert_eq!(read["encoding"], "base64");
    assert_eq!(read["eof"], true);
    let read_back = sc
        .prompt("fs", "fs_read /home/agentos/today.txt")
        .await
        .expect("turn");
    assert_eq!(
        read_back["message"]["content"][0]["text"],
        "remember the walrus"
    );
    // Outside the session's roots the agent is refused, the sidecar stays up.
    sc.ok("fs/mkdir", json!({"path": "/secret", "parents": true}))
        .await;
    sc.ok(
        "fs/write",
        json!({"path": "/secret/key", "data": B64_HELLO}),
    )
    .await;
    for path in ["/secret/key", "/home/agentos/../../secret/key"] {
        let denied = sc
            .prompt("fs", &format!("fs_read {path}"))
            .await
            .expect("turn");
        let text = denied["message"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("EACCES"), "{path}: {text}");
    }
    let denied = sc
        .prompt("fs", "fs_write /secret/key overwritten")
        .await
        .unwrap();
    assert!(denied["message"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("EACCES"));
    let still = sc.ok("fs/read", json!({"path": "/secret/key"})).await;
    assert_eq!(
        still["data"], B64_HELLO,
        "the refused write changed nothing"
    );
}

async fn host_methods_and_their_errors(backend: Backend) {
    let sc = Sidecar::start(backend).await;
    let stat = sc
        .ok("fs/mkdir", json!({"path": "/w/a/b", "parents": true}))
        .await;
    assert_eq!(stat["kind"], "dir");
    let e = sc.err("fs/mkdir", json!({"path": "/w/a/b"})).await;
    assert_eq!(data_code(&e), "EEXIST");
    let e = sc.err("fs/mkdir", json!({"path": "/x/y/z"})).await;
    assert_eq!(data_code(&e), "ENOENT");

    sc.ok("fs/write", json!({"path": "/w/f", "data": B64_HELLO}))
        .await;
    // " world" appended at offset 5.
    let stat = sc
        .ok(
            "fs/write",
            json!({"path": "/w/f", "data": "IHdvcmxk", "offset": 5}),
        )
        .await;
    assert_eq!(stat["size"], 11);
    let part = sc
        .ok("fs/read", json!({"path": "/w/f", "offset": 6, "length": 3}))
        .await;
    assert_eq!(part["data"], "d29y"); // "wor"
    assert_eq!(part["eof"], false);
    assert_eq!(part["size"], 11);

    for i in 0..5 {
        sc.ok("fs/write", json!({"path": format!("/w/a/{i}"), "data": ""}))
            .await;
    }
    let first = sc
        .ok("fs/readdir", json!({"path": "/w/a", "limit": 4}))
        .await;
    assert_eq!(first["entries"].as_array().unwrap().len(), 4);
    let cursor = first["nextCursor"].as_str().expect("more").to_owned();
    let rest = sc
        .ok(
            "fs/readdir",
            json!({"path": "/w/a", "cursor": cursor, "limit": 4}),
        )
        .await;
    assert_eq!(rest["entries"].as_array().unwrap().len(), 2);
    assert!(rest["nextCursor"].is_null());

    sc.ok("fs/rename", json!({"from": "/w/f", "to": "/w/a/g"}))
        .await;
    let e = sc.err("fs/stat", json!({"path": "/w/f"})).await;
    assert_eq!(data_code(&e), "ENOENT");
    let e = sc.err("fs/remove", json!({"path": "/w/a"})).await;
    assert!(["ENOTEMPTY", "EISDIR"].contains(&data_code(&e)), "{e:?}");
    sc.ok("fs/remove", json!({"path": "/w/a", "recursive": true}))
        .await;
    let listing = sc.ok("fs/readdir", json!({"path": "/w"})).await;
    assert_eq!(listing["entries"], json!([]));

    // Malformed requests are -32602 and leave the connection usable.
    let e = sc
        .err("fs/write", json!({"path": "/w/bad", "data": "not base64!"}))
        .await;
    assert_eq!(e.code, -32602);
    let e = sc.err("fs/stat", json!({"path": "/w", "extra": 1})).await;
    assert_eq!(e.code, -32602);
    let e = sc.err("fs/stat", json!({"path": "relative"})).await;
    assert_eq!(data_code(&e), "EINVAL");
    sc.ok("fs/stat", json!({"path": "/"})).await;
}

all_backends!(
    adapters_use_the_vfs_within_their_roots,
    host_methods_and_their_errors
);

async fn ctl(socket: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(binary("agentos-sidecar"))
        .arg("ctl")
        .arg("--socket")
        .arg(socket)
        .args(args)
        .output()
        .await
        .expect("run ctl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctl_fs_moves_whole_trees_in_and_out() {
    let sc = Sidecar::start(Backend::SqliteFile).await;
    let host = tempfile::tempdir().unwrap();
    let src = host.path().join("src");
    std::fs::create_dir_all(src.join("a/b")).unwrap();
    std::fs::write(src.join("a/one.txt"), "one\n").unwrap();
    // Larger than one transfer piece, so it travels in several calls.
    let big: Vec<u8> = (0..9_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(src.join("a/b/big.bin"), &big).unwrap();
    std::fs::write(src.join("empty"), "").unwrap();

    let s = &sc.socket;
    let src_arg = src.display().to_string();
    let (code, out, err) = ctl(s, &["fs", "import", &src_arg, "/data"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("imported 3 files"), "{out}");
    let (code, out, _) = ctl(s, &["fs", "ls", "/data/a"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("one.txt") && out.contains('b'), "{out}");
    let (_, out, _) = ctl(s, &["fs", "cat", "/data/a/one.txt"]).await;
    assert_eq!(out, "one\n");

    let dst = host.path().join("dst");
    let dst_arg = dst.display().to_string();
    let (code, _, err) = ctl(s, &["fs", "export", "/data", &dst_arg]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read(dst.join("a/b/big.bin")).unwrap(), big);
    assert_eq!(std::fs::read(dst.join("empty")).unwrap(), b"");

    let (code, _, _) = ctl(s, &["fs", "mv", "/data/a/one.txt", "/data/uno.txt"]).await;
    assert_eq!(code, 0);
    let (code, _, _) = ctl(s, &["fs", "rm", "-r", "/data/a"]).await;
    assert_eq!(code, 0);
    let (_, out, _) = ctl(s, &["--json", "fs", "ls", "/data"]).await;
    let listing: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let names: Vec<&str> = listing["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["empty", "uno.txt"]);
    let (code, _, err) = ctl(s, &["fs", "cat", "/data/missing"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("ENOENT"), "{err}");
}
