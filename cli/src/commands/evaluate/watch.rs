//! `umpire evaluate --watch`: follow a contract's `JobSubmitted` events and evaluate
//! every job whose evaluator is our wallet, from the brief in its description.
//!
//! Anyone can create a job naming our wallet as its evaluator, so the watcher pays only
//! for the jobs of clients it is told to serve (`--client`, or `--any-client` said out
//! loud), at no tier dearer than `--tier`, and gives up on a job after a bounded number
//! of failed attempts.

use std::collections::{HashMap, HashSet};
use std::process::ExitCode;
use std::time::Duration;

use alloy::primitives::{Address, U256};
use umpire_core::json::Value;
use umpire_core::product::Tier;
use umpire_escrow::Status;

use umpire_escrow::bytes32_hex;

use super::{Evaluator, Step};
use crate::commands::Local;
use crate::commands::guard::Room;

/// The exit status of a watch stopped because its spending budget is spent.
pub const BUDGET_SPENT: u8 = 3;

/// How often a job whose evaluation failed on the way is tried before it is given up.
const MAX_ATTEMPTS: u32 = 10;
/// Blocks read again at every poll: a lagging RPC or a short reorg must not lose a
/// `JobSubmitted` for good (jobs seen before are skipped).
const RESCAN_BLOCKS: u64 = 32;

pub struct WatchArgs {
    /// eip155:CHAIN:CONTRACT
    pub contract: String,
    pub from_block: Option<u64>,
    pub poll_seconds: u64,
    /// Handle what is there, then stop.
    pub once: bool,
    /// The clients whose jobs are evaluated; empty with `any_client` means everyone's.
    pub clients: Vec<Address>,
    pub any_client: bool,
}

/// How a job's description tells a watching evaluator what to judge: a JSON object
/// whose `umpire` member holds the spec (inline, or a URL with its sha256) and where
/// the provider publishes its deliverable (docs/erc8183.md).
#[derive(Debug, PartialEq)]
struct Brief {
    tier: Option<String>,
    spec: SpecSource,
    /// `{job_id}` and `{commitment}` are replaced by the job's id and the provider's
    /// commitment (0x and 64 hex digits), so a deliverable can live at its own hash.
    deliverable_url: String,
}

#[derive(Debug, PartialEq)]
enum SpecSource {
    Inline(Value),
    /// Fetched, and used only if its bytes hash to `sha256`: the client fixed the spec
    /// when it wrote the (immutable) description, whoever serves the URL.
    Url {
        url: String,
        sha256: String,
    },
}

fn brief(description: &str) -> Result<Brief, String> {
    let v = umpire_core::json::parse(description.as_bytes())
        .map_err(|_| "the description is not JSON".to_owned())?;
    let b = v
        .get("umpire")
        .ok_or("the description has no \"umpire\" object")?;
    let text = |k: &str| b.get(k).and_then(Value::as_str).map(str::to_owned);
    let spec = match (b.get("spec"), text("spec_url"), text("spec_sha256")) {
        (Some(spec), None, None) => SpecSource::Inline(spec.clone()),
        (None, Some(url), Some(sha256))
            if sha256.len() == 64 && sha256.bytes().all(|c| c.is_ascii_hexdigit()) =>
        {
            SpecSource::Url {
                url,
                sha256: sha256.to_ascii_lowercase(),
            }
        }
        (None, Some(_), _) => {
            return Err(
                "umpire.spec_url needs spec_sha256, the sha256 of its bytes (64 hex)".into(),
            );
        }
        _ => return Err("umpire needs exactly one of spec and spec_url".into()),
    };
    let deliverable_url = text("deliverable_url").ok_or("umpire.deliverable_url is missing")?;
    Ok(Brief {
        tier: text("tier"),
        spec,
        deliverable_url,
    })
}

/// A body fetched through the SSRF-safe fetcher (public addresses only, bounded in
/// time and size), as the service fetches.
async fn fetch(fetcher: &umpire_fetch::Fetcher, url: &str) -> Result<Vec<u8>, String> {
    let fetched = fetcher.fetch(url).await;
    let Some(body) = fetched.body else {
        let why = fetched.observation.error.unwrap_or_default();
        return Err(format!("{url}: {why}"));
    };
    if body.status != 200 {
        return Err(format!("{url}: HTTP {}", body.status));
    }
    if body.truncated {
        return Err(format!("{url}: the body is larger than the fetcher reads"));
    }
    Ok(body.body)
}

fn json(url: &str, bytes: &[u8]) -> Result<Value, String> {
    umpire_core::json::parse(bytes).map_err(|e| format!("{url}: not JSON: {e}"))
}

