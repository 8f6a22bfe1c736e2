//! Hypermedia activity as triggers see it, the reference's matcher ported:
//! an event's key (`feedEventId`, else built from its blob or mention) and
//! its firing key (a comment's citation twin fires under the comment's
//! `blob-<cid>`, so one mention fires once), its time and its summary, and
//! whether it matches a `document-comment`, `user-mention` or
//! `site-update` source or a run's activity wait. Events come as the
//! server's resolved feed events (`type: comment | citation | doc-update
//! | …`) or as raw feed entries (`newBlob`, `newMention`, their snake_case
//! and protobuf-JSON spellings). Pure: no I/O.

use serde_json::Value;

use super::validate::canonical_resource;

/// `stringField`: a string member, or a number's text.
fn text(value: &Value, field: &str) -> Option<String> {
    match value.get(field)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(js_number(n)),
        _ => None,
    }
}

fn js_number(n: &serde_json::Number) -> String {
    match (n.as_i64(), n.as_f64()) {
        (Some(i), _) => i.to_string(),
        (None, Some(f)) if f.fract() == 0.0 && f.abs() < 1e21 => format!("{f:.0}"),
        _ => n.to_string(),
    }
}

/// `numberField`: a finite number, or a string holding one.
fn number(value: &Value, field: &str) -> Option<f64> {
    match value.get(field)? {
        Value::Number(n) => n.as_f64().filter(|f| f.is_finite()),
        Value::String(s) => s.trim().parse::<f64>().ok().filter(|f| f.is_finite()),
        _ => None,
    }
}

/// The event's blob entry, in any of its spellings.
fn blob(event: &Value) -> Option<&Value> {
    event
        .get("newBlob")
        .or_else(|| event.get("new_blob"))
        .filter(|b| b.is_object())
        .or_else(|| case(event, "newBlob"))
}

/// The event's mention entry, in any of its spellings.
fn mention(event: &Value) -> Option<&Value> {
    event
        .get("newMention")
        .or_else(|| event.get("new_mention"))
        .filter(|m| m.is_object())
        .or_else(|| case(event, "newMention"))
}

/// `{data: {case, value}}`'s value when the case is `name`.
fn case<'v>(event: &'v Value, name: &str) -> Option<&'v Value> {
    let data = event.get("data")?;
    (data.get("case")?.as_str()? == name)
        .then(|| data.get("value"))
        .flatten()
        .filter(|v| v.is_object())
}

/// `jsonContainsString`: any string inside `value` contains `needle`.
fn contains(value: &Value, needle: &str, depth: usize) -> bool {
    if needle.is_empty() || depth > 64 {
        return false;
    }
    match value {
        Value::String(s) => s.contains(needle),
        Value::Array(items) => items.iter().any(|v| contains(v, needle, depth + 1)),
        Value::Object(map) => map.values().any(|v| contains(v, needle, depth + 1)),
        _ => false,
    }
}

/// `activityEventKey`: what names an event among those seen.
pub fn event_key(event: &Value) -> Option<String> {
    if let Some(id) = text(event, "feedEventId") {
        return Some(id);
    }
    if let (Some(id), Some(kind)) = (text(event, "id"), text(event, "type")) {
        return Some(format!("{kind}-{id}"));
    }
    if let Some(b) = blob(event) {
        if let Some(cid) = text(b, "cid").filter(|c| c != "undefined") {
            return Some(format!("blob-{cid}"));
        }
        if let Some(id) = text(b, "blobId").or_else(|| text(b, "blob_id")) {
            return Some(format!("blob-id-{id}"));
        }
    }
    if let Some(m) = mention(event) {
        let source_blob = m.get("sourceBlob").or_else(|| m.get("source_blob"));
        let cid = source_blob
            .and_then(|b| text(b, "cid"))
            .filter(|c| c != "undefined");
        let target = text(m, "target");
        let kind = text(m, "mentionType")
            .or_else(|| text(m, "mention_type"))
            .unwrap_or_default();
        if let (Some(cid), Some(target)) = (cid, target) {
            return Some(format!("mention-{cid}-{kind}-{target}"));
        }
    }
    None
}

