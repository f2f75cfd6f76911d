//! Acceptance specs: parsing into typed checks, normalization (every default written
//! out, so the embedded spec says exactly what was judged), tier rules, and the
//! problems a caller is shown, all of them at once, each with where/code/message/hint.

use std::collections::{BTreeMap, BTreeSet};

use crate::json::Value;
use crate::jsonpath::{JsonPath, PATH_HINT};
use crate::product::{MAX_CHECKS, MAX_NETWORK_CHECKS, MAX_TEXT_BYTES, MIN_CHECKS, Tier};

use crate::patterns::{self, RegexBudget};
pub use crate::patterns::{MAX_PATTERN_CHARS, MAX_SPEC_PATTERN_CHARS, MAX_SPEC_PATTERNS};
/// JSON values (objects, arrays, strings, numbers...) in all of a spec's schemas together:
/// compiling a schema costs about 3 µs per value, so this keeps it to tens of milliseconds.
pub const MAX_SCHEMA_VALUES: usize = 10_000;
/// The JSON pointers of every value in a spec's schemas, in bytes, together: a schema
/// validator names each place it compiles by its path, so a long property name over
/// thousands of values costs its length thousands of times (a 700 KB name over 9,000
/// properties took seconds). Real schemas use a fraction of this.
pub const MAX_SCHEMA_PATH_BYTES: usize = 4 << 20;

pub use crate::problem::{Problem, ProblemCode, problems_value};

// ---------------------------------------------------------------------------
// Typed checks

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathOp {
    Eq,
    Ne,
    Gt,
    Lt,
    Gte,
    Lte,
    Exists,
    NotExists,
    Contains,
}

impl PathOp {
    const NAMES: &'static [&'static str] = &[
        "eq",
        "ne",
        "gt",
        "lt",
        "gte",
        "lte",
        "exists",
        "not_exists",
        "contains",
    ];

    fn parse(s: &str) -> Option<PathOp> {
        Some(match s {
            "eq" => PathOp::Eq,
            "ne" => PathOp::Ne,
            "gt" => PathOp::Gt,
            "lt" => PathOp::Lt,
            "gte" => PathOp::Gte,
            "lte" => PathOp::Lte,
            "exists" => PathOp::Exists,
            "not_exists" => PathOp::NotExists,
            "contains" => PathOp::Contains,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PathOp::Eq => "eq",
            PathOp::Ne => "ne",
            PathOp::Gt => "gt",
            PathOp::Lt => "lt",
            PathOp::Gte => "gte",
            PathOp::Lte => "lte",
            PathOp::Exists => "exists",
            PathOp::NotExists => "not_exists",
            PathOp::Contains => "contains",
        }
    }

    fn takes_value(self) -> bool {
        !matches!(self, PathOp::Exists | PathOp::NotExists)
    }

    fn is_ordering(self) -> bool {
        matches!(self, PathOp::Gt | PathOp::Lt | PathOp::Gte | PathOp::Lte)
    }
}

/// `{"path","op","value"}`: the json_path check, and `expect.json_path` of url_probe.
#[derive(Debug, Clone, PartialEq)]
pub struct PathAssertion {
    pub path_text: String,
    pub path: JsonPath,
    pub op: PathOp,
    pub value: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectorOp {
    Exists,
    NotExists,
    Eq,
    Ne,
    Contains,
}

impl SelectorOp {
    const NAMES: &'static [&'static str] = &["exists", "not_exists", "eq", "ne", "contains"];

