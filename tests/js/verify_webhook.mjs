// Checks a webhook delivery exactly as the contract tells receivers to (the Node
// recipe, verbatim). Exit 0 when the signature matches.
//
//   node tests/js/verify_webhook.mjs --secret <verdict secret> --body <file with the raw body> --signature <X-Umpire-Signature>
import crypto from "node:crypto";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

const { values: args } = parseArgs({
  options: { secret: { type: "string" }, body: { type: "string" }, signature: { type: "string" } },
});
const secret = args.secret;
const rawBody = readFileSync(args.body);

// --- the contract's recipe ---
const key = crypto.createHash("sha256").update(secret).digest("hex");
const expected = "sha256=" + crypto.createHmac("sha256", key).update(rawBody).digest("hex");
// ---

const ok = expected.length === args.signature.length && crypto.timingSafeEqual(Buffer.from(expected), Buffer.from(args.signature));
console.log(JSON.stringify({ ok, expected, got: args.signature }));
process.exit(ok ? 0 : 1);
