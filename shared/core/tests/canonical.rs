//! Stable JSON against Python itself: vectors Python made (checked in with
//! the script that made them), and a differential run of
//! 10,000+ generated values through `python3`'s json.dumps. If a dependency update or a
//! change of ours moved a single signed byte, these fail.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use umpire_core::json::{Value, parse_str};

/// The stable-JSON vectors Python made (`tests/vectors/make_canonical.py` beside them).
fn vectors_file() -> PathBuf {
    // At run time first: a test binary cargo reuses from another checkout's build (a
    // shared target directory, identical sources) carries that checkout's path in env!.
    PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned()),
    )
    .join("tests/vectors/canonical-json.jsonl")
}

fn python() -> String {
    std::env::var("UMPIRE_PYTHON").unwrap_or_else(|_| "python3".into())
}

#[test]
fn python_vectors_match() {
    let path = vectors_file();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "the test vectors must be present at {}: {e}",
            path.display()
        )
    });
    let mut n = 0;
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let case = parse_str(line).unwrap_or_else(|e| panic!("vector line {i}: {e}"));
        let input = case.get("input").and_then(Value::as_str).expect("input");
        let want = case
            .get("canonical")
            .and_then(Value::as_str)
            .expect("canonical");
        let want_sha = case.get("sha256").and_then(Value::as_str).expect("sha256");
        let got = parse_str(input).unwrap_or_else(|e| panic!("vector {i} input: {e}"));
        let bytes = got.to_canonical_vec();
        assert_eq!(String::from_utf8_lossy(&bytes), want, "vector {i}: {input}");
        assert_eq!(
            umpire_core::hash::sha256_hex(&bytes),
            want_sha,
            "vector {i} sha256"
        );
        n += 1;
    }
    assert!(n >= 18, "only {n} vectors read");
}

/// xorshift64*: deterministic, dependency-free; the seed is printed on failure.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
}

fn ws(r: &mut Rng, out: &mut String) {
    // Newlines would break the line protocol with python; the parser handles them elsewhere.
    for _ in 0..r.below(3) {
        out.push([' ', '\t', '\r'][r.below(3) as usize]);
    }
}

fn gen_char(r: &mut Rng) -> char {
    let pools: &[(u32, u32)] = &[
        (0x20, 0x7e),
        (0x00, 0x1f),
        (0x7f, 0xa0),
        (0xa1, 0x2ff),
        (0x2000, 0x206f),
        (0x4e00, 0x4fff),
        (0xe000, 0xffff),
        (0x1_0000, 0x1_0fff),
        (0x1_f300, 0x1_faff),
        (0x10_fff0, 0x10_ffff),
    ];
    loop {
        let (lo, hi) = pools[r.below(pools.len() as u64) as usize];
        let c = lo + r.below(u64::from(hi - lo + 1)) as u32;
        if let Some(ch) = char::from_u32(c) {
            return ch;
        }
    }
}

fn gen_string(r: &mut Rng, out: &mut String) {
    out.push('"');
    for _ in 0..r.below(12) {
        let c = match r.below(10) {
            0 => '"',
            1 => '\\',
            2 => '\u{2028}',
            _ => gen_char(r),
        };
        let escape = r.chance(30) || c == '"' || c == '\\' || (c as u32) < 0x20;
        if !escape {
            out.push(c);
            continue;
        }
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' if r.chance(50) => out.push_str("\\n"),
            '\t' if r.chance(50) => out.push_str("\\t"),
            '/' => out.push_str("\\/"),
            _ => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    if r.chance(50) {
                        out.push_str(&format!("\\u{:04x}", unit));
                    } else {
                        out.push_str(&format!("\\u{:04X}", unit));
                    }
                }
            }
        }
    }
    out.push('"');
}

