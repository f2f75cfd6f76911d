// The reference x402 facilitator (x402Facilitator from @x402/core) behind a small HTTP
// server: ExactEvmScheme from @x402/evm settling on the devnet with the facilitator
// account (--devnet), and/or ExactSvmScheme from @x402/svm settling on the local Solana
// chain with its fee payer (--svm, infra/devnet/svm.mjs). Speaks the documented API:
// POST /verify, POST /settle, GET /supported. Prints {"port": N} once listening.
//
//   node tests/js/facilitator.mjs [--devnet devnet.json] [--svm svm.json] [--port 0] [--token secret] [--tuned]
//                                 [--confirmation-timeout-ms 30000]
//
// --confirmation-timeout-ms is how long /settle waits for the receipt before it answers
// `success: false, errorReason: "settlement_pending"` with the transaction (@x402/evm's
// own setting; 30 s by default, as the reference facilitator ships).
//
// --tuned gives it what a deployer running it under load would: viem's nonce manager (so
// concurrent settlements do not take the same account nonce) and a 5 ms poll (Umpire's
// first pause between receipt polls) instead of viem's 4 s default (make bench compares Umpire against it at its best);
// it also writes every refused verification or settlement to stderr, with its message.
import { createServer } from "node:http";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { x402Facilitator } from "@x402/core/facilitator";
import { toFacilitatorEvmSigner } from "@x402/evm";
import { ExactEvmScheme } from "@x402/evm/exact/facilitator";
import { ExactEvmSchemeV1 } from "@x402/evm/exact/v1/facilitator";
import { toFacilitatorSvmSigner } from "@x402/svm";
import { registerExactSvmScheme } from "@x402/svm/exact/facilitator";
import { createKeyPairSignerFromBytes } from "@solana/kit";
import { createWalletClient, http, publicActions } from "viem";
import { nonceManager, privateKeyToAccount } from "viem/accounts";
import { devnetChain } from "../../infra/devnet/chain.mjs";

const { values: args } = parseArgs({
  options: {
    devnet: { type: "string" },
    svm: { type: "string" },
    port: { type: "string", default: "0" },
    token: { type: "string" },
    "v1-network": { type: "string" },
    tuned: { type: "boolean", default: false },
    "confirmation-timeout-ms": { type: "string", default: "30000" },
  },
});
const facilitator = new x402Facilitator();
if (args.devnet) {
  const devnet = JSON.parse(readFileSync(args.devnet, "utf8"));
  const chain = devnetChain(devnet.chain_id, devnet.rpc_url);
  const client = createWalletClient({
    account: privateKeyToAccount(devnet.facilitator_private_key, args.tuned ? { nonceManager } : {}),
    chain,
    transport: http(devnet.rpc_url),
    ...(args.tuned ? { pollingInterval: 5 } : {}),
  }).extend(publicActions);
  const signer = toFacilitatorEvmSigner(
    {
      address: client.account.address,
      readContract: (a) => client.readContract(a),
      verifyTypedData: (a) => client.verifyTypedData(a),
      writeContract: (a) => client.writeContract(a),
      sendTransaction: (a) => client.sendTransaction(a),
      waitForTransactionReceipt: (a) => client.waitForTransactionReceipt(a),
      getCode: (a) => client.getCode(a),
    },
    { confirmationTimeoutMs: Number(args["confirmation-timeout-ms"]) },
  );
  facilitator.register(devnet.network, new ExactEvmScheme(signer));
  if (args["v1-network"]) {
    facilitator.registerV1(args["v1-network"], new ExactEvmSchemeV1(signer));
  }
}
if (args.svm) {
  const svm = JSON.parse(readFileSync(args.svm, "utf8"));
  const feePayer = await createKeyPairSignerFromBytes(new Uint8Array(JSON.parse(readFileSync(svm.fee_payer_keypair, "utf8"))));
  // { defaultRpcUrl } sends every Solana network (v1 names too) to the local chain.
  registerExactSvmScheme(facilitator, {
    signer: toFacilitatorSvmSigner(feePayer, { defaultRpcUrl: svm.rpc_url }),
    networks: svm.network,
  });
}

const json = (res, status, body) => {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(body, (_, v) => (typeof v === "bigint" ? v.toString() : v)));
};
const server = createServer(async (req, res) => {
  if (args.token && req.headers.authorization !== `Bearer ${args.token}`) {
    return json(res, 401, { error: "unauthorized" });
  }
  const chunks = [];
  for await (const c of req) chunks.push(c);
  try {
    if (req.method === "GET" && req.url === "/supported") {
      return json(res, 200, facilitator.getSupported());
    }
    const body = JSON.parse(Buffer.concat(chunks).toString("utf8") || "{}");
    const logRefusal = (what, r) => {
      if (args.tuned && !(r.isValid ?? r.success)) {
        console.error(JSON.stringify({ refused: what, reason: r.invalidReason ?? r.errorReason, message: r.invalidMessage ?? r.errorMessage }));
      }
      return r;
    };
    if (req.method === "POST" && req.url === "/verify") {
      return json(res, 200, logRefusal("verify", await facilitator.verify(body.paymentPayload, body.paymentRequirements)));
    }
    if (req.method === "POST" && req.url === "/settle") {
      return json(res, 200, logRefusal("settle", await facilitator.settle(body.paymentPayload, body.paymentRequirements)));
    }
    return json(res, 404, { error: "not found" });
  } catch (e) {
    return json(res, 500, { error: String(e?.message ?? e) });
  }
});
server.listen(Number(args.port), "127.0.0.1", () => {
  console.log(JSON.stringify({ port: server.address().port }));
});
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => server.close(() => process.exit(0)));
