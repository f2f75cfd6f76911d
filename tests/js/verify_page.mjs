// Drives GET /verify in headless Chromium (Debian's chromium, playwright-core): the page's
// stable JSON against our Python-made vectors, a genuine document (all green), a
// tampered one and a wrong deliverable (the failing step named), and the same page saved
// to disk and opened from file:// (offline, with the keys written into it).
//   node tests/js/verify_page.mjs --url http://127.0.0.1:PORT/verify --document D.json
//        --deliverable DEL.json --vectors canonical-json.jsonl --save-to DIR
// Prints one JSON line; the Rust test asserts on it.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { chromium } from "playwright-core";

const { values } = parseArgs({
  options: {
    url: { type: "string" }, document: { type: "string" }, deliverable: { type: "string" },
    vectors: { type: "string" }, "save-to": { type: "string" },
  },
});
const documentText = readFileSync(values.document, "utf8");
const deliverableText = readFileSync(values.deliverable, "utf8");
const vectors = readFileSync(values.vectors, "utf8").split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));

const browser = await chromium.launch({
  executablePath: process.env.UMPIRE_CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const out = {};
try {
  const page = await browser.newPage();
  const requests = [];
  page.on("request", (r) => requests.push(r.url()));
  await page.goto(values.url);

  out.vector_mismatches = await page.evaluate((vs) => vs
    .map((v, i) => ({ i, got: window.umpireStableJson(v.input), want: v.canonical }))
    .filter((r) => r.got !== r.want), vectors);
  out.vectors = vectors.length;

  const run = async (doc, deliverable) => {
    await page.fill("#doc", doc);
    await page.fill("#deliverable", deliverable);
    await page.click("#verify");
    await page.waitForFunction(() => document.getElementById("summary").dataset.verified !== undefined
      && document.getElementById("summary").textContent !== "verifying...");
    return page.evaluate(() => ({
      verified: document.getElementById("summary").dataset.verified === "true",
      summary: document.getElementById("summary").textContent,
      steps: [...document.querySelectorAll("#steps li")].map((li) => ({ name: li.dataset.step, ok: li.dataset.ok })),
      checks_shown: document.querySelectorAll("#verdict table tr").length,
    }));
  };
  out.genuine = await run(documentText, deliverableText);
  const tampered = JSON.parse(documentText);
  tampered.verdict = tampered.verdict === "pass" ? "fail" : "pass";
  out.tampered = await run(JSON.stringify(tampered, null, 2), "");
  out.wrong_deliverable = await run(documentText, JSON.stringify({ text: "something else" }));
  out.requests = requests;

  // Saved and opened from disk: no server at all.
  const html = await (await fetch(values.url)).text();
  const file = join(values["save-to"], "umpire-verify.html");
  writeFileSync(file, html);
  const offline = await browser.newPage();
  await offline.goto("file://" + file);
  await offline.fill("#doc", documentText);
  await offline.click("#verify");
  await offline.waitForFunction(() => document.getElementById("summary").dataset.verified !== undefined);
  out.offline_verified = await offline.evaluate(() => document.getElementById("summary").dataset.verified === "true");
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
