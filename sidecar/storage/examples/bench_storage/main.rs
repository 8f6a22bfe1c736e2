//! Storage throughput: rows/s for 1-row and 100-row transactions of ~200-byte
//! JSON payloads on raw rusqlite (the ceiling), the handle on sqlite_file,
//! the handle on actor_uds through the reference server and, given
//! `--rivet SOCKET` (a runtime socket an actor of Rivet's real runtime
//! provisioned; `scripts/bench-storage` starts one), through Rivet's own
//! server, with each ratio to raw. Then the request/response timeline of one
//! actor_uds transaction of each size (its round trips), and the handle
//! against a peer that answers at once without SQLite (the ceiling of the
//! client's own side), beside a bare client sending each transaction
//! stepwise (the handle's shape, the only one Rivet's server keeps in
//! order), in two round trips and in one against such a peer (the ceiling of
//! each shape), and stepwise through Rivet's server (the reference server
//! runs pipelined requests newest first, so the pipelined shapes fail
//! there, as they may on Rivet's). Run through `scripts/bench-storage`
//! (release build); flags such as `--only uds --rows 100 --secs 5` narrow a
//! run down for profiling.

mod bare_client;
mod instant_peer;
mod timeline;

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentos_schema::{Database, SqlValue, Statement};
use agentos_storage::ars_server::{self, ArsServerOptions};
use agentos_storage::SqliteLimits;
use agentos_storage::{actor_uds, sqlite_conn, sqlite_file};
use bare_client::{BareClient, Shape};

/// The allocator the `agentos-sidecar` binary runs with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CREATE: &str =
    "CREATE TABLE IF NOT EXISTS bench (id INTEGER PRIMARY KEY, body TEXT NOT NULL) STRICT";
const INSERT: &str = "INSERT INTO bench (id, body) VALUES (?1, ?2)";

fn payload(i: i64) -> String {
    let body = format!(
        r#"{{"sequence":{i},"kind":"agent_message_chunk","session":"2f1c9a64-6a0e-4f0e-9b3a-1d2e3f405162","text":"{}"}}"#,
        "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod"
    );
    debug_assert!(body.len() >= 180 && body.len() <= 220);
    body
}

/// The raw ceiling, doing the same SQL work the handle does for each
/// transaction: `BEGIN IMMEDIATE`, then per statement a cached-statement
/// lookup by its SQL text, bind, step and an expected-change check, then
/// `COMMIT`. Hoisting one prepared statement out of the loop would be faster
/// but is only possible because raw code knows every statement is the same;
/// the handle receives a list of independent statements.
struct Raw {
    conn: rusqlite::Connection,
    id: i64,
}

impl Raw {
    fn open(path: &Path) -> Result<Raw, String> {
        let conn = sqlite_conn::open_connection(path).map_err(|e| e.to_string())?;
        conn.execute_batch(CREATE).map_err(|e| e.to_string())?;
        Ok(Raw { conn, id: 0 })
    }

    fn run(&mut self, rows_per_tx: usize, run: Duration) -> Result<f64, String> {
        let conn = &self.conn;
        let mut meter = Meter::new(run);
        while meter.running() {
            conn.execute_batch("BEGIN IMMEDIATE")
                .map_err(|e| e.to_string())?;
            for _ in 0..rows_per_tx {
                self.id += 1;
                let body = payload(self.id);
                let mut stmt = conn.prepare_cached(INSERT).map_err(|e| e.to_string())?;
                let changes = stmt
                    .execute(rusqlite::params![self.id, body])
                    .map_err(|e| e.to_string())?;
                if changes != 1 {
                    return Err(format!("raw insert changed {changes} rows"));
                }
            }
            conn.execute_batch("COMMIT").map_err(|e| e.to_string())?;
            meter.add(rows_per_tx);
        }
        Ok(meter.rate())
    }
}

/// Runs 1- or 100-row transactions through the handle for `run` in a spawned
/// task, as the sidecar's sessions call it (never from `block_on`); `next_id`
/// carries the key sequence across rounds so every insert stays fresh.
async fn handle(
    db: &Arc<dyn Database>,
    next_id: &mut i64,
    rows_per_tx: usize,
    run: Duration,
) -> Result<f64, String> {
    let (db, start_id) = (db.clone(), *next_id);
    let (rate, end_id) = tokio::spawn(async move {
        let mut id = start_id;
        let rate = transactions(db.as_ref(), &mut id, rows_per_tx, run).await;
        (rate, id)
    })
    .await
    .map_err(|e| e.to_string())?;
    *next_id = end_id;
    rate
}

