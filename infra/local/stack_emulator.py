#!/usr/bin/env python3
"""A local stand-in for the deployed stack: every function, API Gateway and the SQS trigger.

Each function runs its own bootstrap in its own sandbox (lambda_emulator.Sandbox: the
Runtime API on a port of its own, killed at its timeout, its own environment, so its
own credentials), as infra/local/stack.py resolved it from template.yaml. In front:
- the Invoke API (POST /2015-03-31/functions/NAME/invocations), for functions that
  invoke others (the checker) and for tests;
- the HTTP API as API Gateway (payload format 2.0) serves the template's routes: each
  request becomes an event for its function, whose answer becomes the response; the
  integration ends at 30 s (503, as API Gateway answers), events over 6 MB are refused;
- each SQS event source mapping, polled as Lambda polls it: ReceiveMessage with the
  function's own credentials (its role's permissions), batches of the mapping's size,
  as many pollers as its maximum concurrency, DeleteMessage for every message not
  reported in batchItemFailures (POST /__stack/triggers?paused=1 pauses them all, =0
  resumes).

Deployments as CodeDeploy runs them for an alias (POST /__stack/deploy {"function",
"env": {VAR: value or null to drop}, "bootstrap_of": another function}): a new version
is published beside the live one (the alias `live`; callers naming the function or the
alias get the live version, a version number gets that version), CodeDeploy's PreTraffic
hook (the function the spec names "hook") is invoked with a lifecycle event, reads the
deployment through the CodeDeploy API served here (GetDeployment, whose AppSpec content
is withheld as AWS withholds it, GetApplicationRevision,
PutLifecycleEventHookExecutionStatus; JSON 1.1, reached through the IAM gate) and the
function's tags (Lambda's ListTags: CloudFormation's logical-id tag), and the alias moves
to the new version only when the hook reported Succeeded.

As strict as AWS where it bites: concurrent invocations of a function run in sandboxes
of their own (a pool, started on demand), all of them count against the account's
concurrency quota ("concurrency", 10 by default: a new account's), and one past it is
refused as Lambda refuses it (429 TooManyRequestsException,
ConcurrentInvocationLimitExceeded); API Gateway then answers its integration failure,
and an SQS batch stays queued. Each sandbox is killed past its MemorySize. Tests stand
in for the account's other functions with POST /__stack/hold?slots=N (and
/__stack/release).

usage: stack_emulator.py --stack FILE --port-file FILE
FILE: {"concurrency": N, "functions": {NAME: {"bootstrap", "timeout", "memory", "env": {...}}},
       "hook": NAME, "stack_name": NAME, "codedeploy": {"application": NAME, "groups": {NAME: GROUP}},
       "routes": [{"method", "path", "function"}],
       "sqs": [{"function", "queue_url", "batch_size", "maximum_concurrency",
                "report_failures", "endpoint", "access_key", "secret_key", "region"}]}
Writes the port of the Invoke API and HTTP API (one server) to --port-file once ready.
"""

import argparse
import base64
import hashlib
import json
import os
import re
import signal
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from urllib.parse import unquote_plus

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lambda_emulator import INVOKE, Sandbox, handler_for, invoke_with_limits  # noqa: E402

# API Gateway's HTTP API ends an integration at 30 s.
INTEGRATION_TIMEOUT_S = 30.0

# API Gateway's HTTP API quota: "total combined size of request line and header values,
# 10240 bytes" (not raisable). A request past it never reaches a function; the status
# it gets here is 431 (AWS documents the quota, not the answer).
MAX_REQUEST_LINE_AND_HEADER_VALUES = 10_240


# A new account's concurrency quota.
DEFAULT_CONCURRENCY = 10

# Lambda's ListTags.
TAGS = re.compile(r"^/2017-03-31/tags/([^/]+)$")

THROTTLED = (
    429,
    json.dumps(
        {"Reason": "ConcurrentInvocationLimitExceeded", "Type": "User", "message": "Rate Exceeded."}
    ).encode(),
    [("X-Amzn-ErrorType", "TooManyRequestsException")],
)


def start_sandbox(name, spec):
    args = SimpleNamespace(
        name=name,
        bootstrap=spec["bootstrap"],
        timeout=float(spec["timeout"]),
        memory=spec.get("memory"),
        env=spec.get("env", {}),
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), None)
    sandbox = Sandbox(args, server.server_address[1])
    server.RequestHandlerClass = handler_for(sandbox)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sandbox.start()
    return sandbox


