export { BitReader, fromHex } from "./bits.js";
export { decodeKeyframe, decodeDelta, dequantize } from "./template.js";
export type { FieldSchema, FieldType, TemplateSchema, Result } from "./template.js";
