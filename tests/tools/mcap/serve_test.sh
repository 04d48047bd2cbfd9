#!/usr/bin/env bash
# ringdump serve against Foxglove's client and a browser (CTest: foxglove_serve).
#
#   serve_test.sh TOOLS_DIR WORK_DIR
#
# 1. @foxglove/ws-protocol's client subscribes to an image channel and checks every pixel of the
#    frames it gets (check_serve.mjs client).
# 2. A client that stops reading makes the server drop and count frames (GET /stats, and
#    `ringdump show --json` from serve's status file) while the producer's loans never fail
#    (check_serve.mjs slow, ringpub's loan_failures=0).
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

rm -rf "$work"/chromium-*  # profiles an earlier run's Chromium was still writing as it exited
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

tag=servetest$$
cam=${tag}_cam raw=${tag}_raw big=${tag}_big
"$tools/ringpub" "$cam" --image 64x48x3 --rate 100 --readers 1 --duration 120 >/dev/null &
pids+=($!)
# The one reader entry of $cam is taken: serve reads as an observer, which needs none.
"$tools/ringsub" "$cam" --quiet --duration 120 --wait 10 >/dev/null &
pids+=($!)
for _ in $(seq 100); do
  "$tools/ringdump" show "$cam" 2>/dev/null | grep -q "readers  1 in use of 1" && break
  sleep 0.1
done
"$tools/ringdump" show "$cam" | grep -q "readers  1 in use of 1" || fail "$cam: its reader entry is not taken"
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
node "$node_dir/check_serve.mjs" slow "$url" "$big" 3 "$tools/ringdump"
node "$node_dir/check_page.mjs" "$url" "$cam" 64 48 "$work" "$chromium"

# The slow client is gone; show still counts what was dropped for it (every client since the start).
"$tools/ringdump" show "$big" > "$work/show_big.out"
grep "served by" "$work/show_big.out"
grep -Eq "^served by ringdump serve pid $serve_pid at $url .*dropped for slow clients [1-9]" \
  "$work/show_big.out" || fail "show $big: $(cat "$work/show_big.out")"
status_file=$(ls "${IPCRING_DIR:-/dev/shm/ipcring-$(id -u)}/ringdump-serve.$serve_pid.json")
[[ $(stat -c %a "$status_file") == 600 ]] || fail "$status_file: mode $(stat -c %a "$status_file")"

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
[[ ! -e $status_file ]] || fail "$status_file left behind by a serve that ended"

# Status files are read, never trusted: a malformed one is reported by show, a stale one (its
# process gone) is not listed and gc removes it. In a directory of this test's own.
dir=$work/status_dir
rm -rf "$dir" && mkdir -m 700 "$dir"
export IPCRING_DIR=$dir
solo=${tag}_solo
"$tools/ringpub" "$solo" --frame-bytes 64 --rate 10 --duration 60 >/dev/null &
pids+=($!)
for _ in $(seq 100); do
  "$tools/ringdump" show "$solo" >/dev/null 2>&1 && break
  sleep 0.1
done
printf '{"format": "ringdump.serve.status/1", "pid": "x"}' > "$dir/ringdump-serve.$$.json"
# A pid that is gone: a shell that printed its pid and ended. (Not "sleep & kill": a SIGTERM that
# reaches the forked child before it execs runs this script's EXIT trap there, killing every
# producer of the test.)
sleeper=$(sh -c 'echo $$')
printf '{"format":"ringdump.serve.status/1","pid":%d,"start_time":1,"updated_unix_ns":1,"address":"http://127.0.0.1:1/","channels":[{"name":"%s","frames":1,"observer_dropped":0,"sent_frames":1,"dropped_frames":5}],"clients":[]}\n' \
  $sleeper "$solo" > "$dir/ringdump-serve.$sleeper.json"
head -c 2000000 /dev/zero > "$dir/ringdump-serve.1.json"
"$tools/ringdump" show "$solo" > "$work/show_solo.out" || fail "show with bad status files exited $?"
cat "$work/show_solo.out"
grep -q "serve status: $dir/ringdump-serve.$$.json: \"pid\" is not an unsigned integer" \
  "$work/show_solo.out" || fail "show does not report the malformed status file"
grep -q "serve status: $dir/ringdump-serve.1.json: 2000000 bytes, more than" "$work/show_solo.out" ||
  fail "show does not report the oversized status file"
grep -q "ringdump-serve.$sleeper.json: stale, pid $sleeper is gone (ringdump gc removes it)" \
  "$work/show_solo.out" || fail "show does not call the dead serve's file stale"
grep -q "^served by" "$work/show_solo.out" && fail "show lists a dead serve as serving"
"$tools/ringdump" show "$solo" --json > "$work/show_solo.json" || fail "show --json with bad status files exited $?"
node -e '
  const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  if (j.served_by.length !== 0 || j.serve_status_problems.length !== 3) {
    console.error("show --json: " + JSON.stringify({served_by: j.served_by, problems: j.serve_status_problems}));
    process.exit(1);
  }' "$work/show_solo.json" || fail "show --json of bad status files"
"$tools/ringdump" gc > "$work/gc.out" 2>&1 || fail "gc exited $?: $(cat "$work/gc.out")"
cat "$work/gc.out"
[[ ! -e $dir/ringdump-serve.$sleeper.json ]] || fail "gc left the stale status file"
[[ -e $dir/ringdump-serve.$$.json ]] || fail "gc removed the status file of a live pid ($$)"
grep -q "removed $dir/ringdump-serve.$sleeper.json (stale: pid $sleeper is gone)" "$work/gc.out" ||
  fail "gc does not say it removed the stale status file"
unset IPCRING_DIR
echo "serve_test: ok"
