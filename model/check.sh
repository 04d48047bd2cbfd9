#!/usr/bin/env bash
# check.sh -- model-checks the ipcring protocol (model/ipcring.pml) with Spin.
#
# Every configuration of the protocol must verify without an error (full state space, no
# assertion violated, no invalid end state), and every deliberately broken variant must be
# refuted with the assertion it is expected to violate. A broken variant that verifies means
# the model has gone blind; a violation in the protocol is a protocol bug. Either fails the run.
#
# Usage: model/check.sh [--long] [--keep] [--jobs N] [--list] [NAME...]
#   --long   also the long runs (minutes each; see docs/model.md)
#   --keep   keep the work directory (pan sources, trails) and print its path
#   --jobs N verifications run in parallel (default 2)
#   --list   print the configurations and exit
#   NAME...  run only these configurations
# Exit status: 0 every result as expected; 1 an unexpected result (or a run that did not
# complete); 2 usage; 77 spin or a C compiler is missing (CTest's SKIP_RETURN_CODE).
# Works from any directory; writes only to a temporary directory.
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
model="$here/ipcring.pml"

# name | expectation (pass; "safety": any check but the sizing rule's must fail; or the name of the
# check that must fail) | spin -D options | pan run options | extra pan compile options | model file
# (default ipcring.pml; lease.pml is the lease protocol with thread ids colliding across PID
# namespaces, see docs/model.md)
# The default sizes are in ipcring.pml: 4 slots, 2 reader entries, 2 reader processes (one
# latest, one sequential), max_held 1, a 4-entry log, 5 sequences, generation modulo 2.
cases=(
  "slots|pass||"
  "slots-sequential|pass|-DSEQMASK=3|"
  "held2|pass|-DNR=1 -DNRP=1 -DH=2 -DSEQMASK=1 -DMAXSEQ=6|"
  "held2-latest|pass|-DNR=1 -DNRP=1 -DH=2 -DSEQMASK=0 -DMAXSEQ=6|"
  "reader-death|pass|-DNS=2 -DMAXSEQ=3 -DRDIE=1 -DRDIEMASK=1 -DLIVES=2|"
  "readers-die|pass|-DNS=3 -DMAXSEQ=3 -DRDIE=1 -DLIVES=2|"
  "shared-entry|pass|-DNS=3 -DMAXSEQ=2 -DNR=1 -DNRP=2 -DRDIE=1 -DLIVES=2 -DTOOL=1 -DTOOLDIE=1|"
  "periodic-reap|pass|-DNS=3 -DMAXSEQ=2 -DRDIE=1 -DRDIEMASK=1 -DLIVES=2 -DPERIODIC_REAP=1|"
  "reapers|pass|-DNS=3 -DMAXSEQ=3 -DNR=1 -DNRP=1 -DRDIE=1 -DLIVES=2 -DTOOL=1 -DTOOLDIE=1 -DINSPECT=1 -DINSPDIE=1|"
  "takeover|pass|-DNS=3 -DMAXSEQ=3 -DNRP=1 -DPDIE=1 -DTAKEOVER=1 -DRDIE=1 -DLIVES=2|"
  "takeover-probed|pass|-DNS=3 -DMAXSEQ=2 -DNRP=1 -DPDIE=1 -DTAKEOVER=1 -DINSPECT=1 -DINSPDIE=1|"
  "loan-lagging-reader|pass|-DNS=4 -DLOG=16 -DMAXSEQ=18 -DREADERS_WAIT=17 -DDROPS=0 -DLOAN_POLICY=5|-w27"
  "loan-as-briefed|loan_may_fail_here|-DLOAN_POLICY=1 -DSEQMASK=3|"
  "loan-early-exit|loan_may_fail_here|-DNS=4 -DLOG=16 -DMAXSEQ=18 -DREADERS_WAIT=17 -DDROPS=0 -DLOAN_POLICY=4|"
  "epoch-recheck-removed|claimed_frame_is_of_the_current_epoch|-DNS=3 -DMAXSEQ=3 -DNRP=1 -DPDIE=1 -DTAKEOVER=1 -DEPOCH_RECHECK=0|"
  "broken-blind-or|safety|-DBROKEN_BLIND_OR|"
  "broken-no-recheck|safety|-DBROKEN_NO_RECHECK|"
  "observer|pass|-DOBSERVER=1 -DNS=3 -DNR=1 -DNRP=1 -DSEQMASK=0 -DMAXSEQ=4|"
  "broken-observer-no-recheck|observed_copy_is_one_publication|-DOBSERVER=1 -DBROKEN_OBSERVER_NO_RECHECK -DNS=3 -DNR=1 -DNRP=1 -DSEQMASK=0 -DMAXSEQ=4|"
  "broken-observer-gen-only|observed_copy_is_one_publication|-DOBSERVER=1 -DBROKEN_OBSERVER_GEN_ONLY -DNS=3 -DNR=1 -DNRP=1 -DSEQMASK=0 -DMAXSEQ=4|"
  "broken-detach-order|live_reader_keeps_lease|-DBROKEN_DETACH_ORDER -DNS=3 -DMAXSEQ=2 -DNR=1 -DNRP=2|"
  "lease-collide|pass|-DCOLLIDE=1 -DLIVES=1|-w18||lease.pml"
  "lease-collide-2kills|pass|-DCOLLIDE=1 -DLIVES=2|-w18||lease.pml"
  "lease-collide-3probes|pass|-DCOLLIDE=1 -DLIVES=2 -DPROBES=3|-w18||lease.pml"
  "broken-trylock-probe|live_owner_never_declared_dead|-DBROKEN_TRYLOCK_PROBE=1 -DDIEMASK=4|-w18||lease.pml"
  "broken-trylock-all|live_owner_never_declared_dead|-DBROKEN_TRYLOCK_PROBE=1|-w18||lease.pml"
  "broken-no-repair-lock|live_owner_never_declared_dead|-DNO_REPAIR_LOCK=1|-w18||lease.pml"
  "name-lock|pass||||name.pml"
  "name-removal-window|one_name_holder|-DREMOVAL|||name.pml"
  "broken-name-no-lock|one_name_holder|-DBROKEN_NO_LOCK|||name.pml"
  "cuda-close|pass||||close.pml"
  "broken-close-lease-first|never_freed_while_mapped|-DBROKEN_LEASE_FIRST|||close.pml"
  "broken-close-clear-first|never_freed_while_mapped|-DBROKEN_CLEAR_FIRST|||close.pml"
  "broken-close-no-wait|never_freed_while_mapped|-DBROKEN_NO_WAIT|||close.pml"
  "vmm-fill|pass||||fill.pml"
  "broken-fill-write-first|complete_when_told|-DBROKEN_WRITE_FIRST|||fill.pml"
  "broken-fill-no-watchdog|no_stream_waits_forever|-DBROKEN_NO_WATCHDOG|||fill.pml"
  "broken-fill-once|no_stream_waits_forever|-DBROKEN_ONCE|||fill.pml"
)
long_cases=(
  "reader-death-3slots|pass|-DNS=3 -DMAXSEQ=4 -DRDIE=1 -DRDIEMASK=1 -DLIVES=2|-w27"
  "shared-entry-probed|pass|-DNS=3 -DMAXSEQ=3 -DNR=1 -DNRP=2 -DRDIE=1 -DLIVES=2 -DINSPECT=1 -DINSPDIE=1|-w27"
  "takeover-two-readers|pass|-DNS=3 -DMAXSEQ=2 -DNRP=2 -DPDIE=1 -DTAKEOVER=1|-w27"
  "loan-three-scans-three-readers|loan_may_fail_here|-DNS=5 -DNR=3 -DNRP=3 -DSEQMASK=7 -DMAXSEQ=6 -DDROPS=0 -DLOAN_POLICY=2|-w28|-DMEMLIM=16384"
  "loan-fixed-three-readers|pass|-DNS=5 -DNR=3 -DNRP=3 -DSEQMASK=7 -DMAXSEQ=6 -DDROPS=0 -DLOAN_POLICY=5|-w34 -k3|-DBITSTATE"
  "trylock-probe-distinct-tids|pass|-DCOLLIDE=0 -DBROKEN_TRYLOCK_PROBE=1|-w27||lease.pml"
)

