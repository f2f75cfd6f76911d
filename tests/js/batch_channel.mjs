// x402's batch-settlement contract on the devnet (infra/devnet/x402BatchSettlement.sol),
// driven by the reference package's own client code (`@x402/evm/batch-settlement/client`:
// channel config, channel id, EIP-3009 deposit payload, vouchers) and its EIP-712 types.
// Prints one line of JSON; exits 1 when a check the mode makes fails.
//
//   node tests/js/batch_channel.mjs abi
//     our contract's ABI against the one the reference package calls it with:
//     {"entries", "missing": [names], "differing": [names]}
//   node tests/js/batch_channel.mjs lifecycle --devnet devnet.json --price UNITS --purchases N
//     one deposit for N + 2 purchases, N vouchers, the payer starting a withdrawal of
//     everything it can right after the last purchase, one signed claim of the N, a
//     settle, the delay elapsed, the withdrawal finalized; and the contract's answers to
//     a replayed claim, a voucher signed by another key and a claim over the balance;
//     the channel's config and last voucher as the reference client wrote them
//   node tests/js/batch_channel.mjs vouchers --devnet devnet.json --price UNITS --units N
//       --count M [--receiver-authorizer 0x…]
//     a deposit of N × price (the reference client's payload, relayed), then what a
//     seller is sent: the config, vouchers for 1..M purchases, and attacks: the first
//     voucher signed by another key, one over the balance, and the first voucher of
//     channels with another receiver and another receiver authorizer
import { readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { parseArgs } from "node:util";
import { pathToFileURL } from "node:url";
import { claimBatchTypes, toClientEvmSigner } from "@x402/evm";
import {
  buildChannelConfig,
  computeChannelId,
  createBatchSettlementEIP3009DepositPayload,
  signVoucher,
} from "@x402/evm/batch-settlement/client";
import {
  createPublicClient,
  createWalletClient,
  decodeErrorResult,
  encodeAbiParameters,
  http,
  parseAbi,
} from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { compile } from "../../infra/devnet/compile.mjs";
import { devnetChain } from "../../infra/devnet/chain.mjs";

const { values: args, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    devnet: { type: "string" },
    price: { type: "string", default: "1000000" },
    purchases: { type: "string", default: "5" },
    units: { type: "string", default: "10" },
    count: { type: "string", default: "3" },
    "receiver-authorizer": { type: "string" },
  },
});
const ours = compile("x402BatchSettlement.sol", "x402BatchSettlement").abi;

// The ABI the reference package calls the contract with is not exported: it is read
// from the package's own build.
async function referenceAbi() {
  const require = createRequire(import.meta.url);
  // The package exports no package.json: its entry point sits in dist/cjs.
  const entry = require.resolve("@x402/evm");
  const esm = path.join(entry.slice(0, entry.lastIndexOf(`${path.sep}dist${path.sep}`)), "dist", "esm");
  for (const f of readdirSync(esm).filter((f) => /^chunk-.*\.mjs$/.test(f))) {
    if (!readFileSync(path.join(esm, f), "utf8").includes("var batchSettlementABI = [")) continue;
    const m = await import(pathToFileURL(path.join(esm, f)).href);
    const abi = Object.values(m).find((v) => Array.isArray(v) && v.some((e) => e?.name === "claimWithSignature"));
    if (abi) return abi;
  }
  throw new Error("batchSettlementABI not found in @x402/evm's build");
}

// Entries compared by what the wire depends on: kind, name, parameter names, types and
// tuple components, indexing, mutability (Solidity's internalType is only a label).
const shape = (p) => ({
  name: p.name,
  type: p.type,
  ...(p.indexed !== undefined && { indexed: p.indexed }),
  ...(p.components && { components: p.components.map(shape) }),
});
const entryShape = (e) =>
  JSON.stringify({
    type: e.type,
    name: e.name,
    inputs: (e.inputs ?? []).map(shape),
    outputs: (e.outputs ?? []).map(shape),
    stateMutability: e.stateMutability,
    anonymous: e.anonymous ?? false,
  });

async function abiMode() {
  const reference = await referenceAbi();
  const mine = new Map(ours.map((e) => [`${e.type}:${e.name}`, entryShape(e)]));
  const missing = [];
  const differing = [];
  for (const e of reference) {
    const key = `${e.type}:${e.name}`;
    if (!mine.has(key)) missing.push(key);
    else if (mine.get(key) !== entryShape(e)) differing.push(key);
  }
  console.log(JSON.stringify({ entries: reference.length, missing, differing }));
  process.exit(missing.length || differing.length ? 1 : 0);
}

