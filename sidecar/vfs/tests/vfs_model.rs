//! Property test: random operation sequences run against the VFS and against
//! a small in-memory model of the same POSIX semantics; every result (value or
//! errno) must agree, and the usage counters must match the model's tree.
//! The model resolves paths from the rules (components, lexical `..` in the
//! path, physical `..` in link targets, absolute and relative symlinks, ELOOP
//! after 40 hops), recursively and on its own tree, not by copying the VFS's
//! resolver.

use std::collections::{BTreeMap, HashMap};

use agentos_schema::{migrate_all, SharedDatabase};
use agentos_storage::testing::{all_backends, TestDb};
use agentos_vfs::FsLimits;
use agentos_vfs::{FileKind, FsError, Vfs, VfsPolicy};
use proptest::prelude::*;

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

#[derive(Clone, Debug)]
enum Op {
    Create(String),
    Mkdir(String),
    WriteFile(String, Vec<u8>),
    Write(String, u64, Vec<u8>),
    Truncate(String, u64),
    Unlink(String),
    Rmdir(String),
    RemoveAll(String),
    Rename(String, String),
    Link(String, String),
    Symlink(String, String),
    Read(String),
    Stat(String),
    Readdir(String),
}

#[derive(Clone, Debug, PartialEq)]
enum Out {
    Unit,
    Bytes(Vec<u8>),
    Stat(FileKind, u64, u64),
    Names(Vec<String>),
    Err(&'static str),
}

fn path_strategy() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(vec!["a", "b", "c"]), 1..4)
        .prop_map(|parts| format!("/{}", parts.join("/")))
}

fn target_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        path_strategy(),
        prop::sample::select(vec!["a", "..", "../b", "b/c"]).prop_map(str::to_owned),
    ]
}

fn data_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..48)
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => path_strategy().prop_map(Op::Create),
        3 => path_strategy().prop_map(Op::Mkdir),
        3 => (path_strategy(), data_strategy()).prop_map(|(p, d)| Op::WriteFile(p, d)),
        2 => (path_strategy(), 0u64..64, data_strategy()).prop_map(|(p, o, d)| Op::Write(p, o, d)),
        1 => (path_strategy(), 0u64..64).prop_map(|(p, s)| Op::Truncate(p, s)),
        1 => path_strategy().prop_map(Op::Unlink),
        1 => path_strategy().prop_map(Op::Rmdir),
        1 => path_strategy().prop_map(Op::RemoveAll),
        2 => (path_strategy(), path_strategy()).prop_map(|(a, b)| Op::Rename(a, b)),
        1 => (path_strategy(), path_strategy()).prop_map(|(a, b)| Op::Link(a, b)),
        1 => (target_strategy(), path_strategy()).prop_map(|(t, p)| Op::Symlink(t, p)),
        2 => path_strategy().prop_map(Op::Read),
        1 => path_strategy().prop_map(Op::Stat),
        1 => prop::sample::select(vec!["/", "/a", "/b", "/a/b"]).prop_map(|p| Op::Readdir(p.to_owned())),
    ]
}

// ---- the model ------------------------------------------------------------

#[derive(Clone, Debug)]
enum Node {
    File { data: Vec<u8>, nlink: u64 },
    Dir { entries: BTreeMap<String, u64> },
    Symlink { target: String },
}

struct Model {
    nodes: HashMap<u64, Node>,
    next: u64,
}

/// Where a path leads: the directory that holds (or would hold) the final
/// name, that name (`None` when the path names a directory by `/`, `.` or
/// `..`), and the node under the name when there is one.
struct Place {
    parent: u64,
    name: Option<String>,
    node: Option<u64>,
}

impl Place {
    fn dir(ino: u64) -> Place {
        Place {
            parent: ino,
            name: None,
            node: None,
        }
    }

    fn parent(&self) -> u64 {
        self.parent
    }

    /// The object the path names, when it exists.
    fn target(&self) -> Option<u64> {
        match self.name {
            None => Some(self.parent),
            Some(_) => self.node,
        }
    }
}

