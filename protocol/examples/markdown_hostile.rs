//! How long the markdown port takes over hostile input: for each shape, a
//! 256 KiB document made of it, parsed three times; prints the fastest and
//! the slowest parse and the blocks made. Each of these once took the
//! JavaScript's way (and the port's first cut) quadratic time, or memory.
//!
//!   cargo run --release -p agentos-protocol --example markdown_hostile [filter]
//!
//! Timing lives here, not in the tests (which pin what these parse to, at
//! smaller sizes).

use std::time::{Duration, Instant};

use agentos_protocol::seed::markdown::{parse_markdown, BlockNode};

const SIZE: usize = 256 * 1024;

/// `unit` repeated to about `SIZE` bytes.
fn fill(unit: &str) -> String {
    unit.repeat(SIZE / unit.len())
}

/// Lines made by `line(k)` until `SIZE` bytes.
fn lines(line: impl Fn(usize) -> String) -> String {
    let mut out = String::new();
    let mut k = 0;
    while out.len() < SIZE {
        out.push_str(&line(k));
        k += 1;
    }
    out
}

/// `open` and `close(k)` nested around `inner` until `SIZE` bytes.
fn nested(open: &str, inner: &str, close: impl Fn(usize) -> String) -> String {
    let (mut head, mut tail) = (String::new(), Vec::new());
    while head.len() + tail.iter().map(String::len).sum::<usize>() < SIZE {
        head.push_str(open);
        tail.push(close(tail.len()));
    }
    tail.reverse();
    format!("{head}{inner}{}", tail.concat())
}

