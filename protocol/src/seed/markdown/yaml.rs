//! YAML as the JavaScript `yaml` package (2.x, core schema) reads it: events from `yaml-rust2`, with scalars, anchors, aliases and their budget resolved here.

use super::*;
use yaml_rust2::parser::{Event, Parser, Tag};
use yaml_rust2::scanner::TScalarStyle;

/// The `yaml` package's `maxAliasCount`.
pub(super) const MAX_ALIAS_COUNT: u64 = 100;
/// How deep YAML collections nest before the frontmatter counts as invalid.
pub(super) const MAX_YAML_DEPTH: usize = 500;
/// How many values (scalars and collections, each alias counted as the
/// values it copies) the YAML may make before the frontmatter counts as
/// invalid: the `yaml` package shares an aliased value where this port
/// copies it, and aliases of collections holding no scalar escape the
/// alias count, so a few hundred KiB could otherwise ask for billions.
pub(super) const MAX_YAML_VALUES: u64 = 1_000_000;

#[derive(Clone, Debug)]
pub(super) enum Scalar {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Date(f64),
}

#[derive(Debug)]
pub(super) enum YNode {
    Scalar(Scalar),
    Seq(Vec<usize>),
    Map(Vec<(usize, usize)>),
    Alias(usize),
}

pub(super) struct Composer {
    pub(super) nodes: Vec<YNode>,
    pub(super) anchored: Vec<bool>,
    /// yaml-rust2 anchor id → node.
    pub(super) anchors: std::collections::HashMap<usize, usize>,
}

/// How many times a tab after a mapping's `:` is made a space and the YAML
/// read again (see [`yaml_events`]).
pub(super) const MAX_TAB_RETRIES: usize = 64;

/// The YAML's events. The `yaml` package takes a tab after a mapping's `:`
/// as separation, as YAML 1.2 does, where yaml-rust2 refuses one before
/// a plain scalar; such a tab (found where the scanner stops) is read as
/// the space it stands for.
pub(super) fn yaml_events(src: &str) -> Result<Vec<Event>, ()> {
    let mut error = match events_of(src)? {
        Ok(events) => return Ok(events),
        Err(e) => e,
    };
    let mut chars: Vec<char> = src.chars().collect();
    if !is_tab_error(&error) {
        return Err(());
    }
    if let Some(events) = tab_runs_patched(&chars) {
        return events;
    }
    for _ in 0..MAX_TAB_RETRIES {
        let mut j = error.marker().index().min(chars.len());
        let mut patched = false;
        while j > 0 && matches!(chars[j - 1], ' ' | '\t') {
            if chars[j - 1] == '\t' {
                chars[j - 1] = ' ';
                patched = true;
            }
            j -= 1;
        }
        if !patched || j == 0 || chars[j - 1] != ':' {
            return Err(());
        }
        let text: String = chars.iter().collect();
        error = match events_of(&text)? {
            Ok(events) => return Ok(events),
            Err(e) => e,
        };
        if !is_tab_error(&error) {
            return Err(());
        }
    }
    Err(())
}

pub(super) fn is_tab_error(error: &yaml_rust2::ScanError) -> bool {
    error.info() == "':' must be followed by a valid YAML whitespace"
}

/// The tab runs yaml-rust2 stops at, all made spaces at once: those after
/// a `:` that is a mapping's value indicator, tabs only, then `-`, `_` or
/// an ASCII letter or digit. Each stop made a read of the whole YAML, up to
/// [`MAX_TAB_RETRIES`] of them; the events are the same when a read with
/// every such run made spaces finds each of their `:`s a value indicator
/// (the text before each run is then read as before, so the retries stop
/// at each run in turn). `None` when that does not hold.
pub(super) fn tab_runs_patched(chars: &[char]) -> Option<Result<Vec<Event>, ()>> {
    let is_alpha = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    let mut patched = chars.to_vec();
    let mut colons = Vec::new();
    for k in 0..chars.len() {
        if chars[k] == ':' && chars.get(k + 1) == Some(&'\t') {
            let mut e = k + 1;
            while chars.get(e) == Some(&'\t') {
                e += 1;
            }
            if chars.get(e).is_some_and(|&c| is_alpha(c)) {
                colons.push(k);
                patched[k + 1..e].fill(' ');
            }
        }
    }
    let text: String = patched.iter().collect();
    let mut scanner = yaml_rust2::scanner::Scanner::new(text.chars());
    let values: std::collections::HashSet<usize> = scanner
        .by_ref()
        .filter(|token| matches!(token.1, yaml_rust2::scanner::TokenType::Value))
        .map(|token| token.0.index())
        .collect();
    if scanner.get_error().is_some() || !colons.iter().all(|k| values.contains(k)) {
        return None;
    }
    if colons.len() > MAX_TAB_RETRIES {
        return Some(Err(()));
    }
    match events_of(&text) {
        Ok(Ok(events)) => Some(Ok(events)),
        Ok(Err(_)) => None,
        Err(()) => Some(Err(())),
    }
}

