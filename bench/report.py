"""Prints the figures of `make bench` from one run: criterion's medians (Rust), the
reference TypeScript x402 verifier and the contract's Python recipe on the same inputs,
as ratios against issue 10's targets. Figures not measured yet are listed as such.
usage: python bench/report.py CRITERION_DIR BENCH_DIR"""
import json
import os
import subprocess
import sys
import threading
import time

criterion, bench_dir = sys.argv[1], sys.argv[2]
# UMPIRE_BENCH_ONLY=paid|like_base runs that section of the paid path alone (the
# criterion rows are read either way: they cost nothing).
ONLY = os.environ.get("UMPIRE_BENCH_ONLY")


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
encode = median_ns("stable_json_only")
if sign and floor:
    rows.append(("stable JSON + Ed25519 sign, typical verdict", us(sign), f"{sign / floor:.2f}x the sha256+sign floor ({us(floor)}); the encoder alone {us(encode)}", "<= 1.2x", sign / floor <= 1.2))
judge = median_ns("judge_10_checks_200kb_in_process")
worker = median_ns("judge_10_checks_200kb_warm_worker")
lambda_worker = median_ns("judge_10_checks_200kb_warm_lambda_worker")
if judge and worker:
    rows.append(("judge 10 checks / 200 KB, warm isolated worker", us(worker), f"in-process {us(judge)}; the worker's share {100 * (1 - judge / worker):.0f}%", "<= 5 ms", worker <= 5e6))
if lambda_worker:
    rows.append(("the same, in the worker function's checker (built for size)", us(lambda_worker), f"{lambda_worker / worker:.2f}x the umpire binary's worker" if worker else "", "<= 5 ms", lambda_worker <= 5e6))
x402 = median_ns("x402_verify_eip3009_offline")
payloads = os.path.join(bench_dir, "x402_payloads.json")
if x402 and os.path.exists(payloads):
    ts = run_json(["node", "bench/x402_verify.mjs", payloads])["median_ns_per_verify"]
    rows.append(("x402 EIP-3009 verify (no RPC)", us(x402), f"TypeScript (viem verifyTypedData) {us(ts)}: {ts / x402:.1f}x faster", ">= 20x", ts / x402 >= 20))
verdict = os.path.join(bench_dir, "verdict.json")
if sign and os.path.exists(verdict):
    py = run_json([sys.executable, "bench/python_recipe.py", verdict])
    rows.append((f"stable JSON + sign vs the Python recipe ({py['bytes']} B)", us(sign), f"Python {us(py['median_ns'])}: {py['median_ns'] / sign:.1f}x faster", ">= 2.5x", py["median_ns"] / sign >= 2.5))



