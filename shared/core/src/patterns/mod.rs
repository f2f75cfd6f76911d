//! Every pattern of a spec, judged before payment at a cost bounded by the spec's size.
//!
//! Patterns live in regex checks and inside JSON Schemas (every `pattern` and every
//! `patternProperties` key, whatever the property names around them). Before anyone
//! pays, each one is held to a length cap, passes the backtracking guard, and is weighed
//! against the spec's compiled-size allowance by building what the regex engine will
//! build for it. Building is what costs: about 5 ms per MiB of automaton (`^\w{1,40}$`
//! is 2.2 MB forward and reverse). A pattern the engine takes whole is proven to compile
//! by that weighing; any other (lookaround, backreferences) is compiled once more, its
//! parts counted twice, without the literal prefilter (building one can take 30 ms on its
//! own, and acceptance does not depend on it). The allowance is spent across the whole
//! spec, not per pattern, so the worst spec costs what the allowance costs.
//!
//! Schemas are compiled by the `jsonschema` crate, which builds every pattern with a
//! prefilter. So before payment a schema is compiled with its patterns replaced by
//! trivial ones (every other rule of the schema is checked as it is), and its patterns
//! are compiled here the way `jsonschema` does (ECMA-262 translated by `jsonschema-regex`,
//! then fancy-regex under the same limits). A `$ref` into data (`const`, `enum`,
//! `default`, `examples`) is refused: it would make data a schema whose patterns nobody
//! checked.

use crate::guard::{self, GuardRefusal};
use crate::json::Value;
use crate::problem::ProblemCode;

mod weigh;
use weigh::{Weighed, fold_weight, weigh};

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
/// (regex-automata's Thompson NFAs, forward and reverse, as it counts their memory).
/// Ordinary patterns weigh kilobytes; a count on a Unicode class weighs about 55 KB per
/// repetition, so `^\w{1,40}$` (2.2 MB) fits once. Weighing costs about 5 ms per MiB:
/// the worst spec about 15 ms of CPU (docs/benchmarks.md).
pub const SPEC_REGEX_BYTES: usize = 3 << 20;

const SIZE_HINT: &str = "Counted repetitions of Unicode classes compile to large automata (\\w{40} alone is ~2.2 MB, forward and reverse): use ASCII classes such as [A-Za-z0-9_], smaller counts, or fewer such patterns.";

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
    /// Refuses at once, before the pattern is even parsed, once a refused pattern has
    /// used the allowance up: what follows cannot fit, so reading it is work for nothing.
    fn spent_up(&self) -> Result<(), Refusal> {
        if self.left > 0 {
            return Ok(());
        }
        Err(Refusal {
            code: ProblemCode::RegexTooLarge,
            message: format!(
                "nothing is left of the {SPEC_REGEX_BYTES} bytes all of a spec's patterns may compile to together"
            ),
            hint: SIZE_HINT.into(),
        })
    }

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
    /// work was done), so the patterns after it are refused at once. Says whether the
    /// pattern still has to be compiled to prove it compiles (see [`Weighed`]).
    fn spend(&mut self, engine_text: &str) -> Result<Weighed, Refusal> {
        match weigh(engine_text, self.left) {
            Some(weighed) => {
                self.left -= weighed.bytes;
                Ok(weighed)
            }
            None => Err(Refusal {
                code: ProblemCode::RegexTooLarge,
                message: format!(
                    "compiled, the pattern needs more than the {} bytes left of the {SPEC_REGEX_BYTES} all of a spec's patterns may use together",
                    std::mem::take(&mut self.left)
                ),
                hint: SIZE_HINT.into(),
            }),
        }
    }
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
    budget.spent_up()?;
    budget.spend_folds(&text)?;
    guard::check_pattern(pattern)?;
    if !budget.spend(&text)?.compile {
        return Ok(());
    }
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
    budget.spent_up()?;
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
    if !budget.spend(&translated)?.compile {
        return Ok(());
    }
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
