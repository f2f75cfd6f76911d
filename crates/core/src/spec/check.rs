//! The typed checks a spec is parsed into, and their normalized JSON.

use super::{HashTarget, LengthUnit, PathAssertion, ProbeExpect};
use crate::json::Value;

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

/// The check types of the contract, in its order; [`Check::check_type`] names a check's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckType {
    JsonSchema,
    JsonPath,
    ContentHash,
    Regex,
    Length,
    UrlProbe,
}

/// Every check type's name, in the contract's order (read off [`CheckType::ALL`]).
pub const CHECK_TYPES: [&str; CheckType::ALL.len()] = {
    let mut names = [""; CheckType::ALL.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = CheckType::ALL[i].as_str();
        i += 1;
    }
    names
};

impl CheckType {
    pub const ALL: [CheckType; 6] = [
        CheckType::JsonSchema,
        CheckType::JsonPath,
        CheckType::ContentHash,
        CheckType::Regex,
        CheckType::Length,
        CheckType::UrlProbe,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            CheckType::JsonSchema => "json_schema",
            CheckType::JsonPath => "json_path",
            CheckType::ContentHash => "content_hash",
            CheckType::Regex => "regex",
            CheckType::Length => "length",
            CheckType::UrlProbe => "url_probe",
        }
    }

    /// The fields a check of this type may have, `type` included.
    pub(super) fn fields(self) -> &'static [&'static str] {
        match self {
            CheckType::JsonSchema => &["type", "schema"],
            CheckType::JsonPath => &["type", "path", "op", "value"],
            CheckType::ContentHash => &["type", "sha256", "target", "url"],
            CheckType::Regex => &["type", "pattern", "flags", "expect"],
            CheckType::Length => &["type", "unit", "min", "max"],
            CheckType::UrlProbe => &["type", "url", "expect"],
        }
    }

    pub fn parse(s: &str) -> Option<CheckType> {
        CheckType::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

impl Check {
    pub fn check_type(&self) -> CheckType {
        match self {
            Check::JsonSchema { .. } => CheckType::JsonSchema,
            Check::JsonPath(_) => CheckType::JsonPath,
            Check::ContentHash { .. } => CheckType::ContentHash,
            Check::Regex { .. } => CheckType::Regex,
            Check::Length { .. } => CheckType::Length,
            Check::UrlProbe { .. } => CheckType::UrlProbe,
        }
    }

    pub fn type_name(&self) -> &'static str {
        self.check_type().as_str()
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
        let ty = check
            .get("type")
            .and_then(Value::as_str)
            .and_then(CheckType::parse);
        let text = match ty {
            Some(CheckType::Regex | CheckType::Length) => true,
            Some(CheckType::ContentHash) => {
                check.get("target").and_then(Value::as_str) == Some("text")
            }
            _ => false,
        };
        (
            text,
            matches!(ty, Some(CheckType::JsonSchema | CheckType::JsonPath)),
        )
    }

    /// The normalized form: every field spelled out with its default.
    pub fn to_value(&self) -> Value {
        let base = Value::object().with("type", self.type_name());
        match self {
            Check::JsonSchema { schema } => base.with("schema", schema.clone()),
            Check::JsonPath(a) => super::json_path::assertion_value(a, base),
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
                    e.insert(
                        "json_path",
                        super::json_path::assertion_value(a, Value::object()),
                    );
                }
                base.with("url", url.as_str()).with("expect", e)
            }
        }
    }
}
