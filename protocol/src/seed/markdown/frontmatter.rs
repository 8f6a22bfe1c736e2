//! Frontmatter: the `---` block cut off the markdown and read into the document's metadata by the client's rules.

use super::*;

/// A JavaScript value as the `yaml` package makes them.
#[derive(Clone, Debug)]
pub(super) enum Js {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    /// A `Date` (an explicit `!!timestamp`), as its time value in ms.
    Date(f64),
    Arr(Vec<Js>),
    /// Own properties in insertion order (see [`js_key_order`]).
    Obj(Vec<(String, Js)>),
}

impl Js {
    /// `String(value)`.
    pub(super) fn to_js_string(&self) -> String {
        match self {
            Js::Null => "null".into(),
            Js::Bool(b) => b.to_string(),
            Js::Num(x) => js_number_to_string(*x),
            Js::Str(s) => s.clone(),
            Js::Date(t) => date_to_string(*t),
            Js::Arr(items) => items
                .iter()
                .map(|v| match v {
                    Js::Null => String::new(),
                    v => v.to_js_string(),
                })
                .collect::<Vec<_>>()
                .join(","),
            Js::Obj(_) => "[object Object]".into(),
        }
    }

    /// `Boolean(value)`.
    pub(super) fn truthy(&self) -> bool {
        match self {
            Js::Null => false,
            Js::Bool(b) => *b,
            Js::Num(x) => *x != 0.0 && !x.is_nan(),
            Js::Str(s) => !s.is_empty(),
            Js::Date(_) | Js::Arr(_) | Js::Obj(_) => true,
        }
    }

    /// The value after `JSON.stringify` and a read back.
    pub(super) fn to_json(&self) -> Value {
        match self {
            Js::Null => Value::Null,
            Js::Bool(b) => Value::Bool(*b),
            Js::Num(x) => js_number_value(*x),
            Js::Str(s) => Value::String(s.clone()),
            Js::Date(t) => iso_string(*t).map_or(Value::Null, Value::String),
            Js::Arr(items) => Value::Array(items.iter().map(Js::to_json).collect()),
            Js::Obj(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_json()))
                    .collect(),
            ),
        }
    }
}

/// Whether `key` is an array index, which JavaScript objects list first.
pub(super) fn array_index(key: &str) -> Option<u32> {
    if key.is_empty() || (key.len() > 1 && key.starts_with('0')) {
        return None;
    }
    if !key.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    key.parse::<u32>().ok().filter(|&n| n != u32::MAX)
}

/// Object keys in JavaScript's own-property order: array indices
/// ascending, then the rest in insertion order.
pub(super) fn js_key_order<T>(entries: Vec<(String, T)>) -> Vec<(String, T)> {
    let (mut indices, rest): (Vec<_>, Vec<_>) = entries
        .into_iter()
        .partition(|(k, _)| array_index(k).is_some());
    indices.sort_by_key(|(k, _)| array_index(k));
    indices.extend(rest);
    indices
}

/// The string keys `parseFrontmatter` coerces to strings.
pub(super) const METADATA_STRING_KEYS: [&str; 14] = [
    "name",
    "summary",
    "displayAuthor",
    "displayPublishTime",
    "icon",
    "cover",
    "siteUrl",
    "layout",
    "seedExperimentalLogo",
    "importCategories",
    "importTags",
    "seedExperimentalHomeOrder",
    "contentWidth",
    "childrenType",
];
pub(super) const METADATA_BOOLEAN_KEYS: [&str; 2] = ["showOutline", "showActivity"];

