//! The documentation stays true to the tree.
//!
//! - A fenced code block preceded by the line `<!-- from <path> -->` quotes the file at
//!   `<path>` (relative to the repository's root): its lines, trimmed of trailing whitespace,
//!   are in that file verbatim and in the same order. A line `// ...` (or `# ...` in YAML)
//!   marks lines left out: the parts between such lines must each be consecutive lines of the
//!   file, one part after the other. Every Rust block of `docs/writing-a-plugin.md` quotes a
//!   file this way, so that the walkthrough cannot drift from the code.
//! - Every relative link of `README.md`, `BENCHMARKS.md` and `docs/*.md` points to a file that
//!   exists, and a link to a heading (`file.md#heading`) to a heading that exists.
//! - `README.md` stays short: fewer than 500 lines.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The documents whose links are checked and whose marked blocks are compared.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut docs = vec![root.join("README.md"), root.join("BENCHMARKS.md")];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    docs.extend(pages);
    docs
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A document's name for messages: its path from the repository's root.
fn shown(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// A fenced code block.
struct Block {
    /// The info string after the opening backticks (`rust`, `yaml`, ...).
    info: String,
    /// The line of the opening fence (1-based).
    line: usize,
    /// The lines between the fences, trimmed of trailing whitespace.
    body: Vec<String>,
    /// The file named by a `<!-- from <path> -->` line right above the opening fence.
    source: Option<String>,
}

/// The `<path>` of a `<!-- from <path> -->` line.
fn quoted_source(line: &str) -> Option<String> {
    let path = line
        .trim()
        .strip_prefix("<!-- from ")?
        .strip_suffix("-->")?
        .trim();
    (!path.is_empty()).then(|| path.to_string())
}

/// The fenced blocks of a Markdown text, and its lines outside them (with their numbers).
fn split(text: &str) -> (Vec<Block>, Vec<(usize, &str)>) {
    let mut blocks = Vec::new();
    let mut prose = Vec::new();
    let mut open: Option<Block> = None;
    let mut previous = "";
    for (i, line) in text.lines().enumerate() {
        let fence = line.trim_start().starts_with("```");
        match &mut open {
            Some(_) if fence && line.trim() == "```" => blocks.extend(open.take()),
            Some(block) => block.body.push(line.trim_end().to_string()),
            None if fence => {
                open = Some(Block {
                    info: line.trim_start().trim_start_matches('`').trim().to_string(),
                    line: i + 1,
                    body: Vec::new(),
                    source: quoted_source(previous),
                });
            }
            None => prose.push((i + 1, line)),
        }
        previous = line;
    }
    assert!(open.is_none(), "a code block is never closed");
    (blocks, prose)
}

/// Whether a block's line marks lines left out.
fn is_elision(line: &str) -> bool {
    matches!(line.trim(), "// ..." | "# ...")
}

/// Checks that `block` quotes its source file: each part between elisions is a run of
/// consecutive lines of the file, the parts in order.
fn check_quote(doc: &Path, block: &Block, source: &str) -> Result<(), String> {
    let at = format!("{}:{}", shown(doc), block.line);
    let path = root().join(source);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Err(format!("{at}: quotes {source}, which does not exist"));
    };
    let file: Vec<&str> = text.lines().map(str::trim_end).collect();
    let mut parts: Vec<Vec<&str>> = vec![Vec::new()];
    for line in &block.body {
        if is_elision(line) {
            parts.push(Vec::new());
        } else {
            parts.last_mut().expect("one part").push(line);
        }
    }
    parts.retain(|p| !p.is_empty());
    if parts.is_empty() {
        return Err(format!("{at}: an empty quote of {source}"));
    }
    let mut from = 0;
    for part in parts {
        let found = (from..=file.len().saturating_sub(part.len()))
            .find(|&i| file[i..i + part.len()] == part[..]);
        match found {
            Some(i) => from = i + part.len(),
            None => {
                return Err(format!(
                    "{at}: these lines are not in {source} (after line {from}), as quoted:\n{}",
                    part.join("\n")
                ));
            }
        }
    }
    Ok(())
}

