// page.cpp — the page ringdump serve shows at `/` and its script at `/app.js`: it speaks the same
// Foxglove WebSocket protocol as every other client, subscribes to each advertised
// sensor_msgs/msg/Image channel and draws its latest frame, at its own size, on a canvas.
#include "ringdump/serve.hpp"

namespace ringdump::serve {

const char* const kPageHtml = R"html(<!doctype html>
<html>
<head>
<meta charset="utf-8">
<title>ringdump serve</title>
<style>
  body { font: 14px sans-serif; margin: 12px; background: #202020; color: #e0e0e0; }
  figure { display: inline-block; margin: 0 16px 16px 0; vertical-align: top; }
  canvas { display: block; image-rendering: pixelated; background: #000; }
  figcaption { margin-top: 4px; }
</style>
</head>
<body>
<div id="status">connecting</div>
<div id="views"></div>
<script src="/app.js"></script>
</body>
</html>
)html";

const char* const kPageScript = R"js("use strict";
// ringdump serve's page: a foxglove.websocket.v1 client that draws sensor_msgs/msg/Image frames.
const statusLine = document.getElementById("status");
const viewsDiv = document.getElementById("views");
const subscriptions = new Map();  // subscription id -> view
let nextSubscription = 1;
window.ringdump = { framesDrawn: 0, channels: 0 };

const ws = new WebSocket(`ws://${location.host}/`, ["foxglove.websocket.v1"]);
ws.binaryType = "arraybuffer";
ws.onopen = () => { statusLine.textContent = "connected"; };
ws.onclose = () => { statusLine.textContent = "disconnected"; };
ws.onmessage = (event) => {
  if (typeof event.data === "string") {
    const message = JSON.parse(event.data);
    if (message.op === "serverInfo") statusLine.textContent = `connected to ${message.name}`;
    if (message.op === "advertise") {
      for (const channel of message.channels) {
        if (channel.schemaName === "sensor_msgs/msg/Image" && channel.encoding === "cdr") {
          addView(channel);
        }
      }
    }
    return;
  }
  const view = new DataView(event.data);
  if (view.byteLength < 13 || view.getUint8(0) !== 1) return;  // 1: message data
  const target = subscriptions.get(view.getUint32(1, true));
  if (target) draw(target, new DataView(event.data, 13));
};

function addView(channel) {
  const figure = document.createElement("figure");
  const canvas = document.createElement("canvas");
  const caption = document.createElement("figcaption");
  caption.textContent = channel.topic;
  figure.append(canvas, caption);
  viewsDiv.append(figure);
  const id = nextSubscription++;
  subscriptions.set(id, { topic: channel.topic, canvas, caption, frames: 0 });
  canvas.dataset.topic = channel.topic;
  window.ringdump.channels++;
  ws.send(JSON.stringify({ op: "subscribe", subscriptions: [{ id, channelId: channel.id }] }));
}

// CDR (little-endian): a 4-byte header, then each field aligned to its size from the header's end.
function draw(target, data) {
  let at = 4;
  const align = (n) => { at += (n - ((at - 4) % n)) % n; };
  const u32 = () => { align(4); const v = data.getUint32(at, true); at += 4; return v; };
  const str = () => {
    const n = u32();
    const s = new TextDecoder().decode(new Uint8Array(data.buffer, data.byteOffset + at,
                                                      Math.max(0, n - 1)));
    at += n;
    return s;
  };
  u32(); u32(); str();  // header: stamp, frame_id
  const height = u32(), width = u32();
  const encoding = str();
  at += 1;  // is_bigendian
  const step = u32();
  const bytes = u32();
  const pixels = new Uint8Array(data.buffer, data.byteOffset + at, bytes);
  const channels = { mono8: 1, rgb8: 3, bgr8: 3, rgba8: 4, bgra8: 4 }[encoding];
  if (!channels || step * height > bytes) {
    target.caption.textContent = `${target.topic}: cannot draw ${encoding} ${width}x${height}`;
    return;
  }
  const image = new ImageData(width, height);
  const out = image.data;
  const bgr = encoding.startsWith("bgr");
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const i = y * step + x * channels, o = (y * width + x) * 4;
      if (channels === 1) {
        out[o] = out[o + 1] = out[o + 2] = pixels[i];
      } else {
        out[o] = pixels[i + (bgr ? 2 : 0)];
        out[o + 1] = pixels[i + 1];
        out[o + 2] = pixels[i + (bgr ? 0 : 2)];
      }
      out[o + 3] = 255;  // an alpha channel is not shown: the pixels are drawn opaque
    }
  }
  if (target.canvas.width !== width) target.canvas.width = width;
  if (target.canvas.height !== height) target.canvas.height = height;
  target.canvas.getContext("2d").putImageData(image, 0, 0);
  target.frames++;
  target.canvas.dataset.frames = String(target.frames);
  target.caption.textContent = `${target.topic}  ${width}x${height} ${encoding}  frame ${target.frames}`;
  window.ringdump.framesDrawn++;
}
)js";

}  // namespace ringdump::serve
