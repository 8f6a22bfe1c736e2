//! The inline parser's look-ahead tables, built once per text: where each
//! bracket, backtick run, `>` and `"` lies, the links and spans that can open
//! at a position, and the emphasis runs still open, so no look-ahead walks the
//! text again.

use super::*;

pub(super) const SPAN_STYLES: [(&str, &str); 4] = [
    ("color", "TextColor"),
    ("background-color", "BackgroundColor"),
    ("font-size", "TextSize"),
    ("font-family", "TextFamily"),
];

/// `<br\s*\/?>` at `i`: its length.
pub(super) fn match_br(s: &[u16], i: usize) -> Option<usize> {
    if !starts_with_at(s, i, "<br") {
        return None;
    }
    let mut j = skip_spaces(s, i + 3);
    if at(s, j) == b'/' {
        j += 1;
    }
    (at(s, j) == b'>').then_some(j + 1 - i)
}

pub(super) fn replace_br(s: &[u16]) -> Vec<u16> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if let Some(len) = match_br(s, i) {
            out.push(u16::from(b'\n'));
            i += len;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

pub(super) fn run_len(s: &[u16], i: usize, unit: u8) -> usize {
    s.get(i..).map_or(0, |r| {
        r.iter().take_while(|&&c| c == u16::from(unit)).count()
    })
}

/// No position, in the scanning tables.
pub(super) const NO: u32 = u32::MAX;

/// A position as the tables hold it (texts stay far below 4 Gi units).
pub(super) fn pos32(x: usize) -> u32 {
    u32::try_from(x).unwrap_or(NO)
}

pub(super) fn opt(x: u32) -> Option<usize> {
    (x != NO).then_some(x as usize)
}

/// The positions of one unit in a text, ascending.
pub(super) struct Occurrences(Vec<u32>);

impl Occurrences {
    pub(super) fn new(s: &[u16], unit: u8) -> Occurrences {
        Occurrences(
            (0..s.len())
                .filter(|&k| s[k] == u16::from(unit))
                .map(pos32)
                .collect(),
        )
    }

    /// The first at or after `from`, if it is before `to`.
    pub(super) fn first(&self, from: usize, to: usize) -> Option<usize> {
        let k = self.0.partition_point(|&p| (p as usize) < from);
        self.0.get(k).map(|&p| p as usize).filter(|&p| p < to)
    }
}

/// The maximal backtick runs of a text, by length.
pub(super) struct Backticks {
    pub(super) by_len: std::collections::HashMap<usize, Vec<u32>>,
}

impl Backticks {
    pub(super) fn new(s: &[u16]) -> Backticks {
        let mut by_len: std::collections::HashMap<usize, Vec<u32>> =
            std::collections::HashMap::new();
        let mut i = 0;
        while i < s.len() {
            if at(s, i) == b'`' {
                let n = run_len(s, i, b'`');
                by_len.entry(n).or_default().push(pos32(i));
                i += n;
            } else {
                i += 1;
            }
        }
        Backticks { by_len }
    }

    /// `findBacktickRun(s, from, n)` where `from` ends a run: the first run
    /// of exactly `n` backticks starting in `from..to`. (A frame's text
    /// ends before a `]`, so its runs are runs of the whole text.)
    pub(super) fn closer(&self, n: usize, from: usize, to: usize) -> Option<usize> {
        let starts = self.by_len.get(&n)?;
        let k = starts.partition_point(|&p| (p as usize) < from);
        starts.get(k).map(|&p| p as usize).filter(|&p| p < to)
    }
}

/// `readLink`'s walks over a whole text, from every position at once.
///
/// From a `[` the label walk steps one unit, two after a `\`, and from a
/// backtick run past the run closing it (past itself when none does);
/// every position has one next step, so the walks form a tree, and the
/// `]` matching a `[` is where the bracket count along its path first
/// comes back to zero. Over the whole text that is [`Walk::close`]. In a
/// frame ending at `b` the walk differs only where the whole text's walk
/// jumps from a backtick run before `b` to a closer after it (the frame
/// sees no closer there and steps past the run): a `[` whose path crosses
/// `b` otherwise has no match in the frame, found by a jump-pointer search
/// for the path's last position before `b`; only past such a jump is the
/// frame's walk followed step by step, remembering each `[`'s match.
pub(super) struct Walk {
    /// The label walk's next position from each position (`n` is past
    /// the end).
    pub(super) next: Vec<u32>,
    /// A jump pointer (skew binary) further along each position's path.
    pub(super) jump: Vec<u32>,
    /// For each position, where the walk from it first closes one more
    /// bracket than it opens (`NO`: never); `close[p + 1]` matches the `[`
    /// at `p`.
    pub(super) close: Vec<u32>,
    /// The same for the URL's walk (`(`, `)`, a `\` skipping a unit):
    /// the `)` ending a URL that starts at each position.
    pub(super) paren: Vec<u32>,
    /// The first `[`, `]`, `\` or backtick at or after each position.
    pub(super) special: Vec<u32>,
    /// Matches found in frames: (the `]` or `NO`, the frame's end; 0 when
    /// none is known). A frame's end is that of no other frame.
    pub(super) memo: Vec<(u32, u32)>,
}

impl Walk {
    pub(super) fn new(s: &[u16], ticks: &Backticks) -> Walk {
        let n = s.len();
        let end = pos32(n);
        let mut next = vec![end; n + 1];
        // Steps from each position to the end.
        let mut depth = vec![0u32; n + 1];
        let mut jump = vec![end; n + 1];
        let mut close = vec![NO; n + 1];
        let mut paren = vec![NO; n + 1];
        let mut special = vec![end; n + 1];
        // The end of the backtick run holding `x`, while `x` is in one.
        let mut run_end = n;
        for x in (0..n).rev() {
            let c = at(s, x);
            if c == b'`' && at(s, x + 1) != b'`' {
                run_end = x + 1;
            }
            let nx = match c {
                b'\\' => (x + 2).min(n),
                b'`' => {
                    let len = run_end - x;
                    ticks.closer(len, run_end, n).map_or(run_end, |c| c + len)
                }
                _ => x + 1,
            };
            next[x] = pos32(nx);
            depth[x] = depth[nx] + 1;
            let j = jump[nx] as usize;
            jump[x] = if depth[nx] - depth[j] == depth[j] - depth[jump[j] as usize] {
                jump[j]
            } else {
                pos32(nx)
            };
            close[x] = match c {
                b']' => pos32(x),
                b'[' => opt(close[x + 1]).map_or(NO, |m| close[m + 1]),
                _ => close[nx],
            };
            paren[x] = match c {
                b')' => pos32(x),
                b'(' => opt(paren[x + 1]).map_or(NO, |m| paren[m + 1]),
                b'\\' => paren[(x + 2).min(n)],
                _ => paren[x + 1],
            };
            special[x] = if matches!(c, b'[' | b']' | b'\\' | b'`') {
                pos32(x)
            } else {
                special[x + 1]
            };
        }
        Walk {
            next,
            jump,
            close,
            paren,
            special,
            memo: vec![(NO, 0); n],
        }
    }

    /// The last position before `b` on the whole text's walk from `x`
    /// (`x < b`).
    pub(super) fn last_before(&self, mut x: usize, b: usize) -> usize {
        loop {
            let next = self.next[x] as usize;
            if next >= b {
                return x;
            }
            let jump = self.jump[x] as usize;
            x = if jump < b { jump } else { next };
        }
    }

    /// The match of the `[` at `p` in a frame ending at `b`, when known
    /// without following the frame's walk.
    pub(super) fn known(&self, s: &[u16], p: usize, b: usize) -> Option<Option<usize>> {
        let (m, bound) = self.memo[p];
        if bound as usize == b {
            return Some(opt(m));
        }
        // Found in an enclosing frame, before this one ends: the walk
        // there never looked past it, so it is this frame's walk too.
        if bound != 0 && m != NO && (m as usize) < b {
            return Some(Some(m as usize));
        }
        if let Some(m) = opt(self.close[p + 1]).filter(|&m| m < b) {
            return Some(Some(m));
        }
        // The whole text's own walk (no jump leaves it).
        if b >= s.len() {
            return Some(None);
        }
        let y = self.last_before(p, b);
        let jumps_out = at(s, y) == b'`' && self.next[y] as usize > b;
        (!jumps_out).then_some(None)
    }

    /// `readLink`'s `]` for the `[` at `p` in a frame ending at `b`.
    pub(super) fn bracket_close(
        &mut self,
        s: &[u16],
        ticks: &Backticks,
        p: usize,
        b: usize,
    ) -> Option<usize> {
        if let Some(known) = self.known(s, p, b) {
            return known;
        }
        // Follow the frame's walk; `open` holds the `[`s not matched yet.
        let mut open = vec![p];
        let mut q = p + 1;
        loop {
            q = self.special[q.min(s.len())] as usize;
            if q >= b {
                break;
            }
            match at(s, q) {
                b']' => {
                    let Some(o) = open.pop() else { break };
                    self.memo[o] = (pos32(q), pos32(b));
                    if open.is_empty() {
                        return Some(q);
                    }
                    q += 1;
                }
                b'[' => match self.known(s, q, b) {
                    Some(Some(m)) => q = m + 1,
                    Some(None) => break,
                    None => {
                        open.push(q);
                        q += 1;
                    }
                },
                b'\\' => q += 2,
                _ => {
                    let n = run_len(s, q, b'`');
                    q = ticks.closer(n, q + n, b).map_or(q + n, |c| c + n);
                }
            }
        }
        for o in open {
            self.memo[o] = (NO, pos32(b));
        }
        None
    }
}

/// The look-ahead tables of one text, each built when first needed.
pub(super) struct Scan<'a> {
    pub(super) s: &'a [u16],
    pub(super) greater: Option<Occurrences>,
    pub(super) quote: Option<Occurrences>,
    pub(super) ticks: Option<Backticks>,
    pub(super) walk: Option<Walk>,
}

