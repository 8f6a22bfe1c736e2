//! Session attachments through the real binary, on both backends: a real
//! PNG and a text file uploaded and read back byte for byte, ids that are
//! the bytes' SHA-256, the same bytes answering the stored record, names
//! and types as the reference keeps them, every limit at its edge, the
//! access matrix, another session's id, and a deleted session taking its
//! files with it; an attached image shown to each provider family's model
//! in its own shape; and registry adapters given the files as their
//! prompt capabilities allow (links they can read, images, embedded
//! resources), the ACP SDK's example agent included.

#[path = "common/builtin.rs"]
mod builtin;
mod common;

use agentos_protocol::seed::Ipld;
use agentos_tests::provider_server::Flavor;
use agentos_tests::seed::{bytes, call, Answer, Signer};
use builtin::{json_of, Sent, World};
use common::Backend;
use serde_json::{json, Value};

/// A 1×1 PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0,
    0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d, 0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

fn message(a: &Answer) -> String {
    json_of(&a.body)["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(data))
}

async fn upload(w: &World, who: &Signer, session: &str, name: Value, data: &[u8]) -> Answer {
    call(
        &w.target,
        who,
        json!({"_": "UploadSessionAttachment", "sessionId": session, "name": name,
               "content": bytes(data)}),
    )
    .await
}

async fn read(w: &World, who: &Signer, session: &str, id: &str) -> Answer {
    call(
        &w.target,
        who,
        json!({"_": "ReadSessionAttachment", "sessionId": session, "attachmentId": id}),
    )
    .await
}

fn data_of(a: &Answer) -> Vec<u8> {
    match a.field("data") {
        Ipld::Bytes(b) => b.clone(),
        other => panic!("data is not bytes: {other:?}"),
    }
}

async fn round_trips_names_and_limits(backend: Backend) {
    let w = builtin::world_with(
        Flavor::OpenAi,
        backend,
        json!({"control": {"maxAttachmentsPerSession": 3, "maxAttachmentBytes": 1_048_576}}),
    )
    .await;
    let me = w.owner.clone();
    let session = w.session().await;

    // A PNG: its id is its SHA-256, its type comes from its name.
    let png = upload(&w, &me, &session, json!("../photos/pixel.PNG"), PNG).await;
    builtin::ok(&png);
    let record = json_of(png.field("attachment"));
    let id = sha256_hex(PNG);
    assert_eq!(
        record,
        json!({"id": id, "sessionId": session, "name": "pixel.PNG", "mimeType": "image/png",
               "size": PNG.len(), "createdAt": record["createdAt"]})
    );
    let back = read(&w, &me, &session, &id).await;
    builtin::ok(&back);
    assert_eq!(data_of(&back), PNG);
    assert_eq!(json_of(back.field("attachment")), record);

    // The same bytes again answer the stored record, name and all.
    let again = upload(&w, &me, &session, json!("other.bin"), PNG).await;
    assert_eq!(json_of(again.field("attachment")), record);

    // A text file with the client's type, trimmed; a name without a usable
    // segment becomes `file`; an unknown extension has no type.
    let text = "hello, attachments\n".repeat(100);
    let notes = call(
        &w.target,
        &me,
        json!({"_": "UploadSessionAttachment", "sessionId": session, "name": "notes/",
               "mimeType": " text/plain ", "content": bytes(text.as_bytes())}),
    )
    .await;
    builtin::ok(&notes);
    let notes = json_of(notes.field("attachment"));
    assert_eq!(notes["name"], "file");
    assert_eq!(notes["mimeType"], "text/plain");
    let back = read(&w, &me, &session, notes["id"].as_str().unwrap()).await;
    assert_eq!(data_of(&back), text.as_bytes());
    let raw = upload(&w, &me, &session, json!("blob.xyz"), b"\x00\x01").await;
    builtin::ok(&raw);
    assert!(json_of(raw.field("attachment")).get("mimeType").is_none());

    // Limits at their edges: the session holds three; the same bytes still
    // answer; a fourth is 413; one byte over the size is 413.
    let full = upload(&w, &me, &session, json!("four.txt"), b"four").await;
    assert_eq!(full.status, 413, "{:?}", full.body);
    assert_eq!(message(&full), "Session already has 3 attachments");
    builtin::ok(&upload(&w, &me, &session, json!("again.png"), PNG).await);
    let other = w.session().await;
    let edge = vec![7u8; 1_048_576];
    builtin::ok(&upload(&w, &me, &other, json!("edge.bin"), &edge).await);
    let over = vec![8u8; 1_048_577];
    let big = upload(&w, &me, &other, json!("over.bin"), &over).await;
    assert_eq!(big.status, 413);
    assert_eq!(message(&big), "Attachment exceeds the 1 MiB limit");
    let empty = upload(&w, &me, &other, json!("empty"), b"").await;
    assert_eq!(empty.status, 400);
    assert_eq!(
        message(&empty),
        "Attachment content must be non-empty bytes"
    );

    // Ids: upper case is refused, an unknown one and another session's
    // are not found.
    let upper = read(&w, &me, &session, &id.to_uppercase()).await;
    assert_eq!(upper.status, 400);
    assert_eq!(
        message(&upper),
        format!("Invalid attachment id: {}", id.to_uppercase())
    );
    let unknown = sha256_hex(b"never uploaded");
    let missing = read(&w, &me, &session, &unknown).await;
    assert_eq!(missing.status, 404);
    assert_eq!(
        message(&missing),
        format!("Attachment not found: {unknown}")
    );
    let foreign = read(&w, &me, &other, &id).await;
    assert_eq!(foreign.status, 404);

    // Deleting the session takes its files.
    builtin::ok(
        &w.act(json!({"_": "DeleteSession", "sessionId": session}))
            .await,
    );
    let gone = read(&w, &me, &session, &id).await;
    assert_eq!(gone.status, 404);
    assert_eq!(message(&gone), "Session not found");
    let left =
        w.sc.stored(&format!(
            "SELECT count(*) AS n FROM agentos_fs_dentries WHERE name = '{session}'"
        ))
        .await;
    assert_eq!(left[0]["n"], 0, "the session's directory is gone");
}

both_backends!(round_trips_names_and_limits);

async fn who_may_upload_and_read(backend: Backend) {
    let w = builtin::world_on(Flavor::OpenAi, backend).await;
    let session = w.session().await;
    let stranger = Signer::new();
    let reader = w.collaborator("reader").await;
    let writer = w.collaborator("writer").await;
    let id = sha256_hex(b"shared");
    let a = upload(&w, &stranger, &session, json!("s.txt"), b"shared").await;
    assert_eq!((a.status, message(&a)), (404, "Session not found".into()));
    let a = read(&w, &stranger, &session, &id).await;
    assert_eq!((a.status, message(&a)), (404, "Session not found".into()));
    let a = upload(&w, &reader, &session, json!("r.txt"), b"shared").await;
    assert_eq!(a.status, 403, "{:?}", a.body);
    builtin::ok(&upload(&w, &writer, &session, json!("w.txt"), b"shared").await);
    let a = read(&w, &reader, &session, &id).await;
    builtin::ok(&a);
    assert_eq!(data_of(&a), b"shared");
}

both_backends!(who_may_upload_and_read);

async fn a_message_carries_its_context_and_files_and_the_model_reads_them(backend: Backend) {
    let w = builtin::world_on(Flavor::OpenAi, backend).await;
    let session = w.session().await;
    let text = "line one\nline two\n";
    let saved = upload(&w, &w.owner, &session, json!("notes.md"), text.as_bytes()).await;
    let info = json_of(saved.field("attachment"));
    let id = info["id"].as_str().expect("id").to_owned();
    let png = json_of(
        upload(&w, &w.owner, &session, json!("pixel.png"), PNG)
            .await
            .field("attachment"),
    );

    // Refused before anything is appended, with the reference's words.
    let send = |content: Value| {
        w.act(json!({"_": "MessageSession", "sessionId": session, "content": content}))
    };
    let too_many: Vec<Value> = (0..17)
        .map(|i| json!({"type": "attachment", "id": sha256_hex(&[i])}))
        .chain([json!({"type": "text", "text": "hi"})])
        .collect();
    for (content, status, words) in [
        (
            json!(too_many),
            400,
            "A message can reference at most 16 attachments".to_owned(),
        ),
        (
            json!([{"type": "attachment", "id": id.to_uppercase()}, {"type": "text", "text": "hi"}]),
            400,
            "Invalid attachment id".to_owned(),
        ),
        (
            json!([{"type": "attachment", "id": sha256_hex(b"x")}, {"type": "text", "text": "hi"}]),
            404,
            format!("Attachment not found: {}", sha256_hex(b"x")),
        ),
        (
            json!([{"type": "context", "lines": vec!["l"; 65]}, {"type": "text", "text": "hi"}]),
            400,
            "Too many context lines".to_owned(),
        ),
        (
            json!([{"type": "context", "lines": ["x".repeat(2049)]}, {"type": "text", "text": "hi"}]),
            400,
            "Context line is too large".to_owned(),
        ),
        (
            json!([{"type": "attachment", "id": id}]),
            400,
            "Message content is required".to_owned(),
        ),
    ] {
        let a = send(content).await;
        assert_eq!((a.status, message(&a)), (status, words));
    }
    assert!(w.events(&session).await.is_empty());

    // The model is asked to read the text file, and reads it.
    w.provider
        .push(agentos_tests::provider_server::Reply::ToolCalls(vec![(
            "r1".to_owned(),
            "read".to_owned(),
            json!({"address": format!("attachment:{id}")}),
        )]));
    w.provider
        .push(agentos_tests::provider_server::Reply::Text(vec![
            "Read it.".to_owned(),
        ]));
    let said = send(json!([
        {"type": "context", "lines": ["viewing hm://doc"]},
        {"type": "attachment", "id": id},
        {"type": "attachment", "id": png["id"]},
        {"type": "attachment", "id": id},
        {"type": "text", "text": "Summarize the file", "clientMessageId": "m-1"},
    ]))
    .await;
    builtin::ok(&said);
    let events = w.events(&session).await;
    let user = &events[0];
    assert_eq!(user["type"], "message");
    assert_eq!(user["role"], "user");
    assert_eq!(user["content"], "Summarize the file");
    assert_eq!(user["rawMarkdown"], "Summarize the file");
    assert_eq!(user["clientMessageId"], "m-1");
    assert_eq!(user["contextLines"], json!(["viewing hm://doc"]));
    assert_eq!(user["attachments"], json!([info, png]));
    // What the model was sent: the words, the context, one line per file.
    let first = &w.provider.requests()[0].body;
    let sent = builtin::Sent::new(Flavor::OpenAi, first)
        .user_texts()
        .join("\n");
    assert!(sent.starts_with("Summarize the file\n\n<window_context>\nviewing hm://doc\n</window_context>\n\n<attachments>\n"), "{sent}");
    assert!(
        sent.contains(&format!(
            "- \"notes.md\" (text/markdown, {} bytes) — attachment id {id}",
            text.len()
        )),
        "{sent}"
    );
    assert!(sent.contains("- \"pixel.png\" (image/png, "), "{sent}");
    // The tool result the model got holds the file's words.
    let second = &w.provider.requests()[1].body;
    let results = builtin::Sent::new(Flavor::OpenAi, second).tool_results();
    assert!(results[0].1.contains("line one\\nline two"), "{results:?}");
    // Saved to memory, at its default place and at a chosen one.
    let saved = w
        .invoke(
            &session,
            "write",
            json!({"address": "~/memory/", "options": {"fromAttachment": id}}),
        )
        .await;
    builtin::ok(&saved);
    let output = json_of(&saved.body)["output"].clone();
    assert_eq!(output["path"], "attachments/notes.md");
    assert_eq!(output["mimeType"], "text/markdown");
    let kept = w
        .act(json!({"_": "ReadAgentMemoryFile", "agentId": w.agent_id, "path": "attachments/notes.md"}))
        .await;
    assert_eq!(json_of(kept.field("file"))["content"], text);
    let chosen = w
        .invoke(
            &session,
            "write",
            json!({"address": "~/memory/keep/n.md", "options": {"fromAttachment": id}}),
        )
        .await;
    assert_eq!(json_of(&chosen.body)["output"]["path"], "keep/n.md");
    // An image is described, not shown.
    let shown = w
        .invoke(
            &session,
            "read",
            json!({"address": format!("attachment:{}", png["id"].as_str().unwrap())}),
        )
        .await;
    // A user's own read goes to no model: an image is described.
    let output = json_of(&shown.body)["output"].clone();
    assert_eq!(output["shownAsImage"], false);
    assert!(
        output["summary"].as_str().unwrap().ends_with(
            "this model does not support image input. Save it to memory with write to keep it."
        ),
        "{output}"
    );
}

both_backends!(a_message_carries_its_context_and_files_and_the_model_reads_them);

/// A model of each family that takes images: the scripted provider asks
/// to read an attached PNG and gets it in its API's own shape, once (the
/// next turn replays only what was said of it); a model that takes no
/// images is told why it sees none.
async fn the_model_sees_an_attached_image_in_its_own_shape(flavor: Flavor, vision_model: &str) {
    use agentos_tests::provider_server::Reply;
    use base64::Engine as _;
    let w = builtin::world(flavor).await;
    let mut definition = builtin::definition(None);
    definition["model"] = json!(vision_model);
    builtin::ok(
        &w.act(json!({"_": "UpdateAgent", "agentId": w.agent_id, "definition": definition}))
            .await,
    );
    let session = w.session().await;
    let png = json_of(
        upload(&w, &w.owner, &session, json!("pixel.png"), PNG)
            .await
            .field("attachment"),
    );
    let id = png["id"].as_str().expect("id").to_owned();
    let read_it = || {
        Reply::ToolCalls(vec![(
            "r1".to_owned(),
            "read".to_owned(),
            json!({"address": format!("attachment:{id}")}),
        )])
    };
    w.provider.push(read_it());
    w.provider.push(Reply::Text(vec!["A pixel.".to_owned()]));
    let said = w
        .act(
            json!({"_": "MessageSession", "sessionId": session, "content": [
            {"type": "attachment", "id": id}, {"type": "text", "text": "What is it?"}]}),
        )
        .await;
    builtin::ok(&said);
    let requests = w.provider.requests();
    let encoded = base64::engine::general_purpose::STANDARD.encode(PNG);
    assert!(Sent::new(flavor, &requests[0].body).images().is_empty());
    assert_eq!(
        Sent::new(flavor, &requests[1].body).images(),
        vec![("image/png".to_owned(), encoded)]
    );
    // The log keeps what was shown, not the bytes.
    let events = w.events(&session).await;
    let result = events
        .iter()
        .find(|e| e["type"] == "tool_result")
        .expect("a tool result");
    assert_eq!(result["output"]["shownAsImage"], true, "{result}");
    assert_eq!(
        result["output"]["summary"],
        format!("Viewed pixel.png (image/png, {} bytes).", PNG.len())
    );
    assert!(!result.to_string().contains("iVBOR"), "{result}");
    // The next turn is rebuilt from the log: no image.
    w.provider
        .push(Reply::Text(vec!["Still a pixel.".to_owned()]));
    builtin::ok(&w.message(&session, "And now?").await);
    let requests = w.provider.requests();
    assert!(Sent::new(flavor, &requests[2].body).images().is_empty());

    // A model that takes no images reads what the file is instead.
    builtin::ok(
        &w.act(json!({"_": "UpdateAgent", "agentId": w.agent_id,
                      "definition": builtin::definition(None)}))
            .await,
    );
    w.provider.push(read_it());
    w.provider
        .push(Reply::Text(vec!["Cannot see it.".to_owned()]));
    builtin::ok(&w.message(&session, "Look again").await);
    let requests = w.provider.requests();
    let last = &requests[requests.len() - 1].body;
    assert!(Sent::new(flavor, last).images().is_empty());
    let results = Sent::new(flavor, last).tool_results();
    assert!(
        results
            .last()
            .is_some_and(|(_, text)| text.contains("this model does not support image input")),
        "{results:?}"
    );
}

/// What a model could not take is described, never sent: an SVG, and a
/// file that says it is a PNG but is not one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_a_provider_would_refuse_are_described() {
    use agentos_tests::provider_server::Reply;
    let w = builtin::world(Flavor::OpenAi).await;
    let mut definition = builtin::definition(None);
    definition["model"] = json!("gpt-4o");
    builtin::ok(
        &w.act(json!({"_": "UpdateAgent", "agentId": w.agent_id, "definition": definition}))
            .await,
    );
    let session = w.session().await;
    let svg = json_of(
        upload(&w, &w.owner, &session, json!("d.svg"), b"<svg/>")
            .await
            .field("attachment"),
    );
    let fake = w
        .act(
            json!({"_": "UploadSessionAttachment", "sessionId": session, "name": "f.png",
                    "mimeType": "image/png", "content": bytes(b"not a png")}),
        )
        .await;
    let fake = json_of(fake.field("attachment"));
    let read_both = Reply::ToolCalls(vec![
        (
            "r1".to_owned(),
            "read".to_owned(),
            json!({"address": format!("attachment:{}", svg["id"].as_str().unwrap())}),
        ),
        (
            "r2".to_owned(),
            "read".to_owned(),
            json!({"address": format!("attachment:{}", fake["id"].as_str().unwrap())}),
        ),
    ]);
    w.provider.push(read_both);
    w.provider.push(Reply::Text(vec!["ok".to_owned()]));
    builtin::ok(&w.message(&session, "look").await);
    let requests = w.provider.requests();
    let sent = Sent::new(Flavor::OpenAi, &requests[1].body);
    assert!(sent.images().is_empty());
    let results = sent.tool_results();
    assert!(
        results[0].1.contains("PNG, JPEG, GIF and WebP images only"),
        "{results:?}"
    );
    assert!(
        results[1].1.contains("not an image of that type"),
        "{results:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_model_sees_an_image_as_a_data_url() {
    the_model_sees_an_attached_image_in_its_own_shape(Flavor::OpenAi, "gpt-4o").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_model_sees_an_image_block_in_the_result() {
    the_model_sees_an_attached_image_in_its_own_shape(Flavor::Anthropic, "claude-sonnet-4-5").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_model_sees_inline_data() {
    the_model_sees_an_attached_image_in_its_own_shape(Flavor::Google, "gemini-2.5-flash").await;
    the_model_sees_an_attached_image_in_its_own_shape(Flavor::Google, "gemini-3-pro-preview").await;
}

async fn begin(w: &World, who: &Signer, target: Value, size: u64) -> Answer {
    call(
        &w.target,
        who,
        json!({"_": "BeginFileUpload", "target": target, "size": size}),
    )
    .await
}

async fn append(w: &World, who: &Signer, id: &str, offset: u64, data: &[u8]) -> Answer {
    call(
        &w.target,
        who,
        json!({"_": "AppendFileUploadChunk", "uploadId": id, "offset": offset,
               "content": bytes(data)}),
    )
    .await
}

async fn finish(w: &World, who: &Signer, action: &str, id: &str) -> Answer {
    call(&w.target, who, json!({"_": action, "uploadId": id})).await
}

async fn uploads_in_chunks_with_the_references_rules(backend: Backend) {
    let mut w = builtin::world_with(
        Flavor::OpenAi,
        backend,
        json!({"control": {"maxUploadsPerAccount": 2, "maxAttachmentBytes": 4_194_304}}),
    )
    .await;
    let me = w.owner.clone();
    let session = w.session().await;
    let file: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let target = json!({"kind": "session-attachment", "sessionId": session, "name": "big.bin"});

    // Begin's checks.
    let a = begin(&w, &me, target.clone(), 0).await;
    assert_eq!(
        (a.status, message(&a)),
        (400, "Upload size must be a positive integer".into())
    );
    let a = begin(
        &w,
        &me,
        json!({"kind": "session-attachment", "sessionId": session, "name": " "}),
        5,
    )
    .await;
    assert_eq!(
        (a.status, message(&a)),
        (400, "Attachment name is required".into())
    );
    let a = begin(&w, &me, target.clone(), 4_194_305).await;
    assert_eq!(
        (a.status, message(&a)),
        (413, "Upload exceeds the maximum attachment size".into())
    );
    for path in ["../x", "", ".", "./"] {
        let a = begin(
            &w,
            &me,
            json!({"kind": "memory", "agentId": w.agent_id, "path": path}),
            5,
        )
        .await;
        assert_eq!(a.status, 400, "{path:?}: {:?}", a.body);
    }
    // An id that is not an upload's is not found, whatever it holds.
    for id in ["nope", "../../etc", "a\u{0}b"] {
        let a = append(&w, &me, id, 0, b"x").await;
        assert_eq!(
            (a.status, message(&a)),
            (404, "Upload not found".into()),
            "{id:?}"
        );
    }

    let begun = begin(&w, &me, target.clone(), file.len() as u64).await;
    builtin::ok(&begun);
    assert_eq!(json_of(&begun.body)["maxChunkBytes"], 8_388_608);
    let id = begun.text("uploadId");

    // Offsets: a gap or a repeat is 409 with the bytes received; past the
    // size is 400; an empty chunk is 400.
    let (one, rest) = file.split_at(1_000_000);
    let a = append(&w, &me, &id, 5, one).await;
    assert_eq!(
        (a.status, message(&a)),
        (409, "Chunk offset 5 does not match 0 bytes received".into())
    );
    let a = append(&w, &me, &id, 0, one).await;
    builtin::ok(&a);
    assert_eq!(json_of(&a.body)["received"], 1_000_000);
    let a = append(&w, &me, &id, 0, one).await;
    assert_eq!(a.status, 409);
    let a = append(&w, &me, &id, 1_000_000, b"").await;
    assert_eq!(
        (a.status, message(&a)),
        (400, "Chunk content must be non-empty bytes".into())
    );
    let mut too_much = rest.to_vec();
    too_much.push(0);
    let a = append(&w, &me, &id, 1_000_000, &too_much).await;
    assert_eq!(
        (a.status, message(&a)),
        (400, "Upload exceeds its declared size".into())
    );
    // An incomplete commit is 400 and the upload stays usable.
    let a = finish(&w, &me, "CommitFileUpload", &id).await;
    assert_eq!(
        (a.status, message(&a)),
        (
            400,
            "Upload has 1000000 of 3000000 bytes; cannot commit".into()
        )
    );

    // A kill mid-upload keeps it: the client resumes at what was received.
    w = w.crash().await;
    let a = append(&w, &me, &id, 1_000_000, rest).await;
    builtin::ok(&a);
    let done = finish(&w, &me, "CommitFileUpload", &id).await;
    builtin::ok(&done);
    let attachment = json_of(done.field("attachment"));
    assert_eq!(attachment["id"], sha256_hex(&file));
    assert_eq!(attachment["size"], file.len());
    let back = read(&w, &me, &session, attachment["id"].as_str().unwrap()).await;
    assert_eq!(data_of(&back), file);
    // After the commit, the upload is gone.
    let a = append(&w, &me, &id, 3_000_000, b"x").await;
    assert_eq!((a.status, message(&a)), (404, "Upload not found".into()));

    // To memory, then aborted; the owner's bound of two at once.
    let memory = json!({"kind": "memory", "agentId": w.agent_id, "path": "docs/report.txt"});
    let m = begin(&w, &me, memory.clone(), 11).await.text("uploadId");
    builtin::ok(&append(&w, &me, &m, 0, b"hello world").await);
    let kept = finish(&w, &me, "CommitFileUpload", &m).await;
    builtin::ok(&kept);
    assert_eq!(json_of(kept.field("entry"))["path"], "docs/report.txt");
    let file_back = w
        .act(json!({"_": "ReadAgentMemoryFile", "agentId": w.agent_id, "path": "docs/report.txt"}))
        .await;
    builtin::ok(&file_back);
    assert_eq!(json_of(file_back.field("file"))["content"], "hello world");
    let a1 = begin(&w, &me, memory.clone(), 5).await.text("uploadId");
    let _a2 = begin(&w, &me, target.clone(), 5).await.text("uploadId");
    let third = begin(&w, &me, memory.clone(), 5).await;
    assert_eq!(
        (third.status, message(&third)),
        (429, "Too many uploads in progress".into())
    );
    builtin::ok(&finish(&w, &me, "AbortFileUpload", &a1).await);
    let a = finish(&w, &me, "AbortFileUpload", &a1).await;
    assert_eq!(a.status, 404);
    builtin::ok(&begin(&w, &me, memory, 5).await);

    // Deleting the session ends its uploads.
    builtin::ok(
        &w.act(json!({"_": "DeleteSession", "sessionId": session}))
            .await,
    );
    let left =
        w.sc.stored("SELECT count(*) AS n FROM agentos_fs_dentries WHERE name LIKE '%.part'")
            .await;
    assert_eq!(left[0]["n"], 1, "only the memory upload is left");
}

both_backends!(uploads_in_chunks_with_the_references_rules);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_and_readers_cannot_upload() {
    let w = builtin::world(Flavor::OpenAi).await;
    let session = w.session().await;
    let stranger = Signer::new();
    let reader = w.collaborator("reader").await;
    let target = json!({"kind": "session-attachment", "sessionId": session, "name": "a"});
    let a = begin(&w, &stranger, target.clone(), 5).await;
    assert_eq!((a.status, message(&a)), (404, "Session not found".into()));
    let memory = json!({"kind": "memory", "agentId": w.agent_id, "path": "a"});
    let a = begin(&w, &stranger, memory.clone(), 5).await;
    assert_eq!((a.status, message(&a)), (404, "Agent not found".into()));
    let a = begin(&w, &reader, target.clone(), 5).await;
    assert_eq!(a.status, 403);
    // The owner's upload is not a stranger's to continue.
    let id = begin(&w, &w.owner, target, 5).await.text("uploadId");
    let a = append(&w, &stranger, &id, 0, b"abcde").await;
    assert_eq!(a.status, 404);
    let a = append(&w, &reader, &id, 0, b"abcde").await;
    assert_eq!(a.status, 403);
}

/// The reference's bounds are settings: smaller ones move every edge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bounds_are_settings() {
    let w = builtin::world_with(
        Flavor::OpenAi,
        Backend::SqliteFile,
        json!({"control": {"maxContextLines": 2, "maxContextLineBytes": 4,
                           "maxAttachmentsPerMessage": 1, "maxUploadChunkBytes": 4,
                           "maxMemoryUploadBytes": 10}}),
    )
    .await;
    let session = w.session().await;
    let send = |content: Value| {
        w.act(json!({"_": "MessageSession", "sessionId": session, "content": content}))
    };
    let text = json!({"type": "text", "text": "hi"});
    for (content, words) in [
        (
            json!([{"type": "context", "lines": ["a", "b", "c"]}, text]),
            "Too many context lines",
        ),
        (
            json!([{"type": "context", "lines": ["abcde"]}, text]),
            "Context line is too large",
        ),
        (
            json!([{"type": "attachment", "id": sha256_hex(b"1")},
                   {"type": "attachment", "id": sha256_hex(b"2")}, text]),
            "A message can reference at most 1 attachments",
        ),
    ] {
        let a = send(content).await;
        assert_eq!((a.status, message(&a)), (400, words.to_owned()));
    }
    let memory = |size| {
        begin(
            &w,
            &w.owner,
            json!({"kind": "memory", "agentId": w.agent_id, "path": "m.bin"}),
            size,
        )
    };
    let a = memory(11).await;
    assert_eq!(
        (a.status, message(&a)),
        (413, "Upload exceeds the maximum file size".to_owned())
    );
    let begun = memory(10).await;
    builtin::ok(&begun);
    assert_eq!(json_of(begun.field("maxChunkBytes")), json!(4));
    let id = begun.text("uploadId");
    let a = append(&w, &w.owner, &id, 0, b"abcde").await;
    assert_eq!(
        (a.status, message(&a)),
        (413, "Chunk is too large".to_owned())
    );
    builtin::ok(&append(&w, &w.owner, &id, 0, b"abcd").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_upload_is_gone() {
    let w = builtin::world_with(
        Flavor::OpenAi,
        Backend::SqliteFile,
        json!({"control": {"uploadIdleMs": 50}}),
    )
    .await;
    let session = w.session().await;
    let target = json!({"kind": "session-attachment", "sessionId": session, "name": "a"});
    let id = begin(&w, &w.owner, target, 5).await.text("uploadId");
    // Idle past the setting (only more time can pass than slept).
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let a = append(&w, &w.owner, &id, 0, b"abcde").await;
    assert_eq!((a.status, message(&a)), (404, "Upload not found".into()));
}

/// The sidecar's anonymous resident memory (its heap and stacks; mapped
/// database pages are the file's, not a copy).
fn anonymous_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("RssAnon")
        * 1024
}

/// A 200 MiB file uploaded to memory in 8 MiB chunks, then committed:
/// the sidecar holds the chunk in flight (a few copies of it: the HTTP
/// body, the decoded action, the write), never the file. Its anonymous
/// memory, sampled throughout, rises by less than ten chunks. Its
/// allocator gives freed pages back at once here, so the figure is what
/// the sidecar holds rather than what the allocator keeps for reuse (by
/// default for up to a second, which on a loaded machine came to twelve
/// chunks' worth).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_costs_a_chunk_of_memory_not_a_file() {
    const MIB: u64 = 1024 * 1024;
    const CHUNK: u64 = 8 * MIB;
    const SIZE: u64 = 25 * CHUNK;
    let env = vec![("MIMALLOC_PURGE_DELAY".to_owned(), "0".to_owned())];
    let w = builtin::world_with_env(Flavor::OpenAi, env).await;
    // Warm: one whole upload of one chunk first.
    let memory_target = |path: &str| json!({"kind": "memory", "agentId": w.agent_id, "path": path});
    let warm = begin(&w, &w.owner, memory_target("warm.bin"), CHUNK)
        .await
        .text("uploadId");
    builtin::ok(&append(&w, &w.owner, &warm, 0, &vec![9u8; CHUNK as usize]).await);
    builtin::ok(&finish(&w, &w.owner, "CommitFileUpload", &warm).await);
    let pid = w.sc.pid();
    let before = anonymous_rss(pid);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(anonymous_rss(pid));
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            peak
        })
    };
    let id = begin(&w, &w.owner, memory_target("big.bin"), SIZE)
        .await
        .text("uploadId");
    let chunk = vec![7u8; CHUNK as usize];
    let mut offset = 0;
    while offset < SIZE {
        builtin::ok(&append(&w, &w.owner, &id, offset, &chunk).await);
        offset += CHUNK;
    }
    let committed = finish(&w, &w.owner, "CommitFileUpload", &id).await;
    builtin::ok(&committed);
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let peak = sampler.join().expect("sampler");
    assert_eq!(json_of(committed.field("entry"))["size"], SIZE);
    let rise = peak.saturating_sub(before);
    eprintln!(
        "a 200 MiB upload in 8 MiB chunks: anonymous memory {} MiB before, peak rise {} MiB",
        before / MIB,
        rise / MIB
    );
    assert!(
        rise < 10 * CHUNK,
        "anonymous memory rose {} MiB for one upload in flight",
        rise / MIB
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_deleting_a_session_deletes_its_files() {
    let w = builtin::world(Flavor::OpenAi).await;
    let session = w.session().await;
    builtin::ok(
        &upload(
            &w,
            &w.owner,
            &session,
            json!("a.txt"),
            b"kept until deleted",
        )
        .await,
    );
    let target = json!({"kind": "session-attachment", "sessionId": session, "name": "b"});
    builtin::ok(&begin(&w, &w.owner, target, 5).await);
    w.sc.ok("sessions/delete", json!({ "sessionId": session }))
        .await;
    let left =
        w.sc.stored(&format!(
            "SELECT (SELECT count(*) FROM agentos_fs_dentries WHERE name = '{session}') AS dirs, \
                    (SELECT count(*) FROM agentos_fs_dentries WHERE name LIKE '%.part') AS parts"
        ))
        .await;
    assert_eq!(left[0]["dirs"], 0);
    assert_eq!(left[0]["parts"], 0);
}

/// A file server on loopback: `/files/pixel` is the PNG (no extension in
/// the path), anything else 404. Answers how many requests it served.
async fn file_server() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let served = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = served.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut request = vec![0u8; 4096];
                let n = socket.read(&mut request).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&request[..n]).to_string();
                let response = if head.starts_with("GET /files/pixel ") {
                    let mut r = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: image/png\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        PNG.len()
                    )
                    .into_bytes();
                    r.extend_from_slice(PNG);
                    r
                } else {
                    b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                        .to_vec()
                };
                let _ = socket.write_all(&response).await;
            });
        }
    });
    (format!("http://{addr}"), served)
}

