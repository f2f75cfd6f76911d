//! The worker side and the wire format.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use umpire_core::eval::{FetchedBody, Outcome, evaluate};
use umpire_core::hash::sha256_hex;
use umpire_core::json::{Value, parse};
use umpire_core::spec::{Check, Deliverable, parse_spec};

/// The version of the request line; a worker refuses any other.
pub const PROTOCOL: u64 = 2;

/// How a checker names a request of another protocol version in its refusal: a caller
/// meeting it mid-deploy (the two functions' aliases moved apart) says so and asks for
/// a retry, rather than failing as if something broke.
pub const PROTOCOL_MISMATCH: &str = "speaks checker protocol";

/// One pass of one verdict, as sent to a worker.
#[derive(Debug, Clone)]
pub struct JudgeRequest {
    /// The normalized spec (already validated by the caller).
    pub spec: Value,
    pub deliverable: Deliverable,
    /// Per check: the fetched response for network checks, None otherwise. Checks on
    /// the same URL share one body.
    pub fetched: Vec<Option<Arc<FetchedBody>>>,
}

impl JudgeRequest {
    pub(crate) fn line(&self, start: usize) -> Vec<u8> {
        self.line_for(start, self.check_count())
    }

    /// The request for checks `start..end` only, as one line (the checker Lambda's
    /// payload, and a single check's retry after a batch died).
    ///
    /// A request carries only what its checks read. Each body travels once, under its
    /// sha256, however many checks read it, and only for checks in `start..end`: three
    /// checks on one 2 MB body cost one base64 copy (2.7 MB), not three (8 MB, over
    /// Lambda's 6 MB payload limit). The deliverable's text and JSON travel only when a
    /// check in the range reads them, so a URL check never carries a large deliverable.
    pub fn line_for(&self, start: usize, end: usize) -> Vec<u8> {
        let checks: &[Value] = self
            .spec
            .get("checks")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice);
        let (mut text, mut json) = (false, false);
        for c in checks.get(start..end.min(checks.len())).unwrap_or_default() {
            let (t, j) = Check::reads_of_normalized(c);
            text |= t;
            json |= j;
        }
        let deliverable = Deliverable {
            text: self.deliverable.text.clone().filter(|_| text),
            json: self.deliverable.json.clone().filter(|_| json),
        };
        let mut bodies = Value::object();
        let fetched: Vec<Value> = self
            .fetched
            .iter()
            .enumerate()
            .map(|(i, f)| match f {
                None => Value::Null,
                Some(f) => {
                    let sha = sha256_hex(&f.body);
                    if (start..end).contains(&i) && bodies.get(&sha).is_none() {
                        bodies.insert(sha.as_str(), B64.encode(&f.body));
                    }
                    Value::object()
                        .with("status", f.status)
                        .with("body_sha256", sha)
                        .with("truncated", f.truncated)
                }
            })
            .collect();
        let v = Value::object()
            .with("protocol", PROTOCOL)
            .with("spec", self.spec.clone())
            .with("deliverable", deliverable.hash_input())
            .with("fetched", Value::Array(fetched))
            .with("bodies", bodies)
            .with("start", start)
            .with("end", end);
        let mut line = v.to_canonical_vec();
        line.push(b'\n');
        line
    }

    pub fn check_count(&self) -> usize {
        self.spec
            .get("checks")
            .and_then(Value::as_array)
            .map_or(0, Vec::len)
    }
}

/// What a worker answers for one check.
pub fn parse_answer(line: &str) -> Option<(usize, Outcome)> {
    let v = parse(line.as_bytes()).ok()?;
    let index = usize::try_from(v.get("index")?.as_u64()?).ok()?;
    Some((
        index,
        Outcome {
            passed: v.get("passed")?.as_bool()?,
            reason: v.get("reason")?.as_str()?.to_owned(),
        },
    ))
}

/// A request as the worker sees it.
struct Decoded {
    checks: Vec<umpire_core::spec::Check>,
    deliverable: Deliverable,
    fetched: Vec<Option<FetchedBody>>,
    start: usize,
    end: usize,
}

