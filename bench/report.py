"""Prints the figures of `make bench` from one run: criterion's medians (Rust), the
reference TypeScript x402 verifier and the contract's Python recipe on the same inputs,
as ratios against issue 10's targets. Figures not measured yet are listed as such.
usage: python bench/report.py CRITERION_DIR BENCH_DIR"""
import json
import os
import subprocess
import sys

criterion, bench_dir = sys.argv[1], sys.argv[2]


def median_ns(name):
    path = os.path.join(criterion, name, "new", "estimates.json")
    try:
        return json.load(open(path))["median"]["point_estimate"]
    except OSError:
        return None


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def us(ns):
    return "n/a" if ns is None else f"{ns / 1000:.1f} µs"


rows = []
sign = median_ns("stable_json_and_sign")
floor = median_ns("floor_sha256_and_sign_same_bytes")
if sign and floor:
    rows.append(("stable JSON + Ed25519 sign, typical verdict", us(sign), f"{sign / floor:.2f}x the sha256+sign floor ({us(floor)})", "<= 1.2x", sign / floor <= 1.2))
judge = median_ns("judge_10_checks_200kb_in_process")
worker = median_ns("judge_10_checks_200kb_warm_worker")
if judge and worker:
    rows.append(("judge 10 checks / 200 KB, warm isolated worker", us(worker), f"in-process {us(judge)}; the worker's share {100 * (1 - judge / worker):.0f}%", "<= 5 ms", worker <= 5e6))
x402 = median_ns("x402_verify_eip3009_offline")
payloads = os.path.join(bench_dir, "x402_payloads.json")
if x402 and os.path.exists(payloads):
    ts = run_json(["node", "bench/x402_verify.mjs", payloads])["median_ns_per_verify"]
    rows.append(("x402 EIP-3009 verify (no RPC)", us(x402), f"TypeScript (viem verifyTypedData) {us(ts)}: {ts / x402:.1f}x faster", ">= 20x", ts / x402 >= 20))
verdict = os.path.join(bench_dir, "verdict.json")
if sign and os.path.exists(verdict):
    py = run_json([sys.executable, "bench/python_recipe.py", verdict])
    rows.append((f"stable JSON + sign vs the Python recipe ({py['bytes']} B)", us(sign), f"Python {us(py['median_ns'])}: {py['median_ns'] / sign:.1f}x faster", ">= 2.5x", py["median_ns"] / sign >= 2.5))



def http_load(path, script=None, seconds=10, connections=32):
    """wrk against a fresh `umpire serve` (release, rate limits off): req/s, p50, p99."""
    import re
    import shutil
    import tempfile

    umpire = os.environ.get("UMPIRE_BIN")
    if not umpire or not shutil.which("wrk"):
        return None
    data = tempfile.mkdtemp(prefix="umpire-bench-")
    env = dict(os.environ, UMPIRE_RATE_LIMITS="off", RUST_LOG="warn")
    server = subprocess.Popen([umpire, "serve", "--addr", "127.0.0.1:0", "--data-dir", data],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    try:
        addr = server.stdout.readline().strip().removeprefix("umpire listening on ")
        cmd = ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency"]
        if script:
            cmd += ["-s", script]
        out = subprocess.run(cmd + [addr + path], check=True, capture_output=True, text=True).stdout

        def ms(label):
            m = re.search(rf"^\s*{label}\s+([0-9.]+)(us|ms|s)\s*$", out, re.M)
            if not m:
                return None
            return float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[m.group(2)]

        rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))
        non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
        return rps, ms("50%"), ms("99%"), int(non2xx.group(1)) if non2xx else 0
    finally:
        server.kill()
        server.wait()


for name, path, script in [("HTTP POST /v1/validate, 32 connections (wrk)", "/v1/validate", "bench/validate.lua"),
                           ("HTTP GET /healthz, 32 connections (wrk)", "/healthz", None)]:
    r = http_load(path, script)
    if r is None:
        continue
    rps, p50, p99, bad = r
    rows.append((name, f"{rps:,.0f}/s", f"p50 {p50:.2f} ms, p99 {p99:.2f} ms, non-2xx {bad}", ">=5k/s p99<10ms" if "validate" in path else "-", rps >= 5000 and p99 < 10 and bad == 0))

print()
print(f"{'figure':<52} {'Rust':>10}  {'comparison':<60} {'target':>8}  met")
for name, rust, comparison, target, met in rows:
    print(f"{name:<52} {rust:>10}  {comparison:<60} {target:>8}  {'yes' if met else 'NO'}")
print()
print("not measured by make bench yet: replayed idempotent verdicts under load and per-function cold start;")
print("bootstrap sizes come from `make lambda-build` (see BENCHMARKS.md).")