fn shapes() -> Vec<(&'static str, String)> {
    let k = |unit: usize| SIZE / unit;
    vec![
        // Brackets, parentheses, link and image openers.
        ("[ ×n", fill("[")),
        ("[a]( ×n", fill("[a](")),
        ("![ ×n", fill("![")),
        ("[]( ×n", fill("[](")),
        ("[a](< ×n", fill("[a](<")),
        ("[a](b ×n", fill("[a](b")),
        ("( ×n", fill("(")),
        ("[a]( then ( ×n", format!("[a]({}", fill("("))),
        ("[\\ ×n", fill("[\\")),
        ("[` ×n", fill("[`")),
        ("[[[…a](u)](u)…", nested("[", "a", |_| "](u)".into())),
        (
            "[[[…a](0)](1)… distinct",
            nested("[", "a", |k| format!("]({k})")),
        ),
        ("![![![…a](u)](u)…", nested("![", "a", |_| "](u)".into())),
        (
            "[<mark>[<mark>…a</mark>](k)…",
            nested("[<mark>", "a", |k| format!("</mark>]({k})")),
        ),
        ("[x](u) ×n", fill("[x](u)")),
        (
            "[<a:`> ×n then `](u) ×n",
            format!("{}{}", "[<a:`>".repeat(k(12)), "`](u)".repeat(k(12))),
        ),
        (
            "[` ×n then ](u) ×n",
            format!("{}{}`", "[`".repeat(k(8)), "](u)".repeat(k(8))),
        ),
        // Block id comments.
        ("<!-- id: ×n", fill("<!-- id:")),
        (
            " <!-- id:a ×n then -->",
            format!("x{} -->", " <!-- id:a".repeat(k(10))),
        ),
        (
            " <!-- id:a attrs:{ ×n then } -->",
            format!("x{}}} -->", " <!-- id:a attrs:{".repeat(k(18))),
        ),
        (
            " <!-- id:a type:b ×n then -->",
            format!("x{} -->", " <!-- id:a type:b".repeat(k(17))),
        ),
        ("<!-- id:a --> lines", lines(|_| "<!-- id:a -->\n".into())),
        (
            "a <!-- id:a --> lines",
            lines(|_| "a <!-- id:a -->\n".into()),
        ),
        ("<!-- end:a --> lines", lines(|_| "<!-- end:a -->\n".into())),
        // Span tags.
        ("<span style=\"color: ×n", fill("<span style=\"color:")),
        (
            "<span style=\"color:red\"> ×n",
            fill("<span style=\"color:red\">"),
        ),
        ("<span color:k>a ×n then </span> ×n", {
            let mut opens = String::new();
            let mut n = 0;
            while opens.len() < SIZE / 2 {
                opens.push_str(&format!("<span style=\"color:c{n}\">a"));
                n += 1;
            }
            format!("{opens}{}", "</span>".repeat(n))
        }),
        (
            "<u> ×n <mark> ×n x</u> ×n",
            format!(
                "{}{}{}",
                "<u>".repeat(k(16)),
                "<mark>".repeat(k(16)),
                "x</u>".repeat(k(16))
            ),
        ),
        (
            "<mark> ×n then </u> ×n",
            format!("{}{}", "<mark>".repeat(k(10)), "</u>".repeat(k(10))),
        ),
        (
            "<mark> ×n then *a ×n",
            format!("{}{}", "<mark>".repeat(k(10)), "*a".repeat(k(10))),
        ),
        ("< ×n", fill("<")),
        ("<a: ×n", fill("<a:")),
        ("<br ×n", fill("<br")),
        ("<hm://a> ×n", fill("<hm://a>")),
        // Code spans.
        ("` ×n", fill("`")),
        (
            "` `` ``` … (every length)",
            lines(|k| format!("{}a", "`".repeat(k + 1))),
        ),
        (
            "[ then ` `` ``` …",
            format!("[{}", lines(|k| format!("{}a", "`".repeat(k + 1)))),
        ),
        ("\\`` ×n", fill("\\``")),
        // Emphasis runs.
        ("* ×n", fill("*")),
        ("*a ×n", fill("*a")),
        ("_a ×n", fill("_a")),
        ("**a ×n", fill("**a")),
        ("~~a ×n", fill("~~a")),
        ("*a_b~~c**d__e ×n", fill("*a_b~~c**d__e")),
        // Tables.
        ("| ×n (one row, n cells)", fill("|")),
        (
            "table, many rows",
            format!("| a | b |\n|---|---|\n{}", fill("| x | y |\n")),
        ),
        (
            "table, wide header",
            format!("{}\n{}\n", "|a".repeat(k(4)), "|-".repeat(k(4))),
        ),
        (
            "table cell, <!-- col:a attrs:{ ×n",
            format!("| {} |\n|---|\n| x |", fill("<!-- col:a attrs:{")),
        ),
        (
            "table cell, <!-- id:a ×n",
            format!("| {} |\n|---|\n| x |", fill("<!-- id:a")),
        ),
        // Lists and nesting.
        ("- a lines", fill("- a\n")),
        ("> a lines", fill("> a\n")),
        ("# a lines", fill("# a\n")),
        (
            "list nested by tabs",
            lines(|k| format!("{}- a\n", "\t".repeat(k))),
        ),
        (
            "headings nested by tabs (deepest)",
            lines(|k| {
                (1..=6)
                    .map(|level| format!("{}{} h\n", "\t".repeat(k), "#".repeat(level)))
                    .collect()
            }),
        ),
        // Huge lines, many lines.
        ("one huge line", fill("a")),
        ("one paragraph, many lines", fill("a\n")),
        ("blank lines", fill("\n")),
        ("``` lines", fill("```\n")),
        ("$$ lines", fill("$$\n")),
        ("mixed specials ×n", fill("[*_`<(\\!]~)>")),
        // Frontmatter.
        (
            "frontmatter, many keys",
            format!("---\n{}---\nbody", lines(|k| format!("k{k}: v\n"))),
        ),
        (
            "frontmatter, many block scalars",
            format!("---\n{}---\nbody", lines(|k| format!("k{k}: |\n  x\n"))),
        ),
        (
            "frontmatter, 64 tabs after :",
            format!(
                "---\n{}---\nbody",
                lines(|k| {
                    if k % 500 == 0 {
                        format!("t{k}:\tv\n")
                    } else {
                        format!("k{k}: v\n")
                    }
                })
            ),
        ),
        (
            "frontmatter, aliases of empties",
            format!(
                "---\na: &a [{}]\nb: [{}]\n---\nbody",
                "[],".repeat(k(6)),
                "*a,".repeat(k(6))
            ),
        ),
        (
            "frontmatter, deep flow",
            format!(
                "---\nk: {}{}\n---\nbody",
                "[".repeat(k(2)),
                "]".repeat(k(2))
            ),
        ),
        (
            "frontmatter, aliases nested 300 deep",
            format!(
                "---\na0: &a0 x\n{}---\nbody",
                lines(|k| {
                    format!(
                        "a{}: &a{} {}*a{k}{}\n",
                        k + 1,
                        k + 1,
                        "[".repeat(300),
                        "]".repeat(300)
                    )
                })
            ),
        ),
    ]
}

fn blocks(tree: &[BlockNode]) -> usize {
    let mut count = 0;
    let mut todo: Vec<&BlockNode> = tree.iter().collect();
    while let Some(node) = todo.pop() {
        count += 1;
        todo.extend(&node.children);
    }
    count
}

fn main() {
    let filter = std::env::args().nth(1).unwrap_or_default();
    let mut worst = Duration::ZERO;
    println!(
        "{:>10} {:>10} {:>8}  shape (256 KiB)",
        "fastest", "slowest", "blocks"
    );
    for (name, markdown) in shapes() {
        if !name.contains(&filter) {
            continue;
        }
        let mut times = Vec::new();
        let mut count = 0;
        for _ in 0..3 {
            let mut n = 0u64;
            let mut ids = || {
                n += 1;
                format!("b{n:07}")
            };
            let start = Instant::now();
            let parsed = parse_markdown(&markdown, &mut ids);
            times.push(start.elapsed());
            count = blocks(&parsed.tree);
        }
        let (fastest, slowest) = (
            times.iter().min().copied().unwrap_or_default(),
            times.iter().max().copied().unwrap_or_default(),
        );
        worst = worst.max(fastest);
        println!(
            "{:>8.2}ms {:>8.2}ms {count:>8}  {name} ({} bytes)",
            fastest.as_secs_f64() * 1e3,
            slowest.as_secs_f64() * 1e3,
            markdown.len()
        );
    }
    println!("slowest shape: {:.2} ms", worst.as_secs_f64() * 1e3);
}
