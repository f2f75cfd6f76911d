//! Every pattern of a spec, judged before payment at a cost bounded by the spec's size.
//!
//! Patterns live in regex checks and inside JSON Schemas (every `pattern` and every
//! `patternProperties` key, whatever the property names around them). Before anyone
//! pays, each one is held to a length cap, passes the backtracking guard, is weighed
//! against the spec's compiled-size allowance and is compiled once to prove it compiles.
//! Compiling is what costs: about 15 ms per MiB of automaton for a repeated Unicode class
//! (`^\w{1,64}$` is 1.1 MB), and building the literal prefilter of a pattern can take
//! 30 ms on its own, so the check compiles without a prefilter (its acceptance does not
//! depend on one) and the allowance is spent across the whole spec, not per pattern.
//!
//! Schemas are compiled by the `jsonschema` crate, which builds every pattern with a
//! prefilter. So before payment a schema is compiled with its patterns replaced by
//! trivial ones (every other rule of the schema is checked as it is), and its patterns
//! are compiled here the way `jsonschema` does (ECMA-262 translated by `jsonschema-regex`,
//! then fancy-regex under the same limits). A `$ref` into data (`const`, `enum`,
//! `default`, `examples`) is refused: it would make data a schema whose patterns nobody
//! checked.

use fancy_regex::Expr;
use regex_automata::nfa::thompson;

use crate::guard::{self, GuardRefusal};
use crate::json::Value;
use crate::problem::ProblemCode;

/// Fancy-regex gives up after this many backtracking steps (a bound on steps, not on
/// time: the worker's wall-clock limit is what really stops a hostile pattern).
pub const REGEX_BACKTRACK_LIMIT: usize = 1_000_000;

/// The compiled size one regex may reach (the regex crate's own default). What a
/// spec's patterns compile to together is bounded before payment too
/// ([`SPEC_REGEX_BYTES`]).
pub const REGEX_SIZE_LIMIT: usize = 10 << 20;

/// Regex patterns longer than this are refused (they are never needed to judge a deliverable).
pub const MAX_PATTERN_CHARS: usize = 1000;
/// Every pattern of a spec together (regex checks, schema `pattern`s and
/// `patternProperties` keys): ten patterns at the cap.
pub const MAX_SPEC_PATTERN_CHARS: usize = 10 * MAX_PATTERN_CHARS;
/// Patterns per spec: each compiles on its own, however short.
pub const MAX_SPEC_PATTERNS: usize = 100;
/// What all the patterns of one spec may compile to together, in bytes of automaton
/// (regex-automata's Thompson NFA, as it counts its own memory). Ordinary patterns
/// weigh kilobytes; a count on a Unicode class weighs about 17 KB per repetition, so
/// `^\w{1,64}$` (1.1 MB) fits twice. Weighing and compiling cost about 21 ms per MiB.
pub const SPEC_REGEX_BYTES: usize = 3 << 20;

/// Code points that a spec's case-insensitive classes may fold together. regex-syntax
/// folds a class range by range, code point by code point wherever the range holds a
/// case mapping: `(?i)[\x00-\x{10FFFF}]` costs 2.5 ms each time it is parsed (and a
/// pattern is parsed three times before payment), where `(?i)[a-z]` costs a microsecond.
/// Three full ranges fit.
pub const SPEC_FOLD_CODE_POINTS: usize = 3_400_000;

/// Keywords whose values are data, never schemas.
const DATA_KEYWORDS: [&str; 4] = ["const", "enum", "default", "examples"];
/// Keywords whose values map names (chosen by the schema's author) to schemas.
const NAMED_SCHEMAS: [&str; 5] = [
    "properties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
];
/// Keywords that point at other schemas by URI (with a JSON pointer fragment, maybe).
const REFERENCES: [&str; 3] = ["$ref", "$dynamicRef", "$recursiveRef"];

/// Why a pattern is refused, as a problem code, a message and a hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: ProblemCode,
    pub message: String,
    pub hint: String,
}

impl From<GuardRefusal> for Refusal {
    fn from(r: GuardRefusal) -> Refusal {
        Refusal {
            code: r.code,
            message: r.message,
            hint: r.hint.into(),
        }
    }
}

