//! VFS throughput beside the host file system, on a `sqlite_file` database:
//! sequential write and read of a large file, random 4 KiB reads, and small
//! file creates, including the create rate with 1k and with 100k files already
//! present (metadata cost must not grow with the tree). The sequential write,
//! whose host figure swings with the virtual disk's writeback, is measured in
//! interleaved rounds (host, VFS, host, VFS, ...) and each side's figure is
//! its median. Prints figures only; run through `scripts/bench-vfs`.

use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentos_schema::{migrate_all, SharedDatabase};
use agentos_storage::sqlite_file::SqliteFileDatabase;
use agentos_storage::SqliteLimits;
use agentos_vfs::FsLimits;
use agentos_vfs::{Vfs, VfsPolicy};
use rand::{Rng, SeedableRng};

/// The allocator the `agentos-sidecar` binary runs with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const MIB: u64 = 1024 * 1024;

struct Figures {
    /// Process CPU microseconds per create in the first and last windows:
    /// unlike rates, unaffected by other processes competing for the cores.
    cpu_us_first: f64,
    cpu_us_last: f64,
    write_mbs: f64,
    read_mbs: f64,
    random_reads: f64,
    /// Random 4 KiB reads/s of two readers at once (in all).
    random_reads_two: f64,
    creates: f64,
    creates_at_1k: f64,
    creates_at_100k: f64,
    /// Creates/s with `WRITERS` concurrent writers, after the sequential run
    /// (so the tree already holds its files).
    parallel_creates: f64,
}

