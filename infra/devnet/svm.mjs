// A local Solana chain for `make devnet` and the tests: the real SVM with the real SPL
// Token program (litesvm, in process), behind the JSON-RPC methods the reference x402
// SVM client and facilitator, and Umpire's native SOL settlement, call. It holds:
//   - a test USDC mint at mainnet USDC's address (EPjFWdd5…, 6 decimals), so the
//     network can be named as mainnet and the reference client treats it as USDC;
//   - the facilitator's fee payer (SOL only), a payer with SOL and USDC, a payer with
//     SOL only (native SOL), and our payTo (SOL and a USDC token account);
// and writes their addresses and keypair files (solana-keygen's JSON array of 64 bytes)
// to --out. Prints {"port": N} once listening.
//
//   node infra/devnet/svm.mjs --out DIR/svm.json [--port 0] [--usdc 1000000000]
//
// Besides Solana's methods it answers, for tests:
//   umpire_expireBlockhash []      every transaction signed so far can no longer land
//   umpire_failSends [n]           the next n sendTransaction calls are refused
//   umpire_holdStatuses [bool]     getSignatureStatuses reports landed transactions as
//                                  only processed (not yet confirmed) while true
//   umpire_confirmAfter [ms]       landed transactions are reported processed until ms
//                                  after they landed (a cluster's votes take slots)
//   umpire_calls [method]          how many calls of method came so far
//
// A transaction lands when sent (each send moves the chain one slot on); statuses of
// landed ones are reported finalized.
import http from "node:http";
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { parseArgs } from "node:util";
import { FailedTransactionMetadata, LiteSVM } from "litesvm";
import {
  address,
  createKeyPairSignerFromPrivateKeyBytes,
  getAddressEncoder,
  getBase58Decoder,
  getBase64Decoder,
  getBase64Encoder,
  getCompiledTransactionMessageDecoder,
  getTransactionDecoder,
  lamports,
} from "@solana/kit";
import { findAssociatedTokenPda, TOKEN_PROGRAM_ADDRESS } from "@solana-program/token";

const { values: args } = parseArgs({
  options: {
    out: { type: "string" },
    port: { type: "string", default: "0" },
    usdc: { type: "string", default: "1000000000" },
  },
});
if (!args.out) {
  console.error("usage: svm.mjs --out svm.json [--port 0] [--usdc units]");
  process.exit(2);
}

const NETWORK = "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp";
const USDC = address("EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v");
const SOL = 1_000_000_000n;
const enc = getAddressEncoder();
const b58 = getBase58Decoder();
const b64in = getBase64Encoder();
const b64out = getBase64Decoder();

// Error names by litesvm's numeric codes (Solana's TransactionError / InstructionError order).
const TX_ERRORS = ["AccountInUse", "AccountLoadedTwice", "AccountNotFound", "ProgramAccountNotFound", "InsufficientFundsForFee", "InvalidAccountForFee", "AlreadyProcessed", "BlockhashNotFound", "CallChainTooDeep", "MissingSignatureForFee", "InvalidAccountIndex", "SignatureFailure", "InvalidProgramForExecution", "SanitizeFailure", "ClusterMaintenance", "AccountBorrowOutstanding", "WouldExceedMaxBlockCostLimit", "UnsupportedVersion", "InvalidWritableAccount", "WouldExceedMaxAccountCostLimit", "WouldExceedAccountDataBlockLimit", "TooManyAccountLocks", "AddressLookupTableNotFound", "InvalidAddressLookupTableOwner", "InvalidAddressLookupTableData", "InvalidAddressLookupTableIndex", "InvalidRentPayingAccount", "WouldExceedMaxVoteCostLimit", "WouldExceedAccountDataTotalLimit", "MaxLoadedAccountsDataSizeExceeded", "ResanitizationNeeded", "InvalidLoadedAccountsDataSizeLimit", "UnbalancedTransaction", "ProgramCacheHitMaxLimit", "CommitCancelled"];
const IX_ERRORS = ["GenericError", "InvalidArgument", "InvalidInstructionData", "InvalidAccountData", "AccountDataTooSmall", "InsufficientFunds", "IncorrectProgramId", "MissingRequiredSignature", "AccountAlreadyInitialized", "UninitializedAccount", "UnbalancedInstruction", "ModifiedProgramId", "ExternalAccountLamportSpend", "ExternalAccountDataModified", "ReadonlyLamportChange", "ReadonlyDataModified", "DuplicateAccountIndex", "ExecutableModified", "RentEpochModified", "NotEnoughAccountKeys", "AccountDataSizeChanged", "AccountNotExecutable", "AccountBorrowFailed", "AccountBorrowOutstanding", "DuplicateAccountOutOfSync", "InvalidError", "ExecutableDataModified", "ExecutableLamportChange", "ExecutableAccountNotRentExempt", "UnsupportedProgramId", "CallDepth", "MissingAccount", "ReentrancyNotAllowed", "MaxSeedLengthExceeded", "InvalidSeeds", "InvalidRealloc", "ComputationalBudgetExceeded", "PrivilegeEscalation", "ProgramEnvironmentSetupFailure", "ProgramFailedToComplete", "ProgramFailedToCompile", "Immutable", "IncorrectAuthority", "AccountNotRentExempt", "InvalidAccountOwner", "ArithmeticOverflow", "UnsupportedSysvar", "IllegalOwner", "MaxAccountsDataAllocationsExceeded", "MaxAccountsExceeded", "MaxInstructionTraceLengthExceeded", "BuiltinProgramsMustConsumeComputeUnits"];

