//! Canonical DAG-CBOR, and a bounded decoder for bytes from outside.
//!
//! Seed signs the canonical DAG-CBOR of a value (map keys sorted length
//! first, then bytewise; shortest integers; 64-bit floats), so the encoder
//! here must produce exactly the bytes Seed's own encoder does.
//! `serde_ipld_dagcbor` does; the general-purpose CBOR crates do not sort
//! keys.
//!
//! Decoding first walks the input once without recursion: it enforces the
//! caller's byte bound, a nesting limit and an item budget, and refuses what DAG-CBOR forbids
//! (indefinite lengths, tags other than 42, simple values other than
//! false/true/null, floats narrower than 64 bits, NaN and infinities,
//! non-string and duplicate map keys, trailing bytes, a length larger than
//! what is left). Only input that passes reaches the
//! serde decoder, so hostile input can neither overflow the stack nor make
//! it allocate for a length the input does not hold. The item budget exists
//! because bytes alone do not bound memory: a decoded value costs about a
//! hundred bytes per item, so a 16 MiB array of one-byte zeros would become
//! gigabytes before any signature is checked.

use std::collections::HashSet;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::SeedError;

/// Deepest nesting of arrays and maps accepted from outside. An envelope
/// uses four levels (envelope, action, definition, metadata) before any
/// user-chosen structure.
pub const MAX_DEPTH: usize = 64;

/// Most items one decoded document may hold: every scalar, string, array,
/// map, map key and map value counts one (a tagged link counts one). A
/// legitimate envelope stays far below it: an agent definition with its
/// prompt blocks is hundreds of items, a 64 KiB secret is one byte string,
/// message content parts a handful each. At about 110 bytes per decoded
/// item this bounds a decoded document to roughly 11 MB.
pub const MAX_ITEMS: u64 = 100_000;

/// The CBOR tag of an IPLD link (a CID), the only tag DAG-CBOR allows.
const TAG_CID: u64 = 42;

/// Encodes a value as canonical DAG-CBOR.
pub fn to_canonical<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, SeedError> {
    serde_ipld_dagcbor::to_vec(value).map_err(|error| SeedError::Encode {
        message: error.to_string(),
    })
}

/// Decodes DAG-CBOR from outside the process: at most `max_bytes` bytes,
/// [`MAX_DEPTH`] levels of nesting and [`MAX_ITEMS`] items, well-formed as
/// [`check`] defines.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8], max_bytes: usize) -> Result<T, SeedError> {
    check(bytes, max_bytes)?;
    serde_ipld_dagcbor::from_slice(bytes).map_err(|error| SeedError::bad_cbor(error.to_string()))
}

/// Checks that `bytes` hold exactly one DAG-CBOR item within the bounds,
/// without decoding it.
pub fn check(bytes: &[u8], max_bytes: usize) -> Result<(), SeedError> {
    if bytes.len() > max_bytes {
        return Err(SeedError::TooLarge {
            size: bytes.len(),
            limit: max_bytes,
            unit: "bytes",
        });
    }
    Scanner::new(bytes).run()
}

/// One open array or map: how many items it still holds, and for a map the
/// keys seen so far.
struct Frame<'a> {
    remaining: u64,
    map_keys: Option<HashSet<&'a [u8]>>,
}

impl Frame<'_> {
    /// Whether the next item of this frame is a map key: map items alternate
    /// key, value, and `remaining` counts both.
    fn expects_key(&self) -> bool {
        self.map_keys.is_some() && self.remaining & 1 == 0
    }
}

struct Scanner<'a> {
    bytes: &'a [u8],
    pos: usize,
    stack: Vec<Frame<'a>>,
    /// Items seen so far, the top-level one included.
    items: u64,
}

