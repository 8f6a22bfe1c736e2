//! Publishing through the `write` verb, against the scripted hypermedia
//! server (real HTTP; it verifies every blob's name and signature and
//! makes what is published readable, as a Seed node does): documents
//! created (their parent checked), read back, updated from `ListChanges`
//! state with only what changed, a version conflict answered; comments
//! and replies; `hm://` links checked first; `dryRun` publishing nothing;
//! the publish grant and the signer rules in the reference's words; files
//! to IPFS; a failing server as a typed error, its write sent once; a
//! delegate writing into another account's space under the capability the
//! server lists, and the lone fork, redirect and alias.

#[path = "common/builtin.rs"]
mod builtin;
mod common;

use agentos_tests::hm_server::{Fault, HmServer};
use agentos_tests::provider_server::Flavor;
use builtin::{json_of, ok, world_sections, World};
use serde_json::{json, Value};

/// A world publishing to `server`, its agent signing as a created
/// identity ("Scribe"); answers the world, the session and the account.
async fn signing_world(server: &HmServer) -> (World, String, String) {
    let w = world_sections(
        Flavor::Anthropic,
        json!({"hypermedia": {"serverUrl": server.url(), "readTimeoutMs": 3000}}),
    )
    .await;
    let created = w
        .act(json!({"_": "CreateSigningIdentity", "label": "Scribe"}))
        .await;
    ok(&created);
    let identity = json_of(&created.body)["identity"].clone();
    let mut definition = builtin::definition(None);
    definition["signingKeys"] = json!([identity["name"]]);
    ok(&w
        .act(json!({"_": "UpdateAgent", "agentId": w.agent_id, "definition": definition}))
        .await);
    let session = w
        .act(json!({"_": "CreateSession", "agentId": w.agent_id}))
        .await;
    ok(&session);
    let account = identity["accountId"].as_str().expect("account").to_owned();
    (w, session.text("sessionId"), account)
}

async fn write(w: &World, session: &str, input: Value) -> Result<Value, String> {
    let answer = w.invoke(session, "write", input).await;
    ok(&answer);
    let body = json_of(&answer.body);
    match body.get("error").and_then(Value::as_str) {
        Some(error) => Err(error.to_owned()),
        None => Ok(body["output"].clone()),
    }
}

/// The first blob of the last publish, as DAG-JSON.
fn last_blob(server: &HmServer) -> Value {
    server.published().last().expect("a publish")[0]
        .value
        .clone()
        .expect("cbor")
}

async fn read(w: &World, session: &str, address: &str) -> Value {
    let answer = w.invoke(session, "read", json!({"address": address})).await;
    ok(&answer);
    json_of(answer.field("output"))
}

