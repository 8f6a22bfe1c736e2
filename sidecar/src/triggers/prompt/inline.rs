//! Markdown to blocks: the inline scanner (escapes, links, autolinks,
//! bold, italic, code), its offsets in UTF-16 units.

use super::*;

// ─── Markdown → blocks: inline formatting ───────────────────────────────────

pub(super) const BACKSLASH: u16 = b'\\' as u16;
pub(super) const BANG: u16 = b'!' as u16;
pub(super) const LESS: u16 = b'<' as u16;
pub(super) const GREATER: u16 = b'>' as u16;
pub(super) const OPEN_BRACKET: u16 = b'[' as u16;
pub(super) const CLOSE_BRACKET: u16 = b']' as u16;
pub(super) const OPEN_PAREN: u16 = b'(' as u16;
pub(super) const CLOSE_PAREN: u16 = b')' as u16;
pub(super) const STAR: u16 = b'*' as u16;
pub(super) const BACKTICK: u16 = b'`' as u16;
pub(super) const COLON: u16 = b':' as u16;

/// Where the inline delimiters of one text are, found in one pass so that
/// every lookup the scanner makes is a binary search. The scanner works on
/// nested spans of the text; a span sees the same delimiters as the whole
/// text, except that its end hides what lies beyond (see the lookups).
#[derive(Default)]
pub(super) struct Delimiters {
    pub(super) close_parens: Vec<usize>,
    pub(super) greaters: Vec<usize>,
    pub(super) backticks: Vec<usize>,
    /// `**` starts.
    pub(super) double_stars: Vec<usize>,
    /// `*` with no `*` on either side.
    pub(super) lone_stars: Vec<usize>,
    /// Each `[` and the `]` that balances it, by bracket counting.
    pub(super) brackets: Vec<(usize, Option<usize>)>,
}

impl Delimiters {
    pub(super) fn new(src: &[u16]) -> Self {
        let mut found = Delimiters::default();
        let mut open = Vec::new();
        for (i, &unit) in src.iter().enumerate() {
            let before = i.checked_sub(1).and_then(|j| src.get(j)).copied();
            let after = src.get(i + 1).copied();
            match unit {
                CLOSE_PAREN => found.close_parens.push(i),
                GREATER => found.greaters.push(i),
                BACKTICK => found.backticks.push(i),
                STAR => {
                    if after == Some(STAR) {
                        found.double_stars.push(i);
                    } else if before != Some(STAR) {
                        found.lone_stars.push(i);
                    }
                }
                OPEN_BRACKET => {
                    open.push(found.brackets.len());
                    found.brackets.push((i, None));
                }
                CLOSE_BRACKET => {
                    if let Some(entry) = open.pop().and_then(|k| found.brackets.get_mut(k)) {
                        entry.1 = Some(i);
                    }
                }
                _ => {}
            }
        }
        found
    }

    /// `findClosingBracket` from the `[` at `open`, within a span ending at `end`.
    pub(super) fn closing_bracket(&self, open: usize, end: usize) -> Option<usize> {
        let k = self
            .brackets
            .binary_search_by_key(&open, |&(at, _)| at)
            .ok()?;
        self.brackets
            .get(k)
            .and_then(|&(_, close)| close)
            .filter(|&close| close < end)
    }

    /// `indexOf('**', from)` within a span ending at `end`.
    pub(super) fn double_star(&self, from: usize, end: usize) -> Option<usize> {
        first_in(&self.double_stars, from, end.saturating_sub(1))
    }

    /// `findSingleDelimiter('*', from)` within a span ending at `end`: its
    /// last unit has nothing to its right inside the span.
    pub(super) fn lone_star(&self, src: &[u16], from: usize, end: usize) -> Option<usize> {
        let last = end.checked_sub(1)?;
        first_in(&self.lone_stars, from, last).or_else(|| {
            let lone = last >= from
                && src.get(last) == Some(&STAR)
                && last.checked_sub(1).and_then(|j| src.get(j)) != Some(&STAR);
            lone.then_some(last)
        })
    }
}

/// The first of the sorted `positions` in `from..until`.
pub(super) fn first_in(positions: &[usize], from: usize, until: usize) -> Option<usize> {
    let at = positions.partition_point(|&p| p < from);
    positions.get(at).copied().filter(|&p| p < until)
}

/// What the scanner makes of the text at one position.
pub(super) enum Piece {
    /// Copied as is (an escaped unit, an inline image's alt text, or one unit).
    Literal(Range<usize>),
    /// `<scheme:…>`: the range inside the angle brackets.
    Autolink(Range<usize>),
    /// `` `code` ``: the range inside the backticks.
    Code(Range<usize>),
    /// Bold, italic or a link: its inner range is scanned in turn.
    Nested {
        kind: &'static str,
        inner: Range<usize>,
        link: Option<String>,
    },
}

/// A span of the source being scanned, and the annotation to close over it.
pub(super) struct Span {
    pub(super) pos: usize,
    pub(super) end: usize,
    pub(super) close: Option<Pending>,
}

/// An annotation whose end is not known yet.
pub(super) struct Pending {
    pub(super) kind: &'static str,
    pub(super) start: usize,
    pub(super) link: Option<String>,
}

