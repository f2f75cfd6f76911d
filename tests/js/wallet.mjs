// A contract-wallet payer on the devnet: deploys infra/devnet/TestWallet.sol (ERC-1271,
// owned by anvil account --owner-index), mints it test USDC, and has the owner pay the
// merchant through the wallet. Prints {"wallet", "tx", "owner", "owner_private_key"}.
//
//   node tests/js/wallet.mjs --devnet devnet.json --merchant 0x.. --amount 1000000 [--owner-index 8]
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { createPublicClient, createWalletClient, encodeFunctionData, http, parseAbi, toHex } from "viem";
import { mnemonicToAccount } from "viem/accounts";
import { compile } from "../../infra/devnet/compile.mjs";

const MNEMONIC = "test test test test test test test test test test test junk";
const { values: args } = parseArgs({
  options: {
    devnet: { type: "string" },
    merchant: { type: "string" },
    amount: { type: "string" },
    "owner-index": { type: "string", default: "8" },
  },
});
const devnet = JSON.parse(readFileSync(args.devnet, "utf8"));
const transport = http(devnet.rpc_url);
const chain = {
  id: devnet.chain_id,
  name: "devnet",
  nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
  rpcUrls: { default: { http: [devnet.rpc_url] } },
};
const pub = createPublicClient({ transport, chain });
const ownerAccount = mnemonicToAccount(MNEMONIC, { addressIndex: Number(args["owner-index"]) });
const deployer = createWalletClient({ account: mnemonicToAccount(MNEMONIC, { addressIndex: 0 }), chain, transport });
const owner = createWalletClient({ account: ownerAccount, chain, transport });
const token = parseAbi([
  "function mint(address to, uint256 amount)",
  "function transfer(address to, uint256 amount) returns (bool)",
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
const tx = await owner.writeContract({ address: wallet, abi, functionName: "execute", args: [devnet.asset, data] });
const receipt = await pub.waitForTransactionReceipt({ hash: tx });
if (receipt.status !== "success") throw new Error(`the wallet's payment reverted: ${tx}`);
console.log(JSON.stringify({
  wallet,
  tx,
  owner: ownerAccount.address,
  owner_private_key: toHex(ownerAccount.getHdKey().privateKey),
}));