/// Downloads share the VM's slots (`limits.control.maxDownloads`): with
/// one, a download whose server stalls mid-body holds it, another is
/// refused 429 at once, and once the stalled one ends the slot is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downloads_at_once_are_bounded_in_the_vm() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let slow = format!(
        "http://{}/files/slow.txt",
        listener.local_addr().expect("addr")
    );
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    let started = std::sync::Arc::new(tokio::sync::Notify::new());
    {
        let (release, started) = (release.clone(), started.clone());
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let mut request = vec![0u8; 4096];
            let _ = socket.read(&mut request).await;
            let _ = socket
                .write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\nconnection: close\r\n\r\nhalf.",
                )
                .await;
            started.notify_one();
            release.notified().await;
        });
    }
    let (base, _) = file_server().await;
    let sc = common::Sidecar::start_with(
        Backend::SqliteFile,
        common::Options {
            config: json!({"http": {"listen": "127.0.0.1:0"},
                           "builtin": {"allowPrivateDownloads": true}}),
            limits: json!({"control": {"maxDownloads": 1}}),
            ..common::Options::default()
        },
    )
    .await;
    let t = sc.api();
    let owner = Signer::new();
    let agent_id = call(
        &t,
        &owner,
        json!({"_": "CreateAgent", "definition": {"name": "Files", "systemPrompt": "x",
               "modelProvider": "openai", "model": "m", "adapter": "echo"}}),
    )
    .await
    .text("agentId");
    let download = |url: String| {
        call(
            &t,
            &owner,
            json!({"_": "DownloadAgentMemoryFile", "agentId": agent_id, "url": url}),
        )
    };
    let stalled = {
        let t = sc.api();
        let owner = owner.clone();
        let action = json!({"_": "DownloadAgentMemoryFile", "agentId": agent_id, "url": slow});
        tokio::spawn(async move { call(&t, &owner, action).await })
    };
    started.notified().await;
    let refused = download(format!("{base}/files/pixel")).await;
    assert_eq!(
        (refused.status, json_of(&refused.body)["code"].clone()),
        (429, json!("downloads_busy")),
        "{:?}",
        refused.body
    );
    release.notify_one();
    let ended = stalled.await.expect("join");
    assert_eq!(ended.status, 502, "{:?}", ended.body);
    let got = download(format!("{base}/files/pixel")).await;
    assert_eq!(got.status, 200, "{:?}", got.body);
}

