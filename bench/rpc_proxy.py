"""A JSON-RPC proxy for the Base-like paid-path bench: every round trip to anvil costs a
fixed latency (a public RPC provider tens of milliseconds away), and every call is
counted by method (each call of a batch counts), so a row can say how many calls a
purchase made. Threaded: calls in flight at once are delayed at once, as a remote
provider's would be. With `preconfirm_ms`, it answers as an RPC streaming Base's
flashblocks does: a transaction sent through it has a receipt that long after its send,
in the block being built, before the chain seals it (its status simulated on the latest
state).

    proxy = RpcProxy("http://127.0.0.1:8545", latency_ms=40); proxy.url; proxy.counts()
"""
import http.server
import json
import threading
import time
import urllib.request
from collections import Counter


class RpcProxy:
    def __init__(self, upstream, latency_ms=0, preconfirm_ms=0):
        self.upstream = upstream
        self.latency = latency_ms / 1000
        self.preconfirm = preconfirm_ms / 1000
        self._sent = {}
        self._counts = Counter()
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                try:
                    calls = json.loads(body)
                    calls = calls if isinstance(calls, list) else [calls]
                    with proxy._lock:
                        proxy._counts.update(c.get("method", "?") for c in calls)
                except ValueError:
                    pass
                time.sleep(proxy.latency)
                req = urllib.request.Request(proxy.upstream, body, {"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=60) as r:
                    answer = r.read()
                if proxy.preconfirm:
                    answer = proxy._preconfirmed(body, answer)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def _call(self, method, params):
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
        req = urllib.request.Request(self.upstream, body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())

    def _preconfirmed(self, body, answer):
        """Notes each send; fills a receipt the chain has not sealed yet once a
        flashblock has passed since its send."""
        try:
            calls, answers = json.loads(body), json.loads(answer)
        except ValueError:
            return answer
        batch = isinstance(calls, list)
        calls, answers = (calls, answers) if batch else ([calls], [answers])
        by_id = {a.get("id"): a for a in answers if isinstance(a, dict)}
        changed = False
        for c in calls:
            a = by_id.get(c.get("id"))
            if a is None:
                continue
            if c.get("method") == "eth_sendRawTransaction" and isinstance(a.get("result"), str):
                self._sent[a["result"]] = time.monotonic()
            elif c.get("method") == "eth_getTransactionReceipt" and a.get("result") is None:
                h = (c.get("params") or [None])[0]
                sent = self._sent.get(h)
                if sent is None or time.monotonic() - sent < self.preconfirm:
                    continue
                tx = self._call("eth_getTransactionByHash", [h]).get("result")
                if not tx or tx.get("blockNumber") is not None:
                    continue
                sim = self._call("eth_call", [{k: tx.get(k) for k in ("from", "to", "gas", "value")} | {"data": tx.get("input")}, "latest"])
                latest = int(self._call("eth_blockNumber", [])["result"], 16)
                a["result"] = {
                    "transactionHash": h, "transactionIndex": "0x1", "blockHash": "0x" + "fb" * 32,
                    "blockNumber": hex(latest + 1), "from": tx["from"], "to": tx["to"],
                    "cumulativeGasUsed": "0x14c08", "gasUsed": "0x14c08",
                    "effectiveGasPrice": tx.get("maxFeePerGas") or tx.get("gasPrice"),
                    "contractAddress": None, "logs": [], "logsBloom": "0x" + "00" * 256,
                    "type": tx.get("type"), "status": "0x0" if "error" in sim else "0x1",
                }
                changed = True
        if not changed:
            return answer
        return json.dumps(answers if batch else answers[0]).encode()

    def counts(self):
        with self._lock:
            return dict(self._counts)

    def reset(self):
        with self._lock:
            self._counts.clear()

    def stop(self):
        self.server.shutdown()
