// Closed-loop load for the paid-path bench: C workers, each sending its next request as
// soon as the previous one is answered, until every prepared payment has been used once.
// Prints {"requests", "seconds", "rps", "p50_ms", "p99_ms", "ok", "statuses"}.
//
//   purchases: every payment is a distinct signed authorization (tests/js/buy.mjs
//   --sign-only --count N against the seller's own 402), sent once with the same body.
//     node bench/paid_load.mjs --url URL --body JSON --headers signed.json [--concurrency 32]
//
//   the floor: what the chain alone costs a purchase, on the same anvil and token — one
//   transferWithAuthorization per request (an authorization signed by the payer, sent as
//   a raw transaction by a sender account of anvil's test mnemonic with its nonces
//   assigned up front), then polling its receipt until it is there.
//     node bench/paid_load.mjs --floor --devnet devnet.json --count N [--concurrency 32]
//
// One keep-alive HTTP/1.1 agent per run, so the client costs the same for every seller.
import http from "node:http";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { createPublicClient, encodeFunctionData, http as viemHttp, parseSignature } from "viem";
import { mnemonicToAccount, privateKeyToAccount } from "viem/accounts";

const { values: args } = parseArgs({
  options: {
    url: { type: "string" },
    body: { type: "string" },
    headers: { type: "string" },
    concurrency: { type: "string", default: "32" },
    floor: { type: "boolean", default: false },
    devnet: { type: "string" },
    count: { type: "string" },
  },
});
const concurrency = Number(args.concurrency);
const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });

function request(url, headers, body) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: "POST", agent, headers: { ...headers, "content-length": Buffer.byteLength(body) } }, (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, text: Buffer.concat(chunks).toString("utf8") }));
    });
    req.on("error", reject);
    // A request that hangs is counted as an error, not waited on forever.
    req.setTimeout(30_000, () => req.destroy(new Error("no answer within 30 s")));
    req.end(body);
  });
}

async function rpc(url, method, params) {
  const body = JSON.stringify({ jsonrpc: "2.0", id: 1, method, params });
  const { text } = await request(url, { "content-type": "application/json" }, body);
  const out = JSON.parse(text);
  if (out.error) throw new Error(`${method}: ${out.error.message}`);
  return out.result;
}

// Runs `op(i)` for i in 0..n over `concurrency` workers; op resolves to an HTTP status.
async function run(n, op) {
  const latencies = [];
  const statuses = {};
  let next = 0;
  const started = process.hrtime.bigint();
  const worker = async () => {
    while (next < n) {
      const i = next++;
      const t0 = process.hrtime.bigint();
      let status;
      try {
        status = await op(i);
      } catch (e) {
        status = `error: ${String(e?.message ?? e).slice(0, 80)}`;
      }
      latencies.push(Number(process.hrtime.bigint() - t0) / 1e6);
      statuses[status] = (statuses[status] ?? 0) + 1;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  latencies.sort((a, b) => a - b);
  const pct = (p) => latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))];
  const ok = Object.entries(statuses)
    .filter(([s]) => /^2\d\d$/.test(s))
    .reduce((a, [, c]) => a + c, 0);
  return { requests: n, seconds, rps: ok / seconds, p50_ms: pct(50), p99_ms: pct(99), ok, statuses };
}

// A refusal is counted with its reason: the x402 error of PAYMENT-REQUIRED or
// PAYMENT-RESPONSE (the reference stack), or the error code of the body (Umpire).
function refusal(r) {
  if (r.status >= 200 && r.status < 300) return r.status;
  let reason;
  for (const name of ["payment-required", "payment-response"]) {
    try {
      const v = JSON.parse(Buffer.from(r.headers[name] ?? "", "base64").toString("utf8"));
      reason ??= v.error ?? v.errorReason;
    } catch {}
  }
  try {
    const e = JSON.parse(r.text).error;
    reason ??= typeof e === "string" ? e : (e?.reason ?? e?.code);
  } catch {}
  return reason ? `${r.status} ${reason}` : r.status;
}

if (args.floor) {
  const devnet = JSON.parse(readFileSync(args.devnet, "utf8"));
  const n = Number(args.count);
  const payer = privateKeyToAccount(devnet.payer_private_key);
  // Account 7 of the test mnemonic: funded by anvil, used by nothing else in the bench.
  const sender = mnemonicToAccount("test test test test test test test test test test test junk", { addressIndex: 7 });
  const pub = createPublicClient({ transport: viemHttp(devnet.rpc_url) });
  const [nonce0, gasPrice] = await Promise.all([pub.getTransactionCount({ address: sender.address, blockTag: "pending" }), pub.getGasPrice()]);
  const abi = [
    {
      type: "function",
      name: "transferWithAuthorization",
      stateMutability: "nonpayable",
      inputs: ["address from", "address to", "uint256 value", "uint256 validAfter", "uint256 validBefore", "bytes32 nonce", "uint8 v", "bytes32 r", "bytes32 s"].map((s) => {
        const [type, name] = s.split(" ");
        return { type, name };
      }),
      outputs: [],
    },
  ];
  const domain = { name: devnet.asset_name, version: String(devnet.asset_version), chainId: devnet.chain_id, verifyingContract: devnet.asset };
  const types = {
    TransferWithAuthorization: ["address from", "address to", "uint256 value", "uint256 validAfter", "uint256 validBefore", "bytes32 nonce"].map((s) => {
      const [type, name] = s.split(" ");
      return { type, name };
    }),
  };
  const validBefore = BigInt(Math.floor(Date.now() / 1000) + 3600);
  const raws = [];
  for (let i = 0; i < n; i++) {
    const message = { from: payer.address, to: devnet.pay_to, value: 1n, validAfter: 0n, validBefore, nonce: `0x${randomBytes(32).toString("hex")}` };
    const { v, r, s } = parseSignature(await payer.signTypedData({ domain, types, primaryType: "TransferWithAuthorization", message }));
    const data = encodeFunctionData({ abi, functionName: "transferWithAuthorization", args: [...Object.values(message), Number(v), r, s] });
    raws.push(await sender.signTransaction({ chainId: devnet.chain_id, to: devnet.asset, data, nonce: nonce0 + i, gas: 120_000n, gasPrice: gasPrice * 2n, type: "legacy" }));
  }
  const result = await run(n, async (i) => {
    const hash = await rpc(devnet.rpc_url, "eth_sendRawTransaction", [raws[i]]);
    // Polled every millisecond: as soon as a seller could know, without spinning on anvil.
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      const receipt = await rpc(devnet.rpc_url, "eth_getTransactionReceipt", [hash]);
      if (receipt) return receipt.status === "0x1" ? 200 : "reverted";
      await new Promise((r) => setTimeout(r, 1));
    }
    return "no receipt within 30 s";
  });
  console.log(JSON.stringify(result));
} else {
  const signed = JSON.parse(readFileSync(args.headers, "utf8")).headers;
  const result = await run(signed.length, (i) =>
    request(args.url, { "content-type": "application/json", "payment-signature": signed[i] }, args.body).then(refusal),
  );
  console.log(JSON.stringify(result));
}
agent.destroy();
