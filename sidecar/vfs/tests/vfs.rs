//! Behaviour of the VFS service on real database files: every errno, paging,
//! replacing renames, hard links and link counts, symlinks and loops, `..`
//! clamping, policy (roots and read-only subtrees), limits and usage counters,
//! chunked files and block collection.

use agentos_schema::{migrate_all, SharedDatabase};
use agentos_storage::testing::{all_backends, CapturedLog, TestDb};
use agentos_vfs::FsLimits;
use agentos_vfs::{FileKind, FsError, Vfs, VfsPolicy};

/// Every backend the VFS must work on (swap for the shared harness once merged).
/// Every backend, migrated; the `TestDb` keeps its files and server alive.
async fn backends() -> Vec<(&'static str, SharedDatabase, TestDb)> {
    let mut out = Vec::new();
    for backend in all_backends().await {
        migrate_all(backend.db.as_ref()).await.expect("migrate");
        out.push((backend.name, backend.db.clone(), backend));
    }
    out
}

fn small_limits() -> FsLimits {
    FsLimits {
        chunk_bytes: 16,
        inline_threshold_bytes: 8,
        ..FsLimits::default()
    }
}

async fn open(db: &SharedDatabase, limits: FsLimits, policy: VfsPolicy) -> Vfs {
    let limits = limits.validated().expect("valid limits");
    Vfs::open(db.clone(), limits, policy)
        .await
        .expect("open vfs")
}

fn code<T: std::fmt::Debug>(r: Result<T, FsError>) -> &'static str {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.code().as_str(),
    }
}

async fn block_rows(db: &SharedDatabase) -> (i64, i64) {
    let rows = db
        .query(
            "SELECT count(*), coalesce(sum(refcount = 0), 0) FROM agentos_fs_blocks",
            vec![],
        )
        .await
        .expect("count");
    let row = &rows.rows[0];
    (row[0].as_i64().expect("int"), row[1].as_i64().expect("int"))
}

#[tokio::test]
async fn files_directories_and_errnos() {
    for (name, db, _dir) in backends().await {
        let vfs = open(&db, FsLimits::default(), VfsPolicy::default()).await;
        let root = vfs.stat("/").await.expect("root");
        assert_eq!(
            (root.ino, root.kind, root.nlink),
            (1, FileKind::Dir, 2),
            "{name}"
        );

        vfs.mkdir("/a", 0o755).await.expect("mkdir");
        assert_eq!(code(vfs.mkdir("/a", 0o755).await), "EEXIST");
        assert_eq!(code(vfs.mkdir("/missing/x", 0o755).await), "ENOENT");
        assert_eq!(vfs.stat("/").await.expect("root").nlink, 3);

        let st = vfs.create("/a/f", 0o600).await.expect("create");
        assert_eq!(
            (st.kind, st.mode, st.size, st.nlink),
            (FileKind::File, 0o600, 0, 1)
        );
        assert_eq!(code(vfs.create("/a/f", 0o600).await), "EEXIST");
        assert_eq!(code(vfs.create("/a/f/g", 0o600).await), "ENOTDIR");
        assert_eq!(code(vfs.stat("/a/nope").await), "ENOENT");
        assert_eq!(code(vfs.read_all("/a").await), "EISDIR");
        assert_eq!(code(vfs.write("/a", 0, b"x").await), "EISDIR");
        assert_eq!(code(vfs.readdir("/a/f", None, 10).await), "ENOTDIR");
        assert_eq!(code(vfs.unlink("/a").await), "EISDIR");
        assert_eq!(code(vfs.rmdir("/a/f").await), "ENOTDIR");
        assert_eq!(code(vfs.rmdir("/a").await), "ENOTEMPTY");
        assert_eq!(code(vfs.stat("relative").await), "EINVAL");
        assert_eq!(code(vfs.chmod("/a/f", 0o10000).await), "EINVAL");
        let long = format!("/a/{}", "x".repeat(256));
        assert_eq!(code(vfs.create(&long, 0o644).await), "ENAMETOOLONG");
        let deep = "/a".repeat(2049);
        assert_eq!(code(vfs.stat(&deep).await), "ENAMETOOLONG");

        vfs.write("/a/f", 0, b"hello").await.expect("write");
        vfs.write("/a/f", 7, b"world")
            .await
            .expect("write past end");
        assert_eq!(vfs.read_all("/a/f").await.expect("read"), b"hello\0\0world");
        assert_eq!(vfs.read("/a/f", 3, 4).await.expect("range"), b"lo\0\0");
        assert_eq!(vfs.read("/a/f", 100, 4).await.expect("past end"), b"");
        vfs.truncate("/a/f", 2).await.expect("truncate");
        assert_eq!(vfs.read_all("/a/f").await.expect("read"), b"he");
        vfs.truncate("/a/f", 4).await.expect("extend");
        assert_eq!(vfs.read_all("/a/f").await.expect("read"), b"he\0\0");

        let st = vfs.chmod("/a/f", 0o640).await.expect("chmod");
        assert_eq!(st.mode, 0o640);
        let st = vfs
            .utimes("/a/f", Some(1_000_000_000), Some(2_000_000_000))
            .await
            .expect("utimes");
        assert_eq!(
            (st.atime_ns, st.mtime_ns, st.mtime_ms),
            (1_000_000_000, 2_000_000_000, 2_000)
        );

        vfs.unlink("/a/f").await.expect("unlink");
        assert_eq!(code(vfs.unlink("/a/f").await), "ENOENT");
        vfs.rmdir("/a").await.expect("rmdir");
        assert_eq!(vfs.stat("/").await.expect("root").nlink, 2);
        assert_eq!(code(vfs.rmdir("/").await), "EPERM");
        let usage = vfs.usage().await.expect("usage");
        assert_eq!((usage.total_bytes, usage.inode_count), (0, 1), "{name}");
    }
}