/// The spec's compiled-size allowance, spent pattern by pattern in the order they appear.
#[derive(Debug, Clone)]
pub struct RegexBudget {
    left: usize,
    folds_left: usize,
}

impl Default for RegexBudget {
    fn default() -> Self {
        RegexBudget {
            left: SPEC_REGEX_BYTES,
            folds_left: SPEC_FOLD_CODE_POINTS,
        }
    }
}

impl RegexBudget {
    /// Spends the case folding `text` asks for (counted on its syntax tree, before any
    /// class is built), or refuses it when that is more than is left.
    fn spend_folds(&mut self, text: &str) -> Result<(), Refusal> {
        let folds = fold_weight(text);
        match self.folds_left.checked_sub(folds) {
            Some(left) => {
                self.folds_left = left;
                Ok(())
            }
            None => Err(Refusal {
                code: ProblemCode::RegexTooLarge,
                message: format!(
                    "case-insensitive classes here fold {folds} code points; {} are left of the {SPEC_FOLD_CODE_POINTS} all of a spec's patterns may fold together",
                    self.folds_left
                ),
                hint: "Under the i flag, keep classes to the letters you mean ([a-z], \\p{Greek}) rather than ranges over most of Unicode such as [\\x00-\\x{10FFFF}] or [\\s\\S].".into(),
            }),
        }
    }

    /// Spends what `engine_text` (the pattern as the regex engine reads it) compiles to,
    /// or refuses it when that is more than is left. Weighing stops at what is left, so
    /// it never costs more than the allowance; a refused pattern used it all up (the
    /// work was done), so the patterns after it are refused at once.
    fn spend(&mut self, engine_text: &str) -> Result<(), Refusal> {
        match weigh(engine_text, self.left) {
            Some(bytes) => {
                self.left -= bytes;
                Ok(())
            }
            None => Err(Refusal {
                code: ProblemCode::RegexTooLarge,
                message: format!(
                    "compiled, the pattern needs more than the {} bytes left of the {SPEC_REGEX_BYTES} all of a spec's patterns may use together",
                    std::mem::take(&mut self.left)
                ),
                hint: "Counted repetitions of Unicode classes compile to large automata (\\w{100} alone is ~1.7 MB): use ASCII classes such as [A-Za-z0-9_], smaller counts, or fewer such patterns.".into(),
            }),
        }
    }
}

/// Bytes of automaton `text` compiles to, if at most `limit`. Text the regex engine
/// cannot read whole (lookaround, backreferences) is weighed by the parts fancy-regex
/// hands to it.
fn weigh(text: &str, limit: usize) -> Option<usize> {
    match nfa_bytes(text, limit) {
        Ok(bytes) => Some(bytes),
        Err(true) => None,
        Err(false) => {
            // Unreadable as a whole: weigh the parts; a pattern that does not parse at
            // all weighs nothing here and is refused when it is compiled.
            let Ok(tree) = Expr::parse_tree(text) else {
                return Some(0);
            };
            let mut total = 0;
            weigh_parts(&tree.expr, limit, &mut total).then_some(total)
        }
    }
}

/// Adds the weight of every part of `e` the regex engine would compile to `total`;
/// false once `total` passes `limit`.
fn weigh_parts(e: &Expr, limit: usize, total: &mut usize) -> bool {
    if to_str_safe(e) {
        let mut text = String::new();
        e.to_str(&mut text, 0);
        return match nfa_bytes(&text, limit - *total) {
            Ok(bytes) => {
                *total += bytes;
                true
            }
            Err(over) => !over,
        };
    }
    guard::children(e)
        .into_iter()
        .all(|c| weigh_parts(c, limit, total))
}

/// Whether `Expr::to_str` can render `e` (it panics on what the regex engine cannot
/// run, and this build aborts on panics). Assertions weigh nothing and are left out.
fn to_str_safe(e: &Expr) -> bool {
    match e {
        Expr::Empty | Expr::Any { .. } | Expr::Literal { .. } | Expr::Delegate { .. } => true,
        Expr::Concat(v) | Expr::Alt(v) => v.iter().all(to_str_safe),
        Expr::Group(c) => to_str_safe(c),
        Expr::Repeat { child, .. } => to_str_safe(child),
        _ => false,
    }
}