    fn parse(s: &str) -> Option<SelectorOp> {
        Some(match s {
            "exists" => SelectorOp::Exists,
            "not_exists" => SelectorOp::NotExists,
            "eq" => SelectorOp::Eq,
            "ne" => SelectorOp::Ne,
            "contains" => SelectorOp::Contains,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SelectorOp::Exists => "exists",
            SelectorOp::NotExists => "not_exists",
            SelectorOp::Eq => "eq",
            SelectorOp::Ne => "ne",
            SelectorOp::Contains => "contains",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SelectorAssertion {
    pub selector: String,
    pub op: SelectorOp,
    pub value: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProbeExpect {
    pub status: u16,
    pub keyword: Option<String>,
    pub selector: Option<SelectorAssertion>,
    pub json_path: Option<PathAssertion>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum HashTarget {
    Text,
    Url(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LengthUnit {
    /// Unicode scalar values.
    Chars,
    /// Runs of non-whitespace separated by Unicode whitespace.
    Words,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Check {
    JsonSchema {
        schema: Value,
    },
    JsonPath(PathAssertion),
    ContentHash {
        sha256: String,
        target: HashTarget,
    },
    Regex {
        pattern: String,
        /// Sorted subset of "ims".
        flags: String,
        expect_match: bool,
    },
    Length {
        unit: LengthUnit,
        min: u64,
        max: Option<u64>,
    },
    UrlProbe {
        url: String,
        expect: ProbeExpect,
    },
}

pub const CHECK_TYPES: &[&str] = &[
    "json_schema",
    "json_path",
    "content_hash",
    "regex",
    "length",
    "url_probe",
];

impl Check {
    pub fn type_name(&self) -> &'static str {
        match self {
            Check::JsonSchema { .. } => "json_schema",
            Check::JsonPath(_) => "json_path",
            Check::ContentHash { .. } => "content_hash",
            Check::Regex { .. } => "regex",
            Check::Length { .. } => "length",
            Check::UrlProbe { .. } => "url_probe",
        }
    }

    /// The URL this check fetches, if it is a network check.
    pub fn network_url(&self) -> Option<&str> {
        match self {
            Check::UrlProbe { url, .. } => Some(url),
            Check::ContentHash {
                target: HashTarget::Url(url),
                ..
            } => Some(url),
            _ => None,
        }
    }

    pub fn needs_text(&self) -> bool {
        matches!(
            self,
            Check::Regex { .. }
                | Check::Length { .. }
                | Check::ContentHash {
                    target: HashTarget::Text,
                    ..
                }
        )
    }

    pub fn needs_json(&self) -> bool {
        matches!(self, Check::JsonSchema { .. } | Check::JsonPath(_))
    }

    /// [`Check::needs_text`] and [`Check::needs_json`] read off a check's normalized
    /// JSON (what the isolated checker is sent), so a request carries only the parts
    /// of the deliverable its checks read. A test holds the two readings equal.
    pub fn reads_of_normalized(check: &Value) -> (bool, bool) {
        let ty = check.get("type").and_then(Value::as_str);
        let text = match ty {
            Some("regex" | "length") => true,
            Some("content_hash") => check.get("target").and_then(Value::as_str) == Some("text"),
            _ => false,
        };
        (text, matches!(ty, Some("json_schema" | "json_path")))
    }

    /// The normalized form: every field spelled out with its default.
    pub fn to_value(&self) -> Value {
        let base = Value::object().with("type", self.type_name());
        match self {
            Check::JsonSchema { schema } => base.with("schema", schema.clone()),
            Check::JsonPath(a) => path_assertion_value(a, base),
            Check::ContentHash { sha256, target } => {
                let base = base.with("sha256", sha256.as_str());
                match target {
                    HashTarget::Text => base.with("target", "text"),
                    HashTarget::Url(u) => base.with("target", "url").with("url", u.as_str()),
                }
            }
            Check::Regex {
                pattern,
                flags,
                expect_match,
            } => base
                .with("pattern", pattern.as_str())
                .with("flags", flags.as_str())
                .with("expect", if *expect_match { "match" } else { "no_match" }),
            Check::Length { unit, min, max } => base
                .with(
                    "unit",
                    match unit {
                        LengthUnit::Chars => "chars",
                        LengthUnit::Words => "words",
                    },
                )
                .with("min", *min)
                .with("max", *max),
            Check::UrlProbe { url, expect } => {
                let mut e = Value::object().with("status", expect.status);
                if let Some(k) = &expect.keyword {
                    e.insert("keyword", k.as_str());
                }
                if let Some(s) = &expect.selector {
                    let mut sv = Value::object()
                        .with("selector", s.selector.as_str())
                        .with("op", s.op.as_str());
                    if let Some(v) = &s.value {
                        sv.insert("value", v.as_str());
                    }
                    e.insert("selector", sv);
                }
                if let Some(a) = &expect.json_path {
                    e.insert("json_path", path_assertion_value(a, Value::object()));
                }
                base.with("url", url.as_str()).with("expect", e)
            }
        }
    }
}

fn path_assertion_value(a: &PathAssertion, base: Value) -> Value {
    let mut v = base
        .with("path", a.path_text.as_str())
        .with("op", a.op.as_str());
    if let Some(val) = &a.value {
        v.insert("value", val.clone());
    }
    v
}

/// A spec that passed every rule: typed checks, the normalized JSON and its hash.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub checks: Vec<Check>,
    pub normalized: Value,
    /// sha256 hex of the stable JSON of `normalized`.
    pub hash: String,
}

impl Spec {
    pub fn network_check_count(&self) -> usize {
        self.checks
            .iter()
            .filter(|c| c.network_url().is_some())
            .count()
    }

    /// Every URL the spec would fetch, with where it is written.
    pub fn network_urls(&self) -> Vec<(String, String)> {
        network_urls_of(self.checks.iter().enumerate())
    }
}

/// `(checks[i].url, url)` for every network check among `checks`.
pub fn network_urls_of<'a>(
    checks: impl Iterator<Item = (usize, &'a Check)>,
) -> Vec<(String, String)> {
    checks
        .filter_map(|(i, c)| {
            c.network_url()
                .map(|u| (format!("checks[{i}].url"), u.to_owned()))
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Field reading with problems

struct Fields<'a> {
    obj: &'a BTreeMap<String, Value>,
    at: String,
    known: &'static [&'static str],
}

impl<'a> Fields<'a> {
    fn path(&self, key: &str) -> String {
        if self.at.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.at)
        }
    }

    /// Reads `obj` (described as `what` in messages), reporting at once every field
    /// it does not define.
    fn new(
        obj: &'a BTreeMap<String, Value>,
        at: &str,
        known: &'static [&'static str],
        what: &str,
        problems: &mut Vec<Problem>,
    ) -> Fields<'a> {
        let f = Fields {
            obj,
            at: at.to_owned(),
            known,
        };
        f.unknown(problems, what);
        f
    }

    /// Reports fields this object does not define.
    fn unknown(&self, problems: &mut Vec<Problem>, what: &str) {
        for k in self.obj.keys() {
            if !self.known.contains(&k.as_str()) {
                problems.push(Problem::new(
                    self.path(k),
                    ProblemCode::UnknownField,
                    format!("{what} has no field {k:?}"),
                    format!("Remove {k:?}; {what} takes: {}.", self.known.join(", ")),
                ));
            }
        }
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.obj.get(key)
    }

    fn string(&self, key: &str, required: bool, problems: &mut Vec<Problem>) -> Option<&'a str> {
        match self.get(key) {
            None if required => {
                problems.push(Problem::new(
                    self.path(key),
                    ProblemCode::MissingField,
                    format!("{key} is required"),
                    format!("Add \"{key}\": \"...\"."),
                ));
                None
            }
            None => None,
            Some(Value::String(s)) => Some(s.as_str()),
            Some(other) => {
                problems.push(wrong_type(&self.path(key), "a string", other));
                None
            }
        }
    }

    fn choice<T>(
        &self,
        key: &str,
        names: &[&str],
        parse: impl Fn(&str) -> Option<T>,
        default: Option<T>,
        problems: &mut Vec<Problem>,
    ) -> Option<T> {
        let s = self.string(key, default.is_none(), problems);
        match s {
            None => default,
            Some(s) => match parse(s) {
                Some(t) => Some(t),
                None => {
                    problems.push(Problem::new(
                        self.path(key),
                        ProblemCode::InvalidValue,
                        format!("{key} {s:?} is not one of {}", names.join(", ")),
                        format!("Use one of: {}.", names.join(", ")),
                    ));
                    None
                }
            },
        }
    }

    fn count(&self, key: &str, problems: &mut Vec<Problem>) -> Option<Option<u64>> {
        match self.get(key) {
            None | Some(Value::Null) => Some(None),
            Some(v) => match v.as_u64() {
                Some(n) => Some(Some(n)),
                None => {
                    problems.push(wrong_type(&self.path(key), "a non-negative integer", v));
                    None
                }
            },
        }
    }
}

fn wrong_type(at: &str, expected: &str, got: &Value) -> Problem {
    let field = at.rsplit('.').next().unwrap_or(at);
    Problem::new(
        at,
        ProblemCode::WrongType,
        format!("{field} must be {expected}, not {}", got.type_name()),
        format!("Make {field} {expected}."),
    )
}

fn object_at<'a>(
    v: &'a Value,
    at: &str,
    what: &str,
    problems: &mut Vec<Problem>,
) -> Option<&'a BTreeMap<String, Value>> {
    match v {
        Value::Object(m) => Some(m),
        other => {
            problems.push(Problem::new(
                at,
                ProblemCode::WrongType,
                format!("{what} must be an object, not {}", other.type_name()),
                format!("Send {what} as a JSON object."),
            ));
            None
        }
    }
}

// ---------------------------------------------------------------------------
// Spec parsing

/// Parse and normalize a spec. With a tier, its rules apply too.
pub fn parse_spec(v: &Value, tier: Option<Tier>) -> Result<Spec, Vec<Problem>> {
    let (checks, problems) = parse_spec_partial(v, tier);
    if !problems.is_empty() {
        return Err(problems);
    }
    let spec = Spec::from_checks(checks.into_iter().map(|(_, c)| c).collect());
    match spec.size_problem() {
        Some(p) => Err(vec![p]),
        None => Ok(spec),
    }
}

/// The normalized spec's stable JSON, in bytes, at most: a verdict document embeds the
/// spec, and its purchase's prepared answer holds the document twice (the answer and the
/// verdict to store) in one DynamoDB item of at most 400 KB
/// (`umpire_core::platform::DYNAMODB_ITEM_BYTES`; a test holds the largest answer under it).
pub const MAX_SPEC_BYTES: usize = 128 * 1024;

impl Spec {
    /// A spec too large to be stored with its verdict, refused before payment.
    pub fn size_problem(&self) -> Option<Problem> {
        let bytes = self.normalized.to_canonical_vec().len();
        (bytes > MAX_SPEC_BYTES).then(|| {
            Problem::new(
                "spec",
                ProblemCode::SpecTooLarge,
                format!(
                    "the normalized spec is {bytes} bytes of JSON; a verdict embeds it and at most {MAX_SPEC_BYTES} can be stored with one"
                ),
                "Shrink the spec: shorter paths, keywords and schemas; judge large expected values by content_hash.",
            )
        })
    }

