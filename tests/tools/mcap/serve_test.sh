#!/usr/bin/env bash
# ringdump serve against Foxglove's client and a browser (CTest: foxglove_serve).
#
#   serve_test.sh TOOLS_DIR WORK_DIR
#
# 1. @foxglove/ws-protocol's client subscribes to an image channel and checks every pixel of the
#    frames it gets (check_serve.mjs client).
# 2. A client that stops reading makes the server drop and count frames (GET /stats) while the
#    producer's loans never fail (check_serve.mjs slow, ringpub's loan_failures=0).
# 3. Headless Chromium opens the built-in page; a screenshot of its canvas is the test pattern,
#    pixel for pixel (check_page.mjs).
# Needs node, npm and chromium (scripts/install-deps.sh installs them); their absence is a failure.
set -euo pipefail
tools=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
fail() { echo "serve_test: FAIL: $*" >&2; exit 1; }
# shellcheck source=node_setup.sh
source "$here/node_setup.sh"
chromium=$(command -v chromium || command -v chromium-browser || true)
[[ -n $chromium ]] || fail "chromium not found (scripts/install-deps.sh installs chromium)"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

tag=servetest$$
cam=${tag}_cam raw=${tag}_raw big=${tag}_big
"$tools/ringpub" "$cam" --image 64x48x3 --rate 100 --duration 120 >/dev/null &
pids+=($!)
"$tools/ringpub" "$raw" --frame-bytes 4096 --rate 50 --duration 120 >/dev/null &
pids+=($!)
"$tools/ringpub" "$big" --image 640x480x3 --rate 200 --duration 120 > "$work/big.out" &
big_pid=$!
pids+=($big_pid)

"$tools/ringdump" serve "$cam" "$raw" "$big" --port 0 --wait 20 > "$work/serve.out" 2>"$work/serve.err" &
serve_pid=$!
pids+=($serve_pid)
url=""
for _ in $(seq 200); do
  url=$(sed -n 's/^ringdump serve: listening on \(http:[^ ]*\) .*/\1/p' "$work/serve.out")
  [[ -n $url ]] && break
  kill -0 $serve_pid 2>/dev/null || fail "ringdump serve exited: $(cat "$work/serve.err")"
  sleep 0.1
done
[[ -n $url ]] || fail "ringdump serve did not say where it listens"
[[ $url == http://127.0.0.1:* ]] || fail "the default address is not loopback: $url"
echo "serve_test: $url"
curl_page=$(node -e "fetch('$url').then(r => r.text()).then(t => console.log(t))")
[[ $curl_page == *'<script src="/app.js">'* ]] || fail "GET / is not the page: $curl_page"

node "$node_dir/check_serve.mjs" client "$url" "$cam" 64 48 20
node "$node_dir/check_serve.mjs" slow "$url" "$big" 3
node "$node_dir/check_page.mjs" "$url" "$cam" 64 48 "$work" "$chromium"

# --max-rate: a second server, at most 10 frames/s per channel.
"$tools/ringdump" serve "$cam" --port 0 --max-rate 10 > "$work/serve2.out" 2>"$work/serve2.err" &
serve2=$!
pids+=($serve2)
url2=""
for _ in $(seq 200); do
  url2=$(sed -n 's/^ringdump serve: listening on \(http:[^ ]*\) .*/\1/p' "$work/serve2.out")
  [[ -n $url2 ]] && break
  kill -0 $serve2 2>/dev/null || fail "ringdump serve --max-rate exited: $(cat "$work/serve2.err")"
  sleep 0.1
done
[[ -n $url2 ]] || fail "ringdump serve --max-rate did not say where it listens"
node "$node_dir/check_serve.mjs" client "$url2" "$cam" 64 48 5
limited=$(node -e "fetch(new URL('/stats', '$url2')).then(r => r.json()).then(s =>
  console.log(s.channels.find(c => c.name === '$cam').rate_limited))")
echo "serve_test: --max-rate 10: $limited frames of $cam not sent"
[[ $limited -gt 0 ]] || fail "--max-rate 10 limited no frame of a 100 Hz channel"
kill -TERM $serve2

kill -INT $big_pid
wait $big_pid || true
cat "$work/big.out"
grep -q "loan_failures=0 " "$work/big.out" || fail "the producer's loans failed: $(cat "$work/big.out")"
kill -TERM $serve_pid
wait $serve_pid || fail "ringdump serve exited $? on SIGTERM"
tail -1 "$work/serve.out"
grep -q '"dropped_frames":[1-9]' "$work/serve.out" || fail "serve's summary counts no drops"
echo "serve_test: ok"
