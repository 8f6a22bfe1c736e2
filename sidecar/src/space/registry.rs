//! The builtin callables and their contracts: what the sidecar itself can
//! run for an agent through `call`, as tool documents, and which of them an
//! agent's grants offer.
//!
//! Three builtins exist: `search` (the hypermedia server's `Search`, as
//! the reference's callable), `memory_search` (the agent's memory and its
//! account's session titles; both granted unless the definition says
//! otherwise) and `web_fetch` (one https page; only when granted). Their executors live
//! with the verbs; this file is only their contracts, which is what the
//! model reads and what each agent's `~/tools` stores (see `tools.rs`: a
//! builtin's stored row is rewritten when its CID here changes).
//!
//! Grants are the agent definition's `tools`: absent means
//! [`DEFAULT_GRANTS`]; present, exactly the names listed (unknown names do
//! nothing). Verbs are never grants: they are always on, and their names
//! ([`VERBS`]) are reserved, as builtin names are, so no authored tool can
//! take one.

use agentos_protocol::seed::json_to_ipld_clipped;
use agentos_protocol::seed::tool::ToolDocument;
use agentos_protocol::seed::vocab::ToolKind;
use serde_json::{json, Value};

/// The verbs an agent always has; no tool may take one of these names.
pub const VERBS: [&str; 8] = [
    "read",
    "write",
    "call",
    "delegate",
    "plan",
    "status",
    "continue_session",
    "return_result",
];

pub const SEARCH: &str = "search";
pub const MEMORY_SEARCH: &str = "memory_search";
pub const WEB_FETCH: &str = "web_fetch";

/// What an agent whose definition names no `tools` is granted.
pub const DEFAULT_GRANTS: [&str; 2] = [SEARCH, MEMORY_SEARCH];

/// Largest `limit` of one `memory_search`.
pub const SEARCH_MAX_LIMIT: u64 = 50;
/// Results of a `memory_search` without a `limit`.
pub const SEARCH_DEFAULT_LIMIT: u64 = 10;
/// Most bytes `web_fetch` reads of one page.
pub const WEB_FETCH_MAX_BYTES: u64 = 200 * 1024;

/// One builtin's contract.
struct Builtin {
    name: &'static str,
    summary: &'static str,
    description: &'static str,
    input: fn() -> Value,
}

const BUILTINS: [Builtin; 3] = [
    Builtin {
        name: MEMORY_SEARCH,
        summary: "Find text in your memory files and the titles of your conversations.",
        description: "Searches, case-insensitively, for a piece of text in three places: \
the paths of your memory files (`~/memory/...`), the text of those files, and the titles \
of the conversations (sessions) of your account. Use it before reading files one by one, \
when you remember that something was written down or discussed but not where.\n\n\
Input: `query`, the text to find (matched as-is, not as a pattern; at least one \
character), and optionally `limit`, how many matches to return (1 to 50, 10 when \
omitted).\n\n\
Output: the matches. A memory match names the file's path and, when the text matched \
inside the file, a short excerpt around it; a conversation match names the session and \
its title. Read a matched file with `read ~/memory/<path>` to see all of it.",
        input: memory_search_input,
    },
    Builtin {
        name: SEARCH,
        summary: "Search Seed hypermedia documents, contacts and comments.",
        description: "Search Seed hypermedia content: document titles, contacts, and \
optionally document bodies and comments. Returns ranked results with hm:// URLs you can read.",
        input: search_input,
    },
    Builtin {
        name: WEB_FETCH,
        summary: "Fetch one https web page and return its content as text.",
        description: "Downloads one web page or document over https and returns what it \
holds as text, with its final URL (after redirects) and its content type. Only \
`https://` URLs are fetched. At most 200 KiB of the response are read; a longer page is \
cut there and the result says so. Use it to read a page whose address you already know \
(from the user, a document or a search result); it does not search the web.\n\n\
Input: `url`, the absolute https URL to fetch.\n\n\
Fetching can fail (the site is down, refuses the request or answers with an error \
status): the result then says why, and retrying the same URL at once rarely helps.",
        input: web_fetch_input,
    },
];

