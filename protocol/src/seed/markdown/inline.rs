//! Inline formatting: a line's text into plain text and annotations, as the client's inline parser makes them, in about linear time.

use super::*;

//
// `parseInlineFormatting` reads its text once, but looks ahead from many
// places (the `]` matching a `[`, the `)` ending a URL, the backtick run
// closing a code span, the next `>` or `"`), each time as far as the text
// goes; it parses a link label by calling itself on the label, and every
// enclosing call merges the label's annotations again. On hostile text
// (256 KiB of `[`, say) that is quadratic. Here every look-ahead is
// answered from tables built once per text ([`Scan`]), a label is a frame
// over the same text (positions stay those of the whole text; a frame's
// end hides what lies past it), and all frames write one text and one list
// of annotations, merged once at the end into the order the nested merges
// would leave ([`Ties`]).

#[derive(Clone, Debug)]
pub(super) struct Ann {
    pub(super) kind: &'static str,
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) link: Option<String>,
    pub(super) attributes: Option<Map<String, Value>>,
}

pub(super) struct Inline {
    pub(super) text: Vec<u16>,
    pub(super) annotations: Vec<Ann>,
}

impl Inline {
    pub(super) fn into_parts(self) -> (String, Vec<Annotation>) {
        let annotations = self
            .annotations
            .into_iter()
            .map(|a| Annotation {
                kind: a.kind.to_owned(),
                starts: vec![a.start],
                ends: vec![a.end],
                link: a.link,
                attributes: a.attributes,
            })
            .collect();
        (string(&self.text), annotations)
    }
}

/// What to do with a link label's text once it is parsed: an image's alt
/// text is appended as it is, a link's gets a `Link` annotation over it.
pub(super) struct LabelUse {
    /// Where the parent resumes.
    pub(super) end: usize,
    /// The link's URL; `None` for an image.
    pub(super) url: Option<String>,
}

/// One text being parsed: the whole input, or a link label inside it
/// (positions are the input's; the frame ends at `to`).
pub(super) struct InlineFrame {
    pub(super) id: u32,
    pub(super) to: usize,
    pub(super) i: usize,
    pub(super) spans: Spans,
    pub(super) then: Option<LabelUse>,
    /// The text's length when the frame began.
    pub(super) text_start: usize,
}

pub(super) struct InlineParse<'a> {
    pub(super) raw: &'a [u16],
    pub(super) scan: Scan<'a>,
    pub(super) text: Vec<u16>,
    pub(super) keys: Keys,
    pub(super) items: Vec<Item>,
    /// Each frame's parent (the whole input, frame 0, is its own).
    pub(super) frame_parent: Vec<u32>,
}

/// Inline markdown into text and annotations (`parseInlineFormatting`).
///
/// The JavaScript parses a link label by calling itself; here a label is a
/// frame on an explicit stack, so nesting depth costs heap, not stack.
pub(super) fn parse_inline(raw: &[u16]) -> Inline {
    // Text with nothing the scan acts on is its own text.
    if !raw.iter().any(|&c| b"\\`*_~<![".contains(&at(&[c], 0))) {
        return Inline {
            text: raw.to_vec(),
            annotations: Vec::new(),
        };
    }
    let mut p = InlineParse {
        raw,
        scan: Scan::new(raw),
        text: Vec::new(),
        keys: Keys::new(),
        items: Vec::new(),
        frame_parent: vec![0],
    };
    let mut frames = vec![InlineFrame {
        id: 0,
        to: raw.len(),
        i: 0,
        spans: Spans::default(),
        then: None,
        text_start: 0,
    }];
    while let Some(top) = frames.last_mut() {
        if let Some(((a, b), then)) = p.until_label(top) {
            let id = pos32(p.frame_parent.len());
            p.frame_parent.push(top.id);
            frames.push(InlineFrame {
                id,
                to: b,
                i: a,
                spans: Spans::default(),
                then: Some(then),
                text_start: p.text.len(),
            });
            continue;
        }
        let Some(mut done) = frames.pop() else { break };
        done.spans.close_all(&mut p.items, p.text.len(), done.id);
        let (Some(parent), Some(then)) = (frames.last_mut(), done.then) else {
            break;
        };
        if let Some(url) = then.url {
            if p.text.len() > done.text_start {
                let key = p.keys.id("Link", Some(url), None);
                p.items.push(Item {
                    key,
                    start: pos32(done.text_start),
                    end: pos32(p.text.len()),
                    frame: parent.id,
                });
            }
        }
        parent.i = then.end;
    }
    let annotations = p.merged();
    Inline {
        text: p.text,
        annotations,
    }
}