/// One read of the YAML by yaml-rust2: its events, or where it stopped;
/// `Err` when collections nest past [`MAX_YAML_DEPTH`] (the composer
/// refuses those, and yaml-rust2 slows with nesting, so reading on is
/// waste).
pub(super) fn events_of(text: &str) -> Result<Result<Vec<Event>, yaml_rust2::ScanError>, ()> {
    let mut parser = Parser::new_from_str(text);
    let mut events = Vec::new();
    let mut open = 0usize;
    let mut offsets = CharOffsets::default();
    loop {
        match parser.next_token() {
            Ok((Event::StreamEnd, _)) => return Ok(Ok(events)),
            Ok((Event::Scalar(value, style, anchor, tag), mark)) => {
                let value = empty_block_scalar_at_end(text, &mut offsets, mark.index(), &style)
                    .unwrap_or(value);
                events.push(Event::Scalar(value, style, anchor, tag));
            }
            Ok((event, _)) => {
                match event {
                    Event::SequenceStart(..) | Event::MappingStart(..) => {
                        open += 1;
                        if open > MAX_YAML_DEPTH {
                            return Err(());
                        }
                    }
                    Event::SequenceEnd | Event::MappingEnd => open = open.saturating_sub(1),
                    _ => {}
                }
                events.push(event);
            }
            Err(e) => return Ok(Err(e)),
        }
    }
}

/// A block scalar with no content that runs to the end of the YAML:
/// yaml-rust2 reads it as one line break whatever its chomping, where the
/// `yaml` package reads `""`, or with `+` (keep) the line breaks after
/// the header (one at least when anything follows it). `at` is the scalar's mark (a character index), which
/// for such a scalar is its `|` or `>` indicator.
pub(super) fn empty_block_scalar_at_end(
    src: &str,
    offsets: &mut CharOffsets,
    at: usize,
    style: &TScalarStyle,
) -> Option<String> {
    if !matches!(style, TScalarStyle::Literal | TScalarStyle::Folded) {
        return None;
    }
    let offset = offsets.byte_offset(src, at)?;
    let indicator = src[offset..].chars().next()?;
    if indicator != '|' && indicator != '>' {
        return None;
    }
    let after = &src[offset + 1..];
    let (header, body) = after.split_once('\n').unwrap_or((after, ""));
    if !body.chars().all(|c| matches!(c, ' ' | '\t' | '\n' | '\r')) {
        return None;
    }
    let keep = header
        .chars()
        .take_while(|c| matches!(c, '+' | '-' | '1'..='9'))
        .any(|c| c == '+');
    Some(if keep {
        let breaks = body.matches('\n').count();
        "\n".repeat(if breaks == 0 && !body.is_empty() {
            1
        } else {
            breaks
        })
    } else {
        String::new()
    })
}

/// Byte offsets of character indices in one text, found walking on from the
/// last one asked for (marks come in order, so all of them cost one walk).
#[derive(Default)]
pub(super) struct CharOffsets {
    pub(super) chars: usize,
    pub(super) bytes: usize,
}

impl CharOffsets {
    pub(super) fn byte_offset(&mut self, src: &str, at: usize) -> Option<usize> {
        if at < self.chars {
            *self = CharOffsets::default();
        }
        let (k, _) = src[self.bytes..].char_indices().nth(at - self.chars)?;
        self.bytes += k;
        self.chars = at;
        Some(self.bytes)
    }
}

