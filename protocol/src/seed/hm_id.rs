//! Hypermedia ids as Seed's client reads and writes them: `hm://<uid>/<path>`
//! with `?v=<version>` (and `&l` for "latest") and a `#<block>` fragment
//! (`blk`, `blk+` expanded, `blk[3:9]` a range), or the same id behind a
//! web address `http(s)://<host>/hm/<uid>/<path>`. Path segments are kept
//! as written (not percent-decoded); view terms such as `:profile` or
//! `:comments` stay in the path for whoever reads them.

use serde_json::{json, Value};

/// What a fragment selects in the block it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlockRange {
    /// `blk[start:end]`: a span of the block's text.
    Span { start: u64, end: u64 },
    /// `blk+` (true) or `blk` (false): the block with or without its
    /// children.
    Expanded(bool),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HmId {
    /// `hm://<uid>/<path>`, empty segments dropped.
    pub id: String,
    pub uid: String,
    pub path: Vec<String>,
    pub version: Option<String>,
    pub block_ref: Option<String>,
    pub block_range: Option<BlockRange>,
    /// The web host (with its port) the id came from, if any.
    pub hostname: Option<String>,
    /// `hm`, `https` or `http`, as written.
    pub scheme: String,
    /// True with `?l`, or when no version is named.
    pub latest: bool,
}

/// Uids a web address under `/hm/` never names.
const RESERVED_UIDS: [&str; 5] = ["download", "connect", "register", "profile", "contact"];

/// `hm://<uid>` and the path's non-empty segments.
pub fn pack_base_id(uid: &str, path: &[String]) -> String {
    let mut id = format!("hm://{uid}");
    let segments: Vec<&str> = path
        .iter()
        .map(String::as_str)
        .filter(|s| !s.is_empty())
        .collect();
    if !segments.is_empty() {
        id.push('/');
        id.push_str(&segments.join("/"));
    }
    id
}

impl HmId {
    /// Reads an id; `None` when the text is not one.
    pub fn unpack(text: &str) -> Option<HmId> {
        let (scheme, rest) = text.split_once("://")?;
        if rest.is_empty() {
            return None;
        }
        // A second `://` cuts the rest, as the reference's split does.
        let rest = rest.split("://").next().unwrap_or(rest);
        let (path_and_query, fragment) = match rest.split_once('#') {
            Some((before, after)) => (before, Some(after.split('#').next().unwrap_or(after))),
            None => (rest, None),
        };
        let (path, query) = match path_and_query.split_once('?') {
            Some((path, query)) => (path, query.split('?').next().unwrap_or(query)),
            None => (path_and_query, ""),
        };
        let segments: Vec<&str> = path.split('/').collect();
        let (uid, path, hostname) = match scheme {
            "https" | "http" => {
                if segments.get(1) != Some(&"hm") {
                    return None;
                }
                let uid = segments.get(2).copied().unwrap_or_default();
                if RESERVED_UIDS.contains(&uid) {
                    return None;
                }
                let hostname = segments.first().map(|h| (*h).to_owned());
                (uid, segments.get(3..).unwrap_or_default(), hostname)
            }
            "hm" => (segments[0], segments.get(1..).unwrap_or_default(), None),
            _ => return None,
        };
        let mut version = None;
        let mut latest_flag = None;
        for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
            match &*key {
                "v" => version = Some(value.into_owned()),
                "l" => latest_flag = Some(value.into_owned()),
                _ => {}
            }
        }
        let version = version.filter(|v| !v.is_empty());
        let latest = latest_flag.as_deref() == Some("") || version.is_none();
        let (block_ref, block_range) = match fragment {
            Some(fragment) => {
                let (block, range) = parse_fragment(fragment);
                (Some(block), Some(range))
            }
            None => (None, None),
        };
        let path: Vec<String> = path.iter().map(|s| (*s).to_owned()).collect();
        Some(HmId {
            id: pack_base_id(uid, &path),
            uid: uid.to_owned(),
            path,
            version,
            block_ref,
            block_range,
            hostname,
            scheme: scheme.to_owned(),
            latest,
        })
    }

    /// The id as text: base, `?v=<version>` (`&l` when latest), then the
    /// fragment. `None` without a uid.
    pub fn pack(&self) -> Option<String> {
        if self.uid.is_empty() {
            return None;
        }
        let mut out = pack_base_id(&self.uid, &self.path);
        if let Some(version) = &self.version {
            out.push_str("?v=");
            out.push_str(version);
            if self.latest {
                out.push_str("&l");
            }
        }
        if let Some(block) = &self.block_ref {
            out.push('#');
            out.push_str(block);
            match &self.block_range {
                Some(BlockRange::Expanded(true)) => out.push('+'),
                Some(BlockRange::Span { start, end }) => {
                    out.push_str(&format!("[{start}:{end}]"));
                }
                _ => {}
            }
        }
        Some(out)
    }

    /// The id as the server's schema orders it.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "uid": self.uid,
            "path": self.path,
            "version": self.version,
            "blockRef": self.block_ref,
            "blockRange": match &self.block_range {
                None => Value::Null,
                Some(BlockRange::Span { start, end }) => json!({"start": start, "end": end}),
                Some(BlockRange::Expanded(expanded)) => json!({"expanded": expanded}),
            },
            "hostname": self.hostname,
            "scheme": self.scheme,
            "latest": self.latest,
        })
    }
}

