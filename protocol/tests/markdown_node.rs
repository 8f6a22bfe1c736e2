//! Cross-implementation check of the markdown converter
//! (`agentos_protocol::seed::markdown`) against Seed's own published client
//! (`@seed-hypermedia/client`'s `markdown-to-blocks`), driven through
//! `tests/node/seed-markdown.mjs`: for every document below the block tree,
//! the metadata (and its key order), the `HMBlockNode`s and the document
//! operations are the client's exactly.
//!
//! Generated block ids: the script replaces `Math.random` with a 32-bit
//! linear congruential generator restarted at 0 for each document, and the
//! client takes `ID_CHARS[floor(random * 64)]`, the state's top six bits;
//! [`js_ids`] replays that sequence.
//!
//! Needs node and the client under `.peers/seed-client/` (or
//! `$AGENTOS_PEERS/seed-client/`); without them the test prints a note and
//! passes, except under CI (`CI` set and non-empty), where it fails.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use agentos_protocol::seed::markdown::{
    flatten_to_operations, parse_markdown, to_hm_block_nodes, BLOCK_ID_CHARS,
};
use serde_json::{Map, Value};

fn peers() -> PathBuf {
    match std::env::var_os("AGENTOS_PEERS") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../.peers"),
    }
}

/// Whether node and the client are there; prints why not, and fails under
/// CI so a broken install cannot pass unseen.
fn node_package_present() -> bool {
    let package = peers()
        .join("seed-client/node_modules/@seed-hypermedia/client/dist/markdown-to-blocks.mjs");
    let why = if !package.exists() {
        format!(
            "{} is missing; run scripts/install-peers",
            package.display()
        )
    } else if Command::new("node").arg("--version").output().is_err() {
        "node is not on PATH".to_owned()
    } else {
        return true;
    };
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
        panic!("the markdown cross-check needs its Node peers under CI: {why}");
    }
    eprintln!("note: skipping the markdown cross-check: {why}");
    false
}

/// Runs the script over `documents`; its answers, one per document.
fn node_answers(documents: &[&str]) -> Vec<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node/seed-markdown.mjs");
    let mut child = Command::new("node")
        .arg(script)
        .env("AGENTOS_PEERS", peers())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn node");
    let input = serde_json::to_vec(documents).expect("documents as JSON");
    let mut stdin = child.stdin.take().expect("node stdin");
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().expect("node output");
    writer.join().expect("writer").expect("write to node");
    assert!(
        out.status.success(),
        "seed-markdown.mjs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("node answers as JSON")
}

/// The script's `Math.random`, as block ids.
fn js_ids() -> impl FnMut() -> String {
    let mut state: u32 = 0;
    move || {
        (0..8)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                char::from(BLOCK_ID_CHARS[(state >> 26) as usize])
            })
            .collect()
    }
}

