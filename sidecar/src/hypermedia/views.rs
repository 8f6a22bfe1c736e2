//! The reads that are not one resource: an account's profile
//! (`hm://<uid>/:profile`, or `hm://<site>/:profile/<account>`), a
//! document's children (`…/:directory`, one `Query`), and the activity
//! feed (`activity:`, one `ListEvents`), shaped as the reference shapes
//! them.

use agentos_protocol::seed::hm_id::{pack_base_id, HmId};
use serde_json::{json, Map, Value};

use super::client::{Param, QueryInput};
use super::read::{bounded, Hypermedia};
use super::HmError;

/// Events a profile shows.
const PROFILE_EVENTS: u64 = 10;

fn malformed(key: &str, message: &str) -> HmError {
    HmError::Malformed {
        key: key.to_owned(),
        message: message.to_owned(),
    }
}

/// A JSON array of strings, as a query parameter.
fn strings(values: &[String]) -> Param {
    Param::Json(Value::from(values.to_vec()).to_string())
}

/// `hmIdPathToEntityQueryPath`: `/a/b`, or empty for the root.
fn entity_path(path: &[String]) -> String {
    path.iter()
        .filter(|s| !s.is_empty())
        .map(|s| format!("/{s}"))
        .collect()
}

impl Hypermedia {
    /// `readProfileHypermedia`.
    pub(super) async fn profile(&self, requested: &str, id: &HmId) -> Result<Value, HmError> {
        let uid = id
            .path
            .get(1)
            .filter(|s| !s.is_empty())
            .cloned()
            .unwrap_or_else(|| id.uid.clone());
        let account = self
            .client
            .query("Account", &QueryInput::Id(uid.clone()))
            .await?;
        if !matches!(
            account["type"].as_str(),
            Some("account" | "account-not-found")
        ) {
            return Err(malformed("Account", "not an account result"));
        }
        let events = QueryInput::Fields(vec![
            ("pageSize", Param::Text(PROFILE_EVENTS.to_string())),
            ("filterAuthors", strings(std::slice::from_ref(&uid))),
            ("currentAccount", Param::Text(uid.clone())),
        ]);
        let contacts = QueryInput::Value(uid.clone());
        let capabilities = QueryInput::TargetId(pack_base_id(&uid, &[]));
        let (activity, contacts, capabilities) = tokio::join!(
            self.client.query("ListEvents", &events),
            self.client.query("AccountContacts", &contacts),
            self.client.query("ListCapabilities", &capabilities),
        );
        let caught = |answer: Result<Value, HmError>| {
            answer.unwrap_or_else(|e| json!({"error": e.to_string()}))
        };
        let (activity, contacts, capabilities) =
            (caught(activity), caught(contacts), caught(capabilities));
        let name = match account["type"].as_str() {
            Some("account") => account["metadata"]["name"]
                .as_str()
                .filter(|n| !n.is_empty())
                .unwrap_or(&uid)
                .to_owned(),
            _ => uid.clone(),
        };
        let mut lines = vec![
            format!("# {name}"),
            String::new(),
            format!("Profile: [{name}](hm://{uid}/:profile)"),
            format!("Account UID: `{uid}`"),
        ];
        if let Some(contacts) = contacts.as_array() {
            lines.push(format!("Contacts/related contact keys: {}", contacts.len()));
        }
        if let Some(capabilities) = capabilities["capabilities"].as_array() {
            lines.push(format!(
                "Capabilities/related access keys: {}",
                capabilities.len()
            ));
        }
        lines.push(format!(
            "Recent activity events loaded: {}",
            activity["events"].as_array().map_or(0, Vec::len)
        ));
        Ok(json!({
            "type": "hypermedia_profile",
            "requestedId": requested,
            "id": format!("hm://{uid}/:profile"),
            "accountUid": uid,
            "server": self.client.server(),
            "format": "markdown",
            "title": name,
            "account": account,
            "activity": activity,
            "contacts": contacts,
            "capabilities": capabilities,
            "markdown": lines.join("\n"),
        }))
    }