/// The reference's `parseInlineFormatting`: the plain text and its
/// annotations (offsets in UTF-16 units; nested annotations come before the
/// one enclosing them). Nesting is followed with an explicit stack, so deeply
/// nested links cost no recursion.
pub(super) fn parse_inline(raw: &str) -> (String, Vec<Annotation>) {
    let src: Vec<u16> = raw.encode_utf16().collect();
    let delimiters = Delimiters::new(&src);
    let mut text: Vec<u16> = Vec::with_capacity(src.len());
    let mut annotations = Vec::new();
    let mut spans = vec![Span {
        pos: 0,
        end: src.len(),
        close: None,
    }];
    while let Some(span) = spans.last_mut() {
        if span.pos >= span.end {
            if let Some(Pending { kind, start, link }) = spans.pop().and_then(|span| span.close) {
                annotations.push(Annotation {
                    kind,
                    start,
                    end: text.len(),
                    link,
                });
            }
            continue;
        }
        let (piece, resume) = scan(&src, &delimiters, span.pos, span.end);
        span.pos = resume;
        let units = |range: Range<usize>| src.get(range).unwrap_or_default();
        match piece {
            Piece::Literal(range) => text.extend_from_slice(units(range)),
            Piece::Code(range) => {
                let start = text.len();
                text.extend_from_slice(units(range));
                annotations.push(Annotation {
                    kind: "Code",
                    start,
                    end: text.len(),
                    link: None,
                });
            }
            Piece::Autolink(range) => {
                let inner = units(range);
                let link = String::from_utf16_lossy(inner);
                let start = text.len();
                let kind = if link.starts_with("hm://") {
                    text.extend(OBJECT_REPLACEMENT.encode_utf16(&mut [0; 2]).iter());
                    "Embed"
                } else {
                    text.extend_from_slice(inner);
                    "Link"
                };
                annotations.push(Annotation {
                    kind,
                    start,
                    end: text.len(),
                    link: Some(link),
                });
            }
            Piece::Nested { kind, inner, link } => spans.push(Span {
                pos: inner.start,
                end: inner.end,
                close: Some(Pending {
                    kind,
                    start: text.len(),
                    link,
                }),
            }),
        }
    }
    (String::from_utf16_lossy(&text), annotations)
}

/// The first rule that applies at `i` in a span ending at `end`, and where
/// scanning resumes after it.
pub(super) fn scan(src: &[u16], delimiters: &Delimiters, i: usize, end: usize) -> (Piece, usize) {
    let at = |k: usize| if k < end { src.get(k).copied() } else { None };
    let next = at(i + 1);
    match at(i) {
        Some(BACKSLASH) if next.is_some() => return (Piece::Literal(i + 1..i + 2), i + 2),
        Some(BANG) if next == Some(OPEN_BRACKET) => {
            if let Some(close) = delimiters
                .closing_bracket(i + 1, end)
                .filter(|&c| at(c + 1) == Some(OPEN_PAREN))
            {
                if let Some(paren) = first_in(&delimiters.close_parens, close + 2, end) {
                    return (Piece::Literal(i + 2..close), paren + 1);
                }
            }
        }
        Some(LESS) => {
            if let Some(greater) = first_in(&delimiters.greaters, i + 1, end) {
                if is_autolink(src.get(i + 1..greater).unwrap_or_default()) {
                    return (Piece::Autolink(i + 1..greater), greater + 1);
                }
            }
        }
        Some(OPEN_BRACKET) => {
            if let Some(close) = delimiters
                .closing_bracket(i, end)
                .filter(|&c| at(c + 1) == Some(OPEN_PAREN))
            {
                if let Some(paren) = first_in(&delimiters.close_parens, close + 2, end) {
                    let link =
                        String::from_utf16_lossy(src.get(close + 2..paren).unwrap_or_default());
                    let piece = Piece::Nested {
                        kind: "Link",
                        inner: i + 1..close,
                        link: Some(link),
                    };
                    return (piece, paren + 1);
                }
            }
        }
        Some(STAR) if next == Some(STAR) => {
            if let Some(close) = delimiters.double_star(i + 2, end) {
                return (
                    Piece::Nested {
                        kind: "Bold",
                        inner: i + 2..close,
                        link: None,
                    },
                    close + 2,
                );
            }
        }
        Some(STAR) => {
            if let Some(close) = delimiters.lone_star(src, i + 1, end) {
                return (
                    Piece::Nested {
                        kind: "Italic",
                        inner: i + 1..close,
                        link: None,
                    },
                    close + 1,
                );
            }
        }
        Some(BACKTICK) => {
            if let Some(close) = first_in(&delimiters.backticks, i + 1, end) {
                return (Piece::Code(i + 1..close), close + 1);
            }
        }
        _ => {}
    }
    (Piece::Literal(i..i + 1), i + 1)
}

/// `/^[a-zA-Z][a-zA-Z0-9+.-]*:\S*$/` and no `<`: an autolink's inside.
pub(super) fn is_autolink(inner: &[u16]) -> bool {
    let is_letter = |u: u16| u8::try_from(u).is_ok_and(|b| b.is_ascii_alphabetic());
    let is_scheme =
        |u: u16| u8::try_from(u).is_ok_and(|b| b.is_ascii_alphanumeric() || b"+.-".contains(&b));
    let Some((&first, rest)) = inner.split_first() else {
        return false;
    };
    let scheme = rest.iter().take_while(|&&u| is_scheme(u)).count();
    match rest.get(scheme..).and_then(<[u16]>::split_first) {
        Some((&COLON, tail)) => {
            is_letter(first) && tail.iter().all(|&u| u != LESS && !is_js_space_unit(u))
        }
        _ => false,
    }
}
