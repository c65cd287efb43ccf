//! The files of each crate import each other without cycles, so that the code reads
//! top-down: every `crate::` and `super::` path outside test code is an edge from the file
//! that names it to the file (module) it names, and the graph of those edges has no cycle.
//! Between crates Cargo keeps the order: a crate cannot name one that depends on it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module of the source tree: its path, as `crate::` would name it (`bin/<name>` first for
/// a binary's modules).
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts
        .last()
        .is_some_and(|p| p == "mod" || p == "main" || p == "lib")
    {
        parts.pop();
    }
    parts
}

/// The unit (node of the graph) a module path belongs to: the module itself, named with its
/// crate (`core:framework::plugin`, `bin/gantry:openb`).
fn unit(krate: &str, path: &[String]) -> String {
    let path = match path {
        [bin, name, rest @ ..] if bin == "bin" => return format!("bin/{name}:{}", rest.join("::")),
        _ => path,
    };
    format!("{krate}:{}", path.join("::"))
}

/// The file without its test code: from a `#[cfg(test)]` line followed by a module on.
fn without_tests(text: &str) -> &str {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if line.trim() == "#[cfg(test)]" {
            let rest = &text[offset + line.len()..];
            if rest.trim_start().starts_with("mod ") {
                return &text[..offset];
            }
        }
        offset += line.len();
    }
    text
}

/// The module paths a file names with `crate::` or `super::`, resolved from `module`.
fn named_paths(text: &str, module: &[String], is_mod_file: bool) -> Vec<Vec<String>> {
    let crate_root: Vec<String> = match module {
        [bin, name, ..] if bin == "bin" => vec![bin.clone(), name.clone()],
        _ => Vec::new(),
    };
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    for start in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(i) = text[from..].find(start) {
            let at = from + i;
            from = at + start.len();
            let before = at.checked_sub(1).map(|j| bytes[j]);
            if before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_') {
                continue;
            }
            let path: Vec<&str> = text[at..]
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .next()
                .unwrap_or_default()
                .split("::")
                .filter(|s| !s.is_empty())
                .collect();
            let mut resolved = if path[0] == "crate" {
                crate_root.clone()
            } else {
                // A `mod.rs` is its own module; `super` of a file module is its parent.
                let mut base = module.to_vec();
                if !is_mod_file {
                    base.pop();
                }
                base
            };
            let mut rest = &path[1..];
            if path[0] == "super" {
                while rest.first() == Some(&"super") {
                    resolved.pop();
                    rest = &rest[1..];
                }
                if is_mod_file {
                    resolved.pop();
                }
            }
            resolved.extend(rest.iter().map(|s| s.to_string()));
            out.push(resolved);
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every unit's edges to the units it names, in the crate whose sources are `src` (the
/// binaries' crates when `krate` is empty).
fn edges(krate: &str, src: &Path, graph: &mut BTreeMap<String, BTreeSet<String>>) {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_path(src, f)).collect();
    for file in &files {
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("read source");
        let module = module_path(src, file);
        let is_mod_file = matches!(name, "mod.rs" | "main.rs" | "lib.rs");
        let from = unit(krate, &module);
        for mut path in named_paths(without_tests(&text), &module, is_mod_file) {
            // Cut an item off the path until what is left is a module of the tree.
            while path.len() > 1 && !modules.contains(&path) {
                path.pop();
            }
            let to = unit(krate, &path);
            if to != from && modules.contains(&path) {
                graph.entry(from.clone()).or_default().insert(to);
            }
        }
    }
}

/// The graph of every crate of the workspace and of the binaries.
fn workspace_graph() -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut graph = BTreeMap::new();
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .expect("read crates")
        .map(|e| e.expect("entry").path())
        .collect();
    crates.sort();
    for dir in crates {
        let krate = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        edges(krate, &dir.join("src"), &mut graph);
    }
    edges("", &root.join("src"), &mut graph);
    graph
}

/// A cycle through `start`, if there is one.
fn cycle_from(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    let mut stack = vec![(start.to_string(), vec![start.to_string()])];
    let mut seen = BTreeSet::new();
    while let Some((node, path)) = stack.pop() {
        for next in graph.get(&node).into_iter().flatten() {
            if next == start {
                let mut cycle = path.clone();
                cycle.push(start.to_string());
                return Some(cycle);
            }
            if seen.insert(next.clone()) {
                let mut p = path.clone();
                p.push(next.clone());
                stack.push((next.clone(), p));
            }
        }
    }
    None
}

#[test]
fn files_import_each_other_without_cycles() {
    let graph = workspace_graph();
    for unit in ["core:scheduler", "adapter:driver", "bin/gantry:run"] {
        assert!(
            graph.contains_key(unit),
            "the graph is read: {unit} in {graph:?}"
        );
    }
    let cycles: BTreeSet<String> = graph
        .keys()
        .filter_map(|unit| cycle_from(&graph, unit))
        .map(|c| c.join(" -> "))
        .collect();
    assert!(
        cycles.is_empty(),
        "import cycles:\n{}",
        cycles.into_iter().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn a_cycle_is_found() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    graph.entry("a".into()).or_default().insert("b".into());
    graph.entry("b".into()).or_default().insert("c".into());
    assert_eq!(cycle_from(&graph, "a"), None);
    graph.entry("c".into()).or_default().insert("a".into());
    assert_eq!(
        cycle_from(&graph, "a"),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}

#[test]
fn paths_resolve_from_the_module_that_names_them() {
    let module = |s: &str| s.split('/').map(str::to_string).collect::<Vec<_>>();
    let text = "use super::driver::Input;\nuse crate::cache::Cache;\nlet x = supercrate::y;";
    let paths = named_paths(text, &module("adapter/binder"), false);
    assert_eq!(
        paths,
        [module("cache/Cache"), module("adapter/driver/Input")]
    );
    let paths = named_paths("use super::x;", &module("adapter"), true);
    assert_eq!(paths, [module("x")]);
    let bin = named_paths(
        "use crate::openb::Args;",
        &module("bin/gantry/simulate"),
        false,
    );
    assert_eq!(bin, [module("bin/gantry/openb/Args")]);
    assert_eq!(unit("", &module("bin/gantry/openb")), "bin/gantry:openb");
    assert_eq!(unit("adapter", &module("driver")), "adapter:driver");
}