#[tokio::test]
async fn stat_serialises_as_camel_case_json() {
    for (_name, db, _dir) in backends().await {
        let vfs = open(&db, FsLimits::default(), VfsPolicy::default()).await;
        let st = vfs.write_file("/x", b"abc").await.expect("write");
        let json = serde_json::to_value(&st).expect("json");
        assert_eq!(json["kind"], "file");
        assert_eq!(json["size"], 3);
        assert!(json["mtimeMs"].is_i64() && json["mtimeNs"].is_i64());
        assert_eq!(json["ino"], st.ino);
    }
}

#[tokio::test]
async fn mkdir_p_and_paged_readdir() {
    for (_name, db, _dir) in backends().await {
        let vfs = open(&db, FsLimits::default(), VfsPolicy::default()).await;
        vfs.mkdir_p("/p/q/r", 0o755).await.expect("mkdir -p");
        vfs.mkdir_p("/p/q/r", 0o755).await.expect("again is fine");
        assert_eq!(vfs.stat("/p").await.expect("p").nlink, 3);
        assert_eq!(vfs.stat("/p/q/r").await.expect("r").nlink, 2);
        vfs.write_file("/p/file", b"x").await.expect("file");
        assert_eq!(code(vfs.mkdir_p("/p/file/z", 0o755).await), "ENOTDIR");
        assert_eq!(code(vfs.mkdir_p("/p/file", 0o755).await), "EEXIST");

        for i in 0..25 {
            vfs.create(&format!("/p/q/f{i:02}"), 0o644)
                .await
                .expect("create");
        }
        let mut names = Vec::new();
        let mut cursor: Option<String> = None;
        let mut pages = 0;
        loop {
            let page = vfs
                .readdir("/p/q", cursor.as_deref(), 10)
                .await
                .expect("page");
            pages += 1;
            names.extend(page.entries.iter().map(|e| e.name.clone()));
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        assert_eq!(pages, 3);
        assert_eq!(names.len(), 26);
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        assert_eq!(names[0], "f00");
        assert_eq!(code(vfs.readdir("/p/q", None, 0).await), "EINVAL");
    }
}

#[tokio::test]
async fn rename_replaces_atomically_and_checks_kinds() {
    for (_name, db, _dir) in backends().await {
        let vfs = open(&db, FsLimits::default(), VfsPolicy::default()).await;
        vfs.write_file("/a", b"new").await.expect("a");
        vfs.write_file("/b", b"old!").await.expect("b");
        vfs.rename("/a", "/b").await.expect("rename over");
        assert_eq!(code(vfs.stat("/a").await), "ENOENT");
        assert_eq!(vfs.read_all("/b").await.expect("b"), b"new");
        assert_eq!(vfs.usage().await.expect("usage").total_bytes, 3);

        vfs.mkdir("/d", 0o755).await.expect("d");
        vfs.mkdir("/e", 0o755).await.expect("e");
        vfs.write_file("/e/inside", b"").await.expect("inside");
        assert_eq!(code(vfs.rename("/b", "/d").await), "EISDIR");
        assert_eq!(code(vfs.rename("/d", "/b").await), "ENOTDIR");
        assert_eq!(code(vfs.rename("/d", "/e").await), "ENOTEMPTY");
        assert_eq!(code(vfs.rename("/d", "/d/sub").await), "EINVAL");
        assert_eq!(code(vfs.rename("/nope", "/x").await), "ENOENT");
        assert_eq!(code(vfs.rmdir("/e/../e/inside").await), "ENOTDIR");
        vfs.unlink("/e/inside").await.expect("unlink");
        vfs.rename("/d", "/e").await.expect("dir over empty dir");
        assert_eq!(code(vfs.stat("/d").await), "ENOENT");
        vfs.mkdir("/e/child", 0o755).await.expect("child");
        vfs.mkdir("/other", 0o755).await.expect("other");
        vfs.rename("/e/child", "/other/child")
            .await
            .expect("move dir");
        assert_eq!(vfs.stat("/e").await.expect("e").nlink, 2);
        assert_eq!(vfs.stat("/other").await.expect("o").nlink, 3);
        // The lookup cache must follow renames.
        vfs.write_file("/other/child/f", b"1").await.expect("f");
        vfs.rename("/other/child", "/moved").await.expect("move up");
        assert_eq!(vfs.read_all("/moved/f").await.expect("f"), b"1");
        assert_eq!(code(vfs.stat("/other/child/f").await), "ENOENT");
        assert_eq!(vfs.stat("/").await.expect("root").nlink, 5);
    }
}

#[tokio::test]
async fn hard_links_share_the_inode() {
    for (_name, db, _dir) in backends().await {
        let vfs = open(&db, small_limits(), VfsPolicy::default()).await;
        let data: Vec<u8> = (0..100u8).collect();
        vfs.write_file("/f", &data).await.expect("f");
        let st = vfs.link("/f", "/g").await.expect("link");
        assert_eq!(st.nlink, 2);
        assert_eq!(
            vfs.stat("/g").await.expect("g").ino,
            vfs.stat("/f").await.expect("f").ino
        );
        assert_eq!(code(vfs.link("/f", "/g").await), "EEXIST");
        vfs.mkdir("/dir", 0o755).await.expect("dir");
        assert_eq!(code(vfs.link("/dir", "/dir2").await), "EPERM");
        vfs.write("/g", 0, b"ZZ").await.expect("write via link");
        assert_eq!(&vfs.read_all("/f").await.expect("f")[..3], b"ZZ\x02");
        let usage = vfs.usage().await.expect("usage");
        assert_eq!((usage.total_bytes, usage.inode_count), (100, 3));
        vfs.unlink("/f").await.expect("unlink f");
        assert_eq!(vfs.stat("/g").await.expect("g").nlink, 1);
        assert_eq!(vfs.read_all("/g").await.expect("g").len(), 100);
        vfs.rename("/g", "/dir/g").await.expect("mv");
        vfs.unlink("/dir/g").await.expect("unlink g");
        let usage = vfs.usage().await.expect("usage");
        assert_eq!((usage.total_bytes, usage.inode_count), (0, 2));
        vfs.collect_garbage(1000).await.expect("gc");
        assert_eq!(block_rows(&db).await, (0, 0));
    }
}

#[tokio::test]
async fn symlinks_resolve_and_loops_end_in_eloop() {
    for (_name, db, _dir) in backends().await {
        let vfs = open(&db, FsLimits::default(), VfsPolicy::default()).await;
        vfs.mkdir_p("/x/y", 0o755).await.expect("dirs");
        vfs.write_file("/x/y/file", b"data").await.expect("file");
        vfs.symlink("y/file", "/x/rel")
            .await
            .expect("relative link");
        vfs.symlink("/x/y", "/abs").await.expect("absolute link");
        vfs.symlink("../../../../x/y/file", "/x/y/up")
            .await
            .expect("up link");
        assert_eq!(vfs.read_all("/x/rel").await.expect("rel"), b"data");
        assert_eq!(vfs.read_all("/abs/file").await.expect("abs"), b"data");
        assert_eq!(vfs.read_all("/x/y/up").await.expect("clamped"), b"data");
        assert_eq!(vfs.readlink("/x/rel").await.expect("readlink"), "y/file");
        assert_eq!(code(vfs.readlink("/x/y/file").await), "EINVAL");
        let l = vfs.lstat("/x/rel").await.expect("lstat");
        assert_eq!((l.kind, l.size), (FileKind::Symlink, 6));
        assert_eq!(vfs.stat("/x/rel").await.expect("stat").kind, FileKind::File);

        vfs.symlink("/loop2", "/loop1").await.expect("l1");
        vfs.symlink("/loop1", "/loop2").await.expect("l2");
        assert_eq!(code(vfs.stat("/loop1").await), "ELOOP");
        assert_eq!(code(vfs.read_all("/loop2/x").await), "ELOOP");
        vfs.symlink("self", "/self").await.expect("self");
        assert_eq!(code(vfs.stat("/self").await), "ELOOP");

        // Writing through a dangling link creates its target.
        vfs.symlink("/x/created", "/dangling")
            .await
            .expect("dangling");
        assert_eq!(code(vfs.stat("/dangling").await), "ENOENT");
        vfs.write_text_file("/dangling", "made")
            .await
            .expect("write through");
        assert_eq!(vfs.read_all("/x/created").await.expect("target"), b"made");
        vfs.unlink("/dangling").await.expect("unlink link");
        assert!(vfs.exists("/x/created").await.expect("exists"));
        assert_eq!(code(vfs.symlink("", "/empty").await), "EINVAL");
    }
}

#[tokio::test]
async fn dotdot_never_escapes_a_root() {
    for (_name, db, _dir) in backends().await {
        let vfs = open(&db, FsLimits::default(), VfsPolicy::default()).await;
        vfs.mkdir_p("/srv/proj", 0o755).await.expect("dirs");
        vfs.write_file("/secret", b"s").await.expect("secret");
        vfs.write_file("/srv/proj/a.txt", b"a").await.expect("a");
        assert_eq!(vfs.read_all("/../../secret").await.expect("clamped"), b"s");
        let session = vfs.scoped(&["/srv/proj".to_owned()]).expect("scope");
        assert_eq!(
            session.read_all("/srv/proj/./a.txt").await.expect("a"),
            b"a"
        );
        assert_eq!(
            code(session.read_all("/srv/proj/../../secret").await),
            "EACCES"
        );
        assert_eq!(code(session.write_file("/srv/x", b"").await), "EACCES");
        assert_eq!(code(session.stat("/").await), "EACCES");
        // A symlink inside the root that points out of it is refused.
        vfs.symlink("/secret", "/srv/proj/leak")
            .await
            .expect("leak");
        assert_eq!(code(session.read_all("/srv/proj/leak").await), "EACCES");
        vfs.symlink("../..", "/srv/proj/up").await.expect("up");
        assert_eq!(
            code(session.read_all("/srv/proj/up/secret").await),
            "EACCES"
        );
        assert_eq!(code(session.remove("/srv/proj", true).await), "EPERM");
        // A view can only narrow.
        assert_eq!(code(session.scoped(&["/srv".to_owned()])), "EACCES");
        let two = vfs
            .scoped(&["/srv/proj".to_owned(), "/tmp".to_owned()])
            .expect("two roots");
        vfs.mkdir("/tmp", 0o755).await.expect("tmp");
        assert_eq!(
            code(two.rename("/srv/proj/a.txt", "/tmp/a.txt").await),
            "EXDEV"
        );
        assert_eq!(
            code(two.link("/srv/proj/a.txt", "/tmp/a.txt").await),
            "EXDEV"
        );
    }
}

#[tokio::test]
async fn read_only_subtrees_refuse_mutations() {
    for (_name, db, _dir) in backends().await {
        let rw = open(&db, FsLimits::default(), VfsPolicy::default()).await;
        rw.mkdir_p("/ro/sub", 0o755).await.expect("dirs");
        rw.write_file("/ro/sub/f", b"keep").await.expect("f");
        let policy = VfsPolicy {
            roots: vec!["/".into()],
            read_only: vec!["/ro/sub".into()],
        };
        let vfs = open(&db, FsLimits::default(), policy).await;
        assert_eq!(vfs.read_all("/ro/sub/f").await.expect("read"), b"keep");
        assert_eq!(code(vfs.write("/ro/sub/f", 0, b"x").await), "EROFS");
        assert_eq!(code(vfs.write_file("/ro/sub/g", b"x").await), "EROFS");
        assert_eq!(code(vfs.unlink("/ro/sub/f").await), "EROFS");
        assert_eq!(code(vfs.chmod("/ro/sub/f", 0o600).await), "EROFS");
        assert_eq!(code(vfs.rename("/ro/sub/f", "/f").await), "EROFS");
        assert_eq!(code(vfs.remove("/ro", true).await), "EROFS");
        assert_eq!(code(vfs.truncate("/ro/sub/f", 0).await), "EROFS");
        assert_eq!(code(vfs.link("/ro/sub/f", "/f2").await), "EROFS");
        assert_eq!(code(vfs.mkdir_p("/ro/sub/deeper/x", 0o755).await), "EROFS");
        vfs.write_file("/ro/other", b"ok")
            .await
            .expect("outside the subtree");
        assert_eq!(vfs.read_all("/ro/sub/f").await.expect("intact"), b"keep");
    }
}

#[tokio::test]
async fn limits_fail_with_the_setting_and_leave_state_intact() {
    for (_name, db, _dir) in backends().await {
        let limits = FsLimits {
            max_total_bytes: 100,
            max_inodes: 4,
            max_file_bytes: 60,
            chunk_bytes: 16,
            inline_threshold_bytes: 8,
        };
        let vfs = open(&db, limits, VfsPolicy::default()).await;
        vfs.write_file("/a", &[1u8; 50]).await.expect("a");
        let err = vfs.write_file("/big", &[0u8; 61]).await.unwrap_err();
        assert_eq!(
            (err.code().as_str(), err.setting()),
            ("EFBIG", Some("limits.fs.maxFileBytes"))
        );
        assert_eq!(code(vfs.truncate("/a", 61).await), "EFBIG");
        vfs.write_file("/b", &[2u8; 40]).await.expect("b");
        let err = vfs.write("/b", 40, &[3u8; 20]).await.unwrap_err();
        assert_eq!(
            (err.code().as_str(), err.setting()),
            ("ENOSPC", Some("limits.fs.maxTotalBytes"))
        );
        assert_eq!(vfs.read_all("/b").await.expect("b"), vec![2u8; 40]);
        vfs.mkdir("/d", 0o755).await.expect("4th inode");
        let err = vfs.create("/c", 0o644).await.unwrap_err();
        assert_eq!(
            (err.code().as_str(), err.setting()),
            ("ENOSPC", Some("limits.fs.maxInodes"))
        );
        assert_eq!(code(vfs.stat("/c").await), "ENOENT");
        let usage = vfs.usage().await.expect("usage");
        assert_eq!((usage.total_bytes, usage.inode_count), (90, 4));
        vfs.unlink("/a").await.expect("free");
        vfs.create("/c", 0o644).await.expect("room again");
    }
}

#[tokio::test]
async fn chunked_files_share_blocks_and_collect_them() {
    for (_name, db, _dir) in backends().await {
        let vfs = open(&db, small_limits(), VfsPolicy::default()).await;
        let data: Vec<u8> = (0..200u32).map(|i| (i % 7) as u8).collect();
        vfs.write_file("/c", &data).await.expect("write");
        assert_eq!(vfs.read_all("/c").await.expect("read"), data);
        assert_eq!(vfs.read("/c", 13, 40).await.expect("range"), &data[13..53]);
        // Overwrite across chunk boundaries; only overlapping chunks change.
        vfs.write("/c", 30, &[9u8; 20]).await.expect("patch");
        let mut expect = data.clone();
        expect[30..50].fill(9);
        assert_eq!(vfs.read_all("/c").await.expect("read"), expect);
        // Sparse growth, then shrink back below the inline threshold.
        vfs.write("/c", 500, b"end").await.expect("sparse");
        expect.resize(500, 0);
        expect.extend_from_slice(b"end");
        assert_eq!(vfs.read_all("/c").await.expect("read"), expect);
        vfs.truncate("/c", 100).await.expect("shrink");
        vfs.truncate("/c", 120).await.expect("regrow");
        expect.truncate(100);
        expect.resize(120, 0);
        assert_eq!(vfs.read_all("/c").await.expect("read"), expect);
        vfs.truncate("/c", 5).await.expect("to inline");
        assert_eq!(vfs.read_all("/c").await.expect("read"), &expect[..5]);
        // A chunk larger than one storage part (64 KiB) reads back by range.
        let large = FsLimits {
            chunk_bytes: 256 * 1024,
            inline_threshold_bytes: 1024,
            ..FsLimits::default()
        };
        let wide = open(&db, large, VfsPolicy::default()).await;
        let big: Vec<u8> = (0..600_000u32).map(|i| (i % 253) as u8).collect();
        wide.write_file("/wide", &big).await.expect("wide");
        for (off, len) in [
            (0u64, 10u64),
            (65_530, 20),
            (262_100, 200),
            (599_990, 50),
            (100, 400_000),
        ] {
            let end = (off + len).min(big.len() as u64) as usize;
            let got = wide.read("/wide", off, len).await.expect("range");
            assert_eq!(got, &big[off as usize..end], "range {off}+{len}");
        }
        wide.write("/wide", 65_000, &[1u8; 2_000])
            .await
            .expect("patch");
        let mut patched = big.clone();
        patched[65_000..67_000].fill(1);
        assert_eq!(wide.read_all("/wide").await.expect("all"), patched);
        wide.remove("/wide", false).await.expect("rm wide");
        // Identical content is stored once.
        vfs.write_file("/same1", &[5u8; 64]).await.expect("s1");
        vfs.write_file("/same2", &[5u8; 64]).await.expect("s2");
        vfs.collect_garbage(10_000).await.expect("gc");
        assert_eq!(block_rows(&db).await, (1, 0));
        vfs.remove("/same1", false).await.expect("rm");
        vfs.remove("/same2", false).await.expect("rm");
        vfs.collect_garbage(10_000).await.expect("gc");
        assert_eq!(block_rows(&db).await, (0, 0));
    }
}

#[tokio::test]
async fn recursive_remove_is_one_transaction() {
    for (_name, db, _dir) in backends().await {
        let vfs = open(&db, small_limits(), VfsPolicy::default()).await;
        vfs.mkdir_p("/t/a/b", 0o755).await.expect("dirs");
        vfs.write_file("/t/a/b/f", &[1u8; 40]).await.expect("f");
        vfs.write_file("/t/x", b"x").await.expect("x");
        vfs.link("/t/x", "/keep").await.expect("link out");
        vfs.symlink("/nowhere", "/t/a/s").await.expect("symlink");
        assert_eq!(code(vfs.remove("/t", false).await), "ENOTEMPTY");
        vfs.remove("/t", true).await.expect("rm -r");
        assert_eq!(code(vfs.stat("/t/a/b/f").await), "ENOENT");
        assert_eq!(vfs.read_all("/keep").await.expect("kept"), b"x");
        assert_eq!(vfs.stat("/keep").await.expect("kept").nlink, 1);
        let usage = vfs.usage().await.expect("usage");
        assert_eq!((usage.total_bytes, usage.inode_count), (1, 2));
        assert_eq!(vfs.stat("/").await.expect("root").nlink, 2);
    }
}

/// `limits.acp.maxReadTextFileBytes` as the tests use it.
const MAX_TEXT: u64 = 1 << 20;

#[tokio::test]
async fn text_helpers_follow_acp_semantics() {
    for (_name, db, _dir) in backends().await {
        let vfs = open(&db, FsLimits::default(), VfsPolicy::default()).await;
        vfs.mkdir("/s", 0o755).await.expect("dir");
        vfs.write_text_file("/s/t.txt", "one\ntwo\nthree\nfour")
            .await
            .expect("write");
        assert_eq!(
            vfs.read_text_file("/s/t.txt", None, None, MAX_TEXT)
                .await
                .expect("all"),
            "one\ntwo\nthree\nfour"
        );
        assert_eq!(
            vfs.read_text_file("/s/t.txt", Some(2), Some(2), MAX_TEXT)
                .await
                .expect("mid"),
            "two\nthree\n"
        );
        assert_eq!(
            vfs.read_text_file("/s/t.txt", Some(4), None, MAX_TEXT)
                .await
                .expect("tail"),
            "four"
        );
        assert_eq!(
            vfs.read_text_file("/s/t.txt", Some(9), None, MAX_TEXT)
                .await
                .expect("past"),
            ""
        );
        assert_eq!(
            code(
                vfs.read_text_file("/s/t.txt", Some(0), None, MAX_TEXT)
                    .await
            ),
            "EINVAL"
        );
        // A slice over the byte cap is refused naming its setting; a
        // narrower slice of the same file is served.
        match vfs.read_text_file("/s/t.txt", None, None, 8).await {
            Err(e) => {
                assert_eq!(e.code().as_str(), "EFBIG");
                assert_eq!(e.setting(), Some("limits.acp.maxReadTextFileBytes"));
            }
            Ok(text) => panic!("{text:?} passed an 8-byte cap"),
        }
        assert_eq!(
            vfs.read_text_file("/s/t.txt", Some(2), Some(1), 8)
                .await
                .expect("within the cap"),
            "two\n"
        );
        vfs.write_text_file("/s/t.txt", "replaced")
            .await
            .expect("replace");
        assert_eq!(
            vfs.read_text_file("/s/t.txt", None, None, MAX_TEXT)
                .await
                .expect("all"),
            "replaced"
        );
        vfs.write_file("/s/bin", &[0xff, 0xfe])
            .await
            .expect("binary");
        assert_eq!(
            code(vfs.read_text_file("/s/bin", None, None, MAX_TEXT).await),
            "EINVAL"
        );
        assert_eq!(code(vfs.write_text_file("/nodir/x", "x").await), "ENOENT");
        let session = vfs.scoped(&["/s".to_owned()]).expect("scope");
        assert_eq!(
            code(session.write_text_file("/elsewhere", "x").await),
            "EACCES"
        );
    }
}

#[tokio::test]
async fn state_survives_reopen() {
    for (_name, db, _dir) in backends().await {
        let vfs = open(&db, small_limits(), VfsPolicy::default()).await;
        vfs.mkdir("/keep", 0o755).await.expect("dir");
        vfs.write_file("/keep/f", &[7u8; 100]).await.expect("f");
        let ino = vfs.stat("/keep/f").await.expect("f").ino;
        drop(vfs);
        let again = open(&db, small_limits(), VfsPolicy::default()).await;
        assert_eq!(again.read_all("/keep/f").await.expect("f"), vec![7u8; 100]);
        let created = again.create("/keep/new", 0o644).await.expect("new");
        assert!(
            created.ino > ino,
            "inode numbers are never reused after reopen"
        );
    }
}

#[test]
fn bad_limits_never_reach_the_vfs() {
    // `Vfs::open` takes only validated limits; validation names the field.
    let limits = FsLimits {
        inline_threshold_bytes: 1024,
        chunk_bytes: 512,
        ..FsLimits::default()
    };
    let err = limits.validated().expect_err("refused");
    assert_eq!(err.code(), "invalid_config");
    assert!(err.to_string().contains("limits.fs.inlineThresholdBytes"));
}

#[tokio::test]
async fn import_and_export_round_trip_a_host_tree() {
    use std::os::unix::fs::PermissionsExt;
    for (_name, db, _backend) in backends().await {
        let dir = tempfile::tempdir().expect("host dir");
        let vfs = open(&db, small_limits(), VfsPolicy::default()).await;
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("sub/deeper")).expect("host dirs");
        std::fs::write(src.join("a.txt"), b"alpha").expect("a");
        let big: Vec<u8> = (0..1000u32).map(|i| (i % 13) as u8).collect();
        std::fs::write(src.join("sub/big.bin"), &big).expect("big");
        std::fs::write(src.join("sub/deeper/x"), b"").expect("x");
        std::fs::set_permissions(src.join("a.txt"), std::fs::Permissions::from_mode(0o600))
            .expect("chmod");
        std::os::unix::fs::symlink("sub/big.bin", src.join("link")).expect("symlink");

        let report = vfs.import_tree(&src, "/imported").await.expect("import");
        assert_eq!((report.files, report.symlinks, report.bytes), (3, 1, 1005));
        assert_eq!(
            vfs.read_all("/imported/sub/big.bin").await.expect("big"),
            big
        );
        assert_eq!(vfs.read_all("/imported/link").await.expect("via link"), big);
        assert_eq!(vfs.stat("/imported/a.txt").await.expect("a").mode, 0o600);

        let out = dir.path().join("out");
        let report = vfs.export_tree("/imported", &out).await.expect("export");
        assert_eq!((report.files, report.symlinks), (3, 1));
        assert_eq!(std::fs::read(out.join("sub/big.bin")).expect("big"), big);
        assert_eq!(std::fs::read(out.join("a.txt")).expect("a"), b"alpha");
        assert_eq!(
            std::fs::read_link(out.join("link")).expect("link"),
            std::path::PathBuf::from("sub/big.bin")
        );
        let mode = std::fs::metadata(out.join("a.txt"))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            code(vfs.export_tree("/imported/a.txt", &out).await),
            "ENOTDIR"
        );
        let missing = dir.path().join("missing");
        assert_eq!(code(vfs.import_tree(&missing, "/m").await), "EIO");
    }
}

