//! The worker's jobs, typed. They travel as the queue's envelope, `{kind, payload}` with
//! the payload's JSON text: the format jobs have always had, so a job queued (or
//! dead-lettered) by an earlier release still runs after a deploy. Each is parsed once,
//! here; fields an older job may lack are `Option`s, and the step that needs one says
//! so when it is missing (a job for a verdict that is gone never needs them).

use std::time::Duration;
use umpire_core::json::{Value, parse};

use umpire_store::{Job, MAX_DELAY};

/// A webhook's first delivery and its retries.
pub const WEBHOOK_MAX_ATTEMPTS: u32 = 1 + umpire_core::product::WEBHOOK_MAX_RETRIES;

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// Worth retrying (the job stays queued and comes back).
    #[error("{0}")]
    Retry(String),
}

/// The delay before retry `n` (1-based): base × 2^(n-1), capped at SQS's 900 s.
pub fn backoff(base: Duration, n: u32) -> Duration {
    base.saturating_mul(1u32 << n.saturating_sub(1).min(20))
        .min(MAX_DELAY)
}

pub const JOB_PASS2: &str = "sworn.pass2";
pub const JOB_WEBHOOK: &str = "sworn.webhook";
pub const JOB_VALIDATION: &str = "erc8004.respond";

#[derive(Debug, Clone, PartialEq)]
pub enum SwornJob {
    /// Pass 2 of a sworn verdict, about a minute after pass 1.
    Pass2(Box<Pass2Job>),
    /// One attempt at delivering a final document to its webhook.
    Webhook(WebhookJob),
    /// One attempt at posting a verdict's answer to an ERC-8004 validation request.
    Validation(ValidationJob),
}

/// How a pass-2 job carries the deliverable.
#[derive(Debug, Clone, PartialEq)]
pub enum JobDeliverable {
    /// Sealed under the verdict's data key (`umpire_core::seal`), base64.
    Sealed(String),
    /// In the clear: jobs queued before sealing existed.
    Clear(Value),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Pass2Job {
    pub verdict_id: String,
    /// The normalized spec of pass 1.
    pub spec: Option<Value>,
    pub deliverable: Option<JobDeliverable>,
    /// Written for an operator reading the queue (the deliverable itself is sealed);
    /// pass 2 hashes the opened deliverable again.
    pub deliverable_hash: Option<String>,
    pub job_ref: Option<Value>,
    pub webhook_url: Option<String>,
    /// Pass 1's check results, as the 202 showed them.
    pub pass1: Vec<Value>,
    pub created_at: Option<u64>,
    /// The purchase's ledger key: only a paid verdict is finished.
    pub payment_key: Option<String>,
    /// When the purchase's hold lapses: pass 2 waits for an unresolved purchase no
    /// longer than this.
    pub wait_until: Option<u64>,
    /// How many times this job has waited for its purchase.
    pub hops: u64,
    /// The purchase passed its ERC-8004 checks: its final document answers the request
    /// its job_ref names (absent, in a job queued before answering existed: false).
    pub answers_request: bool,
}

/// The answer to post for one verdict (see `crate::products::verdict::erc8004`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationJob {
    pub verdict_id: String,
    /// The purchase's `job_ref`: `erc8004:eip155:<chain>:<registry>:<requestHash>`.
    pub reference: String,
    /// 100 (pass) or 0 (fail).
    pub response: u8,
    pub response_uri: String,
    /// The document's `payload_sha256` (64 hex); None for a provisional answer.
    pub response_hash: Option<String>,
    pub tag: String,
    /// 1-based.
    pub attempt: u32,
    /// Attempts in a row whose transaction was mined and reverted (each paid for in
    /// gas): after [`super::erc8004::MAX_MINED_REVERTS`] the answer is given up.
    pub mined_reverts: u32,
    /// The purchase's ledger key, for an answer queued before its settlement: only a
    /// verdict that was sold is answered.
    pub payment_key: Option<String>,
    /// When that purchase stops being waited for.
    pub wait_until: Option<u64>,
}