const DOCUMENTS: &[&str] = &[
    // Blank input.
    "",
    "   \n\n\t\n",
    // Headings of each level, with content under them.
    "# One\nunder one\n## Two\nunder two\n### Three\n#### Four\n##### Five\n###### Six\nunder six\n####### Seven is text\n#NoSpace\n# \n#",
    "# A\n## B\n### C\ntext\n## D\n# E\n#### F\nbody of F",
    // Nested bullet and ordered lists.
    "- a\n  - b\n    - c\n      - d\n- e\n  continued e\n- f",
    "1. one\n2. two\n   1) nested\n   2) nested two\n10. ten\n\n3. after a blank",
    "- a\n1. b\n> c\n* d\n+ e",
    "> quote\n> more quote\n\n> another",
    "Intro:\n- a\n- b\n\nAfter the list",
    "# H\n- a\n- b\nText after the list\n- c",
    "- # heading in a list\n  text under it\n- b\n  ## deeper\n  more",
    // Code fences with languages.
    "```js\nconst x = 1;\n  indented();\n```\n\n````\n```inner```\n````\n\n```python <!-- id:codeA -->\nprint()\n```",
    "- item\n  ```sh\n  ls -la\n      indented\n  ```\n- next",
    "```\nnever closed\n# not a heading",
    "```rust extra words\n\n\n```",
    // Math blocks.
    "$$\nE = mc^2\n$$\n\n$$ <!-- id:math1 -->\n\\int_0^1 x\\,dx\n  \\sum\n$$\n\n$$\nunclosed",
    // Images.
    "![alt *text*](https://ex.com/a.png)\n\n![](relative/path.png)\n\n![x](hm://z6Mk/img) <!-- id:img1 -->\n\n![broken](x) trailing\n\n![no url]()",
    // Inline marks.
    "**bold** _it_ *it2* ~~strike~~ `code` <u>under</u> <mark>hi</mark> ***both*** __under bold__",
    "**a _b** c_ and _x **y_ z** and <u>a <mark>b</u> c</mark>",
    "snake_case_words and 2*3*4 and **** and ~single~ and ~~",
    "**bold never closes\n\n_it\n\n~~st\n\n`tick\n\n[link(no\n\n<u>under\n\n<span style=\"color:red\">open",
    "`` `tick` `` and ` a ` and `  ` and ```three``` and `a<br>b` and `` x `` y",
    "line<br>two<br/>three<br />four<br   >five<bra>",
    "\\*not italic\\* \\[not link\\](x) \\\\ done \\",
    // Links, autolinks, hm:// embeds.
    "[Seed](https://seed.hypermedia) and [**bold link**](hm://z6Mk/doc?v=1#blk) and <https://auto.link> and <hm://z6Mk/embed> and [empty]() and [paren](https://x.com/a_(b)) and [angle](<https://x.com/a b>) and [](https://nolabel)",
    "See <hm://z6Mk/a> and [label](hm://z6Mk/b) and <mailto:a@b.c> and <not a link> and <1bad:x>",
    "[![img](a.png) text](https://x.com) and [[a](u1)](u2) and [`code]`](u3) and [a\\]b](u4)",
    "<span style=\"color:#f00\">red</span> <span style=\"background-color:&quot;x&quot; &amp;lt;\">bg</span> <span style=\"font-size:12px\">s</span><span style=\"font-family:Mono\">f</span> <span style=\"unknown:1\">u</span> </span>",
    "<div>not html</div> <a href=x>y</a> <!-- plain comment --> a < b > c",
    // Tables.
    "| A | B |\n|---|:-:|\n| 1 | 2 |\n| 3 | 4 | 5 |",
    "<!-- id:tab1 attrs:{\"width\":100} -->\n| Name <!-- col:colA attrs:{\"width\":120} --> | Age <!-- col:colB --> |\n| --- | --- |\n| Ann | 30 | <!-- id:rowA -->\n| Bob <!-- id:rowB --> | 40 |\n| esc \\| pipe | **b** |",
    "| a | b |\n| c | d |",
    "| | |\n|---|---|\n| x | y |",
    "<!-- id:tab2 -->\n\n| a |\n|---|\n| b |",
    "- list\n| table | after |\n|---|---|\n| in | list |",
    // Block ids and typed blocks.
    "Para one <!-- id:p1 -->\n\n# Head <!-- id:h1 -->\n\n- item <!-- id:li1 -->\n- item2<!-- id:li2-->\n\nno space<!-- id:p2 -->  ",
    "<!-- id:emb1 type:Embed -->\n\nText <!-- id:btn1 type:Button attrs:{\"alignment\":\"center\"} -->\n\n[Click](https://x.com) <!-- id:btn2 type:Button -->\n\n<hm://z6Mk/x> <!-- id:emb2 type:Embed -->\n\n# Heading typed <!-- id:q1 type:Query attrs:{\"style\":\"Card\",\"n\":1.0,\"big\":12345678901234567891} -->",
    "<!-- id:grp1 -->\n  child para\n  - li\n<!-- end:grp1 -->\nafter\n\n<!-- id:lst1 -->\n- a\n- b\n\nnext\n<!-- end:nothing -->",
    "a\nb <!-- id:pp -->\nc\n\nattrs bad <!-- id:pq attrs:{not json} -->\n\nattrs array <!-- id:pr attrs:{\"a\":[1,2]} --> \n\n<!--id:tight-->",
    // Frontmatter.
    "---\nname: Doc\nsummary: A summary\ndisplayAuthor: Ann\ndisplayPublishTime: 2024-01-15\nicon: hm://z6Mk/icon\ncover: ipfs://bafy\nsiteUrl: https://x.com\nlayout: Seed/Experimental/Newspaper\nshowOutline: true\nshowActivity: false\ncontentWidth: M\nchildrenType: Group\nimportCategories: [a, b]\nimportTags: [x]\nseedExperimentalHomeOrder: UpdatedFirst\nseedExperimentalLogo: ipfs://logo\ntheme:\n  headerLayout: Center\n  colors: {primary: '#f00'}\ncustomKey: 42\n---\n# Body",
    "---\ntitle: 2024\nsummary: 12.50\ndisplayPublishTime: 2024-01-15T10:00:00Z\nshowOutline: \"no\"\nshowActivity: 0\nicon: null\ncover: ~\nlayout: [1, [2, 3], null]\nsiteUrl: {a: 1}\n'10': ten\n'2': two\nbig: 12345678901234567890\nhex: 0x1F\noct: 0o17\nflt: 1e3\ninf: .inf\nnan: .nan\nneg: -0\nflag: True\nnothing:\n---\ntext",
    "---\nname: Named\ntitle: Ignored\nshowOutline: 1\nshowActivity: ''\n---\nbody",
    "---\nkey: [unclosed\nother: x\n---\nBody",
    "---\na: 1\na: 2\n---\nBody",
    "---\njust a string\n---\nBody\n\n---\n- a\n- b\n---",
    "---\n- a\n- b\n---\nBody",
    "\u{feff}---\n---\nBody",
    "---\nname: no closing\nBody",
    "---\n# only a comment\n---\nBody",
    "---\nbase: &b {x: 1, y: [1, 2]}\nother: *b\nlist: &l [1, 2]\nname: *l\nsummary: &s plain\ndisplayAuthor: *s\n---\nx",
    "---\nsummary: |\n  multi\n  line\nname: \"quoted \\u00e9 \\\"x\\\"\"\ndisplayAuthor: 'single ''q'''\nicon: >\n  folded\n  text\ncover: !!str 123\nlayout: !!int \"7\"\ncontentWidth: !custom wide\n---\nx",
    "---   \nname: spaces after the opening\n---\t\nafter tab",
    "---\nname: x\n--- not a close\nmore: y\n---\nbody",
    // CRLF line endings.
    "---\r\nname: CR\r\n---\r\n# Title\r\n\r\nPara **b**\r\n- a\r\n- b\r\n```js\r\ncode\r\n```\r\n",
    "# Title\r\n\r\nText <!-- id:crlf1 -->\r\n| a | b |\r\n|---|---|\r\n| 1 | 2 |\r\n$$\r\nx\r\n$$\r\n",
    // Unicode and emoji, with annotations after them.
    "😀 **emoji** 日本語 _italic_ 🇺🇸 [link 👍](https://x.com) `código` 𝕏 ~~s~~ <hm://z6Mk/😀> é\u{301} **👩‍👩‍👧**",
    "# Ünïcödé 🎉 heading\n- 𝒳 list **bold** item\n| 表 | 😀 |\n|---|---|\n| **б** | \\😀 |",
    // Deeply nested content.
    "- l0\n  - l1\n    - l2\n      - l3\n        - l4\n          - l5\n            - l6\n              - l7\n                - l8\n                  - l9\n                    - l10\n                      - l11\n                        paragraph in l11\n                        ## heading deep\n                        under heading\n- back to l0",
    "# H1\n## H2\n### H3\n- a\n  1. b\n     > c\n     > d\n       - e\n### H3b\ntext",
    // Odd shapes and unclosed markers.
    "- \n-\n* * *\n---\n***\n1.\n1. \n>\n> \n#\n# \n#hashtag\n+\n2)",
    "line one\nline two\n  indented three\nline four\n    deeper\nback",
    "-\titem\n\t- tabbed\n\t\t- deeper\n \t- mixed",
    "[unclosed [nested](x)\n\n![img [x](y)](z)\n\n<<>>\n\n<a:b\n\n`` ` ``\n\n**_~~<u>all</u>~~_**",
];

