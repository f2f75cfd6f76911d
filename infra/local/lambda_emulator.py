#!/usr/bin/env python3
"""A local stand-in for AWS Lambda running one function, for tests.

It speaks the two documented HTTP APIs a Rust function meets in AWS:
- the Invoke API (POST /2015-03-31/functions/{name}/invocations, RequestResponse),
  which aws-sdk-lambda calls when AWS_ENDPOINT_URL_LAMBDA points here;
- the Runtime API (/2018-06-01/runtime/...), which the function's bootstrap polls
  (AWS_LAMBDA_RUNTIME_API points here).

It refuses payloads Lambda refuses ("Request must be smaller than 6291456 bytes": 413
RequestEntityTooLargeException; an answer over 6291556 bytes becomes
Function.ResponseSizeTooLarge), and kills a sandbox whose resident memory passes the
function's MemorySize (Runtime.OutOfMemory), as Lambda does.
And it enforces what matters for isolation, as Lambda does: an invocation that runs
past the function's timeout gets its sandbox killed (SIGKILL), a fresh one is started,
and the caller receives `X-Amz-Function-Error: Unhandled` with "Task timed out after
N seconds". A sandbox that exits mid-invocation answers Runtime.ExitError.
(`cargo lambda watch` has a --timeout, but it does not kill the function.)

Usage: lambda_emulator.py --name checker --bootstrap PATH --timeout 1.5 --port-file F
Prints nothing; writes the port it listens on to --port-file once ready.
"""

import argparse
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

# Lambda's synchronous payload limit: a request must be smaller than this.
MAX_PAYLOAD_BYTES = 6_291_456
# An answer may be this large, and no larger (Lambda's own error names the figure).
MAX_RESPONSE_BYTES = 6_291_556

# The local stack's account (infra/local/stack_up.py, the IAM gate).
ACCOUNT = "123456789012"
INVOKE = re.compile(r"^/2015-03-31/functions/([^/]+)/invocations$")
RESULT = re.compile(r"^/2018-06-01/runtime/invocation/([^/]+)/(response|error)$")


class Invocation:
    def __init__(self, payload):
        self.id = str(uuid.uuid4())
        self.payload = payload
        self.taken = threading.Event()
        self.done = threading.Event()
        self.body = b""
        self.function_error = None


class Sandbox:
    """One function, one sandbox at a time (like reserved concurrency 1)."""

    def __init__(self, args, port):
        self.args = args
        self.port = port
        self.pending = queue.Queue()
        self.running = {}
        self.lock = threading.Lock()
        self.turn = threading.Lock()  # one invocation in the sandbox at a time
        self.proc = None
        self.kills = 0
        self.invocations = 0
        # Taken by one invocation at a time; a stack keeps a pool of sandboxes per function.
        self.busy = False

    def resident_mb(self):
        """The sandbox's resident memory (the process and its children), in MB."""
        total = 0
        pids = [self.proc.pid]
        try:
            with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
                pids += [int(p) for p in f.read().split()]
        except OSError:
            pass
        for pid in pids:
            try:
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            total += int(line.split()[1])
            except OSError:
                pass
        return total / 1024

    def start(self):
        env = dict(os.environ)
        # The function's own variables (a stack run gives each function its own).
        env.update(getattr(self.args, "env", None) or {})
        env.update(
            {
                "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{self.port}",
                # A stack's published version runs as "NAME:VERSION".
                "AWS_LAMBDA_FUNCTION_NAME": self.args.name.partition(":")[0],
                "AWS_LAMBDA_FUNCTION_VERSION": self.args.name.partition(":")[2] or "$LATEST",
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
                "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{self.args.name}",
                "AWS_LAMBDA_LOG_STREAM_NAME": "local",
                "AWS_REGION": env.get("AWS_REGION", "us-east-1"),
            }
        )
        self.proc = subprocess.Popen(
            [self.args.bootstrap], env=env, stdout=sys.stderr, stderr=sys.stderr
        )

    def kill_and_restart(self):
        self.kills += 1
        try:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        except Exception:
            pass
        self.start()

    def invoke(self, payload):
        with self.turn:
            self.invocations += 1
            inv = Invocation(payload)
            with self.lock:
                self.running[inv.id] = inv
            self.pending.put(inv)
            # Cold starts are not counted against the timeout (Lambda's init phase has
            # its own limit); the clock starts when the sandbox takes the event. A
            # bootstrap that exits before taking it is started again once, as Lambda
            # retries a failed init inside the invocation; failing again, the
            # invocation fails as Lambda's does (Runtime.ExitError), not waits.
            init_failures = 0
            while not inv.taken.wait(0.05):
                if self.proc.poll() is not None:
                    init_failures += 1
                    status = self.proc.returncode
                    self.start()
                    if init_failures >= 2:
                        inv.function_error = "Unhandled"
                        inv.body = json.dumps(
                            {
                                "errorType": "Runtime.ExitError",
                                "errorMessage": f"RequestId: {inv.id} Error: Runtime exited with error: exit status {status}",
                            }
                        ).encode()
                        inv.done.set()
                        with self.lock:
                            self.running.pop(inv.id, None)
                        return inv
            deadline = time.monotonic() + self.args.timeout
            memory = getattr(self.args, "memory", None)
            checked = 0.0
            while not inv.done.is_set():
                if memory and time.monotonic() - checked > 0.05:
                    checked = time.monotonic()
                    if self.resident_mb() > memory:
                        self.kill_and_restart()
                        inv.function_error = "Unhandled"
                        inv.body = json.dumps(
                            {
                                "errorType": "Runtime.OutOfMemory",
                                "errorMessage": f"RequestId: {inv.id} Error: Runtime exited with error: signal: killed (over {memory} MB)",
                            }
                        ).encode()
                        break
                if time.monotonic() >= deadline:
                    self.kill_and_restart()
                    inv.function_error = "Unhandled"
                    inv.body = json.dumps(
                        {
                            "errorType": "Sandbox.Timedout",
                            "errorMessage": f"RequestId: {inv.id} Error: Task timed out after {self.args.timeout:.2f} seconds",
                        }
                    ).encode()
                    break
                if self.proc.poll() is not None:
                    inv.function_error = "Unhandled"
                    inv.body = json.dumps(
                        {
                            "errorType": "Runtime.ExitError",
                            "errorMessage": f"RequestId: {inv.id} Error: Runtime exited with status {self.proc.returncode}",
                        }
                    ).encode()
                    self.start()
                    break
                inv.done.wait(0.01)
            with self.lock:
                self.running.pop(inv.id, None)
            return inv