/// Concurrent writers for the parallel create figure.
const WRITERS: u64 = 32;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// CPU time (user + system, all threads) this process has used, in µs.
fn cpu_us() -> f64 {
    // SAFETY: getrusage only writes into the zeroed struct we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid out-pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn rate(n: u64, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

struct Params {
    file_bytes: u64,
    io_bytes: u64,
    random_reads: u64,
    files: u64,
    window: u64,
    write_rounds: u64,
}

/// The pattern every piece of a sequential write carries.
fn pattern(p: &Params) -> Vec<u8> {
    (0..p.io_bytes).map(|i| (i * 31 % 251) as u8).collect()
}

/// Makes `piece` the one at `offset` in `round`: its first sixteen bytes
/// differ from every other piece's, so no block is deduplicated away.
fn stamp(piece: &mut [u8], offset: u64, round: u64) {
    piece[..8].copy_from_slice(&offset.to_le_bytes());
    piece[8..16].copy_from_slice(&round.to_le_bytes());
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// Writes the host's file for one round, through to the disk: MB/s.
fn host_write(p: &Params, path: &std::path::Path, round: u64) -> std::io::Result<f64> {
    let mut piece = pattern(p);
    let t = Instant::now();
    let mut f = std::fs::File::create(path)?;
    let mut written = 0;
    while written < p.file_bytes {
        stamp(&mut piece, written, round);
        f.write_all(&piece)?;
        written += p.io_bytes;
    }
    f.sync_all()?;
    Ok(p.file_bytes as f64 / MIB as f64 / t.elapsed().as_secs_f64())
}

/// Writes a new VFS file for one round (each write commits): MB/s.
async fn vfs_write(
    vfs: &Vfs,
    p: &Params,
    path: &str,
    round: u64,
) -> Result<f64, agentos_vfs::FsError> {
    vfs.create(path, 0o644).await?;
    let mut piece = pattern(p);
    let t = Instant::now();
    let mut written = 0;
    while written < p.file_bytes {
        stamp(&mut piece, written, round);
        vfs.write(path, written, &piece).await?;
        written += p.io_bytes;
    }
    Ok(p.file_bytes as f64 / MIB as f64 / t.elapsed().as_secs_f64())
}

/// The host's figures after the write rounds, reading the file they left.
fn host(p: &Params, dir: &std::path::Path, write_mbs: f64) -> std::io::Result<Figures> {
    let path = dir.join("big");
    let t = Instant::now();
    let mut f = std::fs::File::open(&path)?;
    let mut rbuf = vec![0u8; p.io_bytes as usize];
    let mut read = 0;
    while read < p.file_bytes {
        f.read_exact(&mut rbuf)?;
        read += p.io_bytes;
    }
    let read_mbs = p.file_bytes as f64 / MIB as f64 / t.elapsed().as_secs_f64();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut small = [0u8; 4096];
    let t = Instant::now();
    for _ in 0..p.random_reads {
        let off = rng.gen_range(0..p.file_bytes / 4096) * 4096;
        f.seek(SeekFrom::Start(off))?;
        f.read_exact(&mut small)?;
    }
    let random_reads = rate(p.random_reads, t.elapsed());
    let t = Instant::now();
    std::thread::scope(|scope| {
        for seed in [11, 13] {
            let path = &path;
            scope.spawn(move || {
                let mut f = std::fs::File::open(path).expect("host open");
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
                let mut small = [0u8; 4096];
                for _ in 0..p.random_reads / 2 {
                    let off = rng.gen_range(0..p.file_bytes / 4096) * 4096;
                    f.seek(SeekFrom::Start(off)).expect("host seek");
                    f.read_exact(&mut small).expect("host read");
                }
            });
        }
    });
    let random_reads_two = rate(p.random_reads / 2 * 2, t.elapsed());
    let files = dir.join("files");
    std::fs::create_dir(&files)?;
    let (mut at_1k, mut at_100k) = (0.0, 0.0);
    let (mut cpu_first, mut cpu_last) = (0.0, 0.0);
    let t = Instant::now();
    let mut window = Instant::now();
    let mut cpu = cpu_us();
    for i in 0..p.files {
        if i % p.window == 0 {
            window = Instant::now();
            cpu = cpu_us();
        }
        std::fs::write(files.join(format!("f{i:07}")), b"small file content\n")?;
        if i + 1 == p.window {
            at_1k = rate(p.window, window.elapsed());
            cpu_first = (cpu_us() - cpu) / p.window as f64;
        }
        if i + 1 == p.files {
            at_100k = rate(p.window, window.elapsed());
            cpu_last = (cpu_us() - cpu) / p.window as f64;
        }
    }
    let creates = rate(p.files, t.elapsed());
    let par = dir.join("par");
    std::fs::create_dir(&par)?;
    let per_writer = p.files / WRITERS;
    let t = Instant::now();
    std::thread::scope(|scope| {
        for w in 0..WRITERS {
            let par = &par;
            scope.spawn(move || {
                for i in 0..per_writer {
                    std::fs::write(par.join(format!("w{w}-{i}")), b"small file content\n")
                        .expect("host create");
                }
            });
        }
    });
    let parallel_creates = rate(per_writer * WRITERS, t.elapsed());
    Ok(Figures {
        cpu_us_first: cpu_first,
        cpu_us_last: cpu_last,
        write_mbs,
        read_mbs,
        random_reads,
        random_reads_two,
        creates,
        creates_at_1k: at_1k,
        creates_at_100k: at_100k,
        parallel_creates,
    })
}

async fn open_vfs(p: &Params, dir: &std::path::Path) -> Result<Vfs, Box<dyn std::error::Error>> {
    let db = SqliteFileDatabase::open(&dir.join("vm.sqlite"), &SqliteLimits::default())?;
    let db: SharedDatabase = Arc::new(db);
    migrate_all(db.as_ref()).await?;
    let limits = FsLimits {
        max_file_bytes: p.file_bytes.max(FsLimits::default().max_file_bytes),
        ..FsLimits::default()
    };
    Ok(Vfs::open(db, limits.validated()?, VfsPolicy::default()).await?)
}

/// The VFS's figures after the write rounds, reading the file the last one
/// wrote (`big`).
async fn vfs(
    p: &Params,
    vfs: &Vfs,
    big: &str,
    write_mbs: f64,
) -> Result<Figures, Box<dyn std::error::Error>> {
    let t = Instant::now();
    let mut read = 0;
    while read < p.file_bytes {
        let got = vfs.read(big, read, p.io_bytes).await?;
        read += got.len() as u64;
    }
    let read_mbs = p.file_bytes as f64 / MIB as f64 / t.elapsed().as_secs_f64();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let t = Instant::now();
    for _ in 0..p.random_reads {
        let off = rng.gen_range(0..p.file_bytes / 4096) * 4096;
        let got = vfs.read(big, off, 4096).await?;
        assert_eq!(got.len(), 4096);
    }
    let random_reads = rate(p.random_reads, t.elapsed());
    let t = Instant::now();
    let mut readers = Vec::new();
    for seed in [11, 13] {
        let (vfs, p_reads, p_bytes) = (vfs.clone(), p.random_reads / 2, p.file_bytes);
        let big = big.to_owned();
        readers.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            for _ in 0..p_reads {
                let off = rng.gen_range(0..p_bytes / 4096) * 4096;
                let got = vfs.read(&big, off, 4096).await?;
                assert_eq!(got.len(), 4096);
            }
            Ok::<_, agentos_vfs::FsError>(())
        }));
    }
    for reader in readers {
        reader.await??;
    }
    let random_reads_two = rate(p.random_reads / 2 * 2, t.elapsed());
    vfs.mkdir("/files", 0o755).await?;
    let (mut at_1k, mut at_100k) = (0.0, 0.0);
    let (mut cpu_first, mut cpu_last) = (0.0, 0.0);
    let t = Instant::now();
    let mut window = Instant::now();
    let mut cpu = cpu_us();
    for i in 0..p.files {
        if i % p.window == 0 {
            window = Instant::now();
            cpu = cpu_us();
        }
        vfs.write_file(&format!("/files/f{i:07}"), b"small file content\n")
            .await?;
        if i + 1 == p.window {
            at_1k = rate(p.window, window.elapsed());
            cpu_first = (cpu_us() - cpu) / p.window as f64;
        }
        if i + 1 == p.files {
            at_100k = rate(p.window, window.elapsed());
            cpu_last = (cpu_us() - cpu) / p.window as f64;
        }
    }
    let creates = rate(p.files, t.elapsed());
    vfs.mkdir("/par", 0o755).await?;
    let per_writer = p.files / WRITERS;
    let t = Instant::now();
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let vfs = vfs.clone();
        writers.push(tokio::spawn(async move {
            for i in 0..per_writer {
                vfs.write_file(&format!("/par/w{w}-{i}"), b"small file content\n")
                    .await?;
            }
            Ok::<_, agentos_vfs::FsError>(())
        }));
    }
    for writer in writers {
        writer.await??;
    }
    let parallel_creates = rate(per_writer * WRITERS, t.elapsed());
    Ok(Figures {
        cpu_us_first: cpu_first,
        cpu_us_last: cpu_last,
        write_mbs,
        read_mbs,
        random_reads,
        random_reads_two,
        creates,
        creates_at_1k: at_1k,
        creates_at_100k: at_100k,
        parallel_creates,
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let p = Params {
        file_bytes: env_u64("BENCH_VFS_FILE_MIB", 256) * MIB,
        io_bytes: MIB,
        random_reads: env_u64("BENCH_VFS_RANDOM_READS", 200_000),
        files: env_u64("BENCH_VFS_FILES", 100_000),
        window: 1_000,
        write_rounds: env_u64("BENCH_VFS_WRITE_ROUNDS", 3).max(1),
    };
    let host_dir = tempfile::tempdir()?;
    let vfs_dir = tempfile::tempdir()?;
    let fs = open_vfs(&p, vfs_dir.path()).await?;
    let (mut host_writes, mut vfs_writes) = (Vec::new(), Vec::new());
    let mut big = String::new();
    for round in 0..p.write_rounds {
        host_writes.push(host_write(&p, &host_dir.path().join("big"), round)?);
        big = format!("/big-{round}");
        vfs_writes.push(vfs_write(&fs, &p, &big, round).await?);
    }
    let h = host(&p, host_dir.path(), median(host_writes.clone()))?;
    drop(host_dir);
    let v = vfs(&p, &fs, &big, median(vfs_writes.clone())).await?;
    println!(
        "bench-vfs: {} MiB file in {} KiB writes ({} interleaved write rounds), \
         {} random 4 KiB reads, {} small-file creates",
        p.file_bytes / MIB,
        p.io_bytes / 1024,
        p.write_rounds,
        p.random_reads,
        p.files
    );
    let rounds = |rates: &[f64]| {
        rates
            .iter()
            .map(|r| format!("{r:.0}"))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    println!(
        "write rounds MB/s: vfs {}; host {}",
        rounds(&vfs_writes),
        rounds(&host_writes)
    );
    println!(
        "{:<34} {:>14} {:>14} {:>10}",
        "figure", "vfs(sqlite)", "host fs", "vfs/host"
    );
    let rows = [
        ("sequential write MB/s (median)", v.write_mbs, h.write_mbs),
        ("sequential read MB/s", v.read_mbs, h.read_mbs),
        ("random 4 KiB reads/s", v.random_reads, h.random_reads),
        (
            "random 4 KiB reads/s, 2 readers",
            v.random_reads_two,
            h.random_reads_two,
        ),
        ("small-file creates/s (all)", v.creates, h.creates),
        (
            "creates/s, first 1k files",
            v.creates_at_1k,
            h.creates_at_1k,
        ),
        (
            "creates/s, last 1k (of all files)",
            v.creates_at_100k,
            h.creates_at_100k,
        ),
        (
            "CPU µs per create, first 1k",
            v.cpu_us_first,
            h.cpu_us_first,
        ),
        ("CPU µs per create, last 1k", v.cpu_us_last, h.cpu_us_last),
        (
            "creates/s, 32 concurrent writers",
            v.parallel_creates,
            h.parallel_creates,
        ),
    ];
    for (name, vv, hv) in rows {
        println!(
            "{name:<34} {vv:>14.1} {hv:>14.1} {:>10.3}",
            vv / hv.max(1e-9)
        );
    }
    println!(
        "vfs create-rate ratio last-1k / first-1k: {:.3}; CPU per create last / first: {:.3} \
         (1.0 = O(1) in tree size)",
        v.creates_at_100k / v.creates_at_1k.max(1e-9),
        v.cpu_us_last / v.cpu_us_first.max(1e-9)
    );
    println!(
        "two readers / one reader: vfs {:.2}, host {:.2}",
        v.random_reads_two / v.random_reads.max(1e-9),
        h.random_reads_two / h.random_reads.max(1e-9)
    );
    println!(
        "goals: random 4 KiB reads >= 0.1x host, two readers >= 1.6x one reader, \
         sequential write >= 0.5x host"
    );
    println!(
        "vfs creates/s the CPU alone would allow (1e6 / CPU µs per create, last 1k): {:.0}",
        1e6 / v.cpu_us_last.max(1e-9)
    );
    Ok(())
}
