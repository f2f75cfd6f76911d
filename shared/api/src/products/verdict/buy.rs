//! `POST /v1/verdicts/{tier}`: the paid verdict path, in the order DESIGN.md fixes:
//! validate → idempotency → 402 or verify → claim → judge (isolated checker) → sign →
//! settle → persist and answer 201. Refusals come before any payment is asked for; a
//! settlement that fails after the checks ran voids the purchase (no document kept,
//! no record, the key reusable) and answers 402 with `PAYMENT-RESPONSE success:false`.

use std::sync::Arc;
use umpire_core::document::CheckResult;
use umpire_core::json::Value;
use umpire_core::product::{DOCUMENT_RETENTION_DAYS, Tier};
use umpire_core::{ApiError, ErrorCode};
use umpire_fetch::LOOKUP_TIMEOUT;
use umpire_host::random_id;

use umpire_core::seal::DataKey;
use umpire_store::{JobQueue, VerdictRecord, VerdictStatus};
use umpire_x402::SettlementResponse;

use crate::checkout::{self, AfterSale, Checkout, Prepared, Void};
use crate::plumbing::body::json_bytes;
use crate::plumbing::cpu::{DropOffThread, off_thread};
use crate::plumbing::respond;
use crate::plumbing::state::{AppState, Request, Response};
use crate::products::verdict::erc8004::Answer;
use crate::products::verdict::judge;
use crate::products::verdict::purchase::{Envelope, Purchase, assess};
use crate::products::verdict::sworn;

fn tier_of(req: &Request) -> Result<Tier, ApiError> {
    let name = crate::plumbing::routes::last_segment(req);
    let tiers = Tier::ALL.map(Tier::as_str).join(", ");
    Tier::parse(name).ok_or_else(|| {
        ApiError::new(
            ErrorCode::UnknownTier,
            format!("there is no tier {name:?}"),
            format!("Buy one of: {tiers} (POST /v1/verdicts/<tier>). GET /v1/quote lists prices."),
        )
    })
}

/// The purchase in the body, or the corrective refusal (nothing asked, nothing charged).
async fn purchase_of(
    state: &AppState,
    tier: Tier,
    req: &Request,
) -> Result<DropOffThread<Purchase>, ApiError> {
    let (body, policy) = (req.body().clone(), state.fetch_policy());
    let mut assessment = off_thread(move || {
        let body = json_bytes(&body)?;
        let Some(obj) = body.as_object() else {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!("the body must be a JSON object, not {}", body.type_name()),
                "Send {\"spec\":{\"checks\":[...]},\"deliverable\":{\"text\":\"...\"}}.",
            ));
        };
        Ok(assess(tier, obj, Envelope::Purchase, &policy))
    })
    .await?;
    let needs_fetch = !assessment.urls.is_empty();
    match &state.fetcher {
        // Unpaid work: a quarter of the request's budget at most, so a purchase whose
        // names will not resolve is refused before its payment is asked for or looked at.
        Some(f) => {
            let until = state
                .config
                .clock
                .deadline(LOOKUP_TIMEOUT.min(state.config.request_budget / 4));
            assessment.resolve_urls(f, until).await;
        }
        None if needs_fetch => {
            return Err(ApiError::new(
                ErrorCode::Unavailable,
                "this process fetches no URLs, so url_probe and content_hash on a url cannot be judged here",
                "Judge text or JSON you already have with the basic tier; nothing was charged.",
            ));
        }
        None => {}
    }
    // Refused or sized for pass 2 off the async threads too: both touch the whole body.
    let purchase = off_thread(move || {
        let purchase = assessment.into_purchase(tier)?;
        if tier == Tier::Sworn {
            sworn::check_job_size(&purchase)?;
        }
        Ok::<_, ApiError>(DropOffThread::new(purchase))
    })
    .await?;
    // A validation request named in job_ref: refused before a payment is even asked
    // for. A request that may be the retry of a purchase made already (whose answer the
    // request's state now shows) is not refused here for being answered: its paid round
    // gets its purchase back, or is refused then (`buy_inner`).
    if !checkout::may_be_a_retry(req) {
        let until = state.config.clock.deadline(state.config.request_budget / 4);
        match crate::products::verdict::erc8004::check_before_payment(state, &purchase, until).await
        {
            Err(e) if e.code != ErrorCode::AlreadyCreated => return Err(e),
            _ => {}
        }
    }
    if tier == Tier::Sworn && state.queue.is_none() {
        return Err(ApiError::new(
            ErrorCode::Unavailable,
            "this process cannot schedule pass 2, so it does not sell sworn verdicts",
            "Buy a probe verdict, or use a deployment with a job queue; nothing was charged.",
        ));
    }
    Ok(purchase)
}

