//! A markdown file of an agent's memory published as a document (created, or
//! updated in place), its linked files and media in the same publish.

use super::*;

/// A markdown file of an agent's memory, to publish as a document.
pub struct MemoryDocument {
    /// Its memory path.
    pub path: String,
    /// Its blocks, file links already rewritten to `ipfs://`.
    pub nodes: Vec<Value>,
    /// Its frontmatter, media rewritten likewise.
    pub metadata: Vec<(String, Value)>,
    /// The files its links name, as IPFS blocks.
    pub files: Vec<PublishEntry>,
    /// How many of its blocks linked a file.
    pub images: usize,
}

/// `titleFromMemoryPath`: `notes/weekly-update.md` is "Weekly update".
pub fn title_from_memory_path(path: &str) -> String {
    let base = path.rsplit('/').next().unwrap_or(path);
    let stem = match base.rfind('.') {
        Some(dot)
            if dot + 1 < base.len()
                && base[dot + 1..].bytes().all(|b| b.is_ascii_alphanumeric()) =>
        {
            &base[..dot]
        }
        _ => base,
    };
    let mut words = String::new();
    for c in stem.chars() {
        if c == '-' || c == '_' {
            if !words.ends_with(' ') {
                words.push(' ');
            }
        } else {
            words.push(c);
        }
    }
    let words = words.trim();
    let mut chars = words.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => "Untitled".to_owned(),
    }
}

impl Hypermedia {
    /// `publishMemoryDocument`: the file as the document at `path` of
    /// `account` (a slug of its title when `None`), updated in place when
    /// one is there, created otherwise; its files in the same publish.
    pub async fn publish_memory_document(
        &self,
        signer: &Signer,
        account: &str,
        path: Option<&str>,
        document: MemoryDocument,
        dry_run: bool,
    ) -> Result<Value, WriteError> {
        let name = document
            .metadata
            .iter()
            .find(|(k, _)| k == "name")
            .and_then(|(_, v)| v.as_str())
            .filter(|n| !n.is_empty())
            .map(str::to_owned);
        let title = name.unwrap_or_else(|| title_from_memory_path(&document.path));
        let doc_path = document_path(path.map(|p| json!(p)).as_ref(), &title)?;
        let target = format!("hm://{account}{doc_path}");
        let existing = matches!(
            self.resource(&target).await,
            Ok(resource) if resource["type"] == "document"
        );
        let metadata = as_object(&document.metadata);
        let (command, mut result) = if existing {
            let input = fields(vec![
                ("edit", json!(target)),
                ("content", json!(document.nodes)),
                ("format", json!("json")),
                ("metadata", metadata),
            ]);
            match self
                .document_update(signer, &input, dry_run, document.files)
                .await?
            {
                Ok(extra) => ("document.update", extra),
                Err(conflict) => return Ok(conflict),
            }
        } else {
            let input = fields(vec![
                ("account", json!(account)),
                (
                    "path",
                    json!(if doc_path.is_empty() { "/" } else { &doc_path }),
                ),
                ("content", json!(document.nodes)),
                ("format", json!("json")),
                ("metadata", metadata),
                ("name", json!(title)),
            ]);
            (
                "document.create",
                self.document_create(signer, &input, dry_run, document.files)
                    .await?,
            )
        };
        let note = match document.images {
            0 => String::new(),
            1 => " with 1 image".to_owned(),
            n => format!(" with {n} images"),
        };
        let summary = if dry_run {
            format!(
                "Validated {} for publishing to {target}{note}.",
                document.path
            )
        } else if existing {
            format!("Updated {} at {target}{note}.", document.path)
        } else {
            format!("Published {} as {target}{note}.", document.path)
        };
        result.insert("summary".into(), json!(summary));
        result.insert("memoryPath".into(), json!(document.path));
        result.insert(
            "url".into(),
            json!(format!("{}/hm/{account}{doc_path}", self.server())),
        );
        if document.images > 0 {
            result.insert("imagesUploaded".into(), json!(document.images));
        }
        Ok(write_result(command, Some(signer), result))
    }
}
