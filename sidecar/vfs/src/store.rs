//! Every SQL statement of the file-system domain. Reads are single statements;
//! each mutation is assembled by the service as one `Tx`: a list of statements
//! guarded by compare-and-set (expected change counts, `WHERE generation = ?`,
//! `INSERT … SELECT … WHERE EXISTS`), each tagged with what a mismatch or a
//! constraint violation means, so a concurrent change or a limit fails the
//! whole transaction cleanly and is reported as an errno.
//!
//! Usage counters are adjusted inside the same transaction, and the counters
//! are read back as the transaction's last statement so limit warnings see the
//! committed values without another round trip. Releasing an inode whose link
//! count reaches zero is written conditionally in SQL (`… WHERE nlink = 0`), so
//! a recursive removal that drops several links of one inode stays correct.

use agentos_schema::{Database, DbError, Rows, SqlValue, Statement};

use super::error::FsError;

pub const ROOT_INO: i64 = 1;

/// Largest result one chunk-range query asks for, below the backends' default
/// result limit.
const READ_BATCH_BYTES: u64 = 32 * 1024 * 1024;

/// Bytes per `agentos_fs_block_parts` row: a ranged read loads only the parts
/// it overlaps, since SQLite materialises a whole blob even for `substr`.
pub const PART_BYTES: u64 = 64 * 1024;
/// A read within one chunk touching fewer parts than this reads each
/// part's range alone (`Database::read_blob`) instead of in one statement.
const SMALL_READ_PARTS: u64 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    File,
    Dir,
    Symlink,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::File => "file",
            Kind::Dir => "dir",
            Kind::Symlink => "symlink",
        }
    }

    fn parse(text: &str) -> Option<Kind> {
        match text {
            "file" => Some(Kind::File),
            "dir" => Some(Kind::Dir),
            "symlink" => Some(Kind::Symlink),
            _ => None,
        }
    }
}

/// One `agentos_fs_inodes` row without its inline bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct InodeRow {
    pub ino: i64,
    pub kind: Kind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub nlink: u64,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub birthtime_ns: i64,
    pub symlink_target: Option<String>,
    /// Bytes live in `inline_data` (otherwise in chunks).
    pub inline: bool,
    /// Chunk size of a chunked file; 0 otherwise.
    pub chunk_bytes: u64,
    pub generation: i64,
}

const INODE_COLUMNS: &str = "i.ino, i.kind, i.mode, i.uid, i.gid, i.size, i.nlink, i.atime_ns, \
     i.mtime_ns, i.ctime_ns, i.birthtime_ns, i.symlink_target, i.inline_data IS NOT NULL, \
     i.chunk_bytes, i.generation";
const INODE_WIDTH: usize = 15;

fn int(row: &[SqlValue], i: usize) -> Result<i64, FsError> {
    row.get(i)
        .and_then(SqlValue::as_i64)
        .ok_or_else(|| FsError::corrupt("", format!("column {i} is not an integer")))
}

fn uint(row: &[SqlValue], i: usize) -> Result<u64, FsError> {
    u64::try_from(int(row, i)?).map_err(|_| FsError::corrupt("", format!("column {i} is negative")))
}

fn opt_text(row: &[SqlValue], i: usize) -> Result<Option<String>, FsError> {
    match row.get(i) {
        Some(SqlValue::Null) => Ok(None),
        Some(SqlValue::Text(t)) => Ok(Some(t.clone())),
        _ => Err(FsError::corrupt("", format!("column {i} is not text"))),
    }
}

fn blob(row: &[SqlValue], i: usize) -> Result<Vec<u8>, FsError> {
    match row.get(i) {
        Some(SqlValue::Blob(b)) => Ok(b.clone()),
        // substr() of an empty blob can come back as an empty text.
        Some(SqlValue::Text(t)) if t.is_empty() => Ok(Vec::new()),
        Some(SqlValue::Null) => Ok(Vec::new()),
        _ => Err(FsError::corrupt("", format!("column {i} is not a blob"))),
    }
}