#[tokio::test]
async fn hostile_arguments_get_typed_errors_and_leave_data_intact() {
    for (_name, db, _dir) in backends().await {
        let vfs = open(&db, small_limits(), VfsPolicy::default()).await;
        vfs.write_file("/keep", b"precious").await.expect("keep");
        assert_eq!(code(vfs.write("/keep", u64::MAX, b"x").await), "EINVAL");
        assert_eq!(
            code(vfs.write("/keep", u64::MAX - 100, b"x").await),
            "EFBIG"
        );
        assert_eq!(code(vfs.truncate("/keep", u64::MAX).await), "EFBIG");
        assert_eq!(code(vfs.write_file("/bad\0name", b"x").await), "EINVAL");
        assert_eq!(code(vfs.symlink("a\0b", "/l").await), "EINVAL");
        let huge = "/".repeat(5000);
        assert_eq!(code(vfs.stat(&huge).await), "ENAMETOOLONG");
        assert_eq!(code(vfs.readdir("/", None, 1_000_000).await), "EINVAL");
        assert_eq!(
            vfs.read("/keep", u64::MAX, u64::MAX).await.expect("empty"),
            b""
        );
        assert_eq!(vfs.read_all("/keep").await.expect("intact"), b"precious");
        let usage = vfs.usage().await.expect("usage");
        assert_eq!((usage.total_bytes, usage.inode_count), (8, 2));
    }
}

