//! The port's own tests: shapes pinned against what the client makes of them.

use super::*;
use serde_json::json;

fn counter_ids() -> impl FnMut() -> String {
    let mut n = 0;
    move || {
        n += 1;
        format!("id{n:05}")
    }
}

fn parse(md: &str) -> Parsed {
    parse_markdown(md, &mut counter_ids())
}

#[test]
fn a_hostile_table_is_not_padded_into_billions_of_cells() {
    // 60,000 columns in the header, 60,000 one-cell rows: padded, that
    // would be 3.6 billion cells.
    let mut md = format!("{}\n", "|a".repeat(60_000));
    md.push_str(&"|-".repeat(2));
    md.push('\n');
    md.push_str(&"|x\n".repeat(60_000));
    let p = parse(&md);
    let table = &p.tree[0];
    let rows = table.children.iter().filter(|c| c.block.kind == "TableRow");
    let cells: usize = rows.map(|r| r.children.len()).sum();
    assert_eq!(cells, 60_000 + 60_000, "the header's cells and one per row");
    // A small table is padded as Seed pads it.
    let p = parse("| a | b |\n|---|---|\n| x |\n");
    let row = &p.tree[0].children.last().expect("a row");
    assert_eq!(row.children.len(), 2);
}

#[test]
fn headings_nest_their_content() {
    let p = parse("# Title\n\nIntro **bold** text\n\n## Sub\n\nBody");
    let hm = to_hm_block_nodes(&p.tree);
    assert_eq!(
        Value::Array(hm),
        json!([{
            "block": {"type": "Heading", "id": "id00001", "text": "Title", "annotations": [],
                      "attributes": {"childrenType": "Group"}},
            "children": [
                {"block": {"type": "Paragraph", "id": "id00002", "text": "Intro bold text",
                           "annotations": [{"type": "Bold", "starts": [6], "ends": [10]}],
                           "attributes": {}}},
                {"block": {"type": "Heading", "id": "id00003", "text": "Sub", "annotations": [],
                           "attributes": {"childrenType": "Group"}},
                 "children": [{"block": {"type": "Paragraph", "id": "id00004", "text": "Body",
                                         "annotations": [], "attributes": {}}}]}
            ]
        }])
    );
}

#[test]
fn lists_and_operations() {
    let p = parse("- one\n- two\n  1. inner");
    let ops = flatten_to_operations(&p.tree, "");
    assert_eq!(
        Value::Array(ops),
        json!([
            {"type": "ReplaceBlock", "block": {"type": "Paragraph", "id": "id00001", "text": "",
              "annotations": [], "childrenType": "Unordered"}},
            {"type": "ReplaceBlock", "block": {"type": "Paragraph", "id": "id00002", "text": "one",
              "annotations": []}},
            {"type": "ReplaceBlock", "block": {"type": "Paragraph", "id": "id00003", "text": "two",
              "annotations": [], "childrenType": "Ordered"}},
            {"type": "ReplaceBlock", "block": {"type": "Paragraph", "id": "id00004", "text": "inner",
              "annotations": []}},
            {"type": "MoveBlocks", "blocks": ["id00004"], "parent": "id00003"},
            {"type": "MoveBlocks", "blocks": ["id00002", "id00003"], "parent": "id00001"},
            {"type": "MoveBlocks", "blocks": ["id00001"], "parent": ""}
        ])
    );
}

#[test]
fn offsets_count_utf16_units() {
    let p = parse("😀 **b** <hm://z123>");
    let b = &p.tree[0].block;
    assert_eq!(b.text, "😀 b \u{fffc}");
    assert_eq!(b.annotations[0].kind, "Bold");
    assert_eq!(
        (b.annotations[0].starts[0], b.annotations[0].ends[0]),
        (3, 4)
    );
    assert_eq!(b.annotations[1].kind, "Embed");
    assert_eq!(
        (b.annotations[1].starts[0], b.annotations[1].ends[0]),
        (5, 6)
    );
}