    /// `readDirectoryHypermedia`: the document's children, unsorted (the
    /// server's path sort answers nothing, the reference notes).
    pub(super) async fn directory(&self, requested: &str, id: &HmId) -> Result<Value, HmError> {
        let include = json!({"space": id.uid, "path": entity_path(&id.path), "mode": "Children"});
        let includes = format!(
            "[{{\"space\":{},\"path\":{},\"mode\":\"Children\"}}]",
            include["space"], include["path"]
        );
        let answer = self
            .client
            .query(
                "Query",
                &QueryInput::Fields(vec![("includes", Param::Json(includes))]),
            )
            .await?;
        let parent = id.pack().ok_or_else(|| {
            HmError::InvalidAddress(format!("Invalid Hypermedia ID: {requested}"))
        })?;
        let results = match &answer {
            Value::Null => &[][..],
            Value::Object(result) => result
                .get("results")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .ok_or_else(|| malformed("Query", "no results"))?,
            _ => return Err(malformed("Query", "not an object")),
        };
        let mut documents = Vec::new();
        let mut lines = vec![format!("# Directory of {parent}"), String::new()];
        for info in results {
            let child_id = info["id"]["id"].as_str().unwrap_or_default().to_owned();
            let path: Vec<String> = info["path"]
                .as_array()
                .map(|p| {
                    p.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            let path = entity_path(&path);
            let text = |key: &str| {
                info["metadata"][key]
                    .as_str()
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
            };
            let (name, summary) = (text("name"), text("summary"));
            let children = info["activitySummary"]["childrenCount"].as_f64();
            let mut entry = Map::new();
            entry.insert("id".into(), json!(child_id));
            entry.insert("path".into(), json!(path));
            if let Some(name) = &name {
                entry.insert("name".into(), json!(name));
            }
            if let Some(summary) = &summary {
                entry.insert("summary".into(), json!(summary));
            }
            if let Some(time) = update_time(&info["updateTime"]) {
                entry.insert("updateTime".into(), json!(time));
            }
            if let Some(n) = info["activitySummary"].get("childrenCount") {
                entry.insert("childrenCount".into(), n.clone());
            }
            let label = name
                .clone()
                .or_else(|| Some(path.clone()).filter(|p| !p.is_empty()))
                .unwrap_or_else(|| child_id.clone());
            let mut line = format!("- [{label}]({child_id})");
            if let Some(n) = children {
                line.push_str(&format!(" ({n} children)"));
            }
            if let Some(summary) = summary {
                line.push_str(&format!(" — {summary}"));
            }
            lines.push(line);
            documents.push(Value::Object(entry));
        }
        if documents.is_empty() {
            lines.push("(no child documents)".into());
        }
        Ok(json!({
            "type": "hypermedia_directory",
            "requestedId": requested,
            "id": format!("{parent}/:directory"),
            "server": self.client.server(),
            "format": "markdown",
            "view": "directory",
            "documents": documents,
            "markdown": bounded(lines.join("\n")),
        }))
    }

    /// `call search`: the server's `Search`, as the reference's callable
    /// asks it (from `perspective`, the agent's owner) and shows it.
    pub async fn search(&self, input: &Value, perspective: &str) -> Result<Value, HmError> {
        let query = input["query"].as_str().map(str::trim).unwrap_or("");
        if query.is_empty() {
            return Err(HmError::InvalidInput("Search query is required".into()));
        }
        // Anything but the two named kinds is the reference's default, hybrid.
        let (search_type, code) = match input["searchType"].as_str() {
            Some("keyword") => ("keyword", 0),
            Some("semantic") => ("semantic", 1),
            _ => ("hybrid", 2),
        };
        let include_body = input["includeBody"].as_bool().unwrap_or(false);
        let bounded = |value: &Value, fallback: i64, min: i64, max: i64| -> i64 {
            value
                .as_f64()
                .filter(|f| f.is_finite())
                .map_or(fallback, |f| (f.floor() as i64).clamp(min, max))
        };
        let page_size = bounded(
            &input["pageSize"],
            if query.chars().count() < 3 { 30 } else { 20 },
            1,
            50,
        );
        let context_size = bounded(&input["contextSize"], 48, 0, 512);
        let account = match input["accountUid"].as_str() {
            Some(uid) => Param::Text(uid.to_owned()),
            None => Param::Absent,
        };
        let answer = self
            .client
            .query(
                "Search",
                &QueryInput::Fields(vec![
                    ("query", Param::Text(query.to_owned())),
                    ("accountUid", account),
                    ("includeBody", Param::Text(include_body.to_string())),
                    ("contextSize", Param::Text(context_size.to_string())),
                    ("perspectiveAccountUid", Param::Text(perspective.to_owned())),
                    ("searchType", Param::Text(code.to_string())),
                    ("pageSize", Param::Text(page_size.to_string())),
                ]),
            )
            .await?;
        let entities = answer["entities"].as_array().map_or(&[][..], Vec::as_slice);
        let results: Vec<Value> = entities
            .iter()
            .take(page_size as usize)
            .map(|entity| {
                let url = packed_json_id(&entity["id"]).unwrap_or_default();
                let title = entity["title"]
                    .as_str()
                    .filter(|t| !t.is_empty())
                    .map_or_else(|| url.clone(), str::to_owned);
                let mut result = json!({
                    "title": title, "url": url,
                    "type": entity["type"].as_str().unwrap_or(""),
                    "parentNames": entity["parentNames"].as_array().cloned().unwrap_or_default(),
                });
                if let Some(time) = entity["versionTime"].as_str() {
                    result["versionTime"] = json!(time);
                }
                result
            })
            .collect();
        let yes_no = if include_body { "yes" } else { "no" };
        let plural = if results.len() == 1 { "" } else { "s" };
        let markdown = if results.is_empty() {
            format!(
                "No results found for \"{query}\" (search type: {search_type}, include body: {yes_no})."
            )
        } else {
            let mut lines = vec![
                format!(
                    "Search results for \"{query}\" ({} result{plural}, search type: {search_type}, include body: {yes_no})",
                    results.len()
                ),
                String::new(),
            ];
            for (i, result) in results.iter().enumerate() {
                let url = result["url"].as_str().unwrap_or("");
                lines.push(format!(
                    "{}. [{}]({url})",
                    i + 1,
                    result["title"].as_str().unwrap_or("")
                ));
                lines.push(format!(
                    "   - Type: {}",
                    result["type"].as_str().unwrap_or("")
                ));
                let parents: Vec<String> = result["parentNames"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| p.as_str().map_or_else(|| p.to_string(), str::to_owned))
                    .collect();
                if !parents.is_empty() {
                    lines.push(format!("   - Parents: {}", parents.join(" / ")));
                }
                if let Some(time) = result["versionTime"].as_str() {
                    lines.push(format!("   - Updated: {time}"));
                }
                lines.push(format!("   - URL: {url}"));
                lines.push(String::new());
            }
            lines.join("\n")
        };
        let summary = if results.is_empty() {
            format!("No results found for \"{query}\".")
        } else {
            format!("Found {} result{plural} for \"{query}\".", results.len())
        };
        Ok(json!({
            "summary": summary, "markdown": markdown, "query": query,
            "searchType": search_type, "includeBody": include_body, "results": results,
        }))
    }

    /// `read activity:`: one page of the activity feed, as the account
    /// sees it. `options` may name `pageSize` (1 to 50), `pageToken`,
    /// `trustedOnly`, `authors`, `eventTypes` and `resource`.
    pub async fn activity(&self, account: &str, options: &Value) -> Result<Value, HmError> {
        let texts = |key: &str| -> Option<Vec<String>> {
            options[key].as_array().map(|items| {
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
        };
        let mut fields = Vec::new();
        if let Some(size) = options["pageSize"].as_f64().filter(|n| n.is_finite()) {
            fields.push((
                "pageSize",
                Param::Text((size.floor().clamp(1.0, 50.0) as u64).to_string()),
            ));
        }
        if let Some(token) = options["pageToken"].as_str() {
            fields.push(("pageToken", Param::Text(token.to_owned())));
        }
        if let Some(trusted) = options["trustedOnly"].as_bool() {
            fields.push(("trustedOnly", Param::Text(trusted.to_string())));
        }
        if let Some(authors) = texts("authors") {
            fields.push(("filterAuthors", strings(&authors)));
        }
        if let Some(types) = texts("eventTypes") {
            fields.push(("filterEventType", strings(&types)));
        }
        if let Some(resource) = options["resource"].as_str() {
            fields.push(("filterResource", Param::Text(resource.to_owned())));
        }
        fields.push(("currentAccount", Param::Text(account.to_owned())));
        let answer = self
            .client
            .query("ListEvents", &QueryInput::Fields(fields))
            .await?;
        let (Some(events), Some(token)) = (
            answer["events"].as_array(),
            answer["nextPageToken"].as_str(),
        ) else {
            return Err(malformed("ListEvents", "no events and page token"));
        };
        if !events.iter().all(Value::is_object) {
            return Err(malformed("ListEvents", "an event is not an object"));
        }
        let n = events.len();
        Ok(json!({
            "summary": format!("Loaded {n} activity feed event{}.", if n == 1 { "" } else { "s" }),
            "events": events,
            "nextPageToken": token,
        }))
    }
}

impl Hypermedia {
    /// How the activity monitor reads feeds.
    pub fn activity_pace(&self) -> super::read::ActivityPace {
        self.activity
    }

    /// The server feeds are read from: a watermark's other half.
    pub fn server(&self) -> &str {
        self.client.server()
    }

    /// One page of the feed as `account` sees it, in the order the server
    /// observed the events (newest first), within 20 s: the events and the
    /// next page's token (none at the end).
    pub async fn feed_page(
        &self,
        account: &str,
        page_token: Option<&str>,
    ) -> Result<(Vec<Value>, Option<String>), HmError> {
        let mut fields = vec![("pageSize", Param::Text(self.activity.page_size.to_string()))];
        if let Some(token) = page_token {
            fields.push(("pageToken", Param::Text(token.to_owned())));
        }
        fields.push(("currentAccount", Param::Text(account.to_owned())));
        fields.push(("order", Param::Text("observed".into())));
        let input = QueryInput::Fields(fields);
        let request = self.client.query("ListEvents", &input);
        let answer = tokio::time::timeout(FEED_REQUEST_DEADLINE, request)
            .await
            .map_err(|_| HmError::Timeout {
                key: "ListEvents".into(),
                after_ms: FEED_REQUEST_DEADLINE.as_millis() as u64,
            })??;
        // As strict as Seed's client: a page is `{events: [...]}`.
        let Some(Value::Array(events)) = answer.get("events") else {
            return Err(HmError::Malformed {
                key: "ListEvents".into(),
                message: "expected {events: [...]}".into(),
            });
        };
        let events = events.clone();
        let token = answer["nextPageToken"]
            .as_str()
            .filter(|t| !t.is_empty())
            .map(str::to_owned);
        Ok((events, token))
    }
}

/// One feed request of the activity monitor, at most.
const FEED_REQUEST_DEADLINE: std::time::Duration = std::time::Duration::from_secs(20);

/// A document info's update time: its text, or `{seconds}` as an ISO
/// time.
fn update_time(time: &Value) -> Option<String> {
    if let Some(text) = time.as_str() {
        return Some(text.to_owned());
    }
    let seconds = match &time["seconds"] {
        Value::String(s) => s.parse::<i64>().ok()?,
        Value::Number(n) => n.as_i64()?,
        _ => return None,
    };
    let when = chrono::DateTime::from_timestamp(seconds, 0)?;
    Some(when.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
}

/// `packHmId` of an id as the server sends it (`{uid, path, version,
/// blockRef, latest, …}`).
fn packed_json_id(id: &Value) -> Option<String> {
    let uid = id["uid"].as_str().filter(|u| !u.is_empty())?;
    let path: Vec<String> = id["path"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect();
    let text = |key: &str| {
        id[key]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let version = text("version");
    HmId {
        id: pack_base_id(uid, &path),
        uid: uid.to_owned(),
        path,
        latest: id["latest"].as_bool().unwrap_or(version.is_none()),
        version,
        block_ref: text("blockRef"),
        block_range: None,
        hostname: None,
        scheme: "hm".into(),
    }
    .pack()
}
