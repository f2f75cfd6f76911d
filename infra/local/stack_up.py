#!/usr/bin/env python3
"""Creates the stack's stateful resources on the local AWS server, from template.yaml.

Every DynamoDB table (keys, indexes, TTL), SQS queue (its attributes, the redrive to its
dead-letter queue) and KMS key (its key policy) is created from the definition the
template gives it, under names prefixed for this test, so the functions meet the tables
the template describes rather than tables a test shaped by hand. Functions and the API
get names only (the stack emulator runs them). With --seed-hex, the signing seed is
sealed under the new key as `umpire keygen --kms-key-id` seals it.

usage: stack_up.py TEMPLATE --endpoint URL --prefix PREFIX [--seed-hex HEX] [--param K=V ...]
                   [--secret PARAM=VALUE ...]
Prints the names JSON infra/local/stack.py takes, plus "sealed": {ciphertext, public_key}.
"""

import argparse
import base64
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stack import Resolver, transformed  # noqa: E402

ACCOUNT = "123456789012"
REGION = "us-east-1"


# Who deploys: an IAM principal of the account (CloudFormation acts with its credentials).
DEPLOYER = f"arn:aws:iam::{ACCOUNT}:role/Deployer"


def lockout_check(policy, creator=DEPLOYER):
    """KMS's policy lockout safety check, which the local server does not make: CreateKey
    is refused unless the new policy lets the principal creating the key call
    PutKeyPolicy afterwards, directly or through the account (its root delegates to IAM).
    """
    import fnmatch

    account = creator.split(":")[4]
    statements = policy.get("Statement", [])
    if isinstance(statements, dict):
        statements = [statements]
    for st in statements:
        if st.get("Effect") != "Allow":
            continue
        actions = st.get("Action", [])
        actions = [actions] if isinstance(actions, str) else actions
        if not any(fnmatch.fnmatchcase("kms:PutKeyPolicy", a) for a in actions):
            continue
        principal = st.get("Principal", {})
        names = principal if isinstance(principal, str) else principal.get("AWS", [])
        names = [names] if isinstance(names, str) else names
        if any(n in ("*", account, creator, f"arn:aws:iam::{account}:root") for n in names):
            return
    raise SystemExit(
        "MalformedPolicyDocumentException: The new key policy will not allow you to update the key policy in the future."
    )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("template")
    p.add_argument("--endpoint", required=True)
    p.add_argument("--prefix", required=True)
    p.add_argument("--seed-hex")
    p.add_argument("--param", action="append", default=[])
    # PARAM=VALUE: a secret the operator creates before deploying (the template takes
    # its ARN in PARAM); made here, its ARN given as PARAM and printed in "params".
    p.add_argument("--secret", action="append", default=[])
    args = p.parse_args()
    params = dict(kv.split("=", 1) for kv in args.param)

    import boto3

    def client(service):
        return boto3.client(
            service,
            endpoint_url=args.endpoint,
            region_name=REGION,
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )

    made = {}
    for kv in args.secret:
        param, value = kv.split("=", 1)
        made[param] = client("secretsmanager").create_secret(Name=f"{args.prefix}{param}", SecretString=value)["ARN"]
    params.update(made)

    _, cfn = transformed(args.template, params)
    resources = cfn["Resources"]
    names = {"AWS::AccountId": ACCOUNT, "AWS::Region": REGION, "AWS::StackName": args.prefix.rstrip("-")}
    resolver = Resolver(cfn, names, params)
    resolve = resolver.value
    # Resources whose condition is false are not created (as CloudFormation does).
    resources = {
        logical: res
        for logical, res in resources.items()
        if "Condition" not in res or resolver.condition(res["Condition"])
    }

    # Names first: functions, roles (as the IAM gate names them), the API, log groups and
    # the alarm topic need nothing created here.
    for logical, res in resources.items():
        if res["Type"] == "AWS::Lambda::Function":
            names[logical] = {"Ref": logical, "Arn": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{logical}"}
        elif res["Type"] == "AWS::Lambda::Alias":
            # Its qualified ARN: what invoking the alias names.
            fn = res["Properties"]["FunctionName"]["Ref"]
            arn = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{fn}:{res['Properties']['Name']}"
            names[logical] = {"Ref": arn, "Arn": arn}
        elif res["Type"] == "AWS::Lambda::Version":
            fn = res["Properties"]["FunctionName"]["Ref"]
            names[logical] = {"Ref": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{fn}:1", "Version": "1"}
        elif res["Type"] == "AWS::IAM::Role":
            names[logical] = {"Ref": logical, "Arn": f"arn:aws:iam::{ACCOUNT}:role/{logical}"}
        elif res["Type"] == "AWS::ApiGatewayV2::Api":
            names[logical] = {"Ref": "local", "ApiEndpoint": "http://127.0.0.1"}
        elif res["Type"] == "AWS::Logs::LogGroup":
            group = f"/aws/lambda/{args.prefix}{logical}"
            names[logical] = {"Ref": group, "Arn": f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{group}"}
        elif res["Type"] in ("AWS::CodeDeploy::Application", "AWS::CodeDeploy::DeploymentGroup"):
            # Named only: the stack emulator stands in for CodeDeploy's deployments.
            names[logical] = {"Ref": f"{args.prefix}{logical}"}
        elif res["Type"] == "AWS::SNS::Topic":
            names[logical] = {"Ref": f"arn:aws:sns:{REGION}:{ACCOUNT}:{args.prefix}{logical}"}

    ddb = client("dynamodb")
    for logical, res in resources.items():
        if res["Type"] != "AWS::DynamoDB::Table":
            continue
        props = res["Properties"]
        name = f"{args.prefix}{logical}"
        create = {
            "TableName": name,
            "AttributeDefinitions": props["AttributeDefinitions"],
            "KeySchema": props["KeySchema"],
            "BillingMode": props.get("BillingMode", "PROVISIONED"),
        }
        if props.get("GlobalSecondaryIndexes"):
            create["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
        arn = ddb.create_table(**create)["TableDescription"]["TableArn"]
        ttl = props.get("TimeToLiveSpecification")
        if ttl and ttl.get("Enabled"):
            ddb.update_time_to_live(
                TableName=name,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl["AttributeName"]},
            )
        names[logical] = {"Ref": name, "Arn": arn}

    sqs = client("sqs")
    queues = [(l, r) for l, r in resources.items() if r["Type"] == "AWS::SQS::Queue"]
    # Dead-letter queues first: a redrive policy names its target's ARN.
    queues.sort(key=lambda q: "RedrivePolicy" in q[1].get("Properties", {}))
    for logical, res in queues:
        props = dict(res.get("Properties", {}))
        props.pop("SqsManagedSseEnabled", None)
        attributes = {}
        for key in ("VisibilityTimeout", "MessageRetentionPeriod", "DelaySeconds", "MaximumMessageSize", "ReceiveMessageWaitTimeSeconds"):
            if key in props:
                attributes[key] = str(resolve(props[key]))
        if "RedrivePolicy" in props:
            attributes["RedrivePolicy"] = json.dumps(resolve(props["RedrivePolicy"]))
        name = f"{args.prefix}{logical}"
        url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        names[logical] = {"Ref": url, "Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}", "QueueName": name}

    secrets = client("secretsmanager")
    for logical, res in resources.items():
        if res["Type"] != "AWS::SecretsManager::Secret":
            continue
        arn = secrets.create_secret(
            Name=f"{args.prefix}{logical}", SecretString=str(resolve(res["Properties"]["SecretString"]))
        )["ARN"]
        names[logical] = {"Ref": arn, "Arn": arn}

    kms = client("kms")
    for logical, res in resources.items():
        if res["Type"] != "AWS::KMS::Key":
            continue
        policy = resolve(res["Properties"]["KeyPolicy"])
        lockout_check(policy)
        meta = kms.create_key(Policy=json.dumps(policy), Description=res["Properties"].get("Description", ""))["KeyMetadata"]
        names[logical] = {"Ref": meta["KeyId"], "Arn": meta["Arn"]}
        if args.seed_hex:
            from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
            from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

            seed = bytes.fromhex(args.seed_hex)
            blob = kms.encrypt(
                KeyId=meta["KeyId"], Plaintext=seed, EncryptionContext={"purpose": "umpire-signing-seed"}
            )["CiphertextBlob"]
            public = Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
            names["sealed"] = {
                "ciphertext": base64.b64encode(blob).decode(),
                "public_key": base64.b64encode(public).decode(),
            }

    names["params"] = made
    json.dump(names, sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
