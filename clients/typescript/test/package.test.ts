// The package as a user installs it: the build (`tsc -p tsconfig.build.json`) with package.json in
// a node_modules/@overworld/client of its own, imported by name from Node and type-checked by
// TypeScript through package.json's `exports`: the main entry (the client API) and the subpath
// `@overworld/client/protocol` (the wire codec).
import { execFile } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import ts from "typescript";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const PACKAGE = fileURLToPath(new URL("..", import.meta.url));
const run = promisify(execFile);

const CODEC = [
  "BitReader",
  "BitWriter",
  "fromHex",
  "ByteReader",
  "ByteWriter",
  "zigzag",
  "unzigzag",
  "decodeKeyframe",
  "decodeDelta",
  "dequantize",
  "decodeValue",
  "encodeInput",
  "encodeClientMessage",
  "decodeServerMessage",
  "indexBits",
];
const API = [
  "Client",
  "ZoneConnection",
  "ConnectError",
  "OverworldHttpError",
  "WorldView",
  "EntityView",
  "decodeEntity",
  "ServerClock",
  "backoffDelay",
  "PROTOCOL_VERSION",
  "OverworldRequestError",
  "BACKEND_ERROR_CODES",
];

describe("the built package", () => {
  let dir = "";

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "overworld-package-"));
    const pkg = join(dir, "node_modules", "@overworld", "client");
    mkdirSync(pkg, { recursive: true });
    copyFileSync(join(PACKAGE, "package.json"), join(pkg, "package.json"));
    const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
    try {
      await run(process.execPath, [tsc, "-p", "tsconfig.build.json", "--outDir", join(pkg, "dist")], { cwd: PACKAGE });
    } catch (e) {
      const { stdout, stderr } = e as { stdout?: string; stderr?: string };
      throw new Error(`the SDK's build failed:\n${stdout ?? ""}${stderr ?? ""}`);
    }
  }, 120_000);

  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("resolves `@overworld/client` and `@overworld/client/protocol` in Node, each with its exports", async () => {
    const script = join(dir, "check.mjs");
    writeFileSync(
      script,
      `import * as main from "@overworld/client";
import * as protocol from "@overworld/client/protocol";
const bytes = protocol.encodeInput(
  { id: 0, name: "move", fields: [{ name: "mx", type: "int", bits: 8, min: -127, step: 1, diff_bits: 3, values: null }] },
  { mx: 100 },
);
console.log(JSON.stringify({ main: Object.keys(main).sort(), protocol: Object.keys(protocol).sort(), bytes: [...bytes] }));
`,
    );
    const { stdout } = await run(process.execPath, [script], { cwd: dir });
    const got = JSON.parse(stdout) as { main: string[]; protocol: string[]; bytes: number[] };
    expect(got.main).toEqual(expect.arrayContaining(API));
    expect(got.protocol).toEqual(expect.arrayContaining(CODEC));
    // The codec's internals live behind the subpath only.
    for (const name of CODEC) expect(got.main).not.toContain(name);
    expect(got.bytes).toEqual([227]);
  }, 30_000);

  it("type-checks imports of both entries through package.json's exports", () => {
    const file = join(dir, "use.mts");
    writeFileSync(
      file,
      `import { Client, ConnectError, type Handshake, type TemplateSchema } from "@overworld/client";
import { BitWriter, encodeInput, decodeServerMessage, type ServerMessage } from "@overworld/client/protocol";
export async function play(client: Client, layout: TemplateSchema): Promise<Uint8Array> {
  try {
    const conn = await client.connect({ userId: "1", token: "t", refreshToken: "r", expiresAt: 0, refreshExpiresAt: 0, created: false });
    const h: Handshake = await conn.connected();
    conn.sendInput({ mx: 1, my: 2 });
    interface Move { mx: number; my: number }
    const move: Move = { mx: 3, my: 4 };
    conn.sendInput(move);
    conn.sendInput(new Uint8Array([1, 2]));
    void h.input;
  } catch (e) {
    if (e instanceof ConnectError) void [e.code, e.reason, e.error?.message];
  }
  const m: ReturnType<typeof decodeServerMessage> = decodeServerMessage(new Uint8Array([1]));
  const s: ServerMessage | undefined = m.ok ? m.value : undefined;
  void s;
  return new BitWriter().uint(3, 5).toBytes().length > 0 ? encodeInput(layout, { mx: 1 }) : new Uint8Array();
}
`,
    );
    const program = ts.createProgram([file], {
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      strict: true,
      noEmit: true,
      skipLibCheck: true,
      types: [],
    });
    const diagnostics = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n"));
    expect(diagnostics).toEqual([]);
    // A value that is not a field value does not type-check.
    writeFileSync(file, `import type { ZoneConnection } from "@overworld/client";\nexport const f = (c: ZoneConnection) => c.sendInput({ mx: [1] });\n`);
    const badValue = ts.createProgram([file], { module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, strict: true, noEmit: true, types: [] });
    expect(ts.getPreEmitDiagnostics(badValue).length).toBeGreaterThan(0);
    // And a codec name from the main entry is an error.
    writeFileSync(file, `import { BitReader } from "@overworld/client";\nvoid BitReader;\n`);
    const wrong = ts.createProgram([file], { module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, noEmit: true, types: [] });
    expect(ts.getPreEmitDiagnostics(wrong).map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n")).join("\n")).toMatch(/has no exported member .?BitReader/);
  }, 30_000);
});