/// Code points the regex parser will case-fold to compile `text`: every bracketed class
/// under the `i` flag folds its items (nested classes included, before its own
/// negation, and each side of a set operation), and so does a `\p{..}` class (before
/// its `\P` negation). Counted on fancy-regex's syntax tree, whose classes are the
/// pieces handed to the regex parser (with the `i` flag resolved), each read as syntax
/// only, with its coverage taken from its translation without folding: microseconds.
/// Text that does not parse folds nothing here.
fn fold_weight(text: &str) -> usize {
    fn in_tree(e: &Expr) -> usize {
        match e {
            Expr::Delegate { inner, casei: true } => {
                match regex_syntax::ast::parse::Parser::new().parse(inner) {
                    Ok(ast) => folds_in(&ast, &mut true),
                    Err(_) => 0,
                }
            }
            other => guard::children(other).into_iter().map(in_tree).sum(),
        }
    }
    Expr::parse_tree(text).map_or(0, |tree| in_tree(&tree.expr))
}

fn folds_in(ast: &regex_syntax::ast::Ast, casei: &mut bool) -> usize {
    use regex_syntax::ast::{Ast, Flag, GroupKind};
    match ast {
        // Flags set inside a group hold to its end, across alternatives.
        Ast::Flags(set) => {
            if let Some(on) = set.flags.flag_state(Flag::CaseInsensitive) {
                *casei = on;
            }
            0
        }
        Ast::Group(g) => {
            let mut inner = *casei;
            if let GroupKind::NonCapturing(flags) = &g.kind
                && let Some(on) = flags.flag_state(Flag::CaseInsensitive)
            {
                inner = on;
            }
            folds_in(&g.ast, &mut inner)
        }
        Ast::Concat(c) => c.asts.iter().map(|a| folds_in(a, casei)).sum(),
        Ast::Alternation(a) => a.asts.iter().map(|a| folds_in(a, casei)).sum(),
        Ast::Repetition(r) => folds_in(&r.ast, casei),
        Ast::ClassBracketed(b) if *casei => bracket_folds(b),
        Ast::ClassUnicode(u) if *casei => {
            let mut plain = (**u).clone();
            plain.negated = false;
            coverage(&Ast::class_unicode(plain))
        }
        _ => 0,
    }
}

/// A bracketed class folds its items, each nested class folds its own, and each side
/// of a set operation (`&&`, `--`, `~~`) is folded before the operation.
fn bracket_folds(b: &regex_syntax::ast::ClassBracketed) -> usize {
    use regex_syntax::ast::{Ast, ClassBracketed, ClassSet, ClassSetItem};
    fn side(set: &ClassSet, span: regex_syntax::ast::Span) -> usize {
        coverage(&Ast::class_bracketed(ClassBracketed {
            span,
            negated: false,
            kind: set.clone(),
        }))
    }
    fn nested(set: &ClassSet) -> usize {
        match set {
            ClassSet::BinaryOp(op) => {
                side(&op.lhs, op.span) + side(&op.rhs, op.span) + nested(&op.lhs) + nested(&op.rhs)
            }
            ClassSet::Item(ClassSetItem::Bracketed(inner)) => bracket_folds(inner),
            ClassSet::Item(ClassSetItem::Union(u)) => u
                .items
                .iter()
                .map(|item| match item {
                    ClassSetItem::Bracketed(inner) => bracket_folds(inner),
                    _ => 0,
                })
                .sum(),
            ClassSet::Item(_) => 0,
        }
    }
    let mut items = b.clone();
    items.negated = false;
    coverage(&Ast::class_bracketed(items)) + nested(&b.kind)
}

/// Code points a class covers, from its translation without folding.
fn coverage(class: &regex_syntax::ast::Ast) -> usize {
    use regex_syntax::hir::{Class, HirKind};
    match regex_syntax::Parser::new().parse(&class.to_string()) {
        Ok(hir) => match hir.kind() {
            HirKind::Class(Class::Unicode(c)) => c
                .ranges()
                .iter()
                .map(|r| r.end() as usize - r.start() as usize + 1)
                .sum(),
            HirKind::Literal(_) => 1,
            _ => 0,
        },
        Err(_) => 0,
    }
}