/// `activityFiringKey`: the key a firing is claimed under. A mention
/// without a mention type (`mention-<cid>--<target>`) fires as the blob
/// that made it.
pub fn firing_key(event: &Value) -> Option<String> {
    let key = event_key(event)?;
    if let Some(rest) = key.strip_prefix("mention-") {
        if let Some(at) = rest.find("--").filter(|at| *at > 0) {
            return Some(format!("blob-{}", &rest[..at]));
        }
    }
    Some(key)
}

/// `activityEventTimeMs`.
pub fn event_time_ms(event: &Value) -> Option<f64> {
    fn ts(value: Option<&Value>) -> Option<f64> {
        match value? {
            Value::Number(n) => n.as_f64().filter(|f| f.is_finite()),
            Value::String(s) => chrono::DateTime::parse_from_rfc3339(s)
                .ok()
                .map(|t| t.timestamp_millis() as f64),
            time @ Value::Object(_) => {
                let seconds = number(time, "seconds")?;
                let nanos = number(time, "nanos")
                    .or_else(|| number(time, "nanosSinceSecond"))
                    .unwrap_or(0.0);
                Some(seconds * 1000.0 + nanos / 1e6)
            }
            _ => None,
        }
    }
    if let Some(at) = number(event, "eventAtMs") {
        return Some(at);
    }
    if let Some(at) = ts(event.get("time")) {
        return Some(at);
    }
    match (ts(event.get("eventTime")), ts(event.get("observeTime"))) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// `activitySummary`: what a firing's session title and context say.
pub fn summary(event: &Value) -> String {
    if let Some(b) = blob(event) {
        let kind = text(b, "blobType")
            .or_else(|| text(b, "blob_type"))
            .unwrap_or_else(|| "activity".into());
        return match text(b, "resource") {
            Some(resource) if !resource.is_empty() => format!("{kind} on {resource}"),
            _ => kind,
        };
    }
    if let Some(m) = mention(event) {
        let target = text(m, "target").filter(|t| !t.is_empty());
        return match text(m, "source").filter(|s| !s.is_empty()) {
            Some(source) => format!(
                "Mention of {} from {source}",
                target.as_deref().unwrap_or("unknown target")
            ),
            None => format!(
                "Mention of {}",
                target.as_deref().unwrap_or("unknown target")
            ),
        };
    }
    let kind = text(event, "type").filter(|k| !k.is_empty());
    let name = event
        .get("target")
        .and_then(|t| t.get("metadata"))
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty());
    match (kind, name) {
        (kind, Some(name)) => format!("{} on {name}", kind.as_deref().unwrap_or("activity")),
        (Some(kind), None) => kind,
        (None, None) => "Seed activity".into(),
    }
}

/// Whether `event` matches a hypermedia trigger source.
pub fn matches_source(source: &Value, event: &Value) -> bool {
    match source["type"].as_str() {
        Some("document-comment") => document_comment(source, event),
        Some("user-mention") => {
            let accounts: Vec<String> = match source.get("mentionedAccounts") {
                Some(Value::Array(list)) => list
                    .iter()
                    .filter_map(Value::as_str)
                    .filter(|a| !a.is_empty())
                    .map(str::to_owned)
                    .collect(),
                _ => text(source, "mentionedAccount")
                    .filter(|a| !a.is_empty())
                    .into_iter()
                    .collect(),
            };
            let prefix = text(source, "resourcePrefix").filter(|p| !p.is_empty());
            accounts
                .iter()
                .any(|account| user_mention(account, prefix.as_deref(), event))
        }
        Some("site-update") => site_update(source, event),
        _ => false,
    }
}