    /// The spec of checks that passed every rule: normalized JSON and its hash.
    pub fn from_checks(checks: Vec<Check>) -> Spec {
        let normalized = Value::object().with(
            "checks",
            Value::Array(checks.iter().map(Check::to_value).collect()),
        );
        let hash = crate::hash::sha256_hex(&normalized.to_canonical_vec());
        Spec {
            checks,
            normalized,
            hash,
        }
    }
}

/// Every check that parsed (with its index) and every problem, so a caller can
/// report on the good checks (their URLs, say) even when others are wrong.
pub fn parse_spec_partial(v: &Value, tier: Option<Tier>) -> (Vec<(usize, Check)>, Vec<Problem>) {
    let mut problems = Vec::new();
    let mut checks = Vec::new();
    let Some(obj) = object_at(v, "spec", "spec", &mut problems) else {
        return (checks, problems);
    };
    Fields::new(obj, "", &["checks"], "a spec", &mut problems);
    let checks_v = match obj.get("checks") {
        Some(Value::Array(a)) => a,
        Some(other) => {
            problems.push(wrong_type("checks", "an array of checks", other));
            return (checks, problems);
        }
        None => {
            problems.push(Problem::new(
                "checks",
                ProblemCode::MissingField,
                "a spec needs a checks array",
                "Send {\"checks\":[{\"type\":\"regex\",\"pattern\":\"...\"}]} with 1 to 10 checks.",
            ));
            return (checks, problems);
        }
    };
    if checks_v.len() < MIN_CHECKS {
        problems.push(Problem::new(
            "checks",
            ProblemCode::TooFewChecks,
            "the spec has no checks",
            "Add at least one check; a spec with nothing to judge cannot pass or fail.",
        ));
    }
    if checks_v.len() > MAX_CHECKS {
        // Nothing more is read: ten thousand checks are refused for the price of one.
        problems.push(Problem::new(
            "checks",
            ProblemCode::TooManyChecks,
            format!("the spec has {} checks; at most {MAX_CHECKS} are allowed", checks_v.len()),
            "Split the spec into several verdicts or merge checks (one json_schema can assert many fields).",
        ));
        return (checks, problems);
    }
    // The cheap structural limits come before any check is parsed, guarded or compiled.
    let before = problems.len();
    size_problems(checks_v, &mut problems);
    if problems.len() > before {
        return (checks, problems);
    }
    // One compiled-size allowance for every pattern of the spec, spent in order.
    let mut budget = RegexBudget::default();
    for (i, cv) in checks_v.iter().enumerate() {
        if let Some(c) = parse_check(cv, &format!("checks[{i}]"), &mut budget, &mut problems) {
            checks.push((i, c));
        }
    }
    if let Some(tier) = tier {
        tier_problems(tier, checks_v.len(), &checks, &mut problems);
    }
    (checks, problems)
}

/// The spec-wide limits on patterns and schemas, measured without parsing anything.
fn size_problems(checks_v: &[Value], problems: &mut Vec<Problem>) {
    let schemas = || {
        checks_v
            .iter()
            .filter_map(|c| match (c.get("type"), c.get("schema")) {
                (Some(Value::String(t)), Some(s)) if t == "json_schema" => Some(s),
                _ => None,
            })
    };
    let (mut values, mut path_bytes) = (0, 0);
    for s in schemas() {
        let (v, p) = weigh_values(s, 0);
        values += v;
        path_bytes += p;
    }
    if values > MAX_SCHEMA_VALUES {
        problems.push(Problem::new(
            "checks",
            ProblemCode::SpecTooLarge,
            format!(
                "the spec's schemas hold {values} JSON values; at most {MAX_SCHEMA_VALUES} are allowed across a spec"
            ),
            "Shrink the schemas: assert the fields the verdict depends on, and move long enum or const data out of the spec.",
        ));
        return;
    }
    if path_bytes > MAX_SCHEMA_PATH_BYTES {
        problems.push(Problem::new(
            "checks",
            ProblemCode::SpecTooLarge,
            format!(
                "the paths to the values of the spec's schemas hold {path_bytes} bytes together; at most {MAX_SCHEMA_PATH_BYTES} are allowed across a spec"
            ),
            "Shorten the property names (a long name is repeated in the path of everything beneath it) or flatten the schema.",
        ));
        return;
    }
    let mut patterns: Vec<String> = Vec::new();
    for c in checks_v {
        if let (Some(Value::String(t)), Some(Value::String(p))) = (c.get("type"), c.get("pattern"))
            && t == "regex"
        {
            patterns.push(p.clone());
        }
    }
    for s in schemas() {
        let scan = patterns::scan_schema(s, "");
        patterns.extend(scan.patterns.into_iter().map(|(_, p)| p));
    }
    let chars: usize = patterns.iter().map(|p| p.chars().count()).sum();
    if patterns.len() > MAX_SPEC_PATTERNS {
        problems.push(Problem::new(
            "checks",
            ProblemCode::SpecTooLarge,
            format!(
                "the spec has {} patterns; at most {MAX_SPEC_PATTERNS} are allowed across a spec",
                patterns.len()
            ),
            "Merge patterns (one pattern can list alternatives), or assert fewer fields by pattern.",
        ));
    } else if chars > MAX_SPEC_PATTERN_CHARS {
        problems.push(Problem::new(
            "checks",
            ProblemCode::SpecTooLarge,
            format!(
                "the spec's patterns hold {chars} characters; at most {MAX_SPEC_PATTERN_CHARS} are allowed across a spec"
            ),
            "Shorten the patterns; the same cap holds for regex checks and every pattern and patternProperties key in a schema.",
        ));
    }
}

/// Every JSON value in `v`, `v` included, and the bytes of their paths below `v` together
/// (`path` is the length of the path to `v`). The parser's depth limit bounds the recursion.
fn weigh_values(v: &Value, path: usize) -> (usize, usize) {
    let mut total = (1, path);
    let mut add = |(n, p): (usize, usize)| {
        total.0 += n;
        total.1 = total.1.saturating_add(p);
    };
    match v {
        Value::Array(a) => {
            for (i, item) in a.iter().enumerate() {
                add(weigh_values(item, path + 1 + decimal_len(i)));
            }
        }
        Value::Object(m) => {
            for (k, item) in m {
                add(weigh_values(item, path + 1 + k.len()));
            }
        }
        _ => {}
    }
    total
}

fn decimal_len(i: usize) -> usize {
    i.checked_ilog10().map_or(1, |d| d as usize + 1)
}

fn tier_problems(tier: Tier, total: usize, checks: &[(usize, Check)], problems: &mut Vec<Problem>) {
    let network: Vec<usize> = checks
        .iter()
        .filter(|(_, c)| c.network_url().is_some())
        .map(|(i, _)| *i)
        .collect();
    match tier {
        Tier::Witness => {
            let ok =
                total == 1 && matches!(checks.first(), Some((_, Check::UrlProbe { .. })) | None);
            if !ok {
                problems.push(Problem::new(
                    "checks",
                    ProblemCode::CheckNotAllowed,
                    "a witness verdict is exactly one url_probe check",
                    "Send one {\"type\":\"url_probe\",...} check, or buy the probe tier for more checks.",
                ));
            }
        }
        Tier::Basic => {
            for i in network {
                problems.push(Problem::new(
                    format!("checks[{i}]"),
                    ProblemCode::CheckNotAllowed,
                    "the basic tier fetches nothing: url_probe and content_hash with target url are not included",
                    "Use the probe tier ($2.00) or sworn tier for checks that fetch URLs, or hash deliverable.text instead.",
                ));
            }
        }
        Tier::Probe | Tier::Sworn => {
            if network.len() > MAX_NETWORK_CHECKS {
                problems.push(Problem::new(
                    "checks",
                    ProblemCode::TooManyNetworkChecks,
                    format!(
                        "the spec fetches {} URLs; at most {MAX_NETWORK_CHECKS} network checks are allowed per verdict",
                        network.len()
                    ),
                    "Keep at most 3 url_probe / content_hash-on-url checks; buy another verdict for the rest.",
                ));
            }
        }
    }
}

fn parse_check(
    v: &Value,
    at: &str,
    budget: &mut RegexBudget,
    problems: &mut Vec<Problem>,
) -> Option<Check> {
    let obj = object_at(v, at, "a check", problems)?;
    let ty = match obj.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(other) => {
            problems.push(wrong_type(&format!("{at}.type"), "a string", other));
            return None;
        }
        None => {
            problems.push(Problem::new(
                format!("{at}.type"),
                ProblemCode::MissingField,
                "every check needs a type",
                format!("Add \"type\": one of {}.", CHECK_TYPES.join(", ")),
            ));
            return None;
        }
    };
    let before = problems.len();
    let check = match ty {
        "json_schema" => parse_json_schema(obj, at, budget, problems),
        "json_path" => {
            let f = Fields::new(
                obj,
                at,
                &["type", "path", "op", "value"],
                "a json_path check",
                problems,
            );
            parse_path_assertion(&f, problems).map(Check::JsonPath)
        }
        "content_hash" => parse_content_hash(obj, at, problems),
        "regex" => parse_regex(obj, at, budget, problems),
        "length" => parse_length(obj, at, problems),
        "url_probe" => parse_url_probe(obj, at, problems),
        other => {
            problems.push(Problem::new(
                format!("{at}.type"),
                ProblemCode::UnknownCheckType,
                format!("there is no check type {other:?}"),
                format!("Use one of: {}.", CHECK_TYPES.join(", ")),
            ));
            None
        }
    };
    // A check with any problem is not returned even if parsing produced something.
    if problems.len() > before { None } else { check }
}