#[test]
fn quoted_code_is_in_the_files_it_names() {
    let mut problems = Vec::new();
    let mut quotes = 0;
    for doc in documents() {
        let (blocks, _) = split(&read(&doc));
        for block in &blocks {
            if let Some(source) = &block.source {
                quotes += 1;
                if let Err(e) = check_quote(&doc, block, source) {
                    problems.push(e);
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
    assert!(quotes >= 10, "only {quotes} quoted blocks found");
}

#[test]
fn the_plugin_walkthrough_quotes_every_rust_block() {
    let doc = root().join("docs/writing-a-plugin.md");
    let (blocks, _) = split(&read(&doc));
    let rust: Vec<&Block> = blocks.iter().filter(|b| b.info == "rust").collect();
    assert!(rust.len() >= 10, "only {} Rust blocks", rust.len());
    let unmarked: Vec<String> = rust
        .iter()
        .filter(|b| b.source.is_none())
        .map(|b| format!("{}:{}", shown(&doc), b.line))
        .collect();
    assert!(
        unmarked.is_empty(),
        "Rust blocks without a `<!-- from <path> -->` line above them: {unmarked:?}"
    );
    assert!(
        rust.iter()
            .any(|b| b.source.as_deref() == Some("crates/core/src/plugins/node_unschedulable.rs")),
        "the walkthrough quotes crates/core/src/plugins/node_unschedulable.rs"
    );
}

#[test]
fn a_quote_that_drifted_is_found() {
    let doc = root().join("docs/writing-a-plugin.md");
    let quotes = |body: &[&str], source: &str| {
        let block = Block {
            info: "rust".to_string(),
            line: 1,
            body: body.iter().map(|s| s.to_string()).collect(),
            source: None,
        };
        check_quote(&doc, &block, source).is_ok()
    };
    let file = "crates/core/src/plugins/node_unschedulable.rs";
    let doc_line = "/// The name used in configuration files.";
    let name = "pub const NAME: &str = \"NodeUnschedulable\";";
    let item = "pub struct NodeUnschedulable;";
    assert!(quotes(&[doc_line, name], file));
    assert!(!quotes(&[name, doc_line], file), "out of order");
    assert!(!quotes(&[doc_line, "", name], file), "not consecutive");
    assert!(quotes(&[name, "// ...", item], file));
    assert!(!quotes(&[item, "// ...", name], file), "parts out of order");
    assert!(!quotes(&[name], "src/no_such_file.rs"));
}

/// The targets of the inline links (`[text](target)`) in a line, inline code left out.
fn link_targets(line: &str) -> Vec<String> {
    let mut text = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            text.push(c);
        }
    }
    let mut targets = Vec::new();
    let mut rest = text.as_str();
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            let target = rest[..end].split_whitespace().next().unwrap_or_default();
            targets.push(target.trim_matches(['<', '>']).to_string());
            rest = &rest[end..];
        }
    }
    targets
}

/// The anchors GitHub gives a Markdown file's headings.
fn anchors(text: &str) -> BTreeSet<String> {
    let (_, prose) = split(text);
    let mut seen = BTreeSet::new();
    for (_, line) in prose {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let slug: String = heading
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut anchor = slug.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{slug}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

#[test]
fn relative_links_point_to_files_that_exist() {
    let mut problems = Vec::new();
    let mut links = 0;
    for doc in documents() {
        let text = read(&doc);
        let (_, prose) = split(&text);
        let dir = doc.parent().expect("a directory");
        for (n, line) in prose {
            for target in link_targets(line) {
                if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                links += 1;
                let (file, anchor) = match target.split_once('#') {
                    Some((f, a)) => (f, Some(a)),
                    None => (target.as_str(), None),
                };
                let path = if file.is_empty() {
                    doc.clone()
                } else {
                    dir.join(file)
                };
                let at = format!("{}:{n}", shown(&doc));
                if !path.exists() {
                    problems.push(format!("{at}: {target}: no such file"));
                    continue;
                }
                if let Some(anchor) = anchor
                    && path.extension().is_some_and(|e| e == "md")
                    && !anchors(&read(&path)).contains(anchor)
                {
                    problems.push(format!("{at}: {target}: no such heading"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(links >= 10, "only {links} relative links found");
}

#[test]
fn links_and_anchors_are_read_as_github_does() {
    assert_eq!(
        link_targets("see [a](docs/a.md), [b](b.md#x \"title\") and `[c](not-a-link)`"),
        ["docs/a.md", "b.md#x"]
    );
    let headings = anchors(
        "# gantry\n## Why is my pod pending? `gantry explain`\n```\n# not a heading\n```\n## Tests\n## Tests\n",
    );
    let want: BTreeSet<String> = [
        "gantry",
        "why-is-my-pod-pending-gantry-explain",
        "tests",
        "tests-1",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(headings, want);
}

#[test]
fn the_readme_is_short() {
    let lines = read(&root().join("README.md")).lines().count();
    assert!(
        lines < 500,
        "README.md has {lines} lines: move the details to docs/"
    );
}
