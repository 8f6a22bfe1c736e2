//! Storage throughput: rows/s for 1-row and 100-row transactions of ~200-byte
//! JSON payloads on raw rusqlite (the ceiling), the handle on sqlite_file, and
//! the handle on actor_uds through the reference server, with each ratio to
//! raw. Run through `scripts/bench-storage` (release build).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentos_schema::{Database, SqlValue, Statement};
use agentos_sidecar::config::SqliteLimits;
use agentos_sidecar::db::ars_server::{self, ArsServerOptions};
use agentos_sidecar::db::{actor_uds, sqlite_file};

const CREATE: &str =
    "CREATE TABLE IF NOT EXISTS bench (id INTEGER PRIMARY KEY, body TEXT NOT NULL) STRICT";
const INSERT: &str = "INSERT INTO bench (id, body) VALUES (?1, ?2)";
/// Each measurement runs for about this long.
const RUN: Duration = Duration::from_secs(3);

fn payload(i: i64) -> String {
    let body = format!(
        r#"{{"sequence":{i},"kind":"agent_message_chunk","session":"2f1c9a64-6a0e-4f0e-9b3a-1d2e3f405162","text":"{}"}}"#,
        "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod"
    );
    debug_assert!(body.len() >= 180 && body.len() <= 220);
    body
}

fn raw(path: &Path, rows_per_tx: usize) -> Result<f64, String> {
    let conn = sqlite_file::open_connection(path).map_err(|e| e.to_string())?;
    conn.execute_batch(CREATE).map_err(|e| e.to_string())?;
    let mut id: i64 = 0;
    let mut rows = 0u64;
    let start = Instant::now();
    while start.elapsed() < RUN {
        conn.execute_batch("BEGIN IMMEDIATE")
            .map_err(|e| e.to_string())?;
        {
            let mut stmt = conn.prepare_cached(INSERT).map_err(|e| e.to_string())?;
            for _ in 0..rows_per_tx {
                id += 1;
                stmt.execute(rusqlite::params![id, payload(id)])
                    .map_err(|e| e.to_string())?;
            }
        }
        conn.execute_batch("COMMIT").map_err(|e| e.to_string())?;
        rows += rows_per_tx as u64;
    }
    Ok(rows as f64 / start.elapsed().as_secs_f64())
}

async fn handle(db: Arc<dyn Database>, rows_per_tx: usize) -> Result<f64, String> {
    db.query(CREATE, vec![]).await.map_err(|e| e.to_string())?;
    let mut id: i64 = 0;
    let mut rows = 0u64;
    let start = Instant::now();
    while start.elapsed() < RUN {
        let statements = (0..rows_per_tx)
            .map(|_| {
                id += 1;
                Statement::new(
                    INSERT,
                    vec![SqlValue::Integer(id), SqlValue::Text(payload(id))],
                )
                .expect_changes(1)
            })
            .collect();
        db.transaction(statements)
            .await
            .map_err(|e| e.to_string())?;
        rows += rows_per_tx as u64;
    }
    Ok(rows as f64 / start.elapsed().as_secs_f64())
}

async fn run() -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let limits = SqliteLimits::default();
    println!(
        "storage benchmark: ~200-byte JSON rows, each figure over {} s",
        RUN.as_secs()
    );
    println!(
        "{:<10} {:>14} {:>16} {:>8} {:>16} {:>8}",
        "rows/tx", "raw rows/s", "sqlite_file", "ratio", "actor_uds", "ratio"
    );
    for rows_per_tx in [1usize, 100] {
        let raw_rate = raw(
            &dir.path().join(format!("raw-{rows_per_tx}.sqlite")),
            rows_per_tx,
        )?;

        let file = dir.path().join(format!("file-{rows_per_tx}.sqlite"));
        let db =
            sqlite_file::SqliteFileDatabase::open(&file, &limits).map_err(|e| e.to_string())?;
        let file_rate = handle(Arc::new(db), rows_per_tx).await?;

        let served = dir.path().join(format!("uds-{rows_per_tx}.sqlite"));
        let socket = dir.path().join(format!("s{rows_per_tx}.sock"));
        let server = ars_server::bind(&served, &socket, ArsServerOptions::default())
            .await
            .map_err(|e| e.to_string())?;
        let db = actor_uds::connect(&socket, &limits)
            .await
            .map_err(|e| e.to_string())?;
        let uds_rate = handle(Arc::new(db), rows_per_tx).await?;
        server.shutdown().await;

        println!(
            "{:<10} {:>14.0} {:>16.0} {:>7.2}x {:>16.0} {:>7.2}x",
            rows_per_tx,
            raw_rate,
            file_rate,
            file_rate / raw_rate,
            uds_rate,
            uds_rate / raw_rate
        );
    }
    println!("goals on 100-row transactions: sqlite_file >= 0.80x raw, actor_uds >= 0.40x raw");
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("benchmark failed: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
