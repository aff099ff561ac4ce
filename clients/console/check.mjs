// Checks that the committed build (../../priv/static/console) is what the sources build to:
// builds into a temporary directory and compares every file byte for byte. Exits 1, naming
// the files that differ, when they do (run `npm run build` and commit priv/static/console).
import { mkdtemp, readFile, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { FILES, buildInto } from "./build.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const committed = resolve(here, "../../priv/static/console");
const tmp = await mkdtemp(join(tmpdir(), "overworld-console-"));
try {
  await buildInto(tmp);
  const differ = [];
  let present = [];
  try {
    present = await readdir(committed);
  } catch {
    // No committed build at all: every file differs.
  }
  for (const f of FILES) {
    const fresh = await readFile(join(tmp, f));
    let old;
    try {
      old = await readFile(join(committed, f));
    } catch {
      differ.push(`${f} (missing)`);
      continue;
    }
    if (!fresh.equals(old)) differ.push(`${f} (${old.length} bytes committed, ${fresh.length} built)`);
  }
  for (const f of present) if (!FILES.includes(f)) differ.push(`${f} (not made by the build)`);
  if (differ.length > 0) {
    console.error(`priv/static/console does not match the console's sources:\n  ${differ.join("\n  ")}`);
    console.error("run `npm run build` in clients/console and commit priv/static/console");
    process.exitCode = 1;
  } else console.log(`priv/static/console matches the sources (${FILES.join(", ")})`);
} finally {
  await rm(tmp, { recursive: true, force: true });
}