async fn downloads_land_in_memory(backend: Backend) {
    let (base, served) = file_server().await;
    let sc = common::Sidecar::start_with(
        backend,
        common::Options {
            config: json!({"http": {"listen": "127.0.0.1:0"},
                           "builtin": {"allowPrivateDownloads": true}}),
            ..common::Options::default()
        },
    )
    .await;
    let t = sc.api();
    let owner = Signer::new();
    let agent = call(
        &t,
        &owner,
        json!({"_": "CreateAgent", "definition": {"name": "Files", "systemPrompt": "x",
               "modelProvider": "openai", "model": "m", "adapter": "echo"}}),
    )
    .await;
    assert_eq!(agent.status, 200, "{:?}", agent.body);
    let agent_id = agent.text("agentId");
    let download = |url: String, path: Option<&str>| {
        let mut action = json!({"_": "DownloadAgentMemoryFile", "agentId": agent_id, "url": url});
        if let Some(path) = path {
            action["path"] = json!(path);
        }
        call(&t, &owner, action)
    };

    // The type names the extension a path without one gets.
    let got = download(format!("{base}/files/pixel"), None).await;
    assert_eq!(got.status, 200, "{:?}", got.body);
    let body = json_of(&got.body);
    assert_eq!(body["entry"]["path"], "downloads/pixel.png");
    assert_eq!(body["entry"]["size"], PNG.len());
    assert_eq!(body["contentType"], "image/png");
    assert_eq!(body["finalUrl"], format!("{base}/files/pixel"));
    let file = call(
        &t,
        &owner,
        json!({"_": "ReadAgentMemoryFile", "agentId": agent_id, "path": "downloads/pixel.png"}),
    )
    .await;
    assert_eq!(file.status, 200);
    let got = download(format!("{base}/files/pixel"), Some("art/dot.png")).await;
    assert_eq!(json_of(&got.body)["entry"]["path"], "art/dot.png");

    // Refusals, with the reference's words; a bad path is refused before
    // anything is fetched.
    let before = served.load(std::sync::atomic::Ordering::SeqCst);
    for (url, path, status, words) in [
        (
            " ".to_owned(),
            None,
            400,
            "Download URL is required".to_owned(),
        ),
        (
            "not a url".to_owned(),
            None,
            400,
            "Invalid download URL: not a url".to_owned(),
        ),
        (
            "ftp://example.com/x".to_owned(),
            None,
            400,
            "Download URL must use http or https".to_owned(),
        ),
        (
            format!("{base}/files/pixel"),
            Some("../up"),
            400,
            "Memory path cannot contain \"..\"".to_owned(),
        ),
    ] {
        let a = download(url, path).await;
        assert_eq!(a.status, status, "{:?}", a.body);
        if !words.is_empty() {
            assert_eq!(message(&a), words);
        }
    }
    assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), before);
    let missing = download(format!("{base}/nothing"), None).await;
    assert_eq!(missing.status, 502);
    assert_eq!(
        message(&missing),
        format!("Could not download {base}/nothing: HTTP 404")
    );

    // The builtin agent's write verb saves the same way (`{fromUrl}`).
    let builtin = call(
        &t,
        &owner,
        json!({"_": "CreateAgent", "definition": {"name": "Saver", "systemPrompt": "x",
               "modelProvider": "none", "model": "m"}}),
    )
    .await
    .text("agentId");
    let session = call(
        &t,
        &owner,
        json!({"_": "CreateSession", "agentId": builtin}),
    )
    .await
    .text("sessionId");
    let write = |input: Value| {
        call(
            &t,
            &owner,
            json!({"_": "InvokeSessionTool", "sessionId": session, "verb": "write", "input": input}),
        )
    };
    let saved = write(json!({"address": "~/memory/",
                             "options": {"fromUrl": format!("{base}/files/pixel")}}))
    .await;
    assert_eq!(saved.status, 200, "{:?}", saved.body);
    let output = json_of(&saved.body)["output"].clone();
    assert_eq!(output["path"], "downloads/pixel.png", "{output}");
    assert_eq!(output["size"], PNG.len());
    assert_eq!(output["mimeType"], "image/png");
    assert_eq!(output["contentType"], "image/png");
    assert_eq!(
        output["summary"],
        format!(
            "Downloaded {base}/files/pixel to downloads/pixel.png ({} bytes, image/png).",
            PNG.len()
        )
    );
    let file = call(
        &t,
        &owner,
        json!({"_": "ReadAgentMemoryFile", "agentId": builtin, "path": "downloads/pixel.png"}),
    )
    .await;
    assert_eq!(file.status, 200, "{:?}", file.body);
    let chosen = write(json!({"address": "~/memory/img/p",
                              "options": {"fromUrl": format!("{base}/files/pixel")}}))
    .await;
    assert_eq!(json_of(&chosen.body)["output"]["path"], "img/p.png");
    let refused =
        write(json!({"address": "~/memory/x", "options": {"fromUrl": "ftp://a/b"}})).await;
    assert_eq!(
        json_of(&refused.body)["error"],
        "invalid_argument: Download URL must use http or https"
    );
}

