// Opens a `ringdump record` file with the standard JavaScript MCAP reader (@mcap/core) and checks
// it as Foxglove and other readers would see it: footer, summary and its CRC, chunk indexes and
// seeking, statistics, the data section CRC, every chunk's CRC, channels and schemas, and the
// messages themselves decoded with @foxglove/cdr.
//
//   node check_recording.mjs FILE.mcap EXPECT_JSON
//
// EXPECT_JSON: {"count": N, "image": {"topic", "width", "height", "channels", "encoding"},
//               "raw": {"topic", "bytes"}, "tensor": {"topic", "shape", "dtype_code", "dtype_bits"}}
// (each part optional). Exits 1 with the reasons on stderr when anything does not match.
import { McapIndexedReader, McapStreamReader } from "@mcap/core";
import { loadDecompressHandlers } from "@mcap/support";
import { CdrReader } from "@foxglove/cdr";
import { readFile } from "node:fs/promises";
import crcModule from "@foxglove/crc"; // CommonJS
import { firstPatternMismatch } from "./pattern.mjs";

const [file, expectText] = process.argv.slice(2);
const expect = JSON.parse(expectText);
const failures = [];
function check(ok, what) {
  if (!ok) failures.push(what);
}

const data = new Uint8Array(await readFile(file));
const decompressHandlers = await loadDecompressHandlers();
const readable = {
  size: async () => BigInt(data.length),
  read: async (offset, size) => data.subarray(Number(offset), Number(offset + size)),
};

// ---- indexed reading: footer, summary (its CRC is checked by Initialize), indexes ----------
const reader = await McapIndexedReader.Initialize({ readable, decompressHandlers });
const topics = new Map();
for (const ch of reader.channelsById.values()) {
  const schema = reader.schemasById.get(ch.schemaId);
  topics.set(ch.topic, { channel: ch, schema });
  check(ch.messageEncoding === "cdr", `${ch.topic}: message encoding ${ch.messageEncoding}`);
  check(schema && schema.encoding === "ros2msg", `${ch.topic}: schema encoding ${schema?.encoding}`);
}
const stats = reader.statistics;
check(stats !== undefined, "no Statistics record in the summary");
check(reader.chunkIndexes.length > 0, "no chunk indexes");
check(stats && stats.chunkCount === reader.chunkIndexes.length,
      `statistics say ${stats?.chunkCount} chunks, ${reader.chunkIndexes.length} chunk indexes`);
if (expect.crc === false) { // ringdump record --no-crc: every CRC but the summary's is 0
  check(reader.dataSectionCrc === undefined, `--no-crc: data CRC ${reader.dataSectionCrc}`);
} else {
  check(reader.dataSectionCrc !== undefined, "DataEnd carries no data section CRC");
  const summaryStart = Number(reader.footer.summaryStart);
  const dataEndAt = summaryStart - 13; // DataEnd: opcode, length, crc
  const computed = crcModule.crc32(data.subarray(0, dataEndAt));
  check(computed === reader.dataSectionCrc,
        `data section CRC: file says ${reader.dataSectionCrc}, computed ${computed}`);
}

const parts = ["image", "raw", "tensor"].filter((p) => expect[p]);
for (const p of parts) {
  const t = topics.get(expect[p].topic);
  check(t !== undefined, `topic ${expect[p].topic} missing (have ${[...topics.keys()]})`);
  if (!t) continue;
  const want = p === "image" ? "sensor_msgs/msg/Image" : "ipcring/msg/Frame";
  check(t.schema.name === want, `${expect[p].topic}: schema ${t.schema.name}, want ${want}`);
  const n = stats?.channelMessageCounts.get(t.channel.id);
  check(n === BigInt(expect.count), `${expect[p].topic}: statistics count ${n}, want ${expect.count}`);
}
check(stats && stats.messageCount === BigInt(expect.count * parts.length),
      `statistics message count ${stats?.messageCount}, want ${expect.count * parts.length}`);

