/** Storage on the server: per-user collections of JSON objects (docs/protocol.md, 'Storage'). */
import type { Session } from "./client.js";

/** A stored object. `value` is the object's JSON, parsed. Times in ms since the epoch. */
export interface StorageObject<T = unknown> {
  collection: string;
  key: string;
  /** The owner ("" for the system's objects, written by server code). */
  userId: string;
  value: T;
  /** A hash of the value: write with it to write only if nobody changed the object since. */
  version: string;
  /** 0: server code only, 1: the owner, 2: anyone. */
  read: 0 | 1 | 2;
  /** 0: server code only, 1: the owner. */
  write: 0 | 1;
  createdAt: number;
  updatedAt: number;
}

/** A write. `version`: "*" only if the object does not exist, a version only if it still has it. */
export interface StorageWrite {
  collection: string;
  key: string;
  /** A JSON object. */
  value: Record<string, unknown>;
  version?: string;
  read?: 0 | 1 | 2;
  write?: 0 | 1;
}

export interface StorageAck {
  collection: string;
  key: string;
  userId: string;
  version: string;
}

export interface StorageId {
  collection: string;
  key: string;
  /** The owner; default the session's user. "" names the system's objects. */
  userId?: string;
}

export interface StorageDelete {
  collection: string;
  key: string;
  /** Delete only if the object still has this version. */
  version?: string;
}

export interface ListOptions {
  /** One owner's objects ("" the system's); default everyone's the user may read. */
  userId?: string;
  /** 1 to 100, default 20. */
  limit?: number;
  /** From the previous page. */
  cursor?: string;
}

export interface StoragePage<T = unknown> {
  objects: StorageObject<T>[];
  /** For the next page; undefined after the last. */
  cursor?: string;
}

type Call = (method: "GET" | "POST", path: string, session: Session, body?: unknown) => Promise<unknown>;

/**
 * `client.storage`: every call acts as the session's user. Errors are `OverworldHttpError`s
 * whose `code` says why: `version_conflict` (409), `permission_denied` (403), `too_large` (413),
 * `invalid_request` (400, the message names the item), `invalid_token` (401).
 * A batch (at most 100 items) is all or none.
 */
export class Storage {
  constructor(private readonly call: Call) {}

  /** Writes a batch; resolves once it is durable on the server. */
  async write(session: Session, objects: StorageWrite[]): Promise<StorageAck[]> {
    const json = (await this.call("POST", "/api/v1/storage/write", session, { objects })) as { acks: RawAck[] };
    return json.acks.map((a) => ({ collection: a.collection, key: a.key, userId: a.user_id, version: a.version }));
  }

  /** The objects of `ids` that exist and the user may read. */
  async read<T = unknown>(session: Session, ids: StorageId[]): Promise<StorageObject<T>[]> {
    const object_ids = ids.map((i) => ({ collection: i.collection, key: i.key, user_id: i.userId ?? session.userId }));
    const json = (await this.call("POST", "/api/v1/storage/read", session, { object_ids })) as { objects: RawObject[] };
    return json.objects.map((o) => toObject<T>(o));
  }

  /** Deletes a batch of the user's objects (an absent one is no error, unless a version is given). */
  async delete(session: Session, ids: StorageDelete[]): Promise<void> {
    await this.call("POST", "/api/v1/storage/delete", session, { object_ids: ids });
  }

  /** A page of a collection's objects the user may read, ordered by owner then key. */
  async list<T = unknown>(session: Session, collection: string, options: ListOptions = {}): Promise<StoragePage<T>> {
    const q = new URLSearchParams({ collection });
    if (options.userId !== undefined) q.set("user_id", options.userId);
    if (options.limit !== undefined) q.set("limit", String(options.limit));
    if (options.cursor !== undefined) q.set("cursor", options.cursor);
    const json = (await this.call("GET", `/api/v1/storage/list?${q.toString()}`, session)) as {
      objects: RawObject[];
      cursor: string | null;
    };
    const page: StoragePage<T> = { objects: json.objects.map((o) => toObject<T>(o)) };
    if (typeof json.cursor === "string") page.cursor = json.cursor;
    return page;
  }
}

interface RawAck {
  collection: string;
  key: string;
  user_id: string;
  version: string;
}

interface RawObject extends RawAck {
  value: string;
  read: 0 | 1 | 2;
  write: 0 | 1;
  created_at: number;
  updated_at: number;
}

function toObject<T>(o: RawObject): StorageObject<T> {
  return {
    collection: o.collection,
    key: o.key,
    userId: o.user_id,
    value: JSON.parse(o.value) as T,
    version: o.version,
    read: o.read,
    write: o.write,
    createdAt: o.created_at,
    updatedAt: o.updated_at,
  };
}