#[tokio::test]
async fn concurrent_mutations_stay_consistent() {
    for (_name, db, _dir) in backends().await {
        let vfs = open(&db, small_limits(), VfsPolicy::default()).await;
        vfs.mkdir("/c", 0o755).await.expect("dir");
        let mut tasks = Vec::new();
        for t in 0..8 {
            let vfs = vfs.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..25 {
                    let p = format!("/c/t{t}-{i}");
                    vfs.write_file(&p, &[t as u8; 20]).await.expect("write");
                    if i % 3 == 0 {
                        vfs.rename(&p, &format!("/c/r{t}-{i}"))
                            .await
                            .expect("rename");
                    }
                    if i % 5 == 0 {
                        vfs.remove(&format!("/c/r{t}-{i}"), false).await.ok();
                        vfs.remove(&p, false).await.ok();
                    }
                }
            }));
        }
        for task in tasks {
            task.await.expect("task");
        }
        let entries = vfs.readdir_all("/c").await.expect("list");
        let usage = vfs.usage().await.expect("usage");
        assert_eq!(usage.inode_count, entries.len() as u64 + 2);
        assert_eq!(usage.total_bytes, entries.len() as u64 * 20);
        for e in entries {
            assert_eq!(
                vfs.read_all(&format!("/c/{}", e.name))
                    .await
                    .expect("read")
                    .len(),
                20
            );
        }
    }
}

