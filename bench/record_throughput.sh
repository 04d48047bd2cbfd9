#!/usr/bin/env bash
# How fast ringdump record keeps up with 1920x1080x3 frames, beside dd on the same filesystems
# (docs/operations.md, "record: throughput"). Not a test: it measures, it asserts nothing.
#
#   bench/record_throughput.sh TOOLS_DIR DIR... [-- RATE...]
#
# For each DIR: dd's sequential write rate of as many 6,220,800-byte blocks as the largest
# recording holds (with conv=fdatasync, and without: the page cache), then ringpub at each RATE
# (frames/s, default 30 45 60 75 90 105 120 150 180) for SECONDS (env, default 4) into ringdump
# record --compression none --sync; a rate counts as kept up when the recorder dropped nothing
# and recorded at least 95% of RATE x SECONDS frames, the producer's own rate reached RATE
# within 5%, and its loans never failed. Prints one line per run and a summary per DIR.
# RECORD_FLAGS (env): more options for ringdump record, e.g. --no-crc.
set -euo pipefail
tools=$1
shift
dirs=()
while [[ $# -gt 0 && $1 != -- ]]; do dirs+=("$1"); shift; done
[[ ${1:-} == -- ]] && shift
rates=("$@")
[[ ${#rates[@]} -gt 0 ]] || rates=(30 45 60 75 90 105 120 150 180)
seconds=${SECONDS_PER_RUN:-4}
frame=$((1920 * 1080 * 3))
name=recbench$$

echo "# ringdump record ${RECORD_FLAGS:-}: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs," \
     "load $(cut -d' ' -f1-3 /proc/loadavg), $(uname -r)"
for dir in "${dirs[@]}"; do
  fs=$(df -T "$dir" | awk 'NR == 2 {print $2}')
  max_rate=${rates[-1]}
  blocks=$(( max_rate * seconds ))
  dd_sync=$(dd if=/dev/zero of="$dir/$name.dd" bs=$frame count=$blocks conv=fdatasync 2>&1 |
            awk '/copied/ {print $(NF-1), $NF}')
  dd_cache=$(dd if=/dev/zero of="$dir/$name.dd" bs=$frame count=$blocks 2>&1 |
             awk '/copied/ {print $(NF-1), $NF}')
  rm -f "$dir/$name.dd"
  echo "$dir ($fs): dd of $blocks frames: $dd_sync with fdatasync, $dd_cache without"
  best=0 best_cpu=""
  for rate in "${rates[@]}"; do
    "$tools/ringpub" "$name" --image 1920x1080x3 --slots 16 --rate "$rate" \
      --duration $((seconds + 2)) > "/tmp/$name.pub" &
    pub=$!
    sleep 0.5
    out=$("$tools/ringdump" record "$name" -o "$dir/$name.mcap" --compression none --sync \
            --duration "$seconds" ${RECORD_FLAGS:-} 2>/dev/null)
    wait $pub
    rm -f "$dir/$name.mcap"
    frames=$(sed -n 's/.*: frames=\([0-9]*\) drops=.*/\1/p' <<< "$out")
    drops=$(sed -n 's/.*: frames=[0-9]* drops=\([0-9]*\).*/\1/p' <<< "$out")
    cpu=$(sed -n 's/.*cpu_per_message_us=\([0-9]*\).*/\1/p' <<< "$out")
    behind=$(sed -n 's/.*writer_behind_ms=\([0-9]*\).*/\1/p' <<< "$out")
    pub_rate=$(sed -n 's/.*rate_hz=\([0-9]*\).*/\1/p' "/tmp/$name.pub")
    failures=$(sed -n 's/.*loan_failures=\([0-9]*\).*/\1/p' "/tmp/$name.pub")
    kept="no"
    if [[ $drops -eq 0 && $failures -eq 0 && $frames -ge $(( rate * seconds * 95 / 100 )) &&
          $pub_rate -ge $(( rate * 95 / 100 )) ]]; then
      kept="yes"
      best=$rate best_cpu=$cpu
    fi
    echo "  rate $rate: producer ${pub_rate} Hz (loan failures $failures), recorded $frames" \
         "frames, drops $drops (writer behind ${behind} ms), recorder CPU ${cpu} us/frame," \
         "kept up: $kept"
  done
  echo "  => $dir ($fs): largest rate kept up $best frames/s" \
       "($(( best * frame / 1000000 )) MB/s), recorder CPU ${best_cpu:-?} us/frame;" \
       "dd: $dd_sync (fdatasync), $dd_cache (page cache)"
done
rm -f "/tmp/$name.pub"
