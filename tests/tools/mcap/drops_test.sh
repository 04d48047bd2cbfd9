#!/usr/bin/env bash
# ringdump record reads as an observer (CTest: mcap_drops):
# 1. A recorder that is stopped (SIGSTOP) loses frames: it counts them exactly (the frames missing
#    between the recorded sequence numbers), writes them into the file (ipcring.drops), prints
#    them, and the producer's loans never fail meanwhile; the same with --reader.
# 2. A channel whose reader entries are all taken (held by this test's readers) is recorded
#    completely: every frame, no sequence missing, no reader entry taken.
# 3. A producer that laps the recorder's copies (large frames, three slots, as fast as it can):
#    copies it overwrote are counted among the drops, which stay exactly the missing sequences
#    (how many there are depends on the machine's speed; part 1 makes drops for certain).
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

# ---- 1. stopped, as an observer and as a reader ---------------------------------------------
for mode in observer reader; do
  fast=dropstest$$_${mode}
  flags=()
  [[ $mode == reader ]] && flags=(--reader)
  "$tools/ringpub" "$fast" --frame-bytes 4096 --rate 500 --duration 3 > "$work/fast_pub.out" &
  fast_pub=$!
  pids+=($fast_pub)
  "$tools/ringdump" record "$fast" -o "$work/stopped.mcap" --duration 2 --wait 10 "${flags[@]}" \
    > "$work/stopped.out" 2>/dev/null &
  stopped=$!
  pids+=($stopped)
  sleep 0.5
  kill -STOP $stopped
  sleep 0.5
  kill -CONT $stopped
  wait $stopped || fail "ringdump record (stopped, $mode) exited $?"
  wait $fast_pub
  cat "$work/stopped.out" "$work/fast_pub.out"
  grep -q "loan_failures=0 " "$work/fast_pub.out" || fail "$mode: the producer's loans failed"
  grep -q " mode=$mode" "$work/stopped.out" || fail "record did not read as $mode"
  printed=$(sed -n 's/.* drops=\([0-9]*\) .*/\1/p' "$work/stopped.out")
  [[ ${printed:-0} -gt 0 ]] || fail "$mode: a recorder stopped for 0.5 s at 500 frames/s dropped nothing"
  "$tools/ringdump" info "$work/stopped.mcap" | grep -q "drops: .*$fast=$printed\$" ||
    fail "$mode: info does not show the $printed drops printed"
  count=$(sed -n 's/.*: frames=\([0-9]*\) .*/\1/p' "$work/stopped.out")
  node "$node_dir/check_recording.mjs" "$work/stopped.mcap" \
    "{\"count\": $count, \"raw\": {\"topic\": \"$fast\", \"bytes\": 4096}, \"gaps\": {\"topic\": \"$fast\", \"at_least\": 1}}"
done

# ---- 2. every reader entry taken -------------------------------------------------------------
full=dropstest$$_full
"$tools/ringpub" "$full" --frame-bytes 4096 --readers 2 --rate 200 --duration 30 > /dev/null &
pids+=($!)
"$tools/ringsub" "$full" --quiet --duration 30 --wait 10 > /dev/null &
pids+=($!)
"$tools/ringsub" "$full" --quiet --duration 30 --wait 10 > /dev/null &
pids+=($!)
for _ in $(seq 100); do
  [[ $("$tools/ringdump" show "$full" --json 2>/dev/null | grep -c '"alive": true') -ge 3 ]] && break
  sleep 0.1
done
if "$tools/ringsub" "$full" --count 1 --wait 0 > "$work/third.out" 2>&1; then
  fail "a third reader attached to a channel of two reader entries: $(cat "$work/third.out")"
fi
grep -q too_many_readers "$work/third.out" || fail "third reader: $(cat "$work/third.out")"
"$tools/ringdump" record "$full" -o "$work/full.mcap" --count 200 > "$work/full.out" ||
  fail "ringdump record of a channel with every reader entry taken exited $?: $(cat "$work/full.out")"
cat "$work/full.out"
grep -q "ringdump record $full: frames=200 drops=0 .* mode=observer" "$work/full.out" ||
  fail "full channel: $(cat "$work/full.out")"
node "$node_dir/check_recording.mjs" "$work/full.mcap" \
  "{\"count\": 200, \"raw\": {\"topic\": \"$full\", \"bytes\": 4096}, \"gaps\": {\"topic\": \"$full\", \"at_least\": 0, \"at_most\": 0}}"

# ---- 3. copies overwritten while taken -------------------------------------------------------
lap=dropstest$$_lap
"$tools/ringpub" "$lap" --frame-bytes 1048576 --slots 3 --readers 1 --rate 0 --duration 20 \
  > "$work/lap_pub.out" &
lap_pub=$!
pids+=($lap_pub)
"$tools/ringdump" record "$lap" -o "$work/lap.mcap" --count 50 --compression none \
  --wait 10 > "$work/lap.out" || fail "ringdump record (lapped) exited $?"
kill -INT $lap_pub
wait $lap_pub || true
cat "$work/lap.out"
lap_drops=$(sed -n 's/.* drops=\([0-9]*\) .*/\1/p' "$work/lap.out")
lap_copies=$(sed -n 's/.* copies_dropped=\([0-9]*\).*/\1/p' "$work/lap.out")
[[ -n $lap_drops && -n $lap_copies ]] || fail "lapped: no drops or copies_dropped: $(cat "$work/lap.out")"
[[ $lap_copies -le $lap_drops ]] || fail "lapped: $lap_copies copies dropped but only $lap_drops drops"
lap_count=$(sed -n 's/.*: frames=\([0-9]*\) .*/\1/p' "$work/lap.out")
node "$node_dir/check_recording.mjs" "$work/lap.mcap" \
  "{\"count\": $lap_count, \"raw\": {\"topic\": \"$lap\", \"bytes\": 1048576}, \"gaps\": {\"topic\": \"$lap\", \"at_least\": 1}}"
echo "drops_test: lapped: drops=$lap_drops, of which copies overwritten while taken: $lap_copies"
echo "drops_test: ok"