fn gen_number(r: &mut Rng, out: &mut String) {
    match r.below(8) {
        0 => out.push_str(&(r.next() as i64 % 1000).to_string()),
        1 => {
            // Huge integers, far beyond 64 bits.
            if r.chance(30) {
                out.push('-');
            }
            out.push(char::from(b'1' + r.below(9) as u8));
            for _ in 0..r.below(60) {
                out.push(char::from(b'0' + r.below(10) as u8));
            }
        }
        2 => out.push_str(if r.chance(50) { "-0" } else { "0" }),
        3 | 4 => {
            // Any finite double, written as Rust writes it in one of several forms.
            let f = loop {
                let f = f64::from_bits(r.next());
                if f.is_finite() {
                    break f;
                }
            };
            match r.below(3) {
                0 => out.push_str(&format!("{f:e}")),
                1 => out.push_str(&format!("{f:E}")),
                _ => out.push_str(&format!("{f:?}")),
            }
        }
        5 => {
            // Decimal text across the exponent range, including near over/underflow.
            if r.chance(50) {
                out.push('-');
            }
            out.push(char::from(b'0' + r.below(10) as u8));
            if r.chance(70) {
                out.push('.');
                for _ in 0..1 + r.below(20) {
                    out.push(char::from(b'0' + r.below(10) as u8));
                }
            }
            out.push(if r.chance(50) { 'e' } else { 'E' });
            match r.below(3) {
                0 => out.push('+'),
                1 => out.push('-'),
                _ => {}
            }
            out.push_str(&r.below(330).to_string());
        }
        6 => {
            let f = (r.next() % 2_000_000) as f64 / 64.0 - 15_000.0;
            out.push_str(&format!("{f:?}"));
        }
        _ => {
            let e = r.below(40) as i32 - 20;
            out.push_str(&format!("{}e{e}", 1 + r.below(9)));
        }
    }
}

fn gen_value(r: &mut Rng, depth: u32, out: &mut String) {
    let kind = if depth >= 4 { r.below(4) } else { r.below(6) };
    match kind {
        0 => out.push_str(["null", "true", "false"][r.below(3) as usize]),
        1 | 2 => gen_number(r, out),
        3 => gen_string(r, out),
        4 => {
            out.push('[');
            let n = r.below(5);
            for i in 0..n {
                if i > 0 {
                    out.push(',');
                }
                ws(r, out);
                gen_value(r, depth + 1, out);
                ws(r, out);
            }
            out.push(']');
        }
        _ => {
            out.push('{');
            let n = r.below(6);
            let mut keys = std::collections::BTreeSet::new();
            let mut first = true;
            for _ in 0..n {
                let mut k = String::new();
                gen_string(r, &mut k);
                // Duplicate keys are refused by design; keep the generated ones unique.
                let Ok(Value::String(decoded)) = parse_str(&k) else {
                    continue;
                };
                if !keys.insert(decoded) {
                    continue;
                }
                if !first {
                    out.push(',');
                }
                first = false;
                ws(r, out);
                out.push_str(&k);
                ws(r, out);
                out.push(':');
                ws(r, out);
                gen_value(r, depth + 1, out);
            }
            out.push('}');
        }
    }
}

const PY_CANON: &str = r#"
import sys, json
out = sys.stdout.buffer
for line in sys.stdin.buffer:
    line = line.rstrip(b"\n")
    try:
        v = json.loads(line.decode("utf-8"))
        s = json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        if "Infinity" in s or "NaN" in s:
            out.write(b"!INF\n")
        else:
            out.write(s.encode("utf-8") + b"\n")
    except Exception as e:
        out.write(b"!ERR " + type(e).__name__.encode() + b"\n")
"#;

