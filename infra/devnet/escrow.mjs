// The client's and the provider's side of an ERC-8183 job on the devnet's escrows, so
// the evaluator's side (`umpire evaluate`) has jobs to judge. Prints one line of JSON.
// By default on AgenticCommerce.sol (the ERC as it now stands, the reference
// implementation's getJob); with --legacy on AgenticCommerceLegacy.sol (the earlier
// text's shape, which the evaluator also reads).
//
//   node infra/devnet/escrow.mjs create --devnet devnet.json [--budget 10000000]
//        [--description TEXT] [--expires-in 3600] [--evaluator 0x…] [--client-key 0x…]
//        [--legacy]
//     the client (the demo client, or the key given) creates a job for the demo
//     provider, sets its budget (base units of the test token, which it pays in),
//     approves the escrow and funds it: {"job_id", "job"}
//   node infra/devnet/escrow.mjs submit --devnet devnet.json --job-id N --commitment 0x…
//     the provider submits its commitment (for an Umpire evaluation, the deliverable's
//     hash: `umpire commitment deliverable.json`)
//   node infra/devnet/escrow.mjs fees --devnet devnet.json --platform-bp N --evaluator-bp N
//     the admin sets the fees taken on completion (basis points; not on --legacy)
//   node infra/devnet/escrow.mjs show --devnet devnet.json --job-id N
//     the job as the chain holds it, and the balances of everyone it pays
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
    legacy: { type: "boolean", default: false },
    "platform-bp": { type: "string", default: "0" },
    "evaluator-bp": { type: "string", default: "0" },
  },
});
const command = positionals[0];
if (!args.devnet || !["create", "submit", "fees", "show"].includes(command)) {
  console.error("usage: escrow.mjs create|submit|fees|show --devnet <devnet.json> [options] (see the file's header)");
  process.exit(2);
}
const devnet = JSON.parse(readFileSync(args.devnet, "utf8"));
if (!devnet.escrow) {
  console.error(`${args.devnet} names no escrow: redeploy with infra/devnet/deploy.mjs`);
  process.exit(2);
}

const legacy = args.legacy;
if (legacy && !devnet.escrow_legacy) {
  console.error(`${args.devnet} names no legacy escrow: redeploy with infra/devnet/deploy.mjs`);
  process.exit(2);
}
const escrow = legacy ? devnet.escrow_legacy : devnet.escrow;
const { abi } = legacy
  ? compile("AgenticCommerceLegacy.sol", "AgenticCommerceLegacy")
  : compile("AgenticCommerce.sol", "AgenticCommerce");
const erc20 = parseAbi([
  "function approve(address spender, uint256 amount) returns (bool)",
  "function balanceOf(address owner) view returns (uint256)",
]);
const transport = http(devnet.rpc_url);
const chain = devnetChain(devnet.chain_id, devnet.rpc_url);
const pub = createPublicClient({ chain, transport });
const wallet = (key) => createWalletClient({ account: privateKeyToAccount(key), chain, transport });
const jobRef = (id) => `eip155:${devnet.chain_id}:${escrow}:${id}`;

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
    const createArgs = [devnet.escrow_provider, evaluator, expiredAt, args.description, zero];
    // The current text's createJob also takes the provider's ERC-8004 agent id (none).
    if (!legacy) createArgs.push(0n);
    const created = await send(key, escrow, abi, "createJob", createArgs);
    // The id the chain gave (the simulation's answer may be another's, if two clients
    // create jobs at once).
    const [event] = parseEventLogs({ abi, logs: created.receipt.logs, eventName: "JobCreated" });
    const id = event.args.jobId;
    // The current text agrees the token with the amount; the legacy escrow has one.
    const budgetArgs = legacy ? [id, budget, "0x"] : [id, devnet.asset, budget, "0x"];
    await send(key, escrow, abi, "setBudget", budgetArgs);
    await send(key, devnet.asset, erc20, "approve", [escrow, budget]);
    const funded = await send(key, escrow, abi, "fund", [id, budget, "0x"]);
    console.log(JSON.stringify({ job_id: id.toString(), job: jobRef(id), funded: funded.hash }));
  } else if (command === "submit") {
    if (!args["job-id"] || !/^0x[0-9a-fA-F]{64}$/.test(args.commitment ?? "")) {
      console.error("submit needs --job-id N and --commitment 0x<64 hex>");
      process.exit(2);
    }
    const id = BigInt(args["job-id"]);
    const { hash } = await send(devnet.escrow_provider_private_key, escrow, abi, "submit", [
      id,
      args.commitment,
      "0x",
    ]);
    console.log(JSON.stringify({ job_id: id.toString(), job: jobRef(id), submitted: hash }));
  } else if (command === "fees") {
    if (legacy) {
      console.error("the legacy escrow takes no fees");
      process.exit(2);
    }
    const admin = devnet.escrow_admin_private_key;
    const platform = await send(admin, escrow, abi, "setPlatformFee", [
      BigInt(args["platform-bp"]),
      devnet.escrow_treasury,
    ]);
    const evaluator = await send(admin, escrow, abi, "setEvaluatorFee", [BigInt(args["evaluator-bp"])]);
    console.log(
      JSON.stringify({
        platform_bp: args["platform-bp"],
        evaluator_bp: args["evaluator-bp"],
        treasury: devnet.escrow_treasury,
        transactions: [platform.hash, evaluator.hash],
      }),
    );
  } else {
    const id = BigInt(args["job-id"] ?? "0");
    const job = await pub.readContract({ address: escrow, abi, functionName: "getJob", args: [id] });
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
        payment_token: legacy ? devnet.asset : job.paymentToken,
        submitted_at: legacy ? null : job.submittedAt.toString(),
        client_balance: (await balance(job.client)).toString(),
        provider_balance: (await balance(job.provider)).toString(),
        evaluator_balance: (await balance(job.evaluator)).toString(),
        treasury_balance: (await balance(devnet.escrow_treasury)).toString(),
        escrow_balance: (await balance(escrow)).toString(),
      }),
    );
  }
} catch (e) {
  const named = e.cause?.data?.errorName;
  const detail = named ? ` (${named}${e.cause.data.args?.length ? ` ${e.cause.data.args.join(", ")}` : ""})` : "";
  console.error(`escrow.mjs ${command}: ${e.shortMessage ?? e.message}${detail}`);
  process.exit(1);
}
