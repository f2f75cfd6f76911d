// Buying from Umpire with the reference x402 client libraries so that one purchase is
// never paid twice, however long the chain takes: the payment signed for a purchase is
// held under its Idempotency-Key (a file readable by its owner only) until the purchase
// is answered, and a rerun with the key sends that same payment instead of asking for a
// 402 and signing another. A pending settlement (409/502 with `settlement_pending`) is
// waited out with the same payment. Only a 402 to the held payment (the chain shows it
// can no longer land: expired unused, or canceled) lets a new one be signed.
//
//   node docs/examples/buy-once.mjs --url https://umpire.example/v1/verdicts/basic \
//     --body '{"spec":{...},"deliverable":{...}}' --key <Idempotency-Key> \
//     [--private-key 0x...] [--network eip155:8453] [--asset 0x... (a token beyond the
//     client's defaults)] [--hold-dir ~/.local/share/umpire-example] [--max-wait-seconds 600]
//
// Prints one JSON line: {"status", "body", "signed": <payments signed by this run>,
// "resent": <whether a held payment was sent>}. The key is yours to keep: rerun with
// it after a crash, a Ctrl-C, or a run that gave up waiting.
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { x402Client, x402HTTPClient } from "@x402/core/client";
import { ExactEvmScheme } from "@x402/evm";
import { privateKeyToAccount } from "viem/accounts";

const { values: args } = parseArgs({
  options: {
    url: { type: "string" },
    body: { type: "string" },
    key: { type: "string" },
    "private-key": { type: "string", default: process.env.UMPIRE_WALLET_KEY },
    network: { type: "string", default: "eip155:8453" },
    asset: { type: "string" },
    "max-amount": { type: "string", default: "5000000" },
    "hold-dir": { type: "string", default: join(homedir(), ".local/share/umpire-example") },
    "max-wait-seconds": { type: "string", default: "600" },
  },
});
if (!args.url || !args.key || !args["private-key"]) {
  console.error("needs --url, --key and a wallet (--private-key or $UMPIRE_WALLET_KEY)");
  process.exit(2);
}

const account = privateKeyToAccount(args["private-key"]);
const scheme = new ExactEvmScheme(account);
const client = x402Client.fromConfig({
  schemes: [{ network: args.network, client: scheme }],
  spendControls: args.asset
    ? { allowedAssets: [{ network: args.network, asset: args.asset, maxAmountPerPayment: args["max-amount"] }] }
    : undefined,
});
const http = new x402HTTPClient(client);

// The held payment: one file per (service, path, key).
const holdFile = join(
  args["hold-dir"],
  createHash("sha256").update(`${args.url}|${args.key}`).digest("hex") + ".json",
);
const held = () => {
  try {
    return JSON.parse(readFileSync(holdFile, "utf8")).payment;
  } catch {
    return undefined;
  }
};
const hold = (payment) => {
  mkdirSync(args["hold-dir"], { recursive: true, mode: 0o700 });
  const partial = `${holdFile}.${process.pid}.tmp`;
  writeFileSync(partial, JSON.stringify({ url: args.url, key: args.key, payment }), { mode: 0o600 });
  renameSync(partial, holdFile);
};
const letGo = () => rmSync(holdFile, { force: true });

const send = (payment) =>
  fetch(args.url, {
    method: args.body ? "POST" : "GET",
    headers: {
      "idempotency-key": args.key,
      ...(args.body ? { "content-type": "application/json" } : {}),
      ...(payment ? { "PAYMENT-SIGNATURE": payment } : {}),
    },
    body: args.body,
  });
const pending = async (res) => {
  if (res.status !== 409 && res.status !== 502) return false;
  const body = await res.clone().json().catch(() => ({}));
  return body?.error?.reason === "settlement_pending";
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const retryAfter = (res) => 1000 * Math.min(30, Math.max(1, Number(res.headers.get("retry-after")) || 2));

let signed = 0;
const signFor = async (res402) => {
  const required = http.getPaymentRequiredResponse((n) => res402.headers.get(n), await res402.json());
  const payment = http.encodePaymentSignatureHeader(await client.createPaymentPayload(required))["PAYMENT-SIGNATURE"];
  signed += 1;
  hold(payment); // held before it leaves: a run that dies from here resumes with it
  return payment;
};

const started = Date.now();
const waited = () => Date.now() - started > 1000 * Number(args["max-wait-seconds"]);
const resent = held() !== undefined;
let payment = held();
let res;
if (payment === undefined) {
  res = await send();
  // A purchase under this key is pending with a payment held elsewhere: wait, never pay.
  while ((await pending(res)) && !waited()) {
    await sleep(retryAfter(res));
    res = await send();
  }
  if (res.status === 402) payment = await signFor(res);
}
while (payment !== undefined) {
  res = await send(payment);
  if (await pending(res)) {
    if (waited()) break;
    await sleep(retryAfter(res));
    continue;
  }
  if (res.status === 402 && resent && signed === 0) {
    // The held payment can no longer land: only now is a new one signed.
    letGo();
    payment = await signFor(res);
    continue;
  }
  if (res.ok || res.status === 402) letGo();
  break;
}
console.log(JSON.stringify({ status: res.status, body: await res.text(), signed, resent }));
