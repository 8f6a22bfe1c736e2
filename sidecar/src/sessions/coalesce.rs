//! The live-chunk buffer of a turn.
//!
//! `agent_message_chunk` and `agent_thought_chunk` updates are published live
//! as ephemeral updates and buffered here; they get no sequence. The buffer is
//! flushed to durable events when the chunk kind or `messageId` changes or any
//! other update arrives, and its final contents become durable only when the
//! turn succeeds. Adjacent chunks merge as they arrive when they differ in
//! nothing but `content.text`: the new text is appended in place and the
//! chunk dropped, so a message of any length costs the same per chunk and
//! the buffer holds text, not one value per chunk. A chunk with no text and
//! a `_meta` closes the message it continues: its `_meta` becomes the
//! message's (the builtin agent says so where the message came from, what
//! it cost and how long it took).

use serde_json::{Map, Value};

/// The chunk kinds that are buffered rather than stored one by one.
pub fn is_chunk(update: &Value) -> bool {
    matches!(
        update.get("sessionUpdate").and_then(Value::as_str),
        Some("agent_message_chunk" | "agent_thought_chunk")
    )
}

fn chunk_key(update: &Value) -> (Option<&str>, Option<&str>) {
    (
        update.get("sessionUpdate").and_then(Value::as_str),
        update.get("messageId").and_then(Value::as_str),
    )
}

#[derive(Debug, Default)]
pub struct ChunkBuffer {
    items: Vec<Value>,
    bytes: usize,
}

impl ChunkBuffer {
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Bytes of text currently buffered.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether `update` continues the buffered message (same kind and id).
    pub fn continues(&self, update: &Value) -> bool {
        self.items
            .last()
            .is_none_or(|last| chunk_key(last) == chunk_key(update))
    }

    /// Adds a chunk, merging it into the last one when they differ only in
    /// their text.
    pub fn push(&mut self, update: Value) {
        if !self.merge(&update) {
            self.items.push(update);
        }
    }

    /// [`push`](Self::push) from a borrowed chunk: it is copied only when
    /// it does not merge, so the caller may hand the chunk on after.
    pub fn push_ref(&mut self, update: &Value) {
        if !self.merge(update) {
            self.items.push(update.clone());
        }
    }

    /// Adds an `agent_message_chunk` of `content` as [`push_ref`] does,
    /// without making the chunk unless it does not merge.
    pub fn push_message_content(&mut self, content: &Value) {
        let merged = match (self.items.last_mut(), content.as_object()) {
            (Some(Value::Object(last)), Some(next)) => {
                last.len() == 2
                    && last.get("sessionUpdate").and_then(Value::as_str)
                        == Some("agent_message_chunk")
                    && match last.get_mut("content") {
                        Some(Value::Object(prev)) => append_text(prev, next),
                        _ => false,
                    }
            }
            _ => false,
        };
        if merged {
            self.bytes += text_of(content).map_or(0, str::len);
        } else {
            self.push(
                serde_json::json!({"sessionUpdate": "agent_message_chunk", "content": content}),
            );
        }
    }

    /// Merges `update` into the last chunk if it can, counting its text.
    fn merge(&mut self, update: &Value) -> bool {
        self.bytes += update.get("content").and_then(text_of).map_or(0, str::len);
        merge_into(self.items.last_mut(), update)
    }

    /// Empties the buffer, returning its chunks merged for storage.
    pub fn take(&mut self) -> Vec<Value> {
        self.bytes = 0;
        std::mem::take(&mut self.items)
    }

    /// Drops the buffer: the turn did not succeed.
    pub fn discard(&mut self) {
        self.items.clear();
        self.bytes = 0;
    }
}

/// A content block's text, if it has one (not `pointer`, which copies the
/// path to unescape it, per delta).
fn text_of(content: &Value) -> Option<&str> {
    content.get("text").and_then(Value::as_str)
}

/// Whether a content block is a text block.
fn is_text(content: &Map<String, Value>) -> bool {
    content.get("type").and_then(Value::as_str) == Some("text")
        && content.get("text").is_some_and(Value::is_string)
}

fn text_content(update: &Map<String, Value>) -> Option<&Map<String, Value>> {
    let content = update.get("content")?.as_object()?;
    is_text(content).then_some(content)
}

/// Whether `a` and `b` hold the same entries, `skip` aside. Compares in
/// place: nothing is cloned.
fn same_except(a: &Map<String, Value>, b: &Map<String, Value>, skip: &[&str]) -> bool {
    let kept = |m: &Map<String, Value>| m.keys().filter(|k| !skip.contains(&k.as_str())).count();
    kept(a) == kept(b)
        && a.iter()
            .filter(|(k, _)| !skip.contains(&k.as_str()))
            .all(|(k, v)| b.get(k) == Some(v))
}

/// Appends `next`'s text to `prev` when both are text blocks that differ
/// in nothing but their text; `false` (nothing changed) otherwise.
/// Compares in place: nothing is cloned, so a merge costs the same however
/// long the buffered text has grown.
fn append_text(prev: &mut Map<String, Value>, next: &Map<String, Value>) -> bool {
    if !(is_text(prev) && is_text(next) && same_except(prev, next, &["text"])) {
        return false;
    }
    if let (Some(Value::String(text)), Some(addition)) = (
        prev.get_mut("text"),
        next.get("text").and_then(Value::as_str),
    ) {
        text.push_str(addition);
    }
    true
}

/// Whether `next` closes `prev`'s message: a text chunk of it with no text
/// and a `_meta` of its own.
fn closes(prev: &Map<String, Value>, next: &Map<String, Value>) -> bool {
    let Some(cn) =
        text_content(next).filter(|cn| cn.get("text").and_then(Value::as_str) == Some(""))
    else {
        return false;
    };
    let Some(cp) = text_content(prev) else {
        return false;
    };
    next.get("_meta").is_some_and(Value::is_object)
        && same_except(prev, next, &["content", "_meta"])
        && same_except(cp, cn, &["text"])
}

