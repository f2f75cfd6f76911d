//! Problems: what a refused spec, deliverable or body is told, one per mistake, each
//! with where it is, a code from the one table below, a message and a hint.

use crate::errors::ErrorCode;
use crate::json::Value;

macro_rules! problem_codes {
    ($($(#[$doc:meta])* $variant:ident => $code:literal),+ $(,)?) => {
        /// Every code a problem is reported with. Its Debug form is the code's string,
        /// as it was when codes were strings (messages quote problems that way).
        #[derive(Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ProblemCode { $($(#[$doc])* $variant),+ }

        impl ProblemCode {
            pub const ALL: &'static [ProblemCode] = &[$(ProblemCode::$variant),+];

            pub const fn as_str(self) -> &'static str {
                match self { $(ProblemCode::$variant => $code),+ }
            }
        }
    };
}

problem_codes! {
    /// A field the object needs is absent.
    MissingField => "missing_field",
    /// A field the object does not have.
    UnknownField => "unknown_field",
    /// A field of the wrong JSON type.
    WrongType => "wrong_type",
    /// A value outside what the field accepts.
    InvalidValue => "invalid_value",
    /// A check type the contract does not have.
    UnknownCheckType => "unknown_check_type",
    /// A check type the tier does not sell.
    CheckNotAllowed => "check_not_allowed",
    TooFewChecks => "too_few_checks",
    TooManyChecks => "too_many_checks",
    TooManyNetworkChecks => "too_many_network_checks",
    /// Over a spec-wide size limit.
    SpecTooLarge => "spec_too_large",
    TextTooLarge => "text_too_large",
    InvalidSchema => "invalid_schema",
    InvalidJsonPath => "invalid_json_path",
    InvalidRegex => "invalid_regex",
    /// A pattern whose compiled automaton is over the allowance.
    RegexTooLarge => "regex_too_large",
    /// A pattern the guard proves can backtrack catastrophically.
    CatastrophicBacktracking => "catastrophic_backtracking",
    UnsupportedRegexFeature => "unsupported_regex_feature",
    /// A check reads deliverable.text, and there is none.
    DeliverableMissingText => "deliverable_missing_text",
    /// A check reads deliverable.json, and there is none.
    DeliverableMissingJson => "deliverable_missing_json",
    /// A URL that does not parse.
    InvalidUrl => "invalid_url",
    // A URL the fetch policy refuses: the contract's error codes, reported per problem.
    BlockedHost => "blocked_host",
    BlockedPort => "blocked_port",
    InvalidScheme => "invalid_scheme",
    CredentialsInUrl => "credentials_in_url",
    DnsFailure => "dns_failure",
}

impl ProblemCode {
    /// The URL-policy problem for a policy error code (invalid_url for any other).
    pub fn of_url_error(code: ErrorCode) -> ProblemCode {
        match code {
            ErrorCode::BlockedHost => ProblemCode::BlockedHost,
            ErrorCode::BlockedPort => ProblemCode::BlockedPort,
            ErrorCode::InvalidScheme => ProblemCode::InvalidScheme,
            ErrorCode::CredentialsInUrl => ProblemCode::CredentialsInUrl,
            ErrorCode::DnsFailure => ProblemCode::DnsFailure,
            _ => ProblemCode::InvalidUrl,
        }
    }

    /// The error code a URL-policy problem stands for, so a request refused only for
    /// it can answer with that error (None for every other problem).
    pub fn url_error(self) -> Option<ErrorCode> {
        match self {
            ProblemCode::BlockedHost => Some(ErrorCode::BlockedHost),
            ProblemCode::BlockedPort => Some(ErrorCode::BlockedPort),
            ProblemCode::InvalidScheme => Some(ErrorCode::InvalidScheme),
            ProblemCode::CredentialsInUrl => Some(ErrorCode::CredentialsInUrl),
            ProblemCode::DnsFailure => Some(ErrorCode::DnsFailure),
            _ => None,
        }
    }
}

impl std::fmt::Debug for ProblemCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl std::fmt::Display for ProblemCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for ProblemCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl From<ProblemCode> for Value {
    fn from(code: ProblemCode) -> Value {
        Value::from(code.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where the mistake is, e.g. `checks[2].pattern`.
    pub at: String,
    pub code: ProblemCode,
    pub message: String,
    pub hint: String,
}

impl Problem {
    pub fn new(
        at: impl Into<String>,
        code: ProblemCode,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> Problem {
        Problem {
            at: at.into(),
            code,
            message: message.into(),
            hint: hint.into(),
        }
    }

    pub fn to_value(&self) -> Value {
        Value::object()
            .with("where", self.at.as_str())
            .with("code", self.code)
            .with("message", self.message.as_str())
            .with("hint", self.hint.as_str())
    }
}

pub fn problems_value(problems: &[Problem]) -> Value {
    Value::Array(problems.iter().map(Problem::to_value).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_print_as_their_strings() {
        let strings: std::collections::HashSet<&str> =
            ProblemCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(strings.len(), ProblemCode::ALL.len(), "codes are unique");
        assert_eq!(
            format!("{:?}", ProblemCode::UnknownCheckType),
            "\"unknown_check_type\""
        );
        for code in ProblemCode::ALL {
            if let Some(error) = code.url_error() {
                assert_eq!(error.as_str(), code.as_str());
                assert_eq!(ProblemCode::of_url_error(error), *code);
            }
        }
    }
}