#[tokio::test]
async fn documents_are_created_read_back_and_updated() {
    let server = HmServer::start().await;
    let (w, session, account) = signing_world(&server).await;
    let notes = format!("hm://{account}/notes");
    let before = server.published().len();

    // A dry run checks and publishes nothing.
    let dry = write(
        &w,
        &session,
        json!({"address": notes, "content": "Hello", "options": {"name": "Notes"},
               "dryRun": true}),
    )
    .await
    .expect("a dry run");
    assert_eq!(dry["dryRun"], true);
    assert_eq!(dry["id"], notes.as_str());
    assert_eq!(server.published().len(), before);

    let created = write(
        &w,
        &session,
        json!({"address": notes,
               "content": format!("# Plan\n\nFirst **bold** line, see [home](hm://{account}).\n\n- one\n- two\n"),
               "options": {"name": "Notes"}}),
    )
    .await
    .expect("created");
    assert_eq!(created["type"], "hypermedia_write_result");
    assert_eq!(created["command"], "document.create");
    assert_eq!(created["message"], "document.create completed");
    assert_eq!(
        created["signer"],
        json!({"profileName": "Scribe", "publicKey": account})
    );
    assert_eq!(created["id"], notes.as_str());
    let published = server.published();
    let blobs = published.last().expect("a publish");
    assert_eq!(blobs.len(), 3, "genesis, change, ref");
    assert_eq!(blobs[1].cid, created["version"].as_str().unwrap_or(""));
    let ops = &blobs[1].value.as_ref().expect("cbor")["body"]["ops"];
    assert_eq!(ops[0]["type"], "SetAttributes");
    assert_eq!(
        ops[0]["attrs"][0],
        json!({"key": ["name"], "value": "Notes"})
    );

    // Read back as any reader reads it.
    let doc = read(&w, &session, &notes).await;
    assert_eq!(doc["title"], "Notes");
    let markdown = doc["markdown"].as_str().unwrap_or_default();
    assert!(markdown.contains("First **bold** line"), "{markdown}");
    assert!(markdown.contains("- two"), "{markdown}");

    // A nested path needs its parent.
    let orphan = write(
        &w,
        &session,
        json!({"address": format!("hm://{account}/notes/deep/x"), "content": "x",
               "options": {"name": "X"}}),
    )
    .await
    .expect_err("no parent");
    assert!(
        orphan.ends_with("Cannot create document at /notes/deep/x: parent path /notes/deep does not exist. Create the parent document first."),
        "{orphan}"
    );
    write(
        &w,
        &session,
        json!({"address": format!("hm://{account}/notes/sub"), "content": "child",
               "options": {"name": "Sub"}}),
    )
    .await
    .expect("a child of an existing document");

    // An update replaces what changed, after the document's head.
    let update = write(
        &w,
        &session,
        json!({"address": notes, "content": "# Plan\n\nA new body.\n",
               "options": {"action": "update", "name": "Notes v2"}}),
    )
    .await
    .expect("updated");
    assert_eq!(update["command"], "document.update");
    let change = server.published().last().expect("a publish")[0].clone();
    let change = change.value.expect("cbor");
    assert_eq!(change["deps"][0]["/"], created["version"]);
    assert_eq!(change["depth"], 2);
    let doc = read(&w, &session, &notes).await;
    assert_eq!(doc["title"], "Notes v2");
    let markdown = doc["markdown"].as_str().unwrap_or_default();
    assert!(
        markdown.contains("A new body.") && !markdown.contains("First"),
        "{markdown}"
    );

    // A stale expected version is answered as a conflict, not published.
    let count = server.published().len();
    let conflict = write(
        &w,
        &session,
        json!({"address": notes, "content": "late",
               "options": {"action": "update",
                           "input": {"expectedVersion": created["version"]}}}),
    )
    .await
    .expect("answered");
    assert_eq!(conflict["type"], "hypermedia_write_error");
    assert_eq!(conflict["message"], "Document version conflict");
    assert_eq!(conflict["details"]["currentVersion"], update["version"]);
    assert_eq!(server.published().len(), count);
}

#[tokio::test]
async fn links_are_checked_before_anything_is_published() {
    let server = HmServer::start().await;
    let (w, session, account) = signing_world(&server).await;
    let count = server.published().len();
    let address = format!("hm://{account}/links");
    let malformed = write(
        &w,
        &session,
        json!({"address": address, "content": "see [x](hm://not-a-key/doc)",
               "options": {"name": "Links"}}),
    )
    .await
    .expect_err("malformed");
    assert!(
        malformed.ends_with("Content contains malformed hm:// links — fix or remove them before publishing: hm://not-a-key/doc"),
        "{malformed}"
    );
    let missing = format!("hm://{account}/nothing-here");
    let broken = write(
        &w,
        &session,
        json!({"address": address, "content": format!("see [x]({missing})"),
               "options": {"name": "Links"}}),
    )
    .await
    .expect_err("broken");
    assert!(
        broken.contains(&format!(
            "Content links to hm:// resources that do not exist on the server: {missing}."
        )),
        "{broken}"
    );
    // Skipping the lookup is the caller's choice.
    write(
        &w,
        &session,
        json!({"address": address, "content": format!("see [x]({missing})"),
               "options": {"name": "Links", "skipLinkCheck": true}, "dryRun": true}),
    )
    .await
    .expect("skipped");
    assert_eq!(server.published().len(), count);
}