fn kind_at(row: &[SqlValue], i: usize) -> Result<Kind, FsError> {
    row.get(i)
        .and_then(SqlValue::as_str)
        .and_then(Kind::parse)
        .ok_or_else(|| FsError::corrupt("", format!("column {i} is not an inode kind")))
}

fn inode_from(row: &[SqlValue], at: usize) -> Result<InodeRow, FsError> {
    if row.len() < at + INODE_WIDTH {
        return Err(FsError::corrupt("", "short inode row"));
    }
    let small = |i: usize| -> Result<u32, FsError> {
        u32::try_from(int(row, at + i)?)
            .map_err(|_| FsError::corrupt("", format!("column {} out of range", at + i)))
    };
    Ok(InodeRow {
        ino: int(row, at)?,
        kind: kind_at(row, at + 1)?,
        mode: small(2)?,
        uid: small(3)?,
        gid: small(4)?,
        size: uint(row, at + 5)?,
        nlink: uint(row, at + 6)?,
        atime_ns: int(row, at + 7)?,
        mtime_ns: int(row, at + 8)?,
        ctime_ns: int(row, at + 9)?,
        birthtime_ns: int(row, at + 10)?,
        symlink_target: opt_text(row, at + 11)?,
        inline: int(row, at + 12)? != 0,
        chunk_bytes: uint(row, at + 13)?,
        generation: int(row, at + 14)?,
    })
}

fn i64_of(v: u64) -> SqlValue {
    SqlValue::Integer(i64::try_from(v).unwrap_or(i64::MAX))
}

/// What one directory entry resolves to; immutable for the life of the inode,
/// which is what makes it cacheable.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub ino: i64,
    pub kind: Kind,
    pub target: Option<String>,
}

pub async fn lookup(db: &dyn Database, parent: i64, name: &str) -> Result<Option<Entry>, FsError> {
    let rows = db
        .read(
            "SELECT d.ino, i.kind, i.symlink_target FROM agentos_fs_dentries d \
             JOIN agentos_fs_inodes i ON i.ino = d.ino \
             WHERE d.parent_ino = ?1 AND d.name = ?2",
            vec![parent.into(), name.into()],
        )
        .await?;
    match rows.rows.first() {
        None => Ok(None),
        Some(row) => Ok(Some(Entry {
            ino: int(row, 0)?,
            kind: kind_at(row, 1)?,
            target: opt_text(row, 2)?,
        })),
    }
}

pub async fn inode(db: &dyn Database, ino: i64) -> Result<Option<InodeRow>, FsError> {
    let rows = db
        .read(
            &format!("SELECT {INODE_COLUMNS} FROM agentos_fs_inodes i WHERE i.ino = ?1"),
            vec![ino.into()],
        )
        .await?;
    rows.rows.first().map(|r| inode_from(r, 0)).transpose()
}

/// Bytes `[offset, offset + len)` of an inline file.
pub async fn read_inline(
    db: &dyn Database,
    ino: i64,
    offset: u64,
    len: u64,
) -> Result<Vec<u8>, FsError> {
    let rows = db
        .read(
            "SELECT substr(inline_data, ?2, ?3) FROM agentos_fs_inodes WHERE ino = ?1",
            vec![ino.into(), i64_of(offset + 1), i64_of(len)],
        )
        .await?;
    match rows.rows.first() {
        Some(row) => blob(row, 0),
        None => Ok(Vec::new()),
    }
}