/// Whether the `yaml` package finds more than one document in `src`: it
/// counts a `...` end marker with no document open as an empty document,
/// where yaml-rust2 gives no events for it.
pub(super) fn more_than_one_document(src: &str) -> bool {
    let mut documents = 0;
    let mut open = false;
    for line in src.split('\n') {
        let end_marker = line
            .strip_prefix("...")
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r']));
        if end_marker {
            if !open {
                documents += 1;
            }
            open = false;
        } else {
            let t = line.trim_start_matches([' ', '\t', '\r']);
            if !open && !t.is_empty() && !t.starts_with('#') {
                documents += 1;
                open = true;
            }
        }
        if documents > 1 {
            return true;
        }
    }
    false
}

/// Tabs the `yaml` package refuses as indentation where yaml-rust2 takes
/// them: a line starting with a tab, or with spaces then a tab before a
/// block mapping key or sequence entry (comment and blank lines aside).
/// An approximation of its rule, which depends on the node the line is in.
pub(super) fn tab_indentation(src: &str) -> bool {
    src.split('\n').any(|line| {
        let content = line.trim_start_matches([' ', '\t']);
        let lead = &line[..line.len() - content.len()];
        if !lead.contains('\t') || content.trim().is_empty() || content.starts_with('#') {
            return false;
        }
        if line.starts_with('\t') {
            return true;
        }
        let entry = |rest: &str| rest.is_empty() || rest.starts_with([' ', '\t', '\r']);
        content.strip_prefix('-').is_some_and(entry)
            || content.strip_prefix('?').is_some_and(entry)
            || content
                .find(':')
                .is_some_and(|colon| entry(&content[colon + 1..]))
    })
}

/// A character the text does not hold, to stand in for lone carriage
/// returns.
pub(super) fn unused_char(src: &str) -> Option<char> {
    let mut used = vec![false; 0x1900];
    for c in src.chars() {
        if let Some(k) = (c as usize).checked_sub(0xe000).filter(|&k| k < used.len()) {
            used[k] = true;
        }
    }
    ('\u{e000}'..='\u{f8ff}').find(|&c| !used[c as usize - 0xe000])
}

