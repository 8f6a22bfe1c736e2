//! A trigger's parts as a signed client or an operator sends them, checked
//! and normalized with the reference's rules and words: strings are
//! trimmed and must not be empty, names and labels hold at most 256 bytes
//! and resources 2,048, lists at most 32 items; a field that is present
//! must be valid (an explicit null is not absent); fields nobody reads are
//! dropped. Every refusal is [`Invalid`], whose message names the field.

use chrono_tz::Tz;
use serde_json::{json, Map, Value};

use super::schedule::{IntervalUnit, Schedule};

const NAME_BYTES: usize = 256;
const RESOURCE_BYTES: usize = 2_048;
const LIST_ITEMS: usize = 32;

/// A refused part, with the message the client reads (a 400).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

fn invalid(message: impl Into<String>) -> Invalid {
    Invalid(message.into())
}

/// A trimmed, non-empty string of at most `max` bytes.
pub fn bounded(value: Option<&Value>, label: &str, max: usize) -> Result<String, Invalid> {
    let Some(Value::String(text)) = value else {
        return Err(invalid(format!("{label} is required")));
    };
    let text = js_trim(text);
    if text.is_empty() {
        return Err(invalid(format!("{label} is required")));
    }
    if text.len() > max {
        return Err(invalid(format!("{label} is too large")));
    }
    Ok(text.to_owned())
}

pub use agentos_protocol::seed::text::js_trim;

/// `bounded` for a field that may be absent (absent, not null).
fn optional(
    map: &Map<String, Value>,
    key: &str,
    label: &str,
    max: usize,
) -> Result<Option<String>, Invalid> {
    match map.get(key) {
        None => Ok(None),
        value => bounded(value, label, max).map(Some),
    }
}

/// A number that is a whole number, as JavaScript's `Number.isInteger`
/// sees it (a float with no fraction counts).
fn integer(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0)
                .map(|f| f as i64)
        }),
        _ => None,
    }
}

/// JavaScript's largest safe integer.
const MAX_SAFE_INTEGER: i64 = 9_007_199_254_740_991;

/// A whole number too large for `integer` (JavaScript's numbers have no
/// ceiling there), as `i64::MAX`.
fn whole_beyond_i64(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) if n.as_u64().is_some() => Some(i64::MAX),
        Value::Number(n) => n
            .as_f64()
            .filter(|f| f.is_finite() && f.fract() == 0.0 && *f > 0.0)
            .map(|_| i64::MAX),
        _ => None,
    }
}

fn object<'a>(value: Option<&'a Value>, message: &str) -> Result<&'a Map<String, Value>, Invalid> {
    match value {
        Some(Value::Object(map)) => Ok(map),
        _ => Err(invalid(message)),
    }
}

/// An IANA zone name the database knows, in any letter case.
pub fn zone(value: Option<&Value>, label: &str) -> Result<(String, Tz), Invalid> {
    let name = bounded(value, label, NAME_BYTES)?;
    match Tz::from_str_insensitive(&name) {
        Ok(tz) => Ok((name, tz)),
        Err(_) => Err(invalid(format!("{label} is invalid"))),
    }
}

