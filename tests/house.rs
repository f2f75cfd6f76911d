//! The house rules a newcomer relies on, read from the sources themselves: every import
//! names what it takes (no `use super::*` outside tests), no two source files import
//! each other (a file may use its ancestors' items, never a sibling that uses it back),
//! and the paid path reads in functions of a page or less.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use umpire_blackbox::repo_root;

/// The longest function allowed in `shared/api/src/paid/`.
const PAID_FN_MAX_LINES: usize = 80;

/// A crate's source folder and each module's path within it (`["paid", "checkout"]`).
struct Crate {
    files: BTreeMap<Vec<String>, PathBuf>,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn crates() -> Vec<Crate> {
    let root = repo_root();
    let mut srcs: Vec<PathBuf> = std::fs::read_dir(root.join("shared"))
        .expect("shared/")
        .flatten()
        .map(|e| e.path().join("src"))
        .collect();
    srcs.push(root.join("functions/src"));
    srcs.push(root.join("cli/src"));
    srcs.into_iter()
        .map(|src| {
            let mut files = Vec::new();
            rust_files(&src, &mut files);
            let files = files
                .into_iter()
                .filter_map(|f| {
                    let rel = f.strip_prefix(&src).ok()?.with_extension("");
                    let mut parts: Vec<String> = rel
                        .components()
                        .map(|c| c.as_os_str().to_string_lossy().into_owned())
                        .collect();
                    // Binaries are crate roots of their own.
                    if parts.first().is_some_and(|p| p == "bin") {
                        return None;
                    }
                    match parts.last().map(String::as_str) {
                        Some("lib" | "main") if parts.len() == 1 => parts.clear(),
                        Some("mod") => {
                            parts.pop();
                        }
                        _ => {}
                    }
                    Some((parts, f))
                })
                .collect();
            Crate { files }
        })
        .collect()
}

/// The source without comments and without `#[cfg(test)]` items (test modules may
/// glob-import what they test).
fn production_text(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("source");
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let (brace, semi) = (after.find('{'), after.find(';'));
        let end = match (brace, semi) {
            (_, Some(s)) if brace.is_none_or(|b| s < b) => s + 1,
            (Some(b), _) => {
                let mut depth = 0usize;
                let mut end = after.len();
                for (i, c) in after[b..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = b + i + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            _ => after.len(),
        };
        rest = &after[end..];
    }
    out.push_str(rest);
    out.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path written in `text` that starts at `crate::`, `super::` or `self::`, and
/// every `use` tree expanded (`use a::{b, c::d}` gives `a::b` and `a::c::d`).
fn paths_in(text: &str) -> Vec<String> {
    fn expand(tree: &str) -> Vec<String> {
        let tree = tree.trim();
        let Some(open) = tree.find('{') else {
            return vec![tree.to_owned()];
        };
        let prefix = &tree[..open];
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let (mut parts, mut depth, mut current) = (Vec::new(), 0i32, String::new());
        for c in inner.chars() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            if c == ',' && depth == 0 {
                parts.push(std::mem::take(&mut current));
            } else {
                current.push(c);
            }
        }
        parts.push(current);
        parts
            .iter()
            .filter(|p| !p.trim().is_empty())
            .flat_map(|p| expand(p))
            .map(|p| format!("{prefix}{p}"))
            .collect()
    }
    let mut paths = Vec::new();
    for statement in text.split(';') {
        let s = statement.trim_start();
        let s = s
            .strip_prefix("pub(crate) ")
            .or_else(|| s.strip_prefix("pub(super) "))
            .or_else(|| s.strip_prefix("pub "))
            .unwrap_or(s);
        if let Some(tree) = s.strip_prefix("use ") {
            paths.extend(expand(&tree.replace('\n', " ")));
        }
    }
    // Paths written inline (`crate::paid::ledger::payment_key(..)`).
    let bytes = text.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = text[from..].find(start) {
            let at = from + i;
            from = at + start.len();
            if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
                continue;
            }
            let end = text[at..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .map_or(text.len(), |e| at + e);
            // `crate::{a, b}` is a `use` tree, read above.
            if !text[at..end].ends_with("::") {
                paths.push(text[at..end].to_owned());
            }
        }
    }
    paths
}

/// The module file a path leads into, from the module at `here`.
fn target<'a>(krate: &'a Crate, here: &[String], path: &str) -> Option<&'a PathBuf> {
    let mut segments = path.split("::").map(str::trim).filter(|s| !s.is_empty());
    let mut module: Vec<String> = match segments.next()? {
        "crate" => Vec::new(),
        "self" => here.to_vec(),
        "super" => here[..here.len().saturating_sub(1)].to_vec(),
        _ => return None,
    };
    for s in segments {
        if s == "super" {
            module.pop();
            continue;
        }
        let mut next = module.clone();
        next.push(s.split_whitespace().next().unwrap_or(s).to_owned());
        if krate.files.contains_key(&next) {
            module = next;
        } else {
            break;
        }
    }
    krate.files.get(&module)
}

