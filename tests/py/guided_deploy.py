#!/usr/bin/env python3
"""Drives `sam deploy --guided` as a new operator answers it, up to where AWS is needed.

Every prompt is answered as it appears: the Issuer with --issuer, each "has no
authentication" with y (the API is public: x402 pays for it), everything else with its
default, empty optional secrets included. The run stops at "Looking for resources needed
for deployment" (the first call to AWS; AWS_ENDPOINT_URL points nowhere).

usage: guided_deploy.py --sam SAM --template T --config-file C --issuer URL
                        [--parameter-overrides 'ParameterKey=K,ParameterValue=V ...']
Prints {"prompts": [...], "reached_aws": bool, "output": "..."} as JSON.
"""

import argparse
import json
import os
import re
import select
import subprocess
import sys
import time

AWS_STEP = "Looking for resources needed for deployment"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sam", required=True)
    p.add_argument("--template", required=True)
    p.add_argument("--config-file", required=True)
    p.add_argument("--issuer", required=True)
    p.add_argument("--parameter-overrides")
    args = p.parse_args()
    env = dict(os.environ)
    env.update(
        SAM_CLI_TELEMETRY="0",
        AWS_ACCESS_KEY_ID="guided",
        AWS_SECRET_ACCESS_KEY="guided",
        AWS_REGION="us-east-1",
        AWS_ENDPOINT_URL="http://127.0.0.1:9",
        TERM="dumb",
    )
    proc = subprocess.Popen(
        [args.sam, "deploy", "--guided", "--config-file", args.config_file, "-t", args.template]
        + (["--parameter-overrides", args.parameter_overrides] if args.parameter_overrides else []),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=os.path.dirname(os.path.abspath(args.config_file)),
    )
    out = ""
    answered = 0
    prompts = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 65536).decode("utf-8", "replace")
            if not chunk:
                break
            out += chunk
        if AWS_STEP in out:
            break
        # A prompt waits for its answer: the text after the last answered one ends in ": ".
        pending = out[answered:]
        m = re.search(r"([^\t\n]*?)(?: \[[^\]]*\])?: $", pending)
        if not m or ready and not pending.endswith(": "):
            continue
        prompt = m.group(1).strip()
        prompts.append(prompt)
        if prompts.count(prompt) > 2:
            break  # asked again and again: the deploy cannot go on
        if prompt == "Parameter Issuer":
            answer = args.issuer
        elif prompt.endswith("has no authentication. Is this okay?"):
            answer = "y"
        else:
            answer = ""
        proc.stdin.write((answer + "\n").encode())
        proc.stdin.flush()
        answered = len(out)
    reached = AWS_STEP in out
    proc.kill()
    proc.wait()
    json.dump({"prompts": prompts, "reached_aws": reached, "output": out}, sys.stdout)


if __name__ == "__main__":
    main()