/// A schedule: `interval`, `weekly` or `once`.
pub fn schedule(value: Option<&Value>) -> Result<Schedule, Invalid> {
    let map = object(value, "Trigger schedule is required")?;
    match map.get("kind").and_then(Value::as_str) {
        Some("interval") => {
            // Any positive whole number (a huge one simply never comes
            // due).
            let every = map
                .get("every")
                .and_then(|v| integer(v).or_else(|| whole_beyond_i64(v)))
                .filter(|n| *n > 0)
                .ok_or_else(|| invalid("Schedule interval must be a positive integer"))?;
            let unit = match map.get("unit").and_then(Value::as_str) {
                Some("minutes") => IntervalUnit::Minutes,
                Some("hours") => IntervalUnit::Hours,
                _ => return Err(invalid("Schedule interval unit is unsupported")),
            };
            Ok(Schedule::Interval {
                every: every as u64,
                unit,
            })
        }
        Some("weekly") => {
            let listed = match map.get("daysOfWeek") {
                Some(Value::Array(days)) if !days.is_empty() => days,
                _ => return Err(invalid("Schedule days of week are required")),
            };
            // Every item must be a day; duplicates go, the first of each
            // kept in place (at most seven survive, however long the list).
            let mut days: Vec<u8> = Vec::new();
            for day in listed {
                let day = integer(day)
                    .filter(|d| (0..=6).contains(d))
                    .ok_or_else(|| invalid("Schedule day of week is invalid"))?
                    as u8;
                if !days.contains(&day) {
                    days.push(day);
                }
            }
            let time = bounded(map.get("timeOfDay"), "Schedule time of day", 5)?;
            let (hour, minute) =
                clock(&time).ok_or_else(|| invalid("Schedule time of day is invalid"))?;
            let (timezone, tz) = zone(map.get("timezone"), "Schedule timezone")?;
            Ok(Schedule::Weekly {
                days,
                hour,
                minute,
                timezone,
                tz,
            })
        }
        Some("once") => {
            // `Number.isSafeInteger` and positive.
            let run_at = map
                .get("runAt")
                .and_then(integer)
                .filter(|n| *n > 0 && *n <= MAX_SAFE_INTEGER)
                .ok_or_else(|| invalid("Schedule run time is invalid"))?;
            let timezone = match map.get("timezone") {
                None => None,
                value => Some(zone(value, "Schedule timezone")?.0),
            };
            Ok(Schedule::Once { run_at, timezone })
        }
        _ => Err(invalid("Schedule kind is unsupported")),
    }
}

/// `HH:MM`, hour at most 23 and minute at most 59.
fn clock(text: &str) -> Option<(u32, u32)> {
    let (hour, minute) = text.split_once(':')?;
    if hour.len() != 2 || minute.len() != 2 {
        return None;
    }
    if !hour
        .bytes()
        .chain(minute.bytes())
        .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let (hour, minute) = (hour.parse().ok()?, minute.parse().ok()?);
    (hour <= 23 && minute <= 59).then_some((hour, minute))
}

/// A schedule as a trigger stores and shows it.
pub fn schedule_json(schedule: &Schedule) -> Value {
    match schedule {
        Schedule::Interval { every, unit } => {
            json!({"kind": "interval", "every": every, "unit": unit.as_str()})
        }
        Schedule::Weekly {
            days,
            hour,
            minute,
            timezone,
            ..
        } => json!({
            "kind": "weekly",
            "daysOfWeek": days,
            "timeOfDay": format!("{hour:02}:{minute:02}"),
            "timezone": timezone,
        }),
        Schedule::Once { run_at, timezone } => match timezone {
            Some(zone) => json!({"kind": "once", "runAt": run_at, "timezone": zone}),
            None => json!({"kind": "once", "runAt": run_at}),
        },
    }
}

/// A terminal run status a `run-completed` source may name.
const RUN_STATUSES: [&str; 3] = ["succeeded", "failed", "canceled"];

