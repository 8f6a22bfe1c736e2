//! A registry adapter's view of a message's attachments. The signed door
//! keeps what was attached in the first text block (`_meta.seed.attachments`,
//! each `{id, name, mimeType?, size}`); when the route sends that prompt to
//! an adapter other than the builtin agent (which reads them with its own
//! verb), each attachment follows the words as the ACP content block the
//! adapter's `promptCapabilities` allow: an `image` block for an image it
//! can take, an embedded `resource` (text, or a base64 blob) when it takes
//! embedded context, and otherwise a `resource_link` whose path it can read
//! with `fs/read_text_file`. Nothing here is stored: the log keeps the
//! message as the door wrote it, and the bytes are read at send time, within
//! a budget per prompt (16 MiB) and one for the whole VM (64 MiB, held while
//! the turn runs).

use agentos_base::budget::Held;
use agentos_protocol::agent_ext::{MAX_IMAGE_BYTES, MAX_TEXT_ATTACHMENT_BYTES};
use agentos_protocol::seed::model::{is_model_image, is_text_type, looks_like};
use base64::Engine as _;
use serde_json::{json, Value};

use super::Route;

/// Attachment bytes embedded in one prompt at most; the rest go as links.
const MAX_EMBEDDED_BYTES: u64 = 16 * 1024 * 1024;
/// Attachment bytes embedded in all the VM's prompts being sent at once
/// (a thousand sessions embedding at once hold this, not a thousand times
/// the per-prompt bound); past it, files go as links.
pub(crate) const MAX_EMBEDDED_BYTES_PER_VM: usize = 64 * 1024 * 1024;

/// One attachment as the door recorded it.
struct Attached {
    id: String,
    name: String,
    mime_type: Option<String>,
    size: u64,
}

impl Attached {
    fn from(info: &Value) -> Option<Attached> {
        let id = info["id"].as_str()?;
        // The door wrote a SHA-256 hex id; anything else names no file.
        if id.len() != 64 || !id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return None;
        }
        Some(Attached {
            id: id.to_owned(),
            name: info["name"].as_str().unwrap_or("file").to_owned(),
            mime_type: info["mimeType"].as_str().map(str::to_owned),
            size: info["size"].as_u64()?,
        })
    }
}

impl Route {
    /// The blocks to send for a prompt: `blocks`, then one block per
    /// attachment recorded on them, for a registry adapter; and the VM
    /// budget the embedded bytes hold until the caller drops it.
    pub(super) async fn with_attachments(&self, mut blocks: Vec<Value>) -> (Vec<Value>, Vec<Held>) {
        let mut held = Vec::new();
        if self.builtin {
            return (blocks, held);
        }
        let mut attached: Vec<Attached> = Vec::new();
        for file in blocks
            .iter()
            .filter_map(|b| b.pointer("/_meta/seed/attachments"))
            .filter_map(Value::as_array)
            .flatten()
            .filter_map(Attached::from)
        {
            // Each file once, however often it is named.
            if !attached.iter().any(|a| a.id == file.id) {
                attached.push(file);
            }
        }
        let dir = agentos_vfs::session_attachments_dir(&self.session_id);
        let mut budget = MAX_EMBEDDED_BYTES;
        for file in attached {
            let path = format!("{dir}/{}.bin", file.id);
            let block = self
                .embedded(&dir, &path, &file, &mut budget, &mut held)
                .await;
            blocks.push(block.unwrap_or_else(|| {
                let mut link = json!({"type": "resource_link", "uri": format!("file://{path}"),
                                      "name": file.name, "size": file.size});
                if let Some(mime) = &file.mime_type {
                    link["mimeType"] = json!(mime);
                }
                link
            }));
        }
        (blocks, held)
    }

    /// The attachment as an image or embedded resource, when the adapter
    /// takes that and it fits; `None` for a link.
    async fn embedded(
        &self,
        dir: &str,
        path: &str,
        file: &Attached,
        budget: &mut u64,
        held: &mut Vec<Held>,
    ) -> Option<Value> {
        let caps = self.prompt_caps;
        let mime = file.mime_type.as_deref().unwrap_or_default();
        let image = caps.image && is_model_image(mime) && file.size <= MAX_IMAGE_BYTES;
        let text = caps.embedded_context && is_text_type(mime);
        let max = if image {
            MAX_IMAGE_BYTES
        } else if text {
            MAX_TEXT_ATTACHMENT_BYTES
        } else if caps.embedded_context {
            MAX_IMAGE_BYTES
        } else {
            return None;
        };
        if file.size > max || file.size > *budget {
            return None;
        }
        let fs = self.shared.fs.as_ref()?;
        let taken = self
            .shared
            .embedded
            .try_take(usize::try_from(file.size).unwrap_or(usize::MAX))?;
        let data = match fs.read_reserved(dir, path, max).await {
            Ok(data) => data,
            Err(e) => {
                tracing::warn!(session = %self.session_id, attachment = %file.id, error = %e.message,
                               "an attachment could not be embedded; sent as a link");
                return None;
            }
        };
        // The record's size is what the door wrote; the bytes decide.
        if data.len() as u64 > *budget || (image && !looks_like(mime, &data)) {
            return None;
        }
        *budget -= data.len() as u64;
        held.push(taken);
        let uri = format!("file://{path}");
        let base64 = || base64::engine::general_purpose::STANDARD.encode(&data);
        Some(if image {
            json!({"type": "image", "mimeType": mime, "data": base64(), "uri": uri})
        } else {
            let mut resource = json!({"uri": uri});
            if let Some(mime) = &file.mime_type {
                resource["mimeType"] = json!(mime);
            }
            match (text, std::str::from_utf8(&data)) {
                (true, Ok(words)) => resource["text"] = json!(words),
                _ => resource["blob"] = json!(base64()),
            }
            json!({"type": "resource", "resource": resource})
        })
    }
}
