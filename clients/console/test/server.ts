// The real server for the console's browser tests and screenshots: the goblin example's `mix
// goblins.server` as the SDK's tests start it (../../typescript/test/server.ts: the start lock,
// the process group, the `listening on` line), with operators added to its fresh data directory
// first (`mix overworld.operator.add`, the password on stdin) and no zone files (`--no-persist`).
import { spawn } from "node:child_process";
import { GAME, startServer, type RunningServer } from "../../typescript/test/server.js";

export { START_TIMEOUT, type RunningServer } from "../../typescript/test/server.js";

export interface Operator {
  name: string;
  password: string;
  role: "operator" | "viewer";
}

/** The operators the console's tests log in as. */
export const ALICE: Operator = { name: "alice", password: "alice's password", role: "operator" };
export const VICTOR: Operator = { name: "victor", password: "victor's password", role: "viewer" };

/** `mix overworld.operator.add` into `dataDir` (few PBKDF2 iterations: the tests log in often). */
function addOperator(dataDir: string, op: Operator): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn("mix", ["overworld.operator.add", op.name, "--role", op.role, "--data-dir", dataDir, "--iterations", "1000"], {
      cwd: GAME,
      env: { ...process.env, MIX_ENV: "dev" },
      stdio: ["pipe", "pipe", "pipe"],
    });
    let output = "";
    child.stdout.on("data", (c: Buffer) => (output += c.toString()));
    child.stderr.on("data", (c: Buffer) => (output += c.toString()));
    child.on("error", (e) => reject(new Error(`cannot run mix: ${e.message}`)));
    child.on("exit", (code) =>
      code === 0 ? resolve() : reject(new Error(`mix overworld.operator.add ${op.name} exited with ${code}:\n${output.slice(-4000)}`)),
    );
    child.stdin.end(`${op.password}\n`);
  });
}

/**
 * The goblin server (`options`: goblins.server's, by default 2000 goblins in one zone) with the
 * operators `ops` in its accounts.
 */
export function startConsoleServer(
  prefix = "overworld-console-",
  options: string[] = ["--entities", "2000"],
  ops: Operator[] = [ALICE, VICTOR],
): Promise<RunningServer> {
  return startServer(prefix, [...options, "--no-persist"], async (dir) => {
    for (const op of ops) await addOperator(dir, op);
  });
}

/** Where the console keeps its operator token (src/token.ts). */
export const TOKEN_KEY = "overworld.operator";

/** An answer of the server's HTTP API: its status and its JSON body (null when empty). */
export interface Reply {
  status: number;
  body: any;
}

/** A request to the server at `base` from Node, as `token` (null: none), with a JSON body if any. */
export async function call(base: string, path: string, token: string | null, method = "GET", body?: unknown): Promise<Reply> {
  const headers: Record<string, string> = { accept: "application/json" };
  if (token !== null) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(base + path, { method, headers, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
  const text = await res.text();
  return { status: res.status, body: text === "" ? null : JSON.parse(text) };
}

/** Throws unless the server answered 200. */
function ok(r: Reply, what: string): Reply {
  if (r.status !== 200) throw new Error(`${what}: ${r.status} ${JSON.stringify(r.body)}`);
  return r;
}

/** `GET path` from Node as `token`: its JSON body; throws unless the server answered 200. */
export async function api(base: string, path: string, token: string): Promise<any> {
  return ok(await call(base, path, token), `GET ${path}`).body;
}

/** Logs `op` in from Node: its operator token; throws unless the server answered 200. */
export async function loginFromNode(base: string, op: Operator): Promise<string> {
  const path = "/api/v1/operator/login";
  return ok(await call(base, path, null, "POST", { name: op.name, password: op.password }), `POST ${path}`).body.token as string;
}
