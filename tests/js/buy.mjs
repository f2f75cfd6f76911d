// Buys from a running Umpire the way a customer's agent does: the reference x402 v2
// client (@x402/fetch) with @x402/evm on the devnet's demo payer, or with --svm with
// @x402/svm on the local Solana chain's payer (USDC on Solana, infra/devnet/svm.mjs).
// Prints one JSON line: {"status", "headers": {...}, "body": <text>}.
//
//   node tests/js/buy.mjs --devnet devnet.json --url http://127.0.0.1:8080/v1/verdicts/basic \
//     --body '{"spec":...}' [--key <Idempotency-Key>] [--sign-only [--count N]]
//   node tests/js/buy.mjs --svm svm.json --url ... --body ... [--key ...] [--sign-only]
//   node tests/js/buy.mjs --devnet devnet.json --method GET --url 'http://127.0.0.1:8080/v1/reputation?merchant=0x..'
//   ... [--payment-id ID]   idempotency the x402 way: the payment-identifier extension
//                           (@x402/extensions) puts ID inside the payment (use with no --key)
//   ... [--verify-receipt]  check the answer's offer-receipt receipt with the reference
//                           library (@x402/extensions/offer-receipt): its signature (the
//                           kid resolved), and that it matches the offer paid and names
//                           the payer; adds "receipt": {...} to the output
//
// --sign-only asks for the 402, signs a payment for it and prints {"header": <PAYMENT-SIGNATURE>}
// without sending it (for tests that replay or race one payment); with --count N it signs
// N distinct payments for the same 402 and prints {"headers": [...]}.
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { x402Client, x402HTTPClient } from "@x402/core/client";
import { ExactEvmScheme } from "@x402/evm";
import { ExactSvmScheme } from "@x402/svm/exact/client";
import { wrapFetchWithPayment } from "@x402/fetch";
import { appendPaymentIdentifierToExtensions } from "@x402/extensions/payment-identifier";
import {
  decodeSignedOffers,
  extractOffersFromPaymentRequired,
  extractReceiptFromResponse,
  verifyOfferSignatureJWS,
  verifyReceiptMatchesOffer,
  verifyReceiptSignatureJWS,
} from "@x402/extensions/offer-receipt";
import { decodePaymentRequiredHeader } from "@x402/core/http";
import { createKeyPairSignerFromBytes } from "@solana/kit";
import { privateKeyToAccount } from "viem/accounts";

const { values: args } = parseArgs({
  options: {
    devnet: { type: "string" },
    svm: { type: "string" },
    url: { type: "string" },
    body: { type: "string" },
    method: { type: "string", default: "POST" },
    key: { type: "string" },
    "private-key": { type: "string" },
    "sign-only": { type: "boolean", default: false },
    count: { type: "string" },
    "payment-id": { type: "string" },
    "verify-receipt": { type: "boolean", default: false },
  },
});

let client;
let payerAddress;
if (args.svm) {
  const svm = JSON.parse(readFileSync(args.svm, "utf8"));
  const payer = await createKeyPairSignerFromBytes(new Uint8Array(JSON.parse(readFileSync(svm.payer_keypair, "utf8"))));
  payerAddress = payer.address;
  // The scheme is built by hand: the register helper would read the public mainnet RPC.
  // Test USDC at mainnet USDC's address is a default asset, capped at $5 (the most
  // expensive product) instead of the client's default $1.
  client = x402Client.fromConfig({
    schemes: [{ network: svm.network, client: new ExactSvmScheme(payer, { rpcUrl: svm.rpc_url }) }],
    spendControls: { maxAmountPerPayment: "$5" },
  });
} else {
  const devnet = JSON.parse(readFileSync(args.devnet, "utf8"));
  const account = privateKeyToAccount(args["private-key"] ?? devnet.payer_private_key);
  payerAddress = account.address;
  // The devnet token is not one of the client's default assets: allow it explicitly,
  // capped at the most expensive product ($5).
  client = x402Client.fromConfig({
    schemes: [{ network: devnet.network, client: new ExactEvmScheme(account) }],
    spendControls: {
      allowedAssets: [{ network: devnet.network, asset: devnet.asset, maxAmountPerPayment: "5000000" }],
    },
  });
}

// The extension's documented client use: before each payment is created, the id goes
// into the 402's extensions (only if the server declared payment-identifier), which
// the client echoes into the payment payload.
if (args["payment-id"]) {
  client.onBeforePaymentCreation(async ({ paymentRequired }) => {
    paymentRequired.extensions ??= {};
    appendPaymentIdentifierToExtensions(paymentRequired.extensions, args["payment-id"]);
  });
}

const headers = args.method === "GET" ? {} : { "content-type": "application/json" };
if (args.key) headers["idempotency-key"] = args.key;
const init = args.method === "GET" ? { method: "GET", headers } : { method: args.method, headers, body: args.body };

if (args["sign-only"]) {
  const http = new x402HTTPClient(client);
  const unpaid = await fetch(args.url, init);
  const text = await unpaid.text();
  if (unpaid.status !== 402) {
    console.log(JSON.stringify({ status: unpaid.status, body: text }));
    process.exit(1);
  }
  const required = http.getPaymentRequiredResponse((n) => unpaid.headers.get(n), JSON.parse(text));
  const sign = async () =>
    http.encodePaymentSignatureHeader(await client.createPaymentPayload(required))["PAYMENT-SIGNATURE"];
  if (args.count === undefined) {
    console.log(JSON.stringify({ header: await sign() }));
  } else {
    const headers = [];
    for (let i = 0; i < Number(args.count); i++) headers.push(await sign());
    console.log(JSON.stringify({ headers }));
  }
} else {
  // The payment headers the client sent, recorded for tests that resend them.
  const sent = [];
  // The 402s seen, for the offers a receipt is matched against.
  const asked = [];
  const recording = async (input, init) => {
    const h = new Headers(input instanceof Request ? input.headers : init?.headers);
    const p = h.get("payment-signature") ?? h.get("x-payment");
    if (p) sent.push(p);
    const r = await fetch(input, init);
    const required = r.status === 402 ? r.headers.get("payment-required") : null;
    if (required) asked.push(decodePaymentRequiredHeader(required));
    return r;
  };
  const pay = wrapFetchWithPayment(recording, client);
  const res = await pay(args.url, init);
  const out = { status: res.status, headers: Object.fromEntries(res.headers.entries()), body: await res.text(), sent };
  if (args["verify-receipt"]) out.receipt = await checkReceipt(res, asked[0], sent[0]);
  console.log(JSON.stringify(out));
}

// The receipt of a paid answer, as a third party checks it with the reference library.
async function checkReceipt(res, required, payment) {
  const receipt = extractReceiptFromResponse(res);
  if (!receipt) return { present: false };
  // No key given: the library resolves the JWS kid (a did:key) itself.
  const payload = await verifyReceiptSignatureJWS(receipt);
  const paid = JSON.parse(Buffer.from(payment, "base64").toString("utf8")).accepted;
  const offer = decodeSignedOffers(extractOffersFromPaymentRequired(required)).find(
    (o) => o.network === paid.network && o.asset === paid.asset && o.payTo === paid.payTo,
  );
  if (offer) await verifyOfferSignatureJWS(offer.signedOffer);
  return {
    present: true,
    payload,
    payer: payerAddress,
    offer_found: Boolean(offer),
    matches_offer: Boolean(offer) && verifyReceiptMatchesOffer(receipt, offer, [payerAddress]),
    kid: JSON.parse(Buffer.from(receipt.signature.split(".")[0], "base64url").toString("utf8")).kid,
  };
}
