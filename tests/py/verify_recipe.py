"""The contract's verification recipe, verbatim, as an auditor would run it.

usage: verify_recipe.py DOC.json KEYS.json [DELIVERABLE.json]
Exit 0 when the document verifies; 1 with the failing step on stderr otherwise.
"""
import base64
import hashlib
import json
import sys

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


def stable(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def main():
    doc = json.load(open(sys.argv[1], encoding="utf-8"))
    keys = json.load(open(sys.argv[2], encoding="utf-8"))
    # Remove the signature field; serialize the rest as stable JSON.
    signature = doc.pop("signature")
    payload = stable(doc)
    # Check sha256 of those bytes against signature.payload_sha256.
    if hashlib.sha256(payload).hexdigest() != signature["payload_sha256"]:
        sys.exit("payload_sha256 mismatch")
    # Verify the Ed25519 signature sig_base64 over those bytes.
    key = next((k for k in keys["keys"] if k["key_id"] == signature["key_id"]), None)
    if key is None:
        sys.exit("no key with key_id " + signature["key_id"])
    public = Ed25519PublicKey.from_public_bytes(base64.b64decode(key["public_key_base64"]))
    try:
        public.verify(base64.b64decode(signature["sig_base64"]), payload)
    except InvalidSignature:
        sys.exit("bad Ed25519 signature")
    # spec_hash is sha256 of the stable JSON of the embedded spec.
    if "spec" in doc and hashlib.sha256(stable(doc["spec"])).hexdigest() != doc["spec_hash"]:
        sys.exit("spec_hash mismatch")
    # deliverable_hash is sha256 of the stable JSON of {"json": <json or null>, "text": <text or null>}.
    if len(sys.argv) > 3:
        d = json.load(open(sys.argv[3], encoding="utf-8"))
        h = hashlib.sha256(stable({"json": d.get("json"), "text": d.get("text")})).hexdigest()
        if h != doc["deliverable_hash"]:
            sys.exit("deliverable_hash mismatch")
    print("verified: verdict", doc.get("verdict"))


main()
