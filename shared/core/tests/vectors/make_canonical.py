#!/usr/bin/env python3
"""Writes canonical-json.jsonl beside this file: stable JSON vectors made by Python itself.

Each line is {"input": <JSON text>, "canonical": <the stable JSON Umpire signs>,
"sha256": <hex of its UTF-8 bytes>}, where canonical is exactly
json.dumps(json.loads(input), sort_keys=True, separators=(",", ":"), ensure_ascii=False),
the serialization of the verification recipe. The inputs cover what the signer must get
byte-for-byte right: key order by code point at every depth, integers of any length,
float repr (shortest digits, exponents, -0.0, subnormals), escapes of control characters,
and non-ASCII left as it is, including astral characters and U+2028/U+2029.

Run it again after changing the inputs: python3 make_canonical.py (the test reads the file;
it never runs Python for these).
"""

import hashlib
import json
import pathlib

INPUTS = [
    # key order at every depth, by code point, not by UTF-16 unit or locale
    '{"b": 1, "a": 2}',
    '{"outer": {"z": [3, 2, 1], "m": {"y": null, "x": true, "w": false}}, "list": [{"b": 0, "a": 1}]}',
    '{"\\u00e9": 1, "e": 2, "z": 3, "\\u00c9": 4, "\\ud83d\\ude80": 5, "\\uffff": 6, "\\uff61": 7}',
    '{"aa": 1, "a": 2, "": 3, "a\\u0000": 4, "A": 5}',
    # floats as Python's repr prints them
    '{"one": 1.0, "half": 0.5, "neg_zero": -0.0, "small": 1e-05, "edge": 0.0001, "big": 1e+16, "below": 1e15, "huge": 1.5e+300, "tiny": 5e-324}',
    '{"x": 1E2, "y": 1.50, "z": -0, "w": 0.1e1, "v": 2.5E-3}',
    '[1e-7, 1e21, 1e22, 123.456e5, 0.30000000000000004, 1.7976931348623157e308]',
    '{"price": 100, "price_f": 99.99, "ratio": 0.1, "third": 0.3333333333333333, "neg": -273.15}',
    # integers stay exact at any length
    '{"int_big": 12345678901234567890, "int_neg": -42, "zero": 0, "long": 123456789012345678901234567890123456789}',
    '[-9007199254740993, 9007199254740993, 18446744073709551616]',
    # strings: escapes Python writes, and everything it leaves alone
    '{"ctrl": "tab\\there\\nnewline\\r\\u0001\\u001f\\b\\f", "quote": "\\"q\\" \\\\ /"}',
    '{"text": "h\\u00e9llo w\\u00f6rld \\u2014 \\u00fcn\\u00efc\\u00f6d\\u00e9 \\u2713", "emoji": "\\ud83d\\ude80", "cjk": "\\u4e2d\\u6587"}',
    '{"sep": "\\u2028\\u2029", "del": "\\u007f", "nul": "\\u0000", "bom": "\\ufeff"}',
    '{"s": "\\u00e9\\ud83d\\ude80\\u2028", "raw": "d\u00e9j\u00e0 vu \u2603"}',
    # empty containers and nesting
    '{"empty_obj": {}, "empty_arr": [], "empty_str": "", "nested": [[[]], {"": {}}]}',
    '{"b":1,"a":2}',
    '[true, false, null, "null", 0, -1, 1.0]',
    # a verdict-shaped document
    '{"verdict": "pass", "spec": {"checks": [{"type": "regex", "pattern": "^# Report", "flags": "", "expect": "match"}]}, "job_ref": null, "summary": {"passed": 1, "failed": 0, "total": 1}}',
]


def main() -> None:
    out = pathlib.Path(__file__).with_name("canonical-json.jsonl")
    lines = []
    for text in INPUTS:
        canonical = json.dumps(
            json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
        digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
        lines.append(
            json.dumps({"input": text, "canonical": canonical, "sha256": digest})
        )
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(lines)} vectors written to {out}")


if __name__ == "__main__":
    main()
