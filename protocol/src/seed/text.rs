//! How Seed's service reads the text fields it is sent: JavaScript's white
//! space, as its `trim` removes it (Unicode's white space and line
//! terminators and the byte-order mark, but not NEL, U+0085, which Rust's
//! `trim` would remove too). Every door and store that mirrors a
//! reference check trims with this.

/// ECMAScript's WhiteSpace and LineTerminator characters.
pub fn is_js_space(c: char) -> bool {
    const OTHERS: [char; 8] = [
        '\u{a0}', '\u{1680}', '\u{2028}', '\u{2029}', '\u{202f}', '\u{205f}', '\u{3000}',
        '\u{feff}',
    ];
    matches!(c, '\t'..='\r' | ' ' | '\u{2000}'..='\u{200a}') || OTHERS.contains(&c)
}

/// `text.trim()` as JavaScript computes it.
pub fn js_trim(text: &str) -> &str {
    text.trim_matches(is_js_space)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn javascript_trims_its_own_white_space_and_not_nel() {
        assert_eq!(js_trim("\u{feff}\u{a0} a b\u{3000}\n"), "a b");
        assert_eq!(js_trim("\u{85}x\u{85}"), "\u{85}x\u{85}");
        // The same set as Unicode's white space less NEL, plus the BOM.
        for c in (0..0x11_0000u32).filter_map(char::from_u32) {
            let unicode = (c.is_whitespace() && c != '\u{85}') || c == '\u{feff}';
            assert_eq!(is_js_space(c), unicode, "{:?}", c);
        }
    }
}
