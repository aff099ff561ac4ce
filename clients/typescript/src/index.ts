// @overworld/client: the client API. The wire codec (bit and byte readers and writers, template
// and message encoders and decoders) is the subpath `@overworld/client/protocol` (src/protocol.ts).
export { PROTOCOL_VERSION } from "./messages.js";
export type { AngleUnit, FieldSchema, FieldType, InputValues, TemplateSchema, Result, Value } from "./template.js";
export { WorldView } from "./snapshot.js";
export type { Entry, Handed, Run } from "./snapshot.js";
export { EntityView, decodeEntity } from "./interpolation.js";
export type { Entity, EntityViewOptions, Sample } from "./interpolation.js";
export { ServerClock } from "./clock.js";
export { backoffDelay } from "./backoff.js";
export type { BackoffOptions } from "./backoff.js";
export { ConnectError, FINAL_CLOSES, FULL, UNAUTHORIZED, ZoneConnection, retryAfter } from "./connection.js";
export type {
  CloseInfo,
  ConnectOptions,
  ConnectionState,
  ConnectionStats,
  Handshake,
  ReconnectOptions,
  ServerError,
  WebSocketConstructor,
  WebSocketLike,
} from "./connection.js";
export { Client, OverworldHttpError, socketUrl, toHttpError } from "./client.js";
export type { ClientOptions, FetchLike, Session } from "./client.js";
export { Storage } from "./storage.js";
export type { ListOptions, StorageAck, StorageDelete, StorageId, StorageObject, StoragePage, StorageWrite } from "./storage.js";
export { ACCOUNT_ERROR_CODES, Accounts } from "./accounts.js";
export type { Account, AccountErrorCode, CustomAuthBody, EmailPending } from "./accounts.js";
export { BACKEND_ERROR_CODES, OverworldRequestError } from "./backend.js";
export type {
  BackendErrorCode,
  ListMatchesOptions,
  MatchData,
  MatchInfo,
  MatchJoined,
  MatchLabel,
  MatchNotice,
  MatchPresenceEvent,
  MatchQuery,
  MatchmakerMatched,
  MatchmakerTicket,
  QueryValue,
  RequestErrorCode,
  RequestFailureCode,
} from "./backend.js";