#[tokio::test]
async fn comments_and_replies_are_published_as_seeds_comments() {
    let server = HmServer::start().await;
    let (w, session, account) = signing_world(&server).await;
    let home = format!("hm://{account}");
    let comment = write(
        &w,
        &session,
        json!({"address": home, "content": "Nice *work*.", "options": {"action": "comment"}}),
    )
    .await
    .expect("commented");
    assert_eq!(comment["command"], "comment.create");
    let comment_id = comment["commentId"].as_str().unwrap_or_default().to_owned();
    assert!(
        comment_id.starts_with(&format!("{account}/z")),
        "{comment_id}"
    );
    assert_eq!(
        comment["commentUrl"],
        format!("{home}/:comments/{comment_id}")
    );
    assert_eq!(comment["authorName"], "Scribe");
    assert_eq!(comment["markdown"], "Nice *work*.");
    let blob = server.published().last().expect("a publish")[0].clone();
    assert_eq!(comment["commentCid"], blob.cid.as_str());
    let value = blob.value.expect("cbor");
    assert_eq!(value["type"], "Comment");
    assert_eq!(value["body"][0]["text"], "Nice work.");
    assert_eq!(value["body"][0]["annotations"][0]["type"], "Italic");

    let reply = write(
        &w,
        &session,
        json!({"address": home, "content": "Agreed.",
               "options": {"action": "comment", "replyTo": comment_id}}),
    )
    .await
    .expect("replied");
    assert_eq!(reply["replyCommentId"], comment_id.as_str());
    let value = last_blob(&server);
    assert_eq!(value["replyParent"]["/"], blob.cid.as_str());
    assert_eq!(value["threadRoot"]["/"], blob.cid.as_str());
    let (uid, tsid) = comment_id.split_once('/').expect("a record id");
    assert!(server
        .seen()
        .contains(&format!("Comment?__value={uid}%2F{tsid}")));
}

#[tokio::test]
async fn who_may_publish_and_as_whom_is_checked_in_the_references_words() {
    let server = HmServer::start().await;
    let (w, session, account) = signing_world(&server).await;
    let address = format!("hm://{account}/guarded");
    let attempt = |input: Value| {
        let w = &w;
        let session = session.clone();
        async move { write(w, &session, input).await }
    };
    let doc = json!({"address": address, "content": "x", "options": {"name": "G"}, "dryRun": true});

    // A second identity: now the signer must be chosen.
    let other = w
        .act(json!({"_": "CreateSigningIdentity", "label": "Other"}))
        .await;
    ok(&other);
    let other = json_of(&other.body)["identity"].clone();
    let scribe = w.act(json!({"_": "ListSigningIdentities"})).await;
    let names: Vec<Value> = json_of(&scribe.body)["identities"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|i| i["name"].clone())
        .collect();
    let mut definition = builtin::definition(None);
    definition["signingKeys"] = json!(names);
    ok(&w
        .act(json!({"_": "UpdateAgent", "agentId": w.agent_id, "definition": definition.clone()}))
        .await);
    let ambiguous = attempt(doc.clone()).await.expect_err("two identities");
    assert!(
        ambiguous.ends_with(
            "Multiple signing identities are enabled; choose a signer by profileName or publicKey"
        ),
        "{ambiguous}"
    );
    let mut chosen = doc.clone();
    chosen["options"]["signer"] = json!({"profileName": "Other"});
    let by_name = attempt(chosen).await.expect("chosen by name");
    assert_eq!(by_name["signer"]["publicKey"], other["accountId"]);
    let mut stranger = doc.clone();
    stranger["options"]["signer"] = json!({"publicKey": "z6MkNobody"});
    assert!(attempt(stranger)
        .await
        .expect_err("not enabled")
        .ends_with("Signer public key is not enabled for this agent"));

    // No identity at all; no publish grant.
    definition["signingKeys"] = json!([]);
    ok(&w
        .act(json!({"_": "UpdateAgent", "agentId": w.agent_id, "definition": definition.clone()}))
        .await);
    assert!(attempt(doc.clone())
        .await
        .expect_err("none")
        .ends_with("No signing identities are enabled for this agent"));
    definition["tools"] = json!(["read"]);
    ok(&w
        .act(json!({"_": "UpdateAgent", "agentId": w.agent_id, "definition": definition}))
        .await);
    let refused = attempt(doc.clone()).await.expect_err("no grant");
    assert_eq!(
        refused,
        "forbidden: Publishing is not enabled for this agent. The owner can grant \"Publish Seed content\" in its tool settings."
    );
}