#[test]
fn block_ids_code_and_tables() {
    let md = "```rust <!-- id:code1 -->\nfn x() {}\n```\n\n<!-- id:tbl -->\n| A <!-- col:c1 --> | B |\n|---|---|\n| 1 | 2 | <!-- id:row1 -->";
    let p = parse(md);
    assert_eq!(p.tree[0].block.id, "code1");
    assert_eq!(p.tree[0].block.language.as_deref(), Some("rust"));
    assert_eq!(p.tree[0].block.text, "fn x() {}");
    let table = &p.tree[1];
    assert_eq!(table.block.kind, "Table");
    assert_eq!(table.block.id, "tbl");
    let kinds: Vec<_> = table
        .children
        .iter()
        .map(|c| c.block.kind.as_str())
        .collect();
    assert_eq!(
        kinds,
        ["TableColumn", "TableColumn", "TableRow", "TableRow"]
    );
    assert_eq!(table.children[0].block.id, "c1");
    assert_eq!(table.children[3].block.id, "row1");
    assert_eq!(table.children[3].children[0].block.text, "1");
    assert_eq!(
        table.children[3].children[0].block.attributes,
        Some(
            json!({"columnId": "c1"})
                .as_object()
                .cloned()
                .unwrap_or_default()
        )
    );
}

#[test]
fn frontmatter_metadata() {
    let md =
        "---\ntitle: Hello\nshowOutline: yes\ncount: 3\ntheme:\n  headerLayout: Center\n---\nBody";
    let p = parse(md);
    assert_eq!(
        p.metadata,
        vec![
            ("showOutline".to_owned(), json!(true)),
            ("count".to_owned(), json!(3)),
            ("theme".to_owned(), json!({"headerLayout": "Center"})),
            ("name".to_owned(), json!("Hello")),
        ]
    );
    assert_eq!(p.tree.len(), 1);
    // Invalid YAML: no metadata, and the frontmatter is read as markdown.
    let p = parse("---\na: [1\n---\nBody");
    assert!(p.metadata.is_empty());
    assert_eq!(p.tree.len(), 1);
    assert_eq!(p.tree[0].block.text, "--- a: [1 --- Body");
}

#[test]
fn json_block_nodes_to_operations() {
    let nodes = vec![json!({
        "block": {"type": "Paragraph", "id": "a", "text": "x", "annotations": [],
                  "attributes": {"childrenType": "Ordered"}},
        "children": [{"block": {"type": "Paragraph", "id": "b", "text": "y",
                                "annotations": [], "attributes": {}}}]
    })];
    assert_eq!(
        Value::Array(hm_block_nodes_to_operations(&nodes)),
        json!([
            {"type": "ReplaceBlock", "block": nodes[0]["block"]},
            {"type": "ReplaceBlock", "block": nodes[0]["children"][0]["block"]},
            {"type": "MoveBlocks", "blocks": ["b"], "parent": "a"},
            {"type": "MoveBlocks", "blocks": ["a"], "parent": ""}
        ])
    );
}

#[test]
fn numbers_print_as_javascript_prints_them() {
    for (x, s) in [
        (1.0, "1"),
        (-0.0, "0"),
        (0.1, "0.1"),
        (1e21, "1e+21"),
        (123456789012345680000.0, "123456789012345680000"),
        (1.5e-7, "1.5e-7"),
        (0.000001, "0.000001"),
        (f64::NAN, "NaN"),
    ] {
        assert_eq!(js_number_to_string(x), s);
    }
}