/// One transaction of `rows_per_tx` fresh inserts, each expected to change
/// one row.
async fn transaction(
    db: &dyn Database,
    next_id: &mut i64,
    rows_per_tx: usize,
) -> Result<(), String> {
    let statements = (0..rows_per_tx)
        .map(|_| {
            *next_id += 1;
            Statement::new(
                INSERT,
                vec![
                    SqlValue::Integer(*next_id),
                    SqlValue::Text(payload(*next_id)),
                ],
            )
            .expect_changes(1)
        })
        .collect();
    db.transaction(statements)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Rows/s over one timed run: `while meter.running() { …; meter.add(rows) }`.
struct Meter {
    start: Instant,
    run: Duration,
    rows: u64,
}

impl Meter {
    fn new(run: Duration) -> Meter {
        Meter {
            start: Instant::now(),
            run,
            rows: 0,
        }
    }

    fn running(&self) -> bool {
        self.start.elapsed() < self.run
    }

    fn add(&mut self, rows: usize) {
        self.rows += rows as u64;
    }

    fn rate(&self) -> f64 {
        self.rows as f64 / self.start.elapsed().as_secs_f64()
    }
}

async fn transactions(
    db: &dyn Database,
    next_id: &mut i64,
    rows_per_tx: usize,
    run: Duration,
) -> Result<f64, String> {
    let mut meter = Meter::new(run);
    while meter.running() {
        transaction(db, next_id, rows_per_tx).await?;
        meter.add(rows_per_tx);
    }
    Ok(meter.rate())
}

/// A reference ARS server over `served` on `socket`, and a handle on it that
/// has made the bench table.
async fn reference_server(
    served: &Path,
    socket: &Path,
    limits: &SqliteLimits,
) -> Result<(ars_server::ArsServerHandle, actor_uds::ActorUdsDatabase), String> {
    let server = ars_server::bind(served, socket, ArsServerOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    let db = actor_uds::connect(socket, limits)
        .await
        .map_err(|e| e.to_string())?;
    db.query(CREATE, vec![]).await.map_err(|e| e.to_string())?;
    Ok((server, db))
}

/// What a bare client talks to, alone.
enum Behind {
    Peer(instant_peer::InstantPeer),
    Rivet,
}

/// A bare client in one shape, with what it talks to and its rounds.
struct Bare {
    shape: Shape,
    behind: Behind,
    /// Lent to the task that runs a round.
    client: Option<BareClient>,
    next_id: i64,
    rates: Vec<f64>,
}

impl Bare {
    fn new(shape: Shape, behind: Behind, client: BareClient) -> Bare {
        Bare {
            shape,
            behind,
            client: Some(client),
            next_id: 0,
            rates: vec![],
        }
    }

    /// An instant peer polls without sleeping only while its rounds run.
    fn polling(&self, on: bool) {
        if let Behind::Peer(peer) = &self.behind {
            peer.active.store(on, Ordering::Relaxed);
        }
    }
}

/// Prints one actor_uds transaction of `rows_per_tx` rows as the recording
/// proxy saw it, after a few unrecorded ones (the statements are cached).
async fn print_timeline(
    dir: &Path,
    server_socket: &Path,
    limits: &SqliteLimits,
    next_id: &mut i64,
    rows_per_tx: usize,
) -> Result<(), String> {
    let proxy_dir = dir.join(format!("proxy-{rows_per_tx}"));
    std::fs::create_dir_all(&proxy_dir).map_err(|e| e.to_string())?;
    let proxy = timeline::Proxy::start(&proxy_dir, server_socket)
        .await
        .map_err(|e| e.to_string())?;
    let db = actor_uds::connect(&proxy.socket, limits)
        .await
        .map_err(|e| e.to_string())?;
    for _ in 0..3 {
        transaction(&db, next_id, rows_per_tx).await?;
    }
    proxy.record();
    transaction(&db, next_id, rows_per_tx).await?;
    let bursts = proxy.take();
    println!("    actor_uds, one {rows_per_tx}-row transaction through a recording proxy:");
    let round_trips = timeline::print(&bursts);
    println!("      round trips: {round_trips}");
    db.close().await;
    Ok(())
}

/// What to measure; `--only raw|file|uds|rivet|instant` (`instant`: the handle and
/// the bare client against instant peers), `--rows N`, `--rounds N` and
/// `--secs S` (per round and target) narrow a run down for profiling.
struct Options {
    only: Option<String>,
    sizes: Vec<usize>,
    rounds: usize,
    round: Duration,
    /// An Actor Runtime Socket of Rivet's real runtime (`--rivet PATH`).
    rivet: Option<std::path::PathBuf>,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        only: None,
        sizes: vec![1, 100],
        rounds: 3,
        round: Duration::from_secs(1),
        rivet: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--only" => options.only = Some(value),
            "--rivet" => options.rivet = Some(value.into()),
            "--rows" => options.sizes = vec![value.parse().map_err(|e| bad(&e))?],
            "--rounds" => options.rounds = value.parse::<usize>().map_err(|e| bad(&e))?.max(1),
            "--secs" => {
                options.round = Duration::from_secs_f64(value.parse().map_err(|e| bad(&e))?)
            }
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(options)
}

fn median(mut rates: Vec<f64>) -> f64 {
    if rates.is_empty() {
        return f64::NAN;
    }
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

async fn run() -> Result<(), String> {
    let options = options()?;
    let wants = |name: &str| options.only.as_deref().is_none_or(|only| only == name);
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let limits = SqliteLimits::default();
    // The machine is shared, so the targets take turns round by round and each
    // figure is the median of its rounds: a burst of outside load then skews
    // one round of every target rather than all rounds of one.
    println!(
        "storage benchmark: ~200-byte JSON rows, median of {} interleaved rounds of {:.1} s",
        options.rounds,
        options.round.as_secs_f64()
    );
    let rivet_socket = options.rivet.as_deref().filter(|_| wants("rivet"));
    println!(
        "{:<10} {:>14} {:>16} {:>8} {:>16} {:>8} {:>16} {:>8}",
        "rows/tx", "raw rows/s", "sqlite_file", "ratio", "actor_uds", "ratio", "rivet", "ratio"
    );
    // The handle and a bare client on Rivet's server share its actor's
    // table: each has an id range of its own, over every size.
    let (mut rivet_id, mut rivet_bare_id) = (0i64, 1i64 << 40);
    let rivet: Option<Arc<dyn Database>> = match rivet_socket {
        Some(socket) => {
            let db = actor_uds::connect(socket, &limits)
                .await
                .map_err(|e| format!("Rivet's socket {}: {e}", socket.display()))?;
            db.query(CREATE, vec![]).await.map_err(|e| e.to_string())?;
            Some(Arc::new(db))
        }
        None => None,
    };
    for &rows_per_tx in &options.sizes {
        let mut raw = match wants("raw") {
            true => Some(Raw::open(
                &dir.path().join(format!("raw-{rows_per_tx}.sqlite")),
            )?),
            false => None,
        };
        let file: Option<Arc<dyn Database>> = match wants("file") {
            true => {
                let path = dir.path().join(format!("file-{rows_per_tx}.sqlite"));
                let db = sqlite_file::SqliteFileDatabase::open(&path, &limits)
                    .map_err(|e| e.to_string())?;
                db.query(CREATE, vec![]).await.map_err(|e| e.to_string())?;
                Some(Arc::new(db))
            }
            false => None,
        };
        let mut server = None;
        let uds: Option<Arc<dyn Database>> = match wants("uds") {
            true => {
                let (served, db) = reference_server(
                    &dir.path().join(format!("uds-{rows_per_tx}.sqlite")),
                    &dir.path().join(format!("s{rows_per_tx}.sock")),
                    &limits,
                )
                .await?;
                server = Some(served);
                Some(Arc::new(db))
            }
            false => None,
        };

        let mut peer = None;
        let instant: Option<Arc<dyn Database>> = match wants("instant") {
            true => {
                let started = instant_peer::InstantPeer::start(
                    &dir.path().join(format!("instant-{rows_per_tx}.sock")),
                )
                .map_err(|e| e.to_string())?;
                // The peer serves one connection: the handle must not move
                // to a fresh one after its share of leases.
                let one_connection = SqliteLimits {
                    max_leases_per_connection: u32::MAX,
                    ..limits.clone()
                };
                let db = actor_uds::connect(&started.socket, &one_connection)
                    .await
                    .map_err(|e| e.to_string())?;
                peer = Some(started);
                Some(Arc::new(db))
            }
            false => None,
        };
        // A peer of its own for each bare client (a peer serves one
        // connection), and stepwise through Rivet's server.
        let mut bare = vec![];
        if wants("instant") {
            for (name, shape) in [
                ("stepwise", Shape::Stepwise),
                ("two", Shape::TwoTrips),
                ("one", Shape::OneTrip),
            ] {
                let peer = instant_peer::InstantPeer::start(
                    &dir.path().join(format!("bare-{name}-{rows_per_tx}.sock")),
                )
                .map_err(|e| e.to_string())?;
                let client = BareClient::connect(&peer.socket).await?;
                bare.push(Bare::new(shape, Behind::Peer(peer), client));
            }
        }
        if let Some(socket) = rivet_socket {
            let client = BareClient::connect(socket).await?;
            let mut on_rivet = Bare::new(Shape::Stepwise, Behind::Rivet, client);
            on_rivet.next_id = rivet_bare_id;
            bare.push(on_rivet);
        }
        let (mut raw_rates, mut file_rates, mut uds_rates) = (vec![], vec![], vec![]);
        let mut rivet_rates = vec![];
        let mut instant_rates = vec![];
        let (mut file_id, mut uds_id, mut instant_id) = (0i64, 0i64, 0i64);
        for _ in 0..options.rounds {
            if let Some(raw) = raw.as_mut() {
                raw_rates.push(raw.run(rows_per_tx, options.round)?);
            }
            if let Some(db) = &file {
                file_rates.push(handle(db, &mut file_id, rows_per_tx, options.round).await?);
            }
            if let Some(db) = &uds {
                uds_rates.push(handle(db, &mut uds_id, rows_per_tx, options.round).await?);
            }
            if let Some(db) = &rivet {
                rivet_rates.push(handle(db, &mut rivet_id, rows_per_tx, options.round).await?);
            }
            if let (Some(db), Some(peer)) = (&instant, &peer) {
                peer.active.store(true, Ordering::Relaxed);
                let rate = handle(db, &mut instant_id, rows_per_tx, options.round).await;
                peer.active.store(false, Ordering::Relaxed);
                instant_rates.push(rate?);
            }
            for bare in &mut bare {
                let Some(client) = bare.client.take() else {
                    continue;
                };
                bare.polling(true);
                let (shape, start_id, round) = (bare.shape, bare.next_id, options.round);
                // In a spawned task, as `handle` runs the handle.
                let (client, rate, end_id) = tokio::spawn(async move {
                    let (mut client, mut id) = (client, start_id);
                    let rate = client.run(shape, &mut id, rows_per_tx, round).await;
                    (client, rate, id)
                })
                .await
                .map_err(|e| e.to_string())?;
                bare.polling(false);
                bare.rates.push(rate?);
                (bare.client, bare.next_id) = (Some(client), end_id);
            }
        }
        drop(uds);
        drop(instant);
        drop(peer);

        let (raw_rate, file_rate, uds_rate) =
            (median(raw_rates), median(file_rates), median(uds_rates));
        // Without a socket of Rivet's runtime its columns say so.
        let (rivet_rate, rivet_ratio) = match rivet_rates.is_empty() {
            true => ("-".to_owned(), "-".to_owned()),
            false => {
                let rate = median(rivet_rates);
                (format!("{rate:.0}"), format!("{:.2}x", rate / raw_rate))
            }
        };
        println!(
            "{:<10} {:>14.0} {:>16.0} {:>7.2}x {:>16.0} {:>7.2}x {:>16} {:>8}",
            rows_per_tx,
            raw_rate,
            file_rate,
            file_rate / raw_rate,
            uds_rate,
            uds_rate / raw_rate,
            rivet_rate,
            rivet_ratio
        );
        if !instant_rates.is_empty() {
            let rate = median(instant_rates);
            println!(
                "    actor_uds against a peer that answers at once (no SQLite, polls without sleeping): {rate:.0} rows/s, {:.2}x raw",
                rate / raw_rate
            );
        }
        for bare in bare {
            let rate = median(bare.rates);
            let shape = match bare.shape {
                Shape::Stepwise => {
                    "stepwise (Begin with the first insert, then one request per answer: the handle's shape)"
                }
                Shape::TwoTrips => {
                    "two round trips (Begin and the inserts, then Commit; out of order on Rivet's server)"
                }
                Shape::OneTrip => "one round trip (Commit behind them; unsafe under ARS v1)",
            };
            let behind = match bare.behind {
                Behind::Peer(_) => "against such a peer",
                Behind::Rivet => {
                    rivet_bare_id = bare.next_id;
                    "through Rivet's server"
                }
            };
            println!(
                "    a bare client, {shape}, {behind}: {rate:.0} rows/s, {:.2}x raw",
                rate / raw_rate
            );
        }
        if let Some(server) = server {
            let socket = dir.path().join(format!("s{rows_per_tx}.sock"));
            print_timeline(dir.path(), &socket, &limits, &mut uds_id, rows_per_tx).await?;
            server.shutdown().await;
        }
    }
    println!(
        "goals: sqlite_file >= 0.80x raw on 100-row transactions; actor_uds >= 0.40x raw on 1-row and on 100-row"
    );
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
