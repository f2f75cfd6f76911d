#!/usr/bin/env python3
"""Marks every function `sam build` packaged as new, so the next deploy publishes it.

SAM publishes a new version of a function behind its alias only when the version's hash
changes: the code's location (the package's content hash) and the environment map as
written, parameter references unresolved. A deploy that changes only parameters (the
signing key after `umpire keygen`, a rotation, a pay-to address) would leave every alias
on the old version, whose configuration is the old one. `make deploy` runs this between
`sam build` and `sam deploy`: a file holding a fresh random revision in each function's
build folder changes its package's hash, so every `make deploy` publishes every function
(and a plain `sam deploy` still publishes whatever code changed).

usage: deploy_revision.py BUILD_DIR [--value V]   (BUILD_DIR: .aws-sam/build)
Prints the revision.
"""

import argparse
import os
import secrets
import sys

FILE = "REVISION"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("build_dir")
    p.add_argument("--value", default=secrets.token_hex(8))
    args = p.parse_args()
    marked = 0
    for name in sorted(os.listdir(args.build_dir)):
        folder = os.path.join(args.build_dir, name)
        if os.path.isfile(os.path.join(folder, "bootstrap")):
            with open(os.path.join(folder, FILE), "w") as f:
                f.write(args.value + "\n")
            marked += 1
    if marked == 0:
        sys.exit(f"deploy_revision.py: no function build (a bootstrap) under {args.build_dir}: run sam build first")
    print(args.value)


if __name__ == "__main__":
    main()