/// Bytes `[offset, offset + len)` of a chunked file whose chunks are `chunk`
/// bytes; the caller clamps the range to the file size. Missing chunks and the
/// tails of short chunks read as zeros.
pub async fn read_chunked(
    db: &dyn Database,
    ino: i64,
    chunk: u64,
    offset: u64,
    len: u64,
) -> Result<Vec<u8>, FsError> {
    let mut out = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
    if len == 0 {
        return Ok(out);
    }
    let end = offset + len;
    let first = offset / chunk;
    let last = (end - 1) / chunk;
    if first == last {
        let within = offset - first * chunk;
        if small_range(within, len) {
            let parts = chunk_parts(db, ino, first).await?;
            read_parts(db, &parts, within, &mut out).await?;
            return Ok(out);
        }
        // Only the parts the range overlaps are loaded, and of each only
        // the bytes the range covers leave the database.
        let rows = db
            .read(
                "SELECT p.part_index, \
                   substr(p.content, max(?3 - p.part_index * ?5, 0) + 1, ?4) \
                 FROM agentos_fs_file_chunks c \
                 JOIN agentos_fs_block_parts p ON p.block_key = c.block_key \
                 WHERE c.ino = ?1 AND c.chunk_index = ?2 \
                   AND p.part_index BETWEEN ?3 / ?5 AND (?3 + ?4 - 1) / ?5",
                vec![
                    ino.into(),
                    i64_of(first),
                    i64_of(within),
                    i64_of(len),
                    i64_of(PART_BYTES),
                ],
            )
            .await?;
        for row in &rows.rows {
            let part_start = uint(row, 0)? * PART_BYTES;
            let bytes = blob(row, 1)?;
            // The piece starts where the range enters this part.
            let piece_start = part_start.max(within);
            copy_overlap(&mut out, within, &bytes, piece_start);
        }
        return Ok(out);
    }
    let per_batch = (READ_BATCH_BYTES / chunk).max(1);
    let mut from = first;
    while from <= last {
        let to = (from + per_batch - 1).min(last);
        let rows = chunk_range(db, ino, from, to).await?;
        for (index, bytes) in rows {
            let start = index * chunk;
            let copy_from = start.max(offset);
            let copy_to = (start + bytes.len() as u64).min(end);
            if copy_from >= copy_to {
                continue;
            }
            let src = &bytes[(copy_from - start) as usize..(copy_to - start) as usize];
            let dst = (copy_from - offset) as usize;
            out[dst..dst + src.len()].copy_from_slice(src);
        }
        from = to + 1;
    }
    Ok(out)
}

/// True when bytes `[within, within + len)` of one chunk are few enough to
/// read part by part ([`read_parts`]).
pub fn small_range(within: u64, len: u64) -> bool {
    len > 0 && (within + len - 1) / PART_BYTES - within / PART_BYTES < SMALL_READ_PARTS
}

/// A chunk's parts, `(part index, rowid)` in order.
pub type PartRows = Vec<(u64, i64)>;

/// Every part of chunk `index` of a file, in order (none for a hole).
pub async fn chunk_parts(db: &dyn Database, ino: i64, index: u64) -> Result<PartRows, FsError> {
    let rows = db
        .read(
            "SELECT p.part_index, p.rowid FROM agentos_fs_file_chunks c \
             JOIN agentos_fs_block_parts p ON p.block_key = c.block_key \
             WHERE c.ino = ?1 AND c.chunk_index = ?2 ORDER BY p.part_index",
            vec![ino.into(), i64_of(index)],
        )
        .await?;
    rows.rows
        .iter()
        .map(|row| Ok((uint(row, 0)?, int(row, 1)?)))
        .collect()
}

/// Copies bytes `[within, within + out.len())` of a chunk whose parts are
/// `parts` into `out`, reading of each part only the bytes the range covers
/// (the whole part never leaves the database). Missing parts leave zeros.
pub async fn read_parts(
    db: &dyn Database,
    parts: &[(u64, i64)],
    within: u64,
    out: &mut [u8],
) -> Result<(), FsError> {
    let end = within + out.len() as u64;
    for &(part, rowid) in parts {
        let part_start = part * PART_BYTES;
        let from = within.max(part_start);
        let to = end.min(part_start + PART_BYTES);
        if from >= to {
            continue;
        }
        let Some(bytes) = db
            .read_blob(
                "agentos_fs_block_parts",
                "content",
                rowid,
                from - part_start,
                to - from,
            )
            .await?
        else {
            continue;
        };
        copy_overlap(out, within, &bytes, from);
    }
    Ok(())
}

