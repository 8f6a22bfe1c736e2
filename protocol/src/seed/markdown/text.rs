//! UTF-16 text as JavaScript strings see it: the unit at an index, trimming, prefixes and searches over `u16` slices.

/// The ASCII byte at `i`, or 0x80 (matches no pattern) past the end or for
/// any non-ASCII unit.
pub(super) fn at(s: &[u16], i: usize) -> u8 {
    match s.get(i) {
        Some(&c) if c < 0x80 => c as u8,
        _ => 0x80,
    }
}

/// JavaScript's `\s` (and what `trim` removes).
pub(super) fn is_space(c: u16) -> bool {
    matches!(
        c,
        0x09..=0x0d
            | 0x20
            | 0xa0
            | 0x1680
            | 0x2000..=0x200a
            | 0x2028
            | 0x2029
            | 0x202f
            | 0x205f
            | 0x3000
            | 0xfeff
    )
}

/// What a JavaScript `.` does not match.
pub(super) fn is_line_terminator(c: u16) -> bool {
    matches!(c, 0x0a | 0x0d | 0x2028 | 0x2029)
}

pub(super) fn trim(s: &[u16]) -> &[u16] {
    let start = s.iter().position(|&c| !is_space(c)).unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|&c| !is_space(c))
        .map_or(start, |e| e + 1);
    &s[start..end.max(start)]
}

pub(super) fn starts_with(s: &[u16], prefix: &str) -> bool {
    starts_with_at(s, 0, prefix)
}

pub(super) fn starts_with_at(s: &[u16], i: usize, prefix: &str) -> bool {
    let p = prefix.as_bytes();
    s.len() >= i + p.len()
        && s[i..i + p.len()]
            .iter()
            .zip(p)
            .all(|(&a, &b)| a == u16::from(b))
}

pub(super) fn index_of(s: &[u16], unit: u8, from: usize) -> Option<usize> {
    s.get(from..)?
        .iter()
        .position(|&c| c == u16::from(unit))
        .map(|p| p + from)
}

pub(super) fn skip_spaces(s: &[u16], mut i: usize) -> usize {
    while i < s.len() && is_space(s[i]) {
        i += 1;
    }
    i
}

pub(super) fn units(s: &str) -> Vec<u16> {
    s.encode_utf16().collect()
}

pub(super) fn string(s: &[u16]) -> String {
    String::from_utf16_lossy(s)
}

pub(super) fn is_id_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'-'
}

/// The end of the run of id characters (`[A-Za-z0-9_-]`) from `i`.
pub(super) fn id_run_end(s: &[u16], mut i: usize) -> usize {
    while is_id_char(at(s, i)) {
        i += 1;
    }
    i
}

/// `^[a-zA-Z][a-zA-Z0-9+.-]*:` at the start of `s`: the index of the colon.
pub(super) fn scheme_colon(s: &[u16]) -> Option<usize> {
    if !at(s, 0).is_ascii_alphabetic() {
        return None;
    }
    let mut i = 1;
    while matches!(at(s, i), c if c.is_ascii_alphanumeric() || c == b'+' || c == b'.' || c == b'-')
    {
        i += 1;
    }
    (at(s, i) == b':').then_some(i)
}
