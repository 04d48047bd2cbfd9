#!/usr/bin/env bash
# ringdump record, info and play against the standard MCAP readers (CTest: mcap_record).
#
#   record_test.sh TOOLS_DIR PYTHON_DIR WORK_DIR
#
# 1. Records two ringpub channels (an rgb8 image, plain bytes) and a Python producer's torch
#    tensors into one MCAP file; check_recording.mjs opens it with @mcap/core and decodes it with
#    @foxglove/cdr (channels, schemas, counts, CRCs, summary, seeking, pixels).
# 2. ringdump info on it.
# 3. ringdump play of it into new channels, read by ringsub (every frame's pattern), by the
#    Python checker (shape, dtype, values) and by a second ringdump record (--reader, so that
#    play's --wait-readers counts it), whose timing check_timing.mjs compares with the first
#    recording (within 10%, as ratios).
# Needs node and npm (scripts/install-deps.sh installs them); their absence is a failure.
set -euo pipefail
tools=$1 python_dir=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
fail() { echo "record_test: FAIL: $*" >&2; exit 1; }

# shellcheck source=node_setup.sh
source "$here/node_setup.sh"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

tag=mcaptest$$
cam=${tag}_cam raw=${tag}_raw tensor=${tag}_torch
count=100
export PYTHONPATH=$python_dir
python=/usr/bin/python3

"$tools/ringpub" "$cam" --image 64x48x3 --rate 200 --duration 60 >/dev/null &
pids+=($!)
"$tools/ringpub" "$raw" --frame-bytes 4096 --rate 100 --duration 60 >/dev/null &
pids+=($!)
"$python" "$here/torch_frames.py" produce "$tensor" 60 &
pids+=($!)

file=$work/recording.mcap
rm -f "$file"
"$tools/ringdump" record "$cam" "$raw" "$tensor" -o "$file" --count $count --wait 20 \
  > "$work/record.out" || fail "ringdump record exited $?: $(cat "$work/record.out")"
cat "$work/record.out"
grep -q "ringdump record $cam: frames=$count " "$work/record.out" || fail "record: $cam count"

expect=$(cat <<EOF
{"count": $count,
 "image": {"topic": "$cam", "width": 64, "height": 48, "channels": 3, "encoding": "rgb8"},
 "raw": {"topic": "$raw", "bytes": 4096},
 "tensor": {"topic": "$tensor", "shape": [2, 3, 4], "dtype_code": 2, "dtype_bits": 32,
            "metadata": "torch"}}
EOF
)
node "$node_dir/check_recording.mjs" "$file" "$expect"

# The other compressions: the same readers open them.
# The other compressions, and --no-crc: the same readers open them.
for variant in lz4 none "none --no-crc"; do
  f=$work/recording-${variant// /}.mcap
  # shellcheck disable=SC2086  # the variant's words are options
  "$tools/ringdump" record "$cam" "$raw" -o "$f" --count 20 --compression $variant >/dev/null
  crc=true
  [[ $variant == *--no-crc* ]] && crc=false
  node "$node_dir/check_recording.mjs" "$f" \
    "{\"count\": 20, \"crc\": $crc, \"image\": {\"topic\": \"$cam\", \"width\": 64, \"height\": 48, \"channels\": 3, \"encoding\": \"rgb8\"}, \"raw\": {\"topic\": \"$raw\", \"bytes\": 4096}}"
done

"$tools/ringdump" info "$file" > "$work/info.out" || fail "ringdump info exited $?"
cat "$work/info.out"
grep -Eq "^  $cam +sensor_msgs/msg/Image +$count msgs" "$work/info.out" || fail "info: $cam line"
grep -Eq "^  $tensor +ipcring/msg/Frame +$count msgs" "$work/info.out" || fail "info: $tensor line"
grep -q "drops: .*$cam=" "$work/info.out" || fail "info: no drops line"
"$tools/ringdump" info --json "$file" | grep -q "\"messages\": $((3 * count))" ||
  fail "info --json: message count"

# A file cut short is reported, not crashed on.
head -c $(( $(stat -c %s "$file") / 2 )) "$file" > "$work/cut.mcap"
if "$tools/ringdump" info "$work/cut.mcap" > "$work/cut.out" 2>&1; then
  fail "info of a truncated file succeeded: $(cat "$work/cut.out")"
fi
grep -q "cut.mcap" "$work/cut.out" || fail "info of a truncated file: $(cat "$work/cut.out")"

# A flipped byte inside a chunk is found by its CRC.
cp "$work/recording-none.mcap" "$work/flipped.mcap"
"$python" -c "
import sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
b[len(b) // 3] ^= 0xff
open(p, 'wb').write(b)" "$work/flipped.mcap"
if "$tools/ringdump" info "$work/flipped.mcap" > "$work/flipped.out" 2>&1; then
  fail "info of a file with a flipped byte succeeded: $(cat "$work/flipped.out")"
fi
grep -q "CRC" "$work/flipped.out" || fail "info of a flipped byte: $(cat "$work/flipped.out")"

# ---- play into new channels --------------------------------------------------------------------
cleanup
pids=()
cam2=${cam}_play raw2=${raw}_play tensor2=${tensor}_play
"$tools/ringdump" play "$file" --remap "$cam=$cam2" --remap "$raw=$raw2" \
  --remap "$tensor=$tensor2" --wait-readers 2 --wait-readers-timeout 30 > "$work/play.out" &
play=$!
"$tools/ringsub" "$cam2" --policy sequential --origin-sequence --count $count --wait 20 \
  > "$work/sub_cam.out" &
sub_cam=$!
"$tools/ringsub" "$raw2" --policy sequential --origin-sequence --count $count --wait 20 \
  > "$work/sub_raw.out" &
sub_raw=$!
"$python" "$here/torch_frames.py" check "$tensor2" $count > "$work/torch_check.out" &
torch_check=$!
replay=$work/replay.mcap
rm -f "$replay"
# --reader: play's --wait-readers counts reader entries, and an observer takes none.
"$tools/ringdump" record "$cam2" "$raw2" "$tensor2" -o "$replay" --count $count --wait 20 --reader \
  > "$work/record2.out" || fail "ringdump record of the replay exited $?"
wait $play || fail "ringdump play exited $?: $(cat "$work/play.out")"
wait $sub_cam || fail "ringsub $cam2: $(cat "$work/sub_cam.out")"
wait $sub_raw || fail "ringsub $raw2: $(cat "$work/sub_raw.out")"
wait $torch_check || fail "torch check: $(cat "$work/torch_check.out")"
cat "$work/play.out" "$work/sub_cam.out" "$work/sub_raw.out" "$work/torch_check.out"
for out in sub_cam sub_raw; do
  grep -q "frames=$count overruns=0 corrupt=0" "$work/$out.out" || fail "$out: $(cat "$work/$out.out")"
  grep -q "untyped=0" "$work/$out.out" || fail "$out: frames without a tensor"
done
grep -q "checked=$count bad=0" "$work/torch_check.out" || fail "torch check"
node "$node_dir/check_timing.mjs" "$file" "$replay" 0.10 "$cam=$cam2" "$raw=$raw2" \
  "$tensor=$tensor2"
echo "record_test: ok"