def invoke_with_limits(sandbox, body):
    """One RequestResponse invocation as Lambda answers it: (status, body, headers)."""
    if len(body) >= MAX_PAYLOAD_BYTES:
        # As AWS answers it: the function never sees the event.
        return (
            413,
            json.dumps(
                {
                    "Type": "User",
                    "message": f"Request must be smaller than {MAX_PAYLOAD_BYTES} bytes for the InvokeFunction operation",
                }
            ).encode(),
            [("X-Amzn-ErrorType", "RequestEntityTooLargeException")],
        )
    inv = sandbox.invoke(body or b"{}")
    if len(inv.body) > MAX_RESPONSE_BYTES:
        inv.function_error = "Unhandled"
        inv.body = json.dumps(
            {
                "errorType": "Function.ResponseSizeTooLarge",
                "errorMessage": f"Response payload size ({len(inv.body)} bytes) exceeded maximum allowed payload size ({MAX_RESPONSE_BYTES} bytes).",
            }
        ).encode()
    headers = [("X-Amz-Executed-Version", "$LATEST")]
    if inv.function_error:
        headers.append(("X-Amz-Function-Error", inv.function_error))
    return 200, inv.body, headers


def handler_for(sandbox):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_):
            pass

        def reply(self, status, body=b"", headers=()):
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def read_body(self):
            n = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(n) if n else b""

        def do_GET(self):
            if self.path == "/2018-06-01/runtime/invocation/next":
                inv = sandbox.pending.get()
                # An invocation already answered (its init failed twice) is not handed on.
                while inv.done.is_set():
                    inv = sandbox.pending.get()
                inv.taken.set()
                deadline_ms = int((time.time() + sandbox.args.timeout) * 1000)
                self.reply(
                    200,
                    inv.payload,
                    [
                        ("Lambda-Runtime-Aws-Request-Id", inv.id),
                        ("Lambda-Runtime-Deadline-Ms", str(deadline_ms)),
                        (
                            "Lambda-Runtime-Invoked-Function-Arn",
                            f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:{sandbox.args.name}",
                        ),
                        ("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000"),
                    ],
                )
            elif self.path == "/stats":
                self.reply(
                    200,
                    json.dumps(
                        {"kills": sandbox.kills, "invocations": sandbox.invocations}
                    ).encode(),
                )
            else:
                self.reply(404, b'{"message":"not found"}')

        def do_POST(self):
            body = self.read_body()
            m = INVOKE.match(self.path.partition("?")[0])
            if m:
                # A name, name:qualifier or an ARN, qualified (an alias) or not.
                name = unquote(m.group(1))
                name = name.split(":")[6] if name.startswith("arn:") else name.split(":")[0]
                if name != sandbox.args.name:
                    self.reply(
                        404,
                        b'{"Type":"User","message":"Function not found"}',
                        [("X-Amzn-ErrorType", "ResourceNotFoundException")],
                    )
                    return
                self.reply(*invoke_with_limits(sandbox, body))
                return
            m = RESULT.match(self.path)
            if m:
                with sandbox.lock:
                    inv = sandbox.running.get(m.group(1))
                if inv is not None and not inv.done.is_set():
                    inv.body = body
                    if m.group(2) == "error":
                        inv.function_error = "Unhandled"
                    inv.done.set()
                self.reply(202, b'{"status":"OK"}')
                return
            if self.path == "/2018-06-01/runtime/init/error":
                sys.stderr.write(f"init error: {body!r}\n")
                self.reply(202, b'{"status":"OK"}')
                return
            self.reply(404, b'{"message":"not found"}')

    return Handler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--name", required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--timeout", type=float, required=True)
    p.add_argument("--port-file", required=True)
    args = p.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), None)
    sandbox = Sandbox(args, server.server_address[1])
    server.RequestHandlerClass = handler_for(sandbox)
    server.daemon_threads = True
    sandbox.start()

    def stop(*_):
        try:
            sandbox.proc.kill()
        except Exception:
            pass
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(args.port_file + ".tmp", args.port_file)
    try:
        server.serve_forever()
    finally:
        stop()


if __name__ == "__main__":
    main()