/// The Thompson NFA's size for `text`, or whether it failed for its size (true) or
/// for anything else (false).
fn nfa_bytes(text: &str, limit: usize) -> Result<usize, bool> {
    thompson::Compiler::new()
        .configure(
            thompson::Config::new()
                .nfa_size_limit(Some(limit))
                .shrink(false)
                .which_captures(thompson::WhichCaptures::None),
        )
        .build(text)
        .map(|nfa| nfa.memory_usage())
        .map_err(|e| e.size_limit().is_some())
}

fn length_refusal(hint: &str) -> Refusal {
    Refusal {
        code: ProblemCode::InvalidValue,
        message: format!("the pattern is longer than {MAX_PATTERN_CHARS} characters"),
        hint: hint.into(),
    }
}

/// The pattern as a regex check compiles it: flags in front.
pub fn with_flags(pattern: &str, flags: &str) -> String {
    if flags.is_empty() {
        pattern.to_owned()
    } else {
        format!("(?{flags}){pattern}")
    }
}

/// Everything a regex check's pattern must pass before payment.
pub fn check_regex(pattern: &str, flags: &str, budget: &mut RegexBudget) -> Result<(), Refusal> {
    if pattern.chars().count() > MAX_PATTERN_CHARS {
        return Err(length_refusal(
            "Shorten the pattern or split it into several regex checks.",
        ));
    }
    // Folding is counted before anything parses the pattern for real (the guard too).
    let text = with_flags(pattern, flags);
    budget.spend_folds(&text)?;
    guard::check_pattern(pattern)?;
    budget.spend(&text)?;
    compiles(
        fancy_regex::RegexOptionsBuilder::new()
            .backtrack_limit(REGEX_BACKTRACK_LIMIT)
            .delegate_size_limit(REGEX_SIZE_LIMIT)
            .build_delegate_prefilter(false)
            .build(text),
        "Fix the regular expression syntax.",
    )
}

/// Everything a schema's pattern must pass before payment, compiled the way the
/// `jsonschema` crate compiles it (ECMA-262 translated, then fancy-regex).
pub fn check_schema_pattern(pattern: &str, budget: &mut RegexBudget) -> Result<(), Refusal> {
    if pattern.chars().count() > MAX_PATTERN_CHARS {
        return Err(length_refusal(
            "Shorten the pattern; the same cap holds for regex checks and for every pattern and patternProperties key in a schema.",
        ));
    }
    budget.spend_folds(pattern)?;
    guard::check_pattern(pattern)?;
    let Ok(translated) = jsonschema_regex::to_rust_regex(pattern) else {
        return Err(Refusal {
            code: ProblemCode::InvalidRegex,
            message:
                "the pattern is not an ECMA-262 regular expression the schema validator can read"
                    .into(),
            hint: "Write schema patterns in ECMA-262 syntax (as JSON Schema defines them).".into(),
        });
    };
    if translated != pattern {
        budget.spend_folds(&translated)?;
    }
    budget.spend(&translated)?;
    compiles(
        fancy_regex::RegexOptionsBuilder::new()
            .backtrack_limit(REGEX_BACKTRACK_LIMIT)
            .delegate_size_limit(REGEX_SIZE_LIMIT)
            .build_delegate_prefilter(false)
            .build(translated.into_owned()),
        "Fix the pattern's syntax (schemas use ECMA-262 regular expressions).",
    )
}

fn compiles(built: fancy_regex::Result<fancy_regex::Regex>, hint: &str) -> Result<(), Refusal> {
    built.map(drop).map_err(|e| Refusal {
        code: ProblemCode::InvalidRegex,
        message: format!("the pattern does not compile: {e}"),
        hint: hint.into(),
    })
}

/// What a schema holds that needs checking before payment, found in one walk.
#[derive(Debug)]
pub struct SchemaScan {
    /// Every pattern (`where`, pattern), in document order.
    pub patterns: Vec<(String, String)>,
    /// References whose JSON pointer leads into data (`where`, reference).
    pub refs_into_data: Vec<(String, String)>,
    /// The schema with every pattern replaced by a trivial one: compiling it checks
    /// every other rule of the schema without compiling (and prefiltering) a pattern.
    pub neutralized: Value,
}