long=0 keep=0 jobs=2 list=0
only=()
while [ $# -gt 0 ]; do
  case "$1" in
    --long) long=1 ;;
    --keep) keep=1 ;;
    --jobs) shift; jobs=${1:-}; [[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "check.sh: --jobs needs a positive number" >&2; exit 2; } ;;
    --list) list=1 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "check.sh: unknown option $1" >&2; exit 2 ;;
    *) only+=("$1") ;;
  esac
  shift
done

selected=("${cases[@]}")
if [ $long -eq 1 ] || [ ${#only[@]} -gt 0 ]; then selected+=("${long_cases[@]}"); fi
if [ ${#only[@]} -gt 0 ]; then
  picked=()
  for name in "${only[@]}"; do
    found=0
    for c in "${selected[@]}"; do
      if [ "${c%%|*}" = "$name" ]; then picked+=("$c"); found=1; fi
    done
    [ $found -eq 1 ] || { echo "check.sh: no configuration named '$name' (see --list)" >&2; exit 2; }
  done
  selected=("${picked[@]}")
fi
if [ $list -eq 1 ]; then
  for c in "${cases[@]}" "${long_cases[@]}"; do
    IFS='|' read -r name expect defs panopts cflags mfile <<<"$c"
    printf '%-28s expect %-30s %s %s %s %s\n' "$name" "$expect" "${defs:-(defaults)}" "$panopts" "$cflags" "${mfile:-ipcring.pml}"
  done
  exit 0
fi

if ! command -v spin >/dev/null 2>&1; then
  echo "check.sh: SKIP: spin not found (Debian/Ubuntu: apt-get install spin)"
  exit 77
fi
cc=${CC:-}
if [ -z "$cc" ]; then
  for c in gcc cc clang; do
    if command -v "$c" >/dev/null 2>&1; then cc=$c; break; fi
  done
fi
if [ -z "$cc" ]; then
  echo "check.sh: SKIP: no C compiler found for Spin's verifier"
  exit 77
fi
[ -r "$model" ] && [ -r "$here/lease.pml" ] || { echo "check.sh: cannot read $model or $here/lease.pml" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/ipcring-model.XXXXXX") || exit 1
if [ $keep -eq 0 ]; then
  trap 'rm -rf "$work"' EXIT
fi
trap 'exit 1' INT TERM

echo "check.sh: $(spin -V 2>&1 | head -n 1); $("$cc" --version 2>&1 | head -n 1)"
echo "check.sh: models $model, $here/lease.pml"

# Verifier build: safety properties only (assertions, invalid end states), state compression,
# a memory cap per run (two runs in parallel stay well inside 24 GiB).
pan_cflags="-O2 -DSAFETY -DCOLLAPSE -DMEMLIM=${IPCRING_MODEL_MEMLIM_MB:-6144} -DVECTORSZ=2048 -w"

# run_case NAME EXPECT DEFS PANOPTS CFLAGS: verifies one configuration in $work/NAME and writes
# $work/NAME/result (the summary line), $work/NAME/status (ok/bad) and $work/NAME/report.
run_case() {
  local name=$1 expect=$2 defs=$3 panopts=$4 cflags=$5 mfile=${6:-ipcring.pml}
  local dir="$work/$name"
  mkdir -p "$dir"
  cp "$here/$mfile" "$dir/$mfile"
  (
    cd "$dir" || exit 1
    local start end secs
    start=$(date +%s.%N)
    # shellcheck disable=SC2086 # the option strings are word lists on purpose
    if ! spin $defs -a "$mfile" >spin.log 2>&1; then
      echo "FAIL  $name: spin -a failed" >result; cat spin.log >report; echo bad >status; exit 0
    fi
    local base=$pan_cflags
    case "$cflags" in *-DBITSTATE*) base=${base/-DCOLLAPSE/} ;; esac   # they cannot be combined
    # shellcheck disable=SC2086
    if ! "$cc" $base $cflags -o pan pan.c >cc.log 2>&1; then
      echo "FAIL  $name: compiling pan failed" >result; cat cc.log >report; echo bad >status; exit 0
    fi
    # shellcheck disable=SC2086
    timeout "${IPCRING_MODEL_TIMEOUT_S:-900}" ./pan -m1000000 -w26 $panopts >pan.out 2>&1
    end=$(date +%s.%N)
    secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
    local errors states depth violated incomplete=""
    errors=$(sed -n 's/.*errors: \([0-9][0-9]*\).*/\1/p' pan.out | tail -n 1)
    states=$(awk '/states, stored/ { print $1 }' pan.out | tail -n 1)
    depth=$(sed -n 's/.*depth reached \([0-9][0-9]*\).*/\1/p' pan.out | tail -n 1)
    violated=$(sed -n 's/^pan:[0-9]*: *\(.*\) (at depth.*/\1/p' pan.out | head -n 1)
    grep -q 'max search depth too small' pan.out && incomplete="search depth too small"
    grep -qi 'out of memory\|MEMLIM' pan.out && incomplete="out of memory"
    grep -q 'Search not completed' pan.out && [ "$expect" = pass ] && incomplete=${incomplete:-"search not completed"}
    [ -z "$errors" ] && incomplete=${incomplete:-"pan did not finish (timeout or crash)"}
    local figures="states=${states:-?} depth=${depth:-?} ${secs}s"
    if [ "$expect" = pass ]; then
      if [ -n "$errors" ] && [ "$errors" != 0 ]; then
        echo "FAIL  $name: PROTOCOL VIOLATION: ${violated:-error} ($figures)" >result; echo bad >status
      elif [ -n "$incomplete" ]; then
        echo "FAIL  $name: incomplete: $incomplete ($figures)" >result; echo bad >status
      elif [ "$errors" = 0 ] && grep -q 'Bit statespace search' pan.out; then
        echo "PASS  $name: no errors in a supertrace (bitstate) search, NOT exhaustive ($figures)" >result
        echo ok >status
      else
        echo "PASS  $name: verified, no errors ($figures)" >result; echo ok >status
      fi
    else
      # A refutation: the first error must be the expected assertion ("safety": any check
      # except the sizing rule's).
      local good=0
      if [ -n "$errors" ] && [ "$errors" != 0 ]; then
        case "$expect" in
          safety) [[ "$violated" == "assertion violated "* && "$violated" != *loan_may_fail_here* ]] && good=1 ;;
          *) [ "$violated" = "assertion violated $expect" ] && good=1 ;;
        esac
      fi
      if [ $good -eq 1 ]; then
        echo "PASS  $name: refuted as expected: $violated ($figures)" >result; echo ok >status
      elif [ -n "$errors" ] && [ "$errors" != 0 ]; then
        echo "FAIL  $name: wrong refutation: ${violated:-error} (expected $expect) ($figures)" >result
        echo bad >status
      else
        echo "FAIL  $name: NOT refuted (expected $expect): ${incomplete:-verified without error} ($figures)" >result
        echo bad >status
      fi
    fi
    # The counterexample, narrated (spin replays the trail; the model's printf lines).
    if [ -f "$mfile.trail" ]; then
      # shellcheck disable=SC2086
      spin $defs -t "$mfile" 2>&1 | tr -s ' \t' ' ' | sed 's/^ //' |
        grep -E '^(P[0-9]|R[0-9]:|O:|process [0-9]|clears|reaper|spin: text of failed)' >trail.txt
      { echo "    counterexample (last steps; spin -t replays it in full):"
        tail -n 24 trail.txt | sed 's/^/      /'; } >report
    elif [ "$(cat status)" = bad ]; then
      grep -v '^Depth=' pan.out | head -n 30 | sed 's/^/    /' >report
    fi
  )
}

echo "check.sh: ${#selected[@]} configurations, $jobs at a time"
overall_start=$(date +%s)
running=0
for c in "${selected[@]}"; do
  IFS='|' read -r name expect defs panopts cflags mfile <<<"$c"
  run_case "$name" "$expect" "$defs" "$panopts" "$cflags" "$mfile" &
  running=$((running + 1))
  if [ $running -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
done
wait

bad=0
for c in "${selected[@]}"; do
  name=${c%%|*}
  if [ -f "$work/$name/result" ]; then
    cat "$work/$name/result"
  else
    echo "FAIL  $name: no result"
  fi
  if [ "$(cat "$work/$name/status" 2>/dev/null)" != ok ]; then
    bad=$((bad + 1))
  fi
  if [ -s "$work/$name/report" ]; then
    cat "$work/$name/report"
  fi
done
elapsed=$(( $(date +%s) - overall_start ))
[ $keep -eq 1 ] && echo "check.sh: work directory kept: $work"
if [ $bad -eq 0 ]; then
  echo "check.sh: OK: all ${#selected[@]} results as expected (${elapsed}s)"
  exit 0
fi
echo "check.sh: FAILED: $bad of ${#selected[@]} results unexpected (${elapsed}s)"
exit 1