#[tokio::test]
async fn eighty_percent_warns_once_per_crossing() {
    for (_name, db, _dir) in backends().await {
        let captured = CapturedLog::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(captured.clone())
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let limits = FsLimits {
            max_inodes: 10,
            ..FsLimits::default()
        };
        let vfs = open(&db, limits, VfsPolicy::default()).await;
        let warnings = || captured.count(&["80%", "limits.fs.maxInodes"]);
        for i in 0..8 {
            vfs.create(&format!("/f{i}"), 0o644).await.expect("create");
        }
        assert_eq!(warnings(), 1, "9 of 10 inodes crosses 80% once");
        vfs.create("/f8", 0o644).await.expect("10th inode");
        assert_eq!(warnings(), 1, "no repeat while above");
        for i in 0..5 {
            vfs.unlink(&format!("/f{i}")).await.expect("unlink");
        }
        for i in 0..4 {
            vfs.create(&format!("/g{i}"), 0o644).await.expect("create");
        }
        assert_eq!(warnings(), 2, "a second crossing warns again");
    }
}

/// New-file creates run concurrently (they share one commit): races for the
/// same name leave exactly one file, a directory removed under them leaves no
/// orphan, and the usage counters equal the tree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_race_safely() {
    for (name, db, _backend) in backends().await {
        let vfs = open(&db, FsLimits::default(), VfsPolicy::default()).await;
        vfs.mkdir("/race", 0o755).await.expect("dir");
        vfs.mkdir("/doomed", 0o755).await.expect("dir");
        let mut tasks = Vec::new();
        for t in 0..16u8 {
            let vfs = vfs.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..40 {
                    // Every task writes the same 40 names.
                    vfs.write_file(&format!("/race/n{i}"), &[t; 10])
                        .await
                        .expect("create or replace");
                    match vfs.write_file(&format!("/doomed/t{t}-{i}"), b"x").await {
                        Ok(_) | Err(FsError::NotFound { .. }) => {}
                        Err(e) => panic!("unexpected {e}"),
                    }
                }
            }));
        }
        let remover = {
            let vfs = vfs.clone();
            tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                vfs.remove("/doomed", true).await
            })
        };
        for task in tasks {
            task.await.expect("task");
        }
        remover.await.expect("remover").expect("remove");
        let entries = vfs.readdir_all("/race").await.expect("list");
        assert_eq!(entries.len(), 40, "{name}");
        for e in &entries {
            let data = vfs
                .read_all(&format!("/race/{}", e.name))
                .await
                .expect("read");
            assert_eq!(data.len(), 10);
            assert!(data.iter().all(|b| *b == data[0]), "one writer's content");
        }
        assert!(!vfs.exists("/doomed").await.expect("exists"));
        let usage = vfs.usage().await.expect("usage");
        let inodes = db
            .query("SELECT count(*) FROM agentos_fs_inodes", vec![])
            .await
            .expect("count")
            .scalar_i64();
        let orphans = db
            .query(
                "SELECT count(*) FROM agentos_fs_inodes i WHERE i.ino <> 1 AND NOT EXISTS \
                 (SELECT 1 FROM agentos_fs_dentries d WHERE d.ino = i.ino)",
                vec![],
            )
            .await
            .expect("orphans")
            .scalar_i64();
        assert_eq!(orphans, Some(0), "{name}: no inode without a name");
        assert_eq!(Some(usage.inode_count as i64), inodes, "{name}");
        assert_eq!(
            usage.inode_count,
            1 + 1 + 40,
            "{name}: root, /race, 40 files"
        );
        assert_eq!(usage.total_bytes, 400);
    }
}

