#!/usr/bin/env python3
"""The SAM template as CloudFormation would deploy it, resolved for a local stack.

The template is transformed by samtranslator (the library `sam build` and CloudFormation's
SAM transform run), then every intrinsic function is resolved against the names the local
stack gave its resources, so each function gets exactly what AWS would give it: its
environment, its role's policies (inline ones, and the AWS managed policies SAM attaches,
with their documented contents), its HTTP routes and its SQS event sources. The tests run
every function's bootstrap with that environment, under credentials that carry exactly
that role's policies (infra/local/iam_gate.mjs enforces them).

usage: stack.py TEMPLATE (--names NAMES_JSON | --offline) [--param KEY=VALUE ...]
                [--drop-statement ID]

NAMES_JSON maps logical ids to their attributes in the local stack, e.g.
  {"VerdictsTable": {"Ref": "t-verdicts", "Arn": "arn:aws:dynamodb:...:table/t-verdicts"}}
and may set pseudo parameters ("AWS::AccountId", "AWS::Region", "AWS::StackName").
--drop-statement FUNCTION:POLICY:N removes the Nth statement (from 1, as the IAM gate
numbers them) of one of a function's policies, KEY:KeyPolicy:N of a KMS key's policy
(infra/local/iam_removal.py uses it to find statements no test needs).

Prints JSON: {"functions": {logical id: {...}}, "key_policies": {key arn: policy},
"resources": the transformed template's resources (unresolved)}.
"""

import argparse
import json
import os
import sys

# The managed policies SAM attaches, as AWS documents them (their current versions).
MANAGED = {
    "AWSLambdaBasicExecutionRole": [
        {
            "Effect": "Allow",
            "Action": ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"],
            "Resource": "*",
        }
    ],
    "AWSLambdaSQSQueueExecutionRole": [
        {
            "Effect": "Allow",
            "Action": [
                "sqs:ReceiveMessage",
                "sqs:DeleteMessage",
                "sqs:GetQueueAttributes",
                "logs:CreateLogGroup",
                "logs:CreateLogStream",
                "logs:PutLogEvents",
            ],
            "Resource": "*",
        }
    ],
    "AWSXrayWriteOnlyAccess": [
        {
            "Effect": "Allow",
            "Action": [
                "xray:PutTraceSegments",
                "xray:PutTelemetryRecords",
                "xray:GetSamplingRules",
                "xray:GetSamplingTargets",
                "xray:GetSamplingStatisticSummaries",
            ],
            "Resource": "*",
        }
    ],
}

NO_VALUE = object()


class Resolver:
    def __init__(self, template, names, params):
        self.template = template
        self.names = names
        self.params = {}
        for key, spec in template.get("Parameters", {}).items():
            if key in params:
                self.params[key] = params[key]
            elif "Default" in spec:
                self.params[key] = str(spec["Default"])
            else:
                raise SystemExit(f"stack.py: parameter {key} has no default; pass --param {key}=...")
        self.pseudo = {
            "AWS::AccountId": names.get("AWS::AccountId", "123456789012"),
            "AWS::Region": names.get("AWS::Region", "us-east-1"),
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": names.get("AWS::StackName", "umpire-local"),
        }
        self.conditions = template.get("Conditions", {})

    def ref(self, name):
        if name in self.pseudo:
            return self.pseudo[name]
        if name == "AWS::NoValue":
            return NO_VALUE
        if name in self.params:
            return self.params[name]
        return self.attr(name, "Ref")

    def attr(self, logical, attribute):
        try:
            return self.names[logical][attribute]
        except KeyError:
            raise SystemExit(f"stack.py: no {attribute} for {logical} in the names given") from None

    def condition(self, name):
        return bool(self.value(self.conditions[name]))

    def sub(self, text, extra):
        out, i = [], 0
        while i < len(text):
            start = text.find("${", i)
            if start < 0:
                out.append(text[i:])
                break
            out.append(text[i:start])
            end = text.index("}", start)
            key = text[start + 2 : end]
            if key.startswith("!"):
                out.append("${" + key[1:] + "}")
            elif key in extra:
                out.append(str(self.value(extra[key])))
            elif "." in key:
                logical, attribute = key.split(".", 1)
                out.append(str(self.attr(logical, attribute)))
            else:
                out.append(str(self.ref(key)))
            i = end + 1
        return "".join(out)

    def value(self, v):
        if isinstance(v, list):
            return [x for x in (self.value(i) for i in v) if x is not NO_VALUE]
        if not isinstance(v, dict):
            return v
        if len(v) == 1:
            (fn, arg), = v.items()
            if fn == "Ref":
                return self.ref(arg)
            if fn == "Fn::GetAtt":
                logical, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
                return self.attr(logical, attribute)
            if fn == "Fn::Sub":
                if isinstance(arg, list):
                    return self.sub(arg[0], arg[1])
                return self.sub(arg, {})
            if fn == "Fn::Join":
                return arg[0].join(str(x) for x in self.value(arg[1]))
            if fn == "Fn::If":
                branch = arg[1] if self.condition(arg[0]) else arg[2]
                return self.value(branch)
            if fn == "Fn::Equals":
                a, b = self.value(arg)
                return str(a) == str(b)
            if fn == "Fn::Not":
                return not self.value(arg[0])
            if fn == "Fn::And":
                return all(self.value(x) for x in arg)
            if fn == "Fn::Or":
                return any(self.value(x) for x in arg)
            if fn == "Condition":
                return self.condition(arg)
            if fn == "Fn::Select":
                return self.value(arg[1])[int(self.value(arg[0]))]
            if fn == "Fn::Split":
                return str(self.value(arg[1])).split(arg[0])
        out = {}
        for k, x in v.items():
            r = self.value(x)
            if r is not NO_VALUE:
                out[k] = r
        return out