impl<'a> Scanner<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Scanner {
            bytes,
            pos: 0,
            stack: Vec::new(),
            items: 0,
        }
    }

    fn run(mut self) -> Result<(), SeedError> {
        if self.bytes.is_empty() {
            return Err(SeedError::bad_cbor("empty input"));
        }
        loop {
            let expects_key = self.stack.last().is_some_and(Frame::expects_key);
            let (major, arg) = self.header()?;
            self.count(1)?;
            if expects_key && major != 3 {
                return Err(SeedError::bad_cbor("map keys must be text strings"));
            }
            match major {
                0 | 1 => {}
                2 | 3 => {
                    let start = self.pos;
                    let payload = self.take(arg)?;
                    if expects_key {
                        let keys = self
                            .stack
                            .last_mut()
                            .and_then(|frame| frame.map_keys.as_mut());
                        if let Some(keys) = keys {
                            if !keys.insert(&self.bytes[start..start + payload]) {
                                return Err(SeedError::bad_cbor("duplicate map key"));
                            }
                        }
                    }
                }
                4 | 5 => {
                    if self.stack.len() >= MAX_DEPTH {
                        return Err(SeedError::TooDeep { limit: MAX_DEPTH });
                    }
                    let items = if major == 5 {
                        arg.checked_mul(2)
                            .ok_or_else(|| SeedError::bad_cbor("map length overflows"))?
                    } else {
                        arg
                    };
                    // Every item takes at least one byte.
                    if items > self.left() {
                        return Err(SeedError::bad_cbor("truncated input"));
                    }
                    // Refused from the header alone: the items it announces
                    // would all be counted anyway.
                    self.budget(items)?;
                    if items > 0 {
                        self.stack.push(Frame {
                            remaining: items,
                            map_keys: (major == 5).then(HashSet::new),
                        });
                        continue;
                    }
                }
                6 => {
                    if arg != TAG_CID {
                        return Err(SeedError::bad_cbor(format!("tag {arg} is not allowed")));
                    }
                    let (inner, len) = self.header()?;
                    if inner != 2 {
                        return Err(SeedError::bad_cbor("tag 42 must hold a byte string"));
                    }
                    self.take(len)?;
                }
                _ => {}
            }
            if self.complete_item() {
                break;
            }
        }
        if self.pos != self.bytes.len() {
            return Err(SeedError::bad_cbor("trailing bytes after the value"));
        }
        Ok(())
    }

    /// Counts one finished item against the open frames, closing every frame
    /// it fills. Returns whether the top-level item is finished.
    fn complete_item(&mut self) -> bool {
        while let Some(frame) = self.stack.last_mut() {
            frame.remaining -= 1;
            if frame.remaining > 0 {
                return false;
            }
            self.stack.pop();
        }
        true
    }

    /// Counts `n` more items against [`MAX_ITEMS`].
    fn count(&mut self, n: u64) -> Result<(), SeedError> {
        self.budget(n)?;
        self.items += n;
        Ok(())
    }

    /// Fails when `n` more items would exceed [`MAX_ITEMS`].
    fn budget(&self, n: u64) -> Result<(), SeedError> {
        let total = self.items.saturating_add(n);
        if total > MAX_ITEMS {
            return Err(SeedError::TooLarge {
                size: usize::try_from(total).unwrap_or(usize::MAX),
                limit: MAX_ITEMS as usize,
                unit: "items",
            });
        }
        Ok(())
    }

    fn left(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    /// Reads one item header: the major type and its argument. Floats and
    /// simple values come back as major type 7 with their payload skipped.
    fn header(&mut self) -> Result<(u8, u64), SeedError> {
        let initial = *self
            .bytes
            .get(self.pos)
            .ok_or_else(|| SeedError::bad_cbor("truncated input"))?;
        self.pos += 1;
        let major = initial >> 5;
        let info = initial & 0x1f;
        let arg = match info {
            0..=23 => u64::from(info),
            24..=27 => {
                let width = 1usize << (info - 24);
                let start = self.pos;
                self.take(width as u64)?;
                self.bytes[start..start + width]
                    .iter()
                    .fold(0u64, |acc, byte| (acc << 8) | u64::from(*byte))
            }
            31 => return Err(SeedError::bad_cbor("indefinite lengths are not allowed")),
            _ => return Err(SeedError::bad_cbor("reserved additional information")),
        };
        if major == 7 {
            if info == 25 || info == 26 {
                return Err(SeedError::bad_cbor("floats must be 64-bit"));
            }
            // Checked here so that whatever decodes can be encoded again.
            if info == 27 && !f64::from_bits(arg).is_finite() {
                return Err(SeedError::bad_cbor("NaN and infinities are not allowed"));
            }
            if info < 25 && !(20..=22).contains(&info) {
                return Err(SeedError::bad_cbor(
                    "only false, true, null and floats are allowed",
                ));
            }
        }
        Ok((major, arg))
    }

    /// Skips `len` bytes, returning how many (as a `usize`) once it is known
    /// they are there.
    fn take(&mut self, len: u64) -> Result<usize, SeedError> {
        if len > self.left() {
            return Err(SeedError::bad_cbor("truncated input"));
        }
        let len = len as usize;
        self.pos += len;
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use ipld_core::ipld::Ipld;

    use super::*;

    fn nested_arrays(depth: usize) -> Vec<u8> {
        let mut bytes = vec![0x81; depth - 1];
        bytes.push(0x80);
        bytes
    }

    #[test]
    fn nesting_up_to_the_limit_decodes() {
        let bytes = nested_arrays(MAX_DEPTH);
        let value: Ipld = from_slice(&bytes, 1 << 20).unwrap();
        assert!(matches!(value, Ipld::List(_)));
    }

    #[test]
    fn deep_nesting_is_a_typed_error_not_a_stack_overflow() {
        let bytes = nested_arrays(MAX_DEPTH + 1);
        assert_eq!(
            from_slice::<Ipld>(&bytes, 1 << 20),
            Err(SeedError::TooDeep { limit: MAX_DEPTH })
        );
        let bytes = nested_arrays(1_000_000);
        assert_eq!(
            from_slice::<Ipld>(&bytes, 1 << 21).unwrap_err().code(),
            "too_deep"
        );
        // Maps count as levels too.
        let mut maps = Vec::new();
        for _ in 0..=MAX_DEPTH {
            maps.extend_from_slice(&[0xa1, 0x61, b'k']);
        }
        maps.push(0xf6);
        assert_eq!(
            from_slice::<Ipld>(&maps, 1 << 20).unwrap_err().code(),
            "too_deep"
        );
    }

    #[test]
    fn oversize_input_is_refused_before_decoding() {
        let bytes = to_canonical(&"x".repeat(100)).unwrap();
        assert_eq!(
            from_slice::<Ipld>(&bytes, 50),
            Err(SeedError::TooLarge {
                size: bytes.len(),
                limit: 50,
                unit: "bytes",
            })
        );
        assert!(from_slice::<Ipld>(&bytes, bytes.len()).is_ok());
    }

    /// An array of `n` zeros: `n + 1` items in about `n` bytes.
    fn zeros(n: u32) -> Vec<u8> {
        let mut bytes = vec![0x9a];
        bytes.extend_from_slice(&n.to_be_bytes());
        bytes.resize(bytes.len() + n as usize, 0x00);
        bytes
    }

    #[test]
    fn too_many_items_are_refused_before_decoding() {
        // 200k zeros are 200 KB, far below the byte bound, but would decode
        // to some 20 MB of values; the header alone refuses them.
        let bytes = zeros(200_000);
        let error = from_slice::<Ipld>(&bytes, 1 << 24).unwrap_err();
        assert_eq!(error.code(), "too_large");
        assert!(matches!(error, SeedError::TooLarge { unit: "items", .. }));
        // Many small arrays add up the same way.
        let mut nested = vec![0x9a];
        nested.extend_from_slice(&1_000u32.to_be_bytes());
        for _ in 0..1_000 {
            nested.extend_from_slice(&[0x98, 200]);
            nested.resize(nested.len() + 200, 0x00);
        }
        let error = from_slice::<Ipld>(&nested, 1 << 24).unwrap_err();
        assert!(
            matches!(error, SeedError::TooLarge { unit: "items", .. }),
            "{error}"
        );
        // Exactly the budget passes: the array itself plus its elements.
        let bytes = zeros(MAX_ITEMS as u32 - 1);
        let value: Ipld = from_slice(&bytes, 1 << 24).unwrap();
        assert!(matches!(value, Ipld::List(list) if list.len() == MAX_ITEMS as usize - 1));
        let bytes = zeros(MAX_ITEMS as u32);
        assert!(from_slice::<Ipld>(&bytes, 1 << 24).is_err());
    }

    #[test]
    fn malformed_input_is_bad_cbor() {
        let cases: &[&[u8]] = &[
            &[],
            &[0x5a, 0xff, 0xff, 0xff, 0xff, 0x00], // bytes longer than the input
            &[0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], // huge array
            &[0x9f, 0x01, 0xff],                   // indefinite array
            &[0xa1, 0x01, 0x02],                   // integer key
            &[0xa2, 0x61, b'a', 0x01, 0x61, b'a', 0x02], // duplicate key
            &[0xc1, 0x01],                         // tag 1
            &[0xd8, 0x2a, 0x01],                   // tag 42 around an integer
            &[0xf7],                               // undefined
            &[0xf9, 0x3c, 0x00],                   // half float
            &[0xfb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0], // NaN
            &[0x01, 0x02],                         // trailing bytes
            &[0x1c],                               // reserved
            &[0x62, 0xff, 0xfe],                   // invalid UTF-8
        ];
        for bytes in cases {
            let error = from_slice::<Ipld>(bytes, 1 << 20).unwrap_err();
            assert_eq!(error.code(), "bad_cbor", "{bytes:02x?}: {error}");
        }
    }

    #[test]
    fn keys_sort_length_first_then_bytewise() {
        let mut map = BTreeMap::new();
        for key in ["_a", "ts", "b", "aaa", "_"] {
            map.insert(key.to_string(), Ipld::Null);
        }
        let bytes = to_canonical(&map).unwrap();
        let keys: Vec<String> = match serde_ipld_dagcbor::from_slice::<Ipld>(&bytes).unwrap() {
            Ipld::Map(_) => {
                // Read the keys in wire order rather than through a sorted map.
                let mut keys = Vec::new();
                let mut pos = 1;
                while pos < bytes.len() {
                    let len = usize::from(bytes[pos] & 0x1f);
                    keys.push(String::from_utf8(bytes[pos + 1..pos + 1 + len].to_vec()).unwrap());
                    pos += 1 + len + 1;
                }
                keys
            }
            other => panic!("not a map: {other:?}"),
        };
        // "_" (0x5f) sorts before "b" (0x62); "_a" before "ts"; "aaa" last.
        assert_eq!(keys, ["_", "b", "_a", "ts", "aaa"]);
    }

    #[test]
    fn integers_are_shortest_and_floats_are_64_bit() {
        assert_eq!(to_canonical(&23u64).unwrap(), [0x17]);
        assert_eq!(to_canonical(&24u64).unwrap(), [0x18, 0x18]);
        assert_eq!(to_canonical(&Ipld::Integer(-1)).unwrap(), [0x20]);
        assert_eq!(to_canonical(&1.5f64).unwrap()[0], 0xfb);
        assert_eq!(to_canonical(&1.5f64).unwrap().len(), 9);
        assert_eq!(to_canonical(&f64::NAN).unwrap_err().code(), "encode_failed");
    }
}
