// Loader hooks for node20-fs.mjs: "fs" imported from the conformance package resolves to a shim module.
const SHIM = "managed-tools:node20-fs";
const PACKAGE = "/node_modules/@modelcontextprotocol/conformance/";
const SOURCE = `
import fs from "node:fs";
export * from "node:fs";
export default fs;
export function globSync() {
  throw new Error("fs.globSync needs Node >= 22 (conformance tier-check is not available on this Node)");
}
`;

export async function resolve(specifier, context, nextResolve) {
  const fromPackage = context.parentURL !== undefined && context.parentURL.includes(PACKAGE);
  if (fromPackage && (specifier === "fs" || specifier === "node:fs")) {
    return { url: SHIM, shortCircuit: true };
  }
  return nextResolve(specifier, context);
}

export async function load(url, context, nextLoad) {
  if (url === SHIM) {
    return { format: "module", source: SOURCE, shortCircuit: true };
  }
  return nextLoad(url, context);
}
