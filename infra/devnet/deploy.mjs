// Deploys the test EIP-3009 token (TestUSDC.sol, compiled with solcjs) and two ERC-8183
// job escrows on a running local chain: AgenticCommerce.sol (the ERC as it now stands,
// `getJob` in the reference implementation's layout; its jobs pay in the test token)
// and AgenticCommerceLegacy.sol (the earlier text: one token per contract, set to the
// test token). Mints to the demo payer and the escrows' demo client, and writes
// devnet.json: everything a server and a client need to buy a verdict offline, and to
// evaluate an escrowed job with one.
//
//   node infra/devnet/deploy.mjs --rpc http://127.0.0.1:8545 --out data/devnet.json
//     [--name "USD Coin"] [--version 2] [--mint 100000000]
//
// Accounts are anvil's well-known test mnemonic: 0 deploys, 1 is the demo payer,
// 2 is paid (payTo), 3 settles for the server (self-settlement), 4 is a facilitator,
// 5 is a demo merchant for feedback, 6 is the escrow's demo client (it funds jobs) and
// 7 its demo provider (and the demo ERC-8004 agent's owner), 8 the escrow's fee
// treasury (0 is the escrow's admin, who sets its fees), 9 Umpire's ERC-8004 validator,
// 10 Umpire's batch-settlement receiver authorizer (it signs claims; it needs no ETH).
// The ERC-8004 Identity and Validation registries (IdentityRegistry.sol,
// ValidationRegistry.sol) are deployed too, and x402's batch-settlement contract and its
// EIP-3009 deposit collector (x402BatchSettlement.sol) at the addresses `@x402/evm` names
// (deployed, then their code copied there with `anvil_setCode`), so the reference
// clients find them unmodified. The demo payer is also the jobs' evaluator: it pays Umpire for the verdict
// and completes or rejects the job with it.
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { parseArgs } from "node:util";
import { BATCH_SETTLEMENT_ADDRESS, ERC3009_DEPOSIT_COLLECTOR_ADDRESS } from "@x402/evm";
import { createPublicClient, createWalletClient, http, toHex } from "viem";
import { mnemonicToAccount } from "viem/accounts";
import { compile } from "./compile.mjs";
import { devnetChain } from "./chain.mjs";

export const MNEMONIC = "test test test test test test test test test test test junk";

const { values: args } = parseArgs({
  options: {
    rpc: { type: "string" },
    out: { type: "string" },
    name: { type: "string", default: "USD Coin" },
    version: { type: "string", default: "2" },
    mint: { type: "string", default: "100000000" },
  },
});
if (!args.rpc || !args.out) {
  console.error("usage: deploy.mjs --rpc <url> --out <devnet.json> [--name N] [--version V] [--mint units]");
  process.exit(2);
}

const account = (i) => mnemonicToAccount(MNEMONIC, { addressIndex: i });
const privateKey = (i) => toHex(account(i).getHdKey().privateKey);

const { abi, bytecode } = compile("TestUSDC.sol", "TestUSDC");
const transport = http(args.rpc);
const pub = createPublicClient({ transport });
const chainId = await pub.getChainId();
const chain = devnetChain(chainId, args.rpc);
const deployer = createWalletClient({ account: account(0), chain, transport });
const deployHash = await deployer.deployContract({ abi, bytecode, args: [args.name, args.version] });
const receipt = await pub.waitForTransactionReceipt({ hash: deployHash });
const asset = receipt.contractAddress;
const payer = account(1).address;
const mintHash = await deployer.writeContract({
  address: asset,
  abi,
  functionName: "mint",
  args: [payer, BigInt(args.mint)],
});
await pub.waitForTransactionReceipt({ hash: mintHash });

const deployed = async (file, contract, deployArgs) => {
  const hash = await deployer.deployContract({ ...compile(file, contract), args: deployArgs });
  return (await pub.waitForTransactionReceipt({ hash })).contractAddress;
};
const escrowTreasury = account(8).address;
const escrow = await deployed("AgenticCommerce.sol", "AgenticCommerce", [escrowTreasury]);
const escrowLegacy = await deployed("AgenticCommerceLegacy.sol", "AgenticCommerceLegacy", [asset]);
// ERC-8004: agents' identities, and validation requests answered by Umpire's validator.
const identityRegistry = await deployed("IdentityRegistry.sol", "IdentityRegistry", []);
const validationRegistry = await deployed("ValidationRegistry.sol", "ValidationRegistry", [identityRegistry]);
// batch-settlement: the EIP-712 domain every channel id and voucher is signed under names
// the contract's address, so it must run at the one the reference package names. Its
// code reads its own address at run time; the collector's immutable is built with the
// canonical settlement address before its code is copied.
const placeAt = async (target, file, contract, deployArgs) => {
  const built = await deployed(file, contract, deployArgs);
  const code = await pub.getCode({ address: built });
  await pub.request({ method: "anvil_setCode", params: [target, code] });
  return target;
};
const batchSettlement = await placeAt(BATCH_SETTLEMENT_ADDRESS, "x402BatchSettlement.sol", "x402BatchSettlement", []);
const depositCollector = await placeAt(
  ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
  "x402BatchSettlement.sol",
  "ERC3009DepositCollector",
  [BATCH_SETTLEMENT_ADDRESS],
);
const escrowClient = account(6).address;
const clientMint = await deployer.writeContract({
  address: asset,
  abi,
  functionName: "mint",
  args: [escrowClient, 100_000_000n],
});
await pub.waitForTransactionReceipt({ hash: clientMint });

const devnet = {
  rpc_url: args.rpc,
  network: `eip155:${chainId}`,
  chain_id: chainId,
  asset,
  asset_name: args.name,
  asset_version: args.version,
  asset_decimals: 6,
  pay_to: account(2).address,
  payer: payer,
  payer_private_key: privateKey(1),
  payer_balance: args.mint,
  settler: account(3).address,
  settler_private_key: privateKey(3),
  facilitator: account(4).address,
  facilitator_private_key: privateKey(4),
  merchant: account(5).address,
  escrow,
  escrow_legacy: escrowLegacy,
  escrow_admin_private_key: privateKey(0),
  escrow_treasury: escrowTreasury,
  escrow_client: escrowClient,
  escrow_client_private_key: privateKey(6),
  escrow_client_balance: "100000000",
  escrow_provider: account(7).address,
  escrow_provider_private_key: privateKey(7),
  evaluator: payer,
  identity_registry: identityRegistry,
  validation_registry: validationRegistry,
  batch_settlement: batchSettlement,
  erc3009_deposit_collector: depositCollector,
  receiver_authorizer: account(10).address,
  receiver_authorizer_private_key: privateKey(10),
  validator: account(9).address,
  validator_private_key: privateKey(9),
  agent_owner: account(7).address,
  agent_owner_private_key: privateKey(7),
  note: "Local test chain only: these keys are anvil's public test mnemonic. Never send real funds to them.",
};
mkdirSync(path.dirname(path.resolve(args.out)), { recursive: true });
writeFileSync(args.out, JSON.stringify(devnet, null, 2) + "\n");
console.log(JSON.stringify(devnet));