/// `blk+`, `blk[3:9]` or `blk`; anything else is a block id as written.
fn parse_fragment(fragment: &str) -> (String, BlockRange) {
    if let Some(block) = fragment.strip_suffix('+') {
        if is_block_id(block) {
            return (block.to_owned(), BlockRange::Expanded(true));
        }
    }
    if let Some(open) = fragment.find('[') {
        let (block, range) = fragment.split_at(open);
        let span = range
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .and_then(|r| r.split_once(':'))
            .filter(|(s, e)| is_digits(s) && is_digits(e))
            .and_then(|(s, e)| Some((s.parse().ok()?, e.parse().ok()?)));
        if let (true, Some((start, end))) = (is_block_id(block), span) {
            return (block.to_owned(), BlockRange::Span { start, end });
        }
    }
    (fragment.to_owned(), BlockRange::Expanded(false))
}

/// The reference's `[^\+\[]+`.
fn is_block_id(block: &str) -> bool {
    !block.is_empty() && !block.contains(['+', '['])
}

fn is_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(text: &str) -> HmId {
        HmId::unpack(text).unwrap_or_else(|| panic!("{text} is an id"))
    }

    #[test]
    fn ids_unpack_and_pack_as_the_reference_does() {
        let bare = id("hm://uid");
        assert_eq!(
            (bare.path.len(), bare.latest, bare.version.is_none()),
            (0, true, true)
        );
        assert_eq!(bare.pack().unwrap(), "hm://uid");
        let versioned = id("hm://uid/a/b?v=V1");
        assert_eq!(versioned.path, ["a", "b"]);
        assert!(!versioned.latest);
        assert_eq!(versioned.pack().unwrap(), "hm://uid/a/b?v=V1");
        assert_eq!(id("hm://uid/a?l&v=V1").pack().unwrap(), "hm://uid/a?v=V1&l");
        let block = id("hm://uid/a#blk");
        assert_eq!(block.block_ref.as_deref(), Some("blk"));
        assert_eq!(block.block_range, Some(BlockRange::Expanded(false)));
        assert!(block.latest);
        assert_eq!(id("hm://uid/a#blk+").pack().unwrap(), "hm://uid/a#blk+");
        let span = id("hm://uid/a?v=V1#blk[3:9]");
        assert_eq!(
            span.block_range,
            Some(BlockRange::Span { start: 3, end: 9 })
        );
        assert_eq!(span.pack().unwrap(), "hm://uid/a?v=V1#blk[3:9]");
        assert_eq!(
            id("hm://uid/a#blk[3:x]").block_ref.as_deref(),
            Some("blk[3:x]")
        );
        assert_eq!(id("hm://uid/a%20b").path, ["a%20b"]);
        assert_eq!(id("hm://uid/a?v=V+W").version.as_deref(), Some("V W"));
        let web = id("https://hyper.media/hm/uid/doc?v=V#b");
        assert_eq!(web.hostname.as_deref(), Some("hyper.media"));
        assert_eq!((web.scheme.as_str(), web.uid.as_str()), ("https", "uid"));
        assert_eq!(web.pack().unwrap(), "hm://uid/doc?v=V#b");
        assert_eq!(
            id("http://localhost:3000/hm/uid/p").hostname.as_deref(),
            Some("localhost:3000")
        );
        let trailing = id("hm://uid/");
        assert_eq!((trailing.id.as_str(), trailing.path.len()), ("hm://uid", 1));
        assert_eq!(id("hm:///a").pack(), None);
        for not_an_id in [
            "https://x.com/hm/profile/uid",
            "https://x.com/doc",
            "hm:uid",
            "HM://uid",
            "ipfs://bafy",
            "hm://",
            "",
        ] {
            assert_eq!(HmId::unpack(not_an_id), None, "{not_an_id}");
        }
        assert_eq!(
            id("hm://uid/a?v=V1#b").to_json(),
            json!({"id": "hm://uid/a", "uid": "uid", "path": ["a"], "version": "V1",
                   "blockRef": "b", "blockRange": {"expanded": false}, "hostname": null,
                   "scheme": "hm", "latest": false})
        );
    }
}