pub async fn buy(state: &AppState, req: &Request) -> Response {
    use tracing::Instrument as _;
    match buy_inner(state, req)
        .instrument(checkout::purchase_span("verdict"))
        .await
    {
        Ok(r) | Err(r) => r,
    }
}

async fn buy_inner(state: &AppState, req: &Request) -> Result<Response, Response> {
    let err = |e: ApiError| respond::error(&e);
    // The clock starts on arrival: everything below fits in one budget.
    let deadline = state.config.clock.deadline(state.config.request_budget);
    // Refusals before anything is asked for.
    let tier = tier_of(req).map_err(err)?;
    tracing::Span::current().record("tier", tier.as_str());
    checkout::enforce_unpaid(state, req).await.map_err(err)?;
    let purchase = purchase_of(state, tier, req).await.map_err(err)?;
    let product = crate::products::verdict::product(tier);
    let mut checkout = checkout::begin(state, req, product, deadline).await?;
    // A fresh purchase naming a validation request is checked now, paid round and all (a
    // replay, answered by `begin`, never gets here), and answers the request only if
    // it passes. Refused: the claim is released and nothing settles. A payment that had
    // already moved to us (its payer broadcast the authorization) buys its verdict even
    // so, but the request is not answered.
    let mut answers_request = false;
    if crate::products::verdict::erc8004::named_request(&purchase).is_some() {
        let until = state.config.clock.deadline(state.config.request_budget / 4);
        match crate::products::verdict::erc8004::check_before_payment(state, &purchase, until).await
        {
            Ok(()) => answers_request = true,
            Err(e) if checkout.already_settled() => tracing::warn!(
                error = e.message.as_str(),
                "a purchase paid already names a validation request it cannot answer: delivered, not answered"
            ),
            Err(e) => return Err(checkout.abandon(e).await),
        }
    }

    // Judge in the isolated checker (pass 1 of a sworn verdict), leaving settlement
    // its share of the budget.
    let judged = tokio::time::timeout_at(
        checkout.work_deadline().instant().into(),
        judge::judge(state, &purchase),
    )
    .await;
    let results = match judged {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return Err(checkout.abandon(judge::judge_failed(e)).await),
        Err(_) => return Err(checkout.out_of_time().await),
    };
    let verdict_id = random_id("vrd");
    tracing::Span::current().record("verdict_id", verdict_id.as_str());
    // Derived, not stored: the answer reveals it once the verdict is stored, and a
    // replay derives it again (see `secret`).
    let Some(secret) = crate::checkout::secret::mint(state.signer.as_ref(), &verdict_id) else {
        return Err(checkout
            .abandon(crate::plumbing::state::internal(
                "this function holds no seed to derive secrets",
            ))
            .await);
    };
    let status_url = format!("{}/v1/verdicts/{verdict_id}", state.config.issuer);
    let mut paid = Paid {
        state,
        verdict_id: &verdict_id,
        secret: &secret,
        status_url: &status_url,
        checkout: &mut checkout,
        answers_request,
    };
    let answer = if tier == Tier::Sworn {
        paid.sworn(&purchase, &results).await
    } else {
        paid.immediate(&purchase, &results).await
    };
    Ok(checkout.finish(answer).await)
}

struct Paid<'a, 'c> {
    state: &'a AppState,
    verdict_id: &'a str,
    secret: &'a str,
    status_url: &'a str,
    checkout: &'a mut Checkout<'c>,
    /// The purchase names a validation request and passed its checks: its verdict
    /// answers it on chain.
    answers_request: bool,
}

impl Paid<'_, '_> {
    fn record(&self, purchase: &Purchase, now: u64) -> VerdictRecord {
        VerdictRecord {
            verdict_id: self.verdict_id.to_owned(),
            tier: purchase.tier,
            status: VerdictStatus::Final,
            document: None,
            preview: None,
            secret_hash: crate::checkout::secret::check_of(self.secret),
            spec_hash: purchase.spec.hash.clone(),
            webhook_url: purchase.webhook_url.clone(),
            created_at: now,
            expires_at: now + DOCUMENT_RETENTION_DAYS * 86_400,
            webhook_outcome: None,
            job_key: None,
            payer: Some(self.checkout.payer.to_string()),
        }
    }