/// The `yaml` package's `parse(src)`, as a JavaScript value; `Err` where it
/// throws.
///
/// A carriage return not followed by a line feed is no line break to the
/// `yaml` package but text (in scalars and comments alike), where
/// yaml-rust2 breaks the line: such returns are read as a private-use
/// character and put back in the values.
pub(super) fn yaml_to_js(src: &str) -> Result<Js, ()> {
    if more_than_one_document(src) || tab_indentation(src) {
        return Err(());
    }
    let lone_cr = src
        .char_indices()
        .any(|(k, c)| c == '\r' && !src[k + 1..].starts_with('\n'));
    let stand_in = if lone_cr { unused_char(src) } else { None };
    let replaced;
    let src = match stand_in {
        Some(x) => {
            let mut out = String::with_capacity(src.len());
            let mut chars = src.chars().peekable();
            while let Some(c) = chars.next() {
                if c == '\r' && chars.peek() != Some(&'\n') {
                    out.push(x);
                } else {
                    out.push(c);
                }
            }
            replaced = out;
            replaced.as_str()
        }
        None => src,
    };
    let mut events = yaml_events(src)?;
    if let Some(x) = stand_in {
        for event in &mut events {
            if let Event::Scalar(value, ..) = event {
                if value.contains(x) {
                    *value = value.replace(x, "\r");
                }
            }
        }
    }
    let mut c = Composer {
        nodes: Vec::new(),
        anchored: Vec::new(),
        anchors: std::collections::HashMap::new(),
    };
    // Open collections: the node, for a map the key waiting for its value,
    // and the scalar keys it has (`uniqueKeys` compares them with `===`).
    let mut open: Vec<(usize, Option<usize>, ScalarKeys)> = Vec::new();
    let mut root = None;
    let mut documents = 0;
    for event in events {
        let node = match event {
            Event::StreamEnd => break,
            Event::DocumentStart => {
                documents += 1;
                if documents > 1 {
                    return Err(());
                }
                continue;
            }
            Event::Nothing | Event::StreamStart | Event::DocumentEnd => continue,
            Event::Alias(id) => {
                let target = *c.anchors.get(&id).ok_or(())?;
                c.push(YNode::Alias(target), 0)
            }
            Event::Scalar(value, style, anchor, tag) => {
                let scalar = resolve_scalar(value, style, tag.as_ref())?;
                c.push(YNode::Scalar(scalar), anchor)
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                let node = if matches!(event, Event::SequenceStart(..)) {
                    YNode::Seq(Vec::new())
                } else {
                    YNode::Map(Vec::new())
                };
                let n = c.push(node, anchor);
                open.push((n, None, ScalarKeys::default()));
                if open.len() > MAX_YAML_DEPTH {
                    return Err(());
                }
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => match open.pop() {
                Some((n, ..)) => n,
                None => return Err(()),
            },
        };
        match open.last_mut() {
            None => root = Some(node),
            Some((parent, pending, keys)) => {
                let parent = *parent;
                match pending.take() {
                    Some(key) => {
                        if let YNode::Map(pairs) = &mut c.nodes[parent] {
                            pairs.push((key, node));
                        }
                        if let YNode::Scalar(k) = &c.nodes[key] {
                            keys.insert(k);
                        }
                    }
                    None if matches!(c.nodes[parent], YNode::Map(_)) => {
                        if matches!(&c.nodes[node], YNode::Scalar(k) if keys.has(k)) {
                            return Err(()); // "Map keys must be unique"
                        }
                        *pending = Some(node);
                    }
                    None => {
                        if let YNode::Seq(items) = &mut c.nodes[parent] {
                            items.push(node);
                        }
                    }
                }
            }
        }
    }
    let Some(root) = root else {
        return Ok(Js::Null);
    };
    let mut conv = ToJs {
        c: &c,
        data: std::collections::HashMap::new(),
        made: 0,
    };
    conv.convert(root, 0).map(|(value, ..)| value)
}

impl Composer {
    pub(super) fn push(&mut self, node: YNode, anchor: usize) -> usize {
        self.nodes.push(node);
        self.anchored.push(anchor != 0);
        let n = self.nodes.len() - 1;
        if anchor != 0 {
            self.anchors.insert(anchor, n);
        }
        n
    }
}

/// The scalar keys of one map, as `===` tells them apart (`NaN` equals
/// nothing, `-0` equals `0`).
#[derive(Default)]
pub(super) struct ScalarKeys {
    pub(super) seen: std::collections::HashSet<ScalarKey>,
}

#[derive(PartialEq, Eq, Hash)]
pub(super) enum ScalarKey {
    Null,
    Bool(bool),
    Num(u64),
    Str(String),
}

impl ScalarKeys {
    pub(super) fn key(k: &Scalar) -> Option<ScalarKey> {
        match k {
            Scalar::Null => Some(ScalarKey::Null),
            Scalar::Bool(b) => Some(ScalarKey::Bool(*b)),
            Scalar::Num(x) if x.is_nan() => None,
            Scalar::Num(x) => Some(ScalarKey::Num(if *x == 0.0 { 0 } else { x.to_bits() })),
            Scalar::Str(s) => Some(ScalarKey::Str(s.clone())),
            Scalar::Date(_) => None,
        }
    }

    pub(super) fn insert(&mut self, k: &Scalar) {
        if let Some(key) = Self::key(k) {
            self.seen.insert(key);
        }
    }

    pub(super) fn has(&self, k: &Scalar) -> bool {
        Self::key(k).is_some_and(|key| self.seen.contains(&key))
    }
}

pub(super) struct AnchorData {
    pub(super) count: u64,
    pub(super) alias_count: u64,
    /// Whether `alias_count` was worked out (the package works it out
    /// again while it is 0, always to 0 again: a value with no scalar
    /// anywhere under it stays so).
    pub(super) counted: bool,
    pub(super) res: Option<Js>,
    /// The values `res` holds, and how deep they nest.
    pub(super) size: u64,
    pub(super) height: usize,
}

pub(super) struct ToJs<'c> {
    pub(super) c: &'c Composer,
    pub(super) data: std::collections::HashMap<usize, AnchorData>,
    /// Values made so far (see [`MAX_YAML_VALUES`]).
    pub(super) made: u64,
}

