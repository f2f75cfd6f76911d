// The payer cancels an x402 payment's EIP-3009 authorization (the token's
// cancelAuthorization, signed by the devnet's demo payer and sent from its account), as
// a payer may until the authorization is used. Prints {"tx", "status"}.
//
//   node tests/js/cancel.mjs --devnet devnet.json --payment <PAYMENT-SIGNATURE header>
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { createPublicClient, createWalletClient, http, parseAbi, parseSignature } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { devnetChain } from "../../infra/devnet/chain.mjs";

const { values: args } = parseArgs({
  options: { devnet: { type: "string" }, payment: { type: "string" } },
});
const devnet = JSON.parse(readFileSync(args.devnet, "utf8"));
const payment = JSON.parse(Buffer.from(args.payment, "base64").toString("utf8"));
const nonce = payment.payload.authorization.nonce;
const transport = http(devnet.rpc_url);
const chain = devnetChain(devnet.chain_id, devnet.rpc_url);
const payer = privateKeyToAccount(devnet.payer_private_key);
const signature = await payer.signTypedData({
  domain: { name: devnet.asset_name, version: devnet.asset_version, chainId: devnet.chain_id, verifyingContract: devnet.asset },
  types: { CancelAuthorization: [{ name: "authorizer", type: "address" }, { name: "nonce", type: "bytes32" }] },
  primaryType: "CancelAuthorization",
  message: { authorizer: payer.address, nonce },
});
const { r, s, v } = parseSignature(signature);
const wallet = createWalletClient({ account: payer, chain, transport });
const tx = await wallet.writeContract({
  address: devnet.asset,
  abi: parseAbi(["function cancelAuthorization(address authorizer, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)"]),
  functionName: "cancelAuthorization",
  args: [payer.address, nonce, Number(v), r, s],
});
const receipt = await createPublicClient({ chain, transport }).waitForTransactionReceipt({ hash: tx });
console.log(JSON.stringify({ tx, status: receipt.status }));