// All messages through the indexes (chunk CRCs validated), then a seek to the middle.
const all = [];
for await (const m of reader.readMessages({ validateCrcs: true })) all.push(m);
check(all.length === expect.count * parts.length, `readMessages gave ${all.length} messages`);
for (let i = 1; i < all.length; i++) {
  if (all[i].logTime < all[i - 1].logTime) {
    failures.push(`readMessages out of log-time order at ${i}`);
    break;
  }
}
if (all.length > 2) {
  const mid = all[Math.floor(all.length / 2)].logTime;
  let after = 0;
  for await (const m of reader.readMessages({ startTime: mid })) {
    check(m.logTime >= mid, `seek: message at ${m.logTime} before start ${mid}`);
    after++;
  }
  check(after > 0 && after < all.length, `seek to the middle gave ${after} of ${all.length}`);
}

// ---- stream reading: every record in file order, chunk CRCs validated -----------------------
const stream = new McapStreamReader({ decompressHandlers, validateCrcs: true, includeChunks: true });
stream.append(data);
let streamMessages = 0, dataEnd = false, footer = false;
const metadata = new Map();
let chunkCrcs = 0;
for (let r; (r = stream.nextRecord()); ) {
  if (r.type === "Message") streamMessages++;
  if (r.type === "Chunk" && r.uncompressedCrc !== 0) chunkCrcs++;
  if (r.type === "DataEnd") dataEnd = true;
  if (r.type === "Footer") footer = true;
  if (r.type === "Metadata") metadata.set(r.name, r.metadata);
}
check(stream.done(), "the stream reader did not reach the end magic");
check(expect.crc === false ? chunkCrcs === 0 : chunkCrcs === reader.chunkIndexes.length,
      `${chunkCrcs} of ${reader.chunkIndexes.length} chunks carry a CRC`);
check(dataEnd && footer, `DataEnd ${dataEnd}, Footer ${footer}`);
check(streamMessages === all.length, `stream reader: ${streamMessages} messages`);
const drops = metadata.get("ipcring.drops");
check(drops !== undefined, "no ipcring.drops metadata");
for (const p of parts) {
  check(drops && drops.has(expect[p].topic), `ipcring.drops has no entry for ${expect[p].topic}`);
}
check(metadata.has("ipcring.recording"), "no ipcring.recording metadata");
check(reader.metadataIndexes.length === metadata.size,
      `${reader.metadataIndexes.length} metadata indexes for ${metadata.size} metadata records`);

// The drops written for a channel are exactly the frames missing between its recorded sequence
// numbers (EXPECT_JSON "gaps": {"topic": TOPIC, "at_least": N, "at_most": M}, at_most optional).
if (expect.gaps) {
  const channel = topics.get(expect.gaps.topic)?.channel;
  const sequences = all.filter((m) => m.channelId === channel?.id).map((m) => m.sequence);
  let missing = 0;
  for (let i = 1; i < sequences.length; i++) missing += sequences[i] - sequences[i - 1] - 1;
  const written = Number(drops?.get(expect.gaps.topic));
  check(missing === written,
        `${expect.gaps.topic}: ${missing} frames missing between its sequence numbers, ` +
        `ipcring.drops says ${written}`);
  check(missing >= expect.gaps.at_least,
        `${expect.gaps.topic}: ${missing} frames missing, want at least ${expect.gaps.at_least}`);
  if (expect.gaps.at_most !== undefined) {
    check(missing <= expect.gaps.at_most,
          `${expect.gaps.topic}: ${missing} frames missing, want at most ${expect.gaps.at_most}`);
  }
  console.log(`check_recording: ${expect.gaps.topic}: ${missing} dropped frames, as written`);
}