/// Whole chunks `from..=to` of a file, as `(index, content)`.
pub async fn chunk_range(
    db: &dyn Database,
    ino: i64,
    from: u64,
    to: u64,
) -> Result<Vec<(u64, Vec<u8>)>, FsError> {
    let rows = db
        .read(
            "SELECT c.chunk_index, p.content FROM agentos_fs_file_chunks c \
             JOIN agentos_fs_block_parts p ON p.block_key = c.block_key \
             WHERE c.ino = ?1 AND c.chunk_index BETWEEN ?2 AND ?3 \
             ORDER BY c.chunk_index, p.part_index",
            vec![ino.into(), i64_of(from), i64_of(to)],
        )
        .await?;
    let mut out: Vec<(u64, Vec<u8>)> = Vec::new();
    for row in &rows.rows {
        let index = uint(row, 0)?;
        let bytes = blob(row, 1)?;
        match out.last_mut() {
            Some((last, content)) if *last == index => content.extend_from_slice(&bytes),
            _ => out.push((index, bytes)),
        }
    }
    Ok(out)
}

/// Copies the overlap of `src` (at absolute position `src_start`) into `out`
/// (at absolute position `out_start`).
fn copy_overlap(out: &mut [u8], out_start: u64, src: &[u8], src_start: u64) {
    let from = out_start.max(src_start);
    let to = (out_start + out.len() as u64).min(src_start + src.len() as u64);
    if from >= to {
        return;
    }
    let src = &src[(from - src_start) as usize..(to - src_start) as usize];
    let dst = (from - out_start) as usize;
    out[dst..dst + src.len()].copy_from_slice(src);
}

/// One page of a directory, names after `after`, in byte order of the name.
pub async fn readdir(
    db: &dyn Database,
    parent: i64,
    after: Option<&str>,
    limit: u64,
) -> Result<Vec<(String, InodeRow)>, FsError> {
    let rows = db
        .read(
            &format!(
                "SELECT d.name, {INODE_COLUMNS} FROM agentos_fs_dentries d \
                 JOIN agentos_fs_inodes i ON i.ino = d.ino \
                 WHERE d.parent_ino = ?1 AND (?2 IS NULL OR d.name > ?2) \
                 ORDER BY d.name LIMIT ?3"
            ),
            vec![parent.into(), after.into(), i64_of(limit)],
        )
        .await?;
    rows.rows
        .iter()
        .map(|row| {
            let name = row
                .first()
                .and_then(SqlValue::as_str)
                .ok_or_else(|| FsError::corrupt("", "dentry name is not text"))?
                .to_owned();
            Ok((name, inode_from(row, 1)?))
        })
        .collect()
}

/// All entries of a directory as `(name, entry)`; used to plan a recursive
/// removal, whose cost is the size of the subtree being removed.
pub async fn children(db: &dyn Database, parent: i64) -> Result<Vec<(String, Entry)>, FsError> {
    let rows = db
        .read(
            "SELECT d.name, d.ino, i.kind FROM agentos_fs_dentries d \
             JOIN agentos_fs_inodes i ON i.ino = d.ino WHERE d.parent_ino = ?1",
            vec![parent.into()],
        )
        .await?;
    rows.rows
        .iter()
        .map(|row| {
            let name = row
                .first()
                .and_then(SqlValue::as_str)
                .ok_or_else(|| FsError::corrupt("", "dentry name is not text"))?
                .to_owned();
            Ok((
                name,
                Entry {
                    ino: int(row, 1)?,
                    kind: kind_at(row, 2)?,
                    target: None,
                },
            ))
        })
        .collect()
}

pub async fn max_ino(db: &dyn Database) -> Result<i64, FsError> {
    let rows = db
        .query(
            "SELECT coalesce(max(ino), 1) FROM agentos_fs_inodes",
            vec![],
        )
        .await?;
    rows.scalar_i64()
        .ok_or_else(|| FsError::corrupt("/", "max(ino) is not an integer"))
}

/// The committed usage counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub total_bytes: u64,
    pub inode_count: u64,
}

const USAGE_SELECT: &str =
    "SELECT total_bytes, inode_count FROM agentos_fs_usage WHERE singleton = 1";

fn usage_from(rows: &Rows) -> Result<Usage, FsError> {
    let row = rows
        .rows
        .first()
        .ok_or_else(|| FsError::corrupt("/", "the usage row is missing"))?;
    Ok(Usage {
        total_bytes: uint(row, 0)?,
        inode_count: uint(row, 1)?,
    })
}

