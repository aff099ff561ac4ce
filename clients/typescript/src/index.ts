export { BitReader, fromHex } from "./bits.js";
export { ByteReader, ByteWriter, zigzag, unzigzag } from "./bytes.js";
export { decodeKeyframe, decodeDelta, dequantize } from "./template.js";
export type { FieldSchema, FieldType, TemplateSchema, Result } from "./template.js";
export { PROTOCOL_VERSION, encodeClientMessage, decodeServerMessage } from "./messages.js";
export type { ClientMessage, ServerMessage } from "./messages.js";
export { WorldView, indexBits } from "./snapshot.js";
export type { Entry } from "./snapshot.js";
