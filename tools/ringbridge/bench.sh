#!/usr/bin/env bash
# bench.sh — ringbridge against Cyclone's own ddsperf, same frame sizes, same configuration, same
# run, over loopback. Prints one table (docs/bridge.md shows the figures and how to read them).
# Usage: tools/ringbridge/bench.sh [BUILD_DIR] [SECONDS] [SIZES_MIB...]
#   defaults: build/default, 5 s per measurement, sizes 1 2 4 8 (MiB)
# Environment: BENCH_RELIABLE_ONLY=1 measures only the reliable columns (and their ratio);
#   BENCH_BASE=OTHER_BUILD_DIR adds that build's bridge, reliable, in the same row (before/after);
#   BENCH_LOG=FILE appends every run's summary lines (ddsperf's last report, export, import);
#   BENCH_CPU=1 prints instead the CPU time per delivered frame (user + system, /proc/PID/stat)
#   of ddsperf pub and sub and of the export and import (reliable, flooding; BENCH_BASE too).
# The bridge path is ringpub A -> ringbridge export (latest) -> DDS -> ringbridge import ->
# channel B; ddsperf is `ddsperf pub size S` -> `ddsperf sub`. Both use the configuration
# `ringbridge config --interface lo` prints. Reliable, the bridge runs twice: with ringpub at
# 1.25 x the frames/s ddsperf reached just before in the same row ("paced": like ddsperf's
# publisher, which makes a sample only when its writer takes one, the producer makes about as
# many frames as are carried), and with ringpub as fast as it can ("flooding": it fills frames
# that are overwritten unsent, on the same CPUs). Best effort as fast as possible and at 30
# frames/s (a camera).
set -euo pipefail
build=${1:-build/default}
secs=${2:-5}
shift $(( $# > 2 ? 2 : $# )) || true
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(1 2 4 8)
bin=$build/tools
rb=$bin/ringbridge/ringbridge
for t in "$rb" "$bin/ringpub"; do [[ -x $t ]] || { echo "bench: $t not built" >&2; exit 1; }; done
command -v ddsperf >/dev/null || { echo "bench: ddsperf not found (cyclonedds-tools)" >&2; exit 1; }
tmp=$(mktemp -d /tmp/ipcring-bridge-bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
domain=$(( 150 + $$ % 50 ))
export CYCLONEDDS_URI
CYCLONEDDS_URI=$("$rb" config --interface lo)
kv() { grep -o " $2=[0-9.]*" "$1" | tail -1 | cut -d= -f2; }

# ddsperf: mean of the per-second deltas after the first second.
ddsperf_run() {  # size_bytes extra_flag rate -> "frames_per_s lost"
  local size=$1 flag=$2 rate=$3
  ddsperf -i "$domain" $flag -D $((secs + 2)) sub >"$tmp/sub.txt" 2>&1 &
  local sub=$!
  sleep 0.5
  ddsperf -i "$domain" $flag -D "$secs" pub $rate size "$size" >"$tmp/pub.txt" 2>&1 || true
  wait $sub || true
  [[ -z ${BENCH_LOG:-} ]] || { echo "ddsperf $flag $rate size $size:"; grep ' size [0-9]* total' \
    "$tmp/sub.txt" | tail -1; } >>"$BENCH_LOG"
  awk '/ size [0-9]+ total/ { for (i = 1; i <= NF; i++) { if ($i == "delta") d = $(i+1);
         if ($i == "total") t = $(i+1); if ($i == "lost" && !l) l = $(i+1) }
         if (n++ > 0 && d > 0) { sum += d; k++ } lost = l; l = 0 }
       END { printf "%.1f %d\n", k ? sum / k : 0, lost }' "$tmp/sub.txt"
}

bridge_run() {  # size_bytes reliability rate [build] -> "frames_per_s sent received"
  local size=$1 rel=$2 rate=$3 name="bb$$"
  local bin=${4:-$build}/tools
  local rb=$bin/ringbridge/ringbridge
  "$rb" import "${name}t" --channel "${name}B" --frame-bytes "$size" --slots 4 --domain "$domain" \
    "--$rel" --quiet >"$tmp/imp.txt" 2>"$tmp/imp.err" &
  local imp=$!
  "$rb" export "${name}A" --topic "${name}t" --policy latest --domain "$domain" "--$rel" --quiet \
    >"$tmp/exp.txt" 2>"$tmp/exp.err" &
  local exp=$!
  sleep 1.5  # discovery
  "$bin/ringpub" "${name}A" --frame-bytes "$size" --slots 4 --rate "$rate" --duration "$secs" \
    >"$tmp/pub.txt" 2>&1
  kill -TERM $exp; wait $exp || true
  sleep 0.5
  kill -TERM $imp; wait $imp || true
  [[ -z ${BENCH_LOG:-} ]] || { echo "ringbridge $rel rate $rate size $size (${4:-$build}):"; \
    cat "$tmp/exp.txt" "$tmp/imp.txt"; } >>"$BENCH_LOG"
  local sent received
  sent=$(kv "$tmp/exp.txt" sent)
  received=$(kv "$tmp/imp.txt" received)
  awk -v r="$received" -v s="$secs" -v sent="$sent" 'BEGIN { printf "%.1f %d %d\n", r / s, sent, r }'
}

ticks=$(getconf CLK_TCK)
cpu_ms() { awk -v t="$ticks" '{ printf "%d", ($14 + $15) * 1000 / t }' "/proc/$1/stat"; }
per() { awk -v c="$1" -v n="$2" 'BEGIN { printf "%.2f", (n > 0 ? c / n : 0) }'; }
# Reliable, as fast as possible: CPU ms of each side, read just before it ends, per frame.
ddsperf_cpu() {  # size_bytes -> "pub_ms_per_frame sub_ms_per_frame"
  local size=$1
  ddsperf -i "$domain" -D $((secs + 2)) sub >"$tmp/sub.txt" 2>&1 &
  local sub=$!
  sleep 0.5
  ddsperf -i "$domain" -D $((secs + 1)) pub size "$size" >"$tmp/pub.txt" 2>&1 &
  local pub=$!
  sleep "$secs"
  local cp cs n
  cp=$(cpu_ms $pub)
  cs=$(cpu_ms $sub)
  wait $pub || true
  wait $sub || true
  # frames received by then (secs + 0.5 s after the subscriber started), between its reports
  n=$(awk -v T="$secs" '/ size [0-9]+ total/ { for (i = 1; i <= NF; i++) if ($i == "total") t = $(i+1);
        if ($2 + 0 <= T + 0.5) { t0 = $2; n0 = t } else if (!late) { late = 1; t1 = $2; n1 = t } }
      END { if (late && t1 > t0) n0 += (n1 - n0) * (T + 0.5 - t0) / (t1 - t0); printf "%d", n0 }' \
      "$tmp/sub.txt")
  echo "$(per "$cp" "$n") $(per "$cs" "$n")"
}
bridge_cpu() {  # size_bytes build -> "export_ms_per_frame import_ms_per_frame"
  local size=$1 bin=$2/tools name="bc$$"
  local rb=$bin/ringbridge/ringbridge
  "$rb" import "${name}t" --channel "${name}B" --frame-bytes "$size" --slots 4 --domain "$domain" \
    --reliable --quiet >"$tmp/imp.txt" 2>"$tmp/imp.err" &
  local imp=$!
  "$rb" export "${name}A" --topic "${name}t" --policy latest --domain "$domain" --reliable \
    --quiet >"$tmp/exp.txt" 2>"$tmp/exp.err" &
  local exp=$!
  sleep 1.5
  "$bin/ringpub" "${name}A" --frame-bytes "$size" --slots 4 --rate 0 --duration "$secs" \
    >"$tmp/pub.txt" 2>&1
  local ce ci
  ce=$(cpu_ms $exp)
  ci=$(cpu_ms $imp)
  kill -TERM $exp; wait $exp || true
  sleep 0.3
  kill -TERM $imp; wait $imp || true
  local n
  n=$(kv "$tmp/imp.txt" received)
  echo "$(per "$ce" "$n") $(per "$ci" "$n")"
}
if [[ -n ${BENCH_CPU:-} ]]; then
  base=${BENCH_BASE:-}
  printf '%-8s | %-15s | %-17s' "ms/frame" "ddsperf pub sub" "ringbridge exp imp"
  [[ -n $base ]] && printf ' | %-17s' "base build exp imp"
  printf ' | load\n'
  for mib in "${sizes[@]}"; do
    size=$((mib * 1048576))
    read -r dp ds < <(ddsperf_cpu "$size")
    read -r be bi < <(bridge_cpu "$size" "$build")
    printf '%-8s | %7s %7s | %8s %8s' "${mib}MiB" "$dp" "$ds" "$be" "$bi"
    if [[ -n $base ]]; then
      read -r ee ei < <(bridge_cpu "$size" "$base")
      printf ' | %8s %8s' "$ee" "$ei"
    fi
    printf ' | %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
  done
  echo "CPU ms (user + system) per delivered frame, reliable, as fast as possible"
  exit 0
fi
mb() { awk -v f="$1" -v s="$2" 'BEGIN { printf "%.0f", f * s / 1e6 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
paced() { awk -v d="$1" 'BEGIN { printf "%d", (d > 0 ? d * 1.25 + 1 : 0) }'; }
if [[ -n ${BENCH_RELIABLE_ONLY:-} || -n ${BENCH_BASE:-} ]]; then
  base=${BENCH_BASE:-}
  [[ -z $base || -x $base/tools/ringbridge/ringbridge ]] || { echo "bench: $base not built" >&2; exit 1; }
  printf '%-8s | %-14s | %-21s | %-21s' "reliable" "ddsperf" "ringbridge paced" "ringbridge flooding"
  [[ -n $base ]] && printf ' | %-21s | %-21s' "base build paced" "base build flooding"
  printf ' | load\n'
  printf '%-8s | %-14s | %-21s | %-21s' "" "frames/s  MB/s" "frames/s  MB/s ratio" \
    "frames/s  MB/s ratio"
  [[ -n $base ]] && printf ' | %-21s | %-21s' "frames/s  MB/s ratio" "frames/s  MB/s ratio"
  printf ' |\n'
  cell() { printf ' | %7.1f %6s %6s' "$1" "$(mb "$1" "$size")" "$(ratio "$1" "$dr")"; }
  for mib in "${sizes[@]}"; do
    size=$((mib * 1048576))
    read -r dr _ < <(ddsperf_run "$size" "" "")
    pace=$(paced "$dr")
    printf '%-8s | %7.1f %6s' "${mib}MiB" "$dr" "$(mb "$dr" "$size")"
    read -r bp _ _ < <(bridge_run "$size" reliable "$pace")
    cell "$bp"
    read -r bf _ _ < <(bridge_run "$size" reliable 0)
    cell "$bf"
    if [[ -n $base ]]; then
      read -r bbp _ _ < <(bridge_run "$size" reliable "$pace" "$base")
      cell "$bbp"
      read -r bbf _ _ < <(bridge_run "$size" reliable 0 "$base")
      cell "$bbf"
    fi
    printf ' | %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
  done
  echo "frames/s and MB/s (10^6 bytes of payload) delivered; ratio: ringbridge / ddsperf; paced:"
  echo "ringpub at 1.25 x ddsperf's frames/s of the row; flooding: ringpub as fast as it can"
  exit 0
fi
printf '%-7s | %-47s | %-71s | %-11s\n' "" "ddsperf pub -> sub" "ringbridge export -> import" \
  "ratio, rel."
printf '%-7s | %-14s | %-15s | %-14s | %-14s | %-14s | %-15s | %-14s | %-11s | load\n' "size" \
  "reliable" "best-effort" "b-e 30 Hz" "rel. paced" "rel. flooding" "best-effort" "b-e 30 Hz" \
  "paced flood"
printf '%-7s | %-14s | %-15s | %-14s | %-14s | %-14s | %-15s | %-14s | %-11s |\n' "" \
  "frames/s  MB/s" "frames/s  lost" "frames/s lost" "frames/s  MB/s" "frames/s  MB/s" \
  "frames/s  lost" "frames/s lost" ""
for mib in "${sizes[@]}"; do
  size=$((mib * 1048576))
  read -r dr _ < <(ddsperf_run "$size" "" "")
  read -r du dl < <(ddsperf_run "$size" "-u" "")
  read -r d30 dl30 < <(ddsperf_run "$size" "-u" "30Hz")
  read -r bp _ _ < <(bridge_run "$size" reliable "$(paced "$dr")")
  read -r br _ _ < <(bridge_run "$size" reliable 0)
  read -r bu bs brc < <(bridge_run "$size" best-effort 0)
  read -r b30 bs30 brc30 < <(bridge_run "$size" best-effort 30)
  printf '%-7s | %7.1f %6s | %7.1f %7s | %6.1f %7s | %7.1f %6s | %7.1f %6s | %7.1f %7s | %6.1f %7s | %5s %5s | %s\n' \
    "${mib}MiB" "$dr" "$(mb "$dr" "$size")" "$du" "$dl" "$d30" "$dl30" \
    "$bp" "$(mb "$bp" "$size")" "$br" "$(mb "$br" "$size")" "$bu" "$((bs - brc))/$bs" \
    "$b30" "$((bs30 - brc30))/$bs30" "$(ratio "$bp" "$dr")" "$(ratio "$br" "$dr")" \
    "$(cut -d' ' -f1-3 /proc/loadavg)"
done
echo "lost: ddsperf: samples its subscriber counted lost; ringbridge: (sent - received)/sent"
echo "MB/s: 10^6 bytes of payload per second delivered; ratio: ringbridge reliable / ddsperf"
echo "reliable; paced: ringpub at 1.25 x ddsperf's reliable frames/s of the row; flooding:"
echo "ringpub as fast as it can"