pub async fn usage(db: &dyn Database) -> Result<Usage, FsError> {
    usage_from(&db.query(USAGE_SELECT, vec![]).await?)
}

/// Deletes up to `batch` unreferenced blocks; returns how many went.
pub async fn collect_garbage(db: &dyn Database, batch: u32) -> Result<u64, FsError> {
    let rows = db
        .transaction(vec![
            Statement::new(
                "DELETE FROM agentos_fs_block_parts WHERE block_key IN \
                 (SELECT block_key FROM agentos_fs_blocks WHERE refcount = 0 LIMIT ?1)",
                vec![batch.into()],
            ),
            // Only blocks whose parts are gone, so a block is never left half-deleted.
            Statement::new(
                "DELETE FROM agentos_fs_blocks WHERE refcount = 0 AND block_key IN \
                 (SELECT b.block_key FROM agentos_fs_blocks b WHERE b.refcount = 0 \
                  AND NOT EXISTS (SELECT 1 FROM agentos_fs_block_parts p \
                                  WHERE p.block_key = b.block_key) LIMIT ?1)",
                vec![batch.into()],
            ),
        ])
        .await?;
    Ok(rows.get(1).map_or(0, |r| r.changes))
}

/// What a failed statement of a `Tx` means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fail {
    /// Someone else changed the rows this plan was based on.
    Conflict,
    Exists,
    /// The parent directory went away.
    ParentGone,
    NotEmpty,
    /// A usage limit would be passed (the caller tells which).
    NoSpace,
}

#[derive(Debug)]
pub enum TxError {
    Failed(Fail),
    Db(DbError),
}

/// One mutation's statements, committed atomically.
#[derive(Default)]
pub struct Tx {
    statements: Vec<Statement>,
    /// Per statement: meaning of an expected-change mismatch and of a
    /// constraint violation.
    fails: Vec<(Fail, Fail)>,
    /// At least one block's refcount may have dropped to zero.
    pub frees_blocks: bool,
    /// Growth requested through `add_usage`: (inodes, bytes).
    pub usage_delta: (i64, i64),
    /// The last statement that returns the usage counters.
    usage_at: Option<usize>,
}

impl Tx {
    pub fn new() -> Tx {
        Tx::default()
    }

    fn push(&mut self, statement: Statement, mismatch: Fail, constraint: Fail) {
        self.statements.push(statement);
        self.fails.push((mismatch, constraint));
    }

    fn plain(&mut self, sql: impl Into<std::borrow::Cow<'static, str>>, params: Vec<SqlValue>) {
        self.push(Statement::new(sql, params), Fail::Conflict, Fail::Conflict);
    }

    fn exact(
        &mut self,
        sql: impl Into<std::borrow::Cow<'static, str>>,
        params: Vec<SqlValue>,
        n: u64,
        mismatch: Fail,
    ) {
        self.push(
            Statement::new(sql, params).expect_changes(n),
            mismatch,
            Fail::Conflict,
        );
    }

    /// Adds `inodes` inodes and `bytes` file bytes, refusing to pass either
    /// maximum when growing. Returns the new counters.
    pub fn add_usage(&mut self, inodes: i64, bytes: i64, max_inodes: u64, max_bytes: u64) {
        if inodes == 0 && bytes == 0 {
            return;
        }
        self.usage_delta = (self.usage_delta.0 + inodes, self.usage_delta.1 + bytes);
        self.usage_at = Some(self.statements.len());
        self.exact(
            "UPDATE agentos_fs_usage SET inode_count = inode_count + ?1, \
             total_bytes = total_bytes + ?2 WHERE singleton = 1 \
             AND (?1 <= 0 OR inode_count + ?1 <= ?3) AND (?2 <= 0 OR total_bytes + ?2 <= ?4) \
             RETURNING total_bytes, inode_count",
            vec![
                inodes.into(),
                bytes.into(),
                i64_of(max_inodes),
                i64_of(max_bytes),
            ],
            1,
            Fail::NoSpace,
        );
    }