#[tokio::test]
async fn options_files_and_a_failing_server() {
    let server = HmServer::start().await;
    let (w, session, account) = signing_world(&server).await;
    let address = format!("hm://{account}/opts");
    let loose = write(
        &w,
        &session,
        json!({"address": address, "content": "x", "options": {"title": "T"}}),
    )
    .await
    .expect_err("unknown option");
    assert!(
        loose.contains("write hm:// (action \"document\") does not understand option \"title\"."),
        "{loose}"
    );
    let nameless = write(&w, &session, json!({"address": address, "content": "x"}))
        .await
        .expect_err("no name");
    assert!(nameless.ends_with("document.create requires a name — pass options.name (or metadata: {name}, or frontmatter name in the content)"), "{nameless}");
    // A frontmatter name is a name.
    write(
        &w,
        &session,
        json!({"address": address, "content": "---\nname: From Front\n---\nbody", "dryRun": true}),
    )
    .await
    .expect("named by frontmatter");

    // A memory file to IPFS.
    ok(&w
        .act(json!({"_": "WriteAgentMemoryFile", "agentId": w.agent_id,
                    "path": "img/logo.txt", "content": "logo"}))
        .await);
    let uploaded = write(
        &w,
        &session,
        json!({"address": "ipfs://", "options": {"fromPath": "~/memory/img/logo.txt"}}),
    )
    .await
    .expect("uploaded");
    let cid = agentos_protocol::seed::unixfs::file_blocks(b"logo")
        .root
        .to_string();
    assert_eq!(uploaded["cid"], cid.as_str());
    assert_eq!(uploaded["url"], format!("ipfs://{cid}"));
    assert_eq!(
        server.published().last().expect("a publish")[0].data,
        b"logo"
    );
    let bare = write(&w, &session, json!({"address": "ipfs://"}))
        .await
        .expect_err("nothing to upload");
    assert!(bare.ends_with(
        "write ipfs:// requires options.fromPath (a memory path) or options.fromAttachment"
    ));

    // The server fails: a typed error, nothing else harmed.
    server.fault("PublishBlobs", Fault::Status(500, "disk full".into()));
    let failed = write(
        &w,
        &session,
        json!({"address": address, "content": "x", "options": {"name": "Opts"}}),
    )
    .await
    .expect_err("server failed");
    assert_eq!(
        failed,
        "hm_status: HTTP 500 from PublishBlobs: Internal Server Error: disk full"
    );
    // Too slow, and an answer too large: typed too.
    server.fault(
        "PublishBlobs",
        Fault::Slow(std::time::Duration::from_millis(3500)),
    );
    let slow = write(
        &w,
        &session,
        json!({"address": address, "content": "x", "options": {"name": "Opts"}}),
    )
    .await
    .expect_err("too slow");
    assert!(slow.starts_with("hm_timeout: "), "{slow}");
    server.fault("PublishBlobs", Fault::Oversized(9 << 20));
    let large = write(
        &w,
        &session,
        json!({"address": address, "content": "x", "options": {"name": "Opts"}}),
    )
    .await
    .expect_err("too large");
    assert!(large.starts_with("hm_too_large: "), "{large}");
    server.heal("PublishBlobs");
    write(
        &w,
        &session,
        json!({"address": address, "content": "x", "options": {"name": "Opts"}}),
    )
    .await
    .expect("published once healed");
}

