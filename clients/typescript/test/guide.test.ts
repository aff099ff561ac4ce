// docs/guide.md's client code, type-checked against this SDK: the ```ts block is extracted from
// the guide (no copy of it lives here), its import pointed at the SDK's sources, and compiled
// with the project's compiler options. A guide whose client code no longer fits the SDK fails.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";
import { ROOT } from "./server.js";

const SDK = join(ROOT, "clients", "typescript");

describe("docs/guide.md", () => {
  it("its TypeScript client code compiles against the SDK", () => {
    const guide = readFileSync(join(ROOT, "docs", "guide.md"), "utf8");
    const blocks = [...guide.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m) => m[1] ?? "");
    expect(blocks).toHaveLength(1);
    const code = blocks[0]!;
    expect(code).toContain('from "@overworld/client"');

    const dir = mkdtempSync(join(tmpdir(), "overworld-guide-ts-"));
    try {
      const file = join(dir, "guide.mts");
      // An ES module (top-level await), importing the SDK's sources.
      writeFileSync(file, code.replace('"@overworld/client"', JSON.stringify(join(SDK, "src", "index.js"))) + "\nexport {};\n");
      const program = ts.createProgram([file], {
        target: ts.ScriptTarget.ES2022,
        module: ts.ModuleKind.NodeNext,
        moduleResolution: ts.ModuleResolutionKind.NodeNext,
        strict: true,
        noUncheckedIndexedAccess: true,
        skipLibCheck: true,
        noEmit: true,
        types: ["node"],
        typeRoots: [join(SDK, "node_modules", "@types")],
      });
      const diagnostics = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n"));
      expect(diagnostics).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