def start_umpire(extra_env=None):
    """A fresh release `umpire serve` (rate limits out of reach); (process, base URL)."""
    import tempfile

    umpire = os.environ.get("UMPIRE_BIN")
    data = tempfile.mkdtemp(prefix="umpire-bench-")
    # Every bucket raised (a release build refuses UMPIRE_RATE_LIMITS=off, a test switch).
    limits = {f"UMPIRE_RATE_LIMIT_{b}": "1000000000" for b in
              ("FEEDBACK", "VALIDATE", "FIND", "STATUS", "QUOTE", "MCP", "REPLAY", "UNPAID")}
    env = dict(os.environ, RUST_LOG="warn", **limits, **(extra_env or {}))
    server = subprocess.Popen([umpire, "serve", "--addr", "127.0.0.1:0", "--data-dir", data],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    return server, server.stdout.readline().strip().removeprefix("umpire listening on ")


def wrk(url, script=None, seconds=10, connections=32):
    """wrk's req/s, p50, p99 (ms) and non-2xx count."""
    import re

    cmd = ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency"]
    if script:
        cmd += ["-s", script]
    out = subprocess.run(cmd + [url], check=True, capture_output=True, text=True).stdout

    def ms(label):
        m = re.search(rf"^\s*{label}\s+([0-9.]+)(us|ms|s)\s*$", out, re.M)
        if not m:
            return None
        return float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[m.group(2)]

    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return rps, ms("50%"), ms("99%"), int(non2xx.group(1)) if non2xx else 0


def http_load(path, script=None):
    """wrk against a fresh `umpire serve` with no payment rails."""
    import shutil

    if not os.environ.get("UMPIRE_BIN") or not shutil.which("wrk"):
        return None
    server, base = start_umpire()
    try:
        return wrk(base + path, script)
    finally:
        server.kill()
        server.wait()


REPLAY_BODY = '{"spec":{"checks":[{"type":"regex","pattern":"^# Report"},{"type":"length","unit":"words","min":3}]},"deliverable":{"text":"# Report\\nall tests pass"}}'


ANVIL_BIN = os.path.join("node_modules", "@foundry-rs", "anvil-linux-amd64", "bin", "anvil")


def start_anvil():
    """A fresh anvil on a free port with the test token deployed; (process, devnet.json
    path, devnet). History is kept: with --prune-history, about 2% of the reference
    facilitator's `eth_call` simulations at "latest" failed with "Invalid parameters"
    under load, and it refused those payments."""
    anvil = subprocess.Popen([ANVIL_BIN, "--host", "127.0.0.1", "--port", "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for line in anvil.stdout:
            if line.startswith("Listening on "):
                rpc = "http://" + line.strip().removeprefix("Listening on ")
                break
        threading.Thread(target=lambda: [None for _ in anvil.stdout], daemon=True).start()
        devnet_json = os.path.join(bench_dir, "devnet.json")
        # $1M for the payer: a thousand $1 purchases per contender and room to spare.
        devnet = run_json(["node", "infra/devnet/deploy.mjs", "--rpc", rpc, "--out", devnet_json,
                           "--mint", str(10**12)])
        return anvil, devnet_json, devnet
    except BaseException:
        stop(anvil)
        raise


def stop(process):
    process.kill()
    process.wait()


def start_node(cmd, stderr=subprocess.DEVNULL):
    """A Node server printing {"port": N} once listening; (process, port)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True)
    try:
        return proc, json.loads(proc.stdout.readline())["port"]
    except BaseException:
        stop(proc)
        raise


def cpu_seconds(process):
    """User + system CPU seconds the process has used so far (Linux /proc)."""
    with open(f"/proc/{process.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def token_balance(devnet, owner):
    """The devnet token's balanceOf(owner), read with eth_call."""
    import urllib.request

    data = "0x70a08231" + owner.lower().removeprefix("0x").rjust(64, "0")
    call = {"jsonrpc": "2.0", "id": 1, "method": "eth_call",
            "params": [{"to": devnet["asset"], "data": data}, "latest"]}
    req = urllib.request.Request(devnet["rpc_url"], json.dumps(call).encode(), {"Content-Type": "application/json"})
    return int(json.load(urllib.request.urlopen(req, timeout=10))["result"], 16)


def self_settling(devnet):
    """`umpire serve`'s environment for the devnet's rail, settling with its own key."""
    return {
        "UMPIRE_EVM_PAY_TO": devnet["pay_to"], "UMPIRE_EVM_NETWORK": devnet["network"],
        "UMPIRE_EVM_ASSET": devnet["asset"], "UMPIRE_EVM_ASSET_NAME": devnet["asset_name"],
        "UMPIRE_EVM_ASSET_VERSION": str(devnet["asset_version"]), "UMPIRE_SETTLEMENT": "self",
        "UMPIRE_EVM_RPC_URL": devnet["rpc_url"], "UMPIRE_SETTLER_PRIVATE_KEY": devnet["settler_private_key"],
    }


def have_chain_tools():
    import shutil

    return bool(os.environ.get("UMPIRE_BIN")) and shutil.which("wrk") and os.path.exists(ANVIL_BIN)


def replay_load():
    """One purchase on a local chain (anvil + the test USDC, settled by the server), then
    wrk replaying it: the identical request with its payment and Idempotency-Key."""
    import urllib.request

    if not have_chain_tools():
        return None
    anvil, devnet_json, devnet = start_anvil()
    server = None
    try:
        server, base = start_umpire(self_settling(devnet))
        url = base + "/v1/verdicts/basic"
        header = run_json(["node", "tests/js/buy.mjs", "--devnet", devnet_json, "--url", url,
                           "--body", REPLAY_BODY, "--sign-only"])["header"]
        key = "bench-replay-0000-0000-0001"
        headers = {"Content-Type": "application/json", "PAYMENT-SIGNATURE": header, "Idempotency-Key": key}
        bought = urllib.request.urlopen(urllib.request.Request(url, REPLAY_BODY.encode(), headers))
        assert bought.status == 201, bought.status
        script = os.path.join(bench_dir, "replay.lua")
        with open(script, "w") as f:
            f.write('wrk.method = "POST"\n')
            f.write(f"wrk.body = {json.dumps(REPLAY_BODY)}\n")
            for k, v in headers.items():
                f.write(f'wrk.headers["{k}"] = "{v}"\n')
        return wrk(url, script)
    finally:
        if server:
            stop(server)
        stop(anvil)


PAID_PURCHASES = 1000
# Long enough that no signed payment lapses before its turn, whoever sells it (Umpire
# asks for validity past its 25 s work budget; the reference takes the same terms).
PAID_TIMEOUT_SECONDS = 300
PAID_WAIT = 600


def rpc_call(url, method, params):
    import urllib.request

    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    with urllib.request.urlopen(urllib.request.Request(url, body, {"Content-Type": "application/json"}), timeout=30) as r:
        return json.loads(r.read()).get("result")


def like_base(devnet, devnet_json, chain):
    """Turns a fresh devnet into a Base-like chain for one run: a block every
    `chain["block_time"]` seconds, reached through a proxy that adds `chain["latency_ms"]`
    to every round trip and counts the calls. Returns the proxy and the devnet.json the
    contenders read (its rpc_url is the proxy)."""
    import sys as _sys

    _sys.path.insert(0, os.path.dirname(__file__))
    from rpc_proxy import RpcProxy

    rpc_call(devnet["rpc_url"], "evm_setAutomine", [False])
    rpc_call(devnet["rpc_url"], "evm_setIntervalMining", [chain["block_time"]])
    proxy = RpcProxy(devnet["rpc_url"], chain.get("latency_ms", 0), chain.get("preconfirm_ms", 0))
    proxied = dict(devnet, rpc_url=proxy.url)
    path = devnet_json.replace(".json", "-proxied.json")
    with open(path, "w") as f:
        json.dump(proxied, f)
    return proxy, proxied, path


def paid_run(who, concurrency, terms, chain=None):
    """PAID_PURCHASES distinct basic purchases at `concurrency`, each contender on its own
    fresh anvil with the same token deployed the same way: anvil's cost per transaction
    grows as a run adds blocks and token storage, so whoever ran second on a shared
    anvil would pay for whoever ran first. `terms` is filled from Umpire's 402 (amount,
    maxTimeoutSeconds) so the reference sells at the same price. Returns paid_load.mjs's
    figures plus what the chain was paid and the CPU seconds of each process."""
    import urllib.error
    import urllib.request

    anvil, devnet_json, devnet = start_anvil()
    procs = {}
    proxy = None
    count = PAID_PURCHASES
    extra = {}
    if chain:
        proxy, devnet, devnet_json = like_base(devnet, devnet_json, chain)
        count = chain["count"]
        extra["UMPIRE_EVM_BLOCK_TIME_MS"] = str(chain["block_time"] * 1000)
        if chain.get("preconfirm_ms"):
            extra["UMPIRE_EVM_PRECONFIRMATIONS"] = "on"
    try:
        load = ["node", "bench/paid_load.mjs", "--concurrency", str(concurrency)]
        if who == "floor":
            if proxy:
                proxy.reset()
            r = json.loads(subprocess.run(load + ["--floor", "--devnet", devnet_json, "--count", str(count)],
                                          check=True, capture_output=True, text=True, timeout=PAID_WAIT).stdout.splitlines()[-1])
            r["cpu"] = {"anvil": cpu_seconds(anvil)}
            if proxy:
                r["calls"] = proxy.counts()
            return r
        if who == "umpire":
            server, base = start_umpire(dict(self_settling(devnet), UMPIRE_PAYMENT_TIMEOUT_SECONDS=str(PAID_TIMEOUT_SECONDS), **extra))
            procs["umpire"] = server
            url = base + "/v1/verdicts/basic"
            try:
                urllib.request.urlopen(urllib.request.Request(url, REPLAY_BODY.encode(), {"Content-Type": "application/json"}), timeout=10)
                raise RuntimeError("an unpaid basic verdict was not refused with 402")
            except urllib.error.HTTPError as e:
                offer = json.loads(e.read())["requirements"]["accepts"][0]
                terms.update(amount=offer["amount"], max_timeout=offer["maxTimeoutSeconds"])
        else:
            refusals = open(os.path.join(bench_dir, f"facilitator-{concurrency}.log"), "w")
            facilitator, fport = start_node(["node", "tests/js/facilitator.mjs", "--devnet", devnet_json, "--tuned"], refusals)
            procs["facilitator"] = facilitator
            seller, sport = start_node(["node", "bench/reference_seller.mjs", "--devnet", devnet_json,
                                        "--facilitator", f"http://127.0.0.1:{fport}",
                                        "--amount", terms["amount"], "--max-timeout", str(terms["max_timeout"])])
            procs["seller"] = seller
            url = f"http://127.0.0.1:{sport}/v1/verdicts/basic"
        signed = os.path.join(bench_dir, f"signed-{who}.json")
        with open(signed, "w") as f:
            subprocess.run(["node", "tests/js/buy.mjs", "--devnet", devnet_json, "--url", url, "--body", REPLAY_BODY,
                            "--sign-only", "--count", str(count)], check=True, stdout=f, timeout=PAID_WAIT)
        before = token_balance(devnet, devnet["pay_to"])
        if proxy:
            proxy.reset()
        r = json.loads(subprocess.run(load + ["--url", url, "--body", REPLAY_BODY, "--headers", signed],
                                      check=True, capture_output=True, text=True, timeout=PAID_WAIT).stdout.splitlines()[-1])
        if proxy:
            r["calls"] = proxy.counts()
            # Blocks are every two seconds: the last transfers land after the last answer
            # only if an answer came before its money (it must not); wait a block anyway.
            time.sleep(chain["block_time"] + 1)
        # A 201 counts only if the chain has the money: the sale is checked against the
        # payee's balance, not taken from the seller's word.
        r["paid"] = (token_balance(devnet, devnet["pay_to"]) - before) // int(terms["amount"])
        r["cpu"] = {"anvil": cpu_seconds(anvil), **{n: cpu_seconds(p) for n, p in procs.items()}}
        return r
    finally:
        for p in procs.values():
            stop(p)
        if proxy:
            proxy.stop()
        stop(anvil)


def calls_per_purchase(r):
    """The RPC calls a run made per answered purchase, by method, most first."""
    calls = r.get("calls") or {}
    n = max(r.get("ok") or r.get("requests") or 1, 1)
    return ", ".join(f"{m} {c / n:.1f}" for m, c in sorted(calls.items(), key=lambda kv: -kv[1])) or "n/a"


def refused(r):
    return ", ".join(f"{n}x {s}" for s, n in r["statuses"].items() if not str(s).startswith("2")) or "none"


def cpu(r):
    return ", ".join(f"{n} {s:.1f}" for n, s in r["cpu"].items())


def facilitator_refusals(concurrency):
    """The reference facilitator's own messages for what it refused, counted."""
    from collections import Counter

    try:
        lines = open(os.path.join(bench_dir, f"facilitator-{concurrency}.log")).read().splitlines()
    except OSError:
        return []
    seen = Counter()
    for line in lines:
        try:
            e = json.loads(line)
            seen[f"{e['refused']}: {e.get('reason')}: {str(e.get('message'))[:140]}"] += 1
        except (ValueError, KeyError):
            pass
    return seen.most_common(5)


def paid_path():
    """Rows comparing Umpire's paid basic purchase (self-settled) with the reference
    TypeScript stack's, and the chain's own floor. A failure loses these rows only."""
    if not have_chain_tools():
        return
    for concurrency in (8, 32):
        try:
            terms = {}
            u = paid_run("umpire", concurrency, terms)
            ref = paid_run("reference", concurrency, terms)
            floor = paid_run("floor", concurrency, terms)
        except Exception as e:  # noqa: BLE001 - report and go on with the other figures
            rows.append((f"HTTP paid basic purchase, {concurrency} connections", "failed", str(e)[:200], "-", False))
            continue
        honest = u["paid"] == u["ok"] and ref["paid"] == ref["ok"]
        speed = u["rps"] / ref["rps"] if ref["rps"] else float("inf")
        p50 = u["p50_ms"] / ref["p50_ms"] if ref["p50_ms"] else float("inf")
        rows.append((f"HTTP paid basic purchase, {concurrency} connections", f"{u['rps']:,.0f}/s",
                     f"p50 {u['p50_ms']:.0f} ms, p99 {u['p99_ms']:.0f} ms; paid on chain {u['paid']} of {u['ok']} 201s; "
                     f"refused: {refused(u)}; CPU s: {cpu(u)}", ">=3x ref", speed >= 3 and honest))
        rows.append(("  the reference TS stack (@x402/express + facilitator)", f"{ref['rps']:,.0f}/s",
                     f"p50 {ref['p50_ms']:.0f} ms, p99 {ref['p99_ms']:.0f} ms; paid on chain {ref['paid']} of {ref['ok']} 201s; "
                     f"refused: {refused(ref)}; CPU s: {cpu(ref)}", "-", honest))
        for message, n in facilitator_refusals(concurrency):
            rows.append((f"    the facilitator refused {n}x", "", message, "-", True))
        rows.append(("  Umpire / reference", f"{speed:.1f}x",
                     f"p50 {p50:.2f}x the reference's", "<=0.5 p50", p50 <= 0.5))
        rows.append(("  floor: anvil's transferWithAuthorization round trip", f"{floor['rps']:,.0f}/s",
                     f"p50 {floor['p50_ms']:.0f} ms, p99 {floor['p99_ms']:.0f} ms; CPU s: {cpu(floor)}", "-", True))


if ONLY in (None, "paid"):
    paid_path()


def paid_path_like_base():
    """The same purchases on a chain like Base: a block every 2 s, and every RPC round
    trip costing a fixed latency (0, 40 and 80 ms), for Umpire, the reference TypeScript
    stack and the floor, side by side in one run. Each row says the calls a purchase made
    by method, counted at the proxy."""
    if not have_chain_tools():
        return
    concurrency = 32
    for latency in (0, 40, 80):
        chain = {"block_time": 2, "latency_ms": latency, "count": 200}
        label = f"paid basic purchase, 2 s blocks, RPC +{latency} ms, {concurrency} connections"
        try:
            terms = {}
            u = paid_run("umpire", concurrency, terms, chain)
            ref = paid_run("reference", concurrency, terms, chain)
            floor = paid_run("floor", concurrency, terms, chain)
        except Exception as e:  # noqa: BLE001 - report and go on with the other figures
            rows.append((label, "failed", str(e)[:200], "-", False))
            continue
        honest = u["paid"] == u["ok"] and ref["paid"] == ref["ok"]
        gap = u["p50_ms"] - floor["p50_ms"]
        # Issue 39: within 150 ms of the floor; issue 43 (at 40 ms a round trip): within
        # one round trip of it, and below the reference's p50.
        allowed = latency if latency else 150
        rows.append((label, f"{u['rps']:,.1f}/s",
                     f"p50 {u['p50_ms']:.0f} ms, p99 {u['p99_ms']:.0f} ms; paid on chain {u['paid']} of {u['ok']}; "
                     f"refused: {refused(u)}; calls per purchase: {calls_per_purchase(u)}",
                     f"p50 <= floor + {allowed} ms", gap <= allowed and honest))
        rows.append(("  the reference TS stack", f"{ref['rps']:,.1f}/s",
                     f"p50 {ref['p50_ms']:.0f} ms, p99 {ref['p99_ms']:.0f} ms; paid on chain {ref['paid']} of {ref['ok']}; "
                     f"refused: {refused(ref)}; calls per purchase: {calls_per_purchase(ref)}",
                     "Umpire >= ref /s" + (", p50 < ref" if latency else ""),
                     u["rps"] >= ref["rps"] and (not latency or u["p50_ms"] < ref["p50_ms"]) and honest))
        rows.append(("  floor: the payer's own broadcast + receipt polls", f"{floor['rps']:,.1f}/s",
                     f"p50 {floor['p50_ms']:.0f} ms, p99 {floor['p99_ms']:.0f} ms; calls per purchase: {calls_per_purchase(floor)}",
                     "-", True))
        rows.append(("  Umpire - floor (p50)", f"{gap:+.0f} ms",
                     f"Umpire {u['rps'] / ref['rps']:.2f}x the reference's throughput" if ref["rps"] else "", "-", True))


    # Preconfirmations on, against the proxy answering as a flashblocks RPC (a receipt
    # 200 ms after the send): the purchase is answered before the block.
    chain = {"block_time": 2, "latency_ms": 40, "count": 200, "preconfirm_ms": 200}
    label = f"  preconfirmations on (flashblocks RPC), RPC +40 ms, {concurrency} connections"
    try:
        u = paid_run("umpire", concurrency, {}, chain)
        rows.append((label, f"{u['rps']:,.1f}/s",
                     f"p50 {u['p50_ms']:.0f} ms, p99 {u['p99_ms']:.0f} ms; paid on chain {u['paid']} of {u['ok']}; "
                     f"calls per purchase: {calls_per_purchase(u)}",
                     "p50 < one block (2,000 ms)", u["p50_ms"] < 2000 and u["paid"] == u["ok"]))
    except Exception as e:  # noqa: BLE001 - report and go on with the other figures
        rows.append((label, "failed", str(e)[:200], "-", False))


if ONLY in (None, "like_base"):
    paid_path_like_base()

fn_dir = os.environ.get("UMPIRE_FUNCTIONS_DIR")
if fn_dir and ONLY is None:
    venv = os.path.dirname(os.path.dirname(sys.executable))
    out = subprocess.run(["infra/local/with-moto.sh", venv, sys.executable, "bench/cold_start.py", fn_dir],
                         check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        c = json.loads(line)
        rows.append((f"cold start to first answer: {c['function']}", f"{c['median_ms']:.1f} ms",
                     f"max {c['max_ms']:.1f} ms; x86_64 binary {c['bytes'] / 1e6:.1f} MB", "<= 30 ms", c["median_ms"] <= 30))

print()
print(f"{'figure':<52} {'Rust':>10}  {'comparison':<60} {'target':>8}  met")
for name, rust, comparison, target, met in rows:
    print(f"{name:<52} {rust:>10}  {comparison:<60} {target:>8}  {'yes' if met else 'NO'}")
print()
print("arm64 bootstrap sizes come from `make lambda-build` (see docs/benchmarks.md); the hostile-load")
print("health p99 comes from tests/load.rs run against the release build (make bench runs it).")