impl ValidationJob {
    fn from_value(p: &Value) -> Result<ValidationJob, String> {
        Ok(ValidationJob {
            verdict_id: required_text(p, "verdict_id")?,
            reference: required_text(p, "reference")?,
            response: p
                .get("response")
                .and_then(Value::as_u64)
                .and_then(|r| u8::try_from(r).ok())
                .filter(|r| *r <= 100)
                .ok_or("validation job has no response in 0..=100")?,
            response_uri: required_text(p, "response_uri")?,
            response_hash: text(p, "response_hash"),
            tag: required_text(p, "tag")?,
            attempt: p
                .get("attempt")
                .and_then(Value::as_u64)
                .and_then(|a| u32::try_from(a).ok())
                .filter(|a| *a >= 1)
                .ok_or("validation job has no valid attempt number")?,
            // Absent from jobs queued before it was counted.
            mined_reverts: p
                .get("mined_reverts")
                .and_then(Value::as_u64)
                .and_then(|a| u32::try_from(a).ok())
                .unwrap_or(0),
            payment_key: text(p, "payment_key"),
            wait_until: p.get("wait_until").and_then(Value::as_u64),
        })
    }

    fn to_value(&self) -> Value {
        Value::object()
            .with("verdict_id", self.verdict_id.as_str())
            .with("reference", self.reference.as_str())
            .with("response", u64::from(self.response))
            .with("response_uri", self.response_uri.as_str())
            .with("response_hash", self.response_hash.clone())
            .with("tag", self.tag.as_str())
            .with("attempt", u64::from(self.attempt))
            .with("mined_reverts", u64::from(self.mined_reverts))
            .with("payment_key", self.payment_key.clone())
            .with("wait_until", self.wait_until)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookJob {
    pub verdict_id: String,
    /// 1-based; the first delivery is attempt 1.
    pub attempt: u32,
}

impl SwornJob {
    /// The job in an envelope; `Ok(None)` for a kind this release does not run.
    pub fn parse(job: &Job) -> Result<Option<SwornJob>, String> {
        let parsed = match job.kind.as_str() {
            JOB_PASS2 => SwornJob::Pass2(Box::new(Pass2Job::from_value(&payload(job)?)?)),
            JOB_WEBHOOK => SwornJob::Webhook(WebhookJob::from_value(&payload(job)?)?),
            JOB_VALIDATION => SwornJob::Validation(ValidationJob::from_value(&payload(job)?)?),
            _ => return Ok(None),
        };
        Ok(Some(parsed))
    }

    /// The envelope the queue carries.
    pub fn to_job(&self) -> Job {
        let (kind, payload) = match self {
            SwornJob::Pass2(j) => (JOB_PASS2, j.to_value()),
            SwornJob::Webhook(j) => (JOB_WEBHOOK, j.to_value()),
            SwornJob::Validation(j) => (JOB_VALIDATION, j.to_value()),
        };
        Job {
            kind: kind.into(),
            payload: String::from_utf8_lossy(&payload.to_canonical_vec()).into_owned(),
        }
    }
}

fn payload(job: &Job) -> Result<Value, String> {
    parse(job.payload.as_bytes()).map_err(|e| e.to_string())
}

fn required_text(p: &Value, k: &str) -> Result<String, String> {
    p.get(k)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| format!("job payload lacks {k}"))
}

fn text(p: &Value, k: &str) -> Option<String> {
    p.get(k).and_then(Value::as_str).map(str::to_owned)
}

impl Pass2Job {
    fn from_value(p: &Value) -> Result<Pass2Job, String> {
        let deliverable = match (p.get("deliverable_sealed"), p.get("deliverable")) {
            (Some(Value::String(sealed)), _) => Some(JobDeliverable::Sealed(sealed.clone())),
            (_, Some(clear)) => Some(JobDeliverable::Clear(clear.clone())),
            _ => None,
        };
        Ok(Pass2Job {
            verdict_id: required_text(p, "verdict_id")?,
            spec: p.get("spec").cloned(),
            deliverable,
            deliverable_hash: text(p, "deliverable_hash"),
            job_ref: p.get("job_ref").filter(|v| **v != Value::Null).cloned(),
            webhook_url: text(p, "webhook_url"),
            pass1: p
                .get("pass1")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            created_at: p.get("created_at").and_then(Value::as_u64),
            payment_key: text(p, "payment_key"),
            wait_until: p.get("wait_until").and_then(Value::as_u64),
            hops: p.get("hops").and_then(Value::as_u64).unwrap_or(0),
            answers_request: p.get("answers_request") == Some(&Value::Bool(true)),
        })
    }

