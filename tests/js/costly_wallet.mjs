// A hostile contract-wallet payer on the devnet (infra/devnet/CostlyWallet.sol): deploys
// it (owned by anvil account --owner-index, its ERC-1271 check burning --burn rounds of
// hashing), mints it test USDC, and signs x402 payments from it for a 402 (the owner's
// EIP-712 signature and a trailing byte: a contract wallet's signature, settled through
// transferWithAuthorization's bytes overload). With --arm WALLET, the owner arms the
// wallet instead: from then on its check refuses.
//
//   node tests/js/costly_wallet.mjs --devnet devnet.json --url URL --body BODY [--burn N] [--count N]
//     prints {"wallet", "headers": [...]}
//   node tests/js/costly_wallet.mjs --devnet devnet.json --arm 0xWALLET
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { createPublicClient, createWalletClient, http, parseAbi, toHex } from "viem";
import { mnemonicToAccount } from "viem/accounts";
import { compile } from "../../infra/devnet/compile.mjs";
import { devnetChain } from "../../infra/devnet/chain.mjs";

const MNEMONIC = "test test test test test test test test test test test junk";
const { values: args } = parseArgs({
  options: {
    devnet: { type: "string" },
    url: { type: "string" },
    body: { type: "string" },
    burn: { type: "string", default: "0" },
    count: { type: "string", default: "1" },
    "owner-index": { type: "string", default: "9" },
    arm: { type: "string" },
  },
});
const devnet = JSON.parse(readFileSync(args.devnet, "utf8"));
const transport = http(devnet.rpc_url);
const chain = devnetChain(devnet.chain_id, devnet.rpc_url);
const pub = createPublicClient({ transport, chain });
const ownerAccount = mnemonicToAccount(MNEMONIC, { addressIndex: Number(args["owner-index"]) });
const owner = createWalletClient({ account: ownerAccount, chain, transport });
const { abi, bytecode } = compile("CostlyWallet.sol", "CostlyWallet");

if (args.arm) {
  const hash = await owner.writeContract({ address: args.arm, abi, functionName: "arm", args: [] });
  const receipt = await pub.waitForTransactionReceipt({ hash });
  console.log(JSON.stringify({ armed: receipt.status === "success", tx: hash }));
  process.exit(0);
}

const deployer = createWalletClient({ account: mnemonicToAccount(MNEMONIC, { addressIndex: 0 }), chain, transport });
const deployed = await pub.waitForTransactionReceipt({
  hash: await deployer.deployContract({ abi, bytecode, args: [ownerAccount.address, BigInt(args.burn)] }),
});
const wallet = deployed.contractAddress;
const token = parseAbi(["function mint(address to, uint256 amount)"]);
await pub.waitForTransactionReceipt({
  hash: await deployer.writeContract({ address: devnet.asset, abi: token, functionName: "mint", args: [wallet, 100_000_000n] }),
});

// The 402 this payment answers.
const unpaid = await fetch(args.url, {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: args.body,
});
const required = JSON.parse(Buffer.from(unpaid.headers.get("payment-required"), "base64").toString("utf8"));
const accepted = required.accepts.find((a) => a.network === devnet.network);
const headers = [];
for (let i = 0; i < Number(args.count); i++) {
  const now = Math.floor(Date.now() / 1000);
  const authorization = {
    from: wallet,
    to: accepted.payTo,
    value: accepted.amount,
    validAfter: String(now - 600),
    validBefore: String(now + accepted.maxTimeoutSeconds),
    nonce: toHex(crypto.getRandomValues(new Uint8Array(32))),
  };
  const signature = await ownerAccount.signTypedData({
    domain: { name: devnet.asset_name, version: devnet.asset_version, chainId: devnet.chain_id, verifyingContract: devnet.asset },
    types: {
      TransferWithAuthorization: [
        { name: "from", type: "address" },
        { name: "to", type: "address" },
        { name: "value", type: "uint256" },
        { name: "validAfter", type: "uint256" },
        { name: "validBefore", type: "uint256" },
        { name: "nonce", type: "bytes32" },
      ],
    },
    primaryType: "TransferWithAuthorization",
    message: {
      ...authorization,
      value: BigInt(authorization.value),
      validAfter: BigInt(authorization.validAfter),
      validBefore: BigInt(authorization.validBefore),
    },
  });
  const payment = {
    x402Version: 2,
    resource: required.resource,
    accepted,
    payload: { signature: signature + "00", authorization },
  };
  headers.push(Buffer.from(JSON.stringify(payment)).toString("base64"));
}
console.log(JSON.stringify({ wallet, owner: ownerAccount.address, headers }));