/// Small reads of a chunked file at part edges, in a hole and at the end
/// read what the file holds, on both backends and both runtime kinds (the
/// local file reads ranges of a part on the caller's thread or through its
/// reader threads), including after the file changed under a cached inode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_reads_at_part_edges_read_the_file() {
    small_reads().await;
}

#[tokio::test]
async fn small_reads_at_part_edges_read_the_file_through_the_reader_threads() {
    small_reads().await;
}

async fn small_reads() {
    const PART: u64 = 64 * 1024;
    for (name, db, _dir) in backends().await {
        let vfs = open(&db, FsLimits::default(), VfsPolicy::default()).await;
        let mut content: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 253) as u8).collect();
        vfs.write_file("/f", &content).await.expect("write");
        let cases = [
            (0, 10),
            (PART - 100, 200),
            (PART, 4096),
            (2 * PART - 1, 2),
            (512 * 1024 - 50, 100),
            (299_990, 4096),
            (300_000, 10),
        ];
        let check = |content: Vec<u8>| {
            let vfs = vfs.clone();
            async move {
                for (offset, len) in cases {
                    let got = vfs.read("/f", offset, len).await.expect("read");
                    let from = (offset as usize).min(content.len());
                    let to = ((offset + len) as usize).min(content.len());
                    assert_eq!(got, content[from..to], "{name}: {offset}+{len}");
                }
            }
        };
        check(content.clone()).await;
        // Rewritten in place, then grown past a hole: the cached inode is
        // gone with the commits, and the hole reads as zeros.
        vfs.write("/f", PART - 10, &[9u8; 20]).await.expect("write");
        content[(PART - 10) as usize..(PART + 10) as usize].fill(9);
        check(content.clone()).await;
        vfs.write("/f", 600_000, b"end").await.expect("write");
        content.resize(600_000, 0);
        content.extend_from_slice(b"end");
        check(content.clone()).await;
        assert_eq!(
            vfs.read("/f", 450_000, 8).await.expect("hole"),
            vec![0u8; 8],
            "{name}"
        );
    }
}

