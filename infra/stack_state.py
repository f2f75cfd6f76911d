#!/usr/bin/env python3
"""What `make deploy` must tell the guided deploy about the stack as it stands.

The retained tables are protected from deletion, but a protected table cannot be taken
away by the rollback of a failed first create, and a stack left in ROLLBACK_COMPLETE
cannot be updated: the next deploy would fail with hand work to do. So:

- no stack yet (or only a change set under review): this deploy creates it, with
  `TableDeletionProtection=false`; a failed create then rolls back completely
  (`DeletionPolicy: RetainExceptOnCreate` everywhere), nothing is left behind;
- a stack in ROLLBACK_COMPLETE (a first create that failed): it holds nothing, so it is
  deleted, waited for, and created afresh as above;
- any other stack: `TableDeletionProtection=true` (switched on by the second deploy).

usage: stack_state.py --config infra/samconfig.toml [--stack-name NAME] [--region R]
Prints the parameter override (`ParameterKey=TableDeletionProtection,ParameterValue=…`).
AWS credentials and region come from the usual environment, else the config's
deploy section.
"""

import argparse
import sys
import tomllib

PARAM = "TableDeletionProtection"
MAX_STACK_NAME = 64 - len("CodeDeployHook_")
# A change set under review, not a stack yet (SAM treats it the same way).
NOT_YET = {"REVIEW_IN_PROGRESS"}
# A failed first create whose rollback finished: empty, and not updatable.
EMPTY_HUSK = {"ROLLBACK_COMPLETE"}


def saved(config_path, key):
    """The value `key` the guided deploy saved (deploy section first, then global)."""
    try:
        with open(config_path, "rb") as f:
            config = tomllib.load(f)
    except FileNotFoundError:
        return None
    env = config.get("default", {})
    for section in ("deploy", "global"):
        value = env.get(section, {}).get("parameters", {}).get(key)
        if value:
            return value
    return None


def status(cfn, name):
    """The stack's status, or None when there is no such stack."""
    from botocore.exceptions import ClientError

    try:
        stacks = cfn.describe_stacks(StackName=name)["Stacks"]
    except ClientError as e:
        # CloudFormation has no error code of its own for this: a ValidationError saying
        # "Stack with id NAME does not exist" (SAM CLI's deployer tests the same text).
        # Any other ValidationError (a malformed name, say) is not taken for "no stack".
        error = e.response.get("Error", {})
        if error.get("Code") == "ValidationError" and "does not exist" in error.get("Message", ""):
            return None
        raise
    return stacks[0]["StackStatus"] if stacks else None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--stack-name")
    p.add_argument("--region")
    args = p.parse_args()
    import boto3

    name = args.stack_name or saved(args.config, "stack_name") or "umpire"
    # The PreTraffic hook is named CodeDeployHook_<stack> (CodeDeploy's role for Lambda
    # deployments invokes only such names), and a function name has 64 characters.
    if len(name) > MAX_STACK_NAME:
        sys.exit(
            f"stack_state.py: the stack name {name!r} has {len(name)} characters; at most "
            f"{MAX_STACK_NAME} (its PreTraffic hook is CodeDeployHook_<stack name>, 64 at most): "
            "choose a shorter one (sam deploy --guided asks for it)"
        )
    region = args.region or saved(args.config, "region")
    session = boto3.session.Session(region_name=region) if region else boto3.session.Session()
    if not session.region_name:
        sys.exit("stack_state.py: no AWS region: set AWS_REGION (or AWS_DEFAULT_REGION)")
    cfn = session.client("cloudformation")
    try:
        print(override(cfn, name))
    except Exception as e:  # credentials, network: nothing can be deployed either
        sys.exit(f"stack_state.py: could not read stack {name!r} in {session.region_name}: {e}")


def override(cfn, name):
    """The parameter override for a deploy of stack `name` now (deleting an empty husk
    of a failed first create on the way)."""
    state = status(cfn, name)
    if state in EMPTY_HUSK:
        print(
            f"stack {name!r} is {state} (its first create failed and rolled back, nothing kept): "
            "deleting it so this deploy creates it afresh",
            file=sys.stderr,
        )
        cfn.delete_stack(StackName=name)
        cfn.get_waiter("stack_delete_complete").wait(StackName=name)
        state = None
    first = state is None or state in NOT_YET
    if first:
        print(
            f"stack {name!r} does not exist yet: created with {PARAM}=false, so a failed "
            "create leaves nothing behind; the next make deploy turns protection on",
            file=sys.stderr,
        )
    return f"ParameterKey={PARAM},ParameterValue={'false' if first else 'true'}"


if __name__ == "__main__":
    main()
