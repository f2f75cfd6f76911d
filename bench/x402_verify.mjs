// The reference TypeScript verifier's core on the payloads the Rust bench wrote: viem's
// verifyTypedData (EIP-712 hash + secp256k1 recovery), which @x402/evm's exact scheme
// calls through its signer, plus the same requirement checks. Prints one JSON line:
// {"median_ns_per_verify": n, "count": k}.
//   node bench/x402_verify.mjs $UMPIRE_BENCH_DIR/x402_payloads.json
import { readFileSync } from "node:fs";
import { verifyTypedData, getAddress } from "viem";

const { requirements: req, payloads } = JSON.parse(readFileSync(process.argv[2], "utf8"));
const chainId = Number(req.network.split(":")[1]);
const domain = { name: req.extra.name, version: req.extra.version, chainId, verifyingContract: getAddress(req.asset) };
const types = {
  TransferWithAuthorization: [
    { name: "from", type: "address" }, { name: "to", type: "address" }, { name: "value", type: "uint256" },
    { name: "validAfter", type: "uint256" }, { name: "validBefore", type: "uint256" }, { name: "nonce", type: "bytes32" },
  ],
};
const NOW = 1_800_000_000n;

async function verifyOne(p) {
  const a = p.payload.authorization;
  if (getAddress(a.to) !== getAddress(req.payTo)) throw new Error("recipient");
  if (BigInt(a.value) !== BigInt(req.amount)) throw new Error("value");
  if (BigInt(a.validAfter) >= NOW || BigInt(a.validBefore) < NOW + 6n) throw new Error("window");
  const ok = await verifyTypedData({
    address: a.from, domain, types, primaryType: "TransferWithAuthorization",
    message: { from: a.from, to: a.to, value: BigInt(a.value), validAfter: BigInt(a.validAfter), validBefore: BigInt(a.validBefore), nonce: a.nonce },
    signature: p.payload.signature,
  });
  if (!ok) throw new Error("signature");
}

for (const p of payloads.slice(0, 8)) await verifyOne(p); // warm up the JIT
const samples = [];
for (let round = 0; round < 5; round++) {
  const t0 = process.hrtime.bigint();
  for (const p of payloads) await verifyOne(p);
  samples.push(Number(process.hrtime.bigint() - t0) / payloads.length);
}
samples.sort((a, b) => a - b);
console.log(JSON.stringify({ median_ns_per_verify: Math.round(samples[2]), count: payloads.length }));