/// `matchesActivityCriteria`, for runs waiting on activity: every named
/// criterion holds, and at least one is named.
pub fn matches_criteria(criteria: &Value, event: &Value) -> bool {
    let kind = text(criteria, "eventType");
    let resource = text(criteria, "resource");
    let author = text(criteria, "author");
    if kind.is_none() && resource.is_none() && author.is_none() {
        return false;
    }
    if kind.is_some_and(|k| text(event, "type").as_deref() != Some(&k)) {
        return false;
    }
    if author.is_some_and(|a| text(event, "author").as_deref() != Some(&a)) {
        return false;
    }
    if let Some(resource) = resource {
        let Some(actual) = text(event, "resource").or_else(|| text(event, "id")) else {
            return false;
        };
        return canonical_resource(&actual) == canonical_resource(&resource);
    }
    true
}

fn under(resource: &str, root: &str) -> bool {
    resource == root || resource.starts_with(&format!("{root}/"))
}

/// A resolved comment's target document, canonical.
fn comment_target(event: &Value) -> Option<String> {
    let from_target = event
        .get("target")
        .and_then(|t| t.get("id"))
        .and_then(|id| text(id, "id"))
        .map(|id| canonical_resource(&id))
        .filter(|id| !id.is_empty());
    if from_target.is_some() {
        return from_target;
    }
    let comment = event.get("comment")?;
    let account = text(comment, "targetAccount").filter(|a| !a.is_empty())?;
    let path = text(comment, "targetPath")
        .map(|p| p.trim_start_matches('/').to_owned())
        .filter(|p| !p.is_empty())
        .map(|p| format!("/{p}"))
        .unwrap_or_default();
    Some(canonical_resource(&format!("hm://{account}{path}"))).filter(|id| !id.is_empty())
}

fn document_comment(source: &Value, event: &Value) -> bool {
    let root = canonical_resource(source["resource"].as_str().unwrap_or_default());
    let author = text(source, "author").filter(|a| !a.is_empty());
    if text(event, "type").as_deref() == Some("comment") {
        if let Some(author) = &author {
            let scope = event
                .get("author")
                .filter(|a| a.is_object())
                .unwrap_or(event);
            if !contains(scope, author, 0) {
                return false;
            }
        }
        return match comment_target(event) {
            Some(target) => under(&target, &root),
            None => contains(event, &root, 0),
        };
    }
    let Some(b) = blob(event) else {
        return false;
    };
    let kind = text(b, "blobType").or_else(|| text(b, "blob_type"));
    if kind.map(|k| k.to_lowercase()).as_deref() != Some("comment") {
        return false;
    }
    if let Some(author) = &author {
        let by = text(b, "author").or_else(|| text(event, "account"));
        if by.as_deref() != Some(author.as_str()) {
            return false;
        }
    }
    match text(b, "resource") {
        Some(resource) => under(&canonical_resource(&resource), &root),
        None => false,
    }
}

/// `accountFromLink`: the account an `hm://<uid>` or `hm://<uid>/:profile`
/// link names; a link to a document names none.
fn account_of_link(link: &str) -> Option<String> {
    let rest = link.trim().strip_prefix("hm://")?;
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let segments: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        [uid] => Some((*uid).to_owned()),
        [uid, ":profile", ..] => Some((*uid).to_owned()),
        _ => None,
    }
}

/// `blocksMention`: an Embed annotation anywhere in the blocks names the
/// account.
fn blocks_mention(nodes: Option<&Value>, account: &str, depth: usize) -> bool {
    let Some(Value::Array(nodes)) = nodes else {
        return false;
    };
    depth <= 64
        && nodes.iter().any(|node| {
            let annotated = node
                .get("block")
                .and_then(|b| b.get("annotations"))
                .and_then(Value::as_array)
                .is_some_and(|annotations| {
                    annotations.iter().any(|a| {
                        a["type"].as_str() == Some("Embed")
                            && a["link"]
                                .as_str()
                                .and_then(account_of_link)
                                .is_some_and(|linked| linked == account)
                    })
                });
            annotated || blocks_mention(node.get("children"), account, depth + 1)
        })
}

