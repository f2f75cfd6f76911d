// Drives GET /verify in headless Chromium with an ERC-8004 validation reference and an
// RPC URL: the page reads the validator's answer on chain and shows its steps.
//   node tests/js/verify_page_validation.mjs --url http://127.0.0.1:PORT/verify
//        --document D.json --validation erc8004:... --rpc http://127.0.0.1:8545
// Prints one JSON line {verified, summary, steps: [{name, ok}]}.
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { chromium } from "playwright-core";

const { values } = parseArgs({
  options: { url: { type: "string" }, document: { type: "string" }, validation: { type: "string" }, rpc: { type: "string" } },
});
const browser = await chromium.launch({
  executablePath: process.env.UMPIRE_CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = await browser.newPage();
  await page.goto(values.url);
  await page.fill("#doc", readFileSync(values.document, "utf8"));
  await page.fill("#validation", values.validation);
  await page.fill("#rpc", values.rpc);
  await page.click("#verify");
  await page.waitForFunction(() => document.getElementById("summary").dataset.verified !== undefined
    && document.getElementById("summary").textContent !== "verifying...", null, { timeout: 30000 });
  const out = await page.evaluate(() => ({
    verified: document.getElementById("summary").dataset.verified === "true",
    summary: document.getElementById("summary").textContent,
    steps: [...document.querySelectorAll("#steps li")].map((li) => ({ name: li.dataset.step, ok: li.dataset.ok, detail: li.textContent })),
  }));
  console.log(JSON.stringify(out));
} finally {
  await browser.close();
}
