// The operator token, kept for the browser tab's life (sessionStorage: gone with the tab, never
// sent anywhere by the browser on its own), with its expiry.

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** The operator token, kept for the browser tab's life (sessionStorage, else in memory), with its expiry. */
export class TokenStore {
  private readonly storage: Pick<Storage, "getItem" | "setItem" | "removeItem"> | null;
  private readonly key: string;
  private readonly now: () => number;
  private memory: string | null = null;

  constructor(storage: Pick<Storage, "getItem" | "setItem" | "removeItem"> | null, key = "overworld.operator", now = () => Date.now()) {
    this.storage = storage;
    this.key = key;
    this.now = now;
  }

  /** The token, or null when there is none or it expired. */
  get(): string | null {
    let raw: string | null = null;
    try {
      raw = this.storage?.getItem(this.key) ?? null;
    } catch {
      // Storage refused: the copy in memory.
    }
    raw ??= this.memory;
    if (raw === null) return null;
    let o: unknown;
    try {
      o = JSON.parse(raw);
    } catch {
      return null;
    }
    if (!isObject(o) || typeof o.token !== "string") return null;
    if (typeof o.expiresAt === "number" && o.expiresAt <= this.now()) {
      this.clear();
      return null;
    }
    return o.token;
  }

  set(token: string, expiresIn: number | null): void {
    const expiresAt = expiresIn === null ? null : this.now() + expiresIn * 1000;
    this.memory = JSON.stringify({ token, expiresAt });
    try {
      this.storage?.setItem(this.key, this.memory);
    } catch {
      // Storage full or refused: the token lives as long as the page.
    }
  }

  clear(): void {
    this.memory = null;
    try {
      this.storage?.removeItem(this.key);
    } catch {
      // Nothing to clear.
    }
  }
}
