// `node --import ./node20-fs.mjs ...`: lets @modelcontextprotocol/conformance run on Node 20.
// Its published build imports `globSync` from "fs" by name (Node >= 22; only its tier-check command calls
// it), which fails to link on Node 20. On such a Node this registers a loader hook that hands that package
// node:fs plus a globSync stub; the package itself is not touched. On Node >= 22 it does nothing.
import fs from "node:fs";
import { register } from "node:module";

if (typeof fs.globSync !== "function") {
  register("./node20-fs-hooks.mjs", import.meta.url);
}