/// A source, normalized: `schedule`, `run-completed`, or one of the
/// hypermedia kinds (`document-comment`, `user-mention`, `site-update`).
pub fn source(value: Option<&Value>) -> Result<Value, Invalid> {
    let map = object(value, "Trigger source is required")?;
    let mut out = Map::new();
    match map.get("type").and_then(Value::as_str) {
        Some("document-comment") => {
            out.insert("type".into(), json!("document-comment"));
            let resource = bounded(
                map.get("resource"),
                "Trigger document resource",
                RESOURCE_BYTES,
            )?;
            out.insert("resource".into(), json!(resource));
            if let Some(author) = optional(map, "author", "Trigger author", NAME_BYTES)? {
                out.insert("author".into(), json!(author));
            }
        }
        Some("user-mention") => {
            out.insert("type".into(), json!("user-mention"));
            // An older client's single `mentionedAccount` is a list of one.
            // (`??`: a null list counts as absent.)
            let list = map.get("mentionedAccounts").filter(|v| !v.is_null());
            let listed = match (list, map.get("mentionedAccount")) {
                (Some(list), _) => list.clone(),
                (None, Some(one)) => json!([one]),
                (None, None) => Value::Null,
            };
            let Value::Array(listed) = listed else {
                return Err(invalid("Trigger mentioned accounts must be an array"));
            };
            if listed.len() > LIST_ITEMS {
                return Err(invalid("Too many trigger mentioned accounts"));
            }
            let mut accounts: Vec<String> = Vec::new();
            for account in &listed {
                let account = bounded(Some(account), "Trigger mentioned account", NAME_BYTES)?;
                if !accounts.contains(&account) {
                    accounts.push(account);
                }
            }
            if accounts.is_empty() {
                return Err(invalid("Trigger mentioned account is required"));
            }
            out.insert("mentionedAccounts".into(), json!(accounts));
            if let Some(prefix) = optional(
                map,
                "resourcePrefix",
                "Trigger resource prefix",
                RESOURCE_BYTES,
            )? {
                out.insert("resourcePrefix".into(), json!(prefix));
            }
        }
        Some("site-update") => {
            out.insert("type".into(), json!("site-update"));
            let prefix = bounded(
                map.get("resourcePrefix"),
                "Trigger resource prefix",
                RESOURCE_BYTES,
            )?;
            out.insert("resourcePrefix".into(), json!(canonical_resource(&prefix)));
            if let Some(types) = map.get("eventTypes") {
                let Value::Array(types) = types else {
                    return Err(invalid("Trigger event types must be an array"));
                };
                if types.len() > LIST_ITEMS {
                    return Err(invalid("Too many trigger event types"));
                }
                let types = types
                    .iter()
                    .map(|t| bounded(Some(t), "Trigger event type", NAME_BYTES))
                    .collect::<Result<Vec<_>, _>>()?;
                out.insert("eventTypes".into(), json!(types));
            }
        }
        Some("schedule") => {
            out.insert("type".into(), json!("schedule"));
            out.insert(
                "schedule".into(),
                schedule_json(&schedule(map.get("schedule"))?),
            );
        }
        Some("run-completed") => {
            out.insert("type".into(), json!("run-completed"));
            let status = match map.get("status") {
                None => None,
                Some(Value::String(s)) if RUN_STATUSES.contains(&s.as_str()) => Some(s.clone()),
                Some(_) => {
                    return Err(invalid(
                        "Trigger run status must be succeeded, failed, or canceled",
                    ))
                }
            };
            if let Some(agent) = optional(map, "agentId", "Trigger agent ID", NAME_BYTES)? {
                out.insert("agentId".into(), json!(agent));
            }
            if let Some(status) = status {
                out.insert("status".into(), json!(status));
            }
            if let Some(title) = optional(map, "titleMatch", "Trigger title match", NAME_BYTES)? {
                out.insert("titleMatch".into(), json!(title));
            }
        }
        _ => return Err(invalid("Trigger source type is unsupported")),
    }
    Ok(Value::Object(out))
}

/// A hypermedia resource id in the canonical form triggers compare:
/// `hm://<account>[/<path>]` from an `hm:` address or from a web address
/// with an `/hm/<account>/…` path (version and `:` segments, query and
/// fragment dropped, no slash at either end of the path); anything else
/// without its query, fragment and trailing slashes.
pub fn canonical_resource(id: &str) -> String {
    let trimmed = id.trim();
    if trimmed.is_empty() {
        return String::new();
    }
    if let Ok(url) = url::Url::parse(trimmed) {
        match url.scheme() {
            "hm" => {
                if let Some(host) = url.host_str() {
                    return format!("hm://{host}{}", canonical_path(url.path()));
                }
            }
            "http" | "https" => {
                let parts: Vec<&str> = url.path().split('/').filter(|p| !p.is_empty()).collect();
                if let Some(at) = parts.iter().position(|p| *p == "hm") {
                    if let Some(account) = parts.get(at + 1).and_then(|a| decode(a)) {
                        let path: Option<Vec<String>> = parts[at + 2..]
                            .iter()
                            .filter(|p| !p.starts_with(':'))
                            .map(|p| decode(p))
                            .collect();
                        if let Some(path) = path {
                            return format!("hm://{account}{}", canonical_path(&path.join("/")));
                        }
                    }
                }
            }
            _ => {}
        }
    }
    let bare = trimmed.split('#').next().unwrap_or(trimmed);
    let bare = bare.split('?').next().unwrap_or(bare);
    match bare.trim_end_matches('/') {
        "" => trimmed.to_owned(),
        bare => bare.to_owned(),
    }
}