/// A value made, with how many values it holds (itself included) and how
/// deep they nest (a scalar is 1).
pub(super) type Made = (Js, u64, usize);

impl ToJs<'_> {
    /// The node's value; `Err` where the package throws, and where values
    /// nest deeper than [`MAX_YAML_DEPTH`] (counting through aliases) or
    /// outnumber [`MAX_YAML_VALUES`].
    pub(super) fn convert(&mut self, n: usize, depth: usize) -> Result<Made, ()> {
        if depth > MAX_YAML_DEPTH {
            return Err(());
        }
        if let YNode::Alias(target) = self.c.nodes[n] {
            let alias_count = if self.data.get(&target).is_some_and(|d| !d.counted) {
                Some(self.alias_count(target))
            } else {
                None
            };
            let data = self.data.get_mut(&target).ok_or(())?;
            if data.res.is_none() {
                return Err(());
            }
            data.count += 1;
            if let Some(a) = alias_count {
                data.alias_count = a;
                data.counted = true;
            }
            if data.count.saturating_mul(data.alias_count) > MAX_ALIAS_COUNT {
                return Err(()); // "Excessive alias count …"
            }
            self.made = self.made.saturating_add(data.size);
            if self.made > MAX_YAML_VALUES {
                return Err(());
            }
            let res = data.res.clone().ok_or(())?;
            return Ok((res, data.size, data.height));
        }
        self.made += 1;
        if self.made > MAX_YAML_VALUES {
            return Err(());
        }
        if self.c.anchored[n] {
            self.data.insert(
                n,
                AnchorData {
                    count: 1,
                    alias_count: 0,
                    counted: false,
                    res: None,
                    size: 0,
                    height: 0,
                },
            );
        }
        let mut size = 1u64;
        let mut below = 0usize;
        let value = match &self.c.nodes[n] {
            YNode::Scalar(s) => match s {
                Scalar::Null => Js::Null,
                Scalar::Bool(b) => Js::Bool(*b),
                Scalar::Num(x) => Js::Num(*x),
                Scalar::Str(s) => Js::Str(s.clone()),
                Scalar::Date(t) => Js::Date(*t),
            },
            YNode::Seq(items) => {
                let mut out = Vec::with_capacity(items.len());
                for &item in items {
                    let (value, n, h) = self.convert(item, depth + 1)?;
                    size += n;
                    below = below.max(h);
                    out.push(value);
                }
                Js::Arr(out)
            }
            YNode::Map(pairs) => {
                let mut out: Vec<(String, Js)> = Vec::new();
                let mut index: std::collections::HashMap<String, usize> =
                    std::collections::HashMap::new();
                for &(k, v) in pairs {
                    let (key, nk, hk) = self.convert(k, depth + 1)?;
                    let key = self.string_key(k, &key);
                    let (value, nv, hv) = self.convert(v, depth + 1)?;
                    size += nk + nv;
                    below = below.max(hk).max(hv);
                    match index.get(&key) {
                        Some(&slot) => out[slot].1 = value,
                        None => {
                            index.insert(key.clone(), out.len());
                            out.push((key, value));
                        }
                    }
                }
                Js::Obj(js_key_order(out))
            }
            YNode::Alias(_) => return Err(()),
        };
        let height = below + 1;
        if height > MAX_YAML_DEPTH + 1 {
            return Err(());
        }
        if let Some(d) = self.data.get_mut(&n) {
            d.res = Some(value.clone());
            d.size = size;
            d.height = height;
        }
        Ok((value, size, height))
    }

    /// `getAliasCount`.
    pub(super) fn alias_count(&self, n: usize) -> u64 {
        match &self.c.nodes[n] {
            YNode::Alias(target) => self
                .data
                .get(target)
                .map_or(0, |d| d.count.saturating_mul(d.alias_count)),
            YNode::Seq(items) => items
                .iter()
                .map(|&i| self.alias_count(i))
                .max()
                .unwrap_or(0),
            YNode::Map(pairs) => pairs
                .iter()
                .map(|&(k, v)| self.alias_count(k).max(self.alias_count(v)))
                .max()
                .unwrap_or(0),
            YNode::Scalar(_) => 1,
        }
    }

    /// `stringifyKey`: a key as a JavaScript property name.
    pub(super) fn string_key(&self, n: usize, key: &Js) -> String {
        match key {
            Js::Null => String::new(),
            Js::Arr(_) | Js::Obj(_) => flow_string(self.c, n),
            other => other.to_js_string(),
        }
    }
}

