/**
 * The server time as the client sees it, in seconds: each snapshot says "tick T happened", i.e.
 * server time T / tick rate, and between snapshots the estimate runs on the local clock. The
 * offset between the two clocks is smoothed (an exponential moving average over the
 * snapshots' arrival jitter), jumps when it is off by more than `maxError`, and the answer
 * never goes backwards by less than that (small corrections hold the time still instead).
 */
export class ServerClock {
  private offset: number | undefined;
  private last = -Infinity;

  /**
   * @param smoothing the weight of each new observation (0..1, default 0.1)
   * @param maxError seconds of disagreement past which the estimate jumps (default 1)
   */
  constructor(
    readonly smoothing = 0.1,
    readonly maxError = 1,
  ) {}

  /** Whether any observation was made. */
  get synced(): boolean {
    return this.offset !== undefined;
  }

  /** Server time `serverSeconds` observed at local time `localMs` (milliseconds). */
  observe(serverSeconds: number, localMs: number): void {
    const o = serverSeconds - localMs / 1000;
    if (this.offset === undefined || Math.abs(o - this.offset) > this.maxError) {
      this.offset = o;
      this.last = -Infinity;
    } else this.offset += (o - this.offset) * this.smoothing;
  }

  /** The estimated server time (seconds) at local time `localMs`; 0 before any observation. */
  now(localMs: number): number {
    if (this.offset === undefined) return 0;
    const t = localMs / 1000 + this.offset;
    if (t < this.last && this.last - t < this.maxError) return this.last;
    this.last = t;
    return t;
  }

  /** Forgets the observations (another zone, another time base). */
  reset(): void {
    this.offset = undefined;
    this.last = -Infinity;
  }
}