fn decode_request(line: &str) -> Result<Decoded, String> {
    let v = parse(line.as_bytes()).map_err(|e| e.to_string())?;
    // A request from another version of the protocol is refused, never half-read: a
    // check judged without the body it reads would be signed as failed.
    if v.get("protocol").and_then(Value::as_u64) != Some(PROTOCOL) {
        return Err(format!(
            "the request {PROTOCOL_MISMATCH} {:?}, this worker {PROTOCOL}",
            v.get("protocol")
        ));
    }
    let spec = parse_spec(v.get("spec").ok_or("no spec")?, None)
        .map_err(|p| format!("invalid spec: {p:?}"))?;
    let d = v.get("deliverable").ok_or("no deliverable")?;
    let deliverable = Deliverable {
        text: d.get("text").and_then(Value::as_str).map(str::to_owned),
        json: d.get("json").filter(|j| **j != Value::Null).cloned(),
    };
    let start = v
        .get("start")
        .and_then(Value::as_u64)
        .and_then(|s| usize::try_from(s).ok())
        .unwrap_or(0);
    let end = v
        .get("end")
        .and_then(Value::as_u64)
        .and_then(|s| usize::try_from(s).ok())
        .unwrap_or(usize::MAX);
    // Each body once, checked against the hash it travels under.
    let mut bodies: BTreeMap<&str, Vec<u8>> = BTreeMap::new();
    if let Some(m) = v.get("bodies").and_then(Value::as_object) {
        for (sha, b64) in m {
            let body = B64
                .decode(b64.as_str().ok_or("a body is not a string")?)
                .map_err(|e| format!("a body is not base64: {e}"))?;
            if sha256_hex(&body) != *sha {
                return Err(format!("the body sent as {sha} has another sha256"));
            }
            bodies.insert(sha.as_str(), body);
        }
    }
    let mut fetched = Vec::new();
    for (i, f) in v
        .get("fetched")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .enumerate()
    {
        if *f == Value::Null || !(start..end).contains(&i) {
            fetched.push(None);
            continue;
        }
        let field = |k: &str| f.get(k).ok_or_else(|| format!("fetched[{i}] has no {k}"));
        let sha = field("body_sha256")?.as_str().unwrap_or_default();
        fetched.push(Some(FetchedBody {
            status: field("status")?
                .as_u64()
                .and_then(|s| u16::try_from(s).ok())
                .ok_or_else(|| format!("fetched[{i}].status is not an HTTP status"))?,
            body: bodies
                .get(sha)
                .cloned()
                .ok_or_else(|| format!("the body of check {i} was not sent"))?,
            truncated: field("truncated")?.as_bool().unwrap_or_default(),
        }));
    }
    Ok(Decoded {
        checks: spec.checks,
        deliverable,
        fetched,
        start,
        end,
    })
}

/// Serves requests from `input` until it closes. Errors in a request are reported as
/// failed checks; only I/O errors end the loop.
pub fn worker_loop(input: impl BufRead, mut output: impl Write) -> std::io::Result<()> {
    for line in input.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        match decode_request(&line) {
            Ok(request) => answer(request, &mut output)?,
            Err(e) => write_line(&mut output, &Value::object().with("error", e))?,
        }
    }
    Ok(())
}

/// Judges the requested checks in order, one answer line each, flushed as it is known
/// (the parent's deadline is per check).
fn answer(request: Decoded, output: &mut impl Write) -> std::io::Result<()> {
    let Decoded {
        checks,
        deliverable,
        fetched,
        start,
        end,
    } = request;
    for (i, check) in checks
        .iter()
        .enumerate()
        .skip(start)
        .take(end.saturating_sub(start))
    {
        let fetched_i = fetched.get(i).and_then(Option::as_ref);
        let o = evaluate(check, &deliverable, fetched_i);
        write_line(
            output,
            &Value::object()
                .with("index", i)
                .with("passed", o.passed)
                .with("reason", o.reason),
        )?;
    }
    Ok(())
}