/// `parseFrontmatter` over UTF-16 units: the content after the frontmatter
/// (all of `source` when there is none or it is invalid) and the metadata.
pub(super) fn parse_frontmatter_units(source: &[u16]) -> (&[u16], Vec<(String, Value)>) {
    let none = (source, Vec::new());
    let trimmed = if source.first() == Some(&0xfeff) {
        &source[1..]
    } else {
        source
    };
    if !starts_with(trimmed, "---") {
        return none;
    }
    let Some(first_line_end) = index_of(trimmed, b'\n', 0) else {
        return none;
    };
    if trim(&trimmed[..first_line_end]) != units("---").as_slice() {
        return none;
    }
    // `\n---[ \t]*(?:\n|$)` from the first line's end.
    let mut close = None;
    let mut p = first_line_end;
    while let Some(nl) = index_of(trimmed, b'\n', p) {
        if starts_with_at(trimmed, nl + 1, "---") {
            let mut q = nl + 4;
            while matches!(at(trimmed, q), b' ' | b'\t') {
                q += 1;
            }
            if q == trimmed.len() {
                close = Some((nl, q));
                break;
            }
            if at(trimmed, q) == b'\n' {
                close = Some((nl, q + 1));
                break;
            }
        }
        p = nl + 1;
    }
    let Some((close_at, rest_at)) = close else {
        return none;
    };
    let yaml = trimmed.get(first_line_end + 1..close_at).unwrap_or(&[]);
    let rest = &trimmed[rest_at..];
    if trim(yaml).is_empty() {
        return (rest, Vec::new());
    }
    let yaml = string(yaml);
    let parsed = std::panic::catch_unwind(|| yaml_to_js(&yaml)).unwrap_or(Err(()));
    let parsed = match parsed {
        Ok(v) => v,
        Err(()) => return none,
    };
    let entries: Vec<(String, Js)> = match parsed {
        Js::Obj(entries) => js_key_order(entries),
        Js::Arr(items) => items
            .into_iter()
            .enumerate()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        _ => return (rest, Vec::new()),
    };
    (rest, metadata_from(entries))
}

/// The metadata object `parseFrontmatter` builds from the YAML's entries,
/// as own properties (`None` is a property set to `undefined`).
pub(super) fn metadata_from(entries: Vec<(String, Js)>) -> Vec<(String, Value)> {
    let title = entries
        .iter()
        .find(|(k, _)| k == "title")
        .map(|(_, v)| v.clone());
    let mut own = OwnProperties::default();
    // `metadata.__proto__ = object` sets the prototype: its properties are
    // then what reads of absent keys see.
    let mut proto: Vec<(String, Js)> = Vec::new();
    for (key, value) in entries {
        if key == "title" {
            continue;
        }
        if key == "__proto__" {
            match value {
                Js::Obj(e) => proto = e,
                Js::Arr(_) | Js::Null => proto = Vec::new(),
                _ => {}
            }
            continue;
        }
        own.set(key, Some(value));
    }
    let get = |own: &OwnProperties, key: &str| -> Option<Js> {
        match own.get(key) {
            Some(v) => v.clone(),
            None => proto
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone()),
        }
    };
    if get(&own, "name").is_none() {
        if let Some(title) = title.filter(|t| !matches!(t, Js::Null)) {
            own.set("name".into(), Some(coerce_string(&title)));
        }
    }
    for key in METADATA_STRING_KEYS {
        if let Some(v) = get(&own, key) {
            if !matches!(v, Js::Str(_)) {
                let coerced = match v {
                    Js::Null => None,
                    v => Some(coerce_string(&v)),
                };
                own.set(key.into(), coerced);
            }
        }
    }
    for key in METADATA_BOOLEAN_KEYS {
        if let Some(v) = get(&own, key) {
            if !matches!(v, Js::Bool(_)) {
                own.set(key.into(), Some(Js::Bool(v.truthy())));
            }
        }
    }
    js_key_order(own.entries)
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v.to_json())))
        .collect()
}

pub(super) fn coerce_string(v: &Js) -> Js {
    match v {
        Js::Str(s) => Js::Str(s.clone()),
        Js::Date(t) => {
            let iso = iso_string(*t).unwrap_or_default();
            Js::Str(iso.split('T').next().unwrap_or_default().to_owned())
        }
        v => Js::Str(v.to_js_string()),
    }
}

/// An object's own properties in the order set (`None`: set to
/// `undefined`).
#[derive(Default)]
pub(super) struct OwnProperties {
    pub(super) entries: Vec<(String, Option<Js>)>,
    pub(super) index: std::collections::HashMap<String, usize>,
}

impl OwnProperties {
    pub(super) fn get(&self, key: &str) -> Option<&Option<Js>> {
        self.index.get(key).map(|&k| &self.entries[k].1)
    }

    pub(super) fn set(&mut self, key: String, value: Option<Js>) {
        match self.index.get(&key) {
            Some(&k) => self.entries[k].1 = value,
            None => {
                self.index.insert(key.clone(), self.entries.len());
                self.entries.push((key, value));
            }
        }
    }
}
