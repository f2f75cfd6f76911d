// Checks the signed offers of paid routes as a third party would, with the reference
// library (@x402/extensions/offer-receipt): asks each route without paying, and for
// every offer in its 402 resolves the JWS kid (no key given), verifies the signature,
// finds the accepts entry it covers and compares everything it signs with that entry.
// Prints one JSON line: {"routes": [...], "problems": [...]}.
//
//   node tests/js/offer_receipt.mjs --base http://127.0.0.1:PORT \
//     --route 'POST /v1/verdicts/basic {"spec":...}' --route 'GET /v1/reputation?merchant=0x..' \
//     --route 'MCP buy_verdict {"tier":"basic",...}'   (a paid tool over POST /mcp: its
//                                                      402 is the tool error's structuredContent)
import { parseArgs } from "node:util";
import {
  extractOffersFromPaymentRequired,
  extractPublicKeyFromKid,
  findAcceptsObjectFromSignedOffer,
  verifyOfferSignatureJWS,
} from "@x402/extensions/offer-receipt";
import { decodePaymentRequiredHeader } from "@x402/core/http";

const { values: args } = parseArgs({
  options: {
    base: { type: "string" },
    route: { type: "string", multiple: true },
  },
});

const keyDoc = await (await fetch(`${args.base}/.well-known/umpire-key.json`)).json();
const published = new Set(keyDoc.keys.map((k) => k.did));
const now = Math.floor(Date.now() / 1000);
const problems = [];
const routes = [];

for (const route of args.route) {
  const [method, path, ...rest] = route.split(" ");
  const body = rest.join(" ") || undefined;
  const required = method === "MCP" ? await askTool(path, body) : await askRoute(method, path, body);
  if (typeof required === "string") {
    problems.push(`${route}: ${required}`);
    continue;
  }
  const offers = extractOffersFromPaymentRequired(required);
  const seen = { path, accepts: required.accepts.length, offers: offers.length, networks: [], kids: [] };
  if (offers.length !== required.accepts.length) {
    problems.push(`${path}: ${offers.length} offers for ${required.accepts.length} options`);
  }
  for (const offer of offers) {
    const kid = JSON.parse(Buffer.from(offer.signature.split(".")[0], "base64url").toString()).kid;
    seen.kids.push(kid);
    if (!published.has(kid.split("#")[0])) problems.push(`${path}: kid ${kid} is not in the key document`);
    // Resolvable on its own, and the signature holds under the key it names.
    await extractPublicKeyFromKid(kid);
    const payload = await verifyOfferSignatureJWS(offer);
    const entry = findAcceptsObjectFromSignedOffer(offer, required.accepts);
    if (!entry) {
      problems.push(`${path}: offer ${offer.acceptIndex} matches no accepts entry`);
      continue;
    }
    if (entry !== required.accepts[offer.acceptIndex]) {
      problems.push(`${path}: offer ${offer.acceptIndex} matches another entry than its acceptIndex`);
    }
    seen.networks.push(`${entry.network} ${entry.asset}`);
    if (payload.resourceUrl !== required.resource.url) {
      problems.push(`${path}: offer for ${payload.resourceUrl}, 402 for ${required.resource.url}`);
    }
    if (!(payload.validUntil > now && payload.validUntil <= now + entry.maxTimeoutSeconds + 5)) {
      problems.push(`${path}: validUntil ${payload.validUntil} outside the payment window`);
    }
    if (payload.version !== 1) problems.push(`${path}: payload version ${payload.version}`);
  }
  routes.push(seen);
}

console.log(JSON.stringify({ routes, problems }));

async function askRoute(method, path, body) {
  const res = await fetch(args.base + path, {
    method,
    headers: body ? { "content-type": "application/json" } : {},
    body,
  });
  const header = res.headers.get("payment-required");
  if (res.status !== 402 || !header) return `answered ${res.status} without PAYMENT-REQUIRED`;
  return decodePaymentRequiredHeader(header);
}

async function askTool(name, args_) {
  const res = await fetch(`${args.base}/mcp`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "tools/call",
      params: { name, arguments: JSON.parse(args_) },
    }),
  });
  const answer = await res.json();
  const required = answer.result?.structuredContent;
  if (!answer.result?.isError || !required?.accepts) return `the tool answered ${JSON.stringify(answer).slice(0, 300)}`;
  return required;
}
