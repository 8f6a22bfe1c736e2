//! Files as IPFS blocks, laid out as Seed's client lays them out
//! (`ipfs-unixfs-importer` with its defaults): 256 KiB chunks stored as
//! raw leaves (codec raw, CIDv1 sha2-256); a file of one chunk is that
//! leaf; a longer one is a balanced tree of dag-pb UnixFS `File` nodes of
//! at most 174 links each. [`file_blocks`] answers the root and every
//! distinct block in the order the importer writes them, named as Seed's
//! publish input names them (each by its raw-codec CID, the root's too).
//! Pure: no I/O.

use ipld_core::cid::multihash::Multihash;
use ipld_core::cid::Cid;
use sha2::{Digest, Sha256};

/// Bytes per leaf.
pub const CHUNK_BYTES: usize = 262_144;
/// Links per dag-pb node.
pub const MAX_LINKS: usize = 174;

const RAW: u64 = 0x55;
const DAG_PB: u64 = 0x70;
const SHA2_256: u64 = 0x12;

/// A block to publish: its bytes and the name Seed's publish input gives
/// it.
#[derive(Clone, Debug, PartialEq)]
pub struct FileBlock {
    pub cid: Cid,
    pub data: Vec<u8>,
}

/// A file as blocks: `root` is its address (`ipfs://<root>`).
#[derive(Clone, Debug, PartialEq)]
pub struct FileBlocks {
    pub root: Cid,
    pub blocks: Vec<FileBlock>,
}

fn cid(codec: u64, data: &[u8]) -> Cid {
    // A 32-byte digest always fits a 64-byte multihash.
    let hash = Multihash::<64>::wrap(SHA2_256, &Sha256::digest(data)).unwrap_or_default();
    Cid::new_v1(codec, hash)
}

/// A node of the tree while it is built.
struct Built {
    cid: Cid,
    /// The file bytes under it.
    file_size: u64,
    /// Its block plus everything it links to (a link's `Tsize`).
    total_size: u64,
}

fn varint(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn field(number: u64, wire: u64, out: &mut Vec<u8>) {
    varint(number << 3 | wire, out);
}

fn bytes_field(number: u64, bytes: &[u8], out: &mut Vec<u8>) {
    field(number, 2, out);
    varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// A dag-pb `PBNode` over `children` with UnixFS `File` data, in dag-pb's
/// canonical order (links before data).
fn file_node(children: &[Built]) -> Vec<u8> {
    let mut out = Vec::new();
    for child in children {
        let mut link = Vec::new();
        bytes_field(1, &child.cid.to_bytes(), &mut link);
        bytes_field(2, b"", &mut link);
        field(3, 0, &mut link);
        varint(child.total_size, &mut link);
        bytes_field(2, &link, &mut out);
    }
    let mut data = Vec::new();
    field(1, 0, &mut data);
    varint(2, &mut data); // File
    field(3, 0, &mut data);
    varint(children.iter().map(|c| c.file_size).sum(), &mut data);
    for child in children {
        field(4, 0, &mut data);
        varint(child.file_size, &mut data);
    }
    bytes_field(1, &data, &mut out);
    out
}

/// `bytes` as IPFS blocks. Identical blocks are listed once.
pub fn file_blocks(bytes: &[u8]) -> FileBlocks {
    let mut blocks: Vec<FileBlock> = Vec::new();
    let mut push = |codec_cid: Cid, data: Vec<u8>| {
        let named = Cid::new_v1(RAW, *codec_cid.hash());
        if !blocks.iter().any(|b| b.cid == named) {
            blocks.push(FileBlock { cid: named, data });
        }
    };
    let chunks: Vec<&[u8]> = if bytes.is_empty() {
        vec![bytes]
    } else {
        bytes.chunks(CHUNK_BYTES).collect()
    };
    let mut level: Vec<Built> = chunks
        .into_iter()
        .map(|chunk| {
            let leaf = cid(RAW, chunk);
            push(leaf, chunk.to_vec());
            Built {
                cid: leaf,
                file_size: chunk.len() as u64,
                total_size: chunk.len() as u64,
            }
        })
        .collect();
    if level.len() == 1 {
        let root = level[0].cid;
        return FileBlocks { root, blocks };
    }
    while level.len() > 1 {
        level = level
            .chunks(MAX_LINKS)
            .map(|children| {
                let data = file_node(children);
                let node = cid(DAG_PB, &data);
                let built = Built {
                    cid: node,
                    file_size: children.iter().map(|c| c.file_size).sum(),
                    total_size: data.len() as u64
                        + children.iter().map(|c| c.total_size).sum::<u64>(),
                };
                push(node, data);
                built
            })
            .collect();
    }
    let root = level[0].cid;
    FileBlocks { root, blocks }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn small_files_are_one_raw_leaf() {
        let hello = file_blocks(b"hello world");
        assert_eq!(
            hello.root.to_string(),
            "bafkreifzjut3te2nhyekklss27nh3k72ysco7y32koao5eei66wof36n5e"
        );
        assert_eq!(hello.blocks.len(), 1);
        assert_eq!(
            file_blocks(b"").root.to_string(),
            "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku"
        );
        let full = file_blocks(&vec![1u8; CHUNK_BYTES]);
        assert_eq!(
            full.root.to_string(),
            "bafkreihtc7oz225adrdf3axeytkv2aosodo2nhnuuangjrmhuvmtvrqiju"
        );
    }

    #[test]
    fn longer_files_are_a_tree_named_as_seed_names_it() {
        let file = file_blocks(&vec![1u8; CHUNK_BYTES + 1]);
        assert_eq!(
            file.root.to_string(),
            "bafybeiabdej44d6wqy5jmzm4ojnxiwrbmkyfi4lbooyw5uz7r2tlunk7nq"
        );
        let names: Vec<String> = file.blocks.iter().map(|b| b.cid.to_string()).collect();
        assert_eq!(
            names,
            [
                "bafkreihtc7oz225adrdf3axeytkv2aosodo2nhnuuangjrmhuvmtvrqiju",
                "bafkreicl6ujc6ncfktctxxroxognfn7d2fqavvrryoc2lv6m4i6hpbkfti",
                "bafkreiabdej44d6wqy5jmzm4ojnxiwrbmkyfi4lbooyw5uz7r2tlunk7nq",
            ]
        );
        assert_eq!(
            hex(&file.blocks[2].data),
            "122c0a2401551220f317dd9d6ba01c465d82e4c4d55d01d270dda69db4a01a64c587a5593ac6084d120018808010122a0a24015512204bf5122f344554c53bde2ebb8cd2b7e3d1600ad631c385a5d7cce23c7785459a120018010a0c080218818010208080102001"
        );
        // Two identical full chunks are one block.
        let twice = file_blocks(&vec![1u8; 2 * CHUNK_BYTES + 5]);
        assert_eq!(
            twice.root.to_string(),
            "bafybeihdfipa6unbu66cfpbfecpiz7oqrvs5bc7nvgqj6ie6xem4lhh4cu"
        );
        assert_eq!(twice.blocks.len(), 3);
    }
}