#[test]
fn no_panics_on_odd_input() {
    for md in [
        "",
        "\n",
        "---",
        "---\n",
        "[",
        "![",
        "`",
        "<",
        "<!--",
        "<!-- id:",
        "| ",
        "|\\",
        "* ** *** **** _ __",
        "[[[](",
        "# ",
        "```",
        "$$",
        "\u{feff}---\n---\n",
        "😀\\",
        "<span style=\"color:red\">x",
        "- \n  - \n    - x",
        "<!-- end:x -->",
        "\r\n\r\n",
    ] {
        let p = parse(md);
        let _ = to_hm_block_nodes(&p.tree);
        let _ = flatten_to_operations(&p.tree, "");
    }
}

// Hostile shapes: each made the JavaScript's way quadratic (or worse);
// these pin what they parse to (at sizes a debug build runs quickly;
// `examples/markdown_hostile.rs` times them at 256 KiB).

type Spanned = (String, usize, usize, Option<String>);

/// The only block's text, and its annotations as (type, start, end,
/// link).
fn inline(md: &str) -> (String, Vec<Spanned>) {
    let p = parse(md);
    assert_eq!(
        p.tree.len(),
        1,
        "one block for {:?}",
        &md[..md.len().min(40)]
    );
    let b = &p.tree[0].block;
    let annotations = b
        .annotations
        .iter()
        .map(|a| (a.kind.clone(), a.starts[0], a.ends[0], a.link.clone()))
        .collect();
    (b.text.clone(), annotations)
}

fn ann(kind: &str, start: usize, end: usize, link: Option<&str>) -> Spanned {
    (kind.into(), start, end, link.map(str::to_owned))
}

#[test]
fn unclosed_openers_stay_text() {
    for unit in [
        "[",
        "![",
        "[a](",
        "[a](<",
        "[a](b",
        "(",
        "<",
        "<a:",
        "<aaaa",
        "<br",
        "<!-- id:",
        "<span style=\"color:",
    ] {
        let md = unit.repeat(20_000 / unit.len());
        let (text, annotations) = inline(&md);
        assert!(text == md && annotations.is_empty(), "{unit:?}");
    }
    // Escaped brackets after a `[`: the walk skips each.
    let (text, annotations) = inline(&"[\\".repeat(10_000));
    assert!(text == format!("{}\\", "[".repeat(10_000)) && annotations.is_empty());
    // Backtick runs of every length, none closed, after a `[`.
    let md: String = std::iter::once("[".to_owned())
        .chain((1..150).map(|k| format!("{}a", "`".repeat(k))))
        .collect();
    assert_eq!(inline(&md), (md.clone(), vec![]));
}

#[test]
fn deeply_nested_links_merge_as_the_javascript_merges_them() {
    let n = 3000;
    let md = format!("{}a{}", "[".repeat(n), "](u)".repeat(n));
    assert_eq!(
        inline(&md),
        ("a".into(), vec![ann("Link", 0, 1, Some("u"))])
    );
    // A link per level, all over the same text: the innermost first.
    let n = 500;
    let urls: String = (0..n).map(|k| format!("]({k})")).collect();
    let (text, annotations) = inline(&format!("{}a{urls}", "[".repeat(n)));
    assert_eq!(text, "a");
    let expected: Vec<_> = (0..n)
        .map(|k| ann("Link", 0, 1, Some(&k.to_string())))
        .collect();
    assert_eq!(annotations, expected);
    // Images nest the same way, with no annotation of their own.
    let md = format!("{}a{}", "![".repeat(n), "](u)".repeat(n));
    assert_eq!(inline(&md), ("a".into(), vec![]));
}

