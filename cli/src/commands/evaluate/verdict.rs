//! Step 3 of an evaluation: the verdict, bought once per job. A purchase is recorded
//! (record.rs) before anything else can fail, and a later run reads it back from the
//! service instead of paying again.

use std::process::ExitCode;
use std::time::Duration;

use reqwest::Method;
use umpire_core::json::Value;
use umpire_core::product::Tier;
use umpire_escrow::JobRef;

use super::record::{self, Record};
use super::{Evaluator, Step};
use crate::commands::Local;
use crate::commands::buy::{Refused, buy_once, wait_final};
use crate::commands::lookup::read_header;

/// The longest an evaluation waits for a sworn verdict's final document before it
/// leaves the purchase for the next run.
const FINAL_WAIT: Duration = Duration::from_secs(15 * 60);

/// A test switch: [`FINAL_WAIT`] in seconds, so a test leaves a sworn purchase to the
/// next run without waiting a quarter of an hour.
pub(super) const FINAL_WAIT_SWITCH: &str = "UMPIRE_TEST_FINAL_WAIT_SECS";

/// How long this evaluation waits for a final document, given [`FINAL_WAIT_SWITCH`]'s
/// value: in a build made for tests (feature `test-switches`), the switch's seconds
/// when set, with a warning.
#[cfg(feature = "test-switches")]
pub(super) fn final_wait(switch: Option<String>) -> Result<Duration, Local> {
    let Some(text) = switch else {
        return Ok(FINAL_WAIT);
    };
    let secs: u64 = text.trim().parse().map_err(|_| {
        Local(format!(
            "{FINAL_WAIT_SWITCH}: {text:?} is not a number of seconds"
        ))
    })?;
    eprintln!(
        "warning: test switch {FINAL_WAIT_SWITCH}={secs}: a sworn verdict is waited for {secs} s, not {} s",
        FINAL_WAIT.as_secs()
    );
    Ok(Duration::from_secs(secs))
}

/// Any other build has no code that honours the switch (`#[cfg]`, not a run-time `if`):
/// set, it stops the evaluation before anything is paid, naming it.
#[cfg(not(feature = "test-switches"))]
pub(super) fn final_wait(switch: Option<String>) -> Result<Duration, Local> {
    match switch {
        None => Ok(FINAL_WAIT),
        Some(_) => Err(Local(format!(
            "{FINAL_WAIT_SWITCH} is a test switch, and this build has none (it was built without the test-switches feature, as every release is): remove {FINAL_WAIT_SWITCH} from the environment"
        ))),
    }
}

impl Evaluator<'_> {
    /// The verdict for the job: the one bought for it before (record.rs), read back,
    /// else a new purchase, recorded before anything else can fail. `{document, ...}`.
    pub(super) async fn verdict(
        &self,
        job_ref: &JobRef,
        tier: Tier,
        body: &Value,
    ) -> Result<Value, Step> {
        let key = job_ref.idempotency_key();
        let base = self.api.base();
        if let Some(r) =
            record::load(&self.data_dir, &key).filter(|r| r.base == base && r.tier == tier.as_str())
        {
            eprintln!(
                "reading back verdict {} bought for this job earlier",
                r.verdict_id
            );
            match self.read_back(&r).await? {
                Some(answer) => return Ok(answer),
                None => eprintln!("the service no longer has it; buying anew"),
            }
        }
        eprintln!("buying a {} verdict (Idempotency-Key {key})", tier.as_str());
        let a = match buy_once(self.api, tier.as_str(), body, &self.payer, &key).await {
            Ok(Ok(a)) => a,
            Ok(Err(r)) => return Err(refused_step(&r)),
            Err(e) => return Err(Step::Again(e.0)),
        };
        let s = |k: &str| {
            a.body
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let r = Record {
            job: job_ref.to_string(),
            base: base.to_owned(),
            tier: tier.as_str().to_owned(),
            verdict_id: s("verdict_id"),
            secret: s("secret"),
        };
        if let Err(e) = record::save(&self.data_dir, &key, &r) {
            // The purchase stands; a rerun within a day replays it by its key.
            eprintln!("could not keep a record of the purchase: {}", e.0);
        }
        if a.status == 201 {
            return Ok(a.body);
        }
        self.wait(&r).await
    }

    /// A recorded verdict read from the service: `None` when it is gone.
    async fn read_back(&self, r: &Record) -> Result<Option<Value>, Step> {
        let again = |e: Local| Step::Again(e.0);
        let read = read_header(self.api, &r.verdict_id, &r.secret, self.payer.wallet())
            .await
            .map_err(again)?;
        let st = self
            .api
            .send(
                Method::GET,
                &format!("/v1/verdicts/{}", r.verdict_id),
                &[read],
                None,
            )
            .await
            .map_err(again)?;
        match st.status {
            404 => Ok(None),
            200 if st.body.get("status").and_then(Value::as_str) == Some("final") => {
                Ok(Some(st.body))
            }
            200 => self.wait(r).await.map(Some),
            _ => Err(refused_step(&Refused {
                status: st.status,
                code: st.error_code().unwrap_or("").to_owned(),
            })),
        }
    }

    /// The final document of a purchase still being judged (a sworn verdict): waited
    /// for at most [`FINAL_WAIT`] (see [`final_wait`]), so that a slow one is left to
    /// the next run rather than holding up the others.
    async fn wait(&self, r: &Record) -> Result<Value, Step> {
        match wait_final(
            self.api,
            &r.verdict_id,
            &r.secret,
            &self.payer,
            Some(self.final_wait),
        )
        .await
        {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(refusal)) => Err(refused_step(&refusal)),
            Err(e) => Err(Step::Again(e.0)),
        }
    }
}

/// A refusal from the service: "not now" is tried again, "no" ends the evaluation.
fn refused_step(r: &Refused) -> Step {
    if r.is_transient() {
        Step::Again(format!("the service answered {} {}", r.status, r.code))
    } else {
        Step::Done(ExitCode::from(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/erc8183.md: a sworn verdict is waited for at most 15 minutes, then left for
    /// the next run; only a test build lets the wait be shortened, and any other build
    /// refuses the switch by name. Would catch: the documented bound changed, or a
    /// release honouring a test switch.
    #[test]
    fn a_sworn_verdict_is_waited_for_fifteen_minutes_at_most() {
        assert_eq!(FINAL_WAIT, Duration::from_secs(15 * 60));
        assert_eq!(final_wait(None).map_err(|e| e.0), Ok(FINAL_WAIT));
        #[cfg(feature = "test-switches")]
        assert_eq!(
            final_wait(Some("2".into())).map_err(|e| e.0),
            Ok(Duration::from_secs(2))
        );
        #[cfg(not(feature = "test-switches"))]
        assert!(
            final_wait(Some("2".into())).is_err_and(|e| e.0.contains(FINAL_WAIT_SWITCH)),
            "a build without test switches refuses it by name"
        );
    }
}