def route_regex(path):
    # {id} matches one segment; {proxy+} the rest.
    pattern = re.sub(r"\{([^}+]+)\+\}", r"(?P<\1>.+)", path)
    pattern = re.sub(r"\{([^}]+)\}", r"(?P<\1>[^/]+)", pattern)
    return re.compile(f"^{pattern}$")


def http_event(handler, route, params, body):
    raw_path, _, query = handler.path.partition("?")
    headers = {}
    for k, v in handler.headers.items():
        k = k.lower()
        headers[k] = f"{headers[k]},{v}" if k in headers else v
    now = datetime.now(timezone.utc)
    try:
        text = body.decode("utf-8")
        encoded = False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(body).decode(), True
    query_params = {}
    for pair in filter(None, query.split("&")):
        k, _, v = pair.partition("=")
        k, v = unquote_plus(k), unquote_plus(v)
        query_params[k] = f"{query_params[k]},{v}" if k in query_params else v
    event = {
        "version": "2.0",
        "routeKey": f"{route['method']} {route['path']}",
        "rawPath": raw_path,
        "rawQueryString": query,
        "headers": headers,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": headers.get("host", "localhost"),
            "domainPrefix": "local",
            "http": {
                "method": handler.command,
                "path": raw_path,
                "protocol": "HTTP/1.1",
                "sourceIp": handler.client_address[0],
                "userAgent": headers.get("user-agent", ""),
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": f"{route['method']} {route['path']}",
            "stage": "$default",
            "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(now.timestamp() * 1000),
        },
        "isBase64Encoded": False,
    }
    if query_params:
        event["queryStringParameters"] = query_params
    if params:
        event["pathParameters"] = params
    if body:
        event["body"] = text
        event["isBase64Encoded"] = encoded
    return event