#[tokio::test]
async fn the_other_commands_publish_what_seed_publishes() {
    let server = HmServer::start().await;
    let (w, session, account) = signing_world(&server).await;
    let old = format!("hm://{account}/old");
    write(
        &w,
        &session,
        json!({"address": old, "content": "moving soon", "options": {"name": "Old"}}),
    )
    .await
    .expect("created");

    // Moved: referenced at its new place, then redirected there.
    let moved = write(
        &w,
        &session,
        json!({"address": old, "options": {"action": "move", "toPath": "/new"}}),
    )
    .await
    .expect("moved");
    let new = format!("hm://{account}/new");
    assert_eq!(moved["destination"], new.as_str());
    assert_eq!(moved["ref"]["command"], "document.fork");
    assert_eq!(moved["redirect"]["target"], new.as_str());
    let redirect = last_blob(&server);
    assert_eq!(redirect["type"], "Ref");
    assert_eq!(redirect["path"], "/old");
    assert_eq!(redirect["redirect"]["path"], "/new");
    let doc = read(&w, &session, &new).await;
    assert!(doc["markdown"]
        .as_str()
        .unwrap_or_default()
        .contains("moving soon"));

    // Deleted: a tombstone ref with no heads.
    write(
        &w,
        &session,
        json!({"address": new, "options": {"action": "delete"}}),
    )
    .await
    .expect("deleted");
    let tombstone = last_blob(&server);
    assert_eq!(tombstone["heads"], json!([]));
    assert_eq!(tombstone["path"], "/new");
    assert!(tombstone.get("redirect").is_none());

    // Raw commands: a profile, a contact and its deletion, a capability.
    let home = format!("hm://{account}");
    let profile = write(
        &w,
        &session,
        json!({"address": home, "options": {"action": "profile.update",
               "input": {"name": "Scribe Prime", "description": "Writes things."}}}),
    )
    .await
    .expect("profile");
    assert_eq!(profile["profile"]["name"], "Scribe Prime");
    let blob = last_blob(&server);
    assert_eq!(blob["type"], "Profile");
    assert_eq!(blob["description"], "Writes things.");
    let listed = w.act(json!({"_": "ListSigningIdentities"})).await;
    assert_eq!(
        json_of(&listed.body)["identities"][0]["label"],
        "Scribe Prime"
    );
    let friend = agentos_protocol::seed::Principal::of_key(
        &agentos_protocol::seed::SigningKey::from_bytes(&[9; 32]),
    )
    .to_string();
    let contact = write(
        &w,
        &session,
        json!({"address": home, "options": {"action": "contact.create",
               "input": {"subject": friend, "name": "Friend"}}}),
    )
    .await
    .expect("contact");
    let contact_id = contact["contactId"].as_str().unwrap_or_default().to_owned();
    assert!(contact_id.starts_with(&format!("{account}/z")));
    assert_eq!(last_blob(&server)["name"], "Friend");
    write(
        &w,
        &session,
        json!({"address": home, "options": {"action": "contact.delete",
               "input": {"contactId": contact_id}}}),
    )
    .await
    .expect("contact deleted");
    let tomb = last_blob(&server);
    assert!(tomb.get("subject").is_none() && tomb["id"].is_string());
    let capability = write(
        &w,
        &session,
        json!({"address": format!("{home}/team"), "options": {"action": "capability.create",
               "input": {"delegate": friend, "role": "writer"}}}),
    )
    .await
    .expect("capability");
    assert_eq!(capability["role"], "WRITER");
    let cap = last_blob(&server);
    assert_eq!(cap["type"], "Capability");
    assert_eq!(cap["path"], "/team");
    let bad_role = write(
        &w,
        &session,
        json!({"address": home, "options": {"action": "capability.create",
               "input": {"delegate": friend, "role": "owner"}}}),
    )
    .await
    .expect_err("bad role");
    assert!(bad_role.ends_with("Capability role must be WRITER or AGENT"));

    // A comment edited, then deleted: the same record id each time.
    let comment = write(
        &w,
        &session,
        json!({"address": home, "content": "first", "options": {"action": "comment"}}),
    )
    .await
    .expect("comment");
    let comment_id = comment["commentId"].as_str().unwrap_or_default().to_owned();
    let tsid = comment_id
        .split_once('/')
        .map(|(_, t)| t.to_owned())
        .unwrap_or_default();
    write(
        &w,
        &session,
        json!({"address": home, "content": "second", "options": {"action": "comment.update",
               "input": {"commentId": comment_id}}}),
    )
    .await
    .expect("edited");
    let edit = last_blob(&server);
    assert_eq!(edit["id"], tsid.as_str());
    assert_eq!(edit["body"][0]["text"], "second");
    write(
        &w,
        &session,
        json!({"address": home, "options": {"action": "comment.delete",
               "input": {"commentId": comment_id}}}),
    )
    .await
    .expect("deleted");
    let gone = last_blob(&server);
    assert_eq!(gone["id"], tsid.as_str());
    assert_eq!(gone["body"], json!([]));

    // What is not a command is answered so.
    let unknown = write(
        &w,
        &session,
        json!({"address": home, "options": {"action": "site.launch"}}),
    )
    .await
    .expect("answered");
    assert_eq!(unknown["type"], "hypermedia_write_error");
    assert_eq!(unknown["message"], "Unsupported write command: site.launch");
}

