// Signs feedback the way the contract's recipe tells a payer to: build the message
// (lines joined with \n, no trailing newline, lowercase tx and merchant, empty values
// for omitted options) and sign it with viem's signMessage (EIP-191 personal_sign).
// Prints {"message", "signature"}.
//
//   node tests/js/sign_feedback.mjs --private-key 0x.. --tx 0x.. --merchant 0x.. \
//     --outcome fulfilled [--would-repeat true] [--latency-ms 1200]
import { parseArgs } from "node:util";
import { privateKeyToAccount } from "viem/accounts";

const { values: args } = parseArgs({
  options: {
    "private-key": { type: "string" },
    tx: { type: "string" },
    merchant: { type: "string" },
    outcome: { type: "string" },
    "would-repeat": { type: "string" },
    "latency-ms": { type: "string" },
  },
});
const message = [
  "umpire-feedback-v1",
  `tx:${args.tx.toLowerCase()}`,
  `merchant:${args.merchant.toLowerCase()}`,
  `outcome:${args.outcome}`,
  `would_repeat:${args["would-repeat"] ?? ""}`,
  `latency_ms:${args["latency-ms"] ?? ""}`,
].join("\n");
const account = privateKeyToAccount(args["private-key"]);
const signature = await account.signMessage({ message });
console.log(JSON.stringify({ message, signature }));