def managed_statements(arn):
    name = arn.rsplit("/", 1)[-1]
    if name not in MANAGED:
        raise SystemExit(f"stack.py: the managed policy {arn} is not known here; add its documented statements")
    return MANAGED[name]


def transformed(path, params):
    """(the SAM template, the CloudFormation template the SAM transform makes of it)."""
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    from samtranslator.translator.transform import transform
    from samtranslator.yaml_helper import yaml_parse

    with open(path) as f:
        template = yaml_parse(f.read())
    with open(path) as f:
        sam = yaml_parse(f.read())
    # As `sam validate` does: the code lives in S3 once built.
    template.setdefault("Globals", {}).setdefault("Function", {})["CodeUri"] = "s3://local/bootstrap.zip"
    for resource in template.get("Resources", {}).values():
        if resource.get("Type") == "AWS::Serverless::Function":
            resource.setdefault("Properties", {}).pop("CodeUri", None)

    class NoManagedPolicyNames:
        def load(self):
            return {}

    return sam, transform(template, params, NoManagedPolicyNames())


def chosen(r, items):
    """A list's `Fn::If` entries as their chosen branches, `AWS::NoValue` dropped (the
    entries themselves left unresolved)."""
    out = []
    for item in items:
        while isinstance(item, dict) and list(item) == ["Fn::If"]:
            condition, yes, no = item["Fn::If"]
            item = yes if r.condition(condition) else no
        if item != {"Ref": "AWS::NoValue"}:
            out.append(item)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("template")
    p.add_argument("--names", help="JSON file of the local stack's names")
    p.add_argument(
        "--offline",
        action="store_true",
        help="no stack: every resource named after its logical id (template checks)",
    )
    p.add_argument("--param", action="append", default=[])
    p.add_argument("--drop-statement", action="append", default=[])
    args = p.parse_args()

    params = dict(kv.split("=", 1) for kv in args.param)
    template, cfn = transformed(args.template, params)
    resources = cfn["Resources"]
    if args.offline:
        names = {
            logical: {
                "Ref": logical,
                "Arn": f"arn:aws:{res['Type'].split('::')[1].lower()}:us-east-1:123456789012:{logical}",
                "QueueName": logical,
            }
            for logical, res in resources.items()
        }
        # A function's ARN as Lambda writes it; an alias is named by its qualified ARN
        # (what invoking it takes).
        for logical, res in resources.items():
            if res["Type"] == "AWS::Lambda::Function":
                names[logical]["Arn"] = f"arn:aws:lambda:us-east-1:123456789012:function:{logical}"
            if res["Type"] == "AWS::Lambda::Alias":
                fn = res["Properties"]["FunctionName"]["Ref"]
                names[logical]["Ref"] = f"arn:aws:lambda:us-east-1:123456789012:function:{fn}:{res['Properties']['Name']}"
    else:
        with open(args.names) as f:
            names = json.load(f)
    r = Resolver(cfn, names, params)
    # AutoPublishAlias: triggers and callers name the alias; it stands for its function.
    function_of = {
        logical: res["Properties"]["FunctionName"]["Ref"]
        for logical, res in resources.items()
        if res["Type"] == "AWS::Lambda::Alias"
    }
    drops = {}
    for spec in args.drop_statement:
        function, policy, index = spec.split(":")
        drops.setdefault((function, policy), set()).add(int(index))

    functions = {}
    for logical, res in resources.items():
        if res["Type"] != "AWS::Lambda::Function":
            continue
        if "Condition" in res and not r.condition(res["Condition"]):
            continue
        props = res["Properties"]
        role_logical = props["Role"]["Fn::GetAtt"][0]
        role = resources[role_logical]["Properties"]
        policies = []
        # Its role's inline policies, then the stack's AWS::IAM::Policy resources that
        # name the role (attached to it as CloudFormation attaches them).
        attached = [
            res2["Properties"]
            for res2 in resources.values()
            if res2["Type"] == "AWS::IAM::Policy"
            and {"Ref": role_logical} in res2["Properties"].get("Roles", [])
        ]
        for pol in chosen(r, role.get("Policies", [])) + attached:
            doc = r.value(pol["PolicyDocument"])
            statements = doc["Statement"]
            if isinstance(statements, dict):
                statements = [statements]
            dropped = drops.get((logical, pol["PolicyName"]), set())
            doc["Statement"] = [s for i, s in enumerate(statements, 1) if i not in dropped]
            doc.setdefault("Version", "2012-10-17")
            policies.append({"name": pol["PolicyName"], "document": doc})
        for arn in r.value(role.get("ManagedPolicyArns", [])):
            policies.append(
                {
                    "name": arn.rsplit("/", 1)[-1],
                    "document": {"Version": "2012-10-17", "Statement": managed_statements(arn)},
                }
            )
        sam = template["Resources"].get(logical, {})
        http, sqs = [], []
        for other in resources.values():
            target = other["Properties"].get("FunctionName", {}).get("Ref") if other["Type"] == "AWS::Lambda::EventSourceMapping" else None
            if target is not None and function_of.get(target, target) == logical:
                mp = other["Properties"]
                sqs.append(
                    {
                        "queue_arn": r.value(mp["EventSourceArn"]),
                        "batch_size": int(r.value(mp.get("BatchSize", 10))),
                        "report_failures": "ReportBatchItemFailures" in mp.get("FunctionResponseTypes", []),
                        "maximum_concurrency": r.value(mp.get("ScalingConfig", {}).get("MaximumConcurrency")),
                    }
                )
        for event in sam.get("Properties", {}).get("Events", {}).values():
            if event["Type"] == "HttpApi":
                http.append({"method": event["Properties"]["Method"], "path": event["Properties"]["Path"]})
        concurrency = props.get("ReservedConcurrentExecutions")
        functions[logical] = {
            "binary": sam.get("Metadata", {}).get("BuildProperties", {}).get("Binary"),
            "timeout": int(r.value(props.get("Timeout", 3))),
            "memory": int(r.value(props.get("MemorySize", 128))),
            "reserved_concurrency": (
                None if concurrency is None or r.value(concurrency) is NO_VALUE else r.value(concurrency)
            ),
            "environment": {
                k: str(v) for k, v in r.value(props.get("Environment", {}).get("Variables", {})).items()
            },
            "role": role_logical,
            "policies": policies,
            "http": http,
            "sqs": sqs,
        }

    key_policies = {}
    for logical, res in resources.items():
        if res["Type"] == "AWS::KMS::Key" and logical in names:
            policy = r.value(res["Properties"]["KeyPolicy"])
            dropped = drops.get((logical, "KeyPolicy"), set())
            policy["Statement"] = [s for i, s in enumerate(policy["Statement"], 1) if i not in dropped]
            key_policies[names[logical]["Arn"]] = policy

    json.dump({"functions": functions, "key_policies": key_policies, "resources": resources}, sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
