export { BitReader, fromHex } from "./bits.js";
export { ByteReader, ByteWriter, zigzag, unzigzag } from "./bytes.js";
export { decodeKeyframe, decodeDelta, dequantize, decodeValue } from "./template.js";
export type { AngleUnit, FieldSchema, FieldType, TemplateSchema, Result, Value } from "./template.js";
export { PROTOCOL_VERSION, encodeClientMessage, decodeServerMessage } from "./messages.js";
export type { ClientMessage, ServerMessage } from "./messages.js";
export { WorldView, indexBits } from "./snapshot.js";
export type { Entry } from "./snapshot.js";
export { EntityView, decodeEntity } from "./interpolation.js";
export type { Entity, EntityViewOptions, Sample } from "./interpolation.js";
export { ServerClock } from "./clock.js";
export { backoffDelay } from "./backoff.js";
export type { BackoffOptions } from "./backoff.js";
export { ZoneConnection } from "./connection.js";
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
export { Client, OverworldHttpError } from "./client.js";
export type { ClientOptions, FetchLike, Session } from "./client.js";