/// A path segment percent-decoded; None when it is not UTF-8.
fn decode(segment: &str) -> Option<String> {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .ok()
        .map(|s| s.into_owned())
}

/// A path with no slash at either end, led by one slash (empty stays empty).
fn canonical_path(path: &str) -> String {
    let path = path.split('?').next().unwrap_or("");
    let path = path.split('#').next().unwrap_or("");
    match path.trim_matches('/') {
        "" => String::new(),
        clean => format!("/{clean}"),
    }
}

/// What a firing does: start a new thread (the default), or wake a run
/// parked on `signal`.
pub fn continuation(value: Option<&Value>) -> Result<Value, Invalid> {
    let map = object(value, "Trigger continuation is required")?;
    match map.get("kind").and_then(Value::as_str) {
        Some("newThread") => Ok(json!({"kind": "newThread"})),
        Some("wake") => {
            let mut out = Map::new();
            out.insert("kind".into(), json!("wake"));
            let signal = bounded(map.get("signal"), "Trigger signal", NAME_BYTES)?;
            out.insert("signal".into(), json!(signal));
            if let Some(run) = optional(map, "runId", "Trigger run ID", NAME_BYTES)? {
                out.insert("runId".into(), json!(run));
            }
            if let Some(payload) = map.get("payload") {
                out.insert("payload".into(), payload.clone());
            }
            Ok(Value::Object(out))
        }
        _ => Err(invalid("Trigger continuation kind is unsupported")),
    }
}

/// A trigger's name.
pub fn name(value: Option<&Value>) -> Result<String, Invalid> {
    bounded(value, "Trigger name", NAME_BYTES)
}

