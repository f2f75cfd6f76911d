//! The body of a verdict purchase, judged before any payment is asked for. Both
//! `/v1/validate` and the paid endpoints use [`assess`], so validate never says yes
//! to something the paid path would refuse.

use std::collections::BTreeMap;

use umpire_core::json::{Number, Value};
use umpire_core::problem::ProblemCode;
use umpire_core::product::Tier;
use umpire_core::spec::{
    Deliverable, Problem, Spec, deliverable_problems, network_urls_of, parse_deliverable,
    parse_spec_partial,
};
use umpire_core::{ApiError, ErrorCode};
use umpire_fetch::{Fetcher, Policy, PolicyError};
use umpire_host::Deadline;

/// job_ref: a string of at most this many characters, or a uint256.
pub const MAX_JOB_REF_CHARS: usize = 256;
const MAX_UINT256_DIGITS: usize = 78;

/// The URL-policy verdict for one URL of the spec (or the webhook).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlVerdict {
    pub at: String,
    pub url: String,
    /// `allowed`, or the policy's code (blocked_host, blocked_port, ...).
    pub policy: &'static str,
    pub message: Option<String>,
}

impl UrlVerdict {
    pub fn to_value(&self) -> Value {
        Value::object()
            .with("where", self.at.as_str())
            .with("url", self.url.as_str())
            .with("policy", self.policy)
            .with("message", self.message.clone())
    }
}

/// Everything learned from a purchase body without fetching or paying.
#[derive(Debug, Default)]
pub struct Assessment {
    pub problems: Vec<Problem>,
    pub spec: Option<Spec>,
    pub deliverable: Option<Deliverable>,
    pub urls: Vec<UrlVerdict>,
    pub webhook_url: Option<String>,
    pub job_ref: Option<Value>,
}

/// A purchase that passed every rule.
#[derive(Debug, Clone)]
pub struct Purchase {
    pub tier: Tier,
    pub spec: Spec,
    pub deliverable: Deliverable,
    pub webhook_url: Option<String>,
    pub job_ref: Option<Value>,
}

/// Which envelope is being read: validate names the tier in the body and may leave the
/// deliverable out; a purchase names the tier in its path and must carry a deliverable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Envelope {
    Validate,
    Purchase,
}

/// Everything wrong with a purchase body (validate's or a paid route's), field by field,
/// without fetching or paying.
pub fn assess(
    tier: Tier,
    body: &BTreeMap<String, Value>,
    envelope: Envelope,
    policy: &Policy,
) -> Assessment {
    let mut a = Assessment::default();
    let known: &[&str] = match envelope {
        Envelope::Validate => &["tier", "spec", "deliverable", "webhook_url", "job_ref"],
        Envelope::Purchase => &["spec", "deliverable", "webhook_url", "job_ref"],
    };
    for k in body.keys() {
        if !known.contains(&k.as_str()) {
            a.problems.push(Problem::new(
                k.as_str(),
                ProblemCode::UnknownField,
                format!("the request has no field {k:?}"),
                format!("Remove {k:?}; the body takes: {}.", known.join(", ")),
            ));
        }
    }
    a.spec_from(tier, body.get("spec"), policy);
    a.deliverable_from(body.get("deliverable"), envelope);
    a.webhook_from(tier, body.get("webhook_url"), policy);
    a.job_ref_from(body.get("job_ref"));
    a
}

impl Assessment {
    fn spec_from(&mut self, tier: Tier, spec: Option<&Value>, policy: &Policy) {
        let Some(v) = spec else {
            self.problems.push(Problem::new(
                "spec",
                ProblemCode::MissingField,
                "spec is required",
                "Send \"spec\": {\"checks\":[...]} with 1 to 10 checks.",
            ));
            return;
        };
        // Parsed once (regexes and schemas compile here): URL verdicts for every check
        // that parsed, even when others did not.
        let (parsed, spec_problems) = parse_spec_partial(v, Some(tier));
        let mut url_problems = Vec::new();
        for (at, url) in network_urls_of(parsed.iter().map(|(i, c)| (*i, c))) {
            self.urls
                .push(url_verdict(policy, at, url, &mut url_problems));
        }
        if spec_problems.is_empty() {
            let spec = Spec::from_checks(parsed.into_iter().map(|(_, c)| c).collect());
            match spec.size_problem() {
                Some(p) => self.problems.push(p),
                None => self.spec = Some(spec),
            }
        }
        self.problems.extend(spec_problems);
        self.problems.extend(url_problems);
    }

    fn deliverable_from(&mut self, deliverable: Option<&Value>, envelope: Envelope) {
        match deliverable {
            // A spec none of whose checks reads the deliverable (a witness's url_probe)
            // needs none: judged against the empty deliverable.
            None if envelope == Envelope::Purchase
                && self.spec.as_ref().is_some_and(|s| !s.reads_deliverable()) =>
            {
                self.deliverable = Some(Deliverable {
                    text: None,
                    json: None,
                });
            }
            None if envelope == Envelope::Purchase => self.problems.push(Problem::new(
                "deliverable",
                ProblemCode::MissingField,
                "deliverable is required: the spec's checks read it",
                "Send \"deliverable\": {\"text\": \"...\"} and/or {\"json\": {...}}, as the checks read.",
            )),
            None => {}
            Some(v) => match parse_deliverable(v, "deliverable") {
                Ok(d) => {
                    if let Some(spec) = &self.spec {
                        self.problems.extend(deliverable_problems(spec, &d));
                    }
                    self.deliverable = Some(d);
                }
                Err(p) => self.problems.extend(p),
            },
        }
    }