/// `accountFromIdRecord`: the account an unpacked id names when it is the
/// account itself or its profile.
fn account_of_id(id: Option<&Value>) -> Option<String> {
    let id = id?;
    let uid = text(id, "uid").filter(|u| !u.is_empty())?;
    match id.get("path").and_then(Value::as_array) {
        None => Some(uid),
        Some(path) if path.is_empty() => Some(uid),
        Some(path) if path[0].as_str() == Some(":profile") => Some(uid),
        Some(_) => None,
    }
}

/// A resolved event's ids start with the prefix, or some string in it
/// holds the prefix.
fn prefix_ok(event: &Value, prefix: Option<&str>) -> bool {
    let Some(prefix) = prefix else {
        return true;
    };
    let candidates = ["source", "target", "commentId"]
        .iter()
        .filter_map(|field| {
            let id = event.get(*field)?.get("id")?;
            match id {
                Value::Object(_) => text(id, "id"),
                Value::String(s) => Some(s.clone()),
                _ => None,
            }
        });
    candidates.into_iter().any(|c| c.starts_with(prefix)) || contains(event, prefix, 0)
}

fn user_mention(account: &str, prefix: Option<&str>, event: &Value) -> bool {
    if let Some(m) = mention(event) {
        let target = text(m, "target").unwrap_or_default();
        let targets_account = target == account
            || target == format!("hm://{account}")
            || target.starts_with(&format!("hm://{account}/"));
        if !targets_account {
            return false;
        }
        let Some(prefix) = prefix else {
            return true;
        };
        return [
            text(m, "source"),
            text(m, "sourceDocument").or_else(|| text(m, "source_document")),
            Some(target),
        ]
        .into_iter()
        .flatten()
        .any(|v| !v.is_empty() && v.starts_with(prefix));
    }
    match text(event, "type").as_deref() {
        Some("comment") => {
            let content = event.get("comment").and_then(|c| c.get("content"));
            blocks_mention(content, account, 0) && prefix_ok(event, prefix)
        }
        Some("citation") => {
            let target = event.get("target").and_then(|t| t.get("id"));
            account_of_id(target).as_deref() == Some(account) && prefix_ok(event, prefix)
        }
        _ => false,
    }
}

/// The resource a site update concerns, canonical.
fn site_resource(event: &Value) -> Option<String> {
    if let Some(resource) = blob(event).and_then(|b| text(b, "resource")) {
        return Some(canonical_resource(&resource));
    }
    for path in [["docId", "id"], ["target", "id"]] {
        let found = event.get(path[0]).and_then(|v| v.get(path[1]));
        let id = match (path[0], found) {
            ("docId", Some(_)) => event.get("docId").and_then(|d| text(d, "id")),
            ("target", Some(id)) => text(id, "id"),
            _ => None,
        };
        if let Some(id) = id {
            return Some(canonical_resource(&id));
        }
    }
    if let Some(target) = comment_target(event) {
        return Some(target);
    }
    let document = event.get("document")?;
    let account = text(document, "account").filter(|a| !a.is_empty())?;
    let path = text(document, "path")
        .map(|p| p.trim_start_matches('/').to_owned())
        .filter(|p| !p.is_empty())
        .map(|p| format!("/{p}"))
        .unwrap_or_default();
    Some(canonical_resource(&format!("hm://{account}{path}")))
}

/// `typeMatches`: the same name, or one of its aliases.
fn type_matches(configured: &str, actual: &str) -> bool {
    let (c, a) = (
        configured.trim().to_lowercase(),
        actual.trim().to_lowercase(),
    );
    if c.is_empty() || a.is_empty() {
        return false;
    }
    if c == a {
        return true;
    }
    let aliases: &[&str] = match c.as_str() {
        "change" => &["doc-update", "document-update", "ref"],
        "ref" => &["doc-update", "document-update", "change"],
        "comment" => &["comment"],
        "doc-update" => &["change", "ref", "document-update"],
        "document-update" => &["change", "ref", "doc-update"],
        _ => &[],
    };
    aliases.contains(&a.as_str())
}

