// A contract-wallet payer on the devnet: deploys infra/devnet/TestWallet.sol (ERC-1271,
// owned by anvil account --owner-index), mints it test USDC, and has the owner pay the
// merchant through the wallet. Prints {"wallet", "tx", "owner", "owner_private_key"}.
//
//   node tests/js/wallet.mjs --devnet devnet.json --merchant 0x.. --amount 1000000 [--owner-index 8]
//     [--back 400000 --merchant-index 5 [--back-to 0x..]]
//
// With --back, the same transaction also moves `back` from the merchant (anvil account
// --merchant-index, by an EIP-3009 authorization it signs) back to the wallet: a round
// trip in one transaction (the wallet's executeBatch); --back-to sends it on to another
// address instead (a flash loan repaid, say).
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { createPublicClient, createWalletClient, encodeFunctionData, http, parseAbi, parseSignature, toHex } from "viem";
import { mnemonicToAccount } from "viem/accounts";
import { compile } from "../../infra/devnet/compile.mjs";
import { devnetChain } from "../../infra/devnet/chain.mjs";

const MNEMONIC = "test test test test test test test test test test test junk";
const { values: args } = parseArgs({
  options: {
    devnet: { type: "string" },
    merchant: { type: "string" },
    amount: { type: "string" },
    "owner-index": { type: "string", default: "8" },
    back: { type: "string" },
    "merchant-index": { type: "string", default: "5" },
    "back-to": { type: "string" },
  },
});
const devnet = JSON.parse(readFileSync(args.devnet, "utf8"));
const transport = http(devnet.rpc_url);
const chain = devnetChain(devnet.chain_id, devnet.rpc_url);
const pub = createPublicClient({ transport, chain });
const ownerAccount = mnemonicToAccount(MNEMONIC, { addressIndex: Number(args["owner-index"]) });
const deployer = createWalletClient({ account: mnemonicToAccount(MNEMONIC, { addressIndex: 0 }), chain, transport });
const owner = createWalletClient({ account: ownerAccount, chain, transport });
const token = parseAbi([
  "function mint(address to, uint256 amount)",
  "function transfer(address to, uint256 amount) returns (bool)",
  "function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)",
]);

const { abi, bytecode } = compile("TestWallet.sol", "TestWallet");
const deployed = await pub.waitForTransactionReceipt({
  hash: await deployer.deployContract({ abi, bytecode, args: [ownerAccount.address] }),
});
const wallet = deployed.contractAddress;
await pub.waitForTransactionReceipt({
  hash: await deployer.writeContract({ address: devnet.asset, abi: token, functionName: "mint", args: [wallet, BigInt(args.amount)] }),
});
const data = encodeFunctionData({ abi: token, functionName: "transfer", args: [args.merchant, BigInt(args.amount)] });
let tx;
if (args.back === undefined) {
  tx = await owner.writeContract({ address: wallet, abi, functionName: "execute", args: [devnet.asset, data] });
} else {
  const merchantAccount = mnemonicToAccount(MNEMONIC, { addressIndex: Number(args["merchant-index"]) });
  const message = {
    from: merchantAccount.address,
    to: args["back-to"] ?? wallet,
    value: BigInt(args.back),
    validAfter: 0n,
    validBefore: BigInt(Math.floor(Date.now() / 1000) + 3600),
    nonce: toHex(crypto.getRandomValues(new Uint8Array(32))),
  };
  const signature = await merchantAccount.signTypedData({
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
    message,
  });
  const { r, s, v } = parseSignature(signature);
  const giveBack = encodeFunctionData({
    abi: token,
    functionName: "transferWithAuthorization",
    args: [message.from, message.to, message.value, message.validAfter, message.validBefore, message.nonce, Number(v), r, s],
  });
  tx = await owner.writeContract({ address: wallet, abi, functionName: "executeBatch", args: [[devnet.asset, devnet.asset], [data, giveBack]] });
}
const receipt = await pub.waitForTransactionReceipt({ hash: tx });
if (receipt.status !== "success") throw new Error(`the wallet's payment reverted: ${tx}`);
console.log(JSON.stringify({
  wallet,
  tx,
  owner: ownerAccount.address,
  owner_private_key: toHex(ownerAccount.getHdKey().privateKey),
}));
