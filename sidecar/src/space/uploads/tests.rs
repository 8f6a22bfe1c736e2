//! Uploads on a real VFS over a real SQLite file, on a clock the test
//! turns: expiry at its edge, expired uploads giving back their slot and
//! their bytes, and a crash's leftovers never becoming an attachment.

use agentos_schema::migrate_all;
use agentos_storage::testing::{sqlite_file, TestDb};
use agentos_vfs::VfsPolicy;

use super::*;
use crate::config::FsLimits;

const IDLE: i64 = 60_000;
const T0: i64 = 1_700_000_000_000;

async fn uploads(max_per_account: u64) -> (TestDb, Vfs, Uploads) {
    let test = sqlite_file().await;
    migrate_all(test.db.as_ref()).await.expect("migrate");
    let policy = VfsPolicy {
        roots: vec!["/work".into()],
        read_only: Vec::new(),
    };
    let limits = FsLimits::default().validated().expect("limits");
    let vfs = Vfs::open(test.db.clone(), limits, policy)
        .await
        .expect("vfs");
    let attachments = SessionAttachments::new(&vfs, 100 * 1024 * 1024, 200);
    let memory = AgentMemory::new(&vfs);
    let limits = ControlLimits {
        max_uploads_per_account: max_per_account,
        upload_idle_ms: IDLE as u64,
        ..ControlLimits::default()
    };
    let uploads = Uploads::new(&vfs, attachments, memory, &limits);
    (test, vfs, uploads)
}

fn to_session(name: &str) -> UploadTarget {
    UploadTarget::SessionAttachment {
        session_id: "s1".into(),
        name: name.into(),
        mime_type: None,
    }
}

#[tokio::test]
async fn an_upload_lives_until_it_has_been_idle_past_the_bound() {
    let (_db, _vfs, uploads) = uploads(8).await;
    let id = uploads
        .begin("acct", to_session("a.txt"), 6, T0)
        .await
        .expect("begin")
        .upload_id;
    // Exactly the bound idle is still alive, and touching it renews it.
    assert_eq!(uploads.append(&id, 0, b"abc", T0 + IDLE).await, Ok(3));
    assert_eq!(uploads.append(&id, 3, b"def", T0 + 2 * IDLE).await, Ok(6));
    // One millisecond past the bound since the last touch: gone, for
    // every action.
    let late = T0 + 3 * IDLE + 1;
    for outcome in [
        uploads.append(&id, 6, b"g", late).await.map(drop),
        uploads.commit(&id, late).await.map(drop),
        uploads.abort(&id, late).await,
    ] {
        assert_eq!(
            outcome,
            Err(AttachmentError::NotFound("Upload not found".into()))
        );
    }
}

#[tokio::test]
async fn an_expired_upload_gives_back_its_slot_and_its_bytes() {
    let (_db, vfs, uploads) = uploads(2).await;
    let reserved = vfs.reserved_view();
    let mut ids = Vec::new();
    for name in ["a", "b"] {
        let id = uploads
            .begin("acct", to_session(name), 4, T0)
            .await
            .expect("begin")
            .upload_id;
        uploads.append(&id, 0, b"ab", T0).await.expect("append");
        ids.push(id);
    }
    let third = uploads.begin("acct", to_session("c"), 4, T0 + IDLE).await;
    assert_eq!(
        third.map(drop),
        Err(AttachmentError::TooMany(
            "Too many uploads in progress".into()
        ))
    );
    // Another account is not held back by this one's uploads.
    uploads
        .begin("other", to_session("d"), 4, T0 + IDLE)
        .await
        .expect("another account's upload");
    // Once they have idled past the bound, a new one takes their place and
    // their staged bytes are gone.
    uploads
        .begin("acct", to_session("c"), 4, T0 + IDLE + 1)
        .await
        .expect("a slot freed by expiry");
    for id in &ids {
        let part = Uploads::part_path(id);
        assert!(!reserved.exists(&part).await.expect("exists"), "{part}");
        let state = Uploads::state_path(id);
        assert!(!reserved.exists(&state).await.expect("exists"), "{state}");
    }
}

#[tokio::test]
async fn an_incomplete_upload_commits_nothing_and_stays_usable() {
    let (_db, _vfs, uploads) = uploads(8).await;
    let id = uploads
        .begin("acct", to_session("n.txt"), 5, T0)
        .await
        .expect("begin")
        .upload_id;
    uploads.append(&id, 0, b"ab", T0).await.expect("append");
    assert_eq!(
        uploads.commit(&id, T0).await.map(drop),
        Err(AttachmentError::Invalid(
            "Upload has 2 of 5 bytes; cannot commit".into()
        ))
    );
    assert_eq!(uploads.append(&id, 2, b"cde", T0).await, Ok(5));
    match uploads.commit(&id, T0).await {
        Ok(Committed::Attachment(info)) => {
            assert_eq!(info.size, 5);
            assert_eq!(info.name, "n.txt");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        uploads.commit(&id, T0).await.map(drop),
        Err(AttachmentError::NotFound("Upload not found".into()))
    );
}
