"""A JSON-RPC proxy for the Base-like paid-path bench: every round trip to anvil costs a
fixed latency (a public RPC provider tens of milliseconds away), and every call is
counted by method (each call of a batch counts), so a row can say how many calls a
purchase made. Threaded: calls in flight at once are delayed at once, as a remote
provider's would be.

    proxy = RpcProxy("http://127.0.0.1:8545", latency_ms=40); proxy.url; proxy.counts()
"""
import http.server
import json
import threading
import time
import urllib.request
from collections import Counter


class RpcProxy:
    def __init__(self, upstream, latency_ms=0):
        self.upstream = upstream
        self.latency = latency_ms / 1000
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
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def counts(self):
        with self._lock:
            return dict(self._counts)

    def reset(self):
        with self._lock:
            self._counts.clear()

    def stop(self):
        self.server.shutdown()