fn site_update(source: &Value, event: &Value) -> bool {
    let prefix = source["resourcePrefix"].as_str().unwrap_or_default();
    match site_resource(event) {
        Some(resource) => {
            if !resource.starts_with(prefix) {
                return false;
            }
        }
        None => {
            if !contains(event, prefix, 0) {
                return false;
            }
        }
    }
    let wanted: Vec<&str> = source["eventTypes"]
        .as_array()
        .map(|types| types.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if wanted.is_empty() {
        return true;
    }
    let actual: Vec<String> = [
        text(event, "type"),
        event
            .get("data")
            .and_then(|d| d.get("case"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        blob(event).and_then(|b| text(b, "blobType").or_else(|| text(b, "blob_type"))),
    ]
    .into_iter()
    .flatten()
    .filter(|t| !t.is_empty())
    .collect();
    wanted
        .iter()
        .any(|c| actual.iter().any(|a| type_matches(c, a)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn comment_event(author: &str, target: &str, mentions: &[&str]) -> Value {
        let annotations: Vec<Value> = mentions
            .iter()
            .map(|m| json!({"type": "Embed", "starts": [0], "ends": [1], "link": m}))
            .collect();
        json!({"id": "bafycomment", "type": "comment", "feedEventId": "blob-bafycomment",
               "author": {"id": {"id": format!("hm://{author}"), "uid": author, "path": []},
                          "metadata": {"name": "Bob"}},
               "comment": {"id": format!("{author}/ztsid"), "author": author,
                           "targetAccount": "z6MkDoc", "targetPath": "/spec",
                           "content": [{"block": {"type": "Paragraph", "id": "c1",
                                                  "text": "\u{fffc} look", "annotations": annotations},
                                        "children": []}]},
               "commentId": {"id": format!("hm://{author}/ztsid")},
               "target": {"id": {"id": target, "uid": "z6MkDoc", "path": ["spec"]},
                          "metadata": {"name": "Spec"}},
               "eventAtMs": 1_767_225_600_000u64})
    }

    #[test]
    fn keys_and_the_citation_twin() {
        let raw = json!({"newBlob": {"cid": "bafycomment", "blobType": "Comment",
                                     "author": "z6MkBob", "resource": "hm://z6Mkdoc/spec"}});
        assert_eq!(event_key(&raw).as_deref(), Some("blob-bafycomment"));
        assert_eq!(summary(&raw), "Comment on hm://z6Mkdoc/spec");
        let twin = json!({"feedEventId": "mention-bafycomment--hm://z6MkAlice/:profile",
                          "type": "citation"});
        assert_eq!(firing_key(&twin).as_deref(), Some("blob-bafycomment"));
        let typed = json!({"newMention": {"sourceBlob": {"cid": "bafyx"}, "target": "hm://z6MkAlice",
                                          "mentionType": "embed"}});
        assert_eq!(
            event_key(&typed).as_deref(),
            Some("mention-bafyx-embed-hm://z6MkAlice")
        );
        assert_eq!(firing_key(&typed), event_key(&typed));
        assert_eq!(
            event_key(&json!({"id": 7, "type": "doc-update"})).as_deref(),
            Some("doc-update-7")
        );
        assert_eq!(event_key(&json!({"x": 1})), None);
        assert_eq!(
            event_time_ms(&json!({"time": {"seconds": "10", "nanos": 5_000_000}})),
            Some(10_005.0)
        );
        assert_eq!(
            summary(&comment_event("z6MkBob", "hm://z6MkDoc/spec", &[])),
            "comment on Spec"
        );
    }

    #[test]
    fn document_comments_match_the_document_and_its_children() {
        let source = json!({"type": "document-comment", "resource": "hm://z6MkDoc/spec/"});
        assert!(matches_source(
            &source,
            &comment_event("z6MkBob", "hm://z6MkDoc/spec?v=1", &[])
        ));
        assert!(matches_source(
            &source,
            &comment_event("z6MkBob", "hm://z6MkDoc/spec/part", &[])
        ));
        assert!(!matches_source(
            &source,
            &comment_event("z6MkBob", "hm://z6MkDoc/specs", &[])
        ));
        let by = json!({"type": "document-comment", "resource": "hm://z6MkDoc/spec",
                        "author": "z6MkCarol"});
        assert!(!matches_source(
            &by,
            &comment_event("z6MkBob", "hm://z6MkDoc/spec", &[])
        ));
        let raw = json!({"newBlob": {"cid": "c", "blobType": "Comment", "author": "z6MkBob",
                                     "resource": "https://hyper.media/hm/z6MkDoc/spec"}});
        assert!(matches_source(&source, &raw));
        let not_comment = json!({"newBlob": {"cid": "c", "blobType": "Ref",
                                             "resource": "hm://z6MkDoc/spec"}});
        assert!(!matches_source(&source, &not_comment));
    }

    #[test]
    fn mentions_match_once_by_comment_or_citation_never_a_document_link() {
        let source = json!({"type": "user-mention", "mentionedAccounts": ["z6MkAlice"]});
        let mentioned = comment_event("z6MkBob", "hm://z6MkDoc/spec", &["hm://z6MkAlice"]);
        assert!(matches_source(&source, &mentioned));
        let profile = comment_event("z6MkBob", "hm://z6MkDoc/spec", &["hm://z6MkAlice/:profile"]);
        assert!(matches_source(&source, &profile));
        let document = comment_event("z6MkBob", "hm://z6MkDoc/spec", &["hm://z6MkAlice/notes"]);
        assert!(!matches_source(&source, &document));
        let citation = json!({"type": "citation", "citationType": "c",
                              "target": {"id": {"uid": "z6MkAlice", "path": [":profile"]}}});
        assert!(matches_source(&source, &citation));
        let owned = json!({"type": "citation", "citationType": "d",
                           "target": {"id": {"uid": "z6MkAlice", "path": ["notes"]}}});
        assert!(!matches_source(&source, &owned));
        let raw = json!({"newMention": {"target": "hm://z6MkAlice", "source": "hm://z6MkBob/x"}});
        assert!(matches_source(&source, &raw));
        let prefixed = json!({"type": "user-mention", "mentionedAccounts": ["z6MkAlice"],
                              "resourcePrefix": "hm://z6MkOther"});
        assert!(!matches_source(&prefixed, &raw));
    }

    #[test]
    fn site_updates_match_by_prefix_and_type_aliases() {
        let source = json!({"type": "site-update", "resourcePrefix": "hm://z6MkSite",
                            "eventTypes": ["change"]});
        let update = json!({"type": "doc-update", "docId": {"id": "hm://z6MkSite/blog/post"}});
        assert!(matches_source(&source, &update));
        let elsewhere = json!({"type": "doc-update", "docId": {"id": "hm://z6MkOther/post"}});
        assert!(!matches_source(&source, &elsewhere));
        let comment = comment_event("z6MkBob", "hm://z6MkSite/blog", &[]);
        assert!(
            !matches_source(&source, &comment),
            "a comment is not a change"
        );
        let any = json!({"type": "site-update", "resourcePrefix": "hm://z6MkSite"});
        assert!(matches_source(&any, &comment));
        let criteria = json!({"eventType": "doc-update", "resource": "hm://z6MkSite/blog/post/"});
        let with_resource = json!({"type": "doc-update", "resource": "hm://z6MkSite/blog/post"});
        assert!(matches_criteria(&criteria, &with_resource));
        assert!(!matches_criteria(&json!({}), &with_resource));
    }
}
