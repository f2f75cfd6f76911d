// `make devnet`: local chains and a server selling on them, so anyone can buy a verdict
// offline. Starts anvil and deploys the test EIP-3009 token (deploy.mjs, devnet.json);
// starts a local Solana chain (svm.mjs, svm.json: test USDC, funded payers), the
// reference x402 facilitator for Solana USDC on it, and a stand-in SOL/USD price feed;
// then runs `umpire serve` selling on all three rails (EVM self-settled with the
// devnet's settler key; Solana USDC through the facilitator; native SOL broadcast by
// Umpire itself; feedback read from the EVM chain with the test token as USDC). Ctrl-C
// stops them all.
//
//   node infra/devnet/devnet.mjs [--umpire <binary>] [--data-dir DIR] [--rpc-port 8545] [--addr 127.0.0.1:8080]
//     [--block-time 2]   a block every N seconds, as on Base (default: each transaction
//                        mined at once); set after the token is deployed
import { spawn, spawnSync } from "node:child_process";
import http from "node:http";
import { mkdirSync, readFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const defaultDataDir =
  process.env.UMPIRE_DATA_DIR ??
  (process.env.XDG_DATA_HOME ? path.join(process.env.XDG_DATA_HOME, "umpire") : path.join(os.homedir(), ".local/share/umpire"));

const { values: args } = parseArgs({
  options: {
    umpire: { type: "string", default: "umpire" },
    "data-dir": { type: "string", default: defaultDataDir },
    "rpc-port": { type: "string", default: "8545" },
    addr: { type: "string", default: "127.0.0.1:8080" },
    "block-time": { type: "string", default: "0" },
  },
});
const blockTime = Number(args["block-time"]);

const anvilBin = path.join(root, "node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil");
const anvil = spawn(anvilBin, ["--host", "127.0.0.1", "--port", args["rpc-port"], "--silent"], {
  stdio: ["ignore", "inherit", "inherit"],
});
const children = [anvil];
const stop = (code) => {
  for (const c of children) c.kill("SIGTERM");
  process.exit(code);
};
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => stop(0));
anvil.on("exit", (code) => {
  console.error(`anvil exited (${code})`);
  stop(1);
});

const rpc = `http://127.0.0.1:${args["rpc-port"]}`;
// anvil takes a moment to listen.
for (let i = 0; ; i++) {
  try {
    await fetch(rpc, { method: "POST", headers: { "content-type": "application/json" }, body: '{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}' });
    break;
  } catch (e) {
    if (i > 100) {
      console.error(`anvil did not start on ${rpc}: ${e}`);
      stop(1);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

const out = path.join(args["data-dir"], "devnet.json");
const deployed = spawnSync(process.execPath, [path.join(here, "deploy.mjs"), "--rpc", rpc, "--out", out], {
  stdio: ["ignore", "ignore", "inherit"],
});
if (deployed.status !== 0) stop(1);
const devnet = JSON.parse(readFileSync(out, "utf8"));
if (blockTime > 0) {
  // Deployed at once; from now on a block every `blockTime` seconds.
  for (const [method, params] of [["evm_setAutomine", [false]], ["evm_setIntervalMining", [blockTime]]]) {
    await fetch(rpc, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }) });
  }
  console.error(`anvil makes a block every ${blockTime} s`);
}

// A node process that prints {"port": N} first: its port.
const started = (script, argv) =>
  new Promise((resolve) => {
    const child = spawn(process.execPath, [path.join(root, script), ...argv], { stdio: ["ignore", "pipe", "inherit"] });
    children.push(child);
    child.on("exit", (code) => {
      console.error(`${script} exited (${code})`);
      stop(1);
    });
    let seen = "";
    child.stdout.on("data", (chunk) => {
      seen += chunk;
      const line = seen.split("\n")[0];
      if (seen.includes("\n")) resolve(JSON.parse(line).port);
    });
  });