impl InlineParse<'_> {
    pub(super) fn toggle(&mut self, f: &mut InlineFrame, key: u32, kind: usize) {
        let len = self.text.len();
        if !f.spans.close(kind, &mut self.items, len, f.id) {
            f.spans.open(key, kind, len);
        }
    }

    /// Runs `parseInlineFormatting`'s loop over the frame from `f.i` until
    /// its end (`None`) or a link or image whose label must be parsed
    /// first: then the label's range and what to do with it.
    pub(super) fn until_label(
        &mut self,
        f: &mut InlineFrame,
    ) -> Option<((usize, usize), LabelUse)> {
        let whole = self.raw;
        let raw = &whole[..f.to];
        let n = raw.len();
        while f.i < n {
            let i = f.i;
            let ch = at(raw, i);
            if ch == b'\\' && i + 1 < n {
                self.text.push(raw[i + 1]);
                f.i += 2;
                continue;
            }
            if ch == b'`' {
                let run = run_len(raw, i, b'`');
                if let Some(closer) = self.scan.backtick_run(run, i + run, n) {
                    let mut inner = &raw[i + run..closer];
                    if inner.len() >= 2
                        && at(inner, 0) == b' '
                        && at(inner, inner.len() - 1) == b' '
                        && !trim(inner).is_empty()
                    {
                        inner = &inner[1..inner.len() - 1];
                    }
                    let inner = replace_br(inner);
                    let start = self.text.len();
                    self.text.extend_from_slice(&inner);
                    if !inner.is_empty() {
                        self.items.push(Item {
                            key: CODE,
                            start: pos32(start),
                            end: pos32(self.text.len()),
                            frame: f.id,
                        });
                    }
                    f.i = closer + run;
                    continue;
                }
                self.text.extend_from_slice(&raw[i..i + run]);
                f.i += run;
                continue;
            }
            if ch == b'*' || ch == b'_' {
                let mut run = run_len(raw, i, ch);
                f.i += run;
                let star = usize::from(ch == b'_') * 2;
                while run > 0 {
                    if run >= 2 {
                        self.toggle(f, BOLD, star);
                        run -= 2;
                    } else {
                        self.toggle(f, ITALIC, star + 1);
                        run -= 1;
                    }
                }
                continue;
            }
            if ch == b'~' && at(raw, i + 1) == b'~' {
                self.toggle(f, STRIKE, 4);
                f.i += 2;
                continue;
            }
            if ch == b'<' && self.inline_tag(raw, f) {
                continue;
            }
            if ch == b'!' && at(raw, i + 1) == b'[' {
                if let Some(link) = self.scan.read_link(i + 1, n) {
                    return Some((
                        link.label,
                        LabelUse {
                            end: link.end,
                            url: None,
                        },
                    ));
                }
            }
            if ch == b'[' {
                if let Some(link) = self.scan.read_link(i, n) {
                    return Some((
                        link.label,
                        LabelUse {
                            end: link.end,
                            url: Some(string(&raw[link.url.0..link.url.1])),
                        },
                    ));
                }
            }
            self.text.push(raw[i]);
            f.i += 1;
        }
        None
    }

    /// What starts with `<` at `f.i` (`raw` ends with the frame): a line
    /// break, `<u>`/`<mark>` and their closers, a styled `<span>` or its
    /// closer, or an autolink. Whether it was one (and `f.i` moved past
    /// it).
    pub(super) fn inline_tag(&mut self, raw: &[u16], f: &mut InlineFrame) -> bool {
        let i = f.i;
        let len = self.text.len();
        if let Some(n) = match_br(raw, i) {
            self.text.push(u16::from(b'\n'));
            f.i += n;
            return true;
        }
        let closing = at(raw, i + 1) == b'/';
        let name_at = i + 1 + usize::from(closing);
        let tag = if starts_with_at(raw, name_at, "u>") {
            Some((UNDERLINE, 5, 2))
        } else if starts_with_at(raw, name_at, "mark>") {
            Some((RANGE, 6, 5))
        } else {
            None
        };
        if let Some((key, kind, n)) = tag {
            if closing {
                f.spans.close(kind, &mut self.items, len, f.id);
            } else {
                f.spans.open(key, kind, len);
            }
            f.i = name_at + n;
            return true;
        }
        if let Some((kind, (v0, v1), n)) = match_span(raw, i, &mut self.scan) {
            let mut attributes = Map::new();
            attributes.insert(
                "value".into(),
                Value::String(decode_html_attr(&raw[v0..v1])),
            );
            let key = self.keys.id(kind, None, Some(attributes));
            f.spans.open(key, STYLED, len);
            f.i += n;
            return true;
        }
        if starts_with_at(raw, i, "</span>") {
            f.spans.close(STYLED, &mut self.items, len, f.id);
            f.i += 7;
            return true;
        }
        if let Some(end) = self.scan.greater(i + 1, raw.len()) {
            let inner = &raw[i + 1..end];
            if is_autolink(inner) {
                let link = string(inner);
                let kind = if starts_with(inner, "hm://") {
                    self.text.push(0xfffc);
                    "Embed"
                } else {
                    self.text.extend_from_slice(inner);
                    "Link"
                };
                let key = self.keys.id(kind, Some(link), None);
                self.items.push(Item {
                    key,
                    start: pos32(len),
                    end: pos32(self.text.len()),
                    frame: f.id,
                });
                f.i = end + 1;
                return true;
            }
        }
        false
    }

    /// The annotations as the JavaScript returns them: each key's ranges
    /// merged where they touch or overlap (`mergeAdjacentAnnotations`),
    /// ordered by start, then end (longest first), then type, then as the
    /// nested merges leave them ([`Ties`]).
    pub(super) fn merged(&self) -> Vec<Ann> {
        let mut by_key: Vec<Vec<u32>> = vec![Vec::new(); self.keys.protos.len()];
        for (t, item) in self.items.iter().enumerate() {
            if item.end > item.start {
                by_key[item.key as usize].push(pos32(t));
            }
        }
        let mut out: Vec<(u32, u32, u32)> = Vec::new();
        for (key, times) in by_key.iter().enumerate() {
            let mut ranges: Vec<(u32, u32)> = times
                .iter()
                .map(|&t| {
                    let item = &self.items[t as usize];
                    (item.start, item.end)
                })
                .collect();
            ranges.sort_unstable();
            let mut merged: Vec<(u32, u32)> = Vec::new();
            for (s, e) in ranges {
                match merged.last_mut() {
                    Some(last) if s <= last.1 => last.1 = last.1.max(e),
                    _ => merged.push((s, e)),
                }
            }
            out.extend(merged.into_iter().map(|(s, e)| (pos32(key), s, e)));
        }
        let protos = &self.keys.protos;
        let mut ties = Ties::new(&self.items, &by_key, &self.frame_parent);
        out.sort_by(|a, b| {
            a.1.cmp(&b.1)
                .then(b.2.cmp(&a.2))
                .then_with(|| locale_compare(protos[a.0 as usize].0, protos[b.0 as usize].0))
                .then_with(|| ties.order(a.0, b.0))
        });
        out.into_iter()
            .map(|(key, start, end)| {
                let (kind, link, attributes) = &protos[key as usize];
                Ann {
                    kind,
                    start: start as usize,
                    end: end as usize,
                    link: link.clone(),
                    attributes: attributes.clone(),
                }
            })
            .collect()
    }
}