#[test]
fn a_label_orders_what_ties_as_its_own_merge_left_it() {
    let colors = |value: &str| -> Map<String, Value> {
        json!({"value": value})
            .as_object()
            .cloned()
            .unwrap_or_default()
    };
    let order = |md: &str| -> Vec<(String, usize, usize, Option<String>)> {
        let p = parse(md);
        p.tree[0]
            .block
            .annotations
            .iter()
            .filter(|a| a.kind == "TextColor")
            .map(|a| {
                let value = a
                    .attributes
                    .as_ref()
                    .and_then(|m| m["value"].as_str())
                    .unwrap_or("");
                (value.to_owned(), a.starts[0], a.ends[0], None)
            })
            .collect()
    };
    let spans = r#"<span style="color:a">x<span style="color:b">y</span></span> <span style="color:a"><span style="color:b">z</span></span>"#;
    let tie = |first: &str, second: &str| {
        vec![
            ("a".to_owned(), 0, 2, None),
            ("b".to_owned(), 1, 2, None),
            (first.to_owned(), 3, 4, None),
            (second.to_owned(), 3, 4, None),
        ]
    };
    // Unlabelled: b's annotation was pushed first.
    assert_eq!(order(spans), tie("b", "a"));
    // In a label, the label's merge sorted a (from 0) before b.
    assert_eq!(order(&format!("[{spans}](u)")), tie("a", "b"));
    assert!(colors("a").contains_key("value"));
    // A span split by a close under it is pushed there, first.
    let md = r#"<mark><span style="color:b">y</mark><span style="color:a">w</span></span> <span style="color:a"><span style="color:b">z</span></span>"#;
    assert_eq!(
        order(md),
        vec![
            ("b".to_owned(), 0, 2, None),
            ("a".to_owned(), 1, 2, None),
            ("b".to_owned(), 3, 4, None),
            ("a".to_owned(), 3, 4, None),
        ]
    );
}

#[test]
fn a_label_ends_its_code_spans_where_it_ends() {
    // The label `[](`)`[`[`]()` holds a backtick whose closer lies past
    // the label, so there it closes nothing (checked against Seed's
    // client).
    assert_eq!(
        inline("[[](`)`[`[`]()]()`"),
        (
            "[``".into(),
            vec![ann("Link", 0, 2, Some("")), ann("Code", 0, 1, None)]
        )
    );
}

#[test]
fn closing_under_many_spans_does_not_multiply_annotations() {
    // Each `</u>` closes and reopens every `<mark>` above it.
    let k = 5000;
    let md = format!(
        "{}{}{}y",
        "<u>".repeat(k),
        "<mark>".repeat(k),
        "x</u>".repeat(k)
    );
    assert_eq!(
        inline(&md),
        (
            format!("{}y", "x".repeat(k)),
            vec![ann("Range", 0, k + 1, None), ann("Underline", 0, k, None)]
        )
    );
    let md = format!("{}{}", "<mark>".repeat(k), "</u>*a".repeat(k));
    let (text, annotations) = inline(&md);
    assert_eq!(text, "a".repeat(k));
    assert_eq!(annotations.len(), k / 2 + 1, "italics, and the marks");
}

#[test]
fn many_comment_openers_on_a_line() {
    let k = 5000;
    // The first opener's attrs run to the last `}`: not JSON.
    let md = format!("x{}}} -->", " <!-- id:a attrs:{".repeat(k));
    let p = parse(&md);
    assert_eq!(
        (p.tree[0].block.id.as_str(), p.tree[0].block.text.as_str()),
        ("a", "x")
    );
    assert_eq!(p.tree[0].block.attributes, None);
    // Only the last opener is a comment to the end of the line.
    let md = format!("x{} -->", " <!-- id:a".repeat(k));
    let p = parse(&md);
    assert_eq!(p.tree[0].block.id, "a");
    assert_eq!(
        p.tree[0].block.text,
        format!("x{}", " <!-- id:a".repeat(k - 1))
    );
    // In a table cell.
    let cell = "<!-- col:a attrs:{".repeat(k);
    let p = parse(&format!("| {cell} |\n|---|\n| x |"));
    assert_eq!(p.tree[0].children[1].children[0].block.text, cell);
    let p = parse(&format!("| {cell}}} --> |\n|---|\n| x |"));
    assert_eq!(p.tree[0].children[0].block.id, "a");
    assert_eq!(p.tree[0].children[0].block.attributes, None);
}