// A litesvm error as Solana's RPC spells it ("BlockhashNotFound", {"InstructionError": [2, {"Custom": 1}]}).
function errorJson(e) {
  if (typeof e === "number") return TX_ERRORS[e] ?? `Unknown(${e})`;
  const kind = e?.constructor?.name;
  if (kind === "TransactionErrorInstructionError") {
    const inner = e.err();
    const detail =
      typeof inner === "number"
        ? IX_ERRORS[inner] ?? `Unknown(${inner})`
        : inner?.constructor?.name === "InstructionErrorCustom"
          ? { Custom: inner.code }
          : { BorshIoError: String(inner?.msg ?? inner) };
    return { InstructionError: [e.index, detail] };
  }
  if (kind === "TransactionErrorInsufficientFundsForRent") return { InsufficientFundsForRent: { account_index: e.accountIndex } };
  if (kind === "TransactionErrorDuplicateInstruction") return { DuplicateInstruction: e.index };
  return String(e);
}

async function keypair() {
  const seed = crypto.getRandomValues(new Uint8Array(32));
  const signer = await createKeyPairSignerFromPrivateKeyBytes(seed);
  const secret = new Uint8Array(64);
  secret.set(seed, 0);
  secret.set(enc.encode(signer.address), 32);
  return { address: signer.address, secret };
}

const mintData = (decimals, supply) => {
  const b = new Uint8Array(82);
  new DataView(b.buffer).setBigUint64(36, supply, true);
  b[44] = decimals;
  b[45] = 1; // initialized
  return b;
};
const tokenAccountData = (mint, owner, amount) => {
  const b = new Uint8Array(165);
  b.set(enc.encode(mint), 0);
  b.set(enc.encode(owner), 32);
  new DataView(b.buffer).setBigUint64(64, amount, true);
  b[108] = 1; // initialized
  return b;
};
const ataOf = async (owner) => (await findAssociatedTokenPda({ mint: USDC, owner, tokenProgram: TOKEN_PROGRAM_ADDRESS }))[0];

const svm = new LiteSVM();
const usdcUnits = BigInt(args.usdc);
svm.setAccount({ address: USDC, lamports: svm.minimumBalanceForRentExemption(82n), programAddress: TOKEN_PROGRAM_ADDRESS, executable: false, data: mintData(6, 10n * usdcUnits) });
const feePayer = await keypair(); // the facilitator's: pays fees, holds no USDC
const payer = await keypair(); // SOL and USDC
const solPayer = await keypair(); // SOL only
const payTo = await keypair(); // ours
const tokenRent = svm.minimumBalanceForRentExemption(165n);
const fund = async (who, sol, usdc) => {
  svm.airdrop(address(who.address), lamports(sol));
  if (usdc !== null) {
    const ata = await ataOf(address(who.address));
    svm.setAccount({ address: ata, lamports: tokenRent, programAddress: TOKEN_PROGRAM_ADDRESS, executable: false, data: tokenAccountData(USDC, address(who.address), usdc) });
    return ata;
  }
  return null;
};
await fund(feePayer, 100n * SOL, null);
const payerAta = await fund(payer, 10n * SOL, usdcUnits);
await fund(solPayer, 10n * SOL, null);
const payToAta = await fund(payTo, 1n * SOL, 0n);