/// The reference's `search` contract.
fn search_input() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "query": {"type": "string", "minLength": 1,
                      "description": "The search query. Supports phrases and wildcards."},
            "accountUid": {"type": "string",
                           "description": "Optional account UID to scope search to a single account."},
            "includeBody": {"type": "boolean",
                            "description": "Set true to search document bodies and comments in addition to titles and contacts."},
            "contextSize": {"type": "integer", "minimum": 0, "maximum": 512,
                            "description": "Optional match context size in runes. Defaults to 48."},
            "searchType": {"type": "string", "enum": ["keyword", "semantic", "hybrid"],
                           "description": "Search ranking mode. Defaults to hybrid."},
            "pageSize": {"type": "integer", "minimum": 1,
                         "description": "Maximum number of results to return."}
        },
        "required": ["query"]
    })
}

fn memory_search_input() -> Value {
    json!({
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "minLength": 1,
                "description": "The text to find, matched case-insensitively and literally."
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": SEARCH_MAX_LIMIT,
                "default": SEARCH_DEFAULT_LIMIT,
                "description": "How many matches to return at most."
            }
        },
        "required": ["query"],
        "additionalProperties": false
    })
}

fn web_fetch_input() -> Value {
    json!({
        "type": "object",
        "properties": {
            "url": {
                "type": "string",
                "format": "uri",
                "minLength": 9,
                "description": "The absolute https:// URL of the page to fetch."
            }
        },
        "required": ["url"],
        "additionalProperties": false
    })
}

impl Builtin {
    fn document(&self) -> ToolDocument {
        ToolDocument {
            name: self.name.to_owned(),
            kind: ToolKind::Builtin,
            summary: self.summary.to_owned(),
            description: self.description.to_owned(),
            input: json_to_ipld_clipped(&(self.input)()),
            output: None,
            source: None,
            runtime: None,
            binding: Some(self.name.to_owned()),
        }
    }
}

/// Every builtin's document, by name.
pub fn builtins() -> Vec<ToolDocument> {
    BUILTINS.iter().map(Builtin::document).collect()
}

/// The builtin named `name`, if there is one.
pub fn builtin(name: &str) -> Option<ToolDocument> {
    BUILTINS
        .iter()
        .find(|b| b.name == name)
        .map(Builtin::document)
}

pub fn is_builtin(name: &str) -> bool {
    BUILTINS.iter().any(|b| b.name == name)
}

pub fn is_verb(name: &str) -> bool {
    VERBS.contains(&name)
}

/// Whether the grants `tools` (an agent definition's `tools`; absent means
/// [`DEFAULT_GRANTS`]) offer the builtin `name`.
pub fn granted(tools: Option<&[String]>, name: &str) -> bool {
    match tools {
        None => DEFAULT_GRANTS.contains(&name),
        Some(tools) => tools.iter().any(|t| t == name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::schema::shape_check;
    use agentos_protocol::seed::{ipld_to_json, JsonForm};

    #[test]
    fn builtins_are_documents_with_sound_contracts() {
        let documents = builtins();
        let names: Vec<&str> = documents.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, [MEMORY_SEARCH, SEARCH, WEB_FETCH]);
        for document in &documents {
            assert_eq!(document.kind, ToolKind::Builtin);
            assert_eq!(document.binding.as_deref(), Some(document.name.as_str()));
            assert!(!document.summary.contains('\n') && document.summary.len() <= 140);
            let input = ipld_to_json(&document.input, JsonForm::Plain).unwrap();
            assert_eq!(shape_check(&input), Ok(()), "{}", document.name);
            assert!(!is_verb(&document.name));
            assert!(document.cid().unwrap().starts_with("bafyrei"));
        }
        assert_eq!(builtin(WEB_FETCH).as_ref(), documents.get(2));
        assert_eq!(builtin("read"), None);
    }

    #[test]
    fn the_default_grant_is_search_and_a_list_is_exact() {
        assert!(granted(None, SEARCH));
        assert!(!granted(None, WEB_FETCH));
        let both = [SEARCH.to_owned(), WEB_FETCH.to_owned()];
        assert!(granted(Some(&both), WEB_FETCH));
        let none: [String; 0] = [];
        assert!(!granted(Some(&none), SEARCH));
        assert!(is_verb("continue_session") && is_verb("return_result"));
        assert!(is_builtin("web_fetch") && !is_builtin("write"));
    }
}