class Stack:
    def __init__(self, spec):
        self.functions = spec["functions"]
        # One warm sandbox per function to begin with; more as invocations overlap.
        self.sandboxes = {name: [start_sandbox(name, f)] for name, f in self.functions.items()}
        # Versions: the first deploy's is "1"; the alias `live` names one of them.
        self.versions = {name: {"1": f} for name, f in self.functions.items()}
        self.live = {name: "1" for name in self.functions}
        self.hook = spec.get("hook")
        self.stack_name = spec.get("stack_name", "local")
        self.codedeploy = spec.get("codedeploy", {"application": "local", "groups": {}})
        self.deployments = {}
        self.routes = [dict(r, regex=route_regex(r["path"])) for r in spec.get("routes", [])]
        self.sqs = spec.get("sqs", [])
        self.polled = 0
        self.quota = int(spec.get("concurrency") or DEFAULT_CONCURRENCY)
        self.in_flight = 0
        self.held = 0
        self.throttled = {}
        # The largest request line and header values the API has seen (bytes).
        self.largest_request_head = 0
        # The most executions at once the account has seen (held slots included).
        self.peak_in_flight = 0
        # While set, the SQS triggers receive nothing (a test piles jobs up first).
        self.triggers_paused = False
        self.lock = threading.Lock()

    def invoke(self, name, payload, qualifier=None):
        # The function, or the alias: the live version; a number: that version.
        version = self.live.get(name) if qualifier in (None, "", "live", "$LATEST") else qualifier
        spec = self.versions.get(name, {}).get(version)
        key = name if version == "1" else f"{name}:{version}"
        pool = self.sandboxes.get(key) if spec is not None else None
        if pool is None:
            return 404, b'{"Type":"User","message":"Function not found"}', [
                ("X-Amzn-ErrorType", "ResourceNotFoundException")
            ]
        with self.lock:
            if self.in_flight + self.held >= self.quota:
                self.throttled[name] = self.throttled.get(name, 0) + 1
                return THROTTLED
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight + self.held)
            sandbox = next((s for s in pool if not s.busy), None)
            fresh = sandbox is None
            if fresh:
                sandbox = SimpleNamespace(busy=True)  # a placeholder while it starts
            sandbox.busy = True
        try:
            if fresh:
                sandbox = start_sandbox(key, spec)
                sandbox.busy = True
                with self.lock:
                    pool.append(sandbox)
            return invoke_with_limits(sandbox, payload)
        finally:
            with self.lock:
                sandbox.busy = False
                self.in_flight -= 1

    def deploy(self, change):
        """Publishes a version of change["function"] and runs CodeDeploy's PreTraffic
        hook on it; the alias moves only if the hook reported Succeeded."""
        name = change["function"]
        with self.lock:
            current = self.live[name]
            version = str(max(int(v) for v in self.versions[name]) + 1)
            spec = json.loads(json.dumps(self.versions[name][current]))
            if change.get("bootstrap_of"):
                spec["bootstrap"] = self.functions[change["bootstrap_of"]]["bootstrap"]
            for k, v in (change.get("env") or {}).items():
                if v is None:
                    spec["env"].pop(k, None)
                else:
                    spec["env"][k] = v
            self.versions[name][version] = spec
            self.sandboxes[f"{name}:{version}"] = []
            deployment = "d-" + uuid.uuid4().hex[:9].upper()
            execution = str(uuid.uuid4())
            content = json.dumps(
                {
                    "version": 0.0,
                    "Resources": [
                        {
                            name: {
                                "Type": "AWS::Lambda::Function",
                                "Properties": {"Name": name, "Alias": "live", "CurrentVersion": current, "TargetVersion": version},
                            }
                        }
                    ],
                    "Hooks": [{"BeforeAllowTraffic": self.hook}],
                }
            )
            self.deployments[deployment] = {
                "application": self.codedeploy["application"],
                "group": self.codedeploy["groups"].get(name, f"{name}DeploymentGroup"),
                "content": content,
                "sha256": hashlib.sha256(content.encode()).hexdigest(),
                "execution": execution,
                "reported": None,
            }
        event = json.dumps({"DeploymentId": deployment, "LifecycleEventHookExecutionId": execution}).encode()
        status, body, headers = self.invoke(self.hook, event)
        with self.lock:
            reported = self.deployments[deployment]["reported"]
            if reported == "Succeeded":
                self.live[name] = version
            return {
                "deployment": deployment,
                "version": version,
                "reported": reported,
                "live": self.live[name],
                "hook": {
                    "status": status,
                    "error": dict(headers).get("X-Amz-Function-Error"),
                    "answer": body.decode("utf-8", "replace"),
                },
            }

    def codedeploy_call(self, target, body):
        """CodeDeploy's JSON 1.1 API, the calls a lifecycle hook makes."""
        op = target.rpartition(".")[2]
        b = json.loads(body or b"{}")

        def error(kind, message):
            return 400, json.dumps({"__type": kind, "message": message}).encode(), [
                ("Content-Type", "application/x-amz-json-1.1")
            ]

        def ok(v):
            return 200, json.dumps(v).encode(), [("Content-Type", "application/x-amz-json-1.1")]

        with self.lock:
            if op in ("GetDeployment", "PutLifecycleEventHookExecutionStatus"):
                d = self.deployments.get(b.get("deploymentId", ""))
                if d is None:
                    return error("DeploymentDoesNotExistException", f"The deployment {b.get('deploymentId')} could not be found.")
                if op == "GetDeployment":
                    return ok(
                        {
                            "deploymentInfo": {
                                "applicationName": d["application"],
                                "deploymentGroupName": d["group"],
                                "deploymentId": b["deploymentId"],
                                "computePlatform": "Lambda",
                                "status": "InProgress",
                                # As AWS answers: the content is withheld, its hash given.
                                "revision": {"revisionType": "AppSpecContent", "appSpecContent": {"sha256": d["sha256"]}},
                            }
                        }
                    )
                if b.get("lifecycleEventHookExecutionId") != d["execution"]:
                    return error("InvalidLifecycleEventHookExecutionIdException", "not this deployment's hook execution")
                if d["reported"] is not None:
                    return error("LifecycleEventAlreadyCompletedException", "the lifecycle event is already complete")
                if b.get("status") not in ("Succeeded", "Failed"):
                    return error("InvalidLifecycleEventHookExecutionStatusException", f"status {b.get('status')!r}")
                d["reported"] = b["status"]
                return ok({"lifecycleEventHookExecutionId": d["execution"]})
            if op == "GetApplicationRevision":
                sha = ((b.get("revision") or {}).get("appSpecContent") or {}).get("sha256")
                for d in self.deployments.values():
                    if d["application"] == b.get("applicationName") and d["sha256"] == sha:
                        return ok(
                            {
                                "applicationName": d["application"],
                                # As the revisions of CloudFormation's Lambda
                                # deployments read back: a plain string.
                                "revision": {
                                    "revisionType": "String",
                                    "string": {"content": d["content"], "sha256": d["sha256"]},
                                },
                                "revisionInfo": {"description": "local"},
                            }
                        )
                return error("RevisionDoesNotExistException", "no such revision")
        return error("UnknownOperationException", op)

    def hold(self, slots):
        with self.lock:
            self.held = max(0, slots)

    def poll(self, mapping):
        import boto3

        client = boto3.client(
            "sqs",
            endpoint_url=mapping["endpoint"],
            region_name=mapping.get("region", "us-east-1"),
            aws_access_key_id=mapping["access_key"],
            aws_secret_access_key=mapping["secret_key"],
        )
        while True:
            if self.triggers_paused:
                time.sleep(0.2)
                continue
            try:
                # Short polls: the local server answers one request at a time, and a
                # long poll would hold every other test's calls for its wait.
                got = client.receive_message(
                    QueueUrl=mapping["queue_url"],
                    MaxNumberOfMessages=min(10, mapping.get("batch_size", 10)),
                    WaitTimeSeconds=0,
                    AttributeNames=["All"],
                    MessageAttributeNames=["All"],
                )
            except Exception as e:  # a refused receive is the role's problem: keep trying
                sys.stderr.write(f"stack_emulator: receive failed for {mapping['function']}: {e}\n")
                time.sleep(1)
                continue
            messages = got.get("Messages", [])
            if not messages:
                time.sleep(0.25)
                continue
            arn = f"arn:aws:sqs:{mapping.get('region', 'us-east-1')}:123456789012:{mapping['queue_url'].rsplit('/', 1)[-1]}"
            event = {
                "Records": [
                    {
                        "messageId": m["MessageId"],
                        "receiptHandle": m["ReceiptHandle"],
                        "body": m["Body"],
                        "attributes": m.get("Attributes", {}),
                        "messageAttributes": m.get("MessageAttributes", {}),
                        "md5OfBody": m.get("MD5OfBody", ""),
                        "eventSource": "aws:sqs",
                        "eventSourceARN": arn,
                        "awsRegion": mapping.get("region", "us-east-1"),
                    }
                    for m in messages
                ]
            }
            try:
                status, body, headers = self.invoke(mapping["function"], json.dumps(event).encode())
            except Exception as e:  # a sandbox that cannot start: the batch comes back
                sys.stderr.write(f"stack_emulator: invoke failed for {mapping['function']}: {e}\n")
                continue
            self.polled += len(messages)
            if status != 200 or any(k == "X-Amz-Function-Error" for k, _ in headers):
                # Throttled or failed: the whole batch comes back after its visibility timeout.
                continue
            failed = set()
            if mapping.get("report_failures"):
                try:
                    answer = json.loads(body or b"{}")
                    failed = {f["itemIdentifier"] for f in answer.get("batchItemFailures", [])}
                except ValueError:
                    continue
            for m in messages:
                if m["MessageId"] not in failed:
                    try:
                        client.delete_message(QueueUrl=mapping["queue_url"], ReceiptHandle=m["ReceiptHandle"])
                    except Exception as e:
                        sys.stderr.write(f"stack_emulator: delete failed for {mapping['function']}: {e}\n")


