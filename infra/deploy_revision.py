#!/usr/bin/env python3
"""Sets the stack parameter DeployRevision in a SAM config file to a fresh random value.

SAM publishes a new version of a function behind its alias only when the version's hash
changes, and that hash does not see parameter values in the environment: a deploy that
only changes parameters (the signing key after `umpire keygen`, a rotation, a pay-to
address) would leave every alias on the old version. template.yaml makes DeployRevision
the functions' AutoPublishCodeSha256, and `make deploy` runs this before `sam deploy
--guided`, so every deploy publishes. Every other saved parameter is kept as it is.

usage: deploy_revision.py SAMCONFIG [--value V]
"""

import argparse
import re
import secrets

SECTION = "[default.deploy.parameters]"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("config")
    # SAM names a function's version after the first 10 characters: fresh ones each time.
    p.add_argument("--value", default=secrets.token_hex(8))
    args = p.parse_args()
    with open(args.config) as f:
        text = f.read()
    token = f'DeployRevision=\\"{args.value}\\"'
    lines = text.split("\n")
    try:
        start = lines.index(SECTION)
    except ValueError:
        lines += ["", SECTION]
        start = len(lines) - 1
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("[")), len(lines))
    for i in range(start + 1, end):
        if lines[i].startswith("parameter_overrides"):
            line = lines[i]
            if "DeployRevision=" in line:
                line = re.sub(r'DeployRevision=\\"[^"\\]*\\"', lambda _: token, line)
            else:
                line = line[: line.rindex('"')] + " " + token + '"'
                line = line.replace('= " ', '= "')
            lines[i] = line
            break
    else:
        lines.insert(start + 1, f'parameter_overrides = "{token}"')
    with open(args.config, "w") as f:
        f.write("\n".join(lines))
    print(args.value)


if __name__ == "__main__":
    main()
