//! What a model accepts as input, decided from its provider type and model
//! id as Seed decides it: no catalog, a few rules per provider family, and
//! every other provider text-only (an image attachment is then described to
//! the model instead of shown); and which file types read as text.

/// Whether the model takes images in what it reads (a tool result showing
/// an attached image). `provider_type` is the provider record's `type`.
pub fn supports_image_input(provider_type: &str, model: &str) -> bool {
    match provider_type {
        "openai" => openai(model),
        "anthropic" => anthropic(model),
        "google" => model.starts_with("gemini-"),
        _ => false,
    }
}

/// Whether a file of this MIME type reads as text, as the reference
/// decides it: any `text/…`, and JSON, XML, YAML and JavaScript.
pub fn is_text_type(mime: &str) -> bool {
    let bare = mime.split(';').next().unwrap_or_default().trim();
    mime.starts_with("text/")
        || matches!(
            bare,
            "application/json"
                | "application/xml"
                | "application/x-yaml"
                | "application/javascript"
        )
}

/// A type without its parameters, lower-cased (`image/PNG; x=1` is
/// `image/png`).
fn bare_lower(mime: &str) -> String {
    mime.split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// Whether an image of this type can be shown to a model: PNG, JPEG, GIF
/// or WebP, the types every provider family takes (others, SVG or AVIF,
/// would fail the whole call, so they are described instead).
pub fn is_model_image(mime: &str) -> bool {
    let bare = bare_lower(mime);
    matches!(
        bare.as_str(),
        "image/png" | "image/jpeg" | "image/gif" | "image/webp"
    )
}

/// Whether `bytes` begin as an image of `mime` does (so a file declared an
/// image that is not one is never sent as one).
pub fn looks_like(mime: &str, bytes: &[u8]) -> bool {
    let bare = bare_lower(mime);
    match bare.as_str() {
        "image/png" => bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        "image/jpeg" => bytes.starts_with(&[0xff, 0xd8, 0xff]),
        "image/gif" => bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a"),
        "image/webp" => bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP",
        _ => false,
    }
}

/// The largest image, in bytes before encoding, shown to a model of this
/// provider type: the reference's 4.5 MB, less for Anthropic, which bounds
/// an image's base64 text at 5 MB.
pub fn max_image_bytes(provider_type: &str) -> u64 {
    match provider_type {
        "anthropic" => 3_750_000,
        _ => 4_500_000,
    }
}

/// The leading decimal digits of `s`, if any, and what follows them.
fn number_prefix(s: &str) -> Option<(u64, &str)> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n = s[..end].parse().ok()?;
    Some((n, &s[end..]))
}

/// The GPT-4o and GPT-4.1 families, GPT-4 Turbo, every GPT from 5 on, and
/// the full o1, o3 and o4-mini reasoning models (not o1-mini or o3-mini).
fn openai(model: &str) -> bool {
    const VISION_PREFIXES: [&str; 4] = ["gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4-turbo"];
    if VISION_PREFIXES.iter().any(|p| model.starts_with(p)) {
        return true;
    }
    if let Some((n, _)) = model.strip_prefix("gpt-").and_then(number_prefix) {
        if n >= 5 {
            return true;
        }
    }
    // `o1`, `o1-pro`, each alone or followed by a `-2…` date.
    if let Some(rest) = model.strip_prefix("o1") {
        let rest = rest.strip_prefix("-pro").unwrap_or(rest);
        if rest.is_empty() || rest.starts_with("-2") {
            return true;
        }
    }
    // `o3`, `o3-2…`, `o3-pro…`.
    if let Some(rest) = model.strip_prefix("o3") {
        if rest.is_empty() || rest.starts_with("-2") || rest.starts_with("-pro") {
            return true;
        }
    }
    model.starts_with("o4-mini")
}

/// Claude from generation 3 on, and the family-first ids of later ones
/// (`claude-sonnet-4-5`).
fn anthropic(model: &str) -> bool {
    let Some(rest) = model.strip_prefix("claude-") else {
        return false;
    };
    if let Some((generation, _)) = number_prefix(rest) {
        return generation >= 3;
    }
    let family = rest
        .find(|c: char| !c.is_ascii_lowercase())
        .unwrap_or(rest.len());
    family > 0
        && rest[family..]
            .strip_prefix('-')
            .is_some_and(|tail| tail.starts_with(|c: char| c.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::supports_image_input;

    #[test]
    fn only_images_every_provider_takes_are_shown_and_only_when_they_are_images() {
        use super::{is_model_image, looks_like};
        assert!(is_model_image("image/PNG; charset=x"));
        assert!(!is_model_image("image/svg+xml"));
        assert!(!is_model_image("image/avif"));
        assert!(looks_like("image/png", b"\x89PNG\r\n\x1a\nrest"));
        assert!(!looks_like("image/png", b"hello"));
        assert!(looks_like("image/webp", b"RIFF\0\0\0\0WEBPVP8 "));
        assert!(looks_like("image/jpeg", &[0xff, 0xd8, 0xff, 0xe0]));
    }

    #[test]
    fn image_input_follows_the_reference_rules() {
        for (provider, model, expected) in [
            ("openai", "gpt-4o-mini", true),
            ("openai", "chatgpt-4o-latest", true),
            ("openai", "gpt-4.1-nano", true),
            ("openai", "gpt-4-turbo", true),
            ("openai", "gpt-4", false),
            ("openai", "gpt-3.5-turbo", false),
            ("openai", "gpt-5", true),
            ("openai", "gpt-5.1-codex", true),
            ("openai", "gpt-10", true),
            ("openai", "o1", true),
            ("openai", "o1-pro", true),
            ("openai", "o1-2024-12-17", true),
            ("openai", "o1-pro-2025-03-19", true),
            ("openai", "o1-mini", false),
            ("openai", "o1-preview", false),
            ("openai", "o3", true),
            ("openai", "o3-pro", true),
            ("openai", "o3-2025-04-16", true),
            ("openai", "o3-mini", false),
            ("openai", "o4-mini-high", true),
            ("anthropic", "claude-3-5-sonnet-latest", true),
            ("anthropic", "claude-2.1", false),
            ("anthropic", "claude-sonnet-4-5", true),
            ("anthropic", "claude-fable-5", true),
            ("anthropic", "claude-instant", false),
            ("anthropic", "claude-", false),
            ("google", "gemini-2.5-flash", true),
            ("google", "gemma-3", false),
            ("custom", "gpt-4o", false),
            ("ollama", "llava", false),
        ] {
            assert_eq!(
                supports_image_input(provider, model),
                expected,
                "{provider} {model}"
            );
        }
    }
}
