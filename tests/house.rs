//! The house rules a newcomer relies on, read from the sources themselves: every import
//! names what it takes (no `use super::*` outside tests); no crate's modules import each
//! other in a circle, however long (a file may use its ancestors' items, the modules
//! that declare it); `umpire-api` stands in floors, each using only the floors below
//! it (docs/development.md); no source file is longer than 600 lines, and every
//! function reads on a page (80 lines) or less.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use umpire_blackbox::repo_root;

/// The longest function allowed, in every crate.
const FN_MAX_LINES: usize = 80;
/// The longest source file allowed outside tests.
const FILE_MAX_LINES: usize = 600;
/// The floors of `umpire-api`, bottom up, by the first segment of a module's path. The
/// crate root (`lib.rs`) is the roof: it declares and re-exports, and nothing imports
/// from it.
const API_FLOORS: &[&str] = &["plumbing", "checkout", "products", "routes"];
/// Floors whose parts stand side by side, never importing each other (a product does
/// not call another product, a route another route).
const SIDE_BY_SIDE: &[&str] = &["products", "routes"];

/// A crate's source folder and each module's path within it (`["paid", "checkout"]`).
struct Crate {
    src: PathBuf,
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
            Crate { src, files }
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
        // `use child::item` names a module this file declares.
        child => {
            let mut module = here.to_vec();
            module.push(child.to_owned());
            if !krate.files.contains_key(&module) {
                return None;
            }
            module
        }
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

type Module = Vec<String>;
type Edges = BTreeMap<Module, BTreeSet<Module>>;

/// The crate's module graph: an arrow from each module to every other module its
/// production code names (by `use` or by an inline `crate::`/`super::`/`self::` path),
/// except to its own ancestors, whose items a module may use while they declare it.
/// Also the `use super::*` globs found on the way.
fn graph(krate: &Crate) -> (Edges, Vec<PathBuf>) {
    let module_of: BTreeMap<&PathBuf, &Module> = krate.files.iter().map(|(m, f)| (f, m)).collect();
    let mut edges = Edges::new();
    let mut globs = Vec::new();
    for (module, file) in &krate.files {
        edges.entry(module.clone()).or_default();
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        for path in paths_in(&production_text(file)) {
            let path = path.split(" as ").next().unwrap_or(&path).trim().to_owned();
            if path.starts_with("super::") && path.ends_with("::*") {
                globs.push(file.clone());
            }
            if let Some(to) = target(krate, module, &path)
                && to != file
                && !module.starts_with(module_of[to])
            {
                edges
                    .entry(module.clone())
                    .or_default()
                    .insert(module_of[to].clone());
            }
        }
    }
    (edges, globs)
}

/// The circles in `edges`: every strongly connected set of two or more modules
/// (Tarjan's algorithm), each sorted.
fn circles(edges: &Edges) -> Vec<Vec<Module>> {
    struct Walk<'a> {
        edges: &'a Edges,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on_stack: BTreeSet<&'a Module>,
        found: Vec<Vec<Module>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a Module) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.edges.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut set = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    set.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if set.len() > 1 {
                    set.sort();
                    self.found.push(set);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}

/// Every arrow of `umpire-api`'s graph that breaks its floors: one into the roof, one
/// from a module in no floor, one to a higher floor, one between two parts of a floor
/// whose parts stand side by side.
fn floor_breaches(edges: &Edges) -> Vec<String> {
    let floor = |m: &Module| {
        m.first()
            .and_then(|top| API_FLOORS.iter().position(|f| f == top))
    };
    let name = |m: &Module| {
        if m.is_empty() {
            "the crate root".to_owned()
        } else {
            m.join("::")
        }
    };
    let mut breaches = Vec::new();
    for (from, tos) in edges {
        if from.is_empty() {
            continue;
        }
        let Some(here) = floor(from) else {
            breaches.push(format!("{} is on no floor", name(from)));
            continue;
        };
        for to in tos {
            let why = match floor(to) {
                _ if to.is_empty() => Some("into the roof (import the item from its floor)"),
                None => Some("into a module on no floor"),
                Some(there) if there > here => Some("up a floor"),
                Some(there)
                    if there == here
                        && SIDE_BY_SIDE.contains(&API_FLOORS[here])
                        && from.len() > 1
                        && to.len() > 1
                        && from[1] != to[1] =>
                {
                    Some("sideways between parts standing side by side")
                }
                _ => None,
            };
            if let Some(why) = why {
                breaches.push(format!("{} -> {}: {why}", name(from), name(to)));
            }
        }
    }
    breaches
}

#[test]
fn imports_name_what_they_take_and_no_modules_import_each_other_in_a_circle() {
    let root = repo_root();
    let rel = |p: &Path| p.strip_prefix(&root).unwrap_or(p).display().to_string();
    let mut globs = Vec::new();
    let mut found = Vec::new();
    let mut files_seen = 0;
    for krate in crates() {
        files_seen += krate.files.len();
        let (edges, crate_globs) = graph(&krate);
        globs.extend(crate_globs.iter().map(|f| rel(f)));
        for circle in circles(&edges) {
            let names: Vec<String> = circle.iter().map(|m| m.join("::")).collect();
            found.push(format!("{}: {}", rel(&krate.src), names.join(", ")));
        }
    }
    assert!(files_seen > 100, "only {files_seen} source files found");
    assert!(
        globs.is_empty(),
        "these files import their parent with `use super::*` outside tests: {globs:?}"
    );
    assert!(
        found.is_empty(),
        "these modules import each other in a circle: {found:#?}"
    );
}

#[test]
fn the_api_crate_stands_in_floors() {
    let root = repo_root();
    let api = crates()
        .into_iter()
        .find(|k| k.src == root.join("shared/api/src"))
        .expect("umpire-api");
    let (edges, _) = graph(&api);
    for floor in API_FLOORS {
        assert!(
            edges.keys().any(|m| m.first().is_some_and(|f| f == floor)),
            "no module on the {floor} floor"
        );
    }
    let breaches = floor_breaches(&edges);
    assert!(
        breaches.is_empty(),
        "umpire-api's floors are broken (docs/development.md): {breaches:#?}"
    );
}

#[test]
fn no_source_file_is_longer_than_a_room() {
    let root = repo_root();
    let mut long = Vec::new();
    for krate in crates() {
        let mut files = Vec::new();
        rust_files(&krate.src, &mut files);
        for file in files {
            let lines = std::fs::read_to_string(&file)
                .expect("source")
                .lines()
                .count();
            if lines > FILE_MAX_LINES {
                long.push(format!("{} ({lines} lines)", file.display()));
            }
        }
    }
    assert!(
        root.join("shared/pay/src/evm").is_dir(),
        "the sources are where this test looks"
    );
    assert!(
        long.is_empty(),
        "source files over {FILE_MAX_LINES} lines (split them by job): {long:#?}"
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
fn functions_read_on_a_page() {
    let mut long = Vec::new();
    let mut seen = 0;
    for krate in crates() {
        for file in krate.files.values() {
            seen += 1;
            for (name, line, len) in functions(&production_text(file)) {
                if len > FN_MAX_LINES {
                    long.push(format!("{}:{line} {name} ({len} lines)", file.display()));
                }
            }
        }
    }
    assert!(seen > 100, "only {seen} files read");
    assert!(
        long.is_empty(),
        "functions over {FN_MAX_LINES} lines: {long:#?}"
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

    // A circle of three, a pair, and a tree without one.
    let m = |p: &str| -> Module { p.split("::").map(str::to_owned).collect() };
    let edges = |arrows: &[(&str, &str)]| {
        let mut e = Edges::new();
        for (a, b) in arrows {
            e.entry(m(a)).or_default().insert(m(b));
            e.entry(m(b)).or_default();
        }
        e
    };
    let three = edges(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]);
    assert_eq!(circles(&three), vec![vec![m("a"), m("b"), m("c")]]);
    assert!(circles(&edges(&[("a", "b"), ("a", "c"), ("b", "c")])).is_empty());

    // Floors: down is fine; up, sideways between products, into the roof are not.
    let fine = edges(&[
        ("routes::mcp", "products::verdict::buy"),
        ("products::verdict::buy", "checkout::ledger"),
        ("products::verdict::buy", "products::verdict::judge"),
        ("checkout", "plumbing::state"),
    ]);
    assert!(
        floor_breaches(&fine).is_empty(),
        "{:?}",
        floor_breaches(&fine)
    );
    let mut broken = edges(&[
        ("checkout::claim", "products::verdict::buy"),
        ("products::verdict::sworn", "products::reputation"),
        ("routes::mcp", "routes::free"),
        ("elsewhere", "plumbing"),
    ]);
    broken
        .entry(m("plumbing::body"))
        .or_default()
        .insert(Vec::new());
    assert_eq!(
        floor_breaches(&broken).len(),
        5,
        "{:#?}",
        floor_breaches(&broken)
    );
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