/// Appends `next`'s text to `prev` when the two differ only in their text,
/// or takes `next`'s `_meta` when `next` closes `prev`'s message; `false`
/// (nothing changed) otherwise.
fn merge_into(prev: Option<&mut Value>, next: &Value) -> bool {
    let (Some(Value::Object(prev)), Value::Object(next)) = (prev, next) else {
        return false;
    };
    if closes(prev, next) {
        if let Some(meta) = next.get("_meta") {
            prev.insert("_meta".into(), meta.clone());
        }
        return true;
    }
    if !same_except(prev, next, &["content"]) {
        return false;
    }
    match (prev.get_mut("content"), next.get("content")) {
        (Some(Value::Object(cp)), Some(Value::Object(cn))) => append_text(cp, cn),
        _ => false,
    }
}

/// Merges adjacent text chunks that differ in nothing but `content.text`.
/// Linear in the total size: each merge appends the new text in place.
pub fn coalesce(items: Vec<Value>) -> Vec<Value> {
    let mut buffer = ChunkBuffer::default();
    for item in items {
        buffer.push(item);
    }
    buffer.take()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chunk(text: &str) -> Value {
        json!({"sessionUpdate":"agent_message_chunk","messageId":"m","content":{"type":"text","text":text}})
    }

    #[test]
    fn merges_text_only_differences() {
        let out = coalesce(vec![chunk("a"), chunk("b"), chunk("c")]);
        assert_eq!(out, vec![chunk("abc")]);
    }

    #[test]
    fn keeps_chunks_that_differ_elsewhere() {
        let mut with_meta = chunk("b");
        with_meta["_meta"] = json!({"x": 1});
        let image = json!({"sessionUpdate":"agent_message_chunk","messageId":"m","content":{"type":"image","data":"AA==","mimeType":"image/png"}});
        let out = coalesce(vec![
            chunk("a"),
            with_meta.clone(),
            chunk("c"),
            image.clone(),
            chunk("d"),
        ]);
        assert_eq!(
            out,
            vec![chunk("a"), with_meta, chunk("c"), image, chunk("d")]
        );
    }

    #[test]
    fn a_key_present_on_one_side_only_keeps_chunks_apart() {
        let mut a = chunk("a");
        a["extra"] = json!(null);
        let mut b = chunk("b");
        b["other"] = json!(null);
        assert_eq!(coalesce(vec![a.clone(), b.clone()]), vec![a, b]);
        let mut c = chunk("c");
        c["content"]["annotations"] = json!({"x": 1});
        assert_eq!(coalesce(vec![chunk("x"), c.clone()]), vec![chunk("x"), c]);
    }

    #[test]
    fn an_empty_chunk_with_meta_closes_the_message_with_its_meta() {
        let mut closing = chunk("");
        closing["_meta"] = json!({"agentos": {"meta": {"durationMs": 5}}});
        let mut closed = chunk("ab");
        closed["_meta"] = closing["_meta"].clone();
        assert_eq!(
            coalesce(vec![chunk("a"), chunk("b"), closing.clone()]),
            vec![closed]
        );
        // Alone, or after another message's text, it stays what it is.
        assert_eq!(coalesce(vec![closing.clone()]), vec![closing.clone()]);
        let mut other = closing.clone();
        other["messageId"] = json!("n");
        assert_eq!(
            coalesce(vec![chunk("a"), other.clone()]),
            vec![chunk("a"), other]
        );
    }

    /// Merging from a borrowed chunk, or from a message's content alone,
    /// makes what pushing the whole chunk makes.
    #[test]
    fn a_borrowed_chunk_or_content_merges_as_a_pushed_chunk_does() {
        let mut with_meta = chunk("b");
        with_meta["_meta"] = json!({"x": 1});
        let image = json!({"sessionUpdate":"agent_message_chunk","messageId":"m","content":{"type":"image","data":"AA==","mimeType":"image/png"}});
        let chunks = vec![
            chunk("a"),
            chunk("b"),
            with_meta,
            chunk("c"),
            image,
            chunk("d"),
        ];
        let mut by_ref = ChunkBuffer::default();
        for item in &chunks {
            by_ref.push_ref(item);
        }
        let mut contents = ChunkBuffer::default();
        let mut whole = ChunkBuffer::default();
        for item in &chunks {
            contents.push_message_content(&item["content"]);
            whole.push(json!({"sessionUpdate": "agent_message_chunk", "content": item["content"]}));
        }
        assert_eq!((contents.bytes(), by_ref.bytes()), (5, 5));
        assert_eq!(by_ref.take(), coalesce(chunks));
        let merged = contents.take();
        assert_eq!(merged, whole.take());
        assert_eq!(merged.len(), 3, "{merged:?}");
    }

    #[test]
    fn continuation_follows_kind_and_message_id() {
        let mut buf = ChunkBuffer::default();
        assert!(buf.continues(&chunk("x")));
        buf.push(chunk("x"));
        assert!(buf.continues(&chunk("y")));
        let thought = json!({"sessionUpdate":"agent_thought_chunk","messageId":"m","content":{"type":"text","text":"t"}});
        assert!(!buf.continues(&thought));
        let other_id = json!({"sessionUpdate":"agent_message_chunk","messageId":"n","content":{"type":"text","text":"t"}});
        assert!(!buf.continues(&other_id));
        assert_eq!(buf.bytes(), 1);
        assert_eq!(buf.take(), vec![chunk("x")]);
        assert!(buf.is_empty());
    }
}
