#!/usr/bin/env bash
# bench.sh — ringbridge against Cyclone's own ddsperf, same frame sizes, same configuration, same
# run, over loopback. Prints one table (docs/bridge.md shows the figures and how to read them).
# Usage: tools/ringbridge/bench.sh [BUILD_DIR] [SECONDS] [SIZES_MIB...]
#   defaults: build/default, 5 s per measurement, sizes 1 2 4 8 (MiB)
# Environment: BENCH_RELIABLE_ONLY=1 measures only the reliable columns (and their ratio);
#   BENCH_BASE=OTHER_BUILD_DIR adds that build's bridge, reliable, in the same row (before/after).
# The bridge path is ringpub A (as fast as it can) -> ringbridge export (latest) -> DDS ->
# ringbridge import -> channel B; best effort also at 30 frames/s (a camera); ddsperf is `ddsperf pub size S` -> `ddsperf sub`. Both use
# the configuration `ringbridge config --interface lo` prints.
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
  local sent received
  sent=$(kv "$tmp/exp.txt" sent)
  received=$(kv "$tmp/imp.txt" received)
  awk -v r="$received" -v s="$secs" -v sent="$sent" 'BEGIN { printf "%.1f %d %d\n", r / s, sent, r }'
}

mb() { awk -v f="$1" -v s="$2" 'BEGIN { printf "%.0f", f * s / 1e6 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
if [[ -n ${BENCH_RELIABLE_ONLY:-} || -n ${BENCH_BASE:-} ]]; then
  base=${BENCH_BASE:-}
  [[ -z $base || -x $base/tools/ringbridge/ringbridge ]] || { echo "bench: $base not built" >&2; exit 1; }
  printf '%-7s | %-14s | %-14s | %-6s' "reliable" "ddsperf" "ringbridge" "ratio"
  [[ -n $base ]] && printf ' | %-14s | %-6s' "base build" "ratio"
  printf ' | load\n'
  for mib in "${sizes[@]}"; do
    size=$((mib * 1048576))
    read -r dr _ < <(ddsperf_run "$size" "" "")
    read -r br _ _ < <(bridge_run "$size" reliable 0)
    printf '%-7s | %7.1f %6s | %7.1f %6s | %6s' "${mib}MiB" "$dr" "$(mb "$dr" "$size")" "$br" \
      "$(mb "$br" "$size")" "$(ratio "$br" "$dr")"
    if [[ -n $base ]]; then
      read -r bb _ _ < <(bridge_run "$size" reliable 0 "$base")
      printf ' | %7.1f %6s | %6s' "$bb" "$(mb "$bb" "$size")" "$(ratio "$bb" "$dr")"
    fi
    printf ' | %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
  done
  echo "frames/s and MB/s (10^6 bytes of payload) delivered; ratio: ringbridge / ddsperf"
  exit 0
fi
printf '%-7s | %-47s | %-47s\n' "" "ddsperf pub -> sub" "ringbridge export -> import"
printf '%-7s | %-14s | %-15s | %-14s | %-14s | %-15s | %-14s\n' "size" "reliable" \
  "best-effort" "b-e 30 Hz" "reliable" "best-effort" "b-e 30 Hz"
printf '%-7s | %-14s | %-15s | %-14s | %-14s | %-15s | %-14s\n' "" "frames/s  MB/s" \
  "frames/s  lost" "frames/s lost" "frames/s  MB/s" "frames/s  lost" "frames/s lost"
for mib in "${sizes[@]}"; do
  size=$((mib * 1048576))
  read -r dr _ < <(ddsperf_run "$size" "" "")
  read -r du dl < <(ddsperf_run "$size" "-u" "")
  read -r d30 dl30 < <(ddsperf_run "$size" "-u" "30Hz")
  read -r br _ _ < <(bridge_run "$size" reliable 0)
  read -r bu bs brc < <(bridge_run "$size" best-effort 0)
  read -r b30 bs30 brc30 < <(bridge_run "$size" best-effort 30)
  printf '%-7s | %7.1f %6s | %7.1f %7s | %6.1f %7s | %7.1f %6s | %7.1f %7s | %6.1f %7s\n' \
    "${mib}MiB" "$dr" "$(mb "$dr" "$size")" "$du" "$dl" "$d30" "$dl30" \
    "$br" "$(mb "$br" "$size")" "$bu" "$((bs - brc))/$bs" "$b30" "$((bs30 - brc30))/$bs30"
done
echo "lost: ddsperf: samples its subscriber counted lost; ringbridge: (sent - received)/sent"
echo "MB/s: 10^6 bytes of payload per second delivered"
