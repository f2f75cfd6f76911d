// The same basic purchase Umpire sells, sold by the reference TypeScript x402 stack: an
// Express 5 app behind `paymentMiddleware` from @x402/express, verifying and settling
// through the reference facilitator (tests/js/facilitator.mjs) over HTTP. The handler
// does the work a basic verdict does for the bench's spec: parse the body, run a regex
// check and a word-count check on the deliverable, build a verdict and sign it with
// Ed25519. It stores nothing, which favours it. Prints {"port": N} once listening.
//
//   node bench/reference_seller.mjs --devnet devnet.json --facilitator http://127.0.0.1:N \
//     --amount 10000 [--max-timeout 60] [--port 0]
//
// Only `make bench` uses it (bench/report.py), to put Umpire's paid path side by side
// with the reference's on the same anvil and token.
import { createHash, generateKeyPairSync, randomUUID, sign } from "node:crypto";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import express from "express";
import { paymentMiddleware, x402ResourceServer } from "@x402/express";
import { HTTPFacilitatorClient } from "@x402/core/server";
import { ExactEvmScheme } from "@x402/evm/exact/server";

const { values: args } = parseArgs({
  options: {
    devnet: { type: "string" },
    facilitator: { type: "string" },
    amount: { type: "string" },
    "max-timeout": { type: "string", default: "60" },
    port: { type: "string", default: "0" },
  },
});
const devnet = JSON.parse(readFileSync(args.devnet, "utf8"));

const server = new x402ResourceServer(new HTTPFacilitatorClient({ url: args.facilitator })).register(
  devnet.network,
  new ExactEvmScheme(),
);
const route = "/v1/verdicts/basic";
const routes = {
  [`POST ${route}`]: {
    accepts: {
      scheme: "exact",
      network: devnet.network,
      payTo: devnet.pay_to,
      price: {
        amount: args.amount,
        asset: devnet.asset,
        extra: { name: devnet.asset_name, version: String(devnet.asset_version) },
      },
      maxTimeoutSeconds: Number(args["max-timeout"]),
    },
    description: "A signed pass/fail verdict (reference stack, bench only)",
    mimeType: "application/json",
  },
};

const { privateKey } = generateKeyPairSync("ed25519");
const words = (s) => s.split(/\s+/).filter((w) => w.length > 0).length;
const checkOne = (check, text) => {
  switch (check.type) {
    case "regex":
      return new RegExp(check.pattern, "u").test(text);
    case "length": {
      const n = check.unit === "words" ? words(text) : [...text].length;
      return (check.min === undefined || n >= check.min) && (check.max === undefined || n <= check.max);
    }
    default:
      throw new Error(`unsupported check ${check.type}`);
  }
};

const app = express();
app.use(paymentMiddleware(routes, server));
app.post(route, express.json({ limit: "1mb" }), (req, res) => {
  const { spec, deliverable } = req.body ?? {};
  if (!Array.isArray(spec?.checks) || typeof deliverable?.text !== "string") {
    return res.status(422).json({ error: { code: "invalid_spec" } });
  }
  const checks = spec.checks.map((c, i) => ({ index: i, type: c.type, passed: checkOne(c, deliverable.text) }));
  const verdict = {
    verdict_id: randomUUID(),
    pass: checks.every((c) => c.passed),
    checks,
    deliverable_sha256: createHash("sha256").update(deliverable.text).digest("hex"),
    issued_at: new Date().toISOString(),
  };
  const body = JSON.stringify(verdict);
  const signature = sign(null, Buffer.from(body), privateKey).toString("base64");
  res.status(201).json({ verdict, signature });
});

const listener = app.listen(Number(args.port), "127.0.0.1", () => {
  console.log(JSON.stringify({ port: listener.address().port }));
});
