// The decoding worker's script (built to /console/worker.js): the observer connection and the
// scenes of the live map, off the page's thread (scene-worker.ts).
import { ScenePump, type ToWorker } from "./scene-worker.js";

const scope = self as unknown as {
  postMessage(m: unknown, transfer: Transferable[]): void;
  onmessage: ((e: MessageEvent<ToWorker>) => void) | null;
};
const pump = new ScenePump((m, transfer = []) => scope.postMessage(m, transfer));
scope.onmessage = (e) => pump.handle(e.data);
