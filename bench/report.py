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

print()
print(f"{'figure':<52} {'Rust':>10}  {'comparison':<60} {'target':>8}  met")
for name, rust, comparison, target, met in rows:
    print(f"{name:<52} {rust:>10}  {comparison:<60} {target:>8}  {'yes' if met else 'NO'}")
print()
print("not measured by make bench yet: HTTP load (validate, replays) and per-function cold start;")
print("bootstrap sizes come from `make lambda-build` (see BENCHMARKS.md).")