impl<'a> Scan<'a> {
    pub(super) fn new(s: &'a [u16]) -> Scan<'a> {
        Scan {
            s,
            greater: None,
            quote: None,
            ticks: None,
            walk: None,
        }
    }

    /// `indexOf('>', from)` in a frame ending at `to`.
    pub(super) fn greater(&mut self, from: usize, to: usize) -> Option<usize> {
        let s = self.s;
        self.greater
            .get_or_insert_with(|| Occurrences::new(s, b'>'))
            .first(from, to)
    }

    /// `indexOf('"', from)` in a frame ending at `to`.
    pub(super) fn quote(&mut self, from: usize, to: usize) -> Option<usize> {
        let s = self.s;
        self.quote
            .get_or_insert_with(|| Occurrences::new(s, b'"'))
            .first(from, to)
    }

    /// `findBacktickRun(s, from, n)` in a frame ending at `to`.
    pub(super) fn backtick_run(&mut self, n: usize, from: usize, to: usize) -> Option<usize> {
        let s = self.s;
        self.ticks
            .get_or_insert_with(|| Backticks::new(s))
            .closer(n, from, to)
    }

    /// `readLink(s, open)` in a frame ending at `to`: `[label](url)` or
    /// `[label](<url>)` with the `[` at `open`.
    pub(super) fn read_link(&mut self, open: usize, to: usize) -> Option<LinkAt> {
        let s = self.s;
        if self.walk.is_none() {
            let ticks = self.ticks.get_or_insert_with(|| Backticks::new(s));
            self.walk = Some(Walk::new(s, ticks));
        }
        let (walk, ticks) = (self.walk.as_mut()?, self.ticks.as_ref()?);
        let close = walk.bracket_close(s, ticks, open, to)?;
        let t = &s[..to];
        if at(t, close + 1) != b'(' {
            return None;
        }
        let label = (open + 1, close);
        let j = close + 2;
        if at(t, j) == b'<' {
            let gt = self.greater(j + 1, to)?;
            if at(t, gt + 1) != b')' {
                return None;
            }
            return Some(LinkAt {
                label,
                url: (j + 1, gt),
                end: gt + 2,
            });
        }
        let paren = opt(self.walk.as_ref()?.paren[j]).filter(|&p| p < to)?;
        Some(LinkAt {
            label,
            url: (close + 2, paren),
            end: paren + 1,
        })
    }
}

pub(super) struct LinkAt {
    pub(super) label: (usize, usize),
    pub(super) url: (usize, usize),
    pub(super) end: usize,
}

/// `readLink(s, open)` over all of `s`.
pub(super) fn read_link(s: &[u16], open: usize) -> Option<LinkAt> {
    Scan::new(s).read_link(open, s.len())
}

/// `<span style="prop:value">` at `i` (`s` ends where the frame does):
/// the annotation type, the value's range and the tag's length.
pub(super) fn match_span(
    s: &[u16],
    i: usize,
    scan: &mut Scan,
) -> Option<(&'static str, (usize, usize), usize)> {
    let open = "<span style=\"";
    if !starts_with_at(s, i, open) {
        return None;
    }
    let p0 = i + open.len();
    let mut p = p0;
    while matches!(at(s, p), c if c.is_ascii_lowercase() || c == b'-') {
        p += 1;
    }
    if p == p0 || at(s, p) != b':' {
        return None;
    }
    let v0 = p + 1;
    let quote = scan.quote(v0, s.len())?;
    if at(s, quote + 1) != b'>' {
        return None;
    }
    let prop = string(&s[p0..p]);
    let kind = SPAN_STYLES.iter().find(|(k, _)| *k == prop)?.1;
    Some((kind, (v0, quote), quote + 2 - i))
}

pub(super) fn decode_html_attr(s: &[u16]) -> String {
    string(s)
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// An autolink's inside: `^[a-zA-Z][a-zA-Z0-9+.-]*:\S*$` with no `<`/`>`.
pub(super) fn is_autolink(inner: &[u16]) -> bool {
    match scheme_colon(inner) {
        Some(colon) => inner[colon + 1..]
            .iter()
            .all(|&c| !is_space(c) && c != u16::from(b'<') && c != u16::from(b'>')),
        None => false,
    }
}

/// One annotation as the scan makes it, in the order the JavaScript
/// pushes annotations (the first piece of each, see [`Spans`]): its merge
/// key, range and frame. An open span's `end` moves as the text grows.
pub(super) struct Item {
    pub(super) key: u32,
    pub(super) start: u32,
    pub(super) end: u32,
    pub(super) frame: u32,
}

/// What an annotation carries besides its range.
pub(super) type Proto = (&'static str, Option<String>, Option<Map<String, Value>>);

/// The annotations' merge keys (type, link, attributes), each with what
/// its annotations carry; the first six are those with only a type.
pub(super) struct Keys {
    pub(super) index: std::collections::HashMap<(&'static str, String, String), u32>,
    pub(super) protos: Vec<Proto>,
}

pub(super) const BOLD: u32 = 0;
pub(super) const ITALIC: u32 = 1;
pub(super) const STRIKE: u32 = 2;
pub(super) const UNDERLINE: u32 = 3;
pub(super) const RANGE: u32 = 4;
pub(super) const CODE: u32 = 5;

impl Keys {
    pub(super) fn new() -> Keys {
        let plain = ["Bold", "Italic", "Strike", "Underline", "Range", "Code"];
        Keys {
            index: std::collections::HashMap::new(),
            protos: plain.iter().map(|&kind| (kind, None, None)).collect(),
        }
    }

    /// The key of a link or of a styled span.
    pub(super) fn id(
        &mut self,
        kind: &'static str,
        link: Option<String>,
        attributes: Option<Map<String, Value>>,
    ) -> u32 {
        let key = (
            kind,
            link.clone().unwrap_or_default(),
            attributes
                .as_ref()
                .map(|m| serde_json::to_string(m).unwrap_or_default())
                .unwrap_or_default(),
        );
        if let Some(&k) = self.index.get(&key) {
            return k;
        }
        let k = pos32(self.protos.len());
        self.index.insert(key, k);
        self.protos.push((kind, link, attributes));
        k
    }
}

/// The kinds of open span `toggle` and `closeType` look for: bold and
/// italic by `*` and by `_`, strike, underline, mark, styled spans.
pub(super) const SPAN_KINDS: usize = 8;
pub(super) const STYLED: usize = 7;

pub(super) struct OpenSpan {
    pub(super) key: u32,
    pub(super) start: u32,
    /// Its annotation once the first piece is emitted, else `NO`.
    pub(super) item: u32,
}

/// One frame's open spans (`stack` in `parseInlineFormatting`).
///
/// Closing a span below others closes and reopens those above it: the
/// JavaScript emits a piece of each (when not empty) and merging joins the
/// pieces again. Here a span stays one annotation from where it opened to
/// where it finally closes, emitted where its first piece would be, which
/// is all the final order depends on; so a close costs only the spans
/// above it that emit their first piece then.
#[derive(Default)]
pub(super) struct Spans {
    /// Every span opened, in order (the stack's order); `None` once closed.
    pub(super) list: Vec<Option<OpenSpan>>,
    /// The open spans of each kind, in order.
    pub(super) by_kind: [Vec<u32>; SPAN_KINDS],
    /// Spans with no piece emitted yet, opened before the text last grew
    /// (a close above would emit their first piece), in order.
    pub(super) older: Vec<u32>,
    /// Spans with no piece emitted yet, opened at the text's current
    /// length `fresh_len` (a close above emits nothing of them), in order.
    pub(super) fresh: Vec<u32>,
    pub(super) fresh_len: usize,
}

impl Spans {
    pub(super) fn sync(&mut self, len: usize) {
        if len != self.fresh_len {
            for k in std::mem::take(&mut self.fresh) {
                if self.list[k as usize]
                    .as_ref()
                    .is_some_and(|span| span.item == NO)
                {
                    self.older.push(k);
                }
            }
            self.fresh_len = len;
        }
    }

    pub(super) fn open(&mut self, key: u32, kind: usize, len: usize) {
        self.sync(len);
        let k = pos32(self.list.len());
        self.list.push(Some(OpenSpan {
            key,
            start: pos32(len),
            item: NO,
        }));
        self.by_kind[kind].push(k);
        self.fresh.push(k);
    }

    pub(super) fn emit(span: &mut OpenSpan, out: &mut Vec<Item>, len: usize, frame: u32) {
        span.item = pos32(out.len());
        out.push(Item {
            key: span.key,
            start: span.start,
            end: pos32(len),
            frame,
        });
    }

    /// Closes the last open span of `kind`; whether there was one.
    pub(super) fn close(
        &mut self,
        kind: usize,
        out: &mut Vec<Item>,
        len: usize,
        frame: u32,
    ) -> bool {
        let Some(&k) = self.by_kind[kind].last() else {
            return false;
        };
        self.sync(len);
        // Those above it that emit their first piece now, topmost first.
        while let Some(&above) = self.older.last() {
            if above <= k {
                break;
            }
            self.older.pop();
            if let Some(span) = self.list[above as usize].as_mut() {
                if span.item == NO {
                    Self::emit(span, out, len, frame);
                }
            }
        }
        if self.older.last() == Some(&k) {
            self.older.pop();
        }
        self.by_kind[kind].pop();
        if let Some(span) = self.list[k as usize].take() {
            Self::finish(span, out, len, frame);
        }
        true
    }

    /// A span's close: its annotation ends here, or is emitted now when
    /// this is its first piece (none when it is empty).
    pub(super) fn finish(mut span: OpenSpan, out: &mut Vec<Item>, len: usize, frame: u32) {
        match opt(span.item) {
            Some(item) => out[item].end = pos32(len),
            None if len > span.start as usize => Self::emit(&mut span, out, len, frame),
            None => {}
        }
    }

    /// Closes every span still open, topmost first.
    pub(super) fn close_all(&mut self, out: &mut Vec<Item>, len: usize, frame: u32) {
        self.sync(len);
        for slot in self.list.iter_mut().rev() {
            if let Some(span) = slot.take() {
                Self::finish(span, out, len, frame);
            }
        }
    }
}