impl Evaluator<'_> {
    async fn watched(
        &self,
        id: U256,
        ceiling: Tier,
        w: &WatchArgs,
        fetcher: &umpire_fetch::Fetcher,
    ) -> Step {
        let job_ref = self.on.job(id);
        let skip = |why: String| {
            eprintln!("job {job_ref}: {why}; skipped, nothing paid");
            Step::Done(ExitCode::SUCCESS)
        };
        let job = match self.escrow.job(id).await {
            Ok(j) => j,
            Err(e) => return super::chain_step(e),
        };
        if job.evaluator != self.me {
            return skip(format!("its evaluator is {}, not us", job.evaluator));
        }
        if job.status != Status::Submitted {
            return skip(format!("it is {}", job.status.name()));
        }
        if !w.any_client && !w.clients.contains(&job.client) {
            return skip(format!(
                "its client {} is not one we evaluate for (--client)",
                job.client
            ));
        }
        let brief = match brief(&job.description) {
            Ok(b) => b,
            Err(e) => return skip(format!("{e} (see docs/erc8183.md)")),
        };
        let tier = match brief.tier.as_deref() {
            None => ceiling,
            Some(name) => match Tier::parse(name) {
                Some(t) if t.price().usdc_units <= ceiling.price().usdc_units => t,
                Some(t) => {
                    return skip(format!(
                        "its brief asks for a {} verdict, dearer than --tier {}",
                        t.as_str(),
                        ceiling.as_str()
                    ));
                }
                None => return skip(format!("its brief names no tier we sell ({name:?})")),
            },
        };
        // Nothing is fetched for a job the budget cannot pay for.
        let path = format!("/v1/verdicts/{}", tier.as_str());
        match self.payer.room(&path, u128::from(tier.price().usdc_units)) {
            Room::Spent => {
                return Step::Stop(format!(
                    "a {} verdict does not fit in what is left of the spending budget (--budget-total)",
                    tier.as_str()
                ));
            }
            Room::HourSpent => {
                return Step::Wait(format!(
                    "a {} verdict does not fit in this hour's budget (--budget-per-hour)",
                    tier.as_str()
                ));
            }
            Room::Open => {}
        }
        let commitment = match self.submitted(&job_ref, &job).await {
            Ok(c) => c,
            Err(step) => return step,
        };
        let deliverable_url = brief
            .deliverable_url
            .replace("{job_id}", &id.to_string())
            .replace("{commitment}", &bytes32_hex(&commitment));
        // The URL policy, as the service applies it when a spec is validated: a URL it
        // refuses is refused for good (the fetcher applies it again to every hop).
        let urls = match &brief.spec {
            SpecSource::Url { url, .. } => vec![url.as_str(), deliverable_url.as_str()],
            SpecSource::Inline(_) => vec![deliverable_url.as_str()],
        };
        for u in urls {
            if let Err(e) = fetcher.policy().check_url(u) {
                return skip(format!("{u}: {}", e.message));
            }
        }
        let spec = match brief.spec {
            SpecSource::Inline(v) => v,
            SpecSource::Url { url, sha256 } => {
                let bytes = match fetch(fetcher, &url).await {
                    Ok(b) => b,
                    Err(e) => return Step::Again(format!("the spec: {e}")),
                };
                let got = umpire_core::hash::sha256_hex(&bytes);
                if got != sha256 {
                    return skip(format!(
                        "the spec at {url} hashes to {got}, not the brief's spec_sha256 {sha256}"
                    ));
                }
                match json(&url, &bytes) {
                    Ok(v) => v,
                    Err(e) => return skip(format!("the spec: {e}")),
                }
            }
        };
        let url = deliverable_url;
        let deliverable = match fetch(fetcher, &url).await {
            Ok(bytes) => match json(&url, &bytes) {
                Ok(v) => v,
                // Not JSON now may be JSON once the provider has published it.
                Err(e) => return Step::Again(format!("the deliverable: {e}")),
            },
            Err(e) => return Step::Again(format!("the deliverable: {e}")),
        };
        self.judge_submitted(&job_ref, commitment, tier, spec, deliverable)
            .await
    }
}