#[test]
fn imports_name_what_they_take_and_no_two_files_import_each_other() {
    let root = repo_root();
    let rel = |p: &Path| p.strip_prefix(&root).unwrap_or(p).display().to_string();
    let mut globs = Vec::new();
    let mut circles = BTreeSet::new();
    let mut files_seen = 0;
    for krate in crates() {
        let mut edges: BTreeMap<&Vec<String>, BTreeSet<&Vec<String>>> = BTreeMap::new();
        let module_of: BTreeMap<&PathBuf, &Vec<String>> =
            krate.files.iter().map(|(m, f)| (f, m)).collect();
        for (module, file) in &krate.files {
            files_seen += 1;
            if file.file_name().is_some_and(|n| n == "tests.rs") {
                continue;
            }
            let text = production_text(file);
            for path in paths_in(&text) {
                let path = path.split(" as ").next().unwrap_or(&path).trim().to_owned();
                if path.starts_with("super::") && path.ends_with("::*") {
                    globs.push(rel(file));
                }
                if let Some(to) = target(&krate, module, &path)
                    && to != file
                {
                    edges.entry(module).or_default().insert(module_of[to]);
                }
            }
        }
        for (a, tos) in &edges {
            for b in tos {
                // A file may use its ancestors' items (the crate root's state, its
                // parent's types) while the ancestor declares and re-exports it.
                let ancestor = a.starts_with(b) || b.starts_with(a);
                if !ancestor && edges.get(b).is_some_and(|back| back.contains(a)) {
                    let (x, y) = (rel(&krate.files[*a]), rel(&krate.files[*b]));
                    circles.insert(if x < y { (x, y) } else { (y, x) });
                }
            }
        }
    }
    assert!(files_seen > 100, "only {files_seen} source files found");
    assert!(
        globs.is_empty(),
        "these files import their parent with `use super::*` outside tests: {globs:?}"
    );
    assert!(
        circles.is_empty(),
        "these pairs of source files import each other: {circles:?}"
    );
}

/// The function bodies in `text` with their first line and length, found by `fn` at
/// the start of an item and its braces.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        let t = ["pub(crate) ", "pub(super) ", "pub "]
            .iter()
            .find_map(|p| t.strip_prefix(p))
            .unwrap_or(t);
        let t = t.strip_prefix("async ").unwrap_or(t);
        let Some(rest) = t.strip_prefix("fn ") else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let mut depth = 0i32;
        let mut opened = false;
        for (j, l) in lines.iter().enumerate().skip(i) {
            for c in l.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    ';' if !opened && depth == 0 => break,
                    _ => {}
                }
            }
            if opened && depth == 0 {
                found.push((name.clone(), i + 1, j - i + 1));
                break;
            }
        }
    }
    found
}

#[test]
fn the_paid_path_reads_in_functions_of_a_page() {
    let root = repo_root();
    let mut files = Vec::new();
    rust_files(&root.join("shared/api/src/paid"), &mut files);
    assert!(files.len() >= 10, "{files:?}");
    let mut long = Vec::new();
    for file in files {
        for (name, line, len) in functions(&production_text(&file)) {
            if len > PAID_FN_MAX_LINES {
                long.push(format!("{}:{line} {name} ({len} lines)", file.display()));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {PAID_FN_MAX_LINES} lines in the paid path: {long:?}"
    );
}

#[test]
fn the_rules_catch_what_they_are_for() {
    // Positive controls: each reader finds what it looks for in a known text.
    let glob = "use super::*;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n";
    let text = production_text_of(glob);
    assert_eq!(
        paths_in(&text)
            .iter()
            .filter(|p| p.ends_with("::*"))
            .count(),
        1
    );
    let paths = paths_in("use crate::{a::b, c::{d, e as f}};\nlet x = crate::g::h();");
    assert_eq!(
        paths,
        [
            "crate::a::b",
            "crate::c::d",
            "crate::c::e as f",
            "crate::g::h"
        ]
    );
    let long = format!(
        "fn big() {{\n{}}}\nfn small() {{ 1 }}\n",
        "    x();\n".repeat(90)
    );
    let found = functions(&long);
    assert_eq!(found[0], ("big".to_owned(), 1, 92));
    assert_eq!(found[1], ("small".to_owned(), 93, 1));
}

fn production_text_of(text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("umpire-house-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("sample.rs");
    std::fs::write(&file, text).expect("write");
    let out = production_text(&file);
    let _ = std::fs::remove_dir_all(&dir);
    out
}
