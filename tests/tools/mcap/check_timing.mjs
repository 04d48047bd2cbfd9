// Compares the message timing of two MCAP files channel by channel (a recording and a recording
// of its replay): for each topic pair, the ratio of the spans and the median ratio of the
// corresponding inter-message intervals must lie within 1 +- TOLERANCE.
//
//   node check_timing.mjs ORIGINAL.mcap REPLAY.mcap TOLERANCE OLD=NEW...
import { McapIndexedReader } from "@mcap/core";
import { loadDecompressHandlers } from "@mcap/support";
import { readFile } from "node:fs/promises";

const [a, b, tol, ...pairs] = process.argv.slice(2);
const tolerance = Number(tol);
const decompressHandlers = await loadDecompressHandlers();

async function times(file) {
  const data = new Uint8Array(await readFile(file));
  const readable = {
    size: async () => BigInt(data.length),
    read: async (offset, size) => data.subarray(Number(offset), Number(offset + size)),
  };
  const reader = await McapIndexedReader.Initialize({ readable, decompressHandlers });
  const byTopic = new Map();
  for await (const m of reader.readMessages()) {
    const topic = reader.channelsById.get(m.channelId).topic;
    if (!byTopic.has(topic)) byTopic.set(topic, []);
    byTopic.get(topic).push(Number(m.logTime));
  }
  return byTopic;
}

const original = await times(a);
const replay = await times(b);
const failures = [];
for (const pair of pairs) {
  const [from, to] = pair.split("=");
  const x = original.get(from), y = replay.get(to);
  if (!x || !y || x.length < 3 || x.length !== y.length) {
    failures.push(`${from} -> ${to}: ${x?.length} and ${y?.length} messages`);
    continue;
  }
  const span = (y[y.length - 1] - y[0]) / (x[x.length - 1] - x[0]);
  const ratios = [];
  for (let i = 1; i < x.length; i++) ratios.push((y[i] - y[i - 1]) / (x[i] - x[i - 1]));
  ratios.sort((p, q) => p - q);
  const median = ratios[Math.floor(ratios.length / 2)];
  const ok = Math.abs(span - 1) <= tolerance && Math.abs(median - 1) <= tolerance;
  console.log(`${from} -> ${to}: ${x.length} messages, span ratio ${span.toFixed(4)}, ` +
              `median interval ratio ${median.toFixed(4)} ${ok ? "ok" : "OUT OF TOLERANCE"}`);
  if (!ok) failures.push(`${from} -> ${to}: span ratio ${span}, median interval ratio ${median}`);
}
if (failures.length > 0) {
  console.error(`check_timing: ${failures.join("; ")}`);
  process.exit(1);
}