def handler_for_stack(stack):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_):
            pass

        def reply(self, status, body=b"", headers=()):
            self.send_response(status)
            has_type = False
            for k, v in headers:
                has_type |= k.lower() == "content-type"
                self.send_header(k, v)
            if not has_type:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def read_body(self):
            n = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(n) if n else b""

        def api(self, body):
            size = len(self.requestline.encode()) + sum(len(v.encode()) for v in self.headers.values())
            with stack.lock:
                stack.largest_request_head = max(stack.largest_request_head, size)
            if size > MAX_REQUEST_LINE_AND_HEADER_VALUES:
                self.reply(431, b'{"message":"Request Header Fields Too Large"}')
                return
            path = self.path.partition("?")[0]
            for route in stack.routes:
                m = route["regex"].match(path)
                if m and route["method"] in (self.command, "ANY"):
                    break
            else:
                self.reply(404, b'{"message":"Not Found"}')
                return
            event = json.dumps(http_event(self, route, m.groupdict(), body)).encode()
            result = {}

            def call():
                result["answer"] = stack.invoke(route["function"], event)

            t = threading.Thread(target=call, daemon=True)
            t.start()
            t.join(INTEGRATION_TIMEOUT_S)
            if "answer" not in result:
                self.reply(503, b'{"message":"Service Unavailable"}')
                return
            status, payload, headers = result["answer"]
            if status == 413:
                self.reply(413, b'{"message":"Request Entity Too Large"}')
                return
            if status == 429:
                # The route's own function throttled: API Gateway's integration failure.
                self.reply(500, b'{"message":"Internal Server Error"}')
                return
            if status != 200 or any(k == "X-Amz-Function-Error" for k, _ in headers):
                self.reply(500, b'{"message":"Internal Server Error"}')
                return
            try:
                answer = json.loads(payload or b"{}")
            except ValueError:
                self.reply(500, b'{"message":"Internal Server Error"}')
                return
            out = answer.get("body", "")
            out = base64.b64decode(out) if answer.get("isBase64Encoded") else out.encode("utf-8")
            headers = list((answer.get("headers") or {}).items())
            for k, values in (answer.get("multiValueHeaders") or {}).items():
                headers.extend((k, v) for v in values)
            headers.extend(("Set-Cookie", c) for c in answer.get("cookies") or [])
            headers = [(k, v) for k, v in headers if k.lower() not in ("content-length", "transfer-encoding")]
            self.reply(int(answer.get("statusCode", 200)), out, headers)

        def do_GET(self):
            tags = TAGS.match(self.path.partition("?")[0])
            if tags:
                # CloudFormation tags what it creates with the stack and the logical id.
                arn = unquote_plus(tags.group(1))
                # Lambda takes the function's unqualified ARN here, nothing else.
                parts = arn.split(":")
                name = parts[6] if len(parts) == 7 and parts[0] == "arn" else None
                if name not in stack.functions:
                    self.reply(404, b'{"Type":"User","message":"Function not found"}', [("X-Amzn-ErrorType", "ResourceNotFoundException")])
                    return
                self.reply(
                    200,
                    json.dumps(
                        {"Tags": {"aws:cloudformation:logical-id": name, "aws:cloudformation:stack-name": stack.stack_name}}
                    ).encode(),
                )
                return
            if self.path == "/__stack/stats":
                with stack.lock:
                    pools = {n: list(p) for n, p in stack.sandboxes.items()}
                self.reply(
                    200,
                    json.dumps(
                        {
                            "polled": stack.polled,
                            "kills": {n: sum(s.kills for s in p) for n, p in pools.items()},
                            "invocations": {n: sum(s.invocations for s in p) for n, p in pools.items()},
                            "sandboxes": {n: len(p) for n, p in pools.items()},
                            "throttled": dict(stack.throttled),
                            "quota": stack.quota,
                            "largest_request_head": stack.largest_request_head,
                            "peak_in_flight": stack.peak_in_flight,
                        }
                    ).encode(),
                )
                return
            self.api(b"")

        def do_POST(self):
            body = self.read_body()
            if self.path.startswith("/__stack/hold"):
                # The account's other functions, busy: N slots of the quota taken.
                slots = int(self.path.partition("slots=")[2] or 1)
                stack.hold(slots)
                self.reply(200, b"{}")
                return
            if self.path == "/__stack/release":
                stack.hold(0)
                self.reply(200, b"{}")
                return
            if self.path == "/__stack/deploy":
                self.reply(200, json.dumps(stack.deploy(json.loads(body))).encode())
                return
            target = self.headers.get("X-Amz-Target", "")
            if target.startswith("CodeDeploy_20141006."):
                self.reply(*stack.codedeploy_call(target, body))
                return
            if self.path.startswith("/__stack/triggers"):
                stack.triggers_paused = self.path.endswith("paused=1")
                self.reply(200, b"{}")
                return
            m = INVOKE.match(self.path.partition("?")[0])
            if m:
                # A name, name:qualifier, or an ARN, qualified or not (the alias `live`,
                # or a version number), or a Qualifier parameter.
                named = unquote_plus(m.group(1)).split(":")
                name, qualifier = (named[6], named[7] if len(named) > 7 else None) if named[0] == "arn" else (named[0], named[1] if len(named) > 1 else None)
                query = self.path.partition("?")[2]
                for kv in query.split("&"):
                    if kv.startswith("Qualifier="):
                        qualifier = unquote_plus(kv.partition("=")[2])
                self.reply(*stack.invoke(name, body, qualifier))
                return
            self.api(body)

        do_PUT = do_POST
        do_DELETE = do_GET

    return Handler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--stack", required=True)
    p.add_argument("--port-file", required=True)
    args = p.parse_args()
    with open(args.stack) as f:
        spec = json.load(f)
    stack = Stack(spec)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for_stack(stack))
    server.daemon_threads = True

    def stop(*_):
        for pool in stack.sandboxes.values():
            for s in pool:
                try:
                    s.proc.kill()
                except Exception:
                    pass
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    # As Lambda's event source does, up to the mapping's maximum concurrency of pollers
    # (5 when none is set: where Lambda starts), each invoking with its own batch.
    for mapping in stack.sqs:
        for _ in range(int(mapping.get("maximum_concurrency") or 5)):
            threading.Thread(target=stack.poll, args=(mapping,), daemon=True).start()
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(args.port_file + ".tmp", args.port_file)
    try:
        server.serve_forever()
    finally:
        stop()


if __name__ == "__main__":
    main()