fn parse_path_assertion(f: &Fields<'_>, problems: &mut Vec<Problem>) -> Option<PathAssertion> {
    let before = problems.len();
    let path_text = f.string("path", true, problems);
    let path = path_text.and_then(|p| match JsonPath::parse(p) {
        Ok(jp) => Some(jp),
        Err(e) => {
            problems.push(Problem::new(
                f.path("path"),
                ProblemCode::InvalidJsonPath,
                format!("path {p:?}: {e}"),
                PATH_HINT,
            ));
            None
        }
    });
    let op = f.choice("op", PathOp::NAMES, PathOp::parse, None, problems);
    let value = f.get("value").cloned();
    if let Some(op) = op {
        match (&value, op.takes_value()) {
            (None, true) => problems.push(Problem::new(
                f.path("value"),
                ProblemCode::MissingField,
                format!("op {} needs a value to compare with", op.as_str()),
                "Add \"value\": the JSON value to compare against.",
            )),
            (Some(_), false) => problems.push(Problem::new(
                f.path("value"),
                ProblemCode::UnknownField,
                format!("op {} takes no value", op.as_str()),
                "Remove \"value\", or use op eq/ne/gt/lt/gte/lte/contains.",
            )),
            _ => {}
        }
        if op.is_ordering()
            && let Some(v) = &value
            && !matches!(v, Value::Number(_) | Value::String(_))
        {
            problems.push(Problem::new(
                f.path("value"),
                ProblemCode::InvalidValue,
                format!(
                    "op {} compares numbers or strings, not {}",
                    op.as_str(),
                    v.type_name()
                ),
                "Compare against a number (numerically) or a string (by code point).",
            ));
        }
    }
    if problems.len() > before {
        return None;
    }
    Some(PathAssertion {
        path_text: path_text?.to_owned(),
        path: path?,
        op: op?,
        value,
    })
}