/// Whether a trigger is enabled (absent: yes).
pub fn enabled(value: Option<&Value>) -> Result<bool, Invalid> {
    match value {
        None => Ok(true),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(invalid("Trigger enabled must be a boolean")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(result: Result<impl std::fmt::Debug, Invalid>) -> String {
        match result {
            Err(Invalid(message)) => message,
            Ok(v) => panic!("accepted: {v:?}"),
        }
    }

    #[test]
    fn schedules_are_checked_with_the_references_words() {
        let s = |v: Value| schedule(Some(&v));
        assert_eq!(refused(s(json!("daily"))), "Trigger schedule is required");
        assert_eq!(
            refused(s(json!({"kind": "daily"}))),
            "Schedule kind is unsupported"
        );
        assert_eq!(
            refused(s(
                json!({"kind": "interval", "every": 0, "unit": "minutes"})
            )),
            "Schedule interval must be a positive integer"
        );
        assert_eq!(
            refused(s(
                json!({"kind": "interval", "every": 1.5, "unit": "minutes"})
            )),
            "Schedule interval must be a positive integer"
        );
        assert_eq!(
            refused(s(json!({"kind": "interval", "every": 5, "unit": "days"}))),
            "Schedule interval unit is unsupported"
        );
        assert_eq!(
            s(json!({"kind": "interval", "every": 5.0, "unit": "hours"}))
                .map(|s| schedule_json(&s)),
            Ok(json!({"kind": "interval", "every": 5, "unit": "hours"}))
        );
        let weekly = |days: Value, time: &str, zone: &str| {
            s(json!({"kind": "weekly", "daysOfWeek": days, "timeOfDay": time, "timezone": zone}))
        };
        assert_eq!(
            refused(weekly(json!([]), "09:00", "UTC")),
            "Schedule days of week are required"
        );
        assert_eq!(
            refused(weekly(json!([7]), "09:00", "UTC")),
            "Schedule day of week is invalid"
        );
        assert_eq!(
            refused(weekly(json!(["1"]), "09:00", "UTC")),
            "Schedule day of week is invalid"
        );
        assert_eq!(
            refused(weekly(json!([1]), "9:30", "UTC")),
            "Schedule time of day is invalid"
        );
        assert_eq!(
            refused(weekly(json!([1]), "24:00", "UTC")),
            "Schedule time of day is invalid"
        );
        assert_eq!(
            refused(weekly(json!([1]), "12:60", "UTC")),
            "Schedule time of day is invalid"
        );
        assert_eq!(
            refused(weekly(json!([1]), "09:00:00", "UTC")),
            "Schedule time of day is too large"
        );
        assert_eq!(
            refused(weekly(json!([1]), "  ", "UTC")),
            "Schedule time of day is required"
        );
        assert_eq!(
            refused(weekly(json!([1]), "09:00", "Mars/Olympus")),
            "Schedule timezone is invalid"
        );
        assert_eq!(
            refused(weekly(json!([1]), "09:00", "+01:00")),
            "Schedule timezone is invalid"
        );
        // Duplicates go, in first-seen order; the zone is kept as written
        // (any letter case, old aliases included); the time is trimmed.
        assert_eq!(
            weekly(json!([3, 1, 3, 1.0]), " 09:30 ", "europe/berlin").map(|s| schedule_json(&s)),
            Ok(
                json!({"kind": "weekly", "daysOfWeek": [3, 1], "timeOfDay": "09:30", "timezone": "europe/berlin"})
            )
        );
        assert!(weekly(json!([0]), "00:00", "US/Eastern").is_ok());
        // A long list is checked item by item, and keeps at most seven.
        let long: Vec<u8> = (0..100_000).map(|i| (i % 7) as u8).collect();
        assert_eq!(
            weekly(json!(long), "08:00", "UTC").map(|s| schedule_json(&s)["daysOfWeek"].clone()),
            Ok(json!([0, 1, 2, 3, 4, 5, 6]))
        );
        assert_eq!(
            refused(s(json!({"kind": "once", "runAt": -5}))),
            "Schedule run time is invalid"
        );
        assert_eq!(
            refused(s(json!({"kind": "once", "runAt": 5, "timezone": null}))),
            "Schedule timezone is required"
        );
        assert_eq!(
            s(json!({"kind": "once", "runAt": 5})).map(|s| schedule_json(&s)),
            Ok(json!({"kind": "once", "runAt": 5}))
        );
    }

    #[test]
    fn sources_are_normalized_and_unknown_fields_dropped() {
        let src = |v: Value| source(Some(&v));
        assert_eq!(refused(src(json!(null))), "Trigger source is required");
        assert_eq!(
            refused(src(json!({"type": "email"}))),
            "Trigger source type is unsupported"
        );
        assert_eq!(
            src(
                json!({"type": "run-completed", "titleMatch": " nightly ", "status": "failed", "agentId": "a", "x": 1})
            ),
            Ok(
                json!({"type": "run-completed", "agentId": "a", "status": "failed", "titleMatch": "nightly"})
            )
        );
        assert_eq!(
            refused(src(json!({"type": "run-completed", "status": "running"}))),
            "Trigger run status must be succeeded, failed, or canceled"
        );
        assert_eq!(
            src(json!({"type": "run-completed"})),
            Ok(json!({"type": "run-completed"}))
        );
        assert_eq!(
            src(json!({"type": "user-mention", "mentionedAccount": "z6Mk"})),
            Ok(json!({"type": "user-mention", "mentionedAccounts": ["z6Mk"]}))
        );
        assert_eq!(
            src(json!({"type": "user-mention", "mentionedAccounts": ["a", " a", "b"]})),
            Ok(json!({"type": "user-mention", "mentionedAccounts": ["a", "b"]}))
        );
        assert_eq!(
            refused(src(
                json!({"type": "user-mention", "mentionedAccounts": []})
            )),
            "Trigger mentioned account is required"
        );
        let many: Vec<String> = (0..33).map(|i| format!("a{i}")).collect();
        assert_eq!(
            refused(src(
                json!({"type": "user-mention", "mentionedAccounts": many})
            )),
            "Too many trigger mentioned accounts"
        );
        assert_eq!(
            src(json!({"type": "site-update", "resourcePrefix": " hm://z6Mk/docs/ "})),
            Ok(json!({"type": "site-update", "resourcePrefix": "hm://z6Mk/docs"}))
        );
        for (given, canonical) in [
            ("hm://z6Mk/docs/a?v=bafy#blk", "hm://z6Mk/docs/a"),
            ("hm://z6Mk", "hm://z6Mk"),
            (
                "https://hyper.media/hm/z6Mk/docs/:comments/x/",
                "hm://z6Mk/docs/x",
            ),
            ("https://example.com/hm/z6Mk/a%20b", "hm://z6Mk/a b"),
            (
                "https://example.com/blog/post/?q=1",
                "https://example.com/blog/post",
            ),
            ("z6Mk/docs/", "z6Mk/docs"),
            ("///", "///"),
        ] {
            assert_eq!(canonical_resource(given), canonical, "{given}");
        }
        assert_eq!(
            refused(src(
                json!({"type": "document-comment", "resource": "x".repeat(2049)})
            )),
            "Trigger document resource is too large"
        );
        assert_eq!(
            src(
                json!({"type": "schedule", "schedule": {"kind": "once", "runAt": 9, "extra": true}})
            ),
            Ok(json!({"type": "schedule", "schedule": {"kind": "once", "runAt": 9}}))
        );
    }

    #[test]
    fn numbers_follow_javascripts_rules_and_a_null_list_is_absent() {
        let once = |at: Value| schedule(Some(&json!({"kind": "once", "runAt": at})));
        assert!(once(json!(9_007_199_254_740_991_i64)).is_ok());
        assert_eq!(
            refused(once(json!(9_007_199_254_740_992_i64))),
            "Schedule run time is invalid"
        );
        let huge = schedule(Some(
            &json!({"kind": "interval", "every": u64::MAX, "unit": "hours"}),
        ));
        assert!(huge.is_ok(), "{huge:?}");
        let legacy = source(Some(
            &json!({"type": "user-mention", "mentionedAccounts": null,
                                         "mentionedAccount": "z6Mkone"}),
        ));
        assert_eq!(
            legacy.map(|s| s["mentionedAccounts"].clone()),
            Ok(json!(["z6Mkone"]))
        );
    }

    #[test]
    fn continuations_names_and_flags() {
        let c = |v: Value| continuation(Some(&v));
        assert_eq!(
            c(json!({"kind": "newThread", "x": 1})),
            Ok(json!({"kind": "newThread"}))
        );
        assert_eq!(
            c(json!({"kind": "wake", "signal": " go ", "payload": null})),
            Ok(json!({"kind": "wake", "signal": "go", "payload": null}))
        );
        assert_eq!(
            refused(c(json!({"kind": "wake"}))),
            "Trigger signal is required"
        );
        assert_eq!(
            refused(c(json!({"kind": "later"}))),
            "Trigger continuation kind is unsupported"
        );
        assert_eq!(refused(c(json!(null))), "Trigger continuation is required");
        assert_eq!(
            refused(name(Some(&json!("   ")))),
            "Trigger name is required"
        );
        assert_eq!(
            refused(name(Some(&json!("é".repeat(129))))),
            "Trigger name is too large"
        );
        assert_eq!(name(Some(&json!(" Nightly "))), Ok("Nightly".to_owned()));
        // Trimmed as JavaScript trims: the byte-order mark goes, NEL stays.
        assert_eq!(
            name(Some(&json!("\u{feff}\u{3000}N\n"))),
            Ok("N".to_owned())
        );
        assert_eq!(name(Some(&json!("\u{85}N"))), Ok("\u{85}N".to_owned()));
        assert_eq!(enabled(None), Ok(true));
        assert_eq!(
            refused(enabled(Some(&json!(1)))),
            "Trigger enabled must be a boolean"
        );
    }
}
