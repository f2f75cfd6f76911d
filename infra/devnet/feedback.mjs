// The feedback loop on the devnet, as a customer's agent runs it: pay a merchant in
// test USDC from the demo payer, sign the contract's feedback message with viem
// (EIP-191 personal_sign), and POST it to Umpire. Prints Umpire's answer.
//
//   node infra/devnet/feedback.mjs --devnet devnet.json --url http://127.0.0.1:8080 \
//     --merchant 0x.. [--amount 1000000] [--outcome fulfilled] [--would-repeat true] [--latency-ms 900]
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { createPublicClient, createWalletClient, http, parseAbi } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { devnetChain } from "./chain.mjs";

const { values: args } = parseArgs({
  options: {
    devnet: { type: "string" },
    url: { type: "string", default: "http://127.0.0.1:8080" },
    merchant: { type: "string" },
    amount: { type: "string", default: "1000000" },
    outcome: { type: "string", default: "fulfilled" },
    "would-repeat": { type: "string" },
    "latency-ms": { type: "string" },
  },
});
if (!args.devnet || !args.merchant) {
  console.error("usage: feedback.mjs --devnet devnet.json --merchant 0x.. [--url U] [--amount units] [--outcome O]");
  process.exit(2);
}
const devnet = JSON.parse(readFileSync(args.devnet, "utf8"));
const chain = devnetChain(devnet.chain_id, devnet.rpc_url);
const transport = http(devnet.rpc_url);
const payer = privateKeyToAccount(devnet.payer_private_key);
const wallet = createWalletClient({ account: payer, chain, transport });
const pub = createPublicClient({ chain, transport });

const tx = await wallet.writeContract({
  address: devnet.asset,
  abi: parseAbi(["function transfer(address to, uint256 amount) returns (bool)"]),
  functionName: "transfer",
  args: [args.merchant, BigInt(args.amount)],
});
await pub.waitForTransactionReceipt({ hash: tx });

const message = [
  "umpire-feedback-v1",
  `tx:${tx.toLowerCase()}`,
  `merchant:${args.merchant.toLowerCase()}`,
  `outcome:${args.outcome}`,
  `would_repeat:${args["would-repeat"] ?? ""}`,
  `latency_ms:${args["latency-ms"] ?? ""}`,
].join("\n");
const body = { merchant: args.merchant, payer: payer.address, tx_hash: tx, outcome: args.outcome };
if (args["would-repeat"] !== undefined) body.would_repeat = args["would-repeat"] === "true";
if (args["latency-ms"] !== undefined) body.latency_ms = Number(args["latency-ms"]);
body.signature = await payer.signMessage({ message });

const res = await fetch(`${args.url}/v1/feedback`, {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify(body),
});
console.log(JSON.stringify({ status: res.status, body: await res.json() }));
process.exit(res.status === 201 ? 0 : 1);
