//! Host `fs/*` methods → VFS calls. File data travels base64-encoded in
//! pieces of at most 16 MiB so an answer stays well inside the frame limit.

use agentos_protocol::host::{
    methods, ErrorObject, FsMkdirParams, FsPathParams, FsReadParams, FsReaddirParams,
    FsRemoveParams, FsRenameParams, FsWriteParams,
};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::{json, value::RawValue, Value};

use super::codec::{params, reply};
use super::render::fs_error_object;
use agentos_vfs::{FsError, Vfs};

fn fs(e: FsError) -> ErrorObject {
    fs_error_object(&e)
}

/// `{"data": <base64>, "encoding": "base64", "size", "eof"}`, with the
/// data encoded straight into the answer's text: a 16 MiB read costs its
/// bytes and one 21 MiB text, not a string, a JSON value and a text.
fn read_answer(data: Vec<u8>, size: u64, eof: bool) -> Result<Box<RawValue>, ErrorObject> {
    let mut text = String::with_capacity(data.len().div_ceil(3) * 4 + 96);
    text.push_str(r#"{"data":""#);
    BASE64.encode_string(&data, &mut text);
    drop(data);
    text.push_str(&format!(
        r#"","encoding":"base64","size":{size},"eof":{eof}}}"#
    ));
    RawValue::from_string(text)
        .map_err(|e| ErrorObject::new(agentos_protocol::host::codes::INTERNAL_ERROR, e.to_string()))
}

/// Bytes of file data one `fs/read` returns at most; base64 keeps the answer
/// well inside the frame limit.
pub(super) const MAX_READ_CHUNK: u64 = 16 << 20;

pub(super) async fn dispatch(
    vfs: &Vfs,
    method: &str,
    raw: Value,
) -> Result<Box<RawValue>, ErrorObject> {
    match method {
        methods::FS_STAT => {
            let p: FsPathParams = params(raw)?;
            let stat = vfs.lstat(&p.path).await.map_err(fs)?;
            reply(&stat)
        }
        methods::FS_READ => {
            let p: FsReadParams = params(raw)?;
            let offset = p.offset.unwrap_or(0);
            let length = p.length.unwrap_or(MAX_READ_CHUNK).min(MAX_READ_CHUNK);
            let stat = vfs.stat(&p.path).await.map_err(fs)?;
            let data = vfs.read(&p.path, offset, length).await.map_err(fs)?;
            let eof = offset.saturating_add(data.len() as u64) >= stat.size;
            read_answer(data, stat.size, eof)
        }
        methods::FS_WRITE => {
            let p: FsWriteParams = params(raw)?;
            let data = BASE64
                .decode(p.data.as_bytes())
                .map_err(|e| ErrorObject::invalid_params(format!("data is not base64: {e}")))?;
            let stat = match p.offset {
                None => vfs.write_file(&p.path, &data).await,
                Some(offset) => vfs.write(&p.path, offset, &data).await,
            }
            .map_err(fs)?;
            reply(&stat)
        }
        methods::FS_READDIR => {
            let p: FsReaddirParams = params(raw)?;
            let page = vfs
                .readdir(&p.path, p.cursor.as_deref(), p.limit.unwrap_or(1000))
                .await
                .map_err(fs)?;
            reply(&page)
        }
        methods::FS_MKDIR => {
            let p: FsMkdirParams = params(raw)?;
            let mode = p.mode.unwrap_or(0o755);
            let stat = if p.parents {
                vfs.mkdir_p(&p.path, mode).await
            } else {
                vfs.mkdir(&p.path, mode).await
            }
            .map_err(fs)?;
            reply(&stat)
        }
        methods::FS_RENAME => {
            let p: FsRenameParams = params(raw)?;
            vfs.rename(&p.from, &p.to).await.map_err(fs)?;
            reply(&json!({}))
        }
        methods::FS_REMOVE => {
            let p: FsRemoveParams = params(raw)?;
            vfs.remove(&p.path, p.recursive).await.map_err(fs)?;
            reply(&json!({}))
        }
        other => Err(ErrorObject::method_not_found(other)),
    }
}
