"""Unpaid requests whose URLs' names never resolve, against an `umpire serve` whose DNS
server never answers (both run in one network namespace; see tests/load.rs). Meanwhile it
times /healthz and a store write (validate, which counts a rate-limit window in the
store). Prints one JSON line:
{"health_ms": [...], "write_ms": [...], "answered_ms": [...], "statuses": {...},
"took_s": ...}.

    python3 dns_blackhole_load.py --addr 127.0.0.1:PORT --requests 600
"""
import argparse
import http.client
import json
import threading
import time

args = argparse.ArgumentParser()
args.add_argument("--addr", required=True)
args.add_argument("--requests", type=int, default=600)
args = args.parse_args()
host, port = args.addr.rsplit(":", 1)
port = int(port)


def call(method, path, body=None, timeout=60):
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    headers = {"Content-Type": "application/json"} if body else {}
    c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    r.read()
    c.close()
    return r.status


def timed(method, path, body=None):
    t = time.perf_counter()
    call(method, path, body)
    return (time.perf_counter() - t) * 1000


statuses = {}
answered_ms = []
lock = threading.Lock()


def unpaid(i):
    # A url_probe on a name no DNS server will answer for: resolved before the 402.
    body = json.dumps({
        "spec": {"checks": [{"type": "url_probe", "url": f"https://host-{i}.example.com/",
                             "expect": {"status": 200}}]},
        "deliverable": {"text": "deployed"},
    })
    t = time.perf_counter()
    try:
        s = call("POST", "/v1/verdicts/witness", body)
    except Exception as e:  # noqa: BLE001 - counted, the test reads it
        s = type(e).__name__
    with lock:
        statuses[str(s)] = statuses.get(str(s), 0) + 1
        answered_ms.append((time.perf_counter() - t) * 1000)


write = json.dumps({"tier": "basic", "spec": {"checks": [{"type": "length", "min": 1}]}})
# Before the flood: the store write's own latency.
baseline = [timed("POST", "/v1/validate", write) for _ in range(20)]
started = time.perf_counter()
threads = [threading.Thread(target=unpaid, args=(i,)) for i in range(args.requests)]
for t in threads:
    t.start()
health, writes = [], []
while any(t.is_alive() for t in threads):
    health.append(timed("GET", "/healthz"))
    if len(health) % 5 == 0:
        writes.append(timed("POST", "/v1/validate", write))
    time.sleep(0.02)
for t in threads:
    t.join()
print(json.dumps({
    "health_ms": health,
    "write_ms": writes,
    "write_baseline_ms": baseline,
    "statuses": statuses,
    "answered_ms": answered_ms,
    "took_s": time.perf_counter() - started,
}))