/// A collection key written back in flow style, as the `yaml` package
/// names such keys (plain scalars only; close enough for keys nobody
/// writes in frontmatter).
pub(super) fn flow_string(c: &Composer, n: usize) -> String {
    match &c.nodes[n] {
        YNode::Scalar(Scalar::Null) => "null".into(),
        YNode::Scalar(Scalar::Bool(b)) => b.to_string(),
        YNode::Scalar(Scalar::Num(x)) => js_number_to_string(*x),
        YNode::Scalar(Scalar::Str(s)) => s.clone(),
        YNode::Scalar(Scalar::Date(t)) => iso_string(*t).unwrap_or_default(),
        YNode::Seq(items) if items.is_empty() => "[]".into(),
        YNode::Seq(items) => format!(
            "[ {} ]",
            items
                .iter()
                .map(|&i| flow_string(c, i))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        YNode::Map(pairs) if pairs.is_empty() => "{}".into(),
        YNode::Map(pairs) => format!(
            "{{ {} }}",
            pairs
                .iter()
                .map(|&(k, v)| format!("{}: {}", flow_string(c, k), flow_string(c, v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        YNode::Alias(target) => flow_string(c, *target),
    }
}

/// A scalar by the YAML 1.2 core schema as the `yaml` package applies it:
/// plain scalars by their form, quoted and block scalars as strings, an
/// explicit `!!null`/`!!bool`/`!!int`/`!!float` tag when the text fits it.
/// `Err` where the package fails to resolve a tag (a `!!timestamp` that is
/// not a date).
pub(super) fn resolve_scalar(
    value: String,
    style: TScalarStyle,
    tag: Option<&Tag>,
) -> Result<Scalar, ()> {
    Ok(match tag {
        Some(tag) => {
            let name = format!("{}{}", tag.handle, tag.suffix);
            let resolved = match name.strip_prefix("tag:yaml.org,2002:") {
                Some("null") => resolve_null(&value),
                Some("bool") => resolve_bool(&value),
                Some("int") => resolve_int(&value),
                Some("float") => resolve_float(&value),
                Some("timestamp") => Some(Scalar::Date(resolve_timestamp(&value).ok_or(())?)),
                _ => None,
            };
            resolved.unwrap_or(Scalar::Str(value))
        }
        None if matches!(style, TScalarStyle::Plain) => resolve_null(&value)
            .or_else(|| resolve_bool(&value))
            .or_else(|| resolve_int(&value))
            .or_else(|| resolve_float(&value))
            .unwrap_or(Scalar::Str(value)),
        None => Scalar::Str(value),
    })
}

/// The YAML 1.1 timestamp the package resolves an explicit `!!timestamp`
/// with: `yyyy-m-d`, optionally a time (`t`, `T` or blanks, then
/// `h:m:s(.fraction)`) and a zone (`Z`, `±h`, `±hh:mm`); the time value
/// `Date.UTC` gives, in ms.
pub(super) fn resolve_timestamp(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    let mut p = 0;
    let digits = |p: &mut usize, min: usize, max: usize| -> Option<f64> {
        let start = *p;
        while *p < b.len() && *p - start < max && b[*p].is_ascii_digit() {
            *p += 1;
        }
        if *p - start < min {
            return None;
        }
        s[start..*p].parse::<f64>().ok()
    };
    let year = digits(&mut p, 4, 4)?;
    (b.get(p) == Some(&b'-')).then_some(())?;
    p += 1;
    let month = digits(&mut p, 1, 2)?;
    (b.get(p) == Some(&b'-')).then_some(())?;
    p += 1;
    let day = digits(&mut p, 1, 2)?;
    let (mut hour, mut minute, mut second, mut millis, mut offset_min) = (0.0, 0.0, 0.0, 0.0, 0.0);
    if p < b.len() {
        match b[p] {
            b't' | b'T' => p += 1,
            b' ' | b'\t' => {
                while matches!(b.get(p), Some(b' ' | b'\t')) {
                    p += 1;
                }
            }
            _ => return None,
        }
        hour = digits(&mut p, 1, 2)?;
        (b.get(p) == Some(&b':')).then_some(())?;
        p += 1;
        minute = digits(&mut p, 1, 2)?;
        (b.get(p) == Some(&b':')).then_some(())?;
        p += 1;
        second = digits(&mut p, 1, 2)?;
        if b.get(p) == Some(&b'.') {
            let start = p + 1;
            p = start;
            while p < b.len() && b[p].is_ascii_digit() {
                p += 1;
            }
            if p == start {
                return None;
            }
            // `Number((".123456" + "00").substr(1, 3))`
            let frac = format!("{}00", &s[start..p]);
            millis = frac[..3].parse::<f64>().ok()?;
        }
        let mut zone = p;
        while matches!(b.get(zone), Some(b' ' | b'\t')) {
            zone += 1;
        }
        if matches!(b.get(zone), Some(b'Z' | b'+' | b'-')) {
            p = zone;
            if b[p] == b'Z' {
                p += 1;
            } else if matches!(b[p], b'+' | b'-') {
                let negative = b[p] == b'-';
                p += 1;
                // `[012]?[0-9]`
                let start = p;
                if matches!(b.get(p), Some(b'0'..=b'2'))
                    && b.get(p + 1).is_some_and(u8::is_ascii_digit)
                {
                    p += 2;
                } else if b.get(p).is_some_and(u8::is_ascii_digit) {
                    p += 1;
                } else {
                    return None;
                }
                let mut total: f64 = s[start..p].parse().ok()?;
                if b.get(p) == Some(&b':') {
                    let m0 = p + 1;
                    if b.len() >= m0 + 2 && b[m0..m0 + 2].iter().all(u8::is_ascii_digit) {
                        total = total * 60.0 + s[m0..m0 + 2].parse::<f64>().ok()?;
                        p = m0 + 2;
                    } else {
                        return None;
                    }
                }
                if total.abs() < 30.0 {
                    total *= 60.0;
                }
                offset_min = if negative { -total } else { total };
            } else {
                return None;
            }
        }
        if p != b.len() {
            return None;
        }
    } else if p != b.len() {
        return None;
    }
    let t = date_utc(year, month - 1.0, day, hour, minute, second, millis);
    Some(t - 60000.0 * offset_min)
}

/// `Date.UTC(year, month, day, h, min, s, ms)` (two-digit years are 19xx;
/// months past 11 carry into the year).
#[allow(clippy::too_many_arguments)]
pub(super) fn date_utc(year: f64, month: f64, day: f64, h: f64, min: f64, s: f64, ms: f64) -> f64 {
    let year = if (0.0..=99.0).contains(&year) {
        1900.0 + year
    } else {
        year
    };
    let ym = year + (month / 12.0).floor();
    let mn = month.rem_euclid(12.0);
    let days = days_from_civil(ym as i64, mn as i64 + 1, 1) as f64 + day - 1.0;
    let t = days * 86_400_000.0 + h * 3_600_000.0 + min * 60_000.0 + s * 1000.0 + ms;
    if t.abs() > 8.64e15 {
        f64::NAN
    } else {
        t
    }
}

/// Days from 1970-01-01 to the given proleptic Gregorian date.
pub(super) fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date (year, month, day) of a day count from 1970-01-01.
pub(super) fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The parts of a time value: (year, month, day, weekday, h, min, s, ms).
pub(super) fn date_parts(t: f64) -> (i64, i64, i64, i64, i64, i64, i64, i64) {
    let t = t as i64;
    let days = t.div_euclid(86_400_000);
    let ms_of_day = t.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    let weekday = (days + 4).rem_euclid(7);
    (
        y,
        m,
        d,
        weekday,
        ms_of_day / 3_600_000,
        ms_of_day / 60_000 % 60,
        ms_of_day / 1000 % 60,
        ms_of_day % 1000,
    )
}

/// `Date.prototype.toISOString` (`None` for an invalid date, where it
/// throws).
pub(super) fn iso_string(t: f64) -> Option<String> {
    if !t.is_finite() {
        return None;
    }
    let (y, m, d, _, h, min, s, ms) = date_parts(t);
    let year = if (0..=9999).contains(&y) {
        format!("{y:04}")
    } else if y < 0 {
        format!("-{:06}", -y)
    } else {
        format!("+{y:06}")
    };
    Some(format!(
        "{year}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}.{ms:03}Z"
    ))
}

/// `String(date)`, as a runtime in UTC prints it.
pub(super) fn date_to_string(t: f64) -> String {
    if !t.is_finite() {
        return "Invalid Date".into();
    }
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (y, m, d, wd, h, min, s, _) = date_parts(t);
    let year = if y < 0 {
        format!("-{:06}", -y)
    } else {
        format!("{y:04}")
    };
    format!(
        "{} {} {d:02} {year} {h:02}:{min:02}:{s:02} GMT+0000 (Coordinated Universal Time)",
        DAYS[wd as usize % 7],
        MONTHS[(m as usize + 11) % 12],
    )
}

pub(super) fn resolve_null(s: &str) -> Option<Scalar> {
    matches!(s, "" | "~" | "null" | "Null" | "NULL").then_some(Scalar::Null)
}

pub(super) fn resolve_bool(s: &str) -> Option<Scalar> {
    match s {
        "true" | "True" | "TRUE" => Some(Scalar::Bool(true)),
        "false" | "False" | "FALSE" => Some(Scalar::Bool(false)),
        _ => None,
    }
}

pub(super) fn all_digits(s: &str, radix: u32) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_digit(radix))
}

/// `parseInt(digits, radix)` for a non-empty run of digits.
pub(super) fn parse_int(digits: &str, radix: u32) -> f64 {
    if radix == 10 {
        return digits.parse::<f64>().unwrap_or(f64::NAN);
    }
    match u128::from_str_radix(digits, radix) {
        Ok(n) => n as f64,
        Err(_) => digits
            .chars()
            .filter_map(|c| c.to_digit(radix))
            .fold(0.0, |acc, d| acc * f64::from(radix) + f64::from(d)),
    }
}

pub(super) fn resolve_int(s: &str) -> Option<Scalar> {
    if let Some(oct) = s.strip_prefix("0o") {
        if all_digits(oct, 8) {
            return Some(Scalar::Num(parse_int(oct, 8)));
        }
    }
    let (negative, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if all_digits(digits, 10) {
        let x = parse_int(digits, 10);
        return Some(Scalar::Num(if negative { -x } else { x }));
    }
    if let Some(hex) = s.strip_prefix("0x") {
        if all_digits(hex, 16) {
            return Some(Scalar::Num(parse_int(hex, 16)));
        }
    }
    None
}

pub(super) fn resolve_float(s: &str) -> Option<Scalar> {
    match s {
        ".nan" | ".NaN" | ".NAN" => return Some(Scalar::Num(f64::NAN)),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Some(Scalar::Num(f64::INFINITY))
        }
        "-.inf" | "-.Inf" | "-.INF" => return Some(Scalar::Num(f64::NEG_INFINITY)),
        _ => {}
    }
    let body = s.strip_prefix(['-', '+']).unwrap_or(s);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(e) => (&body[..e], Some(&body[e + 1..])),
        None => (body, None),
    };
    let mantissa_ok = match mantissa.split_once('.') {
        Some((int, frac)) => {
            (int.is_empty() && all_digits(frac, 10))
                || (all_digits(int, 10) && (frac.is_empty() || all_digits(frac, 10)))
        }
        // Without a dot only the exponent form is a float.
        None => exponent.is_some() && all_digits(mantissa, 10),
    };
    let exponent_ok =
        exponent.is_none_or(|e| all_digits(e.strip_prefix(['-', '+']).unwrap_or(e), 10));
    if !(mantissa_ok && exponent_ok) {
        return None;
    }
    s.parse::<f64>().ok().map(Scalar::Num)
}