/// Follows the contract's `JobSubmitted` events and evaluates each job whose evaluator
/// is our wallet, from what its description names. A job whose evaluation failed on
/// the way (a fetch, the chain, the service) is tried again at the next poll, up to
/// [`MAX_ATTEMPTS`] times; one that was judged or refused is not. One line of JSON per
/// judged job on stdout.
pub(super) async fn watch(
    ev: &Evaluator<'_>,
    ceiling: Tier,
    w: &WatchArgs,
) -> Result<ExitCode, Local> {
    if w.clients.is_empty() && !w.any_client {
        return Err(Local(
            "--watch pays for every job it judges, and anyone can name us as a job's evaluator: name the clients whose jobs we evaluate (--client 0x…, repeatable), or pass --any-client".into(),
        ));
    }
    let fetcher = umpire_fetch::Fetcher::from_env().map_err(Local)?;
    let head = ev
        .escrow
        .head()
        .await
        .map_err(|e| Local(format!("escrow: {e}")))?;
    let mut from = w
        .from_block
        .unwrap_or_else(|| head.saturating_sub(ev.escrow.lookback()));
    eprintln!(
        "watching {} from block {from} for jobs whose evaluator is {}, at most {} verdicts",
        ev.on,
        ev.me,
        ceiling.as_str()
    );
    let mut pending: Vec<U256> = Vec::new();
    let mut done: HashSet<U256> = HashSet::new();
    let mut attempts: HashMap<U256, u32> = HashMap::new();
    loop {
        match ev.escrow.head().await {
            Ok(head) if head >= from => match ev.escrow.submitted_between(from, head).await {
                Ok(ids) => {
                    for id in ids {
                        if !done.contains(&id) && !pending.contains(&id) {
                            pending.push(id);
                        }
                    }
                    from = (head + 1).saturating_sub(RESCAN_BLOCKS).max(from);
                }
                Err(e) => eprintln!("reading JobSubmitted events failed: {e}; trying again"),
            },
            Ok(_) => {}
            Err(e) => eprintln!("the chain did not answer: {e}; trying again"),
        }
        let mut again = Vec::new();
        let jobs: Vec<U256> = std::mem::take(&mut pending);
        for (i, &id) in jobs.iter().enumerate() {
            match ev.watched(id, ceiling, w, &fetcher).await {
                Step::Done(_) => {
                    done.insert(id);
                }
                Step::Stop(why) => {
                    eprintln!(
                        "job {}: {why}; stopping with {} jobs unevaluated",
                        ev.on.job(id),
                        jobs.len() - i + again.len()
                    );
                    return Ok(ExitCode::from(BUDGET_SPENT));
                }
                Step::Unusable(why) => {
                    eprintln!(
                        "{why}; stopping: nothing was paid, and no job of {} can be read",
                        ev.on
                    );
                    return Ok(ExitCode::from(1));
                }
                Step::Wait(why) => {
                    eprintln!("job {}: {why}; it waits", ev.on.job(id));
                    again.push(id);
                }
                Step::Again(why) => {
                    let n = attempts.entry(id).or_insert(0);
                    *n += 1;
                    if *n >= MAX_ATTEMPTS {
                        eprintln!("job {}: {why}; given up after {n} attempts", ev.on.job(id));
                        done.insert(id);
                    } else {
                        eprintln!(
                            "job {}: {why}; trying again at the next poll",
                            ev.on.job(id)
                        );
                        again.push(id);
                    }
                }
            }
        }
        pending = again;
        if w.once {
            return Ok(if pending.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            });
        }
        tokio::time::sleep(Duration::from_secs(w.poll_seconds.max(1))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_brief_names_a_spec_or_its_hashed_url_and_where_the_deliverable_is() {
        let b = brief(r#"{"umpire":{"tier":"probe","spec":{"checks":[]},"deliverable_url":"https://p.example/{commitment}.json"}}"#)
            .expect("brief");
        assert_eq!(b.tier.as_deref(), Some("probe"));
        assert!(matches!(b.spec, SpecSource::Inline(_)));
        assert_eq!(b.deliverable_url, "https://p.example/{commitment}.json");
        let hash = "AB".repeat(32);
        let b = brief(&format!(
            r#"{{"umpire":{{"spec_url":"https://p.example/spec.json","spec_sha256":"{hash}","deliverable_url":"https://p.example/d"}}}}"#
        ))
        .expect("brief");
        assert_eq!(
            b.spec,
            SpecSource::Url {
                url: "https://p.example/spec.json".into(),
                sha256: "ab".repeat(32)
            }
        );
        assert_eq!(b.tier, None);
        for bad in [
            "build me a website",
            r#"{"other":{}}"#,
            r#"{"umpire":{"deliverable_url":"https://p.example/d"}}"#,
            r#"{"umpire":{"spec":{},"spec_url":"https://x","deliverable_url":"https://p.example/d"}}"#,
            r#"{"umpire":{"spec_url":"https://x","deliverable_url":"https://p.example/d"}}"#,
            r#"{"umpire":{"spec_url":"https://x","spec_sha256":"12","deliverable_url":"https://p.example/d"}}"#,
            r#"{"umpire":{"spec":{}}}"#,
        ] {
            assert!(brief(bad).is_err(), "{bad}");
        }
    }
}