/// Symlinks one resolution may pass through before ELOOP (Linux's MAXSYMLINKS).
const SYMLINK_HOPS: u32 = 40;
const ROOT: u64 = 1;

type R<T> = Result<T, &'static str>;

impl Model {
    fn new() -> Model {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node::Dir {
                entries: BTreeMap::new(),
            },
        );
        Model { nodes, next: 2 }
    }

    fn entries(&self, dir: u64) -> &BTreeMap<String, u64> {
        match &self.nodes[&dir] {
            Node::Dir { entries } => entries,
            _ => panic!("not a dir"),
        }
    }

    fn entries_mut(&mut self, dir: u64) -> &mut BTreeMap<String, u64> {
        match self.nodes.get_mut(&dir) {
            Some(Node::Dir { entries }) => entries,
            _ => panic!("not a dir"),
        }
    }

    fn is_dir(&self, ino: u64) -> bool {
        matches!(self.nodes[&ino], Node::Dir { .. })
    }

    /// The directory holding directory `dir` (the root is its own parent).
    /// Directories have exactly one name, so a scan finds it.
    fn parent_of(&self, dir: u64) -> u64 {
        self.nodes
            .iter()
            .find_map(|(ino, node)| match node {
                Node::Dir { entries } if entries.values().any(|child| *child == dir) => Some(*ino),
                _ => None,
            })
            .unwrap_or(ROOT)
    }

    /// True when `dir` is `ino` or one of its ancestors.
    fn encloses(&self, dir: u64, mut ino: u64) -> bool {
        loop {
            if ino == dir {
                return true;
            }
            if ino == ROOT {
                return false;
            }
            ino = self.parent_of(ino);
        }
    }

    /// Resolves an absolute path. The path itself is normalised lexically
    /// first (`..` clamped at `/`), as the VFS's path rules say; `..` inside a
    /// symlink target is the physical parent of where the link led.
    fn resolve(&self, path: &str, follow_last: bool) -> R<Place> {
        let mut names: Vec<String> = Vec::new();
        for part in path.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    names.pop();
                }
                name => names.push(name.to_owned()),
            }
        }
        let mut hops = 0;
        self.resolve_from(ROOT, &names, follow_last, &mut hops)
    }

    /// Resolves `names` starting in directory `dir`. Every symlink before the
    /// last name is followed; the last one only when `follow_last`. A missing
    /// last name is not an error; anything missing before it is ENOENT, and a
    /// non-directory before it is ENOTDIR.
    fn resolve_from(
        &self,
        mut dir: u64,
        names: &[String],
        follow_last: bool,
        hops: &mut u32,
    ) -> R<Place> {
        for (i, name) in names.iter().enumerate() {
            let last = i + 1 == names.len();
            if name == "." || name == ".." {
                if name == ".." {
                    dir = self.parent_of(dir);
                }
                continue;
            }
            let child = self.entries(dir).get(name).copied();
            if last {
                return match child {
                    Some(ino)
                        if follow_last && matches!(self.nodes[&ino], Node::Symlink { .. }) =>
                    {
                        self.through_symlink(dir, ino, hops)
                    }
                    _ => Ok(Place {
                        parent: dir,
                        name: Some(name.clone()),
                        node: child,
                    }),
                };
            }
            let ino = child.ok_or("ENOENT")?;
            dir = match &self.nodes[&ino] {
                Node::Dir { .. } => ino,
                Node::File { .. } => return Err("ENOTDIR"),
                Node::Symlink { .. } => {
                    let place = self.through_symlink(dir, ino, hops)?;
                    let target = place.target().ok_or("ENOENT")?;
                    if !self.is_dir(target) {
                        return Err("ENOTDIR");
                    }
                    target
                }
            };
        }
        Ok(Place::dir(dir))
    }

    /// Where the symlink `link` (a name in directory `dir`) leads, following
    /// symlinks all the way: an absolute target starts at the root, a relative
    /// one in `dir`.
    fn through_symlink(&self, dir: u64, link: u64, hops: &mut u32) -> R<Place> {
        *hops += 1;
        if *hops > SYMLINK_HOPS {
            return Err("ELOOP");
        }
        let Node::Symlink { target } = &self.nodes[&link] else {
            return Err("EINVAL");
        };
        if target.is_empty() {
            return Err("ENOENT");
        }
        let start = if target.starts_with('/') { ROOT } else { dir };
        let names: Vec<String> = target
            .split('/')
            .filter(|part| !part.is_empty())
            .map(str::to_owned)
            .collect();
        self.resolve_from(start, &names, true, hops)
    }

    fn existing(&self, path: &str, follow: bool) -> R<(Place, u64)> {
        let w = self.resolve(path, follow)?;
        let t = w.target().ok_or("ENOENT")?;
        Ok((w, t))
    }

    fn creation(&self, path: &str) -> R<(u64, String)> {
        let w = self.resolve(path, false)?;
        match (&w.name, w.node) {
            (Some(n), None) => Ok((w.parent(), n.clone())),
            _ => Err("EEXIST"),
        }
    }

    fn add(&mut self, parent: u64, name: String, node: Node) -> u64 {
        let ino = self.next;
        self.next += 1;
        self.nodes.insert(ino, node);
        self.entries_mut(parent).insert(name, ino);
        ino
    }

    fn drop_link(&mut self, ino: u64) {
        let gone = match self.nodes.get_mut(&ino) {
            Some(Node::File { nlink, .. }) => {
                *nlink -= 1;
                *nlink == 0
            }
            _ => true,
        };
        if gone {
            self.nodes.remove(&ino);
        }
    }

    fn nlink(&self, ino: u64) -> u64 {
        match &self.nodes[&ino] {
            Node::File { nlink, .. } => *nlink,
            Node::Symlink { .. } => 1,
            Node::Dir { entries } => {
                2 + entries.values().filter(|i| self.is_dir(**i)).count() as u64
            }
        }
    }

    fn removal(&self, path: &str) -> R<(Place, u64)> {
        let w = self.resolve(path, false)?;
        if w.name.is_none() {
            return Err("EPERM");
        }
        let e = w.node.ok_or("ENOENT")?;
        Ok((w, e))
    }

    fn remove_tree(&mut self, ino: u64) {
        if let Node::Dir { entries } = self.nodes[&ino].clone() {
            for child in entries.values() {
                self.remove_tree(*child);
            }
            self.nodes.remove(&ino);
        } else {
            self.drop_link(ino);
        }
    }

    fn apply(&mut self, op: &Op) -> R<Out> {
        match op {
            Op::Create(p) => {
                let (parent, name) = self.creation(p)?;
                self.add(
                    parent,
                    name,
                    Node::File {
                        data: vec![],
                        nlink: 1,
                    },
                );
                Ok(Out::Unit)
            }
            Op::Mkdir(p) => {
                let (parent, name) = self.creation(p)?;
                self.add(
                    parent,
                    name,
                    Node::Dir {
                        entries: BTreeMap::new(),
                    },
                );
                Ok(Out::Unit)
            }
            Op::WriteFile(p, d) => {
                let w = self.resolve(p, true)?;
                match w.target() {
                    Some(ino) if self.is_dir(ino) => Err("EISDIR"),
                    Some(ino) => {
                        if let Some(Node::File { data, .. }) = self.nodes.get_mut(&ino) {
                            *data = d.clone();
                        }
                        Ok(Out::Unit)
                    }
                    None => {
                        let name = w.name.clone().expect("name");
                        self.add(
                            w.parent(),
                            name,
                            Node::File {
                                data: d.clone(),
                                nlink: 1,
                            },
                        );
                        Ok(Out::Unit)
                    }
                }
            }
            Op::Write(p, off, d) => {
                let (_, ino) = self.existing(p, true)?;
                match self.nodes.get_mut(&ino) {
                    Some(Node::File { data, .. }) => {
                        if !d.is_empty() {
                            let end = *off as usize + d.len();
                            if data.len() < end {
                                data.resize(end, 0);
                            }
                            data[*off as usize..end].copy_from_slice(d);
                        }
                        Ok(Out::Unit)
                    }
                    _ => Err("EISDIR"),
                }
            }
            Op::Truncate(p, size) => {
                let (_, ino) = self.existing(p, true)?;
                match self.nodes.get_mut(&ino) {
                    Some(Node::File { data, .. }) => {
                        data.resize(*size as usize, 0);
                        Ok(Out::Unit)
                    }
                    _ => Err("EISDIR"),
                }
            }
            Op::Unlink(p) => {
                let (w, ino) = self.removal(p)?;
                if self.is_dir(ino) {
                    return Err("EISDIR");
                }
                self.entries_mut(w.parent())
                    .remove(w.name.as_deref().expect("name"));
                self.drop_link(ino);
                Ok(Out::Unit)
            }
            Op::Rmdir(p) | Op::RemoveAll(p) => {
                let (w, ino) = self.removal(p)?;
                let recursive = matches!(op, Op::RemoveAll(_));
                if !self.is_dir(ino) {
                    if !recursive {
                        return Err("ENOTDIR");
                    }
                    self.entries_mut(w.parent())
                        .remove(w.name.as_deref().expect("name"));
                    self.drop_link(ino);
                    return Ok(Out::Unit);
                }
                if !recursive && !self.entries(ino).is_empty() {
                    return Err("ENOTEMPTY");
                }
                self.entries_mut(w.parent())
                    .remove(w.name.as_deref().expect("name"));
                self.remove_tree(ino);
                Ok(Out::Unit)
            }
            Op::Rename(a, b) => {
                let src = self.resolve(a, false)?;
                let Some(src_name) = src.name.clone() else {
                    return Err("EPERM");
                };
                let src_ino = src.node.ok_or("ENOENT")?;
                let dst = self.resolve(b, false)?;
                let Some(dst_name) = dst.name.clone() else {
                    return Err("EPERM");
                };
                let src_dir = self.is_dir(src_ino);
                if src_dir && self.encloses(src_ino, dst.parent()) {
                    return Err("EINVAL");
                }
                if let Some(d) = dst.node {
                    if d == src_ino {
                        return Ok(Out::Unit);
                    }
                    match (src_dir, self.is_dir(d)) {
                        (false, true) => return Err("EISDIR"),
                        (true, false) => return Err("ENOTDIR"),
                        (true, true) if !self.entries(d).is_empty() => return Err("ENOTEMPTY"),
                        _ => {}
                    }
                    self.entries_mut(dst.parent()).remove(&dst_name);
                    self.remove_tree(d);
                }
                self.entries_mut(src.parent()).remove(&src_name);
                self.entries_mut(dst.parent()).insert(dst_name, src_ino);
                Ok(Out::Unit)
            }
            Op::Link(a, b) => {
                let (_, ino) = self.existing(a, false)?;
                if self.is_dir(ino) {
                    return Err("EPERM");
                }
                let (parent, name) = self.creation(b)?;
                if let Some(Node::File { nlink, .. }) = self.nodes.get_mut(&ino) {
                    *nlink += 1;
                } else {
                    // Hard links to symlinks: the model keeps symlinks single-linked.
                    return Ok(Out::Err("skip"));
                }
                self.entries_mut(parent).insert(name, ino);
                Ok(Out::Unit)
            }
            Op::Symlink(t, p) => {
                let (parent, name) = self.creation(p)?;
                self.add(parent, name, Node::Symlink { target: t.clone() });
                Ok(Out::Unit)
            }
            Op::Read(p) => {
                let (_, ino) = self.existing(p, true)?;
                match &self.nodes[&ino] {
                    Node::File { data, .. } => Ok(Out::Bytes(data.clone())),
                    _ => Err("EISDIR"),
                }
            }
            Op::Stat(p) => {
                let (_, ino) = self.existing(p, true)?;
                let (kind, size) = match &self.nodes[&ino] {
                    Node::File { data, .. } => (FileKind::File, data.len() as u64),
                    Node::Dir { .. } => (FileKind::Dir, 0),
                    Node::Symlink { target } => (FileKind::Symlink, target.len() as u64),
                };
                Ok(Out::Stat(kind, size, self.nlink(ino)))
            }
            Op::Readdir(p) => {
                let (_, ino) = self.existing(p, true)?;
                if !self.is_dir(ino) {
                    return Err("ENOTDIR");
                }
                Ok(Out::Names(self.entries(ino).keys().cloned().collect()))
            }
        }
    }

    fn usage(&self) -> (u64, u64) {
        let bytes = self
            .nodes
            .values()
            .map(|n| match n {
                Node::File { data, .. } => data.len() as u64,
                _ => 0,
            })
            .sum();
        (bytes, self.nodes.len() as u64)
    }
}