/// The frames of one text as a tree, for lowest common ancestors.
pub(super) struct FrameTree {
    pub(super) depth: Vec<u32>,
    /// `up[j][f]`: the ancestor of `f` 2^j levels up (the root its own).
    pub(super) up: Vec<Vec<u32>>,
}

impl FrameTree {
    pub(super) fn new(parent: &[u32]) -> FrameTree {
        let mut depth = vec![0u32; parent.len()];
        for f in 1..parent.len() {
            depth[f] = depth[parent[f] as usize] + 1;
        }
        let mut up = vec![parent.to_vec()];
        while 1usize << up.len() < parent.len() {
            let last = &up[up.len() - 1];
            let next = last.iter().map(|&a| last[a as usize]).collect();
            up.push(next);
        }
        FrameTree { depth, up }
    }

    pub(super) fn lca(&self, mut a: u32, mut b: u32) -> u32 {
        if self.depth[a as usize] < self.depth[b as usize] {
            std::mem::swap(&mut a, &mut b);
        }
        let diff = self.depth[a as usize] - self.depth[b as usize];
        for (j, level) in self.up.iter().enumerate() {
            if diff >> j & 1 == 1 {
                a = level[a as usize];
            }
        }
        if a == b {
            return a;
        }
        for level in self.up.iter().rev() {
            if level[a as usize] != level[b as usize] {
                a = level[a as usize];
                b = level[b as usize];
            }
        }
        self.up[0][a as usize]
    }
}

