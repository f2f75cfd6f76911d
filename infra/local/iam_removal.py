#!/usr/bin/env python3
"""Removes each statement of each function's role (and of the signing key's policy), one
at a time, and runs every test that uses the template's roles without it: a statement
whose removal no test notices is surplus (or needed by a path no test drives, which must
then be said in docs/aws.md).

Not part of `make test` (the role tests once per statement, ~2 min each).

usage: infra/local/iam_removal.py [--only FUNCTION] [--pick FUNCTION:N,...] (run from the repository root,
with `make test`'s tools installed: .cache/venv, node_modules)
Prints one line per statement: needed (the test failed without it) or NOT NEEDED.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV = os.path.join(ROOT, ".cache", "venv")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


# Every test that runs functions under their template roles (tests/support/stack.rs).
ROLE_TESTS = ["stack", "worker", "kms", "secrets_at_rest", "checker_lambda"]


def statements():
    """(function, policy, n, actions) for every statement of the template's inline policies."""
    names = {
        "AWS::AccountId": "123456789012",
    }
    from stack import Resolver, transformed  # noqa: E402

    # Every optional statement present (the stack test sets these too).
    params = {
        "Issuer": "https://umpire.test",
        "FacilitatorAuthSecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:auth-AbCdEf",
        "FeedbackRpcUrlSecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:rpc-AbCdEf",
        "SolanaRpcUrlSecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:sol-AbCdEf",
        "EvmRpcUrlSecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:evm-AbCdEf",
    }
    _, cfn = transformed(os.path.join(ROOT, "template.yaml"), params)
    fake = {}
    for logical, res in cfn["Resources"].items():
        fake[logical] = {"Ref": logical, "Arn": f"arn:aws:local:::{logical}"}
    fake.update(names)
    r = Resolver(cfn, fake, params)
    out = []
    for logical, res in cfn["Resources"].items():
        if res["Type"] == "AWS::KMS::Key":
            doc = r.value(res["Properties"]["KeyPolicy"])
            for n, s in enumerate(doc["Statement"], 1):
                out.append((logical, "KeyPolicy", n, s["Action"]))
            continue
        if res["Type"] != "AWS::Lambda::Function":
            continue
        role = cfn["Resources"][res["Properties"]["Role"]["Fn::GetAtt"][0]]["Properties"]
        for pol in role.get("Policies", []):
            doc = r.value(pol["PolicyDocument"])
            sts = doc["Statement"] if isinstance(doc["Statement"], list) else [doc["Statement"]]
            for n, s in enumerate(sts, 1):
                out.append((logical, pol["PolicyName"], n, s["Action"]))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--only")
    p.add_argument("--pick", help="comma-separated FUNCTION:N, e.g. McpFunction:5,McpFunction:6")
    args = p.parse_args()
    picked = set(filter(None, (args.pick or "").split(",")))
    env = dict(os.environ)
    env["UMPIRE_PYTHON"] = os.path.join(VENV, "bin", "python")
    env.setdefault("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/umpire/target"))
    subprocess.run(["cargo", "build", "--workspace", "--bins", "--quiet"], check=True, cwd=ROOT, env=env)
    results = []
    for function, policy, n, actions in statements():
        if args.only and function != args.only:
            continue
        if picked and f"{function}:{n}" not in picked:
            continue
        env["UMPIRE_STACK_DROP_STATEMENTS"] = f"{function}:{policy}:{n}"
        run = subprocess.run(
            [
                os.path.join(ROOT, "infra/local/with-moto.sh"),
                VENV,
                "cargo", "nextest", "run", "-p", "umpire-functions", "--cargo-quiet",
                *[a for t in ROLE_TESTS for a in ("--test", t)],
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        verdict = "needed" if run.returncode != 0 else "NOT NEEDED"
        line = f"{function} {policy}#{n} {json.dumps(actions)}: {verdict}"
        print(line, flush=True)
        results.append(line)
    surplus = [r for r in results if r.endswith("NOT NEEDED")]
    print(f"\n{len(results)} statements, {len(surplus)} not needed by the stack test")


if __name__ == "__main__":
    main()