fn parse_json_schema(
    obj: &BTreeMap<String, Value>,
    at: &str,
    budget: &mut RegexBudget,
    problems: &mut Vec<Problem>,
) -> Option<Check> {
    let f = Fields::new(
        obj,
        at,
        &["type", "schema"],
        "a json_schema check",
        problems,
    );
    let Some(schema) = f.get("schema") else {
        problems.push(Problem::new(
            f.path("schema"),
            ProblemCode::MissingField,
            "json_schema needs a schema",
            "Add \"schema\": a JSON Schema (draft 2020-12) object.",
        ));
        return None;
    };
    if !matches!(schema, Value::Object(_) | Value::Bool(_)) {
        problems.push(wrong_type(
            &f.path("schema"),
            "a JSON Schema object (or boolean)",
            schema,
        ));
        return None;
    }
    let before = problems.len();
    if let Some(Value::String(uri)) = schema.get("$schema")
        && !uri.starts_with("https://json-schema.org/draft/2020-12/schema")
    {
        problems.push(Problem::new(
            format!("{at}.schema.$schema"),
            ProblemCode::InvalidSchema,
            format!("schemas are judged as draft 2020-12, not {uri}"),
            "Remove \"$schema\" or set it to https://json-schema.org/draft/2020-12/schema.",
        ));
    }
    let scan = patterns::scan_schema(schema, &format!("{at}.schema"));
    for (where_, reference) in &scan.refs_into_data {
        problems.push(Problem::new(
            where_.as_str(),
            ProblemCode::InvalidSchema,
            format!("{reference:?} points into data (const, enum, default or examples), which is never a schema"),
            "Point $ref at a schema: move the definition under $defs and refer to it there.",
        ));
    }
    for (where_, pattern) in &scan.patterns {
        if let Err(r) = patterns::check_schema_pattern(pattern, budget) {
            problems.push(Problem::new(where_.as_str(), r.code, r.message, r.hint));
        }
    }
    // Every other rule of the schema, checked on the copy whose patterns are trivial:
    // its own patterns compiled above as jsonschema compiles them, without the
    // prefilter jsonschema would build for each (judging builds them, in the checker).
    if problems.len() == before
        && let Err(e) = crate::eval::compile_schema(&scan.neutralized)
    {
        problems.push(Problem::new(
            f.path("schema"),
            ProblemCode::InvalidSchema,
            format!("the schema does not compile: {e}"),
            "Fix the schema; external $ref targets are never fetched, so inline every definition under $defs.",
        ));
    }
    if problems.len() > before {
        return None;
    }
    Some(Check::JsonSchema {
        schema: schema.clone(),
    })
}

fn parse_content_hash(
    obj: &BTreeMap<String, Value>,
    at: &str,
    problems: &mut Vec<Problem>,
) -> Option<Check> {
    let f = Fields::new(
        obj,
        at,
        &["type", "sha256", "target", "url"],
        "a content_hash check",
        problems,
    );
    let before = problems.len();
    let sha = f.string("sha256", true, problems);
    let sha = sha.and_then(|s| {
        if s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
            Some(s.to_ascii_lowercase())
        } else {
            problems.push(Problem::new(
                f.path("sha256"),
                ProblemCode::InvalidValue,
                "sha256 must be 64 hex characters",
                "Send the SHA-256 digest as 64 hex characters (sha256sum prints it).",
            ));
            None
        }
    });
    let target_is_url = f.choice(
        "target",
        &["text", "url"],
        |s| match s {
            "text" => Some(false),
            "url" => Some(true),
            _ => None,
        },
        Some(false),
        problems,
    );
    let url = f.string("url", target_is_url == Some(true), problems);
    let target = match (target_is_url, url) {
        (Some(true), Some(u)) => Some(HashTarget::Url(u.to_owned())),
        (Some(false), Some(_)) => {
            problems.push(Problem::new(
                f.path("url"),
                ProblemCode::UnknownField,
                "url is only used with target \"url\"",
                "Set \"target\": \"url\" to hash a fetched URL, or remove \"url\" to hash deliverable.text.",
            ));
            None
        }
        (Some(false), None) => Some(HashTarget::Text),
        _ => None,
    };
    if problems.len() > before {
        return None;
    }
    Some(Check::ContentHash {
        sha256: sha?,
        target: target?,
    })
}

fn parse_regex(
    obj: &BTreeMap<String, Value>,
    at: &str,
    budget: &mut RegexBudget,
    problems: &mut Vec<Problem>,
) -> Option<Check> {
    let f = Fields::new(
        obj,
        at,
        &["type", "pattern", "flags", "expect"],
        "a regex check",
        problems,
    );
    let before = problems.len();
    let pattern = f.string("pattern", true, problems);
    let flags = f.string("flags", false, problems).unwrap_or("");
    let mut set = BTreeSet::new();
    for c in flags.chars() {
        if !matches!(c, 'i' | 'm' | 's') || !set.insert(c) {
            problems.push(Problem::new(
                f.path("flags"),
                ProblemCode::InvalidValue,
                format!("flags {flags:?}: only i, m and s are allowed, each once"),
                "Use any of i (case-insensitive), m (^/$ at lines), s (. matches newline), e.g. \"im\".",
            ));
            break;
        }
    }
    let flags: String = set.into_iter().collect();
    let expect_match = f.choice(
        "expect",
        &["match", "no_match"],
        |s| match s {
            "match" => Some(true),
            "no_match" => Some(false),
            _ => None,
        },
        Some(true),
        problems,
    );
    if let Some(p) = pattern {
        if p.is_empty() {
            problems.push(Problem::new(
                f.path("pattern"),
                ProblemCode::InvalidValue,
                "the pattern is empty and would match anything",
                "Write the text or pattern the deliverable must (or must not) contain.",
            ));
        } else if let Err(r) = patterns::check_regex(p, &flags, budget) {
            problems.push(Problem::new(f.path("pattern"), r.code, r.message, r.hint));
        }
    }
    if problems.len() > before {
        return None;
    }
    Some(Check::Regex {
        pattern: pattern?.to_owned(),
        flags,
        expect_match: expect_match?,
    })
}

fn parse_length(
    obj: &BTreeMap<String, Value>,
    at: &str,
    problems: &mut Vec<Problem>,
) -> Option<Check> {
    let f = Fields::new(
        obj,
        at,
        &["type", "unit", "min", "max"],
        "a length check",
        problems,
    );
    let before = problems.len();
    let unit = f.choice(
        "unit",
        &["chars", "words"],
        |s| match s {
            "chars" => Some(LengthUnit::Chars),
            "words" => Some(LengthUnit::Words),
            _ => None,
        },
        Some(LengthUnit::Chars),
        problems,
    );
    let min = f.count("min", problems);
    let max = f.count("max", problems);
    if let (Some(min), Some(max)) = (min, max) {
        if min.is_none() && max.is_none() {
            problems.push(Problem::new(
                at,
                ProblemCode::MissingField,
                "a length check needs min, max or both",
                "Add \"min\" and/or \"max\" (non-negative integers).",
            ));
        }
        if let (Some(lo), Some(hi)) = (min, max)
            && lo > hi
        {
            problems.push(Problem::new(
                f.path("min"),
                ProblemCode::InvalidValue,
                format!("min {lo} is greater than max {hi}; nothing could pass"),
                "Make min less than or equal to max.",
            ));
        }
    }
    if problems.len() > before {
        return None;
    }
    Some(Check::Length {
        unit: unit?,
        min: min?.unwrap_or(0),
        max: max?,
    })
}