    /// Inserts a new inode (its number comes from the in-process allocator).
    pub fn insert_inode(&mut self, row: &InodeRow, inline: Option<&[u8]>) {
        self.plain(
            "INSERT INTO agentos_fs_inodes (ino, kind, mode, uid, gid, size, nlink, atime_ns, \
             mtime_ns, ctime_ns, birthtime_ns, symlink_target, inline_data, chunk_bytes, generation) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, 0)",
            vec![
                row.ino.into(),
                row.kind.as_str().into(),
                row.mode.into(),
                row.uid.into(),
                row.gid.into(),
                i64_of(row.size),
                i64_of(row.nlink),
                row.atime_ns.into(),
                row.mtime_ns.into(),
                row.ctime_ns.into(),
                row.birthtime_ns.into(),
                row.symlink_target.clone().into(),
                inline.map(<[u8]>::to_vec).into(),
                i64_of(row.chunk_bytes),
            ],
        );
    }

    /// Adds the name `parent/name → ino`; the parent must still be a live directory.
    pub fn insert_dentry(&mut self, parent: i64, name: &str, ino: i64) {
        self.push(
            Statement::new(
                "INSERT INTO agentos_fs_dentries (parent_ino, name, ino) \
                 SELECT ?1, ?2, ?3 WHERE EXISTS \
                 (SELECT 1 FROM agentos_fs_inodes WHERE ino = ?1 AND kind = 'dir')",
                vec![parent.into(), name.into(), ino.into()],
            )
            .expect_changes(1),
            Fail::ParentGone,
            Fail::Exists,
        );
    }

    pub fn delete_dentry(&mut self, parent: i64, name: &str, ino: i64) {
        self.exact(
            "DELETE FROM agentos_fs_dentries WHERE parent_ino = ?1 AND name = ?2 AND ino = ?3",
            vec![parent.into(), name.into(), ino.into()],
            1,
            Fail::Conflict,
        );
    }

    pub fn move_dentry(&mut self, from: (i64, &str), to: (i64, &str), ino: i64) {
        self.exact(
            "UPDATE agentos_fs_dentries SET parent_ino = ?3, name = ?4 \
             WHERE parent_ino = ?1 AND name = ?2 AND ino = ?5",
            vec![
                from.0.into(),
                from.1.into(),
                to.0.into(),
                to.1.into(),
                ino.into(),
            ],
            1,
            Fail::Conflict,
        );
    }

    /// A directory's entries changed: new mtime/ctime, and `nlink_delta`
    /// subdirectories more or fewer.
    pub fn touch_dir(&mut self, dir: i64, now: i64, nlink_delta: i64) {
        self.exact(
            "UPDATE agentos_fs_inodes SET mtime_ns = ?2, ctime_ns = ?2, nlink = nlink + ?3, \
             generation = generation + 1 WHERE ino = ?1 AND kind = 'dir'",
            vec![dir.into(), now.into(), nlink_delta.into()],
            1,
            Fail::ParentGone,
        );
    }

    /// The inode's metadata changed (ctime).
    pub fn touch_inode(&mut self, ino: i64, now: i64) {
        self.exact(
            "UPDATE agentos_fs_inodes SET ctime_ns = ?2, generation = generation + 1 \
             WHERE ino = ?1",
            vec![ino.into(), now.into()],
            1,
            Fail::Conflict,
        );
    }

    pub fn add_link(&mut self, ino: i64, now: i64) {
        self.exact(
            "UPDATE agentos_fs_inodes SET nlink = nlink + 1, ctime_ns = ?2, \
             generation = generation + 1 WHERE ino = ?1 AND nlink >= 1 AND kind <> 'dir'",
            vec![ino.into(), now.into()],
            1,
            Fail::Conflict,
        );
    }