// Solana: the local chain, the facilitator's fee payer settling USDC on it.
const svmOut = path.join(args["data-dir"], "svm.json");
await started("infra/devnet/svm.mjs", ["--out", svmOut]);
const svm = JSON.parse(readFileSync(svmOut, "utf8"));
const facilitatorPort = await started("tests/js/facilitator.mjs", ["--svm", svmOut]);
// No price feed is reachable offline: a stand-in speaking Coinbase's spot-price shape.
const SOL_USD = "150.00";
const feed = http.createServer((_, res) => {
  res.writeHead(200, { "content-type": "application/json" });
  res.end(JSON.stringify({ data: { amount: SOL_USD, base: "SOL", currency: "USD" } }));
});
await new Promise((r) => feed.listen(0, "127.0.0.1", r));

// ERC-8004: Umpire registers as an agent (owned by its validator's address), its
// registration file served by the umpire serve started below; it answers validation
// requests on the devnet's registry with the validator key.
const issuer = process.env.UMPIRE_ISSUER ?? `http://${args.addr}`;
const registered = spawnSync(
  process.execPath,
  [
    path.join(here, "validation.mjs"),
    "register",
    "--devnet",
    out,
    "--uri",
    `${issuer}/.well-known/agent-registration.json`,
    "--key",
    devnet.validator_private_key,
  ],
  { stdio: ["ignore", "pipe", "inherit"] },
);
if (registered.status !== 0) stop(1);
const umpireAgent = JSON.parse(String(registered.stdout).trim().split("\n").pop()).agent_id;

const env = {
  ...process.env,
  UMPIRE_VALIDATION_REGISTRY: `eip155:${devnet.chain_id}:${devnet.validation_registry}`,
  UMPIRE_VALIDATION_RPC_URL: devnet.rpc_url,
  UMPIRE_VALIDATOR_KEY_HEX: devnet.validator_private_key,
  UMPIRE_AGENT_REGISTRY: `eip155:${devnet.chain_id}:${devnet.identity_registry}`,
  UMPIRE_AGENT_ID: umpireAgent,
  UMPIRE_EVM_PAY_TO: devnet.pay_to,
  UMPIRE_EVM_NETWORK: devnet.network,
  UMPIRE_EVM_ASSET: devnet.asset,
  UMPIRE_EVM_ASSET_NAME: devnet.asset_name,
  UMPIRE_EVM_ASSET_VERSION: devnet.asset_version,
  UMPIRE_SETTLEMENT: "self",
  UMPIRE_EVM_RPC_URL: devnet.rpc_url,
  UMPIRE_SETTLER_PRIVATE_KEY: devnet.settler_private_key,
  UMPIRE_EVM_BLOCK_TIME_MS: String(blockTime * 1000),
  UMPIRE_ISSUER: issuer,
  // Feedback reads this chain, with the test token standing in for USDC.
  UMPIRE_FEEDBACK_RPC_URL: devnet.rpc_url,
  UMPIRE_FEEDBACK_CHAIN_ID: String(devnet.chain_id),
  UMPIRE_FEEDBACK_USDC: devnet.asset,
  UMPIRE_FEEDBACK_CONFIRMATIONS: "1",
  UMPIRE_SOLANA_PAY_TO: svm.pay_to,
  UMPIRE_SOLANA_FEE_PAYER: svm.fee_payer,
  UMPIRE_SOLANA_NETWORK: svm.network,
  UMPIRE_SOLANA_USDC_MINT: svm.usdc_mint,
  UMPIRE_FACILITATOR_URL: `http://127.0.0.1:${facilitatorPort}`,
  UMPIRE_SOL_NATIVE: "on",
  UMPIRE_SOLANA_RPC_URL: svm.rpc_url,
  UMPIRE_SOL_PRICE_URL: `http://127.0.0.1:${feed.address().port}/v2/prices/SOL-USD/spot`,
};
// The service's own state (its store, its signing key) belongs to this chain: a fresh
// anvil reuses transaction hashes and nonces, so a store kept from an earlier chain
// would answer `duplicate_feedback` or replay purchases of a chain that no longer
// exists. One directory per chain, named by its genesis block (anvil stamps it with the
// time it started).
const genesis = await fetch(rpc, {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: '{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["0x0",false]}',
}).then((r) => r.json());
const chainDir = path.join(args["data-dir"], "devnet", `chain-${String(genesis.result?.hash ?? Date.now()).slice(2, 14)}`);
mkdirSync(chainDir, { recursive: true });
console.error(`umpire serve keeps this chain's state in ${chainDir}`);
const server = spawn(args.umpire, ["serve", "--addr", args.addr, "--data-dir", chainDir], {
  env,
  stdio: ["ignore", "inherit", "inherit"],
});
children.push(server);
server.on("exit", (code) => {
  console.error(`umpire serve exited (${code})`);
  stop(code ?? 1);
});

