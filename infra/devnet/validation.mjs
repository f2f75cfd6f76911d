// ERC-8004 on the devnet: an agent's owner registers the agent (IdentityRegistry.sol)
// and asks a validator to check its work (ValidationRegistry.sol); a validator answers.
// Prints one line of JSON.
//
//   node infra/devnet/validation.mjs register --devnet devnet.json [--uri URI] [--key 0x…]
//     the agent owner (the demo provider, or the key given) registers an agent: {"agent_id"}
//   node infra/devnet/validation.mjs request --devnet devnet.json --agent-id N
//        --request-uri URI --request-hash 0x… [--validator 0x…] [--key 0x…]
//     the owner asks the validator (Umpire's, by default) to check the work
//   node infra/devnet/validation.mjs respond --devnet devnet.json --request-hash 0x…
//        --response 0..100 [--response-uri URI] [--response-hash 0x…] [--tag T] [--key 0x…]
//     a validator (Umpire's key by default) answers
//   node infra/devnet/validation.mjs status --devnet devnet.json --request-hash 0x…
//        [--agent-id N --tag T]
//     the request's status, its latest answer's response_uri (from the event), and, with
//     --agent-id, the agent's summary for the tag
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { createPublicClient, createWalletClient, http, parseEventLogs } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { compile } from "./compile.mjs";
import { devnetChain } from "./chain.mjs";

const { values: args, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    devnet: { type: "string" },
    key: { type: "string" },
    uri: { type: "string", default: "" },
    "agent-id": { type: "string" },
    "request-uri": { type: "string", default: "" },
    "request-hash": { type: "string" },
    validator: { type: "string" },
    response: { type: "string" },
    "response-uri": { type: "string", default: "" },
    "response-hash": { type: "string", default: `0x${"0".repeat(64)}` },
    tag: { type: "string", default: "" },
  },
});
const command = positionals[0];
if (!args.devnet || !["register", "request", "respond", "status"].includes(command)) {
  console.error("usage: validation.mjs register|request|respond|status --devnet <devnet.json> [options] (see the file's header)");
  process.exit(2);
}
const devnet = JSON.parse(readFileSync(args.devnet, "utf8"));
if (!devnet.validation_registry) {
  console.error(`${args.devnet} names no ERC-8004 registries: redeploy with infra/devnet/deploy.mjs`);
  process.exit(2);
}
const identity = compile("IdentityRegistry.sol", "IdentityRegistry").abi;
const validation = compile("ValidationRegistry.sol", "ValidationRegistry").abi;
const transport = http(devnet.rpc_url);
const chain = devnetChain(devnet.chain_id, devnet.rpc_url);
const pub = createPublicClient({ chain, transport });

// Simulates first, so a revert reports the contract's error by name.
async function send(key, address, abi, functionName, fnArgs) {
  const w = createWalletClient({ account: privateKeyToAccount(key), chain, transport });
  const { request } = await pub.simulateContract({ account: w.account, address, abi, functionName, args: fnArgs });
  const hash = await w.writeContract(request);
  const receipt = await pub.waitForTransactionReceipt({ hash });
  if (receipt.status !== "success") throw new Error(`${functionName} reverted in ${hash}`);
  return { hash, receipt };
}

const hash32 = (name, v) => {
  if (!/^0x[0-9a-fA-F]{64}$/.test(v ?? "")) {
    console.error(`--${name} must be 0x and 64 hex digits`);
    process.exit(2);
  }
  return v;
};

try {
  if (command === "register") {
    const key = args.key ?? devnet.agent_owner_private_key;
    const { hash, receipt } = await send(key, devnet.identity_registry, identity, "register", [args.uri]);
    const [event] = parseEventLogs({ abi: identity, logs: receipt.logs, eventName: "Registered" });
    console.log(JSON.stringify({ agent_id: event.args.agentId.toString(), owner: event.args.owner, registered: hash }));
  } else if (command === "request") {
    const key = args.key ?? devnet.agent_owner_private_key;
    const requestHash = hash32("request-hash", args["request-hash"]);
    const { hash } = await send(key, devnet.validation_registry, validation, "validationRequest", [
      args.validator ?? devnet.validator,
      BigInt(args["agent-id"] ?? "0"),
      args["request-uri"],
      requestHash,
    ]);
    console.log(JSON.stringify({ request_hash: requestHash, requested: hash }));
  } else if (command === "respond") {
    const key = args.key ?? devnet.validator_private_key;
    const requestHash = hash32("request-hash", args["request-hash"]);
    const { hash } = await send(key, devnet.validation_registry, validation, "validationResponse", [
      requestHash,
      Number(args.response ?? "-1"),
      args["response-uri"],
      hash32("response-hash", args["response-hash"]),
      args.tag,
    ]);
    console.log(JSON.stringify({ request_hash: requestHash, responded: hash }));
  } else {
    const requestHash = hash32("request-hash", args["request-hash"]);
    const [validator, agentId, response, responseHash, tag, lastUpdate] = await pub.readContract({
      address: devnet.validation_registry,
      abi: validation,
      functionName: "getValidationStatus",
      args: [requestHash],
    });
    const out = {
      request_hash: requestHash,
      validator,
      agent_id: agentId.toString(),
      response,
      response_hash: responseHash,
      tag,
      last_update: lastUpdate.toString(),
    };
    // The latest answer's responseURI, which only the event carries.
    const answers = await pub.getContractEvents({
      address: devnet.validation_registry,
      abi: validation,
      eventName: "ValidationResponse",
      args: { requestHash },
      fromBlock: 0n,
    });
    out.response_uri = answers.length ? answers[answers.length - 1].args.responseURI : null;
    if (args["agent-id"]) {
      const [count, average] = await pub.readContract({
        address: devnet.validation_registry,
        abi: validation,
        functionName: "getSummary",
        args: [BigInt(args["agent-id"]), [], args.tag],
      });
      out.summary = { count: Number(count), average };
    }
    console.log(JSON.stringify(out));
  }
} catch (e) {
  const named = e.cause?.data?.errorName;
  const detail = named ? ` (${named}${e.cause.data.args?.length ? ` ${e.cause.data.args.join(", ")}` : ""})` : "";
  console.error(`validation.mjs ${command}: ${e.shortMessage ?? e.message}${detail}`);
  process.exit(1);
}