// ---- the messages, decoded ----------------------------------------------------------------
function readFrame(bytes) {
  const r = new CdrReader(bytes);
  const f = {};
  f.sequence = r.uint64();
  f.timestamp_ns = r.uint64();
  f.capture_time_ns = r.uint64();
  f.byte_offset = r.uint64();
  f.has_tensor = r.uint8();
  f.dtype_code = r.uint8();
  f.dtype_bits = r.uint8();
  f.shape = [...r.int64Array()].map(Number);
  f.strides = [...r.int64Array()].map(Number);
  f.metadata = r.uint8Array();
  f.data = r.uint8Array();
  return f;
}
let imagesChecked = 0, rawChecked = 0, tensorsChecked = 0;
for (const m of all) {
  const topic = reader.channelsById.get(m.channelId).topic;
  if (expect.image && topic === expect.image.topic) {
    const e = expect.image;
    const r = new CdrReader(m.data);
    const sec = r.int32(), nanosec = r.uint32();
    const frameId = r.string();
    const height = r.uint32(), width = r.uint32();
    const encoding = r.string();
    const bigEndian = r.uint8();
    const step = r.uint32();
    const pixels = r.uint8Array();
    const stamp = BigInt(sec) * 1000000000n + BigInt(nanosec);
    const where = `${topic} message ${m.sequence}`;
    check(width === e.width && height === e.height,
          `${where}: ${width}x${height}, want ${e.width}x${e.height}`);
    check(encoding === e.encoding, `${where}: encoding ${encoding}, want ${e.encoding}`);
    check(step === e.width * e.channels, `${where}: step ${step}, want ${e.width * e.channels}`);
    check(bigEndian === 0, `${where}: is_bigendian ${bigEndian}`);
    check(frameId === topic, `${where}: frame_id ${frameId}`);
    check(stamp === m.publishTime, `${where}: stamp ${stamp}, publish time ${m.publishTime}`);
    check(pixels.length === height * step, `${where}: ${pixels.length} bytes of data`);
    const bad = firstPatternMismatch(pixels, m.sequence);
    check(bad === -1, `${where}: pixel word ${bad} is not the pattern of frame ${m.sequence}`);
    imagesChecked++;
  } else if (expect.raw && topic === expect.raw.topic) {
    const f = readFrame(m.data);
    const where = `${topic} message ${m.sequence}`;
    check(f.sequence === BigInt(m.sequence), `${where}: frame sequence ${f.sequence}`);
    check(f.has_tensor === 1 && f.dtype_code === 1 && f.dtype_bits === 8 &&
          f.shape.length === 1 && f.shape[0] === expect.raw.bytes,
          `${where}: tensor has=${f.has_tensor} (${f.dtype_code}, ${f.dtype_bits}) shape ${f.shape}`);
    check(f.data.length === expect.raw.bytes, `${where}: ${f.data.length} bytes`);
    check(f.capture_time_ns > 0n, `${where}: no capture time`);
    const bad = firstPatternMismatch(f.data, m.sequence);
    check(bad === -1, `${where}: word ${bad} is not the pattern`);
    rawChecked++;
  } else if (expect.tensor && topic === expect.tensor.topic) {
    const e = expect.tensor;
    const f = readFrame(m.data);
    const where = `${topic} message ${m.sequence}`;
    check(f.has_tensor === 1 && f.dtype_code === e.dtype_code && f.dtype_bits === e.dtype_bits,
          `${where}: dtype (${f.dtype_code}, ${f.dtype_bits})`);
    check(JSON.stringify(f.shape) === JSON.stringify(e.shape), `${where}: shape ${f.shape}`);
    const values = new Float32Array(f.data.buffer.slice(f.data.byteOffset,
                                                         f.data.byteOffset + f.data.byteLength));
    const n = e.shape.reduce((a, b) => a * b, 1);
    check(values.length === n, `${where}: ${values.length} values, want ${n}`);
    for (let k = 0; k < values.length; k++) {
      if (values[k] !== values[0] + k) {
        failures.push(`${where}: value ${k} is ${values[k]}, want ${values[0] + k}`);
        break;
      }
    }
    check(new TextDecoder().decode(f.metadata) === e.metadata,
          `${where}: metadata "${new TextDecoder().decode(f.metadata)}"`);
    tensorsChecked++;
  }
}
if (expect.image) check(imagesChecked === expect.count, `${imagesChecked} images checked`);
if (expect.raw) check(rawChecked === expect.count, `${rawChecked} raw frames checked`);
if (expect.tensor) check(tensorsChecked === expect.count, `${tensorsChecked} tensors checked`);

if (failures.length > 0) {
  console.error(`check_recording ${file}: ${failures.length} problem(s):`);
  for (const f of failures.slice(0, 30)) console.error(`  ${f}`);
  process.exit(1);
}
console.log(`check_recording ${file}: ok: ${all.length} messages on ${topics.size} channels, ` +
            `${reader.chunkIndexes.length} chunks (${imagesChecked} images, ${rawChecked} raw, ` +
            `${tensorsChecked} tensors decoded)`);
