//! The six check types of the contract, by name: what a spec's `type` may say, and what
//! each tier allows.

/// The check types of the contract, in its order; `Check::check_type` names a check's.
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
    pub fn fields(self) -> &'static [&'static str] {
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
