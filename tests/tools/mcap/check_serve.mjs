// Checks ringdump serve with Foxglove's own client (@foxglove/ws-protocol over `ws`).
//
//   node check_serve.mjs client URL TOPIC WIDTH HEIGHT FRAMES
//       subscribes to TOPIC (an rgb8 sensor_msgs/msg/Image channel), receives FRAMES frames and
//       checks each one's header and every pixel against the pattern of the frame it was made
//       from (recovered from its first word).
//   node check_serve.mjs slow URL TOPIC SECONDS [RINGDUMP]
//       subscribes, then stops reading its socket for SECONDS; the server must count frames it
//       dropped for this client (GET /stats) and go on serving the others. With RINGDUMP (the
//       binary), `ringdump show TOPIC --json` must then show this client's drops of TOPIC under
//       "served_by" (serve's status file, written once a second).
import wsProtocol from "@foxglove/ws-protocol"; // CommonJS
import { CdrReader } from "@foxglove/cdr";
import WebSocket from "ws";
import { execFileSync } from "node:child_process";
import { firstPatternMismatch, originSequence } from "./pattern.mjs";

const { FoxgloveClient } = wsProtocol;
const [mode, url, topic, ...rest] = process.argv.slice(2);
const wsUrl = url.replace(/^http/, "ws");
function fail(what) {
  console.error(`check_serve ${mode}: FAIL: ${what}`);
  process.exit(1);
}
setTimeout(() => fail("timed out"), 60000).unref();

function decodeImage(data) {
  const r = new CdrReader(data);
  r.int32();
  r.uint32();
  const frameId = r.string();
  const height = r.uint32(), width = r.uint32();
  const encoding = r.string();
  const bigEndian = r.uint8();
  const step = r.uint32();
  const pixels = r.uint8Array();
  return { frameId, height, width, encoding, bigEndian, step, pixels };
}

async function stats() {
  const response = await fetch(new URL("/stats", url));
  return await response.json();
}

if (mode === "client") {
  const [width, height, want] = rest.map(Number);
  const client = new FoxgloveClient({
    ws: new WebSocket(wsUrl, [FoxgloveClient.SUPPORTED_SUBPROTOCOL]),
  });
  let serverInfo = false, got = 0, sequences = new Set(), refused = "";
  client.on("serverInfo", () => {
    serverInfo = true;
    client.subscribe(9999); // not advertised: the server must say so
  });
  client.on("status", (s) => { if (s.level === 2) refused = s.message; });
  client.on("error", (e) => fail(`client error ${e}`));
  client.on("advertise", (channels) => {
    for (const ch of channels) {
      if (ch.topic !== topic) continue;
      if (ch.schemaName !== "sensor_msgs/msg/Image" || ch.encoding !== "cdr" ||
          ch.schemaEncoding !== "ros2msg" || !ch.schema.includes("uint8[] data")) {
        fail(`advertised ${JSON.stringify(ch).slice(0, 300)}`);
      }
      client.subscribe(ch.id);
    }
  });
  client.on("message", ({ data }) => {
    const img = decodeImage(data);
    if (img.width !== width || img.height !== height || img.encoding !== "rgb8" ||
        img.step !== width * 3 || img.frameId !== topic || img.pixels.length !== height * width * 3) {
      fail(`image ${img.width}x${img.height} ${img.encoding} step ${img.step} ` +
           `${img.pixels.length} bytes frame_id ${img.frameId}`);
    }
    const sequence = originSequence(img.pixels);
    const bad = firstPatternMismatch(img.pixels, sequence);
    if (bad !== -1) fail(`frame ${sequence}: word ${bad} is not the pattern`);
    sequences.add(sequence);
    if (++got === want) {
      if (!serverInfo) fail("no serverInfo before the frames");
      if (!refused.includes("channel 9999 is not advertised")) {
        fail(`a subscription to channel 9999 got no error status (got "${refused}")`);
      }
      console.log(`check_serve client: ok: ${got} frames (${sequences.size} distinct) of ` +
                  `${topic} ${width}x${height} rgb8, every pixel the pattern`);
      client.close();
      process.exit(0);
    }
  });
} else if (mode === "slow") {
  const pauseSeconds = Number(rest[0]);
  const ringdump = rest[1];
  const ws = new WebSocket(wsUrl, ["foxglove.websocket.v1"]);
  let paused = false;
  ws.on("message", async (data, isBinary) => {
    if (!isBinary) {
      const message = JSON.parse(data.toString());
      if (message.op === "advertise") {
        for (const ch of message.channels) {
          if (ch.topic === topic) {
            ws.send(JSON.stringify({ op: "subscribe", subscriptions: [{ id: 7, channelId: ch.id }] }));
          }
        }
      }
      return;
    }
    if (paused) return;
    paused = true;
    ws._socket.pause(); // stop reading: the kernel's buffers fill, then the server's queue
    const before = await stats();
    await new Promise((resolve) => setTimeout(resolve, pauseSeconds * 1000));
    const after = await stats();
    const dropped = after.clients.reduce((n, c) => n + c.dropped_frames, 0);
    const queued = after.clients.map((c) => c.queued_frames);
    console.log(`check_serve slow: dropped ${before.dropped_frames} -> ${after.dropped_frames}, ` +
                `queued ${JSON.stringify(queued)}, channels ${JSON.stringify(after.channels)}`);
    if (!(after.dropped_frames > before.dropped_frames) || dropped === 0) {
      fail(`no frames dropped for a client that stopped reading: ${JSON.stringify(after)}`);
    }
    if (queued.some((q) => q > 4)) fail(`a client queue beyond its bound: ${queued}`);
    if (ringdump) {
      // Still paused: the status file, at most a second old, shows this client's drops.
      const ids = new Set(after.clients.filter((c) => c.dropped_frames > 0).map((c) => c.id));
      let shown = null;
      for (let i = 0; i < 30 && !shown; i++) {
        const show = JSON.parse(execFileSync(ringdump, ["show", topic, "--json"]).toString());
        if (show.serve_status_problems.length !== 0) {
          fail(`show: serve status problems: ${JSON.stringify(show.serve_status_problems)}`);
        }
        const served = show.served_by.find((s) => s.clients.some((c) => ids.has(c.id) && c.dropped_frames > 0));
        if (served) shown = served;
        else await new Promise((resolve) => setTimeout(resolve, 100));
      }
      if (!shown) fail(`ringdump show ${topic} --json shows no drops of clients ${[...ids]}`);
      if (!(shown.dropped_frames > 0)) fail(`show: channel total dropped_frames ${shown.dropped_frames}`);
      console.log(`check_serve slow: ringdump show: ${JSON.stringify(shown)}`);
    }
    ws.terminate();
    process.exit(0);
  });
} else {
  fail(`unknown mode ${mode}`);
}
