// `make devnet`: a local chain and a server selling on it, so anyone can buy a
// verdict offline. Starts anvil, deploys the test EIP-3009 token (deploy.mjs), writes
// devnet.json into the data directory and runs `umpire serve` configured for it
// (self-settlement with the devnet's settler key; feedback read from this chain with the
// test token as USDC). Ctrl-C stops both.
//
//   node infra/devnet/devnet.mjs [--umpire <binary>] [--data-dir DIR] [--rpc-port 8545] [--addr 127.0.0.1:8080]
import { spawn, spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
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
  },
});

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

const env = {
  ...process.env,
  UMPIRE_EVM_PAY_TO: devnet.pay_to,
  UMPIRE_EVM_NETWORK: devnet.network,
  UMPIRE_EVM_ASSET: devnet.asset,
  UMPIRE_EVM_ASSET_NAME: devnet.asset_name,
  UMPIRE_EVM_ASSET_VERSION: devnet.asset_version,
  UMPIRE_SETTLEMENT: "self",
  UMPIRE_EVM_RPC_URL: devnet.rpc_url,
  UMPIRE_SETTLER_PRIVATE_KEY: devnet.settler_private_key,
  UMPIRE_ISSUER: process.env.UMPIRE_ISSUER ?? `http://${args.addr}`,
  // Feedback reads this chain, with the test token standing in for USDC.
  UMPIRE_FEEDBACK_RPC_URL: devnet.rpc_url,
  UMPIRE_FEEDBACK_CHAIN_ID: String(devnet.chain_id),
  UMPIRE_FEEDBACK_USDC: devnet.asset,
  UMPIRE_FEEDBACK_CONFIRMATIONS: "1",
};
const server = spawn(args.umpire, ["serve", "--addr", args.addr, "--data-dir", args["data-dir"]], {
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

With the umpire client (in another terminal; see README, "The umpire client"):
  export UMPIRE_BASE_URL=http://${args.addr} UMPIRE_WALLET_KEY=${devnet.payer_private_key}
  umpire buy basic --spec spec.json --deliverable deliverable.json > basic.json
  umpire verify basic.json --key http://${args.addr}/.well-known/umpire-key.json --deliverable deliverable.json
  umpire feedback --tx <settlement.transaction from basic.json> --merchant ${devnet.pay_to} --outcome fulfilled
  umpire reputation ${devnet.pay_to}
  (the devnet's payer key is anvil's public test key: never use it anywhere else)

Buy a basic verdict with the reference x402 client:
  node tests/js/buy.mjs --devnet ${out} --url http://${args.addr}/v1/verdicts/basic \\
    --key "$(node -e 'console.log(crypto.randomUUID())')" \\
    --body '{"spec":{"checks":[{"type":"regex","pattern":"^# Report"}]},"deliverable":{"text":"# Report"}}'

Pay a merchant, leave feedback, and buy its reputation report ($0.01):
  node infra/devnet/feedback.mjs --devnet ${out} --url http://${args.addr} --merchant ${devnet.merchant}
  node tests/js/buy.mjs --devnet ${out} --method GET --url "http://${args.addr}/v1/reputation?merchant=${devnet.merchant}"
`);
