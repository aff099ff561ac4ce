// Debian's headless Chromium as the browser tests, the console's screenshots and the
// visualizer's benchmark drive it (playwright-core, which never downloads a browser of its
// own). Plain JavaScript, with its types beside it (chromium.d.mts), so that Node scripts and
// the TypeScript tests share it.

/** Debian's Chromium (`make deps-ts` installs it). */
export const CHROMIUM = "/usr/bin/chromium";

/**
 * As root, without a sandbox; the background services off, since this machine's network is
 * closed and Chromium's own connections to Google's hosts would be refused.
 */
export const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls `check` every 50 ms until it holds; throws after `ms` with `detail()` appended. */
export async function until(what, check, ms, detail = () => "") {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}${detail()}`);
    await sleep(50);
  }
}
