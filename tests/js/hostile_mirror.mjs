// A hostile mirror of an Umpire service: every request is forwarded to the genuine
// service and answered with its genuine answer, except that a 402's payment terms are
// rewritten as --mode says. Whatever a payer sends with a payment is logged, one line
// per request, to --log: a payer that checks before it signs sends nothing.
//
//   node tests/js/hostile_mirror.mjs --upstream http://127.0.0.1:PORT --mode MODE --log FILE
//
// Modes (each on every accepts entry):
//   inflate   the amount times 5000 (the genuine offers left as they are)
//   payto     the payee replaced by a stranger (the genuine offers left as they are)
//   forged    the payee replaced and the offers re-signed, consistently, with the
//             mirror's own key through the reference library (createJWSOfferReceiptIssuer)
//   strip     the offers removed, the terms inflated
//   honest    nothing changed (a control: the payer pays through it)
//   feepayer  the Solana fee payer (extra.feePayer) replaced by a stranger (the offers,
//             which do not cover it, left as they are)
//   withhold  nothing changed in the 402, and every paid answer's one-time secret
//             withheld (as a replay says it): bait for a payer that signs again
//
// Prints {"port": N} once listening.

import http from "node:http";
import { appendFileSync } from "node:fs";
import { generateKeyPairSync, sign } from "node:crypto";
import { base58 } from "@scure/base";
import {
  OFFER_RECEIPT,
  createJWSOfferReceiptIssuer,
} from "@x402/extensions/offer-receipt";

const arg = (name) => {
  const i = process.argv.indexOf(`--${name}`);
  if (i < 0) throw new Error(`--${name} is required`);
  return process.argv[i + 1];
};
const upstream = arg("upstream");
const mode = arg("mode");
const log = arg("log");

const STRANGER_EVM = "0x000000000000000000000000000000000000dEaD";
const STRANGER_SOL = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin";

// The mirror's own Ed25519 key, named as a did:key like Umpire names its own.
const { publicKey, privateKey } = generateKeyPairSync("ed25519");
const raw = publicKey.export({ format: "jwk" }).x;
const rawBytes = Buffer.from(raw, "base64url");
const did = `did:key:z${base58.encode(Buffer.concat([Buffer.from([0xed, 0x01]), rawBytes]))}`;
const issuer = createJWSOfferReceiptIssuer(`${did}#${did.slice(8)}`, {
  kid: `${did}#${did.slice(8)}`,
  format: "jws",
  algorithm: "EdDSA",
  sign: async (bytes) => sign(null, Buffer.from(bytes), privateKey).toString("base64url"),
});

const stranger = (entry) =>
  entry.network.startsWith("eip155:") ? STRANGER_EVM : STRANGER_SOL;

async function rewrite(required) {
  const accepts = required.accepts ?? [];
  const offers = required.extensions?.[OFFER_RECEIPT];
  switch (mode) {
    case "inflate":
      for (const a of accepts) a.amount = (BigInt(a.amount) * 5000n).toString();
      break;
    case "payto":
      for (const a of accepts) a.payTo = stranger(a);
      break;
    case "forged": {
      for (const a of accepts) a.payTo = stranger(a);
      const signed = [];
      for (const [i, a] of accepts.entries()) {
        signed.push(
          await issuer.issueOffer(required.resource.url, {
            acceptIndex: i,
            scheme: a.scheme,
            network: a.network,
            asset: a.asset,
            payTo: a.payTo,
            amount: a.amount,
            offerValiditySeconds: a.maxTimeoutSeconds,
          }),
        );
      }
      required.extensions[OFFER_RECEIPT] = { info: { offers: signed } };
      break;
    }
    case "strip":
      for (const a of accepts) a.amount = (BigInt(a.amount) * 5000n).toString();
      if (offers) delete required.extensions[OFFER_RECEIPT];
      break;
    case "feepayer":
      for (const a of accepts) if (a.extra?.feePayer) a.extra.feePayer = STRANGER_SOL;
      break;
    case "honest":
    case "withhold":
      break;
    default:
      throw new Error(`unknown mode ${mode}`);
  }
  return required;
}

const encode = (v) => Buffer.from(JSON.stringify(v)).toString("base64");
const decode = (s) => JSON.parse(Buffer.from(s, "base64").toString("utf8"));

const server = http.createServer(async (req, res) => {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const body = Buffer.concat(chunks);
  if (req.headers["payment-signature"] || req.headers["x-payment"]) {
    appendFileSync(log, `${req.method} ${req.url}\n`);
  }
  const headers = { ...req.headers };
  delete headers.host;
  delete headers["content-length"];
  try {
    const r = await fetch(upstream + req.url, {
      method: req.method,
      headers,
      body: ["GET", "HEAD"].includes(req.method) ? undefined : body,
      redirect: "manual",
    });
    let text = Buffer.from(await r.arrayBuffer());
    const out = {};
    r.headers.forEach((v, k) => {
      if (!["content-length", "content-encoding", "transfer-encoding", "connection"].includes(k)) {
        out[k] = v;
      }
    });
    if (r.status === 402 && out["payment-required"]) {
      const required = await rewrite(decode(out["payment-required"]));
      out["payment-required"] = encode(required);
      try {
        const json = JSON.parse(text.toString("utf8"));
        if (json.requirements) json.requirements = required;
        text = Buffer.from(JSON.stringify(json));
      } catch {
        // Not JSON: the header alone carries the terms.
      }
    }
    if (mode === "withhold" && r.status >= 200 && r.status < 300) {
      try {
        const json = JSON.parse(text.toString("utf8"));
        if (typeof json.secret === "string") {
          json.secret = null;
          text = Buffer.from(JSON.stringify(json));
        }
      } catch {
        // Not JSON: nothing to withhold.
      }
    }
    res.writeHead(r.status, out);
    res.end(text);
  } catch (e) {
    res.writeHead(502, { "content-type": "text/plain" });
    res.end(String(e));
  }
});

server.listen(0, "127.0.0.1", () => {
  console.log(JSON.stringify({ port: server.address().port, did }));
});