#[test]
fn agrees_with_python_on_generated_values() {
    let seed: u64 = std::env::var("UMPIRE_DIFF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EED_CAFE_F00D_0001);
    let count: usize = std::env::var("UMPIRE_DIFF_COUNT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12_000);
    let mut rng = Rng(seed);
    let inputs: Vec<String> = (0..count)
        .map(|_| {
            let mut s = String::new();
            ws(&mut rng, &mut s);
            gen_value(&mut rng, 0, &mut s);
            ws(&mut rng, &mut s);
            s
        })
        .collect();

    let mut child = Command::new(python())
        .args(["-c", PY_CANON])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 must be installed for the differential test");
    let mut stdin = child.stdin.take().expect("stdin");
    let feed = inputs.join("\n") + "\n";
    let writer = std::thread::spawn(move || stdin.write_all(feed.as_bytes()));
    let output = child.wait_with_output().expect("python ran");
    writer.join().expect("writer").expect("fed python");
    assert!(output.status.success(), "python failed");
    let py_lines: Vec<&[u8]> = output.stdout.split(|b| *b == b'\n').collect();

    let mut compared = 0;
    let mut refused_inf = 0;
    for (i, input) in inputs.iter().enumerate() {
        let py = py_lines[i];
        let ours = parse_str(input);
        match (py, ours) {
            (b"!INF", Err(_)) => refused_inf += 1,
            (py, Ok(v)) if !py.starts_with(b"!") => {
                let mine = v.to_canonical_vec();
                assert!(
                    mine == py,
                    "seed {seed:#x}, value {i}: input {input:?}\n ours   {}\n python {}",
                    String::from_utf8_lossy(&mine),
                    String::from_utf8_lossy(py)
                );
                compared += 1;
            }
            (py, ours) => panic!(
                "seed {seed:#x}, value {i}: input {input:?}: python says {}, we say {ours:?}",
                String::from_utf8_lossy(py)
            ),
        }
    }
    assert!(
        compared >= 10_000,
        "only {compared} values compared ({refused_inf} refused as infinite)"
    );
}

#[test]
fn signed_bytes_of_a_fixed_document_never_change() {
    // A fixed document and key: if a dependency or our encoder changes a byte or the
    // signature scheme, this digest and signature change and the test says so.
    use umpire_core::document::sign;
    use umpire_core::signer::LocalSigner;
    let doc = parse_str(
        r#"{"a":[1,1.0,-0.0,1e-05,1e+16,12345678901234567890,"é\u2028🚀\u0000"],"b":{"z":null,"y":true},"c":0.1}"#,
    )
    .expect("json");
    let signed = sign(doc, &LocalSigner::from_seed([42u8; 32]));
    let sig = signed.get("signature").expect("signature");
    assert_eq!(
        sig.get("payload_sha256").and_then(Value::as_str),
        Some("c39ce541d8e5c2d9fe6e600381237e83c4093d3d2a576d7ac1ca5c317a49eab4")
    );
    assert_eq!(
        sig.get("sig_base64").and_then(Value::as_str),
        Some(
            "83pcwVe75JVswDKk72pOYSAeMyNzlKP8N6C563dPzKhroy1kufzm/g/Ar4yU7xW9usqyolEPc/NDrdOoAgFCAA=="
        )
    );
}

const PY_CANON_B64: &str = r#"
import sys, json, base64
out = sys.stdout.buffer
for line in sys.stdin.buffer:
    try:
        v = json.loads(base64.b64decode(line.strip()).decode("utf-8"))
        s = json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        if "Infinity" in s or "NaN" in s:
            out.write(b"!INF\n")
        else:
            out.write(base64.b64encode(s.encode("utf-8")) + b"\n")
    except Exception as e:
        out.write(b"!ERR " + type(e).__name__.encode() + b"\n")
"#;

/// `make fuzz` runs this over the stable_json fuzz corpus (`UMPIRE_FUZZ_CORPUS`): every
/// input both sides accept encodes to the same bytes, and nothing we accept is refused
/// by Python (we may refuse more: NaN, Infinity, lone surrogates, excessive depth).
#[test]
#[ignore = "needs a fuzz corpus: make fuzz runs it"]
fn fuzz_corpus_agrees_with_python() {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let dir =
        std::env::var("UMPIRE_FUZZ_CORPUS").expect("UMPIRE_FUZZ_CORPUS: the corpus directory");
    let inputs: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read(e.path()).ok())
        .collect();
    assert!(!inputs.is_empty(), "{dir} is empty");
    let mut child = Command::new(python())
        .args(["-c", PY_CANON_B64])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut stdin = child.stdin.take().expect("stdin");
    let feed: String = inputs.iter().map(|i| b64.encode(i) + "\n").collect();
    let writer = std::thread::spawn(move || stdin.write_all(feed.as_bytes()));
    let output = child.wait_with_output().expect("python ran");
    writer.join().expect("writer").expect("fed python");
    let py_lines: Vec<&[u8]> = output.stdout.split(|b| *b == b'\n').collect();
    let (mut agreed, mut we_refused) = (0, 0);
    for (i, input) in inputs.iter().enumerate() {
        let py = py_lines[i];
        match umpire_core::json::parse(input) {
            Ok(v) => {
                assert!(
                    !py.starts_with(b"!"),
                    "we accept what Python refuses ({}): {:?}",
                    String::from_utf8_lossy(py),
                    String::from_utf8_lossy(input)
                );
                let want = b64.decode(py).expect("python base64");
                assert_eq!(
                    String::from_utf8_lossy(&v.to_canonical_vec()),
                    String::from_utf8_lossy(&want),
                    "input {:?}",
                    String::from_utf8_lossy(input)
                );
                agreed += 1;
            }
            Err(_) => we_refused += 1,
        }
    }
    eprintln!("{agreed} corpus inputs encode as Python does; {we_refused} refused by us");
    assert!(agreed > 0, "no corpus input parsed");
}
