//! The prompt conversions against the reference's worked examples.

use super::*;
use serde_json::json;

/// The blocks with every block id replaced by `#`.
fn masked(blocks: &[Value]) -> Vec<Value> {
    fn mask(node: &mut Value) {
        if let Some(Value::Object(block)) = node.get_mut("block") {
            block.insert("id".into(), "#".into());
        }
        if let Some(Value::Array(children)) = node.get_mut("children") {
            children.iter_mut().for_each(mask);
        }
    }
    let mut blocks = blocks.to_vec();
    blocks.iter_mut().for_each(mask);
    blocks
}

/// A masked node as the parser makes it.
fn node(kind: &str, text: &str, attributes: Value, children: Vec<Value>) -> Value {
    let mut node = json!({"block": {"type": kind, "id": "#", "text": text, "annotations": [], "attributes": attributes}});
    if !children.is_empty() {
        node["children"] = Value::Array(children);
    }
    node
}

fn item(text: &str) -> Value {
    node("Paragraph", text, json!({}), vec![])
}

fn parse(markdown: &str) -> Vec<Value> {
    normalize(Some(&json!(markdown)), "Prompt").expect("a valid prompt")
}

fn prompt_markdown(markdown: &str) -> String {
    to_markdown(&parse(markdown))
}

/// `blocksToMarkdown` before the strip step.
fn emitted(blocks: &[Value]) -> String {
    Renderer {
        mode: Mode::Plain,
        budget: RENDER_BUDGET,
        exhausted: false,
        lookups: None,
        embed_depth: 0,
    }
    .document(blocks)
}

fn refusal(raw: Value) -> String {
    normalize(Some(&raw), "Trigger prompt")
        .expect_err("a refused prompt")
        .0
}

fn paragraph_with(text: &str, annotations: Value) -> Vec<Value> {
    vec![
        json!({"block": {"type": "Paragraph", "id": "p", "text": text, "annotations": annotations}}),
    ]
}

// ── The spec's worked examples ──

#[test]
fn example_a_a_sentence() {
    let blocks = masked(&parse("Summarize today's news"));
    assert_eq!(json!(blocks), json!([item("Summarize today's news")]));
    assert_eq!(
        emitted(&blocks),
        "---\n---\n\nSummarize today's news <!-- id:# -->"
    );
    assert_eq!(to_markdown(&blocks), "Summarize today's news");
    assert_eq!(to_resolved_markdown(&blocks), "Summarize today's news");
}

#[test]
fn example_b_heading_paragraph_and_list() {
    let input = "# Daily\n\nCheck **open** issues and [file](https://x.y) them.\n\n- one\n- two";
    let blocks = masked(&parse(input));
    let expected = json!([{
        "block": {"type": "Heading", "id": "#", "text": "Daily", "annotations": [], "attributes": {"childrenType": "Group"}},
        "children": [{
            "block": {"type": "Paragraph", "id": "#", "text": "Check open issues and file them.",
                "annotations": [{"type": "Bold", "starts": [6], "ends": [10]},
                                {"type": "Link", "starts": [22], "ends": [26], "link": "https://x.y"}],
                "attributes": {"childrenType": "Unordered"}},
            "children": [item("one"), item("two")]
        }]
    }]);
    assert_eq!(json!(blocks), expected);
    assert_eq!(
        emitted(&blocks),
        "---\n---\n\n# Daily <!-- id:# -->\n\n  Check **open** issues and [file](https://x.y) them. <!-- id:# -->\n    - one <!-- id:# -->\n    - two <!-- id:# -->"
    );
    let markdown =
        "# Daily\n\n  Check **open** issues and [file](https://x.y) them.\n    - one\n    - two";
    assert_eq!(to_markdown(&blocks), markdown);
    assert_eq!(to_resolved_markdown(&blocks), markdown);
}

#[test]
fn example_c_code_fence() {
    let blocks = masked(&parse("```js\nlet x = 1\n```"));
    assert_eq!(
        json!(blocks),
        json!([node("Code", "let x = 1", json!({"language": "js"}), vec![])])
    );
    assert_eq!(
        emitted(&blocks),
        "---\n---\n\n```js <!-- id:# -->\nlet x = 1\n```"
    );
    assert_eq!(to_markdown(&blocks), "```js\nlet x = 1\n```");
}

