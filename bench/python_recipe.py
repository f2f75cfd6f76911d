"""The contract's own recipe in Python on the typical verdict document the Rust bench
wrote: json.dumps(sort_keys, compact, ensure_ascii=False) + sha256 + Ed25519 sign
(`cryptography`). Prints {"median_ns": n, "bytes": b} as one JSON line.
usage: python bench/python_recipe.py $UMPIRE_BENCH_DIR/verdict.json"""
import hashlib
import json
import statistics
import sys
import time

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

doc = json.loads(open(sys.argv[1], encoding="utf-8").read())
key = Ed25519PrivateKey.from_private_bytes(bytes([1] * 32))


def sign(d):
    payload = json.dumps(d, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(payload).hexdigest(), key.sign(payload)


n = 2000
for _ in range(200):
    sign(doc)
samples = []
for _ in range(7):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        sign(doc)
    samples.append((time.perf_counter_ns() - t0) / n)
size = len(json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
print(json.dumps({"median_ns": round(statistics.median(samples)), "bytes": size}))