    fn webhook_from(&mut self, tier: Tier, webhook: Option<&Value>, policy: &Policy) {
        match webhook {
            None | Some(Value::Null) => {}
            Some(Value::String(u)) if tier == Tier::Sworn => {
                let v = url_verdict(policy, "webhook_url".into(), u.clone(), &mut self.problems);
                self.urls.push(v);
                self.webhook_url = Some(u.clone());
            }
            Some(Value::String(_)) => self.problems.push(Problem::new(
                "webhook_url",
                ProblemCode::UnknownField,
                format!(
                    "webhook_url is only used by the sworn tier, not {}",
                    tier.as_str()
                ),
                "Remove webhook_url; witness, basic and probe verdicts are returned in the response.",
            )),
            Some(other) => self.problems.push(Problem::new(
                "webhook_url",
                ProblemCode::WrongType,
                format!("webhook_url must be a string, not {}", other.type_name()),
                "Send the webhook as an https URL string.",
            )),
        }
    }

    fn job_ref_from(&mut self, job_ref: Option<&Value>) {
        match job_ref {
            None | Some(Value::Null) => {}
            Some(v @ Value::String(s))
                if !s.is_empty() && s.chars().count() <= MAX_JOB_REF_CHARS =>
            {
                self.job_ref = Some(v.clone());
            }
            Some(v @ Value::Number(Number::Int(t)))
                if !t.starts_with('-') && t.len() <= MAX_UINT256_DIGITS =>
            {
                self.job_ref = Some(v.clone());
            }
            Some(_) => self.problems.push(Problem::new(
                "job_ref",
                ProblemCode::InvalidValue,
                format!("job_ref must be a non-empty string of at most {MAX_JOB_REF_CHARS} characters or a non-negative integer (uint256)"),
                "Put your ERC-8183 job id (or any reference of yours) in job_ref; it is echoed in the signed document.",
            )),
        }
    }
}

fn url_verdict(
    policy: &Policy,
    at: String,
    url: String,
    problems: &mut Vec<Problem>,
) -> UrlVerdict {
    match policy.check_url(&url) {
        Ok(_) => UrlVerdict {
            at,
            url,
            policy: "allowed",
            message: None,
        },
        Err(e) => {
            problems.push(Problem::new(
                at.as_str(),
                e.problem_code,
                e.message.as_str(),
                e.hint,
            ));
            UrlVerdict {
                at,
                url,
                policy: e.problem_code.as_str(),
                message: Some(e.message),
            }
        }
    }
}

impl Assessment {
    /// The validation-time lookup: every URL the static policy allowed must resolve,
    /// and only to addresses the policy allows (dns_failure / blocked_host otherwise).
    /// Nothing is fetched; the fetcher checks again, at connect time, what it dials.
    /// The lookups run at once and end by `until` (the request's own budget, unpaid
    /// work included): a name that has not resolved by then is a `dns_failure`.
    pub async fn resolve_urls(&mut self, fetcher: &Fetcher, until: Deadline) {
        let allowed: Vec<usize> = (0..self.urls.len())
            .filter(|i| self.urls[*i].policy == "allowed")
            .collect();
        let checks = allowed.iter().map(|i| {
            let url = self.urls[*i].url.clone();
            async move {
                tokio::time::timeout_at(until.instant().into(), fetcher.precheck(&url))
                    .await
                    .unwrap_or_else(|_| Err(PolicyError::dns_timeout(&url)))
            }
        });
        let results = futures::future::join_all(checks).await;
        for (i, result) in allowed.into_iter().zip(results) {
            if let Err(e) = result {
                let v = &mut self.urls[i];
                self.problems.push(Problem::new(
                    v.at.as_str(),
                    e.problem_code,
                    e.message.as_str(),
                    e.hint,
                ));
                v.policy = e.problem_code.as_str();
                v.message = Some(e.message);
            }
        }
    }

    /// The purchase, or the refusal a paid endpoint answers with (before payment).
    pub fn into_purchase(self, tier: Tier) -> Result<Purchase, ApiError> {
        if !self.problems.is_empty() {
            return Err(refusal(&self.problems));
        }
        match (self.spec, self.deliverable) {
            (Some(spec), Some(deliverable)) => Ok(Purchase {
                tier,
                spec,
                deliverable,
                webhook_url: self.webhook_url,
                job_ref: self.job_ref,
            }),
            _ => Err(ApiError::new(
                ErrorCode::InvalidRequest,
                "spec and deliverable are required",
                "Send {\"spec\":{...},\"deliverable\":{...}}.",
            )),
        }
    }
}

/// The error a list of problems amounts to: URL-policy codes when those are the only
/// problems (so a client can react to blocked_host directly), invalid_webhook when
/// the webhook is at fault, invalid_spec otherwise. Every problem rides along.
pub fn refusal(problems: &[Problem]) -> ApiError {
    let policy = |p: &Problem| p.code.url_error();
    let code = if problems.iter().all(|p| p.at == "webhook_url") {
        ErrorCode::InvalidWebhook
    } else if let Some(c) = problems
        .iter()
        .map(policy)
        .collect::<Option<Vec<_>>>()
        .and_then(|v| v.first().copied())
    {
        c
    } else {
        ErrorCode::InvalidSpec
    };
    let first = problems.first();
    ApiError::new(
        code,
        match problems.len() {
            1 => format!(
                "{}: {}",
                first.map_or("", |p| p.at.as_str()),
                first.map_or("", |p| p.message.as_str())
            ),
            n => format!("the request has {n} problems; nothing was charged"),
        },
        first.map_or_else(String::new, |p| p.hint.clone()),
    )
    .with_detail("problems", umpire_core::spec::problems_value(problems))
}