#[test]
fn example_stored_row() {
    let row = r#"{"type":"seed-prompt-blocks","blocks":[{"block":{"type":"Paragraph","id":"TkvmNbwZ","text":"Summarize today's news","annotations":[],"attributes":{}}}]}"#;
    let blocks = from_stored(row);
    assert_eq!(
        json!(blocks),
        json!([{"block": {"type": "Paragraph", "id": "TkvmNbwZ", "text": "Summarize today's news", "annotations": [], "attributes": {}}}])
    );
    let stored = to_stored(&blocks);
    assert!(stored.starts_with(r#"{"type":"seed-prompt-blocks","blocks":[{"block":"#));
    assert!(!stored.contains("children"));
    let reparsed: Value = serde_json::from_str(&stored).expect("JSON");
    assert_eq!(reparsed, serde_json::from_str::<Value>(row).expect("JSON"));
}

#[test]
fn more_verified_pairs() {
    let pairs = [
        ("- one\n- two", "- one\n  - two"),
        ("Para1\n\nPara2", "Para1\nPara2"),
        ("line1\nline2", "line1\nline2"),
        ("*a* _b_ ~~c~~", "_a_ _b_ ~~c~~"),
        ("# A\n## B\ntext\n# C", "# A\n\n## B\n\n    text\n# C"),
        ("## B only\n\ntext", "# B only\n\n  text"),
        ("![](x)", "![image](file://x)"),
        ("<https://a.b>", "[https://a.b](https://a.b)"),
        ("<hm://z/p>", "<hm://z/p>"),
        ("---\nname: X\n---\nBody", "Body"),
        ("hard  \nbreak", "hard\nbreak"),
        ("* * *", "- _ _"),
        (
            "# H\n- a\n- b\n\nafter",
            "# H\n\n\n    - a\n    - b\n\n  after",
        ),
        ("> quoted", "> quoted"),
        ("#tag", "#tag"),
    ];
    for (input, expected) in pairs {
        assert_eq!(prompt_markdown(input), expected, "for {input:?}");
    }
    assert_eq!(
        refusal(json!("<!-- id:abc -->")),
        "Trigger prompt is required"
    );
}

// ── Inline formatting ──

#[test]
fn nested_annotations_come_before_the_enclosing_one() {
    let blocks = parse("**[a](u)**");
    assert_eq!(
        blocks[0]["block"]["annotations"],
        json!([{"type": "Link", "starts": [0], "ends": [1], "link": "u"}, {"type": "Bold", "starts": [0], "ends": [1]}])
    );
    assert_eq!(to_markdown(&blocks), "**[a](u)**");

    let blocks = parse("[**a**](u)");
    assert_eq!(
        blocks[0]["block"]["annotations"],
        json!([{"type": "Bold", "starts": [0], "ends": [1]}, {"type": "Link", "starts": [0], "ends": [1], "link": "u"}])
    );
    assert_eq!(to_markdown(&blocks), "[**a**](u)");

    let blocks = parse("***e***");
    assert_eq!(blocks[0]["block"]["text"], "*e*");
    assert_eq!(
        blocks[0]["block"]["annotations"],
        json!([{"type": "Bold", "starts": [0], "ends": [2]}])
    );
}

#[test]
fn markers_at_one_position_nest() {
    // Openings in reverse order of appearance, closings in order.
    let blocks = paragraph_with(
        "ab",
        json!([{"type": "Bold", "starts": [0], "ends": [2]}, {"type": "Italic", "starts": [0], "ends": [2]}]),
    );
    assert_eq!(to_markdown(&blocks), "_**ab**_");
    let blocks = paragraph_with(
        "abc",
        json!([{"type": "Code", "starts": [1], "ends": [2]}, {"type": "Underline", "starts": [0, 2], "ends": [1, 3]}]),
    );
    // At one position every opening comes before every closing, even when
    // that interleaves touching ranges (as the reference does).
    assert_eq!(to_markdown(&blocks), "<u>a`</u>b<u>`c</u>");
}

#[test]
fn offsets_are_utf16_units() {
    let blocks = parse("😀 **b**");
    assert_eq!(blocks[0]["block"]["text"], "😀 b");
    assert_eq!(
        blocks[0]["block"]["annotations"],
        json!([{"type": "Bold", "starts": [3], "ends": [4]}])
    );
    assert_eq!(to_markdown(&blocks), "😀 **b**");
}

#[test]
fn inline_rules() {
    let text = |markdown: &str| parse(markdown)[0]["block"]["text"].clone();
    assert_eq!(text(r"C:\Users\x"), r"C:Usersx");
    assert_eq!(text("trailing \\"), "trailing \\");
    for literal in ["a **b", "`b", "[x]", "[x](y", "<u>x</u>", "_x_", "__x__"] {
        let blocks = parse(literal);
        assert_eq!(blocks[0]["block"]["text"], literal);
        assert_eq!(
            blocks[0]["block"]["annotations"],
            json!([]),
            "for {literal:?}"
        );
    }
    assert_eq!(text("see ![alt](u) here"), "see alt here");
    let blocks = parse("[a](u \"t\")");
    assert_eq!(blocks[0]["block"]["annotations"][0]["link"], "u \"t\"");
    let blocks = parse("a `**x**` b");
    assert_eq!(blocks[0]["block"]["text"], "a **x** b");
    assert_eq!(
        blocks[0]["block"]["annotations"],
        json!([{"type": "Code", "starts": [2], "ends": [7]}])
    );
    let blocks = parse("x <hm://z/p> y");
    assert_eq!(blocks[0]["block"]["text"], "x \u{fffc} y");
    assert_eq!(
        blocks[0]["block"]["annotations"],
        json!([{"type": "Embed", "starts": [2], "ends": [3], "link": "hm://z/p"}])
    );
}

// ── Blocks ──

#[test]
fn lists_attach_to_the_preceding_text() {
    let container =
        |list_type: &str, items| node("Paragraph", "", json!({"childrenType": list_type}), items);
    assert_eq!(
        json!(masked(&parse("P\n- a\n\n- b"))),
        json!([
            node(
                "Paragraph",
                "P",
                json!({"childrenType": "Unordered"}),
                vec![item("a")]
            ),
            container("Unordered", vec![item("b")])
        ])
    );
    assert_eq!(
        json!(masked(&parse("1. x\n2) y\n10. z"))),
        json!([
            container("Ordered", vec![item("x")]),
            node(
                "Paragraph",
                "2) y",
                json!({"childrenType": "Ordered"}),
                vec![item("z")]
            )
        ])
    );
    assert_eq!(
        json!(masked(&parse("# H\n- a\n- b"))),
        json!([node(
            "Heading",
            "H",
            json!({"childrenType": "Unordered"}),
            vec![item("a"), item("b")]
        )])
    );
    assert_eq!(prompt_markdown("# H\n- a\n- b"), "# H\n  - a\n  - b");
    assert_eq!(
        json!(masked(&parse("# H\n- a\n- b\n\nafter"))),
        json!([node(
            "Heading",
            "H",
            json!({"childrenType": "Group"}),
            vec![
                container("Unordered", vec![item("a"), item("b")]),
                item("after")
            ]
        )])
    );
    // Mixed markers and indented sub-items make one flat list.
    assert_eq!(
        json!(masked(&parse("- a\n  * b\n+ c"))),
        json!([container(
            "Unordered",
            vec![item("a"), item("b"), item("c")]
        )])
    );
}

#[test]
fn headings_nest_by_level() {
    let group = || json!({"childrenType": "Group"});
    assert_eq!(
        json!(masked(&parse("# A\n## B\ntext\n# C"))),
        json!([
            node(
                "Heading",
                "A",
                group(),
                vec![node("Heading", "B", group(), vec![item("text")])]
            ),
            node("Heading", "C", group(), vec![])
        ])
    );
    assert_eq!(
        json!(masked(&parse("#### Deep\n##### Deeper"))),
        json!([node(
            "Heading",
            "Deep",
            group(),
            vec![node("Heading", "Deeper", group(), vec![])]
        )])
    );
    assert_eq!(
        json!(masked(&parse("## Lead\n# Top"))),
        json!([
            node("Heading", "Lead", group(), vec![]),
            node("Heading", "Top", group(), vec![])
        ])
    );
    assert_eq!(
        parse("#  Spaced  Title  #")[0]["block"]["text"],
        "Spaced  Title  #"
    );
    assert_eq!(parse("####### seven")[0]["block"]["type"], "Paragraph");
}

#[test]
fn code_and_math_fences() {
    let blocks = parse("```js title=x\n  indented\n\n```\nafter");
    assert_eq!(blocks[0]["block"]["text"], "  indented\n");
    assert_eq!(
        blocks[0]["block"]["attributes"],
        json!({"language": "js title=x"})
    );
    assert_eq!(blocks[1]["block"]["text"], "after");

    let blocks = parse("```\nunclosed\n# not a heading");
    assert_eq!(
        json!(masked(&blocks)),
        json!([node("Code", "unclosed\n# not a heading", json!({}), vec![])])
    );

    let blocks = parse("```js <!-- id:c1 -->\nlet x\n```");
    assert_eq!(blocks[0]["block"]["id"], "c1");
    assert_eq!(blocks[0]["block"]["attributes"], json!({"language": "js"}));

    let blocks = parse("$$ dropped <!-- id:m1 -->\nx^2\n$$");
    assert_eq!(
        json!(blocks),
        json!([{"block": {"type": "Math", "id": "m1", "text": "x^2", "annotations": [], "attributes": {}}}])
    );
    assert_eq!(to_markdown(&blocks), "$$\nx^2\n$$");

    assert_eq!(parse("~~~\nx\n~~~")[0]["block"]["text"], "~~~\nx\n~~~");
}

#[test]
fn id_comments() {
    assert_eq!(parse("# Title <!-- id:abc -->")[0]["block"]["id"], "abc");
    let blocks = parse("Para <!-- id:p1 -->\nsecond <!-- id:p2 -->");
    assert_eq!(blocks[0]["block"]["id"], "p1");
    assert_eq!(blocks[0]["block"]["text"], "Para\nsecond <!-- id:p2 -->");
    // The id's greedy run gives back the dashes of `-->`.
    assert_eq!(parse("Text <!-- id:abc-->")[0]["block"]["id"], "abc");
    assert_eq!(parse("Text <!-- id:abc--->")[0]["block"]["id"], "abc-");
    let blocks = parse("<!-- id:list1 -->\n- a <!-- id:i1 -->");
    assert_eq!(blocks[0]["block"]["id"], "list1");
    assert_eq!(blocks[0]["children"][0]["block"]["id"], "i1");
    let generated = parse("x")[0]["block"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(generated.len(), 8);
    assert!(generated
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'));
}

#[test]
fn images() {
    let blocks = parse("![Logo](https://a/b.png) trailing <!-- id:i1 -->");
    assert_eq!(
        json!(blocks),
        json!([{"block": {"type": "Image", "id": "i1", "text": "Logo", "annotations": [], "attributes": {}, "link": "https://a/b.png"}}])
    );
    let ipfs = vec![json!({"block": {"type": "Image", "id": "i", "link": "ipfs://cid"}})];
    assert_eq!(to_markdown(&ipfs), "![image](https://ipfs.io/ipfs/cid)");
}

#[test]
fn tables() {
    let markdown = "<!-- id:t1 -->\n| Name <!-- col:c1 --> | Age <!-- col:c2 --> |\n| --- | --- |\n| Al\\|ice | **30** | <!-- id:r1 -->";
    let blocks = parse(markdown);
    assert_eq!(blocks.len(), 1);
    let table = &blocks[0];
    assert_eq!(table["block"]["type"], "Table");
    assert_eq!(table["block"]["id"], "t1");
    let children = table["children"].as_array().cloned().unwrap_or_default();
    let kinds: Vec<&str> = children
        .iter()
        .map(|c| c["block"]["type"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        kinds,
        ["TableColumn", "TableColumn", "TableRow", "TableRow"]
    );
    assert_eq!(children[0]["block"]["id"], "c1");
    assert_eq!(
        children[2]["block"]["attributes"],
        json!({"isHeader": true})
    );
    assert_eq!(children[3]["block"]["id"], "r1");
    let cell = &children[3]["children"][1]["block"];
    assert_eq!(cell["text"], "30");
    assert_eq!(cell["attributes"], json!({"columnId": "c2"}));
    assert_eq!(
        cell["annotations"],
        json!([{"type": "Bold", "starts": [0], "ends": [2]}])
    );
    assert_eq!(children[3]["children"][0]["block"]["text"], "Al|ice");
    assert_eq!(
        to_markdown(&blocks),
        "| Name <!-- col:c1 --> | Age <!-- col:c2 --> |\n| --- | --- |\n| Al\\|ice | **30** |"
    );
    // The emitted markdown reads back to the same table.
    let again = from_markdown(&emitted(&blocks));
    assert_eq!(masked(&again), masked(&blocks));
    assert_eq!(again[0]["children"][3]["block"]["id"], "r1");
}

// ── normalize ──

#[test]
fn refusals() {
    assert_eq!(
        normalize(None, "Trigger prompt"),
        Err(Invalid("Trigger prompt must be blocks".into()))
    );
    for raw in [json!(5), json!({}), json!(null), json!(true)] {
        assert_eq!(refusal(raw), "Trigger prompt must be blocks");
    }
    for raw in [
        json!(""),
        json!(" \n\t\u{feff}"),
        json!("<!-- id:abc -->"),
        json!([]),
    ] {
        assert_eq!(refusal(raw), "Trigger prompt is required");
    }
    assert_eq!(
        refusal(json!([{"block": {"id": "a", "type": "Paragraph", "text": ""}}])),
        "Trigger prompt is required"
    );
    assert_eq!(
        refusal(json!("x".repeat(MAX_PROMPT_BYTES + 1))),
        "Trigger prompt is too large"
    );
    assert!(normalize(
        Some(&json!(format!(" {} ", "x".repeat(MAX_PROMPT_BYTES)))),
        "P"
    )
    .is_ok());
    assert_eq!(
        refusal(json!([{"block": {"id": "a", "type": "Paragraph", "text": "x".repeat(70_000)}}])),
        "Trigger prompt is too large"
    );
    let invalid_nodes = [
        json!([1]),
        json!([null]),
        json!([[]]),
        json!([{}]),
        json!([{"block": []}]),
        json!([{"block": {"id": "", "type": "Paragraph"}}]),
        json!([{"block": {"id": "a", "type": 5}}]),
        json!([{"block": {"id": "a", "type": "Paragraph", "text": "x"}, "children": [{"block": null}]}]),
        json!([{"block": {"type": "Paragraph"}, "children": "x"}]),
    ];
    for raw in invalid_nodes {
        assert_eq!(
            refusal(raw.clone()),
            "Trigger prompt blocks are invalid",
            "for {raw}"
        );
    }
    for children in [json!("x"), json!({}), json!(0)] {
        let raw =
            json!([{"block": {"id": "a", "type": "Paragraph", "text": "x"}, "children": children}]);
        assert_eq!(refusal(raw), "Trigger prompt block children are invalid");
    }
}

/// A chain of `depth` paragraphs, each the only child of the one before.
fn chain(depth: usize) -> Vec<Value> {
    let mut node = json!({"block": {"id": "leaf", "type": "Paragraph", "text": "leaf"}});
    for level in 1..depth {
        node = json!({"block": {"id": format!("n{level}"), "type": "Paragraph", "text": "x"}, "children": [node]});
    }
    vec![node]
}

#[test]
fn nesting_is_bounded() {
    assert!(normalize(Some(&Value::Array(chain(64))), "P").is_ok());
    assert_eq!(
        refusal(Value::Array(chain(65))),
        "Trigger prompt blocks are invalid"
    );
    // The renderer stops at the same depth on blocks nobody checked.
    let deep = to_markdown(&chain(300));
    assert_eq!(deep.matches('x').count(), 64);
    assert!(!deep.contains("leaf"));
}

#[test]
fn blocks_are_kept_as_sent() {
    let raw = json!([
        {"block": {"id": "a", "type": "Paragraph", "text": "x", "custom": {"k": 1}}, "children": [], "extra": 1},
        {"block": {"id": "b", "type": "Heading", "text": "h"}, "children": null}
    ]);
    let blocks = normalize(Some(&raw), "P").expect("valid");
    assert_eq!(
        json!(blocks),
        json!([
            {"block": {"id": "a", "type": "Paragraph", "text": "x", "custom": {"k": 1}}, "children": []},
            {"block": {"id": "b", "type": "Heading", "text": "h"}}
        ])
    );
}

#[test]
fn js_trim_semantics() {
    let blocks = parse(" \u{feff}\u{a0}x\u{85}\u{3000}");
    assert_eq!(blocks[0]["block"]["text"], "x\u{85}");
    assert!(normalize(Some(&json!("\u{85}")), "P").is_ok());
}

// ── Storage ──

#[test]
fn storage_round_trip_is_the_identity() {
    let raw = json!([
        {"block": {"id": "a", "type": "Paragraph", "text": "x", "annotations": [{"type": "Bold", "starts": [0], "ends": [1]}], "z": [1.5, null]},
         "children": [{"block": {"id": "b", "type": "Paragraph", "text": "y"}, "children": []}]},
        {"block": {"id": "c", "type": "Unknown", "text": "z"}}
    ]);
    let blocks = normalize(Some(&raw), "Prompt").expect("valid");
    assert_eq!(from_stored(&to_stored(&blocks)), blocks);
    let parsed = parse(
        "# Daily\n\nCheck **open** issues.\n\n- one\n- two\n\n| a | b |\n| - | - |\n| 1 | 2 |",
    );
    assert_eq!(from_stored(&to_stored(&parsed)), parsed);
}

#[test]
fn legacy_and_invalid_rows_read_as_markdown() {
    let blocks = from_stored("  Plain **old** prompt\n");
    assert_eq!(blocks[0]["block"]["text"], "Plain old prompt");
    assert_eq!(
        blocks[0]["block"]["annotations"],
        json!([{"type": "Bold", "starts": [6], "ends": [9]}])
    );
    assert!(from_stored("").is_empty());
    assert!(from_stored("<!-- id:x -->").is_empty());
    let row = r#"{"type":"seed-prompt-blocks","blocks":[{"block":{}}]}"#;
    assert_eq!(json!(masked(&from_stored(row))), json!([item(row)]));
    assert_eq!(from_stored("42")[0]["block"]["text"], "42");
}

// ── Markdown out ──

#[test]
fn resolved_joins_top_level_blocks_with_a_blank_line() {
    let blocks = parse("Para1\n\nPara2");
    assert_eq!(to_markdown(&blocks), "Para1\nPara2");
    assert_eq!(to_resolved_markdown(&blocks), "Para1\n\nPara2");
}

#[test]
fn resolved_fallbacks_without_a_client() {
    assert_eq!(
        to_resolved_markdown(&parse("<hm://z/p>")),
        "[↗ p](hm://z/p)"
    );
    assert_eq!(
        to_resolved_markdown(&parse("see <hm://z1234567890123>")),
        "see [↗ z12345678901...](hm://z1234567890123)"
    );
    assert_eq!(
        to_resolved_markdown(&parse("<https://seed.hyper.media/hm/uid/a/b>")),
        "[https://seed.hyper.media/hm/uid/a/b](https://seed.hyper.media/hm/uid/a/b)"
    );
    let embeds = paragraph_with(
        "\u{fffc} \u{fffc} \u{fffc}",
        json!([
            {"type": "Embed", "starts": [0], "ends": [1], "link": "https://seed.hyper.media/hm/uid/a/b?v=1#blk"},
            {"type": "Embed", "starts": [2], "ends": [3], "link": "mailto:x"},
            {"type": "Embed", "starts": [4], "ends": [5]}
        ]),
    );
    assert_eq!(
        to_resolved_markdown(&embeds),
        "[↗ a/b](https://seed.hyper.media/hm/uid/a/b?v=1#blk) [↗ mailto:x](mailto:x) [↗ embed]()"
    );
    assert_eq!(
        to_markdown(&embeds),
        "<https://seed.hyper.media/hm/uid/a/b?v=1#blk> <mailto:x> <>"
    );

    let embed = vec![json!({"block": {"type": "Embed", "id": "e", "link": "hm://abc/doc"}})];
    assert_eq!(to_markdown(&embed), "> [Embed: hm://abc/doc](hm://abc/doc)");
    assert_eq!(
        to_resolved_markdown(&embed),
        "> [Embed: hm://abc/doc](hm://abc/doc)"
    );

    let query = |attributes: Value| {
        vec![json!({"block": {"type": "Query", "id": "q", "attributes": attributes}})]
    };
    assert_eq!(to_markdown(&query(json!({}))), "<!-- Query block -->");
    assert_eq!(
        to_resolved_markdown(&query(json!({}))),
        "<!-- Query: no space specified -->"
    );
    assert_eq!(
        to_resolved_markdown(&query(json!({"space": "abc"}))),
        QUERY_WITHOUT_CLIENT
    );
    assert_eq!(
        to_resolved_markdown(&query(json!({"query": {"includes": []}}))),
        QUERY_WITHOUT_CLIENT
    );
    assert_eq!(
        to_resolved_markdown(&query(json!({"query": {"includes": null}}))),
        "<!-- Query: no space specified -->"
    );
}

#[test]
fn other_block_types() {
    let blocks = vec![
        json!({"block": {"type": "Video", "id": "v", "link": "ipfs://vid"}}),
        json!({"block": {"type": "File", "id": "f", "link": "https://f", "attributes": {"name": "report.pdf"}}}),
        json!({"block": {"type": "Button", "id": "b", "link": "https://b"}}),
        json!({"block": {"type": "WebEmbed", "id": "w", "link": "https://w"}}),
        json!({"block": {"type": "Nostr", "id": "n", "link": "nostr:x"}}),
        json!({"block": {"type": "Mystery", "id": "m", "text": "plain **kept**", "annotations": [{"type": "Bold", "starts": [0], "ends": [1]}]}}),
        json!({"block": {"type": "Mystery", "id": "m2"}}),
        json!({"block": {"type": "Paragraph", "id": "q", "text": "quote", "attributes": {"childrenType": "Blockquote"}},
               "children": [{"block": {"type": "Paragraph", "id": "q1", "text": "inner"}}]}),
    ];
    assert_eq!(
        to_markdown(&blocks),
        "[Video](https://ipfs.io/ipfs/vid)\n[report.pdf](https://f)\n[Button](https://b)\n[Web Embed](https://w)\n[Nostr: nostr:x](nostr:x)\nplain **kept**\nquote\n  > inner"
    );
}

#[test]
fn hostile_annotation_positions() {
    let bold = |starts: Value, ends: Value| {
        to_markdown(&paragraph_with(
            "abc",
            json!([{"type": "Bold", "starts": starts, "ends": ends}]),
        ))
    };
    assert_eq!(bold(json!([1.5]), json!([2.9])), "a**b**c");
    assert_eq!(bold(json!([-1]), json!([3])), "ab**c**");
    assert_eq!(bold(json!(["x"]), json!([2])), "ab**c");
    assert_eq!(bold(json!([1e300]), json!([-1e300])), "**abc**");
    assert_eq!(bold(json!([null, 1]), json!({})), "a**bc");
    assert_eq!(bold(json!("01"), json!([1])), "abc");
    let split = paragraph_with("😀", json!([{"type": "Bold", "starts": [1], "ends": [2]}]));
    assert_eq!(to_markdown(&split), "\u{fffd}**\u{fffd}**");
    // U+FFFC is dropped only when there are annotations.
    assert_eq!(
        to_markdown(&paragraph_with("a\u{fffc}b", json!([]))),
        "a\u{fffc}b"
    );
    assert_eq!(
        to_markdown(&paragraph_with(
            "a\u{fffc}b",
            json!([null, 3, {"type": "Bold"}])
        )),
        "ab"
    );
    assert_eq!(
        to_markdown(&paragraph_with("abc", json!("not a list"))),
        "abc"
    );
}

#[test]
fn non_string_fields_print_as_javascript_would() {
    let blocks = vec![
        json!({"block": {"type": "Paragraph", "id": 7, "text": 1.5}}),
        json!({"block": {"type": "Paragraph", "id": "b", "text": ["a", null, ["b", 2]]}}),
        json!({"block": {"type": "Heading", "text": true}}),
    ];
    assert_eq!(to_markdown(&blocks), "1.5\na,,b,2\n# true");
    assert_eq!(emitted(&blocks[..1]), "---\n---\n\n1.5 <!-- id:7 -->");
    for (number, printed) in [
        (0.0, "0"),
        (-0.0, "0"),
        (123.0, "123"),
        (1.5, "1.5"),
        (0.1, "0.1"),
        (0.000001, "0.000001"),
        (1e-7, "1e-7"),
        (1e21, "1e+21"),
        (1.25e22, "1.25e+22"),
        (123456789012345680000.0, "123456789012345680000"),
        (-2.5, "-2.5"),
    ] {
        assert_eq!(js_number(number), printed);
    }
}

#[test]
fn frontmatter() {
    assert_eq!(prompt_markdown("---\nname: X\n---\nBody"), "Body");
    assert_eq!(prompt_markdown("---\n---\nBody"), "Body");
    assert_eq!(prompt_markdown("  \n---\nname: X\n---\nBody"), "Body");
    let mapping = "---\ntitle: \"Daily: news\"\ntags: [a, b]\n# note\ntheme:\n  headerLayout: Center\n---\nBody";
    assert_eq!(prompt_markdown(mapping), "Body");
    // Deviation: the reference drops scalar YAML too; this keeps it.
    assert_eq!(
        prompt_markdown("---\nHello\n---\nWorld"),
        "---\nHello\n---\nWorld"
    );
    // Malformed YAML keeps the text, as in the reference.
    for kept in [
        "---\nname: a: b\n---\nBody",
        "---\nname: a\nname: b\n---\nBody",
        "---\nname: \"open\n---\nBody",
    ] {
        assert_eq!(prompt_markdown(kept), kept);
    }
    assert_eq!(
        prompt_markdown("---\nno closing fence"),
        "---\nno closing fence"
    );
}

#[test]
fn strip_step() {
    assert_eq!(strip_artifacts("---\n---\n\nx <!-- id:a -->"), "x");
    assert_eq!(
        strip_artifacts("a\t <!-- id:x y -->b <!-- id: -->c"),
        "ab <!-- id: -->c"
    );
    assert_eq!(strip_artifacts("<!-- id:a <!-- id:b -->z"), "z");
    assert_eq!(strip_artifacts("<!-- id:a>b -->"), "<!-- id:a>b -->");
    assert_eq!(
        strip_artifacts("| a <!-- col:c --> |"),
        "| a <!-- col:c --> |"
    );
}

// ── Hostile input ──

#[test]
fn hostile_markdown_terminates() {
    let big = MAX_PROMPT_BYTES;
    let inputs = [
        "[".repeat(big),
        "**".repeat(big / 2),
        "*a".repeat(big / 2),
        "*".repeat(big),
        "<".repeat(big),
        "<a:".repeat(big / 3),
        "[a](".repeat(big / 4),
        "![".repeat(big / 2),
        "`".repeat(big),
        "\\".repeat(big),
        "*[<`!".repeat(big / 5),
        "# a\n".repeat(big / 4),
        "- a\n".repeat(big / 4),
        "|\n".repeat(big / 2),
        "<!-- id:".repeat(big / 8),
        format!("{} -->", " <!-- id:a".repeat(big / 11)),
        format!("{}a{}", "[".repeat(big / 5), "](u)".repeat(big / 5)),
        format!("{}x{}", "*[".repeat(big / 6), "](u)*".repeat(big / 6)),
    ];
    for input in &inputs {
        let blocks = from_markdown(input);
        let _ = to_markdown(&blocks);
        let _ = to_resolved_markdown(&blocks);
        let _ = normalize(Some(&json!(input)), "P");
    }
    // Deeply nested links parse without recursion.
    let depth = big / 5;
    let blocks = from_markdown(&format!("{}a{}", "[".repeat(depth), "](u)".repeat(depth)));
    assert_eq!(blocks[0]["block"]["text"], "a");
    assert_eq!(
        blocks[0]["block"]["annotations"].as_array().map(Vec::len),
        Some(depth)
    );
}

#[test]
fn oversized_tables_stay_sparse_and_are_too_large() {
    let markdown = format!("{}\n{}", "|".repeat(20_000), "|x\n".repeat(10_000));
    let blocks = from_markdown(&markdown);
    let rows = blocks[0]["children"].as_array().map_or(0, Vec::len);
    assert_eq!(rows, 19_999 + 10_001);
    assert_eq!(refusal(json!(markdown)), "Trigger prompt is too large");
}

#[test]
fn repetition_is_budgeted() {
    let link = "x".repeat(10_000);
    let many = paragraph_with(
        "abc",
        json!([{"type": "Link", "link": link, "starts": vec![0; 20_000], "ends": vec![1; 20_000]}]),
    );
    assert!(to_markdown(&many).len() <= RENDER_BUDGET + 3);
    assert_eq!(refusal(Value::Array(many)), "Trigger prompt is too large");

    let columns = (0..3_000).map(|_| json!({"block": {"type": "TableColumn", "id": "c"}}));
    let rows = (0..3_000).map(|i| {
        json!({"block": {"type": "TableRow", "id": format!("r{i}")},
               "children": [{"block": {"type": "Paragraph", "id": "x", "text": "cell", "attributes": {"columnId": "c"}}}]})
    });
    let table = vec![
        json!({"block": {"type": "Table", "id": "t"}, "children": columns.chain(rows).collect::<Vec<_>>()}),
    ];
    assert!(to_markdown(&table).is_empty());
    assert_eq!(refusal(Value::Array(table)), "Trigger prompt is too large");
}
