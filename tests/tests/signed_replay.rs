//! The replay cache at its bound: with room for three signatures, a fourth
//! request pushes out the oldest, after which a request signed at or before
//! the forgotten one is refused (it can no longer be told apart from a
//! replay), while newer ones pass and remembered ones stay replays.

mod common;

use agentos_tests::http::Target;
use agentos_tests::seed::{now_ms, post, Signer};
use common::{Backend, Options, Sidecar};
use serde_json::json;

#[tokio::test]
async fn a_full_replay_cache_forgets_the_oldest_and_refuses_older_requests() {
    let sc = Sidecar::start_with(
        Backend::SqliteFile,
        Options {
            config: json!({"http": {"listen": "127.0.0.1:0", "replayCacheEntries": 3}}),
            ..Options::default()
        },
    )
    .await;
    let t = Target::from_ready(sc.ready["http"].as_str().expect("http"));
    let me = Signer::new();
    let now = now_ms();
    let at = |ms: i64| {
        me.envelope_at(&json!({"_": "ListAgents"}), now - 10_000 + ms)
            .encode()
            .expect("encode")
    };
    let (first, second, third, fourth) = (at(1), at(2), at(3), at(4));
    for body in [&first, &second, &third] {
        assert_eq!(post(&t, body).await.status, 200);
    }
    // Full: the fourth pushes out the first.
    assert_eq!(post(&t, &fourth).await.status, 200);
    let again = post(&t, &first).await;
    assert_eq!((again.status, again.code().as_str()), (401, "replayed"));
    let older = post(&t, &at(0)).await;
    assert_eq!((older.status, older.code().as_str()), (401, "replayed"));
    let remembered = post(&t, &third).await;
    assert_eq!(
        (remembered.status, remembered.code().as_str()),
        (401, "replayed")
    );
    assert_eq!(post(&t, &at(5)).await.status, 200);
}
