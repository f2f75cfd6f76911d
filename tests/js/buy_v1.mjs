// Buys with the x402 v1 reference client (x402-fetch): X-PAYMENT, plain network
// names, `maxAmountRequired` from the 402 body. v1 knows networks by name only, so the
// devnet must run with a chain id v1 knows (84532, "base-sepolia").
//
//   node tests/js/buy_v1.mjs --devnet devnet.json --url ... --body ... [--key ...]
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { wrapFetchWithPayment } from "x402-fetch";
import { createWalletClient, http, publicActions } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { baseSepolia } from "viem/chains";

const { values: args } = parseArgs({
  options: {
    devnet: { type: "string" },
    url: { type: "string" },
    body: { type: "string" },
    key: { type: "string" },
  },
});
const devnet = JSON.parse(readFileSync(args.devnet, "utf8"));
if (devnet.chain_id !== baseSepolia.id) {
  console.error(`buy_v1 needs a devnet on chain ${baseSepolia.id}, this one is ${devnet.chain_id}`);
  process.exit(2);
}
const wallet = createWalletClient({
  account: privateKeyToAccount(devnet.payer_private_key),
  chain: { ...baseSepolia, rpcUrls: { default: { http: [devnet.rpc_url] } } },
  transport: http(devnet.rpc_url),
}).extend(publicActions);

const pay = wrapFetchWithPayment(fetch, wallet, 5_000_000n);
const headers = { "content-type": "application/json" };
if (args.key) headers["idempotency-key"] = args.key;
const res = await pay(args.url, { method: "POST", headers, body: args.body });
console.log(JSON.stringify({ status: res.status, headers: Object.fromEntries(res.headers.entries()), body: await res.text() }));