    /// The answer as it will be given once paid (the settlement goes in `settlement`).
    fn prepared(&self, status: u16, body: &Value, record: Option<VerdictRecord>) -> Prepared {
        Prepared {
            location: Some(self.status_url.to_owned()),
            record,
            ..Prepared::new(status, body, &["settlement"])
        }
    }

    /// witness, basic, probe: sign, settle, store, answer 201 with the document.
    async fn immediate(
        &mut self,
        purchase: &Purchase,
        results: &[CheckResult],
    ) -> Result<(Prepared, SettlementResponse), Void> {
        let document = judge::signed_verdict(self.state, purchase, self.verdict_id, results);
        let now = self.state.config.clock.now();
        let record = VerdictRecord {
            document: Some(String::from_utf8_lossy(&document.to_canonical_vec()).into_owned()),
            ..self.record(purchase, now)
        };
        let body = Value::object()
            .with("verdict_id", self.verdict_id)
            .with("tier", purchase.tier.as_str())
            .with("status", "final")
            .with(
                "verdict",
                document.get("verdict").cloned().unwrap_or(Value::Null),
            )
            .with("document", document)
            .with("status_url", self.status_url)
            // Given when the answer is delivered with its verdict stored.
            .with("secret", Value::Null)
            .with("expires_at", umpire_core::time::rfc3339(record.expires_at))
            .with("payer", self.checkout.payer.to_string());
        let prepared = self.prepared(201, &body, Some(record));
        // The answer to a validation request is queued before the payment settles (a
        // crash between the two cannot lose it); it waits for the sale to be known.
        let follow_ups = FollowUps {
            state: self.state,
            verdict_id: self.verdict_id,
            purchase,
            now,
            answer: body
                .get("document")
                .filter(|_| self.answers_request)
                .map(|document| Answer::final_for(document, purchase.tier)),
            sworn: None,
        };
        let settlement = self.checkout.sell(&prepared, &follow_ups).await?;
        crate::plumbing::metrics::record(crate::plumbing::metrics::Metric::VerdictIssued);
        Ok((prepared, settlement))
    }

    /// sworn: store the pending verdict and queue pass 2 before settling (so a paid
    /// verdict always has its pass 2), then settle; a failed settlement deletes the
    /// record, and the queued pass 2 finds nothing and ends. Pass 2 also asks whether
    /// the purchase went through (a process may die before settling). 202 with pass 1.
    async fn sworn(
        &mut self,
        purchase: &Purchase,
        results: &[CheckResult],
    ) -> Result<(Prepared, SettlementResponse), Void> {
        let queue = self.state.queue.as_ref().ok_or_else(|| {
            Void::Internal(crate::plumbing::state::internal("sworn needs a job queue"))
        })?;
        let now = self.state.config.clock.now();
        let delay = self.state.config.sworn_delay_secs;
        let due = now + u64::from(delay);
        let preview = sworn::preview(results, due);
        // The pass-2 job carries the deliverable sealed under a key that lives only with
        // the pending verdict (see `umpire_core::seal`).
        let job_key = umpire_core::seal::DataKey::from_bytes(umpire_host::random_bytes());
        let record = VerdictRecord {
            status: VerdictStatus::Pending,
            preview: Some(String::from_utf8_lossy(&preview.to_canonical_vec()).into_owned()),
            job_key: Some(job_key.to_hex()),
            ..self.record(purchase, now)
        };
        let body = Value::object()
            .with("verdict_id", self.verdict_id)
            .with("tier", "sworn")
            .with("status", "pending")
            .with("pass1", preview)
            .with("status_url", self.status_url)
            .with("secret", Value::Null)
            .with("webhook_url", purchase.webhook_url.clone())
            .with("final_due_at", umpire_core::time::rfc3339(due))
            .with("expires_at", umpire_core::time::rfc3339(record.expires_at))
            .with("payer", self.checkout.payer.to_string());
        let prepared = self.prepared(202, &body, None);
        let passed = umpire_core::document::verdict_passed(results);
        let follow_ups = FollowUps {
            state: self.state,
            verdict_id: self.verdict_id,
            purchase,
            now,
            answer: self.answers_request.then(|| Answer::provisional(passed)),
            sworn: Some(Pass2 {
                queue,
                record: &record,
                results,
                job_key: &job_key,
                answers_request: self.answers_request,
            }),
        };
        let settlement = self.checkout.sell(&prepared, &follow_ups).await?;
        crate::plumbing::metrics::record(crate::plumbing::metrics::Metric::VerdictIssued);
        Ok((prepared, settlement))
    }
}

