// Reads a verdict with the wallet that paid for it, through the reference
// sign-in-with-x helpers (@x402/extensions/sign-in-with-x): asks the status URL with no
// credential, takes the challenge from its PAYMENT-REQUIRED header, signs it with
// createSIWxPayload and sends encodeSIWxHeader's value. Prints one JSON line:
// {"challenge_status", "status", "body", "header", "signed_nonce", "refusal_nonce"}
// (the nonce it signed, and the nonce of the challenge a refusal carries, if any).
//
//   node tests/js/siwx.mjs --url http://127.0.0.1:PORT/v1/verdicts/vrd_… \
//     (--private-key 0x… | --svm-keypair FILE) [--tamper domain|expired] [--header H]
//
// --tamper domain   sign a challenge rewritten for another domain (the helper's own
//                   origin check is given that domain, so the proof is made)
// --tamper expired  sign a challenge issued 6 minutes ago, expired a minute ago
// --header H        send H as it is (a proof made earlier: a replay)
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { createSIWxPayload, encodeSIWxHeader, SIGN_IN_WITH_X } from "@x402/extensions/sign-in-with-x";
import { decodePaymentRequiredHeader } from "@x402/core/http";
import { createKeyPairSignerFromBytes } from "@solana/kit";
import { privateKeyToAccount } from "viem/accounts";

const { values: args } = parseArgs({
  options: {
    url: { type: "string" },
    "private-key": { type: "string" },
    "svm-keypair": { type: "string" },
    tamper: { type: "string" },
    header: { type: "string" },
  },
});

let header = args.header;
let challengeStatus = null;
let signedNonce = null;
if (!header) {
  const signer = args["svm-keypair"]
    ? await createKeyPairSignerFromBytes(new Uint8Array(JSON.parse(readFileSync(args["svm-keypair"], "utf8"))))
    : privateKeyToAccount(args["private-key"]);
  const type = args["svm-keypair"] ? "ed25519" : "eip191";
  const asked = await fetch(args.url);
  challengeStatus = asked.status;
  const required = decodePaymentRequiredHeader(asked.headers.get("payment-required"));
  const declared = required.extensions[SIGN_IN_WITH_X];
  const chain = declared.supportedChains.find((c) => c.type === type);
  const info = { ...declared.info, chainId: chain.chainId, type: chain.type };
  let origin = args.url;
  if (args.tamper === "domain") {
    const host = new URL(args.url).host;
    info.domain = "mirror.example";
    info.uri = info.uri.replace(host, "mirror.example");
    origin = args.url.replace(host, "mirror.example");
  } else if (args.tamper === "expired") {
    info.issuedAt = new Date(Date.now() - 360_000).toISOString();
    info.expirationTime = new Date(Date.now() - 60_000).toISOString();
  }
  signedNonce = info.nonce;
  header = encodeSIWxHeader(await createSIWxPayload(info, signer, origin));
}
const res = await fetch(args.url, { headers: { [SIGN_IN_WITH_X]: header } });
// A refusal's own challenge, if it carries one (the nonce to sign next).
const again = res.headers.get("payment-required");
const refusalNonce = again ? decodePaymentRequiredHeader(again).extensions?.[SIGN_IN_WITH_X]?.info?.nonce ?? null : null;
console.log(
  JSON.stringify({
    challenge_status: challengeStatus,
    status: res.status,
    body: await res.text(),
    header,
    signed_nonce: signedNonce,
    refusal_nonce: refusalNonce,
  }),
);