/// A name looked up and found missing is kept as missing only until the next
/// commit: every way of creating a name is seen by the next lookup, as is a
/// name created while lookups of it run at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_found_missing_is_seen_once_created() {
    for (name, db, _dir) in backends().await {
        let vfs = open(&db, FsLimits::default(), VfsPolicy::default()).await;
        vfs.write_file("/existing", b"x").await.expect("write");
        vfs.mkdir("/d", 0o755).await.expect("mkdir");
        let missing = |path: &'static str| {
            let vfs = vfs.clone();
            async move {
                assert!(!vfs.exists(path).await.expect("exists"), "{name}: {path}");
                assert_eq!(code(vfs.stat(path).await), "ENOENT", "{name}: {path}");
            }
        };
        missing("/w").await;
        vfs.write_file("/w", b"1").await.expect("write");
        assert_eq!(vfs.read_all("/w").await.expect("read"), b"1", "{name}");

        missing("/m").await;
        vfs.mkdir("/m", 0o755).await.expect("mkdir");
        assert!(vfs.stat("/m").await.is_ok(), "{name}: mkdir");

        missing("/p/q").await;
        vfs.mkdir_p("/p/q", 0o755).await.expect("mkdir -p");
        assert!(vfs.stat("/p/q").await.is_ok(), "{name}: mkdir -p");

        missing("/s").await;
        vfs.symlink("/existing", "/s").await.expect("symlink");
        assert!(vfs.stat("/s").await.is_ok(), "{name}: symlink");

        missing("/l").await;
        vfs.link("/existing", "/l").await.expect("link");
        assert!(vfs.stat("/l").await.is_ok(), "{name}: link");

        missing("/d/r").await;
        vfs.rename("/w", "/d/r").await.expect("rename");
        assert!(vfs.stat("/d/r").await.is_ok(), "{name}: rename target");
        assert_eq!(
            code(vfs.stat("/w").await),
            "ENOENT",
            "{name}: rename source"
        );

        // Lookups racing the create of the name they look up.
        for round in 0..20 {
            let path = format!("/race{round}");
            let looking = {
                let (vfs, path) = (vfs.clone(), path.clone());
                tokio::spawn(async move {
                    for _ in 0..5 {
                        let _ = vfs.exists(&path).await;
                        tokio::task::yield_now().await;
                    }
                })
            };
            vfs.write_file(&path, b"r").await.expect("write");
            looking.await.expect("lookups");
            assert!(vfs.exists(&path).await.expect("exists"), "{name}: {path}");
        }
    }
}