#[tokio::test]
async fn drafts_stay_here_until_published() {
    let server = HmServer::start().await;
    let (w, session, account) = signing_world(&server).await;
    let count = server.published().len();
    let address = format!("hm://{account}/essay");
    let draft = |action: &str, input: Value, content: Option<&str>| {
        let mut call = json!({"address": address, "options": {"action": action, "input": input}});
        if let Some(content) = content {
            call["content"] = json!(content);
        }
        call
    };
    let created = write(
        &w,
        &session,
        draft(
            "draft.create",
            json!({}),
            Some("---\nname: Essay\nsummary: On drafts\n---\n# Start\n\nFirst words."),
        ),
    )
    .await
    .expect("drafted");
    assert_eq!(created["command"], "draft.create");
    assert!(created.get("signer").is_none(), "a draft is not signed");
    assert_eq!(created["name"], "Essay");
    assert_eq!(created["metadata"]["summary"], "On drafts");
    let id = created["draftId"].as_str().unwrap_or_default().to_owned();
    let nameless = write(
        &w,
        &session,
        draft("draft.create", json!({}), Some("no name")),
    )
    .await
    .expect_err("no name");
    assert!(nameless.ends_with(
        "draft.create requires a name — pass name (or metadata: {name}, or frontmatter name)"
    ));

    let updated = write(
        &w,
        &session,
        draft(
            "draft.update",
            json!({"draftId": id, "name": "Essay II"}),
            None,
        ),
    )
    .await
    .expect("renamed");
    assert_eq!(updated["name"], "Essay II");
    let got = write(
        &w,
        &session,
        draft("draft.get", json!({"draftId": id}), None),
    )
    .await
    .expect("got");
    assert_eq!(got["status"], "idle");
    assert_eq!(got["path"], "/essay");
    let markdown = got["markdown"].as_str().unwrap_or_default();
    assert!(markdown.contains("First words."), "{markdown}");
    let listed = write(&w, &session, draft("draft.list", json!({}), None))
        .await
        .expect("listed");
    assert_eq!(listed["drafts"][0]["id"], id.as_str());
    assert_eq!(listed["drafts"][0]["name"], "Essay II");
    assert_eq!(server.published().len(), count, "nothing published yet");

    // Published: a document at the draft's path, and the draft says so.
    let published = write(
        &w,
        &session,
        draft("draft.publish", json!({"draftId": id}), None),
    )
    .await
    .expect("published");
    assert_eq!(published["command"], "draft.publish");
    assert_eq!(published["draftId"], id.as_str());
    assert_eq!(published["id"], address.as_str());
    let doc = read(&w, &session, &address).await;
    assert_eq!(doc["title"], "Essay II");
    assert!(doc["markdown"]
        .as_str()
        .unwrap_or_default()
        .contains("First words."));
    let got = write(
        &w,
        &session,
        draft("draft.get", json!({"draftId": id}), None),
    )
    .await
    .expect("got");
    assert_eq!(got["status"], "published");

    // Deleted: gone.
    let deleted = write(
        &w,
        &session,
        draft("draft.delete", json!({"draftId": id}), None),
    )
    .await
    .expect("deleted");
    assert_eq!(deleted["status"], "deleted");
    let gone = write(
        &w,
        &session,
        draft("draft.get", json!({"draftId": id}), None),
    )
    .await
    .expect_err("gone");
    assert_eq!(gone, "not_found: Draft not found");
    let unknown = write(&w, &session, draft("draft.frobnicate", json!({}), None))
        .await
        .expect("answered");
    assert_eq!(
        unknown["message"],
        "Unsupported draft command: draft.frobnicate"
    );
}