fn parse_url_probe(
    obj: &BTreeMap<String, Value>,
    at: &str,
    problems: &mut Vec<Problem>,
) -> Option<Check> {
    let f = Fields::new(
        obj,
        at,
        &["type", "url", "expect"],
        "a url_probe check",
        problems,
    );
    let before = problems.len();
    let url = f.string("url", true, problems);
    let empty = BTreeMap::new();
    let expect_obj = match f.get("expect") {
        None => Some(&empty),
        Some(v) => object_at(v, &f.path("expect"), "expect", problems),
    };
    let mut expect = None;
    if let Some(eo) = expect_obj {
        let ef = Fields::new(
            eo,
            &f.path("expect"),
            &["status", "keyword", "selector", "json_path"],
            "expect",
            problems,
        );
        let status = match ef.get("status") {
            None => Some(200u16),
            Some(v) => match v.as_u64().filter(|s| (100..=599).contains(s)) {
                Some(s) => u16::try_from(s).ok(),
                None => {
                    problems.push(Problem::new(
                        ef.path("status"),
                        ProblemCode::InvalidValue,
                        "status must be an HTTP status code (an integer from 100 to 599)",
                        "Use the status the URL should answer with, e.g. 200.",
                    ));
                    None
                }
            },
        };
        let keyword = ef.string("keyword", false, problems).map(str::to_owned);
        if keyword.as_deref() == Some("") {
            problems.push(Problem::new(
                ef.path("keyword"),
                ProblemCode::InvalidValue,
                "an empty keyword matches every response",
                "Give the text the response body must contain.",
            ));
        }
        let selector = match ef.get("selector") {
            None => None,
            Some(v) => parse_selector(v, &ef.path("selector"), problems),
        };
        let json_path = match ef.get("json_path") {
            None => None,
            Some(v) => {
                object_at(v, &ef.path("json_path"), "expect.json_path", problems).and_then(|o| {
                    let pf = Fields::new(
                        o,
                        &ef.path("json_path"),
                        &["path", "op", "value"],
                        "expect.json_path",
                        problems,
                    );
                    parse_path_assertion(&pf, problems)
                })
            }
        };
        expect = status.map(|status| ProbeExpect {
            status,
            keyword,
            selector,
            json_path,
        });
    }
    if problems.len() > before {
        return None;
    }
    Some(Check::UrlProbe {
        url: url?.to_owned(),
        expect: expect?,
    })
}

fn parse_selector(v: &Value, at: &str, problems: &mut Vec<Problem>) -> Option<SelectorAssertion> {
    let o = object_at(v, at, "expect.selector", problems)?;
    let f = Fields::new(
        o,
        at,
        &["selector", "op", "value"],
        "expect.selector",
        problems,
    );
    let before = problems.len();
    let selector = f.string("selector", true, problems);
    if let Some(s) = selector
        && scraper::Selector::parse(s).is_err()
    {
        problems.push(Problem::new(
            f.path("selector"),
            ProblemCode::InvalidValue,
            format!("{s:?} is not a valid CSS selector"),
            "Use a CSS selector such as h1, #price, div.result > span.",
        ));
    }
    let op = f.choice(
        "op",
        SelectorOp::NAMES,
        SelectorOp::parse,
        Some(SelectorOp::Exists),
        problems,
    );
    let value = f.string("value", false, problems).map(str::to_owned);
    if let Some(op) = op {
        let takes = matches!(op, SelectorOp::Eq | SelectorOp::Ne | SelectorOp::Contains);
        if takes && value.is_none() && f.get("value").is_none() {
            problems.push(Problem::new(
                f.path("value"),
                ProblemCode::MissingField,
                format!("op {} needs a value", op.as_str()),
                "Add \"value\": the text to compare the element's text with.",
            ));
        }
        if !takes && f.get("value").is_some() {
            problems.push(Problem::new(
                f.path("value"),
                ProblemCode::UnknownField,
                format!("op {} takes no value", op.as_str()),
                "Remove \"value\", or use op eq/ne/contains.",
            ));
        }
    }
    if problems.len() > before {
        return None;
    }
    Some(SelectorAssertion {
        selector: selector?.to_owned(),
        op: op?,
        value,
    })
}

// ---------------------------------------------------------------------------
// Deliverables

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Deliverable {
    pub text: Option<String>,
    /// `null` is treated as absent: the hash input cannot tell them apart.
    pub json: Option<Value>,
}

impl Deliverable {
    /// `{"json": <json or null>, "text": <text or null>}`, the deliverable_hash input.
    pub fn hash_input(&self) -> Value {
        Value::object()
            .with("json", self.json.clone().unwrap_or(Value::Null))
            .with("text", self.text.clone())
    }

    pub fn hash(&self) -> String {
        crate::hash::sha256_hex(&self.hash_input().to_canonical_vec())
    }
}

pub fn parse_deliverable(v: &Value, at: &str) -> Result<Deliverable, Vec<Problem>> {
    let mut problems = Vec::new();
    let Some(obj) = object_at(v, at, "deliverable", &mut problems) else {
        return Err(problems);
    };
    let f = Fields::new(obj, at, &["text", "json"], "a deliverable", &mut problems);
    let text = match obj.get("text") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => {
            if s.len() > MAX_TEXT_BYTES {
                problems.push(Problem::new(
                    f.path("text"),
                    ProblemCode::TextTooLarge,
                    format!("text is {} bytes of UTF-8; at most {MAX_TEXT_BYTES} (200 KB) are accepted", s.len()),
                    "Send at most 200 KB of text; judge a hash of larger artifacts with content_hash.",
                ));
            }
            Some(s.clone())
        }
        Some(other) => {
            problems.push(wrong_type(&f.path("text"), "a string", other));
            None
        }
    };
    let json = match obj.get("json") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.clone()),
    };
    // An empty deliverable is one: a spec whose checks read neither (a witness's
    // url_probe) needs none; what the checks do read is required by
    // `deliverable_problems`.
    if problems.is_empty() {
        Ok(Deliverable { text, json })
    } else {
        Err(problems)
    }
}

impl Spec {
    /// Whether any check reads the deliverable (its text or its JSON).
    pub fn reads_deliverable(&self) -> bool {
        self.checks.iter().any(|c| c.needs_text() || c.needs_json())
    }
}