fn write_line(output: &mut impl Write, v: &Value) -> std::io::Result<()> {
    let mut bytes = v.to_canonical_vec();
    bytes.push(b'\n');
    output.write_all(&bytes)?;
    output.flush()
}

/// Judges one request line in this process and returns the answer lines, or why the
/// request cannot be read: the body of the checker Lambda, whose own timeout is the
/// hard limit around it.
pub fn judge_line(request: &str) -> Result<String, String> {
    let decoded = decode_request(request)?;
    let mut out = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = answer(decoded, &mut out);
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Entry point for a binary acting as a worker: serve stdin/stdout until stdin closes.
pub fn worker_main() -> std::io::Result<()> {
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    worker_loop(stdin.lock(), stdout.lock())
}

#[cfg(test)]
mod tests {
    use super::*;
    use umpire_core::json::parse_str;

    fn request() -> JudgeRequest {
        let spec = parse_spec(
            &parse_str(
                r#"{"checks":[{"type":"url_probe","url":"https://a.example/","expect":{"keyword":"ok"}},{"type":"regex","pattern":"^t"},{"type":"json_path","path":"a","op":"exists"}]}"#,
            )
            .expect("json"),
            None,
        )
        .expect("spec");
        JudgeRequest {
            spec: spec.normalized,
            deliverable: Deliverable {
                text: Some("text".into()),
                json: Some(parse_str(r#"{"a":1}"#).expect("json")),
            },
            fetched: vec![
                Some(Arc::new(FetchedBody {
                    status: 200,
                    body: b"ok".to_vec(),
                    truncated: false,
                })),
                None,
                None,
            ],
        }
    }

    fn line_value(req: &JudgeRequest, start: usize, end: usize) -> Value {
        parse(&req.line_for(start, end)).expect("a line is JSON")
    }

    #[test]
    fn a_line_carries_only_what_its_checks_read() {
        let req = request();
        let url_only = line_value(&req, 0, 1);
        assert_eq!(
            url_only.get("deliverable"),
            Some(
                &Value::object()
                    .with("json", Value::Null)
                    .with("text", Value::Null)
            )
        );
        assert_eq!(
            url_only
                .get("bodies")
                .and_then(Value::as_object)
                .map(|m| m.len()),
            Some(1)
        );
        let text_only = line_value(&req, 1, 2);
        assert_eq!(
            text_only.get("deliverable").and_then(|d| d.get("text")),
            Some(&Value::from("text"))
        );
        assert_eq!(
            text_only.get("deliverable").and_then(|d| d.get("json")),
            Some(&Value::Null)
        );
        assert_eq!(
            text_only
                .get("bodies")
                .and_then(Value::as_object)
                .map(|m| m.len()),
            Some(0)
        );
        // Judged from those lines, every check still has what it reads.
        for (start, end) in [(0, 1), (1, 2), (2, 3), (0, 3)] {
            let line = String::from_utf8(req.line_for(start, end)).expect("utf-8");
            let answers = judge_line(&line).expect("judged");
            for a in answers.lines() {
                let (i, o) = parse_answer(a).expect("answer");
                assert!(o.passed, "check {i} from {start}..{end}: {}", o.reason);
            }
        }
    }

    #[test]
    fn a_line_without_its_body_or_of_another_protocol_is_refused() {
        let req = request();
        let line = String::from_utf8(req.line_for(0, 1)).expect("utf-8");
        let sha = sha256_hex(b"ok");
        let without_body = line.replace(&format!("\"{sha}\":\"b2s=\""), "");
        assert_ne!(without_body, line);
        assert!(
            judge_line(&without_body).is_err_and(|e| e.contains("body of check 0 was not sent")),
        );
        let old = line.replace("\"protocol\":2,", "");
        assert!(judge_line(&old).is_err_and(|e| e.contains("protocol")));
    }
}
