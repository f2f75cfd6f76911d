//! What a watched job's description names, and fetching it: the brief (the spec,
//! inline or at a hashed URL, the tier, where the deliverable is) read from the job's
//! description, then the spec and the deliverable fetched as the service fetches.

use alloy::primitives::B256;
use umpire_core::json::Value;
use umpire_core::product::Tier;
use umpire_escrow::{JobRef, bytes32_hex};

use super::{Step, skip};

/// How a job's description tells a watching evaluator what to judge: a JSON object
/// whose `umpire` member holds the spec (inline, or a URL with its sha256) and where
/// the provider publishes its deliverable (docs/erc8183.md).
#[derive(Debug, PartialEq)]
pub(super) struct Brief {
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

/// The brief in a job's description: `Err` says why there is none a watch can follow.
pub(super) fn brief(description: &str) -> Result<Brief, String> {
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

/// The tier a brief asks for, no dearer than `ceiling` (a brief naming none gets the
/// ceiling): `Err` says why the job is skipped.
pub(super) fn brief_tier(brief: &Brief, ceiling: Tier) -> Result<Tier, String> {
    match brief.tier.as_deref() {
        None => Ok(ceiling),
        Some(name) => match Tier::parse(name) {
            Some(t) if t.price().usdc_units <= ceiling.price().usdc_units => Ok(t),
            Some(t) => Err(format!(
                "its brief asks for a {} verdict, dearer than --tier {}",
                t.as_str(),
                ceiling.as_str()
            )),
            None => Err(format!("its brief names no tier we sell ({name:?})")),
        },
    }
}

/// The spec and the deliverable a brief points to, fetched for the job committed to
/// `commitment`. A URL the fetch policy refuses, or a spec that is not the one the
/// brief fixed, skips the job; a fetch that fails may work at the next poll.
pub(super) async fn inputs(
    job_ref: &JobRef,
    brief: Brief,
    commitment: B256,
    fetcher: &umpire_fetch::Fetcher,
) -> Result<(Value, Value), Step> {
    let deliverable_url = brief
        .deliverable_url
        .replace("{job_id}", &job_ref.job_id.to_string())
        .replace("{commitment}", &bytes32_hex(&commitment));
    // The URL policy, as the service applies it when a spec is validated: a URL it
    // refuses is refused for good (the fetcher applies it again to every hop).
    let urls = match &brief.spec {
        SpecSource::Url { url, .. } => vec![url.as_str(), deliverable_url.as_str()],
        SpecSource::Inline(_) => vec![deliverable_url.as_str()],
    };
    for u in urls {
        if let Err(e) = fetcher.policy().check_url(u) {
            return Err(skip(job_ref, format!("{u}: {}", e.message)));
        }
    }
    let spec = fetched_spec(job_ref, brief.spec, fetcher).await?;
    let url = deliverable_url;
    let deliverable = match fetch(fetcher, &url).await {
        Ok(bytes) => match json(&url, &bytes) {
            Ok(v) => v,
            // Not JSON now may be JSON once the provider has published it.
            Err(e) => return Err(Step::Again(format!("the deliverable: {e}"))),
        },
        Err(e) => return Err(Step::Again(format!("the deliverable: {e}"))),
    };
    Ok((spec, deliverable))
}

/// The spec a brief names: inline, or fetched and used only if it hashes to what the
/// brief fixed.
async fn fetched_spec(
    job_ref: &JobRef,
    source: SpecSource,
    fetcher: &umpire_fetch::Fetcher,
) -> Result<Value, Step> {
    match source {
        SpecSource::Inline(v) => Ok(v),
        SpecSource::Url { url, sha256 } => {
            let bytes = match fetch(fetcher, &url).await {
                Ok(b) => b,
                Err(e) => return Err(Step::Again(format!("the spec: {e}"))),
            };
            let got = umpire_core::hash::sha256_hex(&bytes);
            if got != sha256 {
                return Err(skip(
                    job_ref,
                    format!(
                        "the spec at {url} hashes to {got}, not the brief's spec_sha256 {sha256}"
                    ),
                ));
            }
            json(&url, &bytes).map_err(|e| skip(job_ref, format!("the spec: {e}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A local server answering every path with `body`, recording the paths asked.
    fn serve(
        body: &'static str,
    ) -> (
        std::net::SocketAddr,
        std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    ) {
        use std::io::{Read as _, Write as _};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = asked.clone();
        std::thread::spawn(move || {
            for mut conn in listener.incoming().flatten() {
                let mut buf = [0u8; 4096];
                let n = conn.read(&mut buf).unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
                log.lock().unwrap_or_else(|p| p.into_inner()).push(path);
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        (addr, asked)
    }

    fn fetcher(allow: Option<std::net::IpAddr>) -> umpire_fetch::Fetcher {
        umpire_fetch::Fetcher::new(
            umpire_fetch::FetchConfig {
                policy: umpire_fetch::Policy {
                    test_allow: allow.into_iter().collect(),
                },
                politeness: std::time::Duration::ZERO,
                ..umpire_fetch::FetchConfig::default()
            },
            std::sync::Arc::new(umpire_fetch::StaticResolver::default()),
        )
        .expect("fetcher")
    }

    /// docs/erc8183.md: a `spec_url` whose bytes do not hash to `spec_sha256` skips the
    /// job (nothing fetched after it, nothing paid); `{job_id}` in `deliverable_url`
    /// becomes the job's id; and the brief's URLs go through the fetcher's URL policy,
    /// so a deliverable at a private address is refused and never asked. Would catch: a
    /// spec swapped after the job was funded judged anyway, the placeholder left in the
    /// URL, or a brief that points the evaluator's machine at its own network.
    #[tokio::test]
    async fn a_briefs_spec_must_hash_and_its_urls_keep_the_policy() {
        const BODY: &str = r#"{"checks":[{"type":"length","min":1}]}"#;
        let (addr, asked) = serve(BODY);
        let job: JobRef = "eip155:8453:0x1111111111111111111111111111111111111111:42"
            .parse()
            .expect("job");
        let commitment = B256::repeat_byte(7);
        let spec_url = format!("http://{addr}/spec.json");
        let with_hash = |sha256: String| Brief {
            tier: None,
            spec: SpecSource::Url {
                url: spec_url.clone(),
                sha256,
            },
            deliverable_url: format!("http://{addr}/jobs/{{job_id}}.json"),
        };
        let allowed = fetcher(Some(addr.ip()));
        // Another spec than the brief fixed: skipped (done, nothing paid), and the
        // deliverable is never fetched.
        let wrong = inputs(&job, with_hash("ab".repeat(32)), commitment, &allowed).await;
        assert!(matches!(wrong, Err(Step::Done(_))), "skipped");
        assert_eq!(*asked.lock().expect("log"), vec!["/spec.json".to_owned()]);
        // The right spec: the deliverable is asked at the job's own URL.
        let right = umpire_core::hash::sha256_hex(BODY.as_bytes());
        let (spec, _) = inputs(&job, with_hash(right.clone()), commitment, &allowed)
            .await
            .unwrap_or_else(|_| panic!("the spec and the deliverable"));
        assert!(spec.get("checks").is_some());
        assert_eq!(
            asked.lock().expect("log").last().map(String::as_str),
            Some("/jobs/42.json"),
            "{{job_id}} became the job's id"
        );
        // The shipped policy (no test allowance): a loopback URL is refused, never asked.
        let before = asked.lock().expect("log").len();
        let refused = inputs(&job, with_hash(right), commitment, &fetcher(None)).await;
        assert!(
            matches!(refused, Err(Step::Done(_))),
            "skipped by the policy"
        );
        assert_eq!(
            asked.lock().expect("log").len(),
            before,
            "nothing was fetched"
        );
    }

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