/// What a verdict puts in place before its sale, so no crash between the two loses it:
/// for a sworn verdict its pending record and pass 2 (with the deliverable sealed under
/// `job_key`); for a purchase naming a validation request, the answer to it. Each waits
/// for the sale to be known; a voided sale deletes the pending record, and the queued
/// jobs find nothing to finish.
struct FollowUps<'a> {
    state: &'a AppState,
    verdict_id: &'a str,
    purchase: &'a Purchase,
    now: u64,
    answer: Option<Answer<'a>>,
    sworn: Option<Pass2<'a>>,
}

/// A sworn verdict's part of its follow-ups.
struct Pass2<'a> {
    queue: &'a Arc<dyn JobQueue>,
    record: &'a VerdictRecord,
    results: &'a [CheckResult],
    job_key: &'a DataKey,
    answers_request: bool,
}

#[async_trait::async_trait]
impl AfterSale for FollowUps<'_> {
    async fn before_settling(&self, payment_key: &str) -> Result<(), Void> {
        let internal = |e: String| Void::Internal(crate::plumbing::state::internal(e));
        let mut queued = Ok(());
        if let Some(pass2) = &self.sworn {
            self.state
                .store
                .put_verdict(pass2.record)
                .await
                .map_err(|e| internal(e.to_string()))?;
            queued = self.queue_pass2(pass2, payment_key).await;
        }
        if let (Ok(()), Some(answer)) = (&queued, &self.answer) {
            queued = self.queue_answer(answer.clone(), payment_key).await;
        }
        if queued.is_err() {
            self.voided().await;
        }
        queued
    }

    async fn voided(&self) {
        if self.sworn.is_none() {
            return;
        }
        if let Err(e) = self.state.store.delete_verdict(self.verdict_id).await {
            tracing::error!(error = %e, verdict_id = self.verdict_id, "could not delete a voided sworn verdict");
        }
    }
}

impl FollowUps<'_> {
    /// When the purchase's hold lapses, and then one hold more: a retry the customer
    /// sends as the hold lapses ends (settled, or bought afresh, which tells the
    /// follow-ups this verdict was never sold) within its own hold. Giving up at the
    /// lapse itself raced that retry.
    fn wait_until(&self) -> u64 {
        self.now + 2 * u64::from(self.state.config.in_progress_secs)
    }

    /// Queues the answer to the validation request the purchase names, to be posted
    /// once the sale is known; a queue that refuses voids the purchase before it
    /// settles (nothing charged, the key reusable).
    async fn queue_answer(&self, answer: Answer<'_>, payment_key: &str) -> Result<(), Void> {
        crate::products::verdict::erc8004::queue_answer(
            self.state,
            self.verdict_id,
            self.purchase.job_ref.as_ref(),
            answer,
            Some(crate::products::verdict::erc8004::Paying {
                payment_key,
                wait_until: self.wait_until(),
            }),
        )
        .await
        .map_err(|e| Void::Internal(crate::plumbing::state::internal(e)))
    }

    /// Queues pass 2, due a sworn delay from now.
    async fn queue_pass2(&self, pass2: &Pass2<'_>, payment_key: &str) -> Result<(), Void> {
        let delay = std::time::Duration::from_secs(self.state.config.sworn_delay_secs.into());
        let job = sworn::pass2_job(
            self.verdict_id,
            pass2.job_key,
            self.purchase,
            pass2.results,
            self.now,
            sworn::Sold {
                payment_key,
                wait_until: self.wait_until(),
                answers_request: pass2.answers_request,
            },
        )
        .map_err(|e| Void::Internal(crate::plumbing::state::internal(e)))?;
        pass2
            .queue
            .enqueue(&job, delay)
            .await
            .map_err(|e| Void::Internal(crate::plumbing::state::internal(e)))
    }
}