    /// Drops one link of a non-directory inode and, if that was the last one,
    /// frees the inode, its chunks' references and its usage, all in SQL.
    pub fn drop_link(&mut self, ino: i64, now: i64) {
        self.exact(
            "UPDATE agentos_fs_inodes SET nlink = nlink - 1, ctime_ns = ?2, \
             generation = generation + 1 WHERE ino = ?1 AND nlink >= 1 AND kind <> 'dir'",
            vec![ino.into(), now.into()],
            1,
            Fail::Conflict,
        );
        self.plain(
            "UPDATE agentos_fs_usage SET \
             total_bytes = total_bytes - (SELECT coalesce(sum(size), 0) FROM agentos_fs_inodes \
                                          WHERE ino = ?1 AND nlink = 0 AND kind = 'file'), \
             inode_count = inode_count - (SELECT count(*) FROM agentos_fs_inodes \
                                          WHERE ino = ?1 AND nlink = 0) \
             WHERE singleton = 1 RETURNING total_bytes, inode_count",
            vec![ino.into()],
        );
        self.usage_at = Some(self.statements.len() - 1);
        self.plain(
            "UPDATE agentos_fs_blocks SET refcount = refcount - \
             (SELECT count(*) FROM agentos_fs_file_chunks c \
              WHERE c.ino = ?1 AND c.block_key = agentos_fs_blocks.block_key) \
             WHERE block_key IN (SELECT block_key FROM agentos_fs_file_chunks WHERE ino = ?1) \
             AND EXISTS (SELECT 1 FROM agentos_fs_inodes WHERE ino = ?1 AND nlink = 0)",
            vec![ino.into()],
        );
        self.plain(
            "DELETE FROM agentos_fs_file_chunks WHERE ino = ?1 AND \
             EXISTS (SELECT 1 FROM agentos_fs_inodes WHERE ino = ?1 AND nlink = 0)",
            vec![ino.into()],
        );
        self.plain(
            "DELETE FROM agentos_fs_inodes WHERE ino = ?1 AND nlink = 0",
            vec![ino.into()],
        );
        self.frees_blocks = true;
    }

    /// Deletes a directory inode, which must be empty.
    pub fn remove_empty_dir(&mut self, ino: i64) {
        self.exact(
            "DELETE FROM agentos_fs_inodes WHERE ino = ?1 AND kind = 'dir' AND NOT EXISTS \
             (SELECT 1 FROM agentos_fs_dentries WHERE parent_ino = ?1)",
            vec![ino.into()],
            1,
            Fail::NotEmpty,
        );
        self.plain(
            "UPDATE agentos_fs_usage SET inode_count = inode_count - 1 WHERE singleton = 1 \
             RETURNING total_bytes, inode_count",
            vec![],
        );
        self.usage_at = Some(self.statements.len() - 1);
    }

    /// Sets a file's size and storage, guarded by the generation it was read at.
    pub fn set_file(
        &mut self,
        ino: i64,
        generation: i64,
        size: u64,
        inline: Option<Vec<u8>>,
        chunk_bytes: u64,
        now: i64,
    ) {
        self.exact(
            "UPDATE agentos_fs_inodes SET size = ?3, inline_data = ?4, chunk_bytes = ?5, \
             mtime_ns = ?6, ctime_ns = ?6, generation = generation + 1 \
             WHERE ino = ?1 AND generation = ?2 AND kind = 'file'",
            vec![
                ino.into(),
                generation.into(),
                i64_of(size),
                inline.into(),
                i64_of(chunk_bytes),
                now.into(),
            ],
            1,
            Fail::Conflict,
        );
    }

    pub fn set_mode(&mut self, ino: i64, generation: i64, mode: u32, now: i64) {
        self.exact(
            "UPDATE agentos_fs_inodes SET mode = ?3, ctime_ns = ?4, generation = generation + 1 \
             WHERE ino = ?1 AND generation = ?2",
            vec![ino.into(), generation.into(), mode.into(), now.into()],
            1,
            Fail::Conflict,
        );
    }

    pub fn set_times(&mut self, ino: i64, generation: i64, atime: i64, mtime: i64, now: i64) {
        self.exact(
            "UPDATE agentos_fs_inodes SET atime_ns = ?3, mtime_ns = ?4, ctime_ns = ?5, \
             generation = generation + 1 WHERE ino = ?1 AND generation = ?2",
            vec![
                ino.into(),
                generation.into(),
                atime.into(),
                mtime.into(),
                now.into(),
            ],
            1,
            Fail::Conflict,
        );
    }