const statuses = new Map(); // signature -> {slot, err}
let failSends = 0;
let holdStatuses = false;
let confirmAfter = 0;
const calls = new Map(); // method -> calls so far
const slot = () => Number(svm.getClock().slot);
const context = () => ({ slot: slot() });
const nextSlot = () => svm.warpToSlot(svm.getClock().slot + 1n);
const invalidParams = (message) => ({ code: -32602, message });
const wire = (text, config = {}) => {
  if ((config.encoding ?? "base58") !== "base64") throw invalidParams("only base64 transactions are served here");
  return b64in.encode(text);
};

const methods = {
  getHealth: () => "ok",
  getVersion: () => ({ "solana-core": "2.2.0", "feature-set": 0 }),
  getGenesisHash: () => "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d",
  getSlot: () => slot(),
  getBlockHeight: () => slot(),
  getLatestBlockhash: () => ({ context: context(), value: { blockhash: svm.latestBlockhash(), lastValidBlockHeight: slot() + 150 } }),
  isBlockhashValid: ([hash]) => ({ context: context(), value: hash === svm.latestBlockhash() }),
  getMinimumBalanceForRentExemption: ([size]) => Number(svm.minimumBalanceForRentExemption(BigInt(size))),
  getBalance: ([who]) => ({ context: context(), value: Number(svm.getBalance(address(who)) ?? 0n) }),
  getAccountInfo: ([who, config = {}]) => {
    const a = svm.getAccount(address(who));
    if (!a.exists) return { context: context(), value: null };
    if ((config.encoding ?? "base58") !== "base64") throw invalidParams("only base64 account data is served here");
    return {
      context: context(),
      value: { data: [b64out.decode(a.data), "base64"], executable: a.executable, lamports: Number(a.lamports), owner: a.programAddress, rentEpoch: 0, space: a.data.length },
    };
  },
  getTokenAccountBalance: ([who]) => {
    const a = svm.getAccount(address(who));
    if (!a.exists || a.data.length < 165) throw invalidParams("Invalid param: could not find account");
    const amount = new DataView(a.data.buffer, a.data.byteOffset).getBigUint64(64, true);
    const ui = Number(amount) / 1e6;
    return { context: context(), value: { amount: amount.toString(), decimals: 6, uiAmount: ui, uiAmountString: String(ui) } };
  },
  simulateTransaction: ([text, config = {}]) => {
    const tx = getTransactionDecoder().decode(wire(text, config));
    const sigverify = svm.inner.getSigverify();
    svm.withSigverify(Boolean(config.sigVerify));
    if (config.replaceRecentBlockhash) svm.withBlockhashCheck(false);
    let r;
    try {
      r = svm.simulateTransaction(tx);
    } finally {
      svm.withSigverify(sigverify);
      svm.withBlockhashCheck(true);
    }
    const failed = r instanceof FailedTransactionMetadata;
    const meta = r.meta();
    return {
      context: context(),
      value: { err: failed ? errorJson(r.err()) : null, logs: meta.logs(), accounts: null, unitsConsumed: Number(meta.computeUnitsConsumed()), returnData: null },
    };
  },
  sendTransaction: ([text, config = {}]) => {
    const bytes = wire(text, config);
    const tx = getTransactionDecoder().decode(bytes);
    const feePayerKey = getCompiledTransactionMessageDecoder().decode(tx.messageBytes).staticAccounts[0];
    const signature = tx.signatures[feePayerKey];
    if (!signature) throw { code: -32003, message: "Transaction signature verification failure" };
    if (failSends > 0) {
      failSends -= 1;
      throw { code: -32005, message: "Node is unhealthy (umpire_failSends)" };
    }
    const sig = b58.decode(signature);
    const r = svm.sendTransaction(tx);
    if (r instanceof FailedTransactionMetadata) {
      const err = errorJson(r.err());
      // What never reaches a block (bad signature, unknown blockhash, a replay) is
      // refused here, as a node's preflight does; a failed execution lands with its error.
      if (typeof err === "string" || !config.skipPreflight) {
        throw { code: -32002, message: `Transaction simulation failed: ${JSON.stringify(err)}`, data: { err, logs: r.meta().logs() } };
      }
      statuses.set(sig, { slot: slot(), err, at: Date.now() });
    } else {
      statuses.set(sig, { slot: slot(), err: null, at: Date.now() });
    }
    nextSlot();
    return sig;
  },
  getSignatureStatuses: ([signatures]) => ({
    context: context(),
    value: signatures.map((s) => {
      const st = statuses.get(s);
      if (!st) return null;
      const processed = holdStatuses || Date.now() < st.at + confirmAfter;
      return {
        slot: st.slot,
        confirmations: processed ? 0 : null,
        err: st.err,
        status: st.err ? { Err: st.err } : { Ok: null },
        confirmationStatus: processed ? "processed" : "finalized",
      };
    }),
  }),
  getTransaction: ([sig]) => {
    const st = statuses.get(sig);
    return st ? { slot: st.slot, blockTime: Math.floor(Date.now() / 1000), meta: { err: st.err, fee: 5000 }, transaction: null } : null;
  },
  umpire_expireBlockhash: () => {
    svm.expireBlockhash();
    return svm.latestBlockhash();
  },
  umpire_failSends: ([n]) => {
    failSends = Number(n ?? 1);
    return failSends;
  },
  umpire_holdStatuses: ([hold]) => {
    holdStatuses = Boolean(hold);
    return holdStatuses;
  },
  umpire_confirmAfter: ([ms]) => {
    confirmAfter = Number(ms ?? 0);
    return confirmAfter;
  },
  umpire_calls: ([method]) => calls.get(method) ?? 0,
};

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    let msg;
    try {
      msg = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    } catch {
      res.writeHead(400, { "content-type": "application/json" });
      res.end(JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32700, message: "Parse error" } }));
      return;
    }
    const one = (m) => {
      calls.set(m.method, (calls.get(m.method) ?? 0) + 1);
      const method = methods[m.method];
      if (!method) return { jsonrpc: "2.0", id: m.id, error: { code: -32601, message: `Method not found: ${m.method}` } };
      try {
        return { jsonrpc: "2.0", id: m.id, result: method(m.params ?? []) };
      } catch (e) {
        return { jsonrpc: "2.0", id: m.id, error: e?.code ? e : { code: -32603, message: String(e?.message ?? e) } };
      }
    };
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify(Array.isArray(msg) ? msg.map(one) : one(msg)));
  });
});

server.listen(Number(args.port), "127.0.0.1", () => {
  const dir = path.dirname(args.out);
  mkdirSync(dir, { recursive: true });
  const keyFile = (name, k) => {
    const file = path.join(dir, `${name}.json`);
    writeFileSync(file, JSON.stringify(Array.from(k.secret)), { mode: 0o600 });
    return file;
  };
  const info = {
    rpc_url: `http://127.0.0.1:${server.address().port}`,
    network: NETWORK,
    usdc_mint: USDC,
    fee_payer: feePayer.address,
    fee_payer_keypair: keyFile("svm-fee-payer", feePayer),
    payer: payer.address,
    payer_keypair: keyFile("svm-payer", payer),
    payer_usdc_account: payerAta,
    payer_usdc: usdcUnits.toString(),
    sol_payer: solPayer.address,
    sol_payer_keypair: keyFile("svm-sol-payer", solPayer),
    pay_to: payTo.address,
    pay_to_usdc_account: payToAta,
  };
  writeFileSync(args.out, JSON.stringify(info, null, 1));
  console.log(JSON.stringify({ port: server.address().port }));
});
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => server.close(() => process.exit(0)));