#[test]
fn markdown_matches_seed_client() {
    if !node_package_present() {
        return;
    }
    let answers = node_answers(DOCUMENTS);
    assert_eq!(answers.len(), DOCUMENTS.len());
    let mut failures = Vec::new();
    for (k, (markdown, js)) in DOCUMENTS.iter().zip(&answers).enumerate() {
        if let Some(error) = js.get("error") {
            failures.push(format!("case {k} {markdown:?}: the client threw {error}"));
            continue;
        }
        let parsed = parse_markdown(markdown, &mut js_ids());
        let tree = Value::Array(parsed.tree.iter().map(|n| n.to_json()).collect());
        let metadata: Map<String, Value> = parsed.metadata.iter().cloned().collect();
        let keys: Vec<Value> = parsed
            .metadata
            .iter()
            .map(|(k, _)| Value::String(k.clone()))
            .collect();
        let ours = [
            ("tree", tree),
            ("metadata", Value::Object(metadata)),
            ("metadataKeys", Value::Array(keys)),
            ("hmNodes", Value::Array(to_hm_block_nodes(&parsed.tree))),
            ("ops", Value::Array(flatten_to_operations(&parsed.tree, ""))),
        ];
        for (field, value) in ours {
            if js[field] != value {
                failures.push(format!(
                    "case {k} {markdown:?}: {field} differs\n  client: {}\n  ours:   {}",
                    js[field], value
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} difference(s) from the client:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A small deterministic generator (xorshift64*), for the generated
/// documents.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const INDENTS: &[&str] = &["", "", "", "  ", "    ", " ", "\t", "      "];
const MARKERS: &[&str] = &[
    "", "", "", "- ", "* ", "+ ", "1. ", "2) ", "> ", "-", "10. ",
];
const STARTS: &[&str] = &[
    "",
    "",
    "",
    "",
    "# ",
    "## ",
    "### ",
    "###### ",
    "```",
    "```js ",
    "$$",
    "|",
    "| a | b |",
    "|---|---|",
    "<!-- id:blk1 -->",
    "<!-- id:blk2 type:Embed -->",
    "<!-- end:blk1 -->",
    "![",
    "#",
    "````",
];
const PIECES: &[&str] = &[
    "word",
    "word",
    "text",
    " ",
    " ",
    " ",
    "**",
    "_",
    "*",
    "~~",
    "`",
    "``",
    "[",
    "](",
    ")",
    "]",
    "(",
    "<u>",
    "</u>",
    "<mark>",
    "</mark>",
    "<br>",
    "<https://x.io/a>",
    "<hm://z6Mk/a>",
    "😀",
    "é",
    "日本",
    "\\",
    "![",
    "<span style=\"color:red\">",
    "</span>",
    "<",
    ">",
    "|",
    "\\|",
    "<!-- col:c1 -->",
    "<!-- id:cell -->",
    " <!-- id:tail1 -->",
    " <!-- id:t2 type:Button -->",
    " <!-- id:t3 attrs:{\"a\":1} -->",
    "hm://z6Mk",
    "https://e.com/x_(y)",
    "$$",
    "```",
    "\r",
    "- ",
    "1. ",
    "#",
    "!",
    "<!--",
    "-->",
    "𝕏",
    "\t",
];
const YAML_LINES: &[&str] = &[
    "name: Doc",
    "title: Title",
    "summary: 3.50",
    "showOutline: yes",
    "showActivity: 0",
    "displayPublishTime: 2024-01-15",
    "icon: null",
    "cover: ~",
    "a: [1, 2",
    "b: {c: d}",
    "- item",
    "  nested: 1",
    "key: 'q'",
    "k: \"dq\"",
    "anch: &a x",
    "ali: *a",
    "dup: 1",
    "dup: 2",
    "hex: 0x10",
    "exp: 1e5",
    "tab:\tx",
    "  - seq",
    "text: |",
    "  block",
    "...",
    "k2: !!str 5",
    "k3: !!float 1",
    "k4: !!int 0o7",
    "'5': five",
    "layout: [a, [b, c]]",
    "theme: {headerLayout: Center}",
    "# comment",
    "",
    "plain scalar",
    "k5: a: b",
    "k6: -.inf",
    "k7: +12",
    "k8: 1_000",
    "k9: .5",
    "k10: 1.",
    "null: x",
    "true: y",
    "1: one",
    "1.0: again",
    "childrenType: 12",
];

fn generated_document(rng: &mut Rng) -> String {
    let mut doc = String::new();
    if rng.below(4) == 0 {
        doc.push_str(rng.pick(&["---\n", "---\n", "\u{feff}---\n", "--- \n"]));
        for _ in 0..rng.below(6) {
            doc.push_str(rng.pick(YAML_LINES));
            doc.push('\n');
        }
        doc.push_str(rng.pick(&["---\n", "---\n", "---", "--- x\n", ""]));
    }
    for _ in 0..rng.below(12) {
        doc.push_str(rng.pick(INDENTS));
        doc.push_str(rng.pick(MARKERS));
        doc.push_str(rng.pick(STARTS));
        for _ in 0..rng.below(8) {
            doc.push_str(rng.pick(PIECES));
        }
        doc.push_str(rng.pick(&["\n", "\n", "\n", "\n\n", "\r\n"]));
    }
    doc
}

/// Many documents put together at random from the dialect's pieces (a
/// fixed seed, so a failure reproduces); `SEED_MARKDOWN_CASES` sets how
/// many.
#[test]
fn generated_documents_match_seed_client() {
    if !node_package_present() {
        return;
    }
    let count = std::env::var("SEED_MARKDOWN_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let seed = std::env::var("SEED_MARKDOWN_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed_5eed_u64);
    let mut rng = Rng(seed | 1);
    let documents: Vec<String> = (0..count).map(|_| generated_document(&mut rng)).collect();
    let refs: Vec<&str> = documents.iter().map(String::as_str).collect();
    let answers = node_answers(&refs);
    let mut failures = Vec::new();
    for (k, (markdown, js)) in refs.iter().zip(&answers).enumerate() {
        if js.get("error").is_some() {
            continue; // the client threw; nothing to compare
        }
        let parsed = parse_markdown(markdown, &mut js_ids());
        let tree = Value::Array(parsed.tree.iter().map(|n| n.to_json()).collect());
        let metadata: Map<String, Value> = parsed.metadata.iter().cloned().collect();
        let keys: Vec<Value> = parsed
            .metadata
            .iter()
            .map(|(k, _)| Value::String(k.clone()))
            .collect();
        if js["tree"] != tree
            || js["metadata"] != Value::Object(metadata.clone())
            || js["metadataKeys"] != Value::Array(keys)
            || js["hmNodes"] != Value::Array(to_hm_block_nodes(&parsed.tree))
            || js["ops"] != Value::Array(flatten_to_operations(&parsed.tree, ""))
        {
            failures.push(format!(
                "generated {k} {markdown:?}\n  client tree: {}\n  ours:        {}\n  client metadata: {}\n  ours:            {:?}",
                js["tree"], tree, js["metadata"], parsed.metadata
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {count} generated documents differ from the client:\n{}",
        failures.len(),
        failures
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
