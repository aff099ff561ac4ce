// The counters the map exposes as `window.__overworldStats`, for browser tests and the
// visualizer benchmark (frames per second drawing a whole zone):
//
// - frames: animation frames the map drew (live or history);
// - fullFrames: live frames that drew every entity of the latest snapshot applied (the
//   scene rebuilt from the SDK's WorldView at that snapshot's tick, every entity gone through:
//   drawn, or outside the viewport);
// - entitiesDrawn: entities the last frame went through (the whole scene);
// - entitiesVisible: of those, inside the viewport;
// - lastSnapshotTick: the tick of the newest snapshot applied (0 before any); sceneTick: the
//   tick of the scene the last live frame drew (the decoding worker sends the newest when the
//   page takes one: at most a frame behind);
// - snapshots: snapshots applied by the connection to the zone watched;
// - fps, fullFps: frames and full frames in the last whole second;
// - frameMs: the last frame's drawing time (ms); sceneMs: the last scene rebuild's;
//   applyMs: the newest snapshot's decoding (WorldView.apply), ms;
// - mode: "live" | "history" | "idle"; zone: the zone or world watched ("" none);
// - decoder: "worker" (snapshots decoded in a Web Worker) or "page" (on the page's thread).

export interface OverworldStats {
  frames: number;
  fullFrames: number;
  entitiesDrawn: number;
  entitiesVisible: number;
  lastSnapshotTick: number;
  sceneTick: number;
  snapshots: number;
  fps: number;
  fullFps: number;
  frameMs: number;
  sceneMs: number;
  applyMs: number;
  mode: "live" | "history" | "idle";
  zone: string;
  decoder: "worker" | "page";
}

export const stats: OverworldStats = {
  frames: 0,
  fullFrames: 0,
  entitiesDrawn: 0,
  entitiesVisible: 0,
  lastSnapshotTick: 0,
  sceneTick: 0,
  snapshots: 0,
  fps: 0,
  fullFps: 0,
  frameMs: 0,
  sceneMs: 0,
  applyMs: 0,
  mode: "idle",
  zone: "",
  decoder: "worker",
};

/** Frames per second over whole seconds. */
export class FpsMeter {
  private start = -1;
  private frames = 0;
  private full = 0;

  /** Counts a frame at `now` (ms); answers true when a second ended (stats.fps updated). */
  frame(now: number, full: boolean, into: OverworldStats = stats): boolean {
    // Frames after the window's first one, over the time since it: intervals, not posts.
    if (this.start < 0) {
      this.start = now;
      return false;
    }
    this.frames++;
    if (full) this.full++;
    const elapsed = now - this.start;
    if (elapsed < 1000) return false;
    into.fps = Math.round((this.frames * 1000) / elapsed);
    into.fullFps = Math.round((this.full * 1000) / elapsed);
    this.start = now;
    this.frames = 0;
    this.full = 0;
    return true;
  }
}
