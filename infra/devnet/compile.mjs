// Compiles a contract of infra/devnet with solcjs (OpenZeppelin imports resolved from
// node_modules). solcjs is slow to start, so the artifact is cached by the source's hash
// in .cache/devnet and published atomically (parallel test runs compile at once).
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const require = createRequire(import.meta.url);

export function compile(file, contract) {
  const source = readFileSync(path.join(here, file), "utf8");
  const solc = require("solc");
  const key = createHash("sha256").update(source).update(solc.version()).digest("hex").slice(0, 16);
  const cacheDir = path.join(root, ".cache", "devnet");
  const cached = path.join(cacheDir, `${contract}-${key}.json`);
  if (existsSync(cached)) return JSON.parse(readFileSync(cached, "utf8"));
  const input = {
    language: "Solidity",
    sources: { [file]: { content: source } },
    settings: {
      optimizer: { enabled: true, runs: 200 },
      evmVersion: "cancun",
      outputSelection: { "*": { [contract]: ["abi", "evm.bytecode.object"] } },
    },
  };
  const findImports = (p) => {
    try {
      return { contents: readFileSync(require.resolve(p), "utf8") };
    } catch {
      return { error: `not found: ${p}` };
    }
  };
  const out = JSON.parse(solc.compile(JSON.stringify(input), { import: findImports }));
  const errors = (out.errors ?? []).filter((e) => e.severity === "error");
  if (errors.length) {
    throw new Error(errors.map((e) => e.formattedMessage).join("\n"));
  }
  const c = out.contracts[file][contract];
  const artifact = { abi: c.abi, bytecode: `0x${c.evm.bytecode.object}` };
  mkdirSync(cacheDir, { recursive: true });
  const partial = `${cached}.${process.pid}.tmp`;
  writeFileSync(partial, JSON.stringify(artifact));
  renameSync(partial, cached);
  return artifact;
}