console.error(`
devnet: chain ${devnet.chain_id} at ${rpc}, token ${devnet.asset} ("${devnet.asset_name}" v${devnet.asset_version})
        demo payer ${devnet.payer} holds ${Number(devnet.payer_balance) / 1e6} test USDC; payTo ${devnet.pay_to}
        ${out}
solana: local chain at ${svm.rpc_url} (litesvm), test USDC at ${svm.usdc_mint}; SOL at $${SOL_USD} (stand-in feed)
        payer ${svm.payer} holds ${Number(svm.payer_usdc) / 1e6} USDC and 10 SOL; ${svm.sol_payer} holds 10 SOL only
        payTo ${svm.pay_to}; facilitator fee payer ${svm.fee_payer}
        ${svmOut}

With the umpire client (in another terminal; see README, "The umpire client"):
  export UMPIRE_BASE_URL=http://${args.addr} UMPIRE_WALLET_KEY=${devnet.payer_private_key}
  umpire buy basic --spec spec.json --deliverable deliverable.json > basic.json
  umpire verify basic.json --key http://${args.addr}/.well-known/umpire-key.json --deliverable deliverable.json
  umpire feedback --tx <settlement.transaction from basic.json> --merchant ${devnet.pay_to} --outcome fulfilled
  umpire reputation ${devnet.pay_to}
  (the devnet's payer key is anvil's public test key: never use it anywhere else)

ERC-8004: Umpire is agent ${umpireAgent} and validator ${devnet.validator} on registry ${devnet.validation_registry}
  (the walk-through, an agent asking and an auditor checking, is in docs/erc8004.md)

Pay on Solana instead: USDC (the facilitator settles), or native SOL at the 402's quote:
  umpire buy basic --spec spec.json --deliverable deliverable.json \\
    --rail solana --solana-keypair ${svm.payer_keypair} --solana-rpc ${svm.rpc_url}
  umpire buy basic --spec spec.json --deliverable deliverable.json \\
    --rail sol --max-amount 0.05sol --solana-keypair ${svm.sol_payer_keypair} --solana-rpc ${svm.rpc_url}

Buy a basic verdict with the reference x402 client:
  node tests/js/buy.mjs --devnet ${out} --url http://${args.addr}/v1/verdicts/basic \\
    --key "$(node -e 'console.log(crypto.randomUUID())')" \\
    --body '{"spec":{"checks":[{"type":"regex","pattern":"^# Report"}]},"deliverable":{"text":"# Report"}}'

Evaluate an ERC-8183 job (escrow ${devnet.escrow}; the payer above is its evaluator):
  JOB=$(node infra/devnet/escrow.mjs create --devnet ${out} | jq -r .job)
  node infra/devnet/escrow.mjs submit --devnet ${out} --job-id \${JOB##*:} --commitment $(umpire commitment deliverable.json)
  umpire evaluate --job $JOB --rpc ${rpc} --spec spec.json --deliverable deliverable.json > job.json
  umpire verify job.json --key http://${args.addr}/.well-known/umpire-key.json --job $JOB --rpc ${rpc}

Pay a merchant, leave feedback, and buy its reputation report ($0.01):
  node infra/devnet/feedback.mjs --devnet ${out} --url http://${args.addr} --merchant ${devnet.merchant}
  node tests/js/buy.mjs --devnet ${out} --method GET --url "http://${args.addr}/v1/reputation?merchant=${devnet.merchant}"
`);
