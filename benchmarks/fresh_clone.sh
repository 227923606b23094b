#!/usr/bin/env bash
# README's two commands as a new user runs them: each word for word in its own fresh clone of this repository's HEAD,
# a fresh virtual environment and an empty model cache, pip's download cache as it is. One line per command is
# appended to benchmarks/fresh_clone.txt: date, commit, which command, CPU model and its bfloat16 flags, the
# instruction-set caps set, wall time (install included), the largest process's peak RSS, exit status and the last
# summary line (pytest's counts, or the demo's last step). README's time claims cite the newest lines
# (tests/test_readme.py holds them to it). Run it with nothing else on the machine.
#   bash benchmarks/fresh_clone.sh tests          # README command 2: install, then the whole test suite
#   bash benchmarks/fresh_clone.sh demo           # README command 1: install, then the demo
#   bash benchmarks/fresh_clone.sh tests --avx2   # the same with the instruction set capped to AVX2 (the common
#                                                 # laptop): ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA, MKL's
#   bash benchmarks/fresh_clone.sh inner          # the edit-test loop: README command 2's install untimed, then
#                                                 # `python -m pytest -q -m "not slow"` timed
set -euo pipefail
which=${1:?"tests, demo or inner"}
caps=none
if [[ ${2:-} == --avx2 ]]; then
  export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
  caps=avx2
fi
case $which in
  demo) number=1 ;;
  tests | inner) number=2 ;;
  *) echo "tests, demo or inner, not $which" >&2; exit 2 ;;
esac
. "$(dirname "$0")/fresh_clone_env.sh"
out="$root/benchmarks/fresh_clone.txt"
command=$(awk -v n="$number" '/^```bash$/{k++; if (k == n) {getline; print; exit}}' README.md)
[[ -n $command ]] || { echo "README has no command $number" >&2; exit 1; }
cpu=$(lscpu | awk -F: '/^Model name/{gsub(/^ +/, "", $2); print $2}')
flags=$(grep -o -w -E 'avx512_bf16|amx_bf16|avx512f|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ' | xargs)
echo "README command $number: $command"
if [[ $which == inner ]]; then
  bash -c "${command%% && python -m pytest*}" > "$work/install.log" 2>&1
  command='python -m pytest -q -m "not slow"'
  echo "installed; timed: $command"
fi
start=$(date +%s.%N)
status=0
/usr/bin/time -f "%M" -o "$work/rss" bash -c "$command" > "$work/run.log" 2>&1 || status=$?
seconds=$(printf "%.0f" "$(echo "$(date +%s.%N) - $start" | bc)")
# /usr/bin/time reports the largest of the command's processes (it waits for them all), in KiB.
rss_gb=$(awk 'END {printf "%.2f", $1 / 1048576}' "$work/rss")
if [[ $which != demo ]]; then
  summary=$(grep -E "^(=+ )?[0-9]+ (passed|failed)" "$work/run.log" | tail -1 | tr -d '=' | xargs || true)
else
  summary=$(grep -E "^ *step [0-9]+/" "$work/run.log" | tail -1 | xargs || true)
fi
line=$(printf "%s  commit %s  %-5s  %s, %s cores [%s]  caps %s  wall %d s (%d:%02d)  peak RSS %s GB  exit %d  %s" \
  "$(date -u +%Y-%m-%dT%H:%MZ)" "$(git rev-parse --short HEAD)" "$which" "$cpu" "$(nproc)" "$flags" "$caps" \
  "$seconds" $((seconds / 60)) $((seconds % 60)) "$rss_gb" "$status" \
  "${summary:-no summary line}")
echo "$line" | tee -a "$out"
[[ $status == 0 ]] || { tail -40 "$work/run.log" >&2; exit "$status"; }