    fn to_value(&self) -> Value {
        let mut v = Value::object()
            .with("verdict_id", self.verdict_id.as_str())
            .with("job_ref", self.job_ref.clone())
            .with("webhook_url", self.webhook_url.clone())
            .with("pass1", Value::Array(self.pass1.clone()))
            .with("hops", self.hops);
        if let Some(spec) = &self.spec {
            v.insert("spec", spec.clone());
        }
        match &self.deliverable {
            Some(JobDeliverable::Sealed(s)) => v.insert("deliverable_sealed", s.as_str()),
            Some(JobDeliverable::Clear(d)) => v.insert("deliverable", d.clone()),
            None => {}
        }
        if let Some(h) = &self.deliverable_hash {
            v.insert("deliverable_hash", h.as_str());
        }
        if let Some(t) = self.created_at {
            v.insert("created_at", t);
        }
        if let Some(k) = &self.payment_key {
            v.insert("payment_key", k.as_str());
        }
        if let Some(t) = self.wait_until {
            v.insert("wait_until", t);
        }
        if self.answers_request {
            v.insert("answers_request", true);
        }
        v
    }
}

impl WebhookJob {
    fn from_value(p: &Value) -> Result<WebhookJob, String> {
        Ok(WebhookJob {
            verdict_id: required_text(p, "verdict_id")?,
            attempt: p
                .get("attempt")
                .and_then(Value::as_u64)
                .and_then(|a| u32::try_from(a).ok())
                .filter(|a| (1..=WEBHOOK_MAX_ATTEMPTS).contains(a))
                .ok_or("webhook job has no valid attempt number")?,
        })
    }

    fn to_value(&self) -> Value {
        Value::object()
            .with("verdict_id", self.verdict_id.as_str())
            .with("attempt", u64::from(self.attempt))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass2_job_reads_back_as_it_was_written() {
        let job = SwornJob::Pass2(Box::new(Pass2Job {
            verdict_id: "vrd_1".into(),
            spec: Some(Value::object().with("checks", Value::Array(vec![]))),
            deliverable: Some(JobDeliverable::Sealed("c2VhbGVk".into())),
            deliverable_hash: Some("ab".repeat(32)),
            job_ref: None,
            webhook_url: Some("https://example.com/hook".into()),
            pass1: vec![Value::object().with("passed", true)],
            created_at: Some(100),
            payment_key: Some("evm:0xabc".into()),
            wait_until: Some(160),
            hops: 2,
            answers_request: true,
        }));
        let envelope = job.to_job();
        assert_eq!(envelope.kind, JOB_PASS2);
        assert_eq!(SwornJob::parse(&envelope), Ok(Some(job)));
    }

    #[test]
    fn older_jobs_still_parse_and_unknown_kinds_are_left_alone() {
        // Queued before sealing, payment keys and deadlines existed.
        let old = Job {
            kind: JOB_PASS2.into(),
            payload: r#"{"verdict_id":"vrd_2","deliverable":{"text":"hi"},"pass1":[]}"#.into(),
        };
        let Ok(Some(SwornJob::Pass2(p))) = SwornJob::parse(&old) else {
            panic!("parses");
        };
        assert_eq!(
            p.deliverable,
            Some(JobDeliverable::Clear(Value::object().with("text", "hi")))
        );
        assert_eq!((p.payment_key, p.wait_until, p.hops), (None, None, 0));
        let other = Job {
            kind: "something.else".into(),
            payload: "{}".into(),
        };
        assert_eq!(SwornJob::parse(&other), Ok(None));
        let webhook = SwornJob::Webhook(WebhookJob {
            verdict_id: "vrd_3".into(),
            attempt: 9,
        });
        assert!(
            SwornJob::parse(&webhook.to_job()).is_err(),
            "attempt out of range"
        );
    }
}
