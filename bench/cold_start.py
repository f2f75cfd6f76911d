"""Cold-start proxy per Lambda function: from spawning the bootstrap to its answer to
the first event, through a local Runtime API (the documented /2018-06-01 endpoints),
median of RUNS fresh processes; plus the binary's size. Runs inside
infra/local/with-moto.sh (the functions build their AWS clients at start; nothing here
calls AWS before the first answer except what the function itself does).

usage: python bench/cold_start.py BIN_DIR   (prints one JSON line per function)"""
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RUNS = 7
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "functions", "tests", "fixtures")


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return json.load(f)


CHECK_LINE = json.dumps({
    "spec": {"checks": [{"type": "length", "min": 1}]},
    "deliverable": {"text": "abc"},
    "fetched": [None], "start": 0, "end": 1,
}, separators=(",", ":")) + "\n"

# Each function with an event it handles for real.
FUNCTIONS = [
    ("health", fixture("health.json")),
    ("key", fixture("key.json")),
    ("validate", fixture("validate_ok.json")),
    ("verdicts", fixture("buy_invalid.json")),
    ("checker", {"request": CHECK_LINE}),
    ("worker", {"Records": []}),
]


class RuntimeApi(BaseHTTPRequestHandler):
    event = b""
    answered = None  # (monotonic time, path)

    def log_message(self, *args):
        pass

    def do_GET(self):
        if not self.path.endswith("/invocation/next"):
            self.send_error(404)
            return
        if RuntimeApi.answered is not None:
            # One event per process: later polls wait until the process is killed.
            time.sleep(30)
            return
        body = RuntimeApi.event
        self.send_response(200)
        self.send_header("Lambda-Runtime-Aws-Request-Id", "bench-1")
        self.send_header("Lambda-Runtime-Deadline-Ms", str(int(time.time() * 1000) + 30000))
        self.send_header("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:123456789012:function:bench")
        self.send_header("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        RuntimeApi.answered = (time.monotonic(), self.path)
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()


def one_cold_start(binary, event, env):
    server = ThreadingHTTPServer(("127.0.0.1", 0), RuntimeApi)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    RuntimeApi.event = json.dumps(event).encode()
    RuntimeApi.answered = None
    env = dict(env, AWS_LAMBDA_RUNTIME_API=f"127.0.0.1:{server.server_address[1]}")
    started = time.monotonic()
    proc = subprocess.Popen([binary], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while RuntimeApi.answered is None:
            if proc.poll() is not None:
                raise SystemExit(f"{binary} exited: {proc.stderr.read().decode()[-2000:]}")
            if time.monotonic() - started > 20:
                raise SystemExit(f"{binary} gave no answer in 20 s")
            time.sleep(0.0005)
        at, path = RuntimeApi.answered
        if not path.endswith("/response"):
            raise SystemExit(f"{binary} answered with an error ({path})")
        return (at - started) * 1000
    finally:
        proc.kill()
        proc.wait()
        server.shutdown()
        server.server_close()


def sealed_seed(endpoint):
    """The signing seed sealed as `umpire keygen --kms-key-id` seals it."""
    import base64

    import boto3

    kms = boto3.client("kms", endpoint_url=endpoint, region_name="us-east-1")
    key = kms.create_key(Description="cold-start bench")["KeyMetadata"]
    blob = kms.encrypt(
        KeyId=key["KeyId"], Plaintext=bytes([0x11] * 32),
        EncryptionContext={"purpose": "umpire-signing-seed"},
    )["CiphertextBlob"]
    return {
        "UMPIRE_SIGNING_SEED_CIPHERTEXT": base64.b64encode(blob).decode(),
        "UMPIRE_SIGNING_KEY_ARN": key["Arn"],
    }


def main():
    bin_dir = sys.argv[1]
    endpoint = os.environ["UMPIRE_TEST_AWS_ENDPOINT"]
    env = dict(
        os.environ,
        AWS_ENDPOINT_URL=endpoint,
        AWS_LAMBDA_FUNCTION_NAME="bench",
        AWS_LAMBDA_FUNCTION_MEMORY_SIZE="512",
        AWS_LAMBDA_FUNCTION_VERSION="$LATEST",
        AWS_LAMBDA_LOG_GROUP_NAME="bench",
        AWS_LAMBDA_LOG_STREAM_NAME="bench",
        # As a deploy configures them (a shipped bootstrap refuses a plain seed and a
        # judging function without its checker): the seed sealed under a KMS key of
        # the local server, opened at cold start as on AWS; the checker named (the
        # events below never reach it).
        **sealed_seed(endpoint),
        UMPIRE_CHECKER_FUNCTION="bench-checker",
        UMPIRE_JOBS_QUEUE_URL=f"{endpoint}/123456789012/umpire-jobs",
        RUST_LOG="warn",
    )
    for name, event in FUNCTIONS:
        binary = os.path.join(bin_dir, name)
        if not os.path.exists(binary):
            continue
        times = sorted(one_cold_start(binary, event, env) for _ in range(RUNS))
        print(json.dumps({
            "function": name,
            "median_ms": round(statistics.median(times), 1),
            "max_ms": round(times[-1], 1),
            "bytes": os.path.getsize(binary),
        }), flush=True)


main()