/// Checks that cannot possibly pass because the deliverable lacks what they read.
/// Refused before payment: a paid "fail" for a missing field helps nobody.
pub fn deliverable_problems(spec: &Spec, d: &Deliverable) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (i, c) in spec.checks.iter().enumerate() {
        if c.needs_text() && d.text.is_none() {
            problems.push(Problem::new(
                "deliverable.text",
                ProblemCode::DeliverableMissingText,
                format!(
                    "checks[{i}] ({}) reads deliverable.text, which is missing",
                    c.type_name()
                ),
                "Add the text to the deliverable, or remove the check.",
            ));
        }
        if c.needs_json() && d.json.is_none() {
            problems.push(Problem::new(
                "deliverable.json",
                ProblemCode::DeliverableMissingJson,
                format!(
                    "checks[{i}] ({}) reads deliverable.json, which is missing",
                    c.type_name()
                ),
                "Add the JSON to the deliverable, or remove the check.",
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse_str;

    fn spec(s: &str, tier: Option<Tier>) -> Result<Spec, Vec<Problem>> {
        parse_spec(&parse_str(s).expect("test json"), tier)
    }

    fn codes(r: Result<Spec, Vec<Problem>>) -> Vec<(String, &'static str)> {
        r.err()
            .unwrap_or_default()
            .into_iter()
            .map(|p| (p.at, p.code.as_str()))
            .collect()
    }

    #[test]
    fn normalizes_with_defaults_written_out() {
        let s = spec(
            r###"{"checks":[
                {"type":"regex","pattern":"## Conclusion"},
                {"type":"length","max":10},
                {"type":"content_hash","sha256":"ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789"},
                {"type":"json_path","path":"a.b","op":"exists"},
                {"type":"json_schema","schema":{"type":"object"}},
                {"type":"url_probe","url":"https://example.com/"}
            ]}"###,
            None,
        )
        .expect("valid");
        assert_eq!(
            s.normalized.to_canonical_string(),
            concat!(
                r###"{"checks":[{"expect":"match","flags":"","pattern":"## Conclusion","type":"regex"},"###,
                r###"{"max":10,"min":0,"type":"length","unit":"chars"},"###,
                r###"{"sha256":"abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789","target":"text","type":"content_hash"},"###,
                r###"{"op":"exists","path":"a.b","type":"json_path"},"###,
                r###"{"schema":{"type":"object"},"type":"json_schema"},"###,
                r###"{"expect":{"status":200},"type":"url_probe","url":"https://example.com/"}]}"###
            )
        );
        assert_eq!(s.hash.len(), 64);
        // Normalizing the normalized form changes nothing.
        let again = parse_spec(&s.normalized, None).expect("still valid");
        assert_eq!(again.normalized, s.normalized);
        assert_eq!(again.hash, s.hash);
    }

    #[test]
    fn reports_every_problem_with_its_place() {
        let got = codes(spec(
            r#"{"checks":[
                {"type":"regex","pattern":"(a+)+$","flags":"x"},
                {"type":"lenght"},
                {"type":"length","min":5,"max":2,"colour":"red"},
                {"type":"json_path","path":"a[","op":"eq"}
            ],"extra":1}"#,
            None,
        ));
        assert_eq!(
            got,
            vec![
                ("extra".to_owned(), "unknown_field"),
                ("checks[0].flags".to_owned(), "invalid_value"),
                ("checks[0].pattern".to_owned(), "catastrophic_backtracking"),
                ("checks[1].type".to_owned(), "unknown_check_type"),
                ("checks[2].colour".to_owned(), "unknown_field"),
                ("checks[2].min".to_owned(), "invalid_value"),
                ("checks[3].path".to_owned(), "invalid_json_path"),
                ("checks[3].value".to_owned(), "missing_field"),
            ]
        );
    }

    #[test]
    fn tier_rules() {
        let probe = r#"{"type":"url_probe","url":"https://example.com/"}"#;
        let text = r#"{"type":"length","min":1}"#;
        let one = format!(r#"{{"checks":[{probe}]}}"#);
        assert!(spec(&one, Some(Tier::Witness)).is_ok());
        assert!(spec(&one, Some(Tier::Probe)).is_ok());
        assert_eq!(
            codes(spec(&one, Some(Tier::Basic))),
            vec![("checks[0]".to_owned(), "check_not_allowed")]
        );
        let two = format!(r#"{{"checks":[{probe},{text}]}}"#);
        assert_eq!(
            codes(spec(&two, Some(Tier::Witness))),
            vec![("checks".to_owned(), "check_not_allowed")]
        );
        let four = format!(r#"{{"checks":[{probe},{probe},{probe},{probe}]}}"#);
        assert_eq!(
            codes(spec(&four, Some(Tier::Sworn))),
            vec![("checks".to_owned(), "too_many_network_checks")]
        );
        let eleven = format!(r#"{{"checks":[{}]}}"#, [text; 11].join(","));
        assert_eq!(
            codes(spec(&eleven, Some(Tier::Basic))),
            vec![("checks".to_owned(), "too_many_checks")]
        );
        assert_eq!(
            codes(spec(r#"{"checks":[]}"#, Some(Tier::Basic))),
            vec![("checks".to_owned(), "too_few_checks")]
        );
    }

    #[test]
    fn spec_wide_size_limits_come_before_parsing() {
        // Ten thousand checks, every one broken: one problem, the count, nothing parsed.
        let broken = r#"{"type":"regex","pattern":"("}"#;
        let many = format!(r#"{{"checks":[{}]}}"#, vec![broken; 10_000].join(","));
        assert_eq!(
            codes(spec(&many, None)),
            vec![("checks".to_owned(), "too_many_checks")]
        );
        // Patterns at the per-pattern cap, more of them than the spec-wide cap allows,
        // some inside schemas: refused as a whole, before any is guarded (these would
        // each be catastrophic_backtracking).
        let at_cap = format!("({}a+a+)+", "b".repeat(MAX_PATTERN_CHARS - 7));
        assert_eq!(at_cap.chars().count(), MAX_PATTERN_CHARS);
        let regex = format!(r#"{{"type":"regex","pattern":"{at_cap}"}}"#);
        let schema = format!(
            r#"{{"type":"json_schema","schema":{{"properties":{{"default":{{"pattern":"{at_cap}"}}}},"patternProperties":{{"{at_cap}":{{}}}}}}}}"#
        );
        let total = format!(
            r#"{{"checks":[{regex},{regex},{regex},{regex},{schema},{schema},{schema},{schema}]}}"#
        );
        let (checks, problems) =
            parse_spec_partial(&crate::json::parse_str(&total).expect("json"), None);
        assert!(checks.is_empty());
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].code, "spec_too_large");
        assert!(
            problems[0].message.contains("12000 characters"),
            "{}",
            problems[0].message
        );
        // Exactly at the cap (ten patterns of 1000 characters) the patterns are guarded.
        let ten = format!(r#"{{"checks":[{}]}}"#, [regex.as_str(); 10].join(","));
        let got = codes(spec(&ten, None));
        assert_eq!(got.len(), 10);
        assert!(
            got.iter().all(|(_, c)| *c == "catastrophic_backtracking"),
            "{got:?}"
        );
        // More patterns than allowed, however short.
        let props: Vec<String> = (0..=MAX_SPEC_PATTERNS)
            .map(|i| format!(r#""p{i}":{{"pattern":"^a"}}"#))
            .collect();
        let count = format!(
            r#"{{"checks":[{{"type":"json_schema","schema":{{"properties":{{{}}}}}}}]}}"#,
            props.join(",")
        );
        assert_eq!(
            codes(spec(&count, None)),
            vec![("checks".to_owned(), "spec_too_large")]
        );
        // Schema values are counted across the spec, enum data included.
        let half: Vec<String> = (0..MAX_SCHEMA_VALUES / 2).map(|i| i.to_string()).collect();
        let enum_check = format!(
            r#"{{"type":"json_schema","schema":{{"enum":[{}]}}}}"#,
            half.join(",")
        );
        let one = format!(r#"{{"checks":[{enum_check}]}}"#);
        assert_eq!(codes(spec(&one, None)), vec![]);
        let two = format!(r#"{{"checks":[{enum_check},{enum_check}]}}"#);
        assert_eq!(
            codes(spec(&two, None)),
            vec![("checks".to_owned(), "spec_too_large")]
        );
    }

    #[test]
    fn schemas_that_would_cost_more_than_they_say_are_refused() {
        // A $ref into data would make the data a schema nobody checked.
        let into_data = r##"{"checks":[{"type":"json_schema","schema":{"$ref":"#/default","default":{"pattern":"(a+)+$"}}}]}"##;
        assert_eq!(
            codes(spec(into_data, None)),
            vec![("checks[0].schema.$ref".to_owned(), "invalid_schema")]
        );
        let into_a_property = r##"{"checks":[{"type":"json_schema","schema":{"$ref":"#/properties/default","properties":{"default":{"type":"string"}}}}]}"##;
        assert_eq!(codes(spec(into_a_property, None)), vec![]);
        // A long property name over many values: its length in every path below it.
        let children: Vec<String> = (0..100).map(|i| format!(r#""c{i}":{{}}"#)).collect();
        let long_name = format!(
            r#"{{"checks":[{{"type":"json_schema","schema":{{"properties":{{"{}":{{"properties":{{{}}}}}}}}}}}]}}"#,
            "n".repeat(50_000),
            children.join(",")
        );
        assert_eq!(
            codes(spec(&long_name, None)),
            vec![("checks".to_owned(), "spec_too_large")]
        );
    }

    #[test]
    fn schemas_are_guarded_and_never_fetch() {
        let got = codes(spec(
            r#"{"checks":[{"type":"json_schema","schema":{"properties":{"a":{"type":"string","pattern":"(x+)+y"}},"patternProperties":{"(a|aa)+":{}}}}]}"#,
            None,
        ));
        assert_eq!(
            got,
            vec![
                (
                    "checks[0].schema.patternProperties[\"(a|aa)+\"]".to_owned(),
                    "catastrophic_backtracking"
                ),
                (
                    "checks[0].schema.properties.a.pattern".to_owned(),
                    "catastrophic_backtracking"
                ),
            ]
        );
        // Schema patterns have the regex checks' length cap, checked before the guard.
        let long = "a".repeat(MAX_PATTERN_CHARS + 1);
        assert_eq!(
            codes(spec(
                &format!(
                    r#"{{"checks":[{{"type":"json_schema","schema":{{"properties":{{"a":{{"pattern":"{long}"}}}},"patternProperties":{{"{long}":{{}}}}}}}}]}}"#
                ),
                None,
            )),
            vec![
                (
                    // A long key is shortened where it names the place.
                    format!("checks[0].schema.patternProperties[\"{}…\"]", &long[..64]),
                    "invalid_value"
                ),
                (
                    "checks[0].schema.properties.a.pattern".to_owned(),
                    "invalid_value"
                ),
            ]
        );
        let at_cap = "a".repeat(MAX_PATTERN_CHARS);
        assert!(
            spec(
                &format!(
                    r#"{{"checks":[{{"type":"json_schema","schema":{{"pattern":"{at_cap}"}}}}]}}"#
                ),
                None
            )
            .is_ok()
        );
        // Properties named like data keywords are schemas all the same.
        for name in ["default", "const", "enum", "examples"] {
            let named = codes(spec(
                &format!(
                    r#"{{"checks":[{{"type":"json_schema","schema":{{"properties":{{"{name}":{{"type":"string","pattern":"^(\\w+\\s?)*$"}}}},"$defs":{{"{name}":{{"pattern":"(x+)+y"}}}}}}}}]}}"#
                ),
                None,
            ));
            assert_eq!(
                named,
                vec![
                    (
                        format!("checks[0].schema.$defs.{name}.pattern"),
                        "catastrophic_backtracking"
                    ),
                    (
                        format!("checks[0].schema.properties.{name}.pattern"),
                        "catastrophic_backtracking"
                    ),
                ],
                "{name}"
            );
        }
        let remote = codes(spec(
            r#"{"checks":[{"type":"json_schema","schema":{"$ref":"http://127.0.0.1:9/x.json"}}]}"#,
            None,
        ));
        assert_eq!(
            remote,
            vec![("checks[0].schema".to_owned(), "invalid_schema")]
        );
        let file = codes(spec(
            r#"{"checks":[{"type":"json_schema","schema":{"$ref":"file:///etc/passwd"}}]}"#,
            None,
        ));
        assert_eq!(
            file,
            vec![("checks[0].schema".to_owned(), "invalid_schema")]
        );
    }

    #[test]
    fn what_a_check_reads_is_the_same_on_its_normalized_json() {
        let all = spec(
            r#"{"checks":[{"type":"json_schema","schema":{}},{"type":"json_path","path":"a","op":"exists"},{"type":"content_hash","sha256":"00000000000000000000000000000000000000000000000000000000000000aa"},{"type":"content_hash","target":"url","url":"https://example.com/","sha256":"00000000000000000000000000000000000000000000000000000000000000aa"},{"type":"regex","pattern":"a"},{"type":"length","min":1},{"type":"url_probe","url":"https://example.com/"}]}"#,
            None,
        )
        .expect("spec");
        assert_eq!(all.checks.len(), CHECK_TYPES.len() + 1);
        for c in &all.checks {
            assert_eq!(
                Check::reads_of_normalized(&c.to_value()),
                (c.needs_text(), c.needs_json()),
                "{}",
                c.type_name()
            );
        }
    }

    #[test]
    fn deliverable_rules() {
        let d = |s: &str| parse_deliverable(&parse_str(s).expect("json"), "deliverable");
        assert!(d(r#"{"text":"hi"}"#).is_ok());
        assert!(d(r#"{"json":{"a":1}}"#).is_ok());
        // Empty: a deliverable of nothing, for specs that read none (witness, probe).
        assert_eq!(
            d(r#"{}"#).map(|d| d.hash_input().to_canonical_string()),
            Ok(r#"{"json":null,"text":null}"#.to_owned())
        );
        assert!(d(r#"{"text":"x","note":"y"}"#).is_err());
        let big = format!(r#"{{"text":"{}"}}"#, "a".repeat(MAX_TEXT_BYTES + 1));
        assert_eq!(
            d(&big).err().map(|p| p[0].code.as_str()),
            Some("text_too_large")
        );
        let ok = Deliverable {
            text: Some("hi".into()),
            json: None,
        };
        assert_eq!(
            ok.hash_input().to_canonical_string(),
            r#"{"json":null,"text":"hi"}"#
        );
    }
}