/// The order `mergeAdjacentAnnotations`' stable sort leaves two
/// annotations of one type on one range in: their keys' order of first
/// appearance in the list the outermost call merges.
///
/// That list holds the frame's own annotations in the order pushed, and
/// each label's merged annotations, sorted, where the label ended. Keys
/// first met in different entries keep the entries' order, which is the
/// order of their first annotations as pushed anywhere. Keys first met in
/// one label come in that label's sorted order: by their first range in
/// it (start, then end, longest first), then by their order of first
/// appearance there, and so on down. So two keys compare by their first
/// ranges within each frame on the way down to the frame where their first
/// annotations part, then by which was pushed first. The annotations of a
/// key within a frame are a prefix of its annotations in push order (the
/// frame runs in one stretch and holds the first), so its first range per
/// depth on that path is a short step function.
pub(super) struct Ties<'a> {
    pub(super) items: &'a [Item],
    pub(super) by_key: &'a [Vec<u32>],
    pub(super) tree: Option<FrameTree>,
    /// Per key: (from depth, first range's start and end), depth ascending.
    pub(super) steps: std::collections::HashMap<u32, Vec<(u32, u32, u32)>>,
    pub(super) memo: std::collections::HashMap<(u32, u32), std::cmp::Ordering>,
}

impl<'a> Ties<'a> {
    pub(super) fn new(items: &'a [Item], by_key: &'a [Vec<u32>], frame_parent: &[u32]) -> Ties<'a> {
        Ties {
            items,
            by_key,
            tree: (frame_parent.len() > 1).then(|| FrameTree::new(frame_parent)),
            steps: std::collections::HashMap::new(),
            memo: std::collections::HashMap::new(),
        }
    }

    pub(super) fn order(&mut self, a: u32, b: u32) -> std::cmp::Ordering {
        let first = |k: u32| self.by_key[k as usize].first().copied().unwrap_or(NO);
        let (ja, jb) = (first(a), first(b));
        if a == b || self.tree.is_none() {
            return ja.cmp(&jb);
        }
        if let Some(&o) = self.memo.get(&(a, b)) {
            return o;
        }
        let (o, walked) = self.compare(a, b).unwrap_or((ja.cmp(&jb), 0));
        // Worth keeping when it walked far (a pair can tie on many ranges).
        if walked > 8 {
            self.memo.insert((a, b), o);
            self.memo.insert((b, a), o.reverse());
        }
        o
    }

    /// The order, and how many steps it took to find.
    pub(super) fn compare(&mut self, a: u32, b: u32) -> Option<(std::cmp::Ordering, usize)> {
        let (items, by_key) = (self.items, self.by_key);
        let ja = *by_key[a as usize].first()?;
        let jb = *by_key[b as usize].first()?;
        let parted = {
            let tree = self.tree.as_ref()?;
            let lca = tree.lca(items[ja as usize].frame, items[jb as usize].frame);
            tree.depth[lca as usize]
        };
        if parted > 0 {
            self.fill_steps(a);
            self.fill_steps(b);
            let (sa, sb) = (self.steps.get(&a)?, self.steps.get(&b)?);
            let (mut ia, mut ib) = (0, 0);
            loop {
                let (va, vb) = (sa.get(ia)?, sb.get(ib)?);
                let o = va.1.cmp(&vb.1).then(vb.2.cmp(&va.2));
                if o.is_ne() {
                    return Some((o, ia + ib));
                }
                let (na, nb) = (sa.get(ia + 1).map(|s| s.0), sb.get(ib + 1).map(|s| s.0));
                let Some(next) = na.into_iter().chain(nb).min() else {
                    break;
                };
                if next > parted {
                    break;
                }
                ia += usize::from(na == Some(next));
                ib += usize::from(nb == Some(next));
            }
            return Some((ja.cmp(&jb), ia + ib));
        }
        Some((ja.cmp(&jb), 0))
    }

    /// The first range of key `k` in each frame on the path to the frame of
    /// its first annotation, as steps by depth.
    pub(super) fn fill_steps(&mut self, k: u32) {
        if self.steps.contains_key(&k) {
            return;
        }
        let (items, by_key) = (self.items, self.by_key);
        let (Some(tree), Some(times)) = (self.tree.as_ref(), by_key.get(k as usize)) else {
            return;
        };
        let Some(&j0) = times.first() else { return };
        let home = items[j0 as usize].frame;
        // Annotation `i` is in the frames of the path down to depth `d[i]`.
        let d: Vec<u32> = times
            .iter()
            .map(|&t| tree.depth[tree.lca(items[t as usize].frame, home) as usize])
            .collect();
        let mut union: std::collections::BTreeMap<u32, u32> = std::collections::BTreeMap::new();
        let mut firsts = Vec::with_capacity(times.len());
        for &t in times {
            let item = &items[t as usize];
            insert_range(&mut union, item.start, item.end);
            firsts.push(union.first_key_value().map_or((0, 0), |(&s, &e)| (s, e)));
        }
        let mut steps: Vec<(u32, u32, u32)> = Vec::new();
        for i in (0..times.len()).rev() {
            let from = d.get(i + 1).copied().unwrap_or(0) + 1;
            if from > d[i] {
                continue;
            }
            let (s, e) = firsts[i];
            if steps.last().map(|x| (x.1, x.2)) != Some((s, e)) {
                steps.push((from, s, e));
            }
        }
        self.steps.insert(k, steps);
    }
}

/// Adds `[s, e]` to disjoint ranges that merge where they touch.
pub(super) fn insert_range(union: &mut std::collections::BTreeMap<u32, u32>, s: u32, e: u32) {
    let (mut s, mut e) = (s, e);
    if let Some((&ps, &pe)) = union.range(..=s).next_back() {
        if pe >= s {
            s = ps;
            e = e.max(pe);
            union.remove(&ps);
        }
    }
    while let Some((&qs, &qe)) = union.range(s..=e).next() {
        e = e.max(qe);
        union.remove(&qs);
    }
    union.insert(s, e);
}

/// `localeCompare` for the annotation type names (ASCII words): letters
/// first by their lower case, then lower case before upper.
pub(super) fn locale_compare(a: &str, b: &str) -> std::cmp::Ordering {
    a.to_ascii_lowercase()
        .cmp(&b.to_ascii_lowercase())
        .then_with(|| b.cmp(a))
}
