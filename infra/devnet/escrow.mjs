// The client's and the provider's side of an ERC-8183 job on the devnet's escrow
// (AgenticCommerce.sol), so the evaluator's side (`umpire evaluate`) has jobs to judge.
// Prints one line of JSON.
//
//   node infra/devnet/escrow.mjs create --devnet devnet.json [--budget 10000000]
//        [--description TEXT] [--expires-in 3600] [--evaluator 0x…] [--client-key 0x…]
//     the client (the demo client, or the key given) creates a job for the demo
//     provider, sets its budget (base units of the test token), approves the escrow and
//     funds it: {"job_id", "job"}
//   node infra/devnet/escrow.mjs submit --devnet devnet.json --job-id N --commitment 0x…
//     the provider submits its commitment (for an Umpire evaluation, the deliverable's
//     hash: `umpire commitment deliverable.json`)
//   node infra/devnet/escrow.mjs show --devnet devnet.json --job-id N
//     the job as the chain holds it, and the client's and provider's balances
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { createPublicClient, createWalletClient, http, parseAbi, parseEventLogs } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { compile } from "./compile.mjs";
import { devnetChain } from "./chain.mjs";

const { values: args, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    devnet: { type: "string" },
    budget: { type: "string", default: "10000000" },
    description: { type: "string", default: "" },
    "expires-in": { type: "string", default: "3600" },
    evaluator: { type: "string" },
    "client-key": { type: "string" },
    "job-id": { type: "string" },
    commitment: { type: "string" },
  },
});
const command = positionals[0];
if (!args.devnet || !["create", "submit", "show"].includes(command)) {
  console.error("usage: escrow.mjs create|submit|show --devnet <devnet.json> [options] (see the file's header)");
  process.exit(2);
}
const devnet = JSON.parse(readFileSync(args.devnet, "utf8"));
if (!devnet.escrow) {
  console.error(`${args.devnet} names no escrow: redeploy with infra/devnet/deploy.mjs`);
  process.exit(2);
}

const { abi } = compile("AgenticCommerce.sol", "AgenticCommerce");
const erc20 = parseAbi([
  "function approve(address spender, uint256 amount) returns (bool)",
  "function balanceOf(address owner) view returns (uint256)",
]);
const transport = http(devnet.rpc_url);
const chain = devnetChain(devnet.chain_id, devnet.rpc_url);
const pub = createPublicClient({ chain, transport });
const wallet = (key) => createWalletClient({ account: privateKeyToAccount(key), chain, transport });
const jobRef = (id) => `eip155:${devnet.chain_id}:${devnet.escrow}:${id}`;

// Simulates first, so a revert reports the contract's error by name.
async function send(key, address, callAbi, functionName, fnArgs) {
  const w = wallet(key);
  const { request, result } = await pub.simulateContract({
    account: w.account,
    address,
    abi: callAbi,
    functionName,
    args: fnArgs,
  });
  const hash = await w.writeContract(request);
  const receipt = await pub.waitForTransactionReceipt({ hash });
  if (receipt.status !== "success") throw new Error(`${functionName} reverted in ${hash}`);
  return { hash, result, receipt };
}

const STATUS = ["Open", "Funded", "Submitted", "Completed", "Rejected", "Expired"];

try {
  if (command === "create") {
    const key = args["client-key"] ?? devnet.escrow_client_private_key;
    const budget = BigInt(args.budget);
    const block = await pub.getBlock();
    const expiredAt = block.timestamp + BigInt(args["expires-in"]);
    const evaluator = args.evaluator ?? devnet.evaluator;
    const zero = "0x0000000000000000000000000000000000000000";
    const created = await send(key, devnet.escrow, abi, "createJob", [
      devnet.escrow_provider,
      evaluator,
      expiredAt,
      args.description,
      zero,
    ]);
    // The id the chain gave (the simulation's answer may be another's, if two clients
    // create jobs at once).
    const [event] = parseEventLogs({ abi, logs: created.receipt.logs, eventName: "JobCreated" });
    const id = event.args.jobId;
    await send(key, devnet.escrow, abi, "setBudget", [id, budget, "0x"]);
    await send(key, devnet.asset, erc20, "approve", [devnet.escrow, budget]);
    const funded = await send(key, devnet.escrow, abi, "fund", [id, budget, "0x"]);
    console.log(JSON.stringify({ job_id: id.toString(), job: jobRef(id), funded: funded.hash }));
  } else if (command === "submit") {
    if (!args["job-id"] || !/^0x[0-9a-fA-F]{64}$/.test(args.commitment ?? "")) {
      console.error("submit needs --job-id N and --commitment 0x<64 hex>");
      process.exit(2);
    }
    const id = BigInt(args["job-id"]);
    const { hash } = await send(devnet.escrow_provider_private_key, devnet.escrow, abi, "submit", [
      id,
      args.commitment,
      "0x",
    ]);
    console.log(JSON.stringify({ job_id: id.toString(), job: jobRef(id), submitted: hash }));
  } else {
    const id = BigInt(args["job-id"] ?? "0");
    const job = await pub.readContract({ address: devnet.escrow, abi, functionName: "getJob", args: [id] });
    const balance = (owner) =>
      pub.readContract({ address: devnet.asset, abi: erc20, functionName: "balanceOf", args: [owner] });
    console.log(
      JSON.stringify({
        job_id: id.toString(),
        job: jobRef(id),
        status: STATUS[job.status],
        client: job.client,
        provider: job.provider,
        evaluator: job.evaluator,
        budget: job.budget.toString(),
        expired_at: job.expiredAt.toString(),
        description: job.description,
        client_balance: (await balance(job.client)).toString(),
        provider_balance: (await balance(job.provider)).toString(),
        escrow_balance: (await balance(devnet.escrow)).toString(),
      }),
    );
  }
} catch (e) {
  const named = e.cause?.data?.errorName;
  const detail = named ? ` (${named}${e.cause.data.args?.length ? ` ${e.cause.data.args.join(", ")}` : ""})` : "";
  console.error(`escrow.mjs ${command}: ${e.shortMessage ?? e.message}${detail}`);
  process.exit(1);
}
