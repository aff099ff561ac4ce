// The real server for the tests that need one: the goblin example's `mix goblins.server --port 0`
// (examples/goblins, a Mix project depending on Overworld), in its own process group, with a
// fresh data directory.
import { spawn, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const ROOT = fileURLToPath(new URL("../../..", import.meta.url));
/** The goblin example's Mix project, where the server task runs. */
export const GAME = join(ROOT, "examples", "goblins");
export const START_TIMEOUT = 60_000;

export interface RunningServer {
  /** `http://127.0.0.1:<port>` */
  baseUrl: string;
  /** What the server printed so far (stdout and stderr). */
  output(): string;
  /** SIGTERM to the process group, SIGKILL after 5 s; removes the data directory. */
  stop(): Promise<void>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Test files run in parallel workers, and Elixir 1.14's mix has no lock on _build: two servers
 * starting while the sources need compiling would compile into the same directory at once. So
 * the starts (until `listening on`) take turns, through a directory made atomically.
 */
async function startLock(): Promise<() => void> {
  const dir = join(tmpdir(), `overworld-start-${createHash("sha1").update(ROOT).digest("hex").slice(0, 12)}.lock`);
  const end = Date.now() + START_TIMEOUT;
  for (;;) {
    try {
      mkdirSync(dir);
      return () => rmSync(dir, { recursive: true, force: true });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
    }
    // A lock older than any start is left over by a killed run.
    try {
      if (Date.now() - statSync(dir).mtimeMs > START_TIMEOUT + 10_000) rmSync(dir, { recursive: true, force: true });
    } catch {
      // Removed meanwhile.
    }
    if (Date.now() > end) throw new Error(`another test's server start held ${dir} for ${START_TIMEOUT / 1000} s`);
    await sleep(100);
  }
}

/**
 * Starts the server (by default with 2000 goblins in one zone; `options`: goblins.server's own,
 * e.g. `["--zones", "2x2", "--entities", "500"]`) and waits for its `listening on` line.
 * `prepare` runs first, with the start lock held, on the fresh data directory (e.g. `mix
 * overworld.operator.add` into it: a mix task of the same project, which may compile too).
 */
export async function startServer(
  prefix = "overworld-ts-",
  options: string[] = ["--entities", "2000"],
  prepare?: (dataDir: string) => Promise<void>,
): Promise<RunningServer> {
  const unlock = await startLock();
  const dataDir = mkdtempSync(join(tmpdir(), prefix));
  try {
    await prepare?.(dataDir);
  } catch (e) {
    unlock();
    rmSync(dataDir, { recursive: true, force: true });
    throw e;
  }
  let output = "";
  const child: ChildProcess = spawn(
    "mix",
    ["goblins.server", "--port", "0", ...options, "--data-dir", dataDir, "--interval", "3600"],
    { cwd: GAME, env: { ...process.env, MIX_ENV: "dev" }, detached: true, stdio: ["ignore", "pipe", "pipe"] },
  );
  const stop = async () => {
    if (child.pid !== undefined && child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once("exit", resolve));
      try {
        process.kill(-child.pid, "SIGTERM");
      } catch {
        // Already gone.
      }
      const timeout = new Promise((resolve) => setTimeout(resolve, 5000, "timeout"));
      if ((await Promise.race([exited, timeout])) === "timeout") {
        try {
          process.kill(-child.pid, "SIGKILL");
        } catch {
          // Already gone.
        }
      }
    }
    rmSync(dataDir, { recursive: true, force: true });
  };
  try {
    const baseUrl = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`no 'listening on' line within ${START_TIMEOUT / 1000} s; output:\n${output.slice(-4000)}`)),
        START_TIMEOUT,
      );
      const read = (chunk: Buffer) => {
        output += chunk.toString();
        const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(output);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]!);
        }
      };
      child.stdout!.on("data", read);
      child.stderr!.on("data", read);
      child.on("error", (e) => {
        clearTimeout(timer);
        reject(new Error(`cannot start mix: ${e.message}`));
      });
      child.on("exit", (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`server exited (${code ?? signal}) before listening; output:\n${output.slice(-4000)}`));
      });
    });
    return { baseUrl, output: () => output, stop };
  } catch (e) {
    await stop();
    throw e;
  } finally {
    unlock();
  }
}