async function lifecycleMode() {
  const devnet = JSON.parse(readFileSync(args.devnet, "utf8"));
  const price = BigInt(args.price);
  const purchases = BigInt(args.purchases);
  const transport = http(devnet.rpc_url);
  const chain = devnetChain(devnet.chain_id, devnet.rpc_url);
  const pub = createPublicClient({ chain, transport });
  const wallet = (key) => createWalletClient({ account: privateKeyToAccount(key), chain, transport });
  const payerAccount = privateKeyToAccount(devnet.payer_private_key);
  const signer = toClientEvmSigner(payerAccount, pub);
  const contract = devnet.batch_settlement;
  const erc20 = parseAbi(["function balanceOf(address) view returns (uint256)"]);
  const balanceOf = (who) => pub.readContract({ address: devnet.asset, abi: erc20, functionName: "balanceOf", args: [who] });
  const read = (functionName, fnArgs) => pub.readContract({ address: contract, abi: ours, functionName, args: fnArgs });
  // Simulated first: a revert is reported by the contract's error name.
  const send = async (key, functionName, fnArgs) => {
    const w = wallet(key);
    const { request } = await pub.simulateContract({ account: w.account, address: contract, abi: ours, functionName, args: fnArgs });
    const hash = await w.writeContract(request);
    const receipt = await pub.waitForTransactionReceipt({ hash });
    if (receipt.status !== "success") throw new Error(`${functionName} reverted in ${hash}`);
    return receipt;
  };
  const revertName = async (key, functionName, fnArgs) => {
    try {
      await pub.simulateContract({ account: wallet(key).account, address: contract, abi: ours, functionName, args: fnArgs });
      return null;
    } catch (e) {
      const data = e?.cause?.data ?? e?.data;
      if (data?.errorName) return data.errorName;
      try {
        return decodeErrorResult({ abi: ours, data: e?.cause?.raw ?? data }).errorName;
      } catch {
        return String(e.shortMessage ?? e.message);
      }
    }
  };

  const requirements = {
    scheme: "batch-settlement",
    network: devnet.network,
    amount: price.toString(),
    asset: devnet.asset,
    payTo: devnet.pay_to,
    maxTimeoutSeconds: 300,
    extra: {
      receiverAuthorizer: devnet.receiver_authorizer,
      withdrawDelay: 900,
      name: devnet.asset_name,
      version: devnet.asset_version,
    },
  };
  const config = buildChannelConfig({ signer, salt: `0x${"00".repeat(32)}` }, requirements);
  const channelId = computeChannelId(config, devnet.network);
  const onChainId = await read("getChannelId", [config]);
  const depositAmount = price * (purchases + 2n);
  const deposited = await createBatchSettlementEIP3009DepositPayload(
    signer, 2, requirements, config, depositAmount.toString(), price.toString(),
  );
  const a = deposited.payload.deposit.authorization.erc3009Authorization;
  const collectorData = encodeAbiParameters(
    [{ type: "uint256" }, { type: "uint256" }, { type: "uint256" }, { type: "bytes" }],
    [BigInt(a.validAfter), BigInt(a.validBefore), BigInt(a.salt), a.signature],
  );
  const payerBefore = await balanceOf(devnet.payer);
  const payToBefore = await balanceOf(devnet.pay_to);
  // A relayer (the devnet's facilitator account) executes the payer's deposit.
  await send(devnet.facilitator_private_key, "deposit", [config, depositAmount, devnet.erc3009_deposit_collector, collectorData]);
  const [balance] = await read("channels", [channelId]);

  let last;
  for (let k = 1n; k <= purchases; k++) {
    last = await signVoucher(signer, channelId, (k * price).toString(), devnet.network);
  }
  const charged = purchases * price;
  const claim = (total, signature = last.signature, max = charged) => ({
    voucher: { channel: config, maxClaimableAmount: max },
    signature,
    totalClaimed: total,
  });
  const authorizer = privateKeyToAccount(devnet.receiver_authorizer_private_key);
  const signBatch = (claims) =>
    authorizer.signTypedData({
      domain: { name: "x402 Batch Settlement", version: "1", chainId: devnet.chain_id, verifyingContract: contract },
      types: claimBatchTypes,
      primaryType: "ClaimBatch",
      message: {
        claims: claims.map((c) => ({ channelId, maxClaimableAmount: c.voucher.maxClaimableAmount, totalClaimed: c.totalClaimed })),
      },
    });

  // The payer tries to take back everything right after its last purchase.
  await send(devnet.payer_private_key, "initiateWithdraw", [config, balance]);
  const early = await revertName(devnet.payer_private_key, "finalizeWithdraw", [config]);

  // Attacks on the claim, refused by the contract itself.
  // A voucher for the same channel and amount, signed by a key that is not the payer's.
  const stranger = privateKeyToAccount(devnet.settler_private_key);
  const forged = await stranger.signTypedData({
    domain: { name: "x402 Batch Settlement", version: "1", chainId: devnet.chain_id, verifyingContract: contract },
    types: { Voucher: [{ name: "channelId", type: "bytes32" }, { name: "maxClaimableAmount", type: "uint128" }] },
    primaryType: "Voucher",
    message: { channelId, maxClaimableAmount: charged },
  });
  const forgedClaim = [claim(charged, forged)];
  const forgedRevert = await revertName(devnet.settler_private_key, "claimWithSignature", [forgedClaim, await signBatch(forgedClaim)]);
  const overClaim = [claim(balance + 1n, last.signature, balance + 1n)];
  const overRevert = await revertName(devnet.settler_private_key, "claimWithSignature", [overClaim, await signBatch(overClaim)]);

  // The receiver's claim, signed by its authorizer, sent by anyone; then the sweep.
  const claims = [claim(charged)];
  const batchSignature = await signBatch(claims);
  const claimed = await send(devnet.settler_private_key, "claimWithSignature", [claims, batchSignature]);
  const replay = await send(devnet.settler_private_key, "claimWithSignature", [claims, batchSignature]);
  const settled = await send(devnet.settler_private_key, "settle", [devnet.pay_to, devnet.asset]);

  await pub.request({ method: "evm_increaseTime", params: [900] });
  await pub.request({ method: "evm_mine", params: [] });
  await send(devnet.payer_private_key, "finalizeWithdraw", [config]);
  const [balanceAfter, totalClaimed] = await read("channels", [channelId]);
  console.log(
    JSON.stringify({
      channel_id: channelId,
      channel_id_on_chain: onChainId,
      channel_config: config,
      last_voucher: last,
      deposited: depositAmount.toString(),
      balance: balance.toString(),
      early_finalize: early,
      forged_voucher: forgedRevert,
      over_balance: overRevert,
      claim_logs: claimed.logs.length,
      replay_logs: replay.logs.length,
      claim_gas: claimed.gasUsed.toString(),
      settle_gas: settled.gasUsed.toString(),
      total_claimed: totalClaimed.toString(),
      balance_after: balanceAfter.toString(),
      pay_to_gained: ((await balanceOf(devnet.pay_to)) - payToBefore).toString(),
      payer_lost: (payerBefore - (await balanceOf(devnet.payer))).toString(),
    }),
  );
}