#[test]
fn hostile_frontmatter() {
    let keys = |md: &str| parse(md).metadata.len();
    let many: String = (0..5000).map(|k| format!("k{k}: {k}\n")).collect();
    assert_eq!(keys(&format!("---\n{many}---\nbody")), 5000);
    assert_eq!(
        keys(&format!("---\n{many}k7: again\n---\nbody")),
        0,
        "a duplicate key"
    );
    let blocks: String = (0..3000).map(|k| format!("k{k}: |\n  x\n")).collect();
    let p = parse(&format!("---\n{blocks}---\nbody"));
    assert_eq!(p.metadata.len(), 3000);
    assert_eq!(p.metadata[0].1, json!("x\n"));
    // Tabs after a `:` read as spaces, in one read or one at a time.
    let tabs: String = (0..60).map(|k| format!("t{k}:\tv{k}\n")).collect();
    let p = parse(&format!("---\n{tabs}q: \"x:\ty\"\n---\nbody"));
    assert_eq!(p.metadata.len(), 61);
    assert_eq!(p.metadata[59].1, json!("v59"));
    assert_eq!(p.metadata[60].1, json!("x:\ty"));
    let tabs: String = (0..65).map(|k| format!("t{k}:\tv\n")).collect();
    assert_eq!(keys(&format!("---\n{tabs}---\nbody")), 0, "more than 64");
    // Aliases of collections with no scalar escape the alias count;
    // copied out they would make millions of values.
    let n = 2000;
    let md = format!(
        "---\na: &a [{}]\nb: [{}]\n---\nbody",
        "[],".repeat(n),
        "*a,".repeat(n)
    );
    assert_eq!(keys(&md), 0);
    let md = format!(
        "---\na: &a [{}]\nb: [{}]\n---\nbody",
        "[],".repeat(50),
        "*a,".repeat(50)
    );
    assert_eq!(keys(&md), 2);
    // Nesting deeper than 500 through aliases.
    let mut md = String::from("---\na0: &a0 x\n");
    for k in 1..=3 {
        md.push_str(&format!(
            "a{k}: &a{k} {}*a{}{}\n",
            "[".repeat(200),
            k - 1,
            "]".repeat(200)
        ));
    }
    assert_eq!(keys(&format!("{md}---\nbody")), 0);
    md.truncate(md.rfind("a3:").unwrap_or(0));
    assert_eq!(keys(&format!("{md}---\nbody")), 3);
}

#[test]
fn deep_nesting_needs_no_deep_stack() {
    // The deepest nesting 256 KiB makes: six heading levels per tab.
    let mut md = String::new();
    let mut k = 0;
    while md.len() < 256 * 1024 {
        for level in 1..=6 {
            md.push_str(&"\t".repeat(k));
            md.push_str(&"#".repeat(level));
            md.push_str(" h\n");
        }
        k += 1;
    }
    let run = move || {
        let p = parse(&md);
        let mut depth = 0;
        let mut nodes: Vec<(&BlockNode, usize)> = p.tree.iter().map(|n| (n, 1)).collect();
        while let Some((n, d)) = nodes.pop() {
            depth = depth.max(d);
            nodes.extend(n.children.iter().map(|c| (c, d + 1)));
        }
        let hm = to_hm_block_nodes(&p.tree);
        let ops = flatten_to_operations(&p.tree, "");
        let json: Vec<Value> = p.tree.iter().map(BlockNode::to_json).collect();
        // Only dropping the trees recurses (with little per level).
        (depth, hm.len(), ops.len(), json.len())
    };
    let done = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(run)
        .map(|t| t.join());
    let Ok(Ok((depth, hm, ops, json))) = done else {
        panic!("the deep tree did not convert");
    };
    assert!(depth > 1500, "{depth}");
    assert_eq!((hm, json), (1, 1));
    assert!(ops > depth);
}