#[tokio::test]
async fn a_memory_file_is_published_with_its_images() {
    let server = HmServer::start().await;
    let (w, session, account) = signing_world(&server).await;
    let put = |path: &str, content: &str| {
        json!({"_": "WriteAgentMemoryFile", "agentId": w.agent_id, "path": path,
               "content": content})
    };
    ok(&w.act(put("notes/pics/cat.png", "not really a png")).await);
    ok(&w.act(put("logo.svg", "<svg/>")).await);
    ok(&w
        .act(put(
            "notes/weekly-update.md",
            "---\nicon: logo.svg\nsummary: Weekly\n---\n# Week\n\n![a cat](pics/cat.png)\n\nDone.\n",
        ))
        .await);
    let address = format!("hm://{account}");
    let dry = write(
        &w,
        &session,
        json!({"address": address, "options": {"fromPath": "~/memory/notes/weekly-update.md"},
               "dryRun": true}),
    )
    .await
    .expect("validated");
    let target = format!("hm://{account}/weekly-update");
    assert_eq!(
        dry["summary"],
        format!("Validated notes/weekly-update.md for publishing to {target} with 1 image.")
    );
    let count = server.published().len();
    let published = write(
        &w,
        &session,
        json!({"address": address, "options": {"fromPath": "notes/weekly-update.md"}}),
    )
    .await
    .expect("published");
    assert_eq!(
        published["summary"],
        format!("Published notes/weekly-update.md as {target} with 1 image.")
    );
    assert_eq!(published["imagesUploaded"], 1);
    assert_eq!(
        published["url"],
        format!("{}/hm/{account}/weekly-update", server.url())
    );
    let all = server.published();
    assert_eq!(all.len(), count + 1, "one publish");
    let blobs = all.last().expect("a publish");
    let cat = agentos_protocol::seed::unixfs::file_blocks(b"not really a png")
        .root
        .to_string();
    let logo = agentos_protocol::seed::unixfs::file_blocks(b"<svg/>")
        .root
        .to_string();
    assert!(blobs.iter().any(|b| b.cid == cat) && blobs.iter().any(|b| b.cid == logo));
    let doc = read(&w, &session, &target).await;
    let markdown = doc["markdown"].as_str().unwrap_or_default();
    assert!(markdown.contains(&format!("/ipfs/{cat})")), "{markdown}");
    assert_eq!(doc["metadata"]["icon"], format!("ipfs://{logo}"));
    assert_eq!(doc["title"], "Weekly update");

    // Again: the document is there, so it is updated in place.
    let again = write(
        &w,
        &session,
        json!({"address": address, "options": {"fromPath": "notes/weekly-update.md"}}),
    )
    .await
    .expect("updated");
    assert_eq!(again["command"], "document.update");
    assert!(again["summary"]
        .as_str()
        .unwrap_or_default()
        .starts_with("Updated notes/weekly-update.md at "));

    // A link to nothing.
    ok(&w.act(put("bad.md", "![x](missing.png)")).await);
    let missing = write(
        &w,
        &session,
        json!({"address": address, "options": {"fromPath": "bad.md"}}),
    )
    .await
    .expect_err("missing file");
    assert!(
        missing.ends_with("Linked file not found in memory: missing.png"),
        "{missing}"
    );
}

#[tokio::test]
async fn the_model_publishes_in_a_turn_and_a_broken_server_does_not_end_it() {
    let server = HmServer::start().await;
    let (w, session, account) = signing_world(&server).await;
    let address = format!("hm://{account}/from-model");
    server.fault("PublishBlobs", Fault::NotJson);
    w.provider.push(builtin::tool_calls(&[(
        "w1",
        "write",
        json!({"address": address, "content": "Hello from a turn.", "options": {"name": "From model"}}),
    )]));
    w.provider
        .push(builtin::text("The server failed; I will retry later."));
    ok(&w.message(&session, "publish a note").await);
    let body = w.last_body();
    let results = builtin::Sent::new(w.flavor, &body).tool_results();
    let (_, sent) = results
        .iter()
        .find(|(id, _)| id == "w1")
        .expect("the write's result went to the model");
    assert!(
        sent.contains("hm_malformed") && sent.contains("PublishBlobs"),
        "{sent}"
    );
    // Healed, the next turn publishes.
    server.heal("PublishBlobs");
    w.provider.push(builtin::tool_calls(&[(
        "w2",
        "write",
        json!({"address": address, "content": "Hello from a turn.", "options": {"name": "From model"}}),
    )]));
    w.provider.push(builtin::text("Published."));
    ok(&w.message(&session, "try again").await);
    let doc = read(&w, &session, &address).await;
    assert_eq!(doc["title"], "From model");
}

