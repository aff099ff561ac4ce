// Builds the console into a directory (default ../../priv/static/console, where the server
// serves it from): app.js (src/main.ts and the SDK's sources it imports, bundled and minified
// by esbuild), worker.js (src/worker.ts, the same way), app.css (minified) and index.html
// (copied). The output depends only on the
// sources and the pinned esbuild: no timestamps, no absolute paths, no source maps, so
// `npm run check` can compare a fresh build with the committed files byte for byte.
import { build } from "esbuild";
import { copyFile, mkdir, readdir, rm } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
export const FILES = ["index.html", "app.js", "worker.js", "app.css"];

export async function buildInto(out) {
  await mkdir(out, { recursive: true });
  // Files of an older build that are no longer made would be served forever: removed.
  for (const f of await readdir(out)) if (!FILES.includes(f)) await rm(join(out, f), { recursive: true });
  const common = {
    absWorkingDir: here,
    bundle: true,
    minify: true,
    legalComments: "none",
    sourcemap: false,
    charset: "utf8",
    logLevel: "warning",
  };
  const script = { ...common, format: "iife", target: ["es2022", "chrome109", "firefox115", "safari16"], platform: "browser" };
  await build({ ...script, entryPoints: ["src/main.ts"], outfile: join(out, "app.js") });
  // The live map's decoding worker (the observer connection and its scenes, off the page's thread).
  await build({ ...script, entryPoints: ["src/worker.ts"], outfile: join(out, "worker.js") });
  await build({ ...common, entryPoints: ["static/app.css"], outfile: join(out, "app.css"), loader: { ".css": "css" } });
  await copyFile(join(here, "static/index.html"), join(out, "index.html"));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const out = resolve(here, process.argv[2] ?? "../../priv/static/console");
  await buildInto(out);
  console.log(`built ${FILES.join(", ")} into ${out}`);
}