    /// Points chunk `index` of `ino` at the block holding `content`, moving one
    /// reference from the block it held before (if any).
    pub fn put_chunk(&mut self, ino: i64, index: u64, content: Vec<u8>) {
        let key = blake3::hash(&content).to_hex().to_string();
        self.plain(
            "UPDATE agentos_fs_blocks SET refcount = refcount - 1 WHERE block_key = \
             (SELECT block_key FROM agentos_fs_file_chunks WHERE ino = ?1 AND chunk_index = ?2)",
            vec![ino.into(), i64_of(index)],
        );
        self.plain(
            "INSERT INTO agentos_fs_blocks (block_key, size, refcount) VALUES (?1, ?2, 1) \
             ON CONFLICT (block_key) DO UPDATE SET refcount = refcount + 1",
            vec![key.clone().into(), i64_of(content.len() as u64)],
        );
        // All parts in one statement; an existing block keeps its parts.
        let parts: Vec<&[u8]> = content.chunks(PART_BYTES as usize).collect();
        if !parts.is_empty() {
            let mut sql = String::from(
                "INSERT INTO agentos_fs_block_parts (block_key, part_index, content) VALUES ",
            );
            let mut params: Vec<SqlValue> = vec![key.clone().into()];
            for (i, part) in parts.iter().enumerate() {
                if i > 0 {
                    sql.push_str(", ");
                }
                sql.push_str(&format!("(?1, {i}, ?{})", i + 2));
                params.push(part.to_vec().into());
            }
            sql.push_str(" ON CONFLICT (block_key, part_index) DO NOTHING");
            self.plain(sql, params);
        }
        self.plain(
            "INSERT INTO agentos_fs_file_chunks (ino, chunk_index, block_key) VALUES (?1, ?2, ?3) \
             ON CONFLICT (ino, chunk_index) DO UPDATE SET block_key = excluded.block_key",
            vec![ino.into(), i64_of(index), key.into()],
        );
        self.frees_blocks = true;
    }

    /// Drops chunks `from..` of `ino` and their block references.
    pub fn drop_chunks_from(&mut self, ino: i64, from: u64) {
        self.plain(
            "UPDATE agentos_fs_blocks SET refcount = refcount - \
             (SELECT count(*) FROM agentos_fs_file_chunks c WHERE c.ino = ?1 \
              AND c.chunk_index >= ?2 AND c.block_key = agentos_fs_blocks.block_key) \
             WHERE block_key IN (SELECT block_key FROM agentos_fs_file_chunks \
                                 WHERE ino = ?1 AND chunk_index >= ?2)",
            vec![ino.into(), i64_of(from)],
        );
        self.plain(
            "DELETE FROM agentos_fs_file_chunks WHERE ino = ?1 AND chunk_index >= ?2",
            vec![ino.into(), i64_of(from)],
        );
        self.frees_blocks = true;
    }

    /// Commits; returns the usage counters as committed when the transaction
    /// changed them.
    pub async fn commit(mut self, db: &dyn Database) -> Result<Option<Usage>, TxError> {
        let fails = std::mem::take(&mut self.fails);
        match db.transaction(self.statements).await {
            Ok(results) => match self.usage_at {
                None => Ok(None),
                Some(at) => results
                    .get(at)
                    .ok_or_else(|| TxError::Db(DbError::Protocol("missing results".into())))
                    .and_then(|r| {
                        usage_from(r)
                            .map(Some)
                            .map_err(|_| TxError::Db(DbError::Protocol("bad usage row".into())))
                    }),
            },
            Err(error) => {
                let index = error.statement_index().map(|i| i as usize);
                let tagged = index.and_then(|i| fails.get(i));
                match (&error, tagged) {
                    (DbError::ExpectedChanges { .. }, Some((mismatch, _))) => {
                        Err(TxError::Failed(*mismatch))
                    }
                    (e, Some((_, constraint))) if e.is_constraint() => {
                        Err(TxError::Failed(*constraint))
                    }
                    _ => Err(TxError::Db(error)),
                }
            }
        }
    }
}