#[tokio::test]
async fn a_delegate_writes_into_another_space_under_its_capability() {
    let server = HmServer::start().await;
    let (w, session, scribe) = signing_world(&server).await;
    // A second identity, the space's owner; the agent may sign as both.
    let created = w
        .act(json!({"_": "CreateSigningIdentity", "label": "Owner"}))
        .await;
    ok(&created);
    let owner = json_of(&created.body)["identity"]["accountId"]
        .as_str()
        .expect("account")
        .to_owned();
    let listed = w.act(json!({"_": "ListSigningIdentities"})).await;
    let names: Vec<Value> = json_of(&listed.body)["identities"]
        .as_array()
        .expect("identities")
        .iter()
        .map(|identity| identity["name"].clone())
        .collect();
    assert_eq!(names.len(), 2);
    let mut definition = builtin::definition(None);
    definition["signingKeys"] = json!(names);
    ok(&w
        .act(json!({"_": "UpdateAgent", "agentId": w.agent_id, "definition": definition}))
        .await);
    let (as_owner, as_scribe) = (
        json!({"profileName": "Owner"}),
        json!({"profileName": "Scribe"}),
    );
    let shared = format!("hm://{owner}/shared");
    let unchosen = write(
        &w,
        &session,
        json!({"address": shared, "content": "x", "options": {"name": "Shared"}}),
    )
    .await
    .expect_err("two signers and no choice");
    assert!(
        unchosen.ends_with(
            "Multiple signing identities are enabled; choose a signer by profileName or publicKey"
        ),
        "{unchosen}"
    );

    // The owner makes the scribe a writer of its space; the server lists
    // that capability for the space.
    let granted = write(
        &w,
        &session,
        json!({"address": format!("hm://{owner}"), "options": {"action": "capability.create",
               "signer": as_owner, "input": {"delegate": scribe, "role": "writer"}}}),
    )
    .await
    .expect("granted");
    let capability = granted["cids"][0].as_str().expect("a cid").to_owned();
    server.answer(
        "ListCapabilities",
        &format!("targetId=hm%3A%2F%2F{owner}"),
        json!({"capabilities": [{"id": capability, "accountUid": owner, "delegate": scribe,
                                 "role": "WRITER"}]}),
    );

    // The scribe's document in the owner's space: its ref names the space
    // and carries the capability.
    write(
        &w,
        &session,
        json!({"address": shared, "content": "Written by a delegate.",
               "options": {"name": "Shared", "signer": as_scribe}}),
    )
    .await
    .expect("created in the owner's space");
    let publish = server.published().last().expect("a publish").clone();
    let reference = publish
        .iter()
        .filter_map(|blob| blob.value.clone())
        .find(|blob| blob["type"] == "Ref")
        .expect("a ref");
    assert_eq!(reference["path"], "/shared");
    assert_eq!(reference["capability"], json!({"/": capability}));
    assert!(reference["space"].is_object(), "{reference}");
    let doc = read(&w, &session, &shared).await;
    assert!(doc["markdown"]
        .as_str()
        .unwrap_or_default()
        .contains("Written by a delegate."));

    // Forked into the scribe's own space: a version ref, no capability.
    let copy = format!("hm://{scribe}/copy");
    write(
        &w,
        &session,
        json!({"address": shared, "options": {"action": "document.fork", "signer": as_scribe,
               "input": {"source": shared, "destination": copy}}}),
    )
    .await
    .expect("forked");
    let fork = last_blob(&server);
    assert_eq!(fork["type"], "Ref");
    assert_eq!(fork["path"], "/copy");
    assert!(fork.get("capability").is_none());
    assert!(fork["heads"].as_array().is_some_and(|h| !h.is_empty()));
    let copied = read(&w, &session, &copy).await;
    assert!(copied["markdown"]
        .as_str()
        .unwrap_or_default()
        .contains("Written by a delegate."));

    // Redirected by its owner, alone.
    let elsewhere = format!("hm://{owner}/elsewhere");
    let redirected = write(
        &w,
        &session,
        json!({"address": shared, "options": {"action": "document.redirect",
               "signer": as_owner, "input": {"id": shared, "to": elsewhere}}}),
    )
    .await
    .expect("redirected");
    assert_eq!(redirected["target"], elsewhere.as_str());
    let redirect = last_blob(&server);
    assert_eq!(redirect["path"], "/shared");
    assert_eq!(redirect["redirect"]["path"], "/elsewhere");
    assert!(redirect.get("capability").is_none());

    // The scribe's profile made an alias of the owner's.
    let aliased = write(
        &w,
        &session,
        json!({"address": format!("hm://{scribe}"), "options": {"action": "profile.alias",
               "signer": as_scribe, "input": {"alias": owner}}}),
    )
    .await
    .expect("aliased");
    assert_eq!(aliased["alias"], owner.as_str());
    let profile = last_blob(&server);
    assert_eq!(profile["type"], "Profile");
    assert!(profile["alias"].is_object(), "{profile}");

    // A write the server fails is sent once, never again.
    let publishes = |server: &HmServer| {
        server
            .seen()
            .iter()
            .filter(|seen| seen.starts_with("PublishBlobs"))
            .count()
    };
    let before = publishes(&server);
    server.fault("PublishBlobs", Fault::Status(500, "disk full".into()));
    let failed = write(
        &w,
        &session,
        json!({"address": format!("hm://{scribe}/late"), "content": "late",
               "options": {"name": "Late", "signer": as_scribe}}),
    )
    .await
    .expect_err("the server failed");
    assert!(failed.contains("disk full"), "{failed}");
    assert_eq!(publishes(&server), before + 1);
}
