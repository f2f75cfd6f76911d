// Drives Umpire's POST /mcp with the official MCP TypeScript SDK client (streamable
// HTTP transport): initialize, tools/list, and a call of every tool. Prints one JSON
// line summarizing what the server answered; the Rust test asserts on it.
//   node tests/js/mcp_client.mjs --url http://127.0.0.1:PORT/mcp --document DOC.json --deliverable D.json
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const { values } = parseArgs({
  options: { url: { type: "string" }, document: { type: "string" }, deliverable: { type: "string" } },
});
const document = JSON.parse(readFileSync(values.document, "utf8"));
const deliverable = JSON.parse(readFileSync(values.deliverable, "utf8"));

const client = new Client({ name: "umpire-test", version: "1.0.0" });
await client.connect(new StreamableHTTPClientTransport(new URL(values.url)));
const out = { server: client.getServerVersion(), protocol: client.transport?.protocolVersion ?? null };

const { tools } = await client.listTools();
out.tools = tools.map((t) => t.name).sort();
out.schemas_are_objects = tools.every((t) => t.inputSchema?.type === "object");

const call = async (name, args) => {
  const r = await client.callTool({ name, arguments: args });
  return { isError: !!r.isError, structured: r.structuredContent ?? null, text: r.content?.[0]?.text ?? "" };
};

out.validate = await call("validate", { tier: "basic", spec: { checks: [{ type: "length", min: 1 }] } });
out.validate_bad = await call("validate", { tier: "basic", spec: { checks: [{ type: "regex", pattern: "(a" }] } });
out.quote = await call("quote", {});
out.verify = await call("verify_document", { document, deliverable });
const tampered = structuredClone(document);
tampered.verdict = tampered.verdict === "pass" ? "fail" : "pass";
out.verify_tampered = await call("verify_document", { document: tampered });
out.get_verdict = await call("get_verdict", { verdict_id: "vrd_0123456789abcdef0123456789abcdef", secret: "vs_nope" });
out.find = await call("find", { spec_hash: "ab".repeat(32), webhook: "https://hooks.example.com/x" });
out.feedback = await call("submit_feedback", {
  merchant: "0x" + "11".repeat(20),
  payer: "0x" + "22".repeat(20),
  tx_hash: "0x" + "33".repeat(32),
  outcome: "fulfilled",
  signature: "0x" + "44".repeat(65),
});
try {
  await client.callTool({ name: "no_such_tool", arguments: {} });
  out.unknown_tool = "answered";
} catch (e) {
  out.unknown_tool = String(e.code ?? e.message);
}
await client.close();
console.log(JSON.stringify(out));