/// Walks `schema` (found at `at`) once: its patterns, its references into data, and
/// its neutralized copy.
pub fn scan_schema(schema: &Value, at: &str) -> SchemaScan {
    let mut scan = SchemaScan {
        patterns: Vec::new(),
        refs_into_data: Vec::new(),
        neutralized: Value::Null,
    };
    let mut neutralized = schema.clone();
    walk(&mut neutralized, &mut Path::new(at), &mut scan);
    scan.neutralized = neutralized;
    scan
}

/// Segments of a place in a schema, rendered only for what is reported (a long key
/// would otherwise be copied into the path of everything beneath it).
struct Path {
    segments: Vec<String>,
}

impl Path {
    fn new(at: &str) -> Path {
        Path {
            segments: vec![at.to_owned()],
        }
    }

    fn key(k: &str) -> String {
        const SHOWN: usize = 64;
        if k.chars().count() <= SHOWN {
            k.to_owned()
        } else {
            format!("{}…", k.chars().take(SHOWN).collect::<String>())
        }
    }

    fn render(&self, last: &str) -> String {
        let mut s = self.segments.concat();
        s.push_str(last);
        s
    }
}

fn walk(v: &mut Value, path: &mut Path, scan: &mut SchemaScan) {
    match v {
        Value::Object(m) => {
            for (k, val) in m.iter_mut() {
                let here = format!(".{}", Path::key(k));
                match (k.as_str(), val) {
                    ("pattern", Value::String(p)) => {
                        scan.patterns.push((path.render(&here), std::mem::take(p)));
                    }
                    ("patternProperties", Value::Object(pp)) => {
                        let old = std::mem::take(pp);
                        for (i, (p, mut sub)) in old.into_iter().enumerate() {
                            let key = format!("{here}[{:?}]", Path::key(&p));
                            scan.patterns.push((path.render(&key), p));
                            path.segments.push(key);
                            walk(&mut sub, path, scan);
                            path.segments.pop();
                            // Distinct, trivial, cheap to compile.
                            pp.insert(format!("^{i}$"), sub);
                        }
                    }
                    (name, Value::Object(named)) if NAMED_SCHEMAS.contains(&name) => {
                        for (n, sub) in named.iter_mut() {
                            path.segments.push(format!("{here}.{}", Path::key(n)));
                            walk(sub, path, scan);
                            path.segments.pop();
                        }
                    }
                    (name, Value::String(r)) if REFERENCES.contains(&name) => {
                        if pointer_into_data(r) {
                            scan.refs_into_data.push((path.render(&here), r.clone()));
                        }
                    }
                    (name, _) if DATA_KEYWORDS.contains(&name) => {}
                    (_, val) => {
                        path.segments.push(here);
                        walk(val, path, scan);
                        path.segments.pop();
                    }
                }
            }
        }
        Value::Array(a) => {
            for (i, item) in a.iter_mut().enumerate() {
                path.segments.push(format!("[{i}]"));
                walk(item, path, scan);
                path.segments.pop();
            }
        }
        _ => {}
    }
}

/// Whether a reference's JSON pointer fragment passes through a data keyword in a
/// place where it is a keyword (not a name under `properties` and the like).
fn pointer_into_data(reference: &str) -> bool {
    let Some((_, fragment)) = reference.split_once('#') else {
        return false;
    };
    let Some(pointer) = fragment.strip_prefix('/') else {
        return false;
    };
    let mut names_next = false;
    for raw in pointer.split('/') {
        let segment = percent_decode(raw).replace("~1", "/").replace("~0", "~");
        if names_next {
            names_next = false;
            continue;
        }
        if DATA_KEYWORDS.contains(&segment.as_str()) {
            return true;
        }
        names_next = NAMED_SCHEMAS.contains(&segment.as_str()) || segment == "patternProperties";
    }
    false
}

/// `%XX` escapes decoded (as a URI fragment is before its pointer is read); anything
/// malformed is kept as it is.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = s.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests;
