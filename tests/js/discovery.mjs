// What an x402 facilitator's catalog (the Bazaar) makes of a 402: @x402/extensions' own
// validator and extractor, run on a PAYMENT-REQUIRED header. Prints one JSON line:
// {"valid", "errors", "specValid", "specErrors", "discovered"}.
//
//   node tests/js/discovery.mjs --required <PAYMENT-REQUIRED header value>
//
// `discovered` is what extractDiscoveryInfo catalogs from a v2 payment made against the
// 402 (the reference client echoes the 402's extensions into its payment payload).
import { parseArgs } from "node:util";
import {
  extractDiscoveryInfo,
  validateDiscoveryExtension,
  validateDiscoveryExtensionSpec,
} from "@x402/extensions/bazaar";

const { values: args } = parseArgs({ options: { required: { type: "string" } } });
const required = JSON.parse(Buffer.from(args.required, "base64").toString("utf8"));
const bazaar = required.extensions?.bazaar;
const check = bazaar ? validateDiscoveryExtension(bazaar) : { valid: false, errors: ["no extensions.bazaar"] };
const spec = bazaar ? validateDiscoveryExtensionSpec(bazaar) : { valid: false, errors: ["no extensions.bazaar"] };
const payment = {
  x402Version: 2,
  resource: required.resource,
  accepted: required.accepts[0],
  payload: {},
  extensions: required.extensions,
};
const discovered = extractDiscoveryInfo(payment, required.accepts[0]);
console.log(
  JSON.stringify({
    valid: check.valid,
    errors: check.errors ?? [],
    specValid: spec.valid,
    specErrors: spec.errors ?? [],
    discovered,
  }),
);
