//! The typed checks a spec is parsed into, and their normalized JSON.

use super::{HashTarget, LengthUnit, PathAssertion, ProbeExpect};
use crate::check_type::CheckType;
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