async function vouchersMode() {
  const devnet = JSON.parse(readFileSync(args.devnet, "utf8"));
  const price = BigInt(args.price);
  const transport = http(devnet.rpc_url);
  const chain = devnetChain(devnet.chain_id, devnet.rpc_url);
  const pub = createPublicClient({ chain, transport });
  const signer = toClientEvmSigner(privateKeyToAccount(devnet.payer_private_key), pub);
  const requirementsFor = (payTo, receiverAuthorizer) => ({
    scheme: "batch-settlement",
    network: devnet.network,
    amount: price.toString(),
    asset: devnet.asset,
    payTo,
    maxTimeoutSeconds: 300,
    extra: { receiverAuthorizer, withdrawDelay: 900, name: devnet.asset_name, version: devnet.asset_version },
  });
  const authorizer = args["receiver-authorizer"] ?? devnet.receiver_authorizer;
  const requirements = requirementsFor(devnet.pay_to, authorizer);
  const salt = `0x${"00".repeat(32)}`;
  const config = buildChannelConfig({ signer, salt }, requirements);
  const channelId = computeChannelId(config, devnet.network);
  const deposit = price * BigInt(args.units);
  const deposited = await createBatchSettlementEIP3009DepositPayload(
    signer, 2, requirements, config, deposit.toString(), price.toString(),
  );
  const a = deposited.payload.deposit.authorization.erc3009Authorization;
  const collectorData = encodeAbiParameters(
    [{ type: "uint256" }, { type: "uint256" }, { type: "uint256" }, { type: "bytes" }],
    [BigInt(a.validAfter), BigInt(a.validBefore), BigInt(a.salt), a.signature],
  );
  const relayer = createWalletClient({ account: privateKeyToAccount(devnet.facilitator_private_key), chain, transport });
  const { request } = await pub.simulateContract({
    account: relayer.account, address: devnet.batch_settlement, abi: ours, functionName: "deposit",
    args: [config, deposit, devnet.erc3009_deposit_collector, collectorData],
  });
  await pub.waitForTransactionReceipt({ hash: await relayer.writeContract(request) });
  const vouchers = [];
  for (let k = 1n; k <= BigInt(args.count); k++) {
    vouchers.push(await signVoucher(signer, channelId, (k * price).toString(), devnet.network));
  }
  const stranger = toClientEvmSigner(privateKeyToAccount(devnet.settler_private_key), pub);
  const elsewhere = async (payTo, receiverAuthorizer) => {
    const c = buildChannelConfig({ signer, salt }, requirementsFor(payTo, receiverAuthorizer));
    const id = computeChannelId(c, devnet.network);
    return { channelConfig: c, voucher: await signVoucher(signer, id, price.toString(), devnet.network) };
  };
  console.log(
    JSON.stringify({
      channel_id: channelId,
      channel_config: config,
      deposited: deposit.toString(),
      vouchers,
      other_key: await signVoucher(stranger, channelId, price.toString(), devnet.network),
      over_balance: await signVoucher(signer, channelId, (deposit + price).toString(), devnet.network),
      other_receiver: await elsewhere(devnet.merchant, authorizer),
      other_authorizer: await elsewhere(devnet.pay_to, devnet.validator),
    }),
  );
}

if (positionals[0] === "abi") await abiMode();
else if (positionals[0] === "vouchers" && args.devnet) await vouchersMode();
else if (positionals[0] === "lifecycle" && args.devnet) await lifecycleMode();
else {
  console.error("usage: batch_channel.mjs abi | lifecycle --devnet devnet.json [--price UNITS] [--purchases N]");
  process.exit(2);
}
