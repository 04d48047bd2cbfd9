#!/usr/bin/env bash
# A recorder that is stopped (SIGSTOP) loses frames: it counts them exactly (the frames missing
# between the recorded sequence numbers), writes them into the file (ipcring.drops), prints them,
# and the producer's loans never fail meanwhile (CTest: mcap_drops).
#
#   drops_test.sh TOOLS_DIR WORK_DIR
set -euo pipefail
tools=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
fail() { echo "drops_test: FAIL: $*" >&2; exit 1; }
# shellcheck source=node_setup.sh
source "$here/node_setup.sh"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

fast=dropstest$$_fast
"$tools/ringpub" "$fast" --frame-bytes 4096 --rate 500 --duration 3 > "$work/fast_pub.out" &
fast_pub=$!
pids+=($fast_pub)
"$tools/ringdump" record "$fast" -o "$work/stopped.mcap" --duration 2 --wait 10 \
  > "$work/stopped.out" 2>/dev/null &
stopped=$!
pids+=($stopped)
sleep 0.5
kill -STOP $stopped
sleep 0.5
kill -CONT $stopped
wait $stopped || fail "ringdump record (stopped) exited $?"
wait $fast_pub
cat "$work/stopped.out" "$work/fast_pub.out"
grep -q "loan_failures=0 " "$work/fast_pub.out" || fail "the producer's loans failed"
printed=$(sed -n 's/.* drops=\([0-9]*\) .*/\1/p' "$work/stopped.out")
[[ ${printed:-0} -gt 0 ]] || fail "a recorder stopped for 0.5 s at 500 frames/s dropped nothing"
"$tools/ringdump" info "$work/stopped.mcap" | grep -q "drops: .*$fast=$printed\$" ||
  fail "info does not show the $printed drops printed"
count=$(sed -n 's/.*: frames=\([0-9]*\) .*/\1/p' "$work/stopped.out")
node "$node_dir/check_recording.mjs" "$work/stopped.mcap" \
  "{\"count\": $count, \"raw\": {\"topic\": \"$fast\", \"bytes\": 4096}, \"gaps\": {\"topic\": \"$fast\", \"at_least\": 1}}"
echo "drops_test: ok"
