//! Steps 2 to 4 of an evaluation, for a job found ours and submitted: the deliverable
//! in hand matched to the provider's commitment, the verdict bought for it, and the
//! document verified offline as the one this evaluation asked for.

use alloy::primitives::B256;
use umpire_core::json::Value;
use umpire_core::product::Tier;
use umpire_core::spec::{Deliverable, parse_deliverable, parse_spec};
use umpire_escrow::{Decision, JobRef, bytes32_hex, bytes32_of};

use super::record;
use super::{Evaluator, Step, no};

/// What a verified document tells the escrow to do, and why.
pub(super) struct Ruling {
    /// The document's verdict: "pass" or "fail".
    pub(super) verdict: String,
    pub(super) decision: Decision,
    /// The document's `payload_sha256`, the `reason` the escrow records.
    pub(super) reason: B256,
}

impl Evaluator<'_> {
    /// Steps 2 to 5, for a job that is ours, Submitted, and committed to `commitment`.
    pub(super) async fn judge_submitted(
        &self,
        job_ref: &JobRef,
        commitment: B256,
        tier: Tier,
        spec: Value,
        deliverable: Value,
    ) -> Step {
        let job_ref = *job_ref;
        let (parsed, spec_hash) = match parsed_inputs(&spec, &deliverable, tier) {
            Ok(p) => p,
            Err(step) => return step,
        };

        // 2. The provider's commitment against the deliverable in hand.
        if let Err(step) = matches_commitment(&job_ref, &parsed, commitment) {
            return step;
        }
        // Held until the decision is sent: a second evaluation of the job on this
        // machine must not buy or send alongside this one.
        let _lock = match record::lock(&self.data_dir, &job_ref.idempotency_key()) {
            Ok(Some(l)) => l,
            Ok(None) => {
                return Step::Again(format!(
                    "another evaluation of job {job_ref} is running on this machine"
                ));
            }
            Err(e) => return Step::Again(e.0),
        };

        // 3. The verdict, bought once per job.
        let body = Value::object()
            .with("spec", spec)
            .with("deliverable", deliverable)
            .with("job_ref", job_ref.job_ref());
        let answer = match self.verdict(&job_ref, tier, &body).await {
            Ok(a) => a,
            Err(step) => return step,
        };
        let doc = answer.get("document").cloned().unwrap_or(Value::Null);

        // 4. The document, verified offline, about this job, these bytes, this spec.
        let ruling = match self.verified(&doc, &parsed, &job_ref, &spec_hash, tier) {
            Ok(r) => r,
            Err(step) => return step,
        };

        // 5. Complete or reject, unless someone decided the job meanwhile.
        self.decide(&job_ref, ruling, doc).await
    }

    /// Step 4: the document verifies with the service's key, is about this job, this
    /// spec and this tier, and says pass or fail with a reason the escrow can record.
    /// Nothing has been sent to the escrow when it says no.
    fn verified(
        &self,
        doc: &Value,
        parsed: &Deliverable,
        job_ref: &JobRef,
        spec_hash: &str,
        tier: Tier,
    ) -> Result<Ruling, Step> {
        let steps = umpire_core::document::verify(doc, &self.keys, Some(parsed));
        if let Some(bad) = steps.iter().find(|s| !s.ok) {
            return Err(no(
                format!(
                    "the verdict document does not verify ({}: {})",
                    bad.name, bad.detail
                ),
                "nothing was sent to the escrow; check --umpire-key",
            ));
        }
        let text = |k: &str| doc.get(k).and_then(Value::as_str).unwrap_or("");
        let about = [
            ("job_ref", job_ref.job_ref()),
            ("spec_hash", spec_hash.to_owned()),
            ("tier", tier.as_str().to_owned()),
        ];
        if let Some((field, want)) = about.iter().find(|(k, want)| text(k) != want) {
            return Err(no(
                format!(
                    "the verdict document's {field} is {:?}, not {want:?}: it is not the verdict this evaluation asked for",
                    text(field)
                ),
                "nothing was sent to the escrow",
            ));
        }
        let verdict = text("verdict");
        let decision = match verdict {
            "pass" => Decision::Complete,
            "fail" => Decision::Reject,
            other => {
                return Err(no(
                    format!("the document's verdict is {other:?}, neither pass nor fail"),
                    "nothing was sent to the escrow",
                ));
            }
        };
        let Some(reason) = doc
            .get("signature")
            .and_then(|s| s.get("payload_sha256"))
            .and_then(Value::as_str)
            .and_then(bytes32_of)
        else {
            return Err(no("the document has no payload_sha256", "nothing was sent"));
        };
        eprintln!(
            "verdict {verdict}, verified offline with {}: {} with reason {}",
            self.key_source,
            decision.name(),
            bytes32_hex(&reason)
        );
        Ok(Ruling {
            verdict: verdict.to_owned(),
            decision,
            reason,
        })
    }
}

/// The deliverable and the spec's hash, each read before anything is paid: a verdict
/// bought for inputs the service would refuse is money spent for nothing.
fn parsed_inputs(
    spec: &Value,
    deliverable: &Value,
    tier: Tier,
) -> Result<(Deliverable, String), Step> {
    let parsed: Deliverable = match parse_deliverable(deliverable, "deliverable") {
        Ok(d) => d,
        Err(p) => {
            return Err(no(
                format!("the deliverable: {}", p[0].message),
                "nothing was paid",
            ));
        }
    };
    let spec_parsed = match parse_spec(spec, Some(tier)) {
        Ok(s) => s,
        // The first problem named (where and what), so the refusal says what to fix.
        Err(problems) => {
            let first = problems
                .first()
                .map(|p| format!(": {}: {}", p.at, p.message))
                .unwrap_or_default();
            let more = if problems.len() > 1 {
                format!(" (and {} more)", problems.len() - 1)
            } else {
                String::new()
            };
            return Err(no(
                format!(
                    "the spec is not a valid {} spec{first}{more}; `umpire validate` lists every problem",
                    tier.as_str()
                ),
                "nothing was paid",
            ));
        }
    };
    Ok((parsed, spec_parsed.hash))
}

/// Step 2: the deliverable in hand is the one the provider committed to on chain, so
/// the verdict bought for it speaks of the bytes the escrow's job is about.
fn matches_commitment(
    job_ref: &JobRef,
    parsed: &Deliverable,
    commitment: B256,
) -> Result<(), Step> {
    let ours = parsed.hash();
    let committed = alloy::hex::encode(commitment);
    if ours != committed {
        return Err(no(
            format!(
                "the deliverable does not match the provider's commitment: it hashes to 0x{ours}, the provider submitted 0x{committed}"
            ),
            "evaluate the deliverable the provider committed to (`umpire commitment FILE` prints a file's hash); nothing was paid",
        ));
    }
    eprintln!("job {job_ref}: Submitted, commitment 0x{committed} matches the deliverable");
    Ok(())
}