both_backends!(downloads_land_in_memory);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downloads_reach_only_public_addresses_by_default() {
    let (base, served) = file_server().await;
    let w = builtin::world(Flavor::OpenAi).await;
    let a = w
        .act(
            json!({"_": "DownloadAgentMemoryFile", "agentId": w.agent_id,
                    "url": format!("{base}/files/pixel")}),
        )
        .await;
    assert_eq!(a.status, 502, "{:?}", a.body);
    assert!(
        message(&a).contains("not a public address"),
        "{}",
        message(&a)
    );
    assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 0);
    let stranger = Signer::new();
    let a = call(
        &w.target,
        &stranger,
        json!({"_": "DownloadAgentMemoryFile", "agentId": w.agent_id, "url": "https://example.com/x"}),
    )
    .await;
    assert_eq!((a.status, message(&a)), (404, "Agent not found".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vm_bounds_uploads_across_accounts() {
    let w = builtin::world_with(
        Flavor::OpenAi,
        Backend::SqliteFile,
        json!({"control": {"maxUploads": 2}}),
    )
    .await;
    let session = w.session().await;
    // Two accounts' agents on one VM: the owner's and a second owner's.
    let second = Signer::new();
    let agent = call(
        &w.target,
        &second,
        json!({"_": "CreateAgent", "definition": {"name": "B", "systemPrompt": "x",
               "modelProvider": "openai", "model": "m", "adapter": "echo"}}),
    )
    .await;
    assert_eq!(agent.status, 200, "{:?}", agent.body);
    let theirs = json!({"kind": "memory", "agentId": agent.text("agentId"), "path": "f"});
    let mine = json!({"kind": "session-attachment", "sessionId": session, "name": "a"});
    builtin::ok(&begin(&w, &w.owner, mine.clone(), 5).await);
    builtin::ok(&begin(&w, &second, theirs.clone(), 5).await);
    let a = begin(&w, &second, theirs, 5).await;
    assert_eq!(
        (a.status, message(&a)),
        (429, "Too many uploads in progress".into())
    );
}

/// A sidecar whose registry is merged with `agents`, an owner, an agent
/// on the registry adapter `adapter` and a session: (sidecar, owner,
/// session).
async fn registry_world(adapter: &str, agents: Value) -> (common::Sidecar, Signer, String) {
    let sc = common::Sidecar::start_with(
        Backend::SqliteFile,
        common::Options {
            config: json!({"http": {"listen": "127.0.0.1:0"}}),
            agents,
            ..common::Options::default()
        },
    )
    .await;
    let owner = Signer::new();
    let agent = call(
        &sc.api(),
        &owner,
        json!({"_": "CreateAgent", "definition": {"name": "Registry", "systemPrompt": "x",
               "modelProvider": "openai", "model": "m", "adapter": adapter}}),
    )
    .await
    .text("agentId");
    let session = call(
        &sc.api(),
        &owner,
        json!({"_": "CreateSession", "agentId": agent}),
    )
    .await
    .text("sessionId");
    (sc, owner, session)
}

/// Uploads `data` as `name` to the session; its record.
async fn attach(
    sc: &common::Sidecar,
    owner: &Signer,
    session: &str,
    name: &str,
    data: &[u8],
) -> Value {
    let up = call(
        &sc.api(),
        owner,
        json!({"_": "UploadSessionAttachment", "sessionId": session, "name": name,
               "content": bytes(data)}),
    )
    .await;
    json_of(up.field("attachment"))
}

/// Sends words with these attachments; the prompt the adapter received.
async fn send_with(sc: &common::Sidecar, owner: &Signer, session: &str, files: &[&Value]) -> Value {
    let mut content: Vec<Value> = files
        .iter()
        .map(|f| json!({"type": "attachment", "id": f["id"]}))
        .collect();
    content.push(json!({"type": "text", "text": "echo hi"}));
    let said = call(
        &sc.api(),
        owner,
        json!({"_": "MessageSession", "sessionId": session, "content": content}),
    )
    .await;
    assert_eq!(said.status, 200, "{:?}", said.body);
    let delivered = sc.delivered_prompts();
    delivered.last().expect("a delivered prompt")["prompt"].clone()
}

/// What the adapter answered a command sent through the host door.
async fn echoed(sc: &common::Sidecar, session: &str, command: &str) -> String {
    sc.prompt(session, command)
        .await
        .expect("the prompt is answered");
    let history = sc.history(session).await;
    let last = history
        .iter()
        .rev()
        .find(|e| e["type"] == "agent_message_chunk")
        .expect("an answer");
    common::text_of(last).to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_adapter_gets_links_it_can_read_and_nothing_more() {
    let (sc, owner, session) = registry_world("echo", json!({})).await;
    let text = attach(&sc, &owner, &session, "n.txt", b"words").await;
    let png = attach(&sc, &owner, &session, "p.png", PNG).await;
    let prompt = send_with(&sc, &owner, &session, &[&text, &png]).await;
    // Told what was attached, not how the builtin agent would read it.
    let words = prompt[0]["text"].as_str().expect("a text block");
    assert!(
        words.starts_with(
            "echo hi\n\n<attachments>\nThe user attached these session-private files.\n- \"n.txt\""
        ),
        "{words}"
    );
    assert!(!words.contains("read attachment"), "{words}");
    // Without prompt capabilities, each file is a link into the session's
    // attachments.
    let dir = format!("/.agentos/sessions/{session}/attachments");
    let text_path = format!("{dir}/{}.bin", text["id"].as_str().unwrap());
    assert_eq!(
        prompt[1],
        json!({"type": "resource_link", "uri": format!("file://{text_path}"), "name": "n.txt",
               "mimeType": "text/plain", "size": 5})
    );
    assert_eq!(prompt[2]["type"], "resource_link");
    assert_eq!(prompt[2]["mimeType"], "image/png");
    assert_eq!(prompt.as_array().unwrap().len(), 3);

    // The link reads through fs/read_text_file; nothing else of the
    // reserved tree does, and the attachments cannot be written.
    assert_eq!(
        echoed(&sc, &session, &format!("fs_read {text_path}")).await,
        "words"
    );
    let write = echoed(&sc, &session, &format!("fs_write {text_path} changed")).await;
    assert_ne!(write, "wrote", "{write}");
    assert_eq!(
        echoed(&sc, &session, &format!("fs_read {text_path}")).await,
        "words"
    );
    // Nothing else of the sidecar's tree reads through that prefix or any
    // other: not another session's file, not the agent's memory.
    let agent = json_of(
        &call(
            &sc.api(),
            &owner,
            json!({"_": "GetSession", "sessionId": session}),
        )
        .await
        .body,
    )["session"]["agentId"]
        .as_str()
        .expect("agentId")
        .to_owned();
    let other = call(
        &sc.api(),
        &owner,
        json!({"_": "CreateSession", "agentId": agent}),
    )
    .await
    .text("sessionId");
    let theirs = attach(&sc, &owner, &other, "t.txt", b"theirs").await;
    let theirs_id = theirs["id"].as_str().unwrap();
    let kept = call(
        &sc.api(),
        &owner,
        json!({"_": "WriteAgentMemoryFile", "agentId": agent, "path": "secret.txt",
               "content": "private"}),
    )
    .await;
    assert_eq!(kept.status, 200, "{:?}", kept.body);
    for (path, content) in [
        (
            format!("{dir}/../../{other}/attachments/{theirs_id}.bin"),
            "theirs",
        ),
        (
            format!("/.agentos/sessions/{other}/attachments/{theirs_id}.bin"),
            "theirs",
        ),
        (
            format!("{dir}/../../../agents/{agent}/memory/secret.txt"),
            "private",
        ),
        (
            format!("/.agentos/agents/{agent}/memory/secret.txt"),
            "private",
        ),
    ] {
        let answer = echoed(&sc, &session, &format!("fs_read {path}")).await;
        // Refused, with the reason, not read.
        assert!(
            !answer.contains(content) && !answer.is_empty(),
            "{path}: {answer}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_adapter_that_takes_images_and_context_gets_them_embedded() {
    use base64::Engine as _;
    let rich = json!({"echo": {"args": ["--prompt-capabilities", "image,embeddedContext"]}});
    let (sc, owner, session) = registry_world("echo", rich).await;
    let text = attach(&sc, &owner, &session, "n.md", b"# words").await;
    let png = attach(&sc, &owner, &session, "p.png", PNG).await;
    let blob = attach(&sc, &owner, &session, "b.bin", &[0, 159, 146, 150]).await;
    let prompt = send_with(&sc, &owner, &session, &[&text, &png, &blob]).await;
    let uri = |f: &Value| {
        format!(
            "file:///.agentos/sessions/{session}/attachments/{}.bin",
            f["id"].as_str().unwrap()
        )
    };
    let b64 = |d: &[u8]| base64::engine::general_purpose::STANDARD.encode(d);
    assert_eq!(
        prompt[1],
        json!({"type": "resource", "resource": {"uri": uri(&text), "mimeType": "text/markdown",
                                                "text": "# words"}})
    );
    assert_eq!(
        prompt[2],
        json!({"type": "image", "mimeType": "image/png", "data": b64(PNG), "uri": uri(&png)})
    );
    assert_eq!(
        prompt[3],
        json!({"type": "resource", "resource": {"uri": uri(&blob),
                                                "blob": b64(&[0, 159, 146, 150])}})
    );
    // The log keeps the message as sent, not the bytes.
    let history = sc.history(&session).await;
    assert!(!history.iter().any(|e| e.to_string().contains(&b64(PNG))));
}

/// The ACP SDK's own example agent accepts a prompt carrying links.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_example_agent_accepts_attachment_links() {
    let (sc, owner, session) = registry_world("example", json!({})).await;
    let file = attach(&sc, &owner, &session, "n.txt", b"words").await;
    let said = call(
        &sc.api(),
        &owner,
        json!({"_": "MessageSession", "sessionId": session,
               "content": [{"type": "attachment", "id": file["id"]}, {"type": "text", "text": "hello"}]}),
    )
    .await;
    assert_eq!(said.status, 200, "{:?}", said.body);
    // It parsed the prompt and began its scripted answer (which then asks
    // for a permission nobody gives).
    common::eventually("the example agent answers", || async {
        sc.history(&session)
            .await
            .iter()
            .any(|e| e["type"] == "agent_message_chunk")
    })
    .await;
    let prompt = sc.history(&session).await;
    assert!(!prompt.iter().any(|e| e["type"] == "error"), "{prompt:?}");
}