async fn run(vfs: &Vfs, op: &Op) -> Out {
    fn err<T>(r: Result<T, FsError>, ok: impl FnOnce(T) -> Out) -> Out {
        match r {
            Ok(v) => ok(v),
            Err(e) => Out::Err(e.code().as_str()),
        }
    }
    match op {
        Op::Create(p) => err(vfs.create(p, 0o644).await, |_| Out::Unit),
        Op::Mkdir(p) => err(vfs.mkdir(p, 0o755).await, |_| Out::Unit),
        Op::WriteFile(p, d) => err(vfs.write_file(p, d).await, |_| Out::Unit),
        Op::Write(p, o, d) => err(vfs.write(p, *o, d).await, |_| Out::Unit),
        Op::Truncate(p, s) => err(vfs.truncate(p, *s).await, |_| Out::Unit),
        Op::Unlink(p) => err(vfs.unlink(p).await, |_| Out::Unit),
        Op::Rmdir(p) => err(vfs.rmdir(p).await, |_| Out::Unit),
        Op::RemoveAll(p) => err(vfs.remove(p, true).await, |_| Out::Unit),
        Op::Rename(a, b) => err(vfs.rename(a, b).await, |_| Out::Unit),
        Op::Link(a, b) => err(vfs.link(a, b).await, |_| Out::Unit),
        Op::Symlink(t, p) => err(vfs.symlink(t, p).await, |_| Out::Unit),
        Op::Read(p) => err(vfs.read_all(p).await, Out::Bytes),
        Op::Stat(p) => err(vfs.stat(p).await, |s| Out::Stat(s.kind, s.size, s.nlink)),
        Op::Readdir(p) => err(vfs.readdir_all(p).await, |entries| {
            Out::Names(entries.into_iter().map(|e| e.name).collect())
        }),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn vfs_agrees_with_the_model(ops in prop::collection::vec(op_strategy(), 1..60)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async {
            for (backend, db, _dir) in backends().await {
                let limits = FsLimits { chunk_bytes: 16, inline_threshold_bytes: 8, ..FsLimits::default() };
                let limits = limits.validated().expect("valid limits");
                let vfs = Vfs::open(db.clone(), limits, VfsPolicy::default()).await.expect("open");
                let mut model = Model::new();
                for (i, op) in ops.iter().enumerate() {
                    let expected = model.apply(op).unwrap_or_else(Out::Err);
                    if expected == Out::Err("skip") {
                        // A hard link to a symlink: outside the model; undo in the VFS too.
                        return Ok(());
                    }
                    let got = run(&vfs, op).await;
                    prop_assert_eq!(&got, &expected, "{} op #{} {:?}", backend, i, op);
                }
                let usage = vfs.usage().await.expect("usage");
                prop_assert_eq!((usage.total_bytes, usage.inode_count), model.usage());
            }
            Ok(())
        })?;
    }
}
