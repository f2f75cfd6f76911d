// Deploys the test EIP-3009 token (TestUSDC.sol, compiled with solcjs) on a running
// local chain, mints to the demo payer and writes devnet.json: everything a server
// and a client need to buy a verdict offline.
//
//   node infra/devnet/deploy.mjs --rpc http://127.0.0.1:8545 --out data/devnet.json
//     [--name "USD Coin"] [--version 2] [--mint 100000000]
//
// Accounts are anvil's well-known test mnemonic: 0 deploys, 1 is the demo payer,
// 2 is paid (payTo), 3 settles for the server (self-settlement), 4 is a facilitator.
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { createPublicClient, createWalletClient, http, toHex } from "viem";
import { mnemonicToAccount } from "viem/accounts";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const require = createRequire(import.meta.url);
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

// solcjs is slow to start; the artifact is cached by the source's hash.
function compile() {
  const source = readFileSync(path.join(here, "TestUSDC.sol"), "utf8");
  const solc = require("solc");
  const key = createHash("sha256").update(source).update(solc.version()).digest("hex").slice(0, 16);
  const cacheDir = path.join(root, ".cache", "devnet");
  const cached = path.join(cacheDir, `TestUSDC-${key}.json`);
  if (existsSync(cached)) return JSON.parse(readFileSync(cached, "utf8"));
  const input = {
    language: "Solidity",
    sources: { "TestUSDC.sol": { content: source } },
    settings: {
      optimizer: { enabled: true, runs: 200 },
      evmVersion: "cancun",
      outputSelection: { "*": { TestUSDC: ["abi", "evm.bytecode.object"] } },
    },
  };
  const findImports = (p) => {
    try {
      return { contents: readFileSync(require.resolve(p), "utf8") };
    } catch {
      return { error: `not found: ${p}` };
    }
  };
  const out = JSON.parse(solc.compile(JSON.stringify(input), { import: findImports }));
  const errors = (out.errors ?? []).filter((e) => e.severity === "error");
  if (errors.length) {
    throw new Error(errors.map((e) => e.formattedMessage).join("\n"));
  }
  const c = out.contracts["TestUSDC.sol"].TestUSDC;
  const artifact = { abi: c.abi, bytecode: `0x${c.evm.bytecode.object}` };
  mkdirSync(cacheDir, { recursive: true });
  // Parallel test runs deploy at once: publish the artifact atomically.
  const partial = `${cached}.${process.pid}.tmp`;
  writeFileSync(partial, JSON.stringify(artifact));
  renameSync(partial, cached);
  return artifact;
}

const account = (i) => mnemonicToAccount(MNEMONIC, { addressIndex: i });
const privateKey = (i) => toHex(account(i).getHdKey().privateKey);

const { abi, bytecode } = compile();
const transport = http(args.rpc);
const pub = createPublicClient({ transport });
const chainId = await pub.getChainId();
const chain = {
  id: chainId,
  name: "devnet",
  nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
  rpcUrls: { default: { http: [args.rpc] } },
};
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
  note: "Local test chain only: these keys are anvil's public test mnemonic. Never send real funds to them.",
};
mkdirSync(path.dirname(path.resolve(args.out)), { recursive: true });
writeFileSync(args.out, JSON.stringify(devnet, null, 2) + "\n");
console.log(JSON.stringify(devnet));
