// @overworld/client/protocol: the wire codec (docs/protocol.md) under the client API, for tools,
// tests and custom transports: bits and bytes, templates (keyframes, deltas, typed inputs) and
// messages. Decoders never throw; they answer a `Result`.
export { BitReader, BitWriter, fromHex } from "./bits.js";
export { ByteReader, ByteWriter, zigzag, unzigzag } from "./bytes.js";
export { decodeKeyframe, decodeDelta, dequantize, decodeValue, encodeInput, quantizeValue } from "./template.js";
export type { AngleUnit, FieldSchema, FieldType, InputValues, TemplateSchema, Result, Value } from "./template.js";
export { PROTOCOL_VERSION, encodeClientMessage, decodeServerMessage, readExtensions } from "./messages.js";
export type { ClientMessage, Extension, MatchMessage, ServerMessage } from "./messages.js";
export { indexBits } from "./snapshot.js";
