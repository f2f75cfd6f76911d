//! The content_hash check: the SHA-256 of the deliverable's text or of a fetched URL.

use super::{Check, Fields, Problem, ProblemCode};

#[derive(Debug, Clone, PartialEq)]
pub enum HashTarget {
    Text,
    Url(String),
}

pub(super) fn parse(f: &Fields<'_>, problems: &mut Vec<Problem>) -> Option<Check> {
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
